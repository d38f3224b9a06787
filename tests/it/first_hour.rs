//! Issue 27, the papercuts of a first hour: facade sessions that end with their
//! connection, finding the daemon, the CLI as a CLI, and config checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{eventually, toolhost, Daemon};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"first-hour","version":"1"}}}"#;

/// `toolhost mcp` on `d`, spoken to line by line as an MCP client would, past `initialize`.
struct Stdio_ {
    child: Child,
    /// `None` once closed.
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Stdio_ {
    async fn start(d: &Daemon, args: &[&str]) -> Stdio_ {
        let mut cmd = toolhost(d.dir.path());
        cmd.arg("mcp").arg("--socket").arg(d.socket()).args(args);
        cmd.env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = Stdio_ {
            child,
            stdin: Some(stdin),
            stdout,
        };
        let init = mcp.request(INIT).await;
        assert!(init["result"]["protocolVersion"].is_string(), "{init}");
        mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        mcp
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }

    /// Sends a request and returns its answer (skipping notifications).
    async fn request(&mut self, line: &str) -> Value {
        self.send(line).await;
        loop {
            let next = tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line())
                .await
                .expect("an answer from toolhost mcp")
                .unwrap()
                .expect("toolhost mcp closed stdout");
            let v: Value = serde_json::from_str(&next).unwrap();
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id().unwrap() as i32), sig).unwrap();
    }

    /// Waits for the process to exit; returns what it wrote on stderr.
    async fn finish(self) -> String {
        let Stdio_ {
            mut child, stdin, ..
        } = self;
        // Open until the end: a closed stdin would end it on its own.
        let mut stderr = child.stderr.take().unwrap();
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("toolhost mcp exits")
            .unwrap();
        drop(stdin);
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.unwrap();
        assert!(
            status.code().is_some(),
            "killed by a signal: {status:?}\n{text}"
        );
        text
    }

    /// Kills the process with SIGKILL (nothing of it runs after) and waits for it.
    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }

    /// Closes stdin, as a client that is done does; returns what was written on stderr.
    async fn close(mut self) -> String {
        self.stdin = None;
        self.finish().await
    }
}

async fn sessions(d: &Daemon) -> Vec<Value> {
    let list = d.call("session.list", json!({})).await;
    list["result"]["sessions"].as_array().unwrap().clone()
}

/// Each signal a client may stop `toolhost mcp` with ends its session with it; a session
/// named with `--session` stays.
#[tokio::test]
async fn a_stdio_facade_session_ends_on_every_stop_signal() {
    let d = Daemon::start().await;
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let mcp = Stdio_::start(&d, &[]).await;
        let open = sessions(&d).await;
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0]["ephemeral"], true, "{open:?}");
        mcp.signal(sig);
        mcp.finish().await;
        eventually(10, &format!("the session to end after {sig}"), || async {
            sessions(&d).await.is_empty()
        })
        .await;
    }
    let mcp = Stdio_::start(&d, &["--session", "mine"]).await;
    mcp.signal(Signal::SIGTERM);
    mcp.finish().await;
    let left = sessions(&d).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["id"], "mine");
    assert!(left[0].get("ephemeral").is_none(), "{left:?}");
}

