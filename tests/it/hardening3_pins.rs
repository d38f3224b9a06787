//! Issue 32, items 15, 17 and 12, against the real binary: a damaged pin store quarantines
//! every pinned tool instead of re-pinning it as approved; control characters in tool
//! descriptions are escaped in human output and flagged by screening; a custom tool's
//! first result line answers the call at once and the program is then ended.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{alive, eventually, toolhost, write_atomic, Daemon, FIXTURE};
use serde_json::{json, Value};

/// Writes a shell tool `dir/name` whose `run.sh` is `script`, `tool.json` last.
fn write_tool(root: &Path, name: &str, description: &str, script: &str) -> PathBuf {
    let manifest = json!({"name": name, "description": description, "command": ["./run.sh"], "approval": "read_only"});
    common::write_tool(root, name, manifest, script)
}

/// A daemon whose custom tools live in `<dir>/tools` (trust `pin`, so a changed definition
/// needs approval) and which hosts the fixture MCP server `fx`; `prepare` runs first.
async fn start(prepare: impl FnOnce(&Path)) -> Daemon {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::create_dir_all(dir.join("xdg")).unwrap();
    prepare(&dir);
    let cfg = json!({
        "custom_tools": {"paths": [dir.join("tools")], "trust": "pin"},
        "mcp_servers": {"fx": {"command": FIXTURE, "include_tools": ["echo"]}},
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    spawn(&mut d).await;
    d
}

async fn spawn(d: &mut Daemon) {
    let xdg = d.dir.path().join("xdg");
    d.spawn(&[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]).await;
    // The fixture server's tool is judged once the server is ready.
    eventually(20, "the fixture server to be ready", || async {
        d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0]["state"]
            == "ready"
    })
    .await;
}

/// Runs the CLI against the daemon; returns (exit code, stdout, stderr).
fn cli(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let out = toolhost(d.dir.path())
        .into_std()
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a damaged pin file is, for the before/after comparison.
#[derive(Debug, PartialEq)]
enum OnDisk {
    Dir,
    File(Vec<u8>),
}

fn on_disk(path: &Path) -> OnDisk {
    if path.is_dir() {
        OnDisk::Dir
    } else {
        OnDisk::File(std::fs::read(path).unwrap())
    }
}

fn damage(path: &Path, kind: &str, good: &[u8]) {
    if path.is_dir() {
        std::fs::remove_dir_all(path).unwrap();
    } else if path.exists() {
        std::fs::remove_file(path).unwrap();
    }
    match kind {
        "truncated" => std::fs::write(path, &good[..good.len() / 2]).unwrap(),
        "garbage" => std::fs::write(path, b"\x00\xffthis is not json\x1b").unwrap(),
        "empty" => std::fs::write(path, b"").unwrap(),
        "directory" => std::fs::create_dir(path).unwrap(),
        other => panic!("unknown damage {other}"),
    }
}

/// Asserts that the store is damaged: health names the file, both pinned tools (custom
/// and MCP) are quarantined and not callable, and approving is refused.
async fn assert_damaged(d: &Daemon, pins: &Path, kind: &str) {
    let h = d.health().await;
    assert_eq!(h["status"], "degraded", "{kind}: {h}");
    let e = h["pins_error"].as_str().unwrap_or_default();
    assert!(e.contains(pins.to_str().unwrap()), "{kind}: {h}");
    assert_eq!(h["quarantined"], json!(["greet", "mcp_fx_echo"]), "{kind}");
    for (tool, args) in [("greet", json!({})), ("mcp_fx_echo", json!({"text": "x"}))] {
        let r = d.invoke(tool, args).await;
        assert_eq!(r["error_kind"], "quarantined", "{kind} {tool}: {r}");
        assert_eq!(
            r["quarantine"]["reason"], "pins_damaged",
            "{kind} {tool}: {r}"
        );
    }
    let r = d.call("tools.approve", json!({"name": "greet"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("damaged"), "{kind}: {r}");
}

/// Item 15: a damaged pins.json (truncated, garbage, empty, a directory) never re-pins a
/// changed definition as approved; it is kept as it is, repair is taken up on a reload (and
/// the changed tool is then judged against the repaired pins), and `tools pins reset`
/// moves it aside on the operator's word.
#[tokio::test]
async fn a_damaged_pin_store_quarantines_pinned_tools_until_repaired_or_reset() {
    let mut d = start(|dir| {
        write_tool(&dir.join("tools"), "greet", "Say hello.", "echo hello");
    })
    .await;
    assert_eq!(d.invoke("greet", json!({})).await["ok"], true);
    let pins = d.data_dir().join("pins.json");
    let good = std::fs::read(&pins).unwrap();
    assert!(String::from_utf8_lossy(&good).contains("Say hello."));
    assert_eq!(d.health().await["status"], "ok");
    d.stop().await;
    // Changed while the daemon was down: only a sound pin store can catch it.
    write_tool(
        &d.dir.path().join("tools"),
        "greet",
        "Say hello loudly.",
        "echo HELLO",
    );

    for kind in ["truncated", "garbage", "empty", "directory"] {
        damage(&pins, kind, &good);
        let before = on_disk(&pins);
        spawn(&mut d).await;
        assert_damaged(&d, &pins, kind).await;
        // A reload does not make the damage go away, nor write over it.
        let r = d.call("config.reload", json!({})).await;
        assert!(r.get("result").is_some(), "{r}");
        assert_damaged(&d, &pins, kind).await;
        assert_eq!(
            on_disk(&pins),
            before,
            "{kind}: the damaged file was replaced"
        );
        let (code, out, _) = cli(&d, &["health"]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("pins.json is damaged"), "{out}");
        if kind != "directory" {
            d.stop().await;
        }
    }

    // Repaired by hand (the directory goes, the good file comes back): a reload takes it up,
    // and the changed definition is judged against it, not approved.
    std::fs::remove_dir(&pins).unwrap();
    std::fs::write(&pins, &good).unwrap();
    d.call("config.reload", json!({})).await;
    let h = d.health().await;
    assert_eq!(h.get("pins_error"), None, "{h}");
    assert_eq!(h["quarantined"], json!(["greet"]), "{h}");
    let r = d.invoke("greet", json!({})).await;
    assert_eq!(r["quarantine"]["reason"], "changed", "{r}");
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "x"})).await["ok"],
        true
    );
    // A sound store is not reset.
    let r = d.call("tools.pins_reset", json!({})).await;
    assert_eq!(
        r["error"]["message"],
        "the pin store is not damaged; nothing to reset"
    );

    // Damaged again, then reset on the operator's word: the damaged file is kept aside and
    // every tool is pinned afresh (the operator chose to trust what is there now).
    d.stop().await;
    damage(&pins, "garbage", &good);
    spawn(&mut d).await;
    assert_damaged(&d, &pins, "garbage").await;
    let (code, out, err) = cli(&d, &["tools", "pins", "reset"]);
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = {
        let (code, out, err) = cli(&d, &["--json", "health"]);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str(&out).unwrap()
    };
    assert_eq!(r["status"], "ok", "{r}");
    let aside: Vec<PathBuf> = std::fs::read_dir(d.data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("pins.json.damaged-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(out.contains(aside[0].to_str().unwrap()), "{out}");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        b"\x00\xffthis is not json\x1b"
    );
    assert_eq!(d.invoke("greet", json!({})).await["ok"], true);
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "x"})).await["ok"],
        true
    );
    let fresh: Value = serde_json::from_slice(&std::fs::read(&pins).unwrap()).unwrap();
    assert_eq!(
        fresh["greet"]["definition"]["description"],
        "Say hello loudly."
    );
}

