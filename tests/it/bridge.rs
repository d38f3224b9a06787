//! `toolhost mcp`, the stdio bridge every stdio frontend runs (issue 28): it replaces itself
//! with the small `toolhost-bridge` installed beside it (same process, same stdio), and
//! bridges in its own process when that is missing; either way the frontend sees the same
//! MCP server, the same flags and the same start errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// `toolhost` alone in a directory of its own (a hard link, so nothing is copied): no
/// `toolhost-bridge` beside it.
fn toolhost_alone() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let bin = dir.path().join("toolhost");
    std::fs::hard_link(BIN, &bin).unwrap();
    (dir, bin)
}

/// `bin mcp --socket …` for `d`, as a frontend starts it.
fn bridge(bin: &Path, d: &Daemon, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    isolate(cmd.as_std_mut(), d.dir.path());
    cmd.arg("mcp").arg("--socket").arg(d.socket()).args(extra);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Initializes an MCP session with the bridge `bin` and lists the tools; returns the tool
/// names and the program the bridge's process runs.
async fn list_through(bin: &Path, d: &Daemon) -> (Vec<String>, PathBuf) {
    let mut child = bridge(bin, d, &[]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut answer = async |message: Value| {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        if message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(20), stdout.read_line(&mut line))
            .await
            .expect("an answer in time")
            .unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let init = answer(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bridge-test", "version": "1"}}}),
    )
    .await;
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    answer(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let listed = answer(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let names = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let exe = std::fs::read_link(format!("/proc/{}/exe", child.id().unwrap())).unwrap();
    (names, exe)
}

#[tokio::test]
async fn toolhost_mcp_runs_the_bridge_binary_beside_it_and_bridges_itself_without_it() {
    let d = Daemon::start().await;
    let beside = Path::new(BIN).with_file_name("toolhost-bridge");
    assert!(
        beside.is_file(),
        "cargo builds toolhost-bridge with toolhost"
    );

    let (tools, exe) = list_through(Path::new(BIN), &d).await;
    assert_eq!(exe, beside.canonicalize().unwrap());
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");

    let (_dir, alone) = toolhost_alone();
    let (in_process, exe) = list_through(&alone, &d).await;
    assert_eq!(exe, alone.canonicalize().unwrap());
    assert_eq!(in_process, tools);
}

#[tokio::test]
async fn the_bridge_binary_fails_to_start_as_toolhost_mcp_does() {
    let d = Daemon::start().await;
    let (_dir, alone) = toolhost_alone();
    // (A daemon that is not there is no start error: the bridge waits for it, identity.rs.)
    for (flags, daemon, code) in [
        (&["--profile", "nosuch"][..], &d, 1),
        (&["--workspace", "/nonexistent"][..], &d, 2),
    ] {
        let run = async |bin: &Path| {
            let out = bridge(bin, daemon, flags).output().await.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (exec_code, exec_err) = run(Path::new(BIN)).await;
        let (own_code, own_err) = run(&alone).await;
        assert_eq!(exec_code, Some(code), "{flags:?}: {exec_err}");
        assert_eq!((exec_code, &exec_err), (own_code, &own_err), "{flags:?}");
        assert!(exec_err.starts_with("toolhost: "), "{exec_err}");
    }
}