/// The ids of the sessions in the store, sorted.
async fn session_ids(d: &Daemon) -> Vec<String> {
    let mut ids: Vec<String> = sessions(d)
        .await
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// A `toolhost mcp` killed with SIGKILL runs no code of its own at the end: its session
/// ends because the daemon sees its connection go. A `--session` one stays.
#[tokio::test]
async fn a_stdio_facade_killed_with_sigkill_loses_its_session_with_its_connection() {
    let d = Daemon::start().await;
    let ephemeral = Stdio_::start(&d, &[]).await;
    let named = Stdio_::start(&d, &["--session", "mine"]).await;
    assert_eq!(sessions(&d).await.len(), 2);
    ephemeral.kill().await;
    named.kill().await;
    eventually(10, "the killed facade's session to end", || async {
        session_ids(&d).await == ["mine"]
    })
    .await;
    // A health check's connection (`claude mcp list`: initialize, then stdin closed).
    let check = Stdio_::start(&d, &[]).await;
    assert_eq!(sessions(&d).await.len(), 2);
    check.close().await;
    eventually(10, "the health check's session to end", || async {
        session_ids(&d).await == ["mine"]
    })
    .await;
}

/// A raw socket client's ephemeral sessions end with its connection however it ends
/// (abandoned, half-closed, cut off half-way through a line), also one made by a
/// notification (whose id it never heard); its other sessions stay.
#[tokio::test]
async fn an_ended_connection_takes_its_ephemeral_sessions_with_it() {
    let mut d = Daemon::unstarted();
    d.spawn(&[("TOOLHOST_FRAME_TIMEOUT_MS", "300")]).await;
    // Abandoned: the client goes without a word.
    let mut raw = common::RawLines::connect(&d.socket()).await;
    let made = raw
        .call("session.create", json!({"ephemeral": true, "id": "mine"}))
        .await;
    assert_eq!(made["result"]["ephemeral"], true, "{made}");
    raw.send_line(r#"{"jsonrpc":"2.0","method":"session.create","params":{"ephemeral":true}}"#)
        .await;
    let kept = raw.call("session.create", json!({"id": "kept"})).await;
    assert_eq!(kept["result"]["id"], "kept", "{kept}");
    // A session it deleted itself and another connection made again is not its own.
    let again = raw
        .call("session.create", json!({"ephemeral": true, "id": "again"}))
        .await;
    assert_eq!(again["result"]["id"], "again", "{again}");
    let gone = raw.call("session.delete", json!({"id": "again"})).await;
    assert_eq!(gone["result"]["deleted"], true, "{gone}");
    let other = d.call("session.create", json!({"id": "again"})).await;
    assert_eq!(other["result"]["id"], "again", "{other}");
    assert_eq!(sessions(&d).await.len(), 4, "{:?}", sessions(&d).await);
    drop(raw);
    eventually(10, "the abandoned connection's sessions to end", || async {
        session_ids(&d).await == ["again", "kept"]
    })
    .await;
    // Half-closed: the client is done sending but still reading.
    let mut raw = common::RawLines::connect(&d.socket()).await;
    let made = raw.call("session.create", json!({"ephemeral": true})).await;
    let id = made["result"]["id"].as_str().unwrap().to_owned();
    assert_eq!(session_ids(&d).await.len(), 3);
    raw.writer.shutdown().await.unwrap();
    eventually(
        10,
        "the half-closed connection's session to end",
        || async { !session_ids(&d).await.contains(&id) },
    )
    .await;
    assert_eq!(session_ids(&d).await, ["again", "kept"]);
    // Cut off: a line started and never finished, so the daemon closes the connection.
    let mut raw = common::RawLines::connect(&d.socket()).await;
    let made = raw.call("session.create", json!({"ephemeral": true})).await;
    let id = made["result"]["id"].as_str().unwrap().to_owned();
    raw.writer.write_all(br#"{"jsonrpc":"2.0","#).await.unwrap();
    eventually(10, "the cut-off connection's session to end", || async {
        !session_ids(&d).await.contains(&id)
    })
    .await;
    assert_eq!(session_ids(&d).await, ["again", "kept"]);
    drop(raw);
}

/// `initialize` on `/mcp` over a connection of its own; returns the `Mcp-Session-Id`.
async fn http_session(d: &Daemon) -> String {
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
    ];
    let answer = common::http::unix(&d.socket(), "POST", "/mcp", &headers, INIT).await;
    assert!(answer.body.contains("protocolVersion"), "{}", answer.body);
    answer
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id in {}", answer.head()))
}

/// An HTTP client that never sends DELETE: its session ends once it has idled for
/// `facade.session_idle_ms`, and the MCP session id is gone with it.
#[tokio::test]
async fn an_http_facade_session_that_idles_out_ends_its_host_session() {
    let d = Daemon::start_with(Some(json!({"facade": {"session_idle_ms": 300}}))).await;
    let id = http_session(&d).await;
    let open = sessions(&d).await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["ephemeral"], true, "{open:?}");
    // A GET stream left open (keep-alive comments only) does not keep the session.
    let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", id.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let get = common::http::Stream::open(io, "GET", "/mcp", &headers, "").await;
    assert_eq!(get.status, 200, "{}", get.head());
    eventually(10, "the idle HTTP session to end", || async {
        sessions(&d).await.is_empty()
    })
    .await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Session-Id", id.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let (status, body) =
        common::http_request_with(&d.socket(), "POST", "/mcp", list, &headers).await;
    assert_eq!(status, 404, "{body}");
    drop(get);
}

/// A 2026-07-28 client has no MCP session to DELETE: the host session its calls share ends
/// once it has made no call for `facade.session_idle_ms`, and its next call gets a new one.
#[tokio::test]
async fn a_sessionless_http_clients_session_idles_out() {
    let d = Daemon::start_with(Some(json!({"facade": {"session_idle_ms": 300}}))).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "true"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "new-era", "version": "1"},
        }
    }})
    .to_string();
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "bash"),
    ];
    let mut made = Vec::new();
    for _ in 0..2 {
        let (status, body) =
            common::http_request_with(&d.socket(), "POST", "/mcp", &call, &headers).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""isError":false"#), "{body}");
        let open = sessions(&d).await;
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0]["meta"]["mcp_client"]["name"], "new-era", "{open:?}");
        made.push(open[0]["id"].clone());
        eventually(
            10,
            "the sessionless client's session to idle out",
            || async { sessions(&d).await.is_empty() },
        )
        .await;
    }
    assert_ne!(made[0], made[1]);
}

