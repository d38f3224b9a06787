//! An idle daemon sleeps (issue #48): with a stdio MCP server connected and its config,
//! tool and skill folders watched, none of its threads wakes more than once a second.
//! Polling loops (a debouncer's tick, a store's flusher, a /proc rescan) each woke the
//! daemon several times a second before.

use crate::common;
#[path = "../../benches/support/threads.rs"]
#[allow(dead_code)]
mod threads;

use std::time::Duration;

use common::mcp::{fixture, wait_state};
use common::*;
use serde_json::json;

#[tokio::test]
async fn an_idle_daemon_with_a_server_and_watched_folders_sleeps() {
    let d = Daemon::start_in(|dir| {
        // A workspace tool folder and a user one, so both are watched recursively.
        for folder in [
            "ws/.toolhost/tools",
            "xdg/toolhost/tools",
            "ws/.agents/skills",
        ] {
            std::fs::create_dir_all(dir.join(folder)).unwrap();
        }
        let fx = fixture(dir, "fx", json!({"approval": {"echo": "read_only"}}));
        json!({"mcp_servers": {"fx": fx}})
    })
    .await;
    wait_state(&d, "fx", "ready").await;
    // A burst of work first: calls to the server, and a command (a call's process group,
    // which the escapee scans follow every 0.5 s while it runs).
    for _ in 0..5 {
        let r = d.invoke("mcp_fx_echo", json!({"text": "hi"})).await;
        assert_eq!(r["ok"], true, "{r}");
    }
    let r = d.invoke("bash", json!({"command": "sleep 1"})).await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let pid = d.pid();
    // The burst's last timers run out: the escapee scans back off from 0.5 s after a
    // group's start or end (doubling up to 30 s), a debounce window is 300 ms.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = threads::switches(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let woke = threads::woke(&before, &threads::switches(pid));
    let total: u64 = woke.iter().map(|w| w.1).sum();
    assert!(
        woke.iter().all(|w| w.1 <= 5),
        "a thread of the idle daemon woke more than once a second over 5 s: {woke:?}"
    );
    // A scan that backs off is two wake-ups (the timer's thread and the spawner's), and
    // one may still fall in the window; the 30 s steady state is measured by
    // `benches/sharing.rs idle`.
    assert!(
        total <= 10,
        "the idle daemon woke {total} times in 5 s: {woke:?}"
    );
}

/// An open operator page costs its 1 s metrics and nothing more: its event stream waits on
/// change notices instead of comparing the host's state every 100 ms (20 wake-ups/s
/// before), yet still tells a call at once; once it closes the daemon sleeps again.
#[tokio::test]
async fn an_open_page_wakes_the_daemon_for_its_metrics_only() {
    let d = Daemon::start().await;
    let login = common::http::exchange(
        tokio::net::UnixStream::connect(d.socket()).await.unwrap(),
        "POST",
        "/ui/login",
        &[],
        "",
    )
    .await;
    let body: serde_json::Value = serde_json::from_str(&login.body).unwrap();
    let page = body["page_token"].as_str().unwrap().to_owned();
    let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let headers = [("X-Toolhost-Page", page.as_str())];
    let mut s = common::http::Stream::open(io, "GET", "/ui/events", &headers, "").await;
    assert_eq!(s.status, 200);
    // The page reads its stream all along, as a browser does.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = tokio::spawn(async move {
        while let Some(piece) = s.chunk().await {
            if seen_tx.send(piece).is_err() {
                break;
            }
        }
    });
    read_until(&mut seen, "event: metrics").await;
    // A call is told without a poll to find it.
    assert_eq!(d.invoke("list_dir", json!({"path": "."})).await["ok"], true);
    read_until(&mut seen, "event: calls").await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let pid = d.pid();
    let before = threads::switches(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let woke = threads::woke(&before, &threads::switches(pid));
    let total: u64 = woke.iter().map(|w| w.1).sum();
    // The metrics each second wake the stream's producer and its connection's writer (and
    // the timer once); 8 a second leaves room for a loaded machine, 20 did not.
    assert!(
        total <= 40,
        "with a page open the idle daemon woke {total} times in 5 s: {woke:?}"
    );

    reader.abort();
    let _ = reader.await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = threads::switches(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let woke = threads::woke(&before, &threads::switches(pid));
    let total: u64 = woke.iter().map(|w| w.1).sum();
    assert!(
        total <= 10,
        "after the page closed the idle daemon woke {total} times in 5 s: {woke:?}"
    );
}

/// Reads the page's stream until its text contains `what`.
async fn read_until(seen: &mut tokio::sync::mpsc::UnboundedReceiver<String>, what: &str) {
    let mut text = String::new();
    while !text.contains(what) {
        let piece = tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .unwrap_or_else(|_| panic!("no {what:?} in the stream: {text}"));
        text.push_str(&piece.unwrap_or_else(|| panic!("the stream ended: {text}")));
    }
}
