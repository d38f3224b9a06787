//! An upstream's `input_required` for `prompts/get`, `resources/read` and `tools/call`,
//! through the facade in both eras of the client: a 2026-07-28 client gets
//! `input_required` (and answers it itself); a 2025-11-25 client is asked with the classic
//! requests (`elicitation/create`, `sampling/createMessage`) and the facade retries for it,
//! or gets `-32600` naming the capability it did not declare. The upstream is the fixture
//! server with `FIXTURE_ASKS=1` (a prompt, a resource and a tool that each ask for a name
//! and a model's answer with one `input_required`); the clients are the Python MCP SDK's
//! `Client` in both modes, over stdio and HTTP, and raw JSON over `toolhost mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::new_era::{self, RawStdio};
use common::{eventually, Daemon, BIN, FIXTURE};
use serde_json::{json, Value};

/// A daemon whose MCP server `fx` asks ([`FIXTURE_ASKS`]), its events in `events`.
async fn start() -> Daemon {
    let mut d = Daemon::unstarted();
    let events = d.dir.path().join("events");
    let cfg = json!({"mcp_servers": {"fx": {"command": FIXTURE,
        "env": {"FIXTURE_ASKS": "1", "FIXTURE_EVENTS_FILE": events}}}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(30, "the fixture's prompt to be listed", || async {
        let list = d.call("list_prompts", json!({})).await;
        list.to_string().contains("mcp_fx_asked")
    })
    .await;
    d
}

fn events(d: &Daemon) -> String {
    std::fs::read_to_string(d.dir.path().join("events")).unwrap_or_default()
}

/// The Python SDK's `Client` in `mode`, over stdio and HTTP: what it saw.
pub(crate) async fn python(d: &Daemon, mode: &str) -> Value {
    let socket = d.socket();
    let args = ["asked", mode, BIN, socket.to_str().unwrap()];
    common::python_sdk("client.py", &args, &[]).await
}

pub(crate) fn answered(seen: &Value) {
    for transport in ["stdio", "http"] {
        let got = &seen[transport];
        assert_eq!(got["prompt"], "Py / hi", "{seen}");
        assert_eq!(got["resource"], "Py / hi", "{seen}");
        assert_eq!(got["tool"], "Py / hi", "{seen}");
        assert_eq!(got["tool_error"], false, "{seen}");
    }
}

/// A 2025-11-25 client (the SDK in `legacy` mode) is asked with classic requests for the
/// prompt, the resource and the tool, and gets their final answers.
#[tokio::test]
async fn an_old_era_client_is_asked_classically_for_prompts_resources_and_tools() {
    let d = start().await;
    let seen = python(&d, "legacy").await;
    answered(&seen);
    let asked: Vec<&str> = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for what in ["prompt", "resource", "tool"] {
        let n = asked.iter().filter(|a| a.ends_with(what)).count();
        assert_eq!(n, 2, "one elicitation per transport for the {what}: {seen}");
    }
    assert_eq!(
        asked.iter().filter(|a| **a == "sampling").count(),
        6,
        "{seen}"
    );
    // The upstream spoke 2026-07-28 throughout: it asked with input_required each time.
    let log = events(&d);
    for what in ["prompt", "resource", "tool"] {
        let n = log.matches(&format!("input_required {what}")).count();
        assert_eq!(n, 2, "{what} asked once per transport: {log}");
    }
}

/// A 2026-07-28 client (the SDK pinned to it) gets `input_required` and answers it itself.
#[tokio::test]
async fn a_new_era_client_answers_the_upstreams_input_required_itself() {
    let d = start().await;
    let seen = python(&d, new_era::NEW).await;
    answered(&seen);
    assert_eq!(seen["asked"].as_array().unwrap().len(), 12, "{seen}");
}

/// Raw JSON: a new-era `resources/read` answers the upstream's own questions and state
/// as they came, and the retry with them reads the resource.
#[tokio::test]
async fn a_new_era_resource_read_passes_the_questions_and_state_through() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    let caps = json!({"elicitation": {}, "sampling": {}});
    let meta = new_era::meta("raw-asked", caps);
    mcp.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                    "params": {"uri": "fixture://asked", "_meta": meta}}),
    )
    .await;
    let first = mcp.next().await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["user"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        result["inputRequests"]["model"]["method"],
        "sampling/createMessage"
    );
    let state = result["requestState"].as_str().unwrap();
    assert_eq!(state, " state \"1\" \\ é ", "{first}");
    let responses = json!({
        "user": {"action": "accept", "content": {"name": "Raw"}},
        "model": {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"},
    });
    mcp.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                    "params": {"uri": "fixture://asked", "_meta": meta,
                               "inputResponses": responses, "requestState": state}}),
    )
    .await;
    let done = mcp.next().await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["contents"][0]["text"], "Raw / yes", "{done}");
}

/// Raw JSON: an old-era client that declared elicitation but not sampling is asked
/// nothing and gets `-32600` naming `sampling`, for the prompt and the resource.
#[tokio::test]
async fn an_old_era_client_without_the_capability_gets_invalid_request_naming_it() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "old", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get",
               "params": {"name": "mcp_fx_asked"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
               "params": {"uri": "fixture://asked"}}),
    ] {
        mcp.send(m).await;
    }
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let m = mcp.next().await;
        let method = m["method"].as_str().unwrap_or_default();
        assert!(
            !method.contains('/') || method.starts_with("notifications/"),
            "nothing is asked: {m}"
        );
        if m["id"] == 2 || m["id"] == 3 {
            seen.push(m);
        }
    }
    for m in seen {
        assert_eq!(m["error"]["code"], -32600, "{m}");
        let message = m["error"]["message"].as_str().unwrap();
        assert!(message.contains("sampling/createMessage"), "{m}");
        assert!(message.contains("'sampling'"), "{m}");
        assert_eq!(
            m["error"]["data"]["requiredCapabilities"],
            json!({"sampling": {}}),
            "{m}"
        );
    }
}
