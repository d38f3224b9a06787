//! The JSON-RPC edge on the real binary: ids, notifications, half-close, leaks, bounded
//! frames, malformed HTTP and WebSocket input, and the socket's own safety. Every framing
//! (newline, HTTP POST, WebSocket) must behave the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{eventually, Daemon};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;

// ---------------------------------------------------------------------------------------
// Raw clients

/// Sends `bytes` on a fresh connection, half-closes, and returns everything the daemon
/// wrote before closing. Panics if the daemon does not close within 10 s: a connection
/// that owes nothing more must close once the client is done.
async fn exchange(sock: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the daemon closes the connection once everything owed is written")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Newline framing: the replies to `lines`, in arrival order, as raw text.
async fn newline(sock: &Path, lines: &[&str]) -> Vec<String> {
    let mut input = lines.join("\n");
    input.push('\n');
    let out = exchange(sock, input.as_bytes()).await;
    out.lines().map(str::to_owned).collect()
}

/// HTTP POST of `body`: (status, body).
async fn post(sock: &Path, body: &str) -> (u16, String) {
    common::http_request(sock, "POST", "/", body).await
}

async fn ws_connect(sock: &Path) -> tokio_tungstenite::WebSocketStream<UnixStream> {
    let s = UnixStream::connect(sock).await.unwrap();
    tokio_tungstenite::client_async("ws://localhost/", s)
        .await
        .unwrap()
        .0
}

/// WebSocket: sends `text`, then a `host.health` call with id "probe"; returns the text
/// messages received other than the probe's reply, up to 300 ms after it (messages run
/// concurrently, so "no reply" is observable but an answer may come after the probe's).
async fn ws_exchange(sock: &Path, text: &str) -> Vec<String> {
    let mut ws = ws_connect(sock).await;
    ws.send(Message::text(text.to_owned())).await.unwrap();
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":"probe","method":"host.health"}"#,
    ))
    .await
    .unwrap();
    let mut got = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a ws message")
            .expect("ws open")
            .unwrap();
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == "probe" {
                assert_eq!(v["result"]["status"], "ok");
                break;
            }
            got.push(t.as_str().to_owned());
        }
    }
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_millis(300), ws.next()).await {
        if let Message::Text(t) = m {
            got.push(t.as_str().to_owned());
        }
    }
    got
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("bad JSON {text}: {e}"))
}

fn health(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"host.health"}}"#)
}

/// The raw id token a reply carries (`"id":<token>,`), byte for byte.
fn raw_id(reply: &str) -> &str {
    let rest = reply
        .strip_prefix(r#"{"jsonrpc":"2.0","id":"#)
        .unwrap_or_else(|| panic!("unexpected reply shape {reply}"));
    let end = rest.find(",\"").unwrap();
    &rest[..end]
}

/// The daemon's open sockets (listener and connections; other descriptors come and go with
/// lazily started parts such as watchers).
fn open_sockets(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

const ODD_IDS: [&str; 5] = ["-5", "1.5", "18446744073709551616", "1e3", r#""\u0041b""#];
const BAD_IDS: [&str; 4] = ["true", "{}", "[1]", "false"];

// ---------------------------------------------------------------------------------------
// Ids

#[tokio::test]
async fn any_number_or_string_id_is_echoed_byte_for_byte_on_every_framing() {
    let d = Daemon::start().await;
    let sock = d.socket();
    let lines: Vec<String> = ODD_IDS.iter().map(|id| health(id)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut replies = newline(&sock, &lines).await;
    let mut ids: Vec<&str> = replies.iter().map(|r| raw_id(r)).collect();
    ids.sort();
    let mut want = ODD_IDS.to_vec();
    want.sort();
    assert_eq!(ids, want, "newline");
    for r in &mut replies {
        assert_eq!(parse(r)["result"]["status"], "ok", "{r}");
    }

    for id in ODD_IDS {
        let (status, body) = post(&sock, &health(id)).await;
        assert_eq!((status, raw_id(&body)), (200, id), "http {body}");
        assert_eq!(parse(&body)["result"]["status"], "ok");

        let got = ws_exchange(&sock, &health(id)).await;
        assert_eq!(got.len(), 1, "ws {got:?}");
        assert_eq!(raw_id(&got[0]), id, "ws");
    }
}

#[tokio::test]
async fn invalid_ids_get_invalid_request_with_a_null_id_on_every_framing() {
    let d = Daemon::start().await;
    let sock = d.socket();
    let want = json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: the id must be a string, a number or null"}});
    // An invalid id must not run the method: write_file would create this file.
    for id in BAD_IDS {
        let req = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"name":"write_file","arguments":{{"path":"bad.txt","content":"x"}}}}}}"#
        );
        let replies = newline(&sock, &[&req]).await;
        assert_eq!(replies.len(), 1, "{replies:?}");
        assert_eq!(parse(&replies[0]), want);
        let (status, body) = post(&sock, &req).await;
        assert_eq!((status, parse(&body)), (200, want.clone()));
        let got = ws_exchange(&sock, &req).await;
        assert_eq!(
            got.iter().map(|g| parse(g)).collect::<Vec<_>>(),
            std::slice::from_ref(&want)
        );
    }
    assert!(!d.workspace().join("bad.txt").exists());
}

