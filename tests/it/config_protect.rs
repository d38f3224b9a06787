//! Config that protects the user (issue 13): security-key typos refuse the config, a named
//! config file that is missing is an error, a hanging MCP server does not hold a reload,
//! and `env`/`env_passthrough` reach `bash` and stdio servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const WHY: &str = "a misspelt key at the top level or in \"listen\", \"approval\" or a \
                   \"sandbox\" section would silently run with weaker defaults";

async fn toolhost(args: &[&str]) -> (i32, String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = common::toolhost(home.path())
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_security_key_typo_refuses_the_config_at_check_start_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"aproval": {"mode": "strict"}, "listen": {"socket_mod": "0600"}}"#,
    )
    .unwrap();
    let (code, out, _) = toolhost(&["config", "check", "--config", bad.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert_eq!(
        out,
        format!(
            "{}: invalid\naproval: unknown key (did you mean \"approval\"?); {WHY}\n\
             listen.socket_mod: unknown key (did you mean \"socket_mode\"?); {WHY}\n",
            bad.display()
        )
    );

    // The daemon does not start on it.
    let mut d = Daemon::unstarted();
    std::fs::copy(&bad, d.config_path()).unwrap();
    let mut child = d.spawn_raw(&[]);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the daemon exits")
        .unwrap();
    assert_eq!(status.code(), Some(1));
    eventually(5, "the refusal in the log", || {
        let log = d.log();
        async move { log.contains("aproval: unknown key (did you mean \"approval\"?)") }
    })
    .await;

    // A running daemon keeps its strict policy when an edit misspells it.
    let d = Daemon::start_with(Some(json!({"approval": {"mode": "strict", "wait_s": 0}}))).await;
    write_atomic(&d.config_path(), &json!({"approval": {"mdoe": "auto"}}));
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], json!(false));
    assert_eq!(
        r["result"]["error"],
        json!(format!(
            "approval.mdoe: unknown key (did you mean \"mode\"?); {WHY}"
        ))
    );
    let denied = d.invoke("bash", json!({"command": "true"})).await;
    assert_eq!(denied["error_kind"], json!("approval_required"), "{denied}");
}

#[tokio::test]
async fn a_named_config_file_that_is_missing_is_an_error() {
    let (code, out, _) =
        toolhost(&["config", "check", "--config", "/nonexistent/conifg.json"]).await;
    assert_eq!(code, 1);
    assert_eq!(
        out,
        "/nonexistent/conifg.json: invalid\nconfig file /nonexistent/conifg.json does not exist \
         (it was named with --config or TOOLHOST_CONFIG)\n"
    );
    // `serve` refuses to start on defaults.
    let d = Daemon::unstarted();
    let mut cmd = d.command();
    std::fs::remove_file(d.config_path()).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("serve exits")
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let path = d.config_path().display().to_string();
    assert!(
        stderr.contains(&format!(
            "config file {path} does not exist (it was named with --config or TOOLHOST_CONFIG); \
             create it (`echo {{}} > {path}` for an empty one) or leave out --config"
        )),
        "{stderr}"
    );
    assert!(!d.socket().exists(), "a refused start left a socket");
}

#[tokio::test]
async fn pasted_blocks_with_disabled_and_vscode_servers_load() {
    let d = Daemon::start_with(Some(json!({"servers": {
        "on": {"type": "stdio", "command": FIXTURE, "include_tools": ["echo"]},
        "off": {"type": "stdio", "command": FIXTURE, "disabled": true}
    }})))
    .await;
    eventually(20, "server `on` ready", || async {
        d.call("mcp.status", json!({"server": "on"})).await["result"]["servers"][0]["state"]
            == "ready"
    })
    .await;
    let off = d.call("mcp.status", json!({"server": "off"})).await;
    assert_eq!(off["result"]["servers"][0]["state"], json!("disabled"));
    let r = d.invoke("mcp_on_echo", json!({"text": "hi"})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
}

/// A server block that never answers `initialize`; it records its environment first.
fn hanging(dir: &Path, startup_timeout_ms: u64) -> Value {
    let script = format!("env > {}; exec sleep 1000", dir.join("hang.env").display());
    json!({"command": "sh", "args": ["-c", script], "startup_timeout_ms": startup_timeout_ms,
           "env": {"SERVER_OWN": "1"}, "env_passthrough": ["EXTRA_FOR_SERVER"]})
}

#[tokio::test]
async fn a_hanging_server_does_not_hold_a_reload_and_a_slow_one_joins_later() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let client = d.client().await;
    let mut sub = client.subscribe_tools_changed().await.unwrap();
    let slow = format!("sleep 3; exec {FIXTURE}");
    write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {
            "hang": hanging(d.dir.path(), 60_000),
            "slow": {"command": "sh", "args": ["-c", slow], "include_tools": ["add"]},
            "fast": {"command": FIXTURE, "include_tools": ["echo"]}
        }}),
    );
    let t0 = Instant::now();
    let r = d.call("config.reload", json!({})).await;
    let took = t0.elapsed();
    assert_eq!(r["result"]["applied"], json!(true), "{r}");
    // Without the fix it takes the hanging server's whole startup_timeout_ms (60 s); with
    // it, about 2 s (plus a watcher-triggered reload of the same file it may queue behind).
    assert!(took < Duration::from_secs(10), "reload took {took:?}");
    // The reload's own notification carries the fast server (the watcher may have applied
    // the same file first; either way this is the first change).
    let first = tokio::time::timeout(CLIENT_TIMEOUT, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.added, ["mcp_fast_echo"]);
    // The slow server joins on its own, with its own notification.
    let second = tokio::time::timeout(CLIENT_TIMEOUT, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.added, ["mcp_slow_add"]);
    assert_eq!(
        (second.removed.len(), second.changed.len()),
        (0, 0),
        "{second:?}"
    );
    let hang = d.call("mcp.status", json!({"server": "hang"})).await;
    assert_eq!(hang["result"]["servers"][0]["state"], json!("connecting"));
}

