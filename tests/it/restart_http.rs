//! The official Python SDK over streamable HTTP through daemon restarts (issue 40), in both
//! eras: a call in flight when the daemon stops ends with an answer well before its own
//! timeout, and the client keeps calling through a SIGTERM and a `kill -9` restart (a
//! 2025-11-25 client with the same `Mcp-Session-Id`, taken up by the new daemon).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Daemon;
use serde_json::{json, Value};

async fn through_restarts(mode: &str) -> Value {
    let d = Daemon::start().await;
    let socket = d.socket().display().to_string();
    let pid = d.pid().to_string();
    let argv = d.serve_argv();
    let marker = d.dir.path().join("started").display().to_string();
    let seen = common::python_sdk(
        "http_restart.py",
        &[mode, common::BIN, &socket, &pid, &argv, &marker],
        &[],
    )
    .await;
    eprintln!("{mode}: {seen}");
    assert_eq!(
        seen["calls"],
        json!([
            ["before", false, "before"],
            ["after-sigterm", false, "after-sigterm"],
            ["after-kill9", false, "after-kill9"]
        ]),
        "{seen}"
    );
    assert_eq!(seen["tools_after"], true, "{seen}");
    // A call in flight when the daemon stops: an error that says so, within the daemon's
    // shutdown grace (5 s) and then some, not the client's 120 s timeout.
    let signals: &[&str] = if mode == "legacy" {
        &["sigterm", "kill9"]
    } else {
        // A new-era call's answer is one JSON body: killed before it, the daemon leaves the
        // POST with no response, which the Python SDK raises out of its client.
        &["sigterm"]
    };
    for how in signals {
        let inflight = &seen[format!("inflight-{how}")];
        assert!(
            inflight["after_stop"].as_f64().unwrap() < 15.0,
            "the call in flight at {how} waited: {seen}"
        );
        assert!(
            inflight["is_error"] == true || inflight.get("exception").is_some(),
            "{how}: {seen}"
        );
    }
    let said = seen["inflight-sigterm"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("may or may not have run"), "{seen}");
    seen
}

#[tokio::test]
async fn the_python_sdk_over_http_keeps_its_session_through_restarts() {
    let seen = through_restarts("legacy").await;
    // One Mcp-Session-Id from the first call to the last: the new daemons took it up.
    assert_eq!(
        seen["sent_session_ids"].as_array().unwrap().len(),
        1,
        "{seen}"
    );
}

#[tokio::test]
async fn the_python_sdk_over_http_in_the_new_era_needs_nothing_through_restarts() {
    let seen = through_restarts("2026-07-28").await;
    assert!(
        seen["sent_session_ids"].as_array().unwrap().is_empty(),
        "stateless: {seen}"
    );
}