// ---------------------------------------------------------------------------------------
// Notifications

fn write_note(path: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"invoke","params":{{"name":"write_file","arguments":{{"path":"{path}","content":"hi"}}}}}}"#
    )
}

#[tokio::test]
async fn notifications_run_and_get_no_reply_on_every_framing() {
    let d = Daemon::start().await;
    let sock = d.socket();
    // Newline: nothing comes back, and the connection closes.
    assert_eq!(
        newline(&sock, &[&write_note("nl.txt")]).await,
        Vec::<String>::new()
    );
    // HTTP: 204, no body.
    assert_eq!(
        post(&sock, &write_note("http.txt")).await,
        (204, String::new())
    );
    // WebSocket: nothing before the probe's reply.
    assert_eq!(
        ws_exchange(&sock, &write_note("ws.txt")).await,
        Vec::<String>::new()
    );
    // A batch of only notifications: no reply either.
    let batch = format!("[{},{}]", write_note("b1.txt"), write_note("b2.txt"));
    assert_eq!(newline(&sock, &[&batch]).await, Vec::<String>::new());
    for f in ["nl.txt", "http.txt", "ws.txt", "b1.txt", "b2.txt"] {
        let p = d.workspace().join(f);
        eventually(10, &format!("{f} written by a notification"), || {
            let p = p.clone();
            async move { std::fs::read_to_string(&p).is_ok_and(|t| t == "hi") }
        })
        .await;
    }
}

#[tokio::test]
async fn a_cancel_notification_cancels() {
    let d = Daemon::start().await;
    let mut c = d.raw_lines().await;
    let id = c
        .send(
            "invoke",
            json!({"name":"bash","call_id":"slow","arguments":{"command":"sleep 30"}}),
        )
        .await;
    // Cancel it by notification from another client; the call may not have started when the
    // first one lands (then it cancels nothing), so repeat until the call answers.
    let note = r#"{"jsonrpc":"2.0","method":"cancel","params":{"call_id":"slow"}}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        assert_eq!(newline(&d.socket(), &[note]).await, Vec::<String>::new());
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), c.recv()).await {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call was never cancelled"
        );
    };
    assert_eq!(r["id"], id);
    assert_eq!(r["result"]["result"]["error_kind"], "cancelled", "{r}");
}

// ---------------------------------------------------------------------------------------
// Half-close and leaks