#[tokio::test]
async fn env_and_env_passthrough_reach_bash_and_stdio_servers() {
    let mut d = Daemon::unstarted();
    let cfg = json!({
        "env_passthrough": ["*_PROXY", "NODE_EXTRA_CA_CERTS"],
        "env": {"GOPATH": "/srv/go", "HTTPS_PROXY": "http://from-config:1"},
        "mcp_servers": {"hang": hanging(d.dir.path(), 60_000)}
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let tool = d.workspace().join(".toolhost/tools/envdump");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::write(
        tool.join("tool.json"),
        json!({"name": "envdump", "description": "Prints some of its environment.",
               "parameters": {"type": "object", "properties": {}},
               "command": ["./run.sh"], "approval": "read_only"})
        .to_string(),
    )
    .unwrap();
    let script = "#!/bin/sh\ncat >/dev/null\nv=$(env | grep -E '^(GOPATH|HTTP_PROXY|SOME_SECRET)=' | sort | tr '\\n' ' ')\nprintf '{\"result\": {\"env\": \"%s\"}}\\n' \"$v\"\n";
    std::fs::write(tool.join("run.sh"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tool.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    d.spawn(&[
        ("HTTP_PROXY", "http://proxy:3128"),
        ("NO_PROXY", "localhost"),
        ("HTTPS_PROXY", "http://from-daemon:2"),
        ("NODE_EXTRA_CA_CERTS", "/etc/ca.pem"),
        ("EXTRA_FOR_SERVER", "x"),
        ("SOME_SECRET", "never"),
    ])
    .await;
    let wanted = [
        "EXTRA_FOR_SERVER",
        "GOPATH",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "NODE_EXTRA_CA_CERTS",
        "NO_PROXY",
        "SERVER_OWN",
        "SOME_SECRET",
    ];
    let pick = |text: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| wanted.iter().any(|w| l.starts_with(&format!("{w}="))))
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let r = d.invoke("bash", json!({"command": "env"})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(
        pick(r["stdout"].as_str().unwrap()),
        [
            "GOPATH=/srv/go",
            "HTTPS_PROXY=http://from-config:1",
            "HTTP_PROXY=http://proxy:3128",
            "NODE_EXTRA_CA_CERTS=/etc/ca.pem",
            "NO_PROXY=localhost",
        ]
    );
    // A workspace tool runs once approved (tests/it/workspace_trust.rs).
    let approved = d.call("tools.approve", json!({"name": "envdump"})).await;
    assert!(approved.get("result").is_some(), "{approved}");
    let custom = d.invoke("envdump", json!({})).await;
    assert_eq!(
        custom,
        json!({"ok": true, "env": "GOPATH=/srv/go HTTP_PROXY=http://proxy:3128 "})
    );
    let file = d.dir.path().join("hang.env");
    eventually(20, "the server wrote its environment", || {
        let file = file.clone();
        async move { std::fs::read_to_string(&file).is_ok_and(|t| t.contains("SERVER_OWN=1")) }
    })
    .await;
    assert_eq!(
        pick(&std::fs::read_to_string(&file).unwrap()),
        [
            "EXTRA_FOR_SERVER=x",
            "GOPATH=/srv/go",
            "HTTPS_PROXY=http://from-config:1",
            "HTTP_PROXY=http://proxy:3128",
            "NODE_EXTRA_CA_CERTS=/etc/ca.pem",
            "NO_PROXY=localhost",
            "SERVER_OWN=1",
        ]
    );
}
