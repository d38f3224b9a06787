//! Issue 32, item 5, against the real binary: requests still arriving share one memory
//! budget over all connections (`limits.max_buffered_request_bytes`), so many clients each
//! holding an unterminated line of nearly `max_request_bytes` cannot grow the daemon by
//! their sum; a large request past the budget is refused at once, in every framing, and
//! small requests still pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{eventually, http_request, Daemon, RawLines, Ws};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const MIB: usize = 1024 * 1024;

/// Whether `reply` is the refusal of a request for want of room in the budget.
fn no_room(reply: &Value) -> bool {
    reply["error"]["code"] == -32007
        && reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("limits.max_buffered_request_bytes"))
}

/// The start of a request whose last param is a string of `pad` bytes, left open.
fn open_request(id: usize, pad: usize) -> Vec<u8> {
    let mut line =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"host.health","params":{{"pad":""#)
            .into_bytes();
    line.resize(line.len() + pad, b'x');
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_unterminated_ten_mib_lines_stay_within_the_budget() {
    let d = Daemon::start().await;
    let sock = d.socket();
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    let idle = d.rss_kib();

    // 40 clients, each sending a request line of nearly 10 MiB (under the default
    // `max_request_bytes`) and not ending it.
    let clients = 40;
    let mut sending = Vec::new();
    for id in 1..=clients {
        let sock = sock.clone();
        sending.push(tokio::spawn(async move {
            let mut c = RawLines::connect(&sock).await;
            let line = open_request(id, 10 * MIB - 200);
            for chunk in line.chunks(MIB) {
                c.writer.write_all(chunk).await.unwrap();
            }
            c
        }));
    }
    let mut conns = Vec::new();
    for s in sending {
        conns.push(s.await.unwrap());
    }
    let held = d.rss_kib();

    // Meanwhile a small request on a new connection is answered.
    let mut fresh = RawLines::connect(&sock).await;
    let health = fresh.call("host.health", json!({})).await;
    assert_eq!(health["result"]["status"], "ok", "{health}");
    println!("RSS KiB: idle {idle}, 40 unterminated 10 MiB lines {held}");
    assert!(
        held < idle + 64 * 1024,
        "40 unterminated lines took {} KiB above idle",
        held - idle
    );

    // Each line gets exactly one answer: the refusal, sent at once, or (for the few the
    // budget could hold whole) its own reply once it ends. The connection stays usable.
    let mut refused = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        c.writer.write_all(b"\"}}\n").await.unwrap();
        let first = c.recv().await;
        if no_room(&first) {
            refused += 1;
        } else {
            assert_eq!(first["id"], i + 1, "{first}");
        }
        let next = c.call("host.health", json!({})).await;
        assert_eq!(next["result"]["status"], "ok", "{next}");
    }
    assert!(
        refused >= clients - 32 / 10,
        "only {refused} of {clients} lines were refused"
    );
}

#[tokio::test]
async fn past_the_budget_large_requests_are_refused_in_every_framing_and_small_ones_pass() {
    let d = Daemon::start_with(Some(json!({
        "limits": {"max_request_bytes": MIB, "max_buffered_request_bytes": MIB}
    })))
    .await;
    let sock = d.socket();

    // One client holds nearly the whole budget with a line it does not end.
    let mut holder = RawLines::connect(&sock).await;
    holder
        .writer
        .write_all(&open_request(1, MIB - 200))
        .await
        .unwrap();

    // A large POST body is refused with 503 (it may fit later), a small one passes.
    let large = String::from_utf8(open_request(2, MIB / 2)).unwrap() + "\"}}";
    let refusal = std::sync::Mutex::new(String::new());
    eventually(10, "a large POST refused for want of room", || async {
        let (status, body) = http_request(&sock, "POST", "/", &large).await;
        *refusal.lock().unwrap() = body;
        status == 503
    })
    .await;
    let refusal = refusal.into_inner().unwrap();
    assert!(
        no_room(&serde_json::from_str(&refusal).unwrap()),
        "{refusal}"
    );
    let small = json!({"jsonrpc":"2.0","id":3,"method":"host.health"}).to_string();
    let (status, body) = http_request(&sock, "POST", "/", &small).await;
    assert_eq!(status, 200, "{body}");
    // Nor can a request head grow without bound outside the budget: hyper answers 431
    // and closes, the rest of the head unread (so the answer may be followed by a reset).
    let mut s = UnixStream::connect(&sock).await.unwrap();
    let head = format!(
        "GET /health HTTP/1.1\r\nX-Pad: {}\r\n",
        "x".repeat(100 * 1024)
    );
    let _ = s.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    // A large WebSocket message is answered with the refusal and the WebSocket stays.
    let mut ws = Ws::connect(&sock).await;
    ws.send("host.health", json!({"pad": "x".repeat(MIB / 2)}))
        .await;
    let answer = ws.recv().await;
    assert!(no_room(&answer), "{answer}");
    let health = ws.call("host.health", json!({})).await;
    assert_eq!(health["result"]["status"], "ok", "{health}");

    // A second large line is refused at once, before it ends.
    let mut second = RawLines::connect(&sock).await;
    second
        .writer
        .write_all(&open_request(4, MIB / 2))
        .await
        .unwrap();
    let answer = second.recv().await;
    assert!(no_room(&answer), "{answer}");

    // Once the holder's line ends, the budget is free again: the same sizes pass.
    holder.writer.write_all(b"\"}}\n").await.unwrap();
    assert_eq!(holder.recv().await["id"], 1);
    ws.send("host.health", json!({"pad": "x".repeat(MIB / 2)}))
        .await;
    let answer = ws.recv().await;
    assert!(!no_room(&answer), "{answer}");
    let (status, body) = http_request(&sock, "POST", "/", &large).await;
    assert_ne!(status, 503, "{body}");
}

#[tokio::test]
async fn a_websocket_message_begun_must_end_in_time_and_idle_websockets_stay() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let mut d = Daemon::unstarted();
    d.spawn(&[("TOOLHOST_FRAME_TIMEOUT_MS", "300")]).await;
    let sock = d.socket();
    let connect = || async {
        let s = UnixStream::connect(&sock).await.unwrap();
        tokio_tungstenite::client_async("ws://localhost/", s)
            .await
            .unwrap()
            .0
    };
    let mut idle = connect().await;
    let mut slow = connect().await;
    // A masked binary frame announcing 1,000 bytes, of which 10 come.
    let mut frame = vec![0x82, 0x80 | 126, 0x03, 0xe8, 0, 0, 0, 0];
    frame.extend([b'x'; 10]);
    slow.get_mut().write_all(&frame).await.unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(Ok(m)) = slow.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "an unfinished message held its connection");
    // The WebSocket idle all that time (between messages) is still served.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "host.health"}).to_string();
    idle.send(Message::text(call)).await.unwrap();
    let reply = idle.next().await.unwrap().unwrap();
    let reply: Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert_eq!(reply["result"]["status"], "ok", "{reply}");
}