/// Whether `text` holds a control byte a terminal would act on (anything but LF and tab).
fn has_raw_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// Item 17: ESC and BEL in a description get the tool flagged by screening, and once the
/// user approves it, `toolhost tools` (and `tools diff`, and a call's output) print them as
/// visible escapes, never raw.
#[tokio::test]
async fn control_characters_are_flagged_and_never_printed_raw() {
    let desc = "Say hi.\u{1b}]0;pwned\u{7}\u{1b}[2K Really.";
    let d = start(|dir| {
        write_tool(
            &dir.join("tools"),
            "retitle",
            desc,
            r"printf 'out\033]0;x\007put\n'",
        );
    })
    .await;
    let r = d.invoke("retitle", json!({})).await;
    assert_eq!(r["error_kind"], "quarantined", "{r}");
    assert_eq!(r["quarantine"]["reason"], "flagged", "{r}");
    assert_eq!(
        r["quarantine"]["flags"],
        json!(["control character U+001B (can retitle, rewrite or hide what a terminal shows)"])
    );
    let (code, out, err) = cli(&d, &["tools", "diff", "retitle"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("control character U+001B"), "{out}");
    assert!(!has_raw_controls(&out), "{out:?}");

    let (code, _, err) = cli(&d, &["tools", "approve", "retitle"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&d, &["tools"]);
    assert_eq!(code, 0, "{err}");
    assert!(!has_raw_controls(&out), "{out:?}");
    assert!(
        out.contains(r"Say hi.\x1b]0;pwned\x07\x1b[2K Really."),
        "{out}"
    );
    // --json keeps the description exact (JSON escapes it).
    let (_, out, _) = cli(&d, &["--json", "tools"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    let tool = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "retitle")
        .unwrap()
        .clone();
    assert_eq!(tool["function"]["description"], desc);
    let (code, out, err) = cli(&d, &["invoke", "retitle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "out\\x1b]0;x\\x07put\n");
}

/// The processes whose process group is `pgid`, from /proc.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let after = s.rsplit_once(") ")?.1.to_owned();
                    let fields: Vec<&str> = after.split_whitespace().collect();
                    // state, ppid, pgrp: a zombie awaiting its reaper is gone already.
                    Some(fields.first()? != &"Z" && fields.get(2)?.parse::<i32>().ok()? == pgid)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Item 12: a program that prints its result and keeps running (here ignoring SIGTERM,
/// with a background child) answers the call at once with that result; the program and
/// its group are then ended, TERM first and KILL after the grace.
#[tokio::test]
async fn a_result_line_answers_at_once_and_the_program_is_ended() {
    let d = start(|dir| {
        let t = write_tool(
            &dir.join("tools"),
            "lingers",
            "Answers, then lingers.",
            "trap '' TERM\nsleep 60 &\necho \"$$ $!\" > \"$TOOLHOST_WORKSPACE/lingers.pids\"\necho '{\"result\": {\"output\": \"done\", \"n\": 7}}'\nsleep 60",
        );
        write_atomic(
            &t.join("tool.json"),
            &json!({"name": "lingers", "description": "Answers, then lingers.",
                    "command": ["./run.sh"], "approval": "read_only", "timeout_ms": 60000}),
        );
    })
    .await;
    let started = std::time::Instant::now();
    let r = d.invoke("lingers", json!({})).await;
    let took = started.elapsed();
    assert_eq!(r, json!({"ok": true, "output": "done", "n": 7}));
    assert!(took < Duration::from_secs(20), "answered after {took:?}");
    let pids: Vec<i32> = std::fs::read_to_string(d.workspace().join("lingers.pids"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let leader = pids[0];
    eventually(15, "the program's process group to be gone", || {
        let pids = pids.clone();
        async move { pids.iter().all(|p| !alive(*p)) && group_members(leader).is_empty() }
    })
    .await;
}