/// A daemon that starts deletes the facade sessions the last one left (here: the daemon
/// was killed under a live `toolhost mcp` and an HTTP session; an HTTP session's idle
/// timer dies with the daemon, so reaping at start is what ends it), and keeps every other.
#[tokio::test]
async fn a_restarted_daemon_reaps_the_ephemeral_sessions_left_over() {
    let mut d = Daemon::start().await;
    let mcp = Stdio_::start(&d, &[]).await;
    http_session(&d).await;
    let named = d.call("session.create", json!({"id": "kept"})).await;
    assert_eq!(named["result"]["id"], "kept", "{named}");
    assert_eq!(sessions(&d).await.len(), 3);
    d.kill9().await;
    // Gone too: a live bridge would make its session again (identity.rs).
    mcp.kill().await;
    d.spawn(&[]).await;
    let left = sessions(&d).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["id"], "kept");
    assert!(d.log().contains("the last daemon left"), "{}", d.log());
}

/// An unknown tool is the client's error, answered to it, and a cancelled call is the
/// client's choice: neither is a warning in the log.
#[tokio::test]
async fn an_unknown_tool_or_a_cancelled_call_is_not_logged_as_a_warning() {
    let d = Daemon::start().await;
    let mut mcp = Stdio_::start(&d, &[]).await;
    let r = mcp
        .request(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#)
        .await;
    assert_eq!(r["error"]["message"], "Unknown tool: nope", "{r}");
    // A call the client cancels is ordinary traffic too.
    let calls = || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"].as_array().unwrap().len()
    };
    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 30"}}}"#)
        .await;
    eventually(10, "the call to run", || async { calls().await == 1 }).await;
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#)
        .await;
    eventually(10, "the cancelled call to end", || async {
        calls().await == 0
    })
    .await;
    let ping = mcp
        .request(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#)
        .await;
    assert!(ping["result"].is_object(), "{ping}");
    let text = mcp.close().await;
    assert!(!text.contains("response error"), "{text}");
}

/// `/run/user/<uid>` made for a user of its own (only root can), removed again on drop.
struct LoginRuntimeDir {
    uid: u32,
    path: std::path::PathBuf,
}

impl LoginRuntimeDir {
    fn create(uid: u32) -> LoginRuntimeDir {
        use std::os::unix::fs::PermissionsExt;
        let path = std::path::PathBuf::from(format!("/run/user/{uid}"));
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
        LoginRuntimeDir { uid, path }
    }
}

impl Drop for LoginRuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_dir_all(format!("/tmp/toolhost-{}", self.uid));
    }
}

