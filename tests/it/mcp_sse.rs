//! Legacy HTTP+SSE upstream servers (issue 25): `"type": "sse"`, and the streamable-HTTP
//! fallback of the spec for a `url` whose server refuses the POST. Against the real
//! server-everything from npm in its `sse` mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::mcp::legacy_sse_server;
use common::*;
use serde_json::{json, Value};

async fn ready(d: &Daemon, server: &str) -> Value {
    eventually(30, &format!("{server} ready"), || async {
        d.call("mcp.status", json!({"server": server})).await["result"]["servers"][0]["state"]
            == "ready"
    })
    .await;
    d.call("mcp.status", json!({"server": server})).await["result"]["servers"][0].clone()
}

#[tokio::test]
async fn a_legacy_sse_server_is_listed_and_called() {
    let (_server, url) = legacy_sse_server().await;
    let d = Daemon::start_in(|_| json!({"mcp_servers": {"ev": {"type": "sse", "url": url}}})).await;
    let status = ready(&d, "ev").await;
    assert_eq!(status["transport"], "sse", "{status}");
    let names = d.call("list_tools", json!({})).await["result"].clone();
    assert!(tool_names(&names).contains(&"mcp_ev_echo"), "{names}");
    let out = d
        .invoke("mcp_ev_echo", json!({"message": "over sse"}))
        .await;
    assert_eq!(out["output"], "Echo: over sse", "{out}");
    // Two calls at once: answers are matched to requests over the one stream.
    let (a, b) = tokio::join!(
        d.invoke("mcp_ev_echo", json!({"message": "a"})),
        d.invoke("mcp_ev_echo", json!({"message": "b"}))
    );
    assert_eq!(
        (a["output"].clone(), b["output"].clone()),
        (json!("Echo: a"), json!("Echo: b"))
    );
}

#[tokio::test]
async fn an_http_url_that_refuses_the_post_falls_back_to_legacy_sse() {
    let (_server, url) = legacy_sse_server().await;
    let d = Daemon::start_in(|_| json!({"mcp_servers": {"ev": {"url": url}}})).await;
    ready(&d, "ev").await;
    let out = d
        .invoke("mcp_ev_echo", json!({"message": "fell back"}))
        .await;
    assert_eq!(out["output"], "Echo: fell back", "{out}");
}
