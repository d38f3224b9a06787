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

/// The bridge asks its daemon whether tool manifests are offered (`config.status`) with
/// `host.health` and its subscriptions, in one round trip, not one more after it (issue
/// 48, start-up). Between the bridge and the daemon sits a relay that holds back the answer
/// to `host.health` until `config.status` has been asked: a bridge that waited for that
/// answer before asking would wait in vain.
#[tokio::test]
async fn the_bridge_asks_for_the_manifest_switch_in_the_same_round_trip_as_health() {
    let d = Daemon::start_in(|_| json!({"facade": {"tool_manifest": true}})).await;
    let relay = d.dir.path().join("relay.sock");
    let listener = tokio::net::UnixListener::bind(&relay).unwrap();
    // Whether the first answer to `host.health` was held in vain, once it was passed on.
    let (verdict, mut held) = tokio::sync::watch::channel(None::<bool>);
    let verdict = std::sync::Arc::new(verdict);
    let daemon_socket = d.socket();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let daemon = tokio::net::UnixStream::connect(&daemon_socket)
                .await
                .unwrap();
            tokio::spawn(relay_holding_health(conn, daemon, verdict.clone()));
        }
    });

    let mut cmd = tokio::process::Command::new(BIN);
    isolate(cmd.as_std_mut(), d.dir.path());
    cmd.arg("mcp").arg("--socket").arg(&relay);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bridge-test", "version": "1"}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
        .await
        .expect("an answer in time")
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        answer["result"]["capabilities"]["tools"]["manifest"],
        json!(true),
        "{answer}"
    );
    let in_vain = *tokio::time::timeout(Duration::from_secs(30), held.wait_for(Option::is_some))
        .await
        .expect("the relay passed host.health's answer on")
        .unwrap();
    assert_eq!(
        in_vain,
        Some(false),
        "the bridge asked config.status only after host.health was answered"
    );
}

/// Relays one connection line by line, holding the first answer to `host.health` until
/// `config.status` was asked on it (at most 10 s); says in `verdict` whether it waited in
/// vain.
async fn relay_holding_health(
    bridge: tokio::net::UnixStream,
    daemon: tokio::net::UnixStream,
    verdict: std::sync::Arc<tokio::sync::watch::Sender<Option<bool>>>,
) {
    let (from_bridge, mut to_bridge) = bridge.into_split();
    let (from_daemon, mut to_daemon) = daemon.into_split();
    let (health_id, health_asked) = tokio::sync::watch::channel(None::<Value>);
    let (config_status, mut config_asked) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_bridge).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let batch = match serde_json::from_str(&line).unwrap_or_default() {
                Value::Array(items) => items,
                one => vec![one],
            };
            for m in &batch {
                match m["method"].as_str() {
                    Some("host.health") => {
                        health_id.send_replace(Some(m["id"].clone()));
                    }
                    Some("config.status") => {
                        config_status.send_replace(true);
                    }
                    _ => {}
                }
            }
            if to_daemon
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(from_daemon).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let message: Value = serde_json::from_str(&line).unwrap_or_default();
        let health = health_asked.borrow().clone();
        let holding = verdict.borrow().is_none();
        if holding && health.is_some() && message.get("id") == health.as_ref() {
            let asked = tokio::time::timeout(
                Duration::from_secs(10),
                config_asked.wait_for(|asked| *asked),
            )
            .await
            .is_ok_and(|r| r.is_ok());
            verdict.send_replace(Some(!asked));
        }
        if to_bridge
            .write_all(format!("{line}\n").as_bytes())
            .await
            .is_err()
        {
            break;
        }
    }
}