/// `toolhost` as user `uid` with an empty environment (`env -i`: no `XDG_RUNTIME_DIR`, as
/// the MCP SDKs start their servers) but `HOME`.
fn bare(uid: u32, home: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.env_clear()
        .env("HOME", home)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Without `XDG_RUNTIME_DIR` the daemon and its clients agree on `/run/user/<uid>` (when it
/// is there and ours) before `/tmp`; a client that finds no daemon names every path tried.
#[tokio::test]
async fn without_xdg_runtime_dir_daemon_and_client_meet_in_run_user() {
    common::require_root("making /run/user/<uid> for a user of its own");
    // A user of this test alone, so no other daemon of this machine is on its paths.
    let uid = 40_000 + std::process::id() % 20_000;
    let runtime = LoginRuntimeDir::create(uid);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    for d in [&home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    for entry in [dir.path(), &home, &ws, &dir.path().join("config.json")] {
        nix::unistd::chown(entry, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
    }

    // No daemon yet: both places are named.
    let out = bare(uid, &home).arg("health").output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let run_user = format!("/run/user/{uid}/toolhost/toolhost.sock");
    let tmp = format!("/tmp/toolhost-{uid}/toolhost.sock");
    assert!(err.contains(&run_user) && err.contains(&tmp), "{err}");

    let mut daemon = bare(uid, &home);
    daemon
        .arg("--config")
        .arg(dir.path().join("config.json"))
        .arg("serve")
        .arg("--workspace")
        .arg(&ws)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stderr(Stdio::null());
    let mut daemon = daemon.spawn().unwrap();
    let socket = runtime.path.join("toolhost").join("toolhost.sock");
    eventually(20, "the daemon's socket in /run/user", || async {
        socket.exists()
    })
    .await;
    eventually(20, "a bare client to find the daemon", || async {
        let out = bare(uid, &home).arg("health").output().await.unwrap();
        out.status.success()
    })
    .await;
    daemon.start_kill().unwrap();
    let _ = daemon.wait().await;
}

/// `toolhost …` as a client of `d`.
fn cli(d: &Daemon) -> tokio::process::Command {
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("--socket")
        .arg(d.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `toolhost where PATH` prints just that path, for the README's `SOCK=$(toolhost where
/// socket)`; without a daemon it still prints where one would be, and exits 3.
#[tokio::test]
async fn where_prints_one_path_for_scripts() {
    let mut d = Daemon::start().await;
    let status = d.call("host.status", json!({})).await;
    let data_dir = status["result"]["data_dir"].as_str().unwrap().to_owned();
    for (only, path) in [
        ("socket", d.socket().display().to_string()),
        ("config", d.config_path().display().to_string()),
        ("data-dir", data_dir),
    ] {
        let out = cli(&d).args(["where", only]).output().await.unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{path}\n"));
    }
    d.stop().await;
    let out = cli(&d).args(["where", "socket"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let socket = d.socket().display().to_string();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{socket}\n")
    );
}

/// Ctrl-C (or SIGTERM) on `toolhost invoke` cancels the call and exits 130; the call's
/// updates reach stderr while it runs, under the `--call-id` given.
#[tokio::test]
async fn an_interrupted_invoke_cancels_its_call_and_exits_130() {
    let d = Daemon::start().await;
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        let mut child = cli(&d)
            .args(["invoke", "bash", "--call-id", "ctrl-c"])
            .args(["--args", r#"{"command":"echo started; exec sleep 60"}"#])
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        // Streamed: the update comes while the call is still running.
        let first = tokio::time::timeout(Duration::from_secs(20), stderr.next_line())
            .await
            .expect("an update on stderr")
            .unwrap();
        assert_eq!(first.as_deref(), Some("started"));
        d.wait_for_call("ctrl-c").await;
        kill(Pid::from_raw(child.id().unwrap() as i32), sig).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("toolhost invoke exits")
            .unwrap();
        assert_eq!(status.code(), Some(130), "{sig}");
        let said = stderr.next_line().await.unwrap().unwrap_or_default();
        assert!(said.contains("cancelled ctrl-c"), "{said}");
        eventually(10, "the call to be gone", || async {
            let s = d.call("host.status", json!({})).await;
            s["result"]["calls"].as_array().is_some_and(Vec::is_empty)
        })
        .await;
    }
}

/// An update with progress and a text (as `tool new`'s tools send) is one line on stderr.
#[tokio::test]
async fn an_update_with_progress_is_one_line() {
    let d = Daemon::start().await;
    let made = cli(&d)
        .args(["tool", "new", "greet", "--user"])
        .output()
        .await
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    eventually(10, "greet to be listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"greet")
    })
    .await;
    let out = cli(&d)
        .args(["invoke", "greet", "--args", r#"{"name": "you"}"#])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "[1/2] working...\n");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hello, you!"));
}

/// `--quiet` keeps the updates off stderr; the result is on stdout either way.
#[tokio::test]
async fn a_quiet_invoke_prints_only_its_result() {
    let d = Daemon::start().await;
    let args = r#"{"command":"echo streamed; sleep 1; echo done"}"#;
    let out = cli(&d)
        .args(["invoke", "bash", "--quiet", "--args", args])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("streamed\ndone"));
}

/// `toolhost health` names each cause of `degraded`: here a custom tool whose manifest is
/// broken, which `host.health` counts.
#[tokio::test]
async fn health_names_a_broken_custom_tool_as_the_cause_of_degraded() {
    let mut d = Daemon::unstarted();
    let tool = d.dir.path().join("xdg/toolhost/tools/broken");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::write(tool.join("tool.json"), "{").unwrap();
    d.spawn(&[]).await;
    let out = cli(&d).arg("health").output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("degraded"), "{text}");
    let cause = text
        .lines()
        .find(|l| l.contains("custom tool skipped"))
        .unwrap_or_else(|| panic!("no cause named: {text}"));
    assert!(cause.contains("broken/tool.json"), "{cause}");
}

/// A daemon with nothing in flight stops at once, MCP server included: its stop used to
/// wait out the 2 s kill grace on the server's unreaped process.
#[tokio::test]
async fn an_idle_daemon_with_an_mcp_server_stops_at_once() {
    let mut d = Daemon::start_with(Some(
        json!({"mcp_servers": {"fx": {"command": common::FIXTURE}}}),
    ))
    .await;
    eventually(20, "the fixture server to be ready", || async {
        let s = d.call("mcp.status", json!({})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let started = std::time::Instant::now();
    assert!(d.stop().await.success());
    let took = started.elapsed();
    eprintln!("stopped in {took:?}");
    // Generous, yet under the kill grace it used to wait out (2 s).
    assert!(took < Duration::from_millis(1900), "{took:?}");
}

/// Strict mode's refusal of an unclassified tool names the places that classify it, by
/// the tool's source: the MCP server's `approval` map, or the custom tool's own tool.json.
#[tokio::test]
async fn a_strict_refusal_says_where_to_classify_the_tool() {
    let mut d = Daemon::unstarted();
    let tools = d.dir.path().join("xdg/toolhost/tools/plain");
    std::fs::create_dir_all(&tools).unwrap();
    let prog = tools.join("run.sh");
    std::fs::write(&prog, "#!/bin/sh\necho '{\"result\": {}}'\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let manifest = json!({"name": "plain", "description": "no class", "command": ["./run.sh"]});
    std::fs::write(tools.join("tool.json"), manifest.to_string()).unwrap();
    let cfg = json!({"mcp_servers": {"fx": {"command": common::FIXTURE}}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(20, "the fixture's tools", || async {
        let s = d.call("mcp.status", json!({})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let s = d
        .call("session.create", json!({"approval": "strict"}))
        .await;
    let session = s["result"]["id"].as_str().unwrap().to_owned();
    let refusal = |name: &'static str| {
        let session = session.clone();
        let d = &d;
        async move {
            let r = d
                .call(
                    "invoke",
                    json!({"name": name, "session_id": session, "arguments": {"text": "x"}}),
                )
                .await;
            assert_eq!(r["result"]["result"]["error_kind"], "denied", "{r}");
            r["result"]["result"]["error"].as_str().unwrap().to_owned()
        }
    };
    let mcp = refusal("mcp_fx_echo").await;
    assert!(
        mcp.contains(r#"under mcp_servers.fx.approval ("echo": "#),
        "{mcp}"
    );
    assert!(!mcp.contains("tool.json"), "{mcp}");
    let custom = refusal("plain").await;
    let at = format!("in {}", tools.join("tool.json").display());
    assert!(custom.contains(&at), "{custom}");
    assert!(custom.contains("approval.tools"), "{custom}");
}

/// `toolhost config check` runs what `serve` checks at start: a workspace that is not
/// there fails the check as it fails the start, with the same words, and the checks only a
/// start can run are named.
#[tokio::test]
async fn config_check_says_what_serve_will_say() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"workspace": "/nonexistent/project"}).to_string(),
    )
    .unwrap();
    let check = toolhost(dir.path())
        .args(["config", "check", "--config"])
        .arg(&cfg)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    let refusal = "workspace /nonexistent/project is not accessible";
    assert!(said.contains(refusal), "{said}");
    assert!(said.contains("not checked without starting"), "{said}");
    let serve = toolhost(dir.path())
        .arg("--config")
        .arg(&cfg)
        .args(["serve", "--socket"])
        .arg(dir.path().join("s.sock"))
        .output()
        .await
        .unwrap();
    assert!(!serve.status.success());
    assert!(String::from_utf8_lossy(&serve.stderr).contains(refusal));

    // TCP without a token: refused by both.
    std::fs::write(&cfg, json!({"listen": {"tcp": "127.0.0.1:0"}}).to_string()).unwrap();
    let check = toolhost(dir.path())
        .args(["--json", "config", "check", "--config"])
        .arg(&cfg)
        .output()
        .await
        .unwrap();
    let r: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(r["valid"], false, "{r}");
    assert!(
        r["problems"][0].as_str().unwrap().contains("no token"),
        "{r}"
    );
}

/// The shipped example passes the check, and so it is one `serve` starts on (its MCP
/// server left out here: npx would fetch it).
#[tokio::test]
async fn the_example_config_passes_the_check_and_serve_takes_it() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/config.example.json");
    let d = Daemon::unstarted();
    let check = toolhost(d.dir.path())
        .args(["config", "check", "--config", example])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{said}");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    cfg["mcp_servers"]["everything"]["enabled"] = json!(false);
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let mut d = d;
    d.spawn(&[]).await;
    assert!(d.stop().await.success());
}

/// A fresh machine has no `~/.config/toolhost`: the daemon watches the nearest directory
/// there is, says so in `config.status`, and takes the config up once it is written.
#[tokio::test]
async fn a_config_written_after_start_into_a_new_directory_is_taken_up() {
    let d = Daemon::unstarted();
    let xdg = d.dir.path().join("xdg");
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("serve")
        .arg("--socket")
        .arg(d.socket())
        .arg("--workspace")
        .arg(d.workspace())
        .arg("--data-dir")
        .arg(d.data_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    d.wait_ready().await;
    let status = d.call("config.status", json!({})).await["result"].clone();
    assert_eq!(status["watching"], xdg.display().to_string(), "{status}");
    let dir = xdg.join("toolhost");
    std::fs::create_dir(&dir).unwrap();
    common::write_atomic(
        &dir.join("config.json"),
        &json!({"limits": {"max_output_bytes": 4096}}),
    );
    eventually(10, "the new config to be applied", || async {
        let s = d.call("config.status", json!({})).await["result"].clone();
        s["revision"] == 2 && s["watching"] == dir.display().to_string()
    })
    .await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// An `approval.tools` entry that names no tool has no effect: `config.status` says so,
/// with the likeliest tool meant.
#[tokio::test]
async fn an_approval_entry_for_no_tool_is_warned_about_with_a_suggestion() {
    let d = Daemon::start_with(Some(
        json!({"approval": {"tools": {"red_file": "read_only", "bash": "command"}}}),
    ))
    .await;
    let s = d.call("config.status", json!({})).await["result"].clone();
    let warnings: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        warnings,
        [
            r#"approval.tools.red_file: no tool has this name (did you mean "read_file"?); the entry has no effect"#
        ],
        "{s}"
    );
}

/// A server's `exclude_tools`/`include_tools` entry that names none of its tools has no
/// effect either: `config.status` names it, once the server has listed its tools.
#[tokio::test]
async fn a_server_filter_entry_for_no_tool_is_warned_about_with_a_suggestion() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {"fx": {
        "command": common::FIXTURE,
        "exclude_tools": ["ecoh"],
    }}})))
    .await;
    eventually(20, "the fixture server to be ready", || async {
        let s = d.call("mcp.status", json!({})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let s = d.call("config.status", json!({})).await["result"].clone();
    let warnings: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        warnings,
        [
            r#"mcp_servers.fx.exclude_tools: "ecoh" is no tool of fx (did you mean "echo"?); the entry has no effect"#
        ],
        "{s}"
    );
}

/// Cursor's project file (`.cursor/mcp.json`) is imported and rewritten like its user file.
#[tokio::test]
async fn import_takes_cursors_project_file() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let project = d.dir.path().join("project");
    let file = project.join(".cursor/mcp.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let original =
        r#"{"mcpServers": {"proj-tools": {"command": "proj-tools-mcp", "args": ["--stdio"]}}}"#;
    std::fs::write(&file, original).unwrap();
    let out = cli(&d)
        .current_dir(&project)
        // No `toolhost` on PATH: the entry names this binary by its absolute path.
        .env("PATH", &project)
        .args(["import", "--apply", "--rewrite"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains(&format!("from Cursor {}", file.display())),
        "{text}"
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    assert_eq!(
        config["mcp_servers"]["proj-tools"]["command"], "proj-tools-mcp",
        "{config}"
    );
    let rewritten: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        rewritten["mcpServers"],
        // The daemon's socket is in a temp dir no bridge finds by itself: it is named.
        json!({"toolhost": {"command": common::BIN, "args": ["mcp", "--socket", d.socket()]}})
    );
    let backup = project.join(".cursor/mcp.json.toolhost-backup");
    assert_eq!(std::fs::read_to_string(backup).unwrap(), original);
}