#[tokio::test]
async fn every_owed_reply_is_written_before_close_on_half_close() {
    let d = Daemon::start().await;
    let sock = d.socket();
    // Lines the daemon answers that a naive "owed" count missed, then a normal call.
    let replies = newline(
        &sock,
        &[
            r#"{"jsonrpc":"2.0","id":null,"method":"host.health"}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"host.health"}"#,
            r#"{"id":8,"method":"host.health"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"host.health","params":null}"#,
        ],
    )
    .await;
    let mut got: Vec<(Value, Value)> = replies
        .iter()
        .map(|r| {
            let v = parse(r);
            (v["id"].clone(), v["error"]["code"].clone())
        })
        .collect();
    got.sort_by_key(|(id, _)| id.to_string());
    assert_eq!(
        got,
        [
            (json!(7), json!(-32600)),
            (json!(8), json!(-32600)),
            (json!(9), Value::Null),
            (Value::Null, Value::Null),
        ]
    );

    // Pipelined HTTP requests, then a half-close: every response arrives.
    let one = |id: u32| {
        let body = health(&id.to_string());
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let out = exchange(&sock, format!("{}{}{}", one(1), one(2), one(3)).as_bytes()).await;
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    for id in 1..=3 {
        assert!(out.contains(&format!(r#""id":{id},"result""#)), "{out}");
    }
}

#[tokio::test]
async fn connections_that_owe_nothing_close_and_no_slot_leaks() {
    let d = Daemon::start().await;
    let sock = d.socket();
    // Warm up (lazy state, thread pools) before counting sockets.
    assert_eq!(newline(&sock, &[&health("0")]).await.len(), 1);
    let before = open_sockets(d.pid());
    let kinds = [
        format!("[{}]", write_note("leak.txt")),
        r#"{"jsonrpc":"2.0","method":"host.health"}"#.to_owned(),
        health("-5"),
        health("true"),
        String::new(),
    ];
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (sock, line) = (sock.clone(), kinds[i % kinds.len()].clone());
        tasks.push(tokio::spawn(async move {
            newline(&sock, &[&line]).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let pid = d.pid();
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        while open_sockets(pid) > before {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    if settled.is_err() {
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .map(|p| p.display().to_string())
            .collect();
        panic!(
            "{} sockets open, {before} before: {fds:?}",
            open_sockets(pid)
        );
    }
    // A fresh connection of each framing still works.
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    assert_eq!(d.http("GET", "/health", "").await.0, 200);
    assert_eq!(ws_exchange(&sock, "[]").await.len(), 1);
}

// ---------------------------------------------------------------------------------------
// Bounded frames and malformed input

/// A daemon whose incomplete-frame timeout is 300 ms instead of 30 s.
async fn impatient_daemon() -> Daemon {
    let mut d = Daemon::unstarted();
    d.spawn(&[("TOOLHOST_FRAME_TIMEOUT_MS", "300")]).await;
    d
}

/// Reads until the daemon closes; panics if it keeps the connection open 5 s.
async fn read_until_closed(s: &mut UnixStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the daemon closes an incomplete frame")
        .unwrap_or_default();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn incomplete_frames_time_out_but_idle_connections_between_frames_stay() {
    let d = impatient_daemon().await;
    let sock = d.socket();
    // A partial line.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    s.write_all(br#"{"jsonrpc":"2.0","id":1,"met"#)
        .await
        .unwrap();
    assert_eq!(read_until_closed(&mut s).await, "");
    // Partial HTTP headers (slowloris).
    let mut s = UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    read_until_closed(&mut s).await;
    // A body shorter than its Content-Length, client still there: 408.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let out = read_until_closed(&mut s).await;
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    // Idle between complete frames is fine: a newline client waits, then calls.
    let mut c = d.raw_lines().await;
    assert_eq!(
        c.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        c.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    // So does an HTTP keep-alive connection (hyper's own header timeout closed it), and a
    // request whose head then arrives slowly, but within the limit, is served.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"host.health"}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for pause in [0, 800] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let (head, rest) = request.split_at(10);
        s.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        s.write_all(rest.as_bytes()).await.unwrap();
        let answer = read_response(&mut s).await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "after {pause} ms idle: {answer}"
        );
    }
    // A head that stalls after the idle time is still cut off.
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    read_until_closed(&mut s).await;
    // A WebSocket idles too.
    let mut ws = ws_connect(&sock).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    ws.send(Message::text(body)).await.unwrap();
    let m = ws.next().await.unwrap().unwrap();
    assert_eq!(parse(m.to_text().unwrap())["result"]["status"], "ok");
}

/// Reads one HTTP response whose body is a JSON object (up to its closing brace).
async fn read_response(s: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while !out.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("the daemon answers")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn malformed_http_bodies_are_client_errors() {
    let d = Daemon::start().await;
    let sock = d.socket();
    // Content-Length larger than the body, then EOF.
    let out = exchange(
        &sock,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains(r#""code":-32600"#), "{out}");
    // A bad chunk size.
    let out = exchange(
        &sock,
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    // Invalid UTF-8 in a body, on a line and in a WebSocket binary message: parse error.
    let (status, body) = post(&sock, "").await;
    assert_eq!(
        (status, parse(&body)["error"]["code"].clone()),
        (200, json!(-32700))
    );
    let replies = exchange(&sock, b"{\"a\":\"\xff\xfe\"}\n").await;
    assert_eq!(parse(replies.trim())["error"]["code"], -32700);
    let mut ws = ws_connect(&sock).await;
    ws.send(Message::binary(vec![0xffu8, b'{'])).await.unwrap();
    let m = ws.next().await.unwrap().unwrap();
    assert_eq!(parse(m.to_text().unwrap())["error"]["code"], -32700);
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

#[tokio::test]
async fn unmasked_websocket_client_frames_close_the_connection() {
    let d = Daemon::start().await;
    let mut s = UnixStream::connect(d.socket()).await.unwrap();
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 1024];
    let n = s.read(&mut head).await.unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&head[..n])
    );
    // An unmasked text frame (FIN, opcode 1, no mask bit) with a valid request.
    let body = health("1");
    let mut frame = vec![0x81u8, body.len() as u8];
    frame.extend_from_slice(body.as_bytes());
    s.write_all(&frame).await.unwrap();
    let out = read_until_closed(&mut s).await;
    assert!(!out.contains("result"), "an unmasked request ran: {out}");
}

#[tokio::test]
async fn odd_json_is_answered_as_the_spec_says() {
    let d = Daemon::start().await;
    let sock = d.socket();
    let huge_id = "9".repeat(10_000);
    let deep = format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000));
    let replies = newline(
        &sock,
        &[
            &health(&huge_id),
            "[]",
            &format!(r#"{{"jsonrpc":"2.0","id":"deep","method":"host.health","params":{deep}}}"#),
            &deep,
            r#"[1,{"jsonrpc":"2.0","id":"in-batch","method":"host.health"}]"#,
            r#"{"jsonrpc":"2.0","id":"p","method":"invoke","params":3}"#,
        ],
    )
    .await;
    assert_eq!(replies.len(), 6, "{replies:?}");
    // The huge id is echoed as sent (serde_json's Value cannot hold it, so compare text).
    let (huge, rest): (Vec<&String>, Vec<&String>) = replies
        .iter()
        .partition(|r| r.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{huge_id},"#)));
    assert_eq!(huge.len(), 1, "huge id echoed");
    assert!(
        huge[0].contains(r#","result":{"status":"ok""#),
        "{}",
        huge[0]
    );
    let parsed: Vec<Value> = rest.iter().map(|r| parse(r)).collect();
    let by_id = |id: &Value| -> Value {
        parsed
            .iter()
            .find(|v| &v["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no reply with id {id} in {parsed:?}"))
    };
    assert_eq!(by_id(&json!("deep"))["error"]["code"], -32602);
    assert_eq!(by_id(&json!("p"))["error"]["code"], -32602);
    let batches: Vec<Vec<Value>> = parsed
        .iter()
        .filter_map(|v| v.as_array().cloned())
        .collect();
    let codes = |b: &Vec<Value>| {
        let mut c: Vec<String> = b.iter().map(|e| e["error"]["code"].to_string()).collect();
        c.sort();
        c
    };
    let mut batch_codes: Vec<Vec<String>> = batches.iter().map(codes).collect();
    batch_codes.sort();
    // `[1, {...}]`: one invalid entry, one answer; the deep array: one invalid entry.
    assert_eq!(batch_codes, [vec!["-32600"], vec!["-32600", "null"]]);
    // `[]` is one invalid request with a null id.
    let nulls: Vec<Value> = parsed
        .iter()
        .filter(|v| v.is_object() && v["id"].is_null())
        .map(|v| v["error"]["code"].clone())
        .collect();
    assert_eq!(nulls, [json!(-32600)]);
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

// ---------------------------------------------------------------------------------------
// The socket

/// Runs the daemon without `--socket` (default path under `runtime`); returns its exit
/// status and stderr once it exits, or `None` if it keeps running (it is then killed).
async fn start_default_socket(d: &Daemon, runtime: &Path) -> Option<(bool, String)> {
    let mut cmd = d.command_without_socket();
    cmd.env("XDG_RUNTIME_DIR", runtime);
    let child = cmd.spawn().unwrap();
    match tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await {
        Ok(out) => {
            let out = out.unwrap();
            Some((
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_runtime_dir_others_can_enter_or_do_not_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::unstarted();
    let runtime = d.dir.path().join("run");
    let dir = runtime.join("toolhost");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, err) = start_default_socket(&d, &runtime)
        .await
        .expect("refused at start");
    assert!(!ok);
    assert!(
        err.contains("refusing the socket directory") && err.contains("777"),
        "{err}"
    );
    assert!(!dir.join("toolhost.sock").exists());

    // A symlink to a private directory is refused too.
    std::fs::remove_dir(&dir).unwrap();
    let elsewhere = d.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let (ok, err) = start_default_socket(&d, &runtime)
        .await
        .expect("refused at start");
    assert!(!ok);
    assert!(err.contains("not a directory"), "{err}");

    // Owned by another user (only root can arrange that here).
    if nix::unistd::geteuid().is_root() {
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (ok, err) = start_default_socket(&d, &runtime)
            .await
            .expect("refused at start");
        assert!(!ok);
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}

#[tokio::test]
async fn a_missing_runtime_dir_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::unstarted();
    let runtime = d.dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let mut child = d
        .command_without_socket()
        .env("XDG_RUNTIME_DIR", &runtime)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sock = runtime.join("toolhost").join("toolhost.sock");
    eventually(10, "the default socket to answer", || {
        let sock = sock.clone();
        async move { UnixStream::connect(&sock).await.is_ok() }
    })
    .await;
    let mode = std::fs::metadata(runtime.join("toolhost"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_socket_path_that_is_a_regular_file_is_left_alone() {
    let mut d = Daemon::unstarted();
    std::fs::write(d.socket(), "precious").unwrap();
    let mut child = d.spawn_raw(&[]);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the daemon refuses to start")
        .unwrap();
    assert!(!status.success());
    assert_eq!(std::fs::read_to_string(d.socket()).unwrap(), "precious");
    eventually(5, "a clear error", || async {
        d.log().contains("is not a socket; refusing to replace it")
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Property test

/// One line of the generated traffic.
#[derive(Debug, Clone)]
enum Line {
    /// A request with this (valid) id token.
    Call(String),
    /// Bytes that are not a request with a valid id.
    Junk(Vec<u8>),
}

fn line_strategy() -> impl proptest::strategy::Strategy<Value = Line> {
    use proptest::prelude::*;
    let id = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|f| format!("{f:?}")),
        "[a-z0-9 ]{0,8}".prop_map(|s| format!("\"{s}\"")),
    ];
    let junk = prop_oneof![
        proptest::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..64
        ),
        "[\\[\\]{}\":,a-z0-9 ]{0,40}".prop_map(String::into_bytes),
    ];
    prop_oneof![id.prop_map(Line::Call), junk.prop_map(Line::Junk)]
}

#[test]
fn property_garbled_traffic_never_crashes_and_every_valid_id_gets_one_reply() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt.block_on(Daemon::start());
    let sock = d.socket();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        proptest::collection::vec(line_strategy(), 1..12),
        proptest::collection::vec(any::<u8>(), 0..200),
    );
    runner
        .run(&strategy, |(lines, http_junk)| {
            rt.block_on(async {
                // Newline (the first line picks the framing); ids may repeat: count them.
                let mut input = health(r#""first""#).into_bytes();
                input.push(b'\n');
                let mut want = vec![r#""first""#.to_owned()];
                for (i, l) in lines.iter().enumerate() {
                    match l {
                        Line::Call(id) => {
                            // Plain methods, an unknown one, and subscriptions opened and
                            // ended in any order (their notifications carry no id).
                            let (method, params) = match i % 5 {
                                0 => ("host.health", "{}".to_owned()),
                                1 => ("no.such", "{}".to_owned()),
                                2 => ("subscribe_tools_changed", "{}".to_owned()),
                                3 => ("unsubscribe_tools_changed", format!("[{id}]")),
                                _ => (
                                    "subscribe_invoke",
                                    r#"{"name":"read_file","arguments":{"path":"none.txt"}}"#
                                        .to_owned(),
                                ),
                            };
                            input.extend_from_slice(
                                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
                                    .as_bytes(),
                            );
                            want.push(id.clone());
                        }
                        Line::Junk(b) => input.extend_from_slice(b),
                    }
                    input.push(b'\n');
                }
                let out = exchange(&sock, &input).await;
                let mut got: Vec<String> = Vec::new();
                for reply in out.lines() {
                    let v: Value = serde_json::from_str(reply)
                        .map_err(|e| TestCaseError::fail(format!("bad reply {reply}: {e}")))?;
                    // Junk never produces a reply with a non-null id (batches of junk may).
                    if v.is_object() && !v["id"].is_null() {
                        got.push(raw_id(reply).to_owned());
                    }
                }
                got.sort();
                want.sort();
                prop_assert_eq!(got, want);

                // Arbitrary bytes after an HTTP request line: an answer or a close, never a hang.
                let mut req = b"POST / HTTP/1.1\r\n".to_vec();
                req.extend_from_slice(&http_junk);
                let _ = exchange(&sock, &req).await;
                let (status, body) = post(&sock, &String::from_utf8_lossy(&http_junk)).await;
                prop_assert!(
                    status == 200 || status == 204 || status == 400,
                    "{} {}",
                    status,
                    body
                );
                Ok(())
            })
        })
        .unwrap();
    let health = rt.block_on(d.call("host.health", json!({})));
    assert_eq!(health["result"]["status"], "ok");
}

// ---------------------------------------------------------------------------------------
// Memory (measuring; run with `--ignored --nocapture`)

#[tokio::test]
#[ignore = "measures RSS; run with --ignored --nocapture"]
async fn memory_comes_back_after_clients_leave() {
    let d = Daemon::start().await;
    let (sock, pid) = (d.socket(), d.pid());
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    let start = rss_kib(pid);

    // 2,000 idle connections (one complete call each), then they leave.
    let mut conns = Vec::new();
    for _ in 0..2000 {
        let mut c = common::RawLines::connect(&sock).await;
        c.call("host.health", json!({})).await;
        conns.push(c);
    }
    let idle = rss_kib(pid);
    drop(conns);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_idle = rss_kib(pid);

    // 20 clients each sending an endless line (20 MB each, over the 10 MiB limit).
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let sock = sock.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = UnixStream::connect(&sock).await.unwrap();
            let chunk = vec![b'x'; 1 << 20];
            s.write_all(b"{\"a\":\"").await.unwrap();
            for _ in 0..20 {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            s
        }));
    }
    let mut streams = Vec::new();
    for t in tasks {
        streams.push(t.await.unwrap());
    }
    let endless = rss_kib(pid);
    drop(streams);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_endless = rss_kib(pid);
    println!(
        "RSS KiB: start {start}, 2000 idle {idle}, after they left {after_idle}, \
         20 endless lines {endless}, after they left {after_endless}"
    );
    // Memory comes back (glibc trims when the last connection leaves), and an endless
    // line costs at most the line limit, and only while it lasts.
    assert!(
        after_idle < start + 16 * 1024,
        "{after_idle} KiB, {start} KiB at start"
    );
    assert!(
        after_endless < start + 16 * 1024,
        "{after_endless} KiB, {start} KiB at start"
    );
    assert!(
        endless < start + 100 * 1024,
        "{endless} KiB with 20 endless lines"
    );
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

// ---------------------------------------------------------------------------------------
// TCP and upgrades

#[tokio::test]
async fn tcp_bearer_scheme_is_case_insensitive_and_a_wildcard_address_is_warned_about() {
    let mut d = Daemon::unstarted();
    std::fs::write(
        d.config_path(),
        json!({"listen": {"tcp": "0.0.0.0:0"}}).to_string(),
    )
    .unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", "s3cret")]).await;
    // The warning is logged before the line naming the address, which this waits for.
    let addr = d.tcp_addr().await;
    let log = d.log();
    assert!(
        log.contains("accepts connections from every network"),
        "{log}"
    );
    let port = addr
        .strip_prefix("0.0.0.0:")
        .unwrap_or_else(|| panic!("not on every network: {addr}"))
        .to_owned();
    let body = health("1");
    for (auth, want) in [
        ("bearer s3cret", 200),
        ("BEARER s3cret", 200),
        ("Bearer s3cret", 200),
        ("Bearer S3CRET", 401),
        ("Basic s3cret", 401),
    ] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap()))
            .await
            .unwrap();
        let (status, _) =
            common::http_on(&mut s, "POST", "/", &body, &[("Authorization", auth)]).await;
        assert_eq!(status, want, "{auth}");
    }
}

#[tokio::test]
async fn a_second_upgrade_on_an_upgraded_connection_is_not_an_upgrade() {
    let d = Daemon::start().await;
    let upgrade = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    // Two upgrade requests in one write: the second arrives as (invalid) WebSocket bytes.
    let out = exchange(&d.socket(), format!("{upgrade}{upgrade}").as_bytes()).await;
    assert_eq!(out.matches("101 Switching Protocols").count(), 1, "{out}");
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

/// Subscriptions belong to their connection and their method: only the matching
/// unsubscribe ends one, once; a finished `subscribe_invoke` is gone by itself; the reply
/// with the id always comes before the first notification, in a batch too.
#[tokio::test]
async fn subscriptions_end_once_by_their_own_unsubscribe_and_reply_before_notifying() {
    let d = Daemon::start().await;
    let mut c = d.raw_lines().await;
    let tools = c.call("subscribe_tools_changed", json!({})).await["result"].clone();
    assert!(tools.is_u64(), "{tools}");
    let mut other = d.raw_lines().await;
    // Another connection's, another method's, by name, as a string: none ends it.
    let r = other
        .call("unsubscribe_tools_changed", json!([tools]))
        .await;
    assert_eq!(r["result"], false, "{r}");
    for (method, params) in [
        ("unsubscribe_invoke", json!([tools])),
        ("unsubscribe_tools_changed", json!({"subscription": tools})),
        ("unsubscribe_tools_changed", json!([tools.to_string()])),
    ] {
        let r = c.call(method, params.clone()).await;
        assert_eq!(r["result"], false, "{method} {params}: {r}");
    }
    let r = c.call("unsubscribe_tools_changed", json!([tools])).await;
    assert_eq!(r["result"], true, "{r}");
    let r = c.call("unsubscribe_tools_changed", json!([tools])).await;
    assert_eq!(r["result"], false, "ended once: {r}");

    // A batch: its reply (with the subscription id) comes first, then the call's events.
    let echo = json!({"name": "bash", "arguments": {"command": "echo batched"}});
    c.send_line(
        &json!([
            {"jsonrpc": "2.0", "id": "s", "method": "subscribe_invoke", "params": echo},
            {"jsonrpc": "2.0", "id": "h", "method": "host.health"}
        ])
        .to_string(),
    )
    .await;
    let batch = c.recv().await;
    let replies = batch
        .as_array()
        .unwrap_or_else(|| panic!("a batch reply first: {batch}"));
    let sub = replies
        .iter()
        .find(|r| r["id"] == "s")
        .map(|r| r["result"].clone())
        .unwrap();
    loop {
        let n = c.recv().await;
        assert_eq!(n["method"], "invoke_event", "{n}");
        assert_eq!(n["params"]["subscription"], sub, "{n}");
        if n["params"]["result"]["kind"] == "result" {
            assert!(n.to_string().contains("batched"), "{n}");
            break;
        }
    }
    let r = c.call("unsubscribe_invoke", json!([sub])).await;
    assert_eq!(
        r["result"], false,
        "a finished call's subscription is gone: {r}"
    );
}

/// One connection holds at most 1,024 subscriptions; the next is refused, and ending one
/// makes room again.
#[tokio::test]
async fn a_connection_holds_at_most_1024_subscriptions() {
    let d = Daemon::start().await;
    let mut c = d.raw_lines().await;
    let mut subs = Vec::new();
    // In rounds, so neither side's socket buffer fills while the other is not reading.
    for _ in 0..16 {
        for _ in 0..64 {
            c.send("subscribe_tools_changed", json!({})).await;
        }
        for _ in 0..64 {
            subs.push(c.recv().await["result"].clone());
        }
    }
    assert!(subs.iter().all(Value::is_u64), "{subs:?}");
    let distinct: std::collections::HashSet<String> = subs.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), 1024);
    let r = c.call("subscribe_tools_changed", json!({})).await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    let r = c.call("unsubscribe_tools_changed", json!([subs[0]])).await;
    assert_eq!(r["result"], true, "{r}");
    let r = c.call("subscribe_tools_changed", json!({})).await;
    assert!(r["result"].is_u64(), "{r}");
}

/// A `call_id` that a call in flight already has is refused with `-32602` on `invoke` and,
/// before any subscription exists, on `subscribe_invoke`; the running call is untouched.
#[tokio::test]
async fn a_call_id_in_flight_is_refused_on_invoke_and_subscribe_invoke() {
    let d = Daemon::start().await;
    let mut first = d.raw_lines().await;
    let slow = json!({"name": "bash", "call_id": "dup", "arguments": {"command": "sleep 30"}});
    let slow_id = first.send("invoke", slow).await;
    d.wait_for_call("dup").await;
    let mut other = d.raw_lines().await;
    let again = json!({"name": "read_file", "call_id": "dup", "arguments": {"path": "x"}});
    for method in ["invoke", "subscribe_invoke"] {
        let r = other.call(method, again.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{method}: {r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("already in use"), "{method}: {r}");
    }
    let r = other.call("cancel", json!({"call_id": "dup"})).await;
    assert_eq!(r["result"]["cancelled"], true, "{r}");
    let r = loop {
        let m = first.recv().await;
        if m["id"] == slow_id {
            break m;
        }
    };
    assert_eq!(r["result"]["result"]["error_kind"], "cancelled", "{r}");
}

// ---------------------------------------------------------------------------------------
// Connection budgets and the handshake deadline

/// The port of the daemon's TCP listener, from its start-up log.
async fn tcp_port(d: &Daemon) -> u16 {
    let addr = d.tcp_addr().await;
    addr.parse::<std::net::SocketAddr>()
        .unwrap_or_else(|e| panic!("{addr}: {e}"))
        .port()
}

/// A keep-alive JSON-RPC POST of `host.health` with `Authorization: Bearer <token>`.
fn authorized_health(token: &str) -> String {
    let body = health("1");
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Whether the daemon closes `s` (EOF or reset, nothing written) within 5 s.
async fn closed_silently<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await {
        Ok(_) => out.is_empty(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn idle_tcp_connections_lock_out_neither_the_unix_socket_nor_a_client_with_the_token() {
    let mut d = Daemon::unstarted();
    let limits = json!({"listen": {
        "tcp": "127.0.0.1:0",
        "max_tcp_connections": 6,
        "max_tcp_unauthenticated": 3,
        "handshake_timeout_ms": 1500,
    }});
    std::fs::write(d.config_path(), limits.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", "s3cret")]).await;
    let addr = ("127.0.0.1", tcp_port(&d).await);

    // Many more idle TCP connections than either TCP budget, and an idle Unix one.
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let mut idle_unix = UnixStream::connect(d.socket()).await.unwrap();
    // The Unix socket is served at once, by the CLI too.
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    let mut cli = common::toolhost(d.dir.path());
    cli.arg("--socket").arg(d.socket()).arg("health");
    let status = cli.output().await.unwrap().status;
    assert!(status.success(), "toolhost health: {status}");
    // A client that presents the token at once gets in, although idle connections hold
    // every unauthenticated slot, and stays in past the deadline.
    let mut authed = tokio::net::TcpStream::connect(addr).await.unwrap();
    authed
        .write_all(authorized_health("s3cret").as_bytes())
        .await
        .unwrap();
    assert!(read_tcp_response(&mut authed)
        .await
        .starts_with("HTTP/1.1 200"));
    // The newest idle connection, opened after it, is closed by its deadline (as are all the
    // others, sooner), and nothing was written to any of them.
    let mut last = tokio::net::TcpStream::connect(addr).await.unwrap();
    for s in idle.iter_mut().chain([&mut last]) {
        assert!(
            closed_silently(s).await,
            "an idle tcp connection stayed open"
        );
    }
    assert!(
        closed_silently(&mut idle_unix).await,
        "an idle unix connection stayed open"
    );
    authed
        .write_all(authorized_health("s3cret").as_bytes())
        .await
        .unwrap();
    assert!(read_tcp_response(&mut authed)
        .await
        .starts_with("HTTP/1.1 200"));

    // Authenticated connections fill the TCP budget; the next is closed at accept, and the
    // Unix socket is not affected.
    let mut full = vec![authed];
    for _ in 1..6 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(authorized_health("s3cret").as_bytes())
            .await
            .unwrap();
        assert!(read_tcp_response(&mut s).await.starts_with("HTTP/1.1 200"));
        full.push(s);
    }
    let mut over = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = over.write_all(authorized_health("s3cret").as_bytes()).await;
    assert!(
        closed_silently(&mut over).await,
        "a 7th tcp connection was served"
    );
    assert_eq!(d.http("GET", "/health", "").await.0, 200);
    // A slot comes back when a connection ends.
    drop(full.pop());
    eventually(5, "a tcp slot comes back", || async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut out = Vec::new();
        let _ = s.write_all(authorized_health("s3cret").as_bytes()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut out)).await;
        out.starts_with(b"HTTP/1.1 200")
    })
    .await;
}

/// Reads one HTTP response whose body is a JSON object from a TCP stream.
async fn read_tcp_response(s: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while !out.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("the daemon answers")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn an_oversized_websocket_message_is_answered_too_big_and_the_connection_stays() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let d = Daemon::start_with(Some(json!({"limits": {"max_request_bytes": 4096}}))).await;
    let mut ws = ws_connect(&d.socket()).await;
    let answer = async |ws: &mut tokio_tungstenite::WebSocketStream<UnixStream>| {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an answer")
            .expect("the connection stays open")
            .unwrap();
        parse(m.to_text().unwrap())
    };
    let fits = format!(
        r#"{{"jsonrpc":"2.0","id":"fits","method":"host.health","params":{{"pad":"{}"}}}}"#,
        "x".repeat(3000)
    );
    let frame = |data: &str, op: Data, fin: bool| {
        Message::Frame(Frame::message(data.to_owned(), OpCode::Data(op), fin))
    };
    let oversized = [
        // One text frame, a binary one far larger than a read buffer, and a message whose
        // second fragment takes it over the limit (its first was already passed on).
        vec![Message::text("x".repeat(5000))],
        vec![Message::binary(vec![b'x'; 300_000])],
        vec![
            frame(&fits[..2000], Data::Text, false),
            frame(&"y".repeat(3000), Data::Continue, false),
            frame("z", Data::Continue, true),
        ],
    ];
    for (i, message) in oversized.into_iter().enumerate() {
        for m in message {
            ws.send(m).await.unwrap();
        }
        let reply = answer(&mut ws).await;
        assert_eq!(reply["error"]["code"], -32007, "message {i}: {reply}");
        assert_eq!(reply["id"], Value::Null, "message {i}: {reply}");
        ws.send(Message::text(health(&i.to_string())))
            .await
            .unwrap();
        let reply = answer(&mut ws).await;
        assert_eq!(
            reply["result"]["status"], "ok",
            "after message {i}: {reply}"
        );
    }
    // A message under the limit in fragments runs as one (and its params are checked).
    ws.send(frame(&fits[..2000], Data::Text, false))
        .await
        .unwrap();
    ws.send(frame(&fits[2000..], Data::Continue, true))
        .await
        .unwrap();
    let reply = answer(&mut ws).await;
    assert!(
        reply["id"] == "fits" && reply["error"]["code"] == -32602,
        "{reply}"
    );
}
