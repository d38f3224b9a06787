//! The four-way era matrix (issue 47): a frontend of either era (the Python MCP SDK's
//! `Client` in `legacy` mode, or pinned to 2026-07-28) against an upstream of either era
//! (the fixture server with `FIXTURE_ASKS=1`, serving both eras or, with `FIXTURE_ERA=2025`,
//! only the `initialize` one), over stdio and HTTP. In each combination the prompt, the
//! resource and the tool ask mid-request for a name (elicitation) and a model's answer
//! (sampling), and the frontend is asked in its own era: an old-era frontend with classic
//! requests, a new-era one with `input_required`. An old-era upstream asks with classic
//! requests, which the host holds its request open for (`src/mcp/held.rs`); a new-era one
//! answers `input_required`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::mcp_asked::{answered, python};

use common::{eventually, Daemon, FIXTURE};
use serde_json::{json, Value};

/// A daemon whose MCP server `fx` asks, serving both eras (`old_era` false: a client that
/// probes gets 2026-07-28) or only the `initialize` one.
async fn start(old_era: bool) -> Daemon {
    let mut d = Daemon::unstarted();
    let events = d.dir.path().join("events");
    let mut env = json!({"FIXTURE_ASKS": "1", "FIXTURE_EVENTS_FILE": events});
    if old_era {
        env["FIXTURE_ERA"] = json!("2025");
    }
    let cfg = json!({"mcp_servers": {"fx": {"command": FIXTURE, "env": env}}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(30, "the fixture's prompt to be listed", || async {
        let list = d.call("list_prompts", json!({})).await;
        list.to_string().contains("mcp_fx_asked")
    })
    .await;
    d
}

/// One combination: the frontend in `mode` gets the final answers of the prompt, the
/// resource and the tool, having been asked in its own era; the upstream asked in its own.
async fn combination(old_upstream: bool, mode: &str) {
    let d = start(old_upstream).await;
    let seen = python(&d, mode).await;
    answered(&seen);
    let asked: Vec<&str> = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // Per transport: one elicitation for each of the three, and three samplings.
    for what in ["prompt", "resource", "tool"] {
        let n = asked.iter().filter(|a| a.ends_with(what)).count();
        assert_eq!(n, 2, "one elicitation per transport for the {what}: {seen}");
    }
    let sampled = asked.iter().filter(|a| **a == "sampling").count();
    assert_eq!(sampled, 6, "{seen}");
    // The upstream asked in its own era, once per transport each.
    let log = std::fs::read_to_string(d.dir.path().join("events")).unwrap_or_default();
    let (its_way, not_its_way) = if old_upstream {
        ("asked", "input_required")
    } else {
        ("input_required", "asked")
    };
    for what in ["prompt", "resource", "tool"] {
        let n = log.matches(&format!("{its_way} {what}\n")).count();
        assert_eq!(n, 2, "{its_way} {what}, once per transport: {log}");
        let other = log.matches(&format!("{not_its_way} {what}\n")).count();
        assert_eq!(other, 0, "{log}");
    }
}

#[tokio::test]
async fn old_era_frontend_new_era_upstream() {
    combination(false, "legacy").await;
}

#[tokio::test]
async fn new_era_frontend_new_era_upstream() {
    combination(false, common::new_era::NEW).await;
}

#[tokio::test]
async fn old_era_frontend_old_era_upstream() {
    combination(true, "legacy").await;
}

#[tokio::test]
async fn new_era_frontend_old_era_upstream() {
    combination(true, common::new_era::NEW).await;
}

/// A retry with a `requestState` the host never gave, or of another prompt than the one
/// held, is refused and leaves the held request waiting for its own retry.
#[tokio::test]
async fn a_held_request_takes_only_its_own_retry() {
    let d = start(true).await;
    let first = d
        .call(
            "get_prompt",
            json!({"name": "mcp_fx_asked", "inputs": ["elicitation", "sampling"]}),
        )
        .await;
    let asked = &first["result"]["input_required"];
    let state = asked["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    let requests = asked["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let user = json!({key.clone(): {"action": "accept", "content": {"name": "Raw"}}});
    let forged = d
        .call(
            "get_prompt",
            json!({"name": "mcp_fx_asked", "input_responses": user, "request_state": "forged"}),
        )
        .await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    let other = d
        .call(
            "read_resource",
            json!({"uri": "fixture://asked", "input_responses": user, "request_state": state}),
        )
        .await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    // Its own retry goes on: the sampling next, then the prompt.
    let second = d
        .call(
            "get_prompt",
            json!({"name": "mcp_fx_asked", "input_responses": user, "request_state": state,
                   "inputs": ["elicitation", "sampling"]}),
        )
        .await;
    let asked = &second["result"]["input_required"];
    let state = asked["requestState"]
        .as_str()
        .expect("a second round")
        .to_owned();
    let (key, request) = asked["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{second}");
    let model = json!({key.clone(): {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}});
    let done = d
        .call(
            "get_prompt",
            json!({"name": "mcp_fx_asked", "input_responses": model, "request_state": state}),
        )
        .await;
    let text = &done["result"]["messages"][0]["content"]["text"];
    assert_eq!(text, "Raw / yes", "{done}");
    // Used once.
    let again = d
        .call(
            "get_prompt",
            json!({"name": "mcp_fx_asked", "input_responses": model, "request_state": state}),
        )
        .await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
}
