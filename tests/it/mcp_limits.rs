//! An MCP answer over the 16 MiB message limit fails its call at once with a size error
//! (it used to wait out the whole timeout and say `timeout`), and the server stays usable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");

#[tokio::test]
async fn an_answer_over_the_message_limit_is_a_prompt_size_error() {
    let d = Daemon::start_with(Some(
        json!({"mcp_servers": {"fx": {"command": FIXTURE, "timeout_ms": 60000}}}),
    ))
    .await;
    eventually(20, "fx ready", || async {
        d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let started = Instant::now();
    let r = d
        .invoke("mcp_fx_big", json!({"bytes": 17 * 1024 * 1024}))
        .await;
    assert_eq!(
        r["ok"],
        false,
        "{}",
        &r.to_string()[..r.to_string().len().min(400)]
    );
    assert_eq!(r["error_kind"], "failed", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("over the limit"),
        "{r}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the call waited {:?}",
        started.elapsed()
    );
    // The connection survived.
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "after"})).await["output"],
        "after"
    );
}
