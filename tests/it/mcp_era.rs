//! Our MCP client in both eras (issue 26): a server of 2026-07-28 is probed with
//! `server/discover` and spoken to with per-request `_meta`; one of the `initialize` era
//! gets the handshake after its refusal (or its silence); `input_required` results are
//! answered by the frontend of the call and retried; list changes and resource updates come
//! through `subscriptions/listen`. Against real servers: our fixture
//! (tests/fixtures/mcp_server.rs, rmcp 3.11, both eras unless `FIXTURE_ERA=2025`),
//! server-everything from npm (TypeScript SDK v1: the `initialize` era) and a Python SDK
//! 2.x server (tests/facade_py/upstream.py).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::mcp::http_fixture;
use common::*;
use serde_json::{json, Value};

const NEW: &str = "2026-07-28";
const OLD: &str = "2025-11-25";

/// A stdio server block running our fixture with its asking tools and its events file in
/// `dir`, plus `env`.
fn fixture(dir: &Path, env: Value) -> Value {
    let mut all = json!({
        "FIXTURE_INPUTS": "1",
        "FIXTURE_EVENTS_FILE": dir.join("fixture.events"),
    });
    for (k, v) in env.as_object().unwrap() {
        all[k] = v.clone();
    }
    json!({"command": FIXTURE, "env": all})
}

fn events(d: &Daemon) -> String {
    std::fs::read_to_string(d.dir.path().join("fixture.events")).unwrap_or_default()
}

async fn daemon_with(servers: impl FnOnce(&Path) -> Value) -> Daemon {
    Daemon::start_in(|dir| json!({"mcp_servers": servers(dir)})).await
}

/// The status of `server` once it is `ready`.
async fn ready(d: &Daemon, server: &str) -> Value {
    let mut last = Value::Null;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let r = d.call("mcp.status", json!({"server": server})).await;
        last = r["result"]["servers"][0].clone();
        if last["state"] == "ready" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("server {server} never became ready: {last}");
}

/// Starts a `subscribe_invoke` on `c`.
async fn subscribe(c: &mut RawLines, params: Value) {
    let r = c.call("subscribe_invoke", params).await;
    assert!(r["result"].is_u64() || r["result"].is_string(), "{r}");
}

/// The next `invoke_event` of `kind` on `c`, after the ones before it.
async fn event_of(c: &mut RawLines, kind: &str) -> Value {
    loop {
        let n = c.recv().await;
        if n["method"] == "invoke_event" && n["params"]["result"]["kind"] == kind {
            return n["params"]["result"].clone();
        }
        assert_ne!(
            n["params"]["result"]["kind"], "result",
            "a result while waiting for {kind}: {n}"
        );
    }
}

#[tokio::test]
async fn each_server_speaks_its_era_over_stdio_and_http_and_status_says_which() {
    let (_new_http, new_url) = http_fixture(&[]).await;
    let (_old_http, old_url) = http_fixture(&[("FIXTURE_ERA", "2025")]).await;
    let everything = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let d = daemon_with(|dir| {
        json!({
            "new": fixture(dir, json!({})),
            "old": fixture(dir, json!({"FIXTURE_ERA": "2025"})),
            "newhttp": {"url": new_url},
            "oldhttp": {"url": old_url},
            "everything": {"command": "node", "args": [everything, "stdio"]},
        })
    })
    .await;
    for (server, era) in [
        ("new", NEW),
        ("old", OLD),
        ("newhttp", NEW),
        ("oldhttp", OLD),
        // The TypeScript SDK v1 has no server/discover.
        ("everything", OLD),
    ] {
        let status = ready(&d, server).await;
        assert_eq!(status["protocol_version"], era, "{server}: {status}");
    }
    // A server of the new era refuses a request without the `_meta` it needs, so an
    // answer is proof of it on the direct stdio calls and rmcp's HTTP ones alike.
    for server in ["new", "old", "newhttp", "oldhttp"] {
        let r = d
            .invoke(&format!("mcp_{server}_echo"), json!({"text": server}))
            .await;
        assert_eq!(r["output"], server, "{r}");
    }
    let discovered = events(&d);
    assert!(!discovered.contains("discover hangs"), "{discovered}");
}

#[tokio::test]
async fn a_server_silent_on_discover_gets_initialize_within_its_startup_timeout() {
    let (_http, url) = http_fixture(&[("FIXTURE_DISCOVER", "hang")]).await;
    let d = daemon_with(|dir| {
        let mut quiet = fixture(dir, json!({"FIXTURE_DISCOVER": "hang"}));
        quiet["startup_timeout_ms"] = json!(3000);
        json!({"quiet": quiet, "quietweb": {"url": url, "startup_timeout_ms": 3000}})
    })
    .await;
    for server in ["quiet", "quietweb"] {
        let status = ready(&d, server).await;
        assert_eq!(status["protocol_version"], OLD, "{server}: {status}");
        // The first attempt connected: the probe's bound left the handshake its time.
        assert_eq!(status["restarts"], 0, "{server}: {status}");
        assert_eq!(status["consecutive_failures"], 0, "{server}: {status}");
        let r = d
            .invoke(&format!("mcp_{server}_echo"), json!({"text": "late"}))
            .await;
        assert_eq!(r["output"], "late", "{r}");
    }
    assert!(events(&d).contains("discover hangs"), "{}", events(&d));
}

#[tokio::test]
async fn progress_and_cancel_reach_a_new_era_server_over_stdio_and_http() {
    let web_dir = tempfile::tempdir().unwrap();
    let web_events = web_dir.path().join("web.events");
    let (_http, url) = http_fixture(&[("FIXTURE_EVENTS_FILE", web_events.to_str().unwrap())]).await;
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({})), "web": {"url": url}})).await;
    let events_of = |server: &str| match server {
        "fx" => events(&d),
        _ => std::fs::read_to_string(&web_events).unwrap_or_default(),
    };
    for server in ["fx", "web"] {
        assert_eq!(ready(&d, server).await["protocol_version"], NEW);
        let mut c = d.raw_lines().await;
        subscribe(
            &mut c,
            json!({"name": format!("mcp_{server}_sleep"), "arguments": {"ms": 300, "progress": true}}),
        )
        .await;
        let update = event_of(&mut c, "update").await;
        assert!(update["progress"]["progress"].is_number(), "{update}");
        let result = event_of(&mut c, "result").await;
        assert_eq!(result["result"]["output"], "slept 300 ms", "{result}");

        // Cancelled once the server has it: the server hears the cancel.
        let call_id = format!("long-{server}");
        subscribe(
            &mut c,
            json!({"name": format!("mcp_{server}_sleep"), "arguments": {"ms": 20000}, "call_id": call_id}),
        )
        .await;
        eventually(10, "the long sleep to reach the server", || async {
            events_of(server).matches("called sleep").count() == 2
        })
        .await;
        let r = d.call("cancel", json!({"call_id": call_id})).await;
        assert_eq!(r["result"]["cancelled"], true, "{r}");
        let result = event_of(&mut c, "result").await;
        assert_eq!(result["result"]["error_kind"], "cancelled", "{result}");
        eventually(10, "the server to hear the cancel", || async {
            events_of(server).contains("cancelled sleep")
        })
        .await;
    }
}

/// Calls `mrtr_ask` of `server` as a frontend that answers elicitation, answers it, and
/// returns the call's output.
async fn mrtr_round_trip(d: &Daemon, server: &str) -> Value {
    let mut c = d.raw_lines().await;
    let call_id = format!("mrtr-{server}");
    subscribe(
        &mut c,
        json!({"name": format!("mcp_{server}_mrtr_ask"), "arguments": {"message": "your name?"},
               "call_id": call_id, "inputs": ["elicitation"]}),
    )
    .await;
    let q = event_of(&mut c, "input_request").await;
    assert_eq!(q["input"], "elicitation", "{q}");
    assert_eq!(q["params"]["message"], "your name?", "{q}");
    // From another connection, as any frontend may answer its own call's question.
    let mut other = d.raw_lines().await;
    let r = other
        .call(
            "invoke.respond",
            json!({"call_id": call_id, "request_id": q["request_id"],
                   "result": {"action": "accept", "content": {"name": "Ada"}}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = event_of(&mut c, "result").await;
    assert_eq!(result["result"]["ok"], true, "{result}");
    result["result"]["output"].clone()
}

#[tokio::test]
async fn input_required_is_answered_by_the_calls_frontend_and_retried_with_its_state() {
    let (_http, url) = http_fixture(&[]).await;
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({})), "web": {"url": url}})).await;
    let root = format!("file://{}", d.workspace().display());
    for server in ["fx", "web"] {
        assert_eq!(ready(&d, server).await["protocol_version"], NEW);
        // The name from the frontend, the roots (which this frontend does not answer) from
        // the host, and the fixture's `requestState` came back unchanged (else its tool
        // error `tampered requestState`).
        let output = mrtr_round_trip(&d, server).await;
        assert_eq!(output, format!(r#"accept {{"name":"Ada"}} roots: {root}"#));
    }
    // Over stdio (whose events are written): asked once, then called again with answers.
    assert_eq!(events(&d).matches("input_required mrtr_ask").count(), 1);
    assert_eq!(events(&d).matches("called mrtr_ask").count(), 2);

    // A frontend that answers no elicitation: the call fails, saying why, at once.
    let r = d
        .invoke("mcp_fx_ask_user", json!({"message": "anyone?"}))
        .await;
    assert_eq!(r["ok"], false, "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("asked for input the call cannot give")
            && error.contains("elicitation/create"),
        "{error}"
    );
    // Roots alone are the host's to give.
    let r = d.invoke("mcp_fx_ask_roots", json!({})).await;
    assert_eq!(r["output"], root, "{r}");
}

#[tokio::test]
async fn a_call_waiting_on_its_frontend_for_input_required_is_cancelled_or_times_out() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    ready(&d, "fx").await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_fx_mrtr_ask", "arguments": {"message": "?"},
               "call_id": "wait", "inputs": ["elicitation"]}),
    )
    .await;
    event_of(&mut c, "input_request").await;
    let r = d.call("cancel", json!({"call_id": "wait"})).await;
    assert_eq!(r["result"]["cancelled"], true, "{r}");
    let result = event_of(&mut c, "result").await;
    assert_eq!(result["result"]["error_kind"], "cancelled", "{result}");

    subscribe(
        &mut c,
        json!({"name": "mcp_fx_mrtr_ask", "arguments": {"message": "?"},
               "call_id": "slow", "inputs": ["elicitation"], "timeout_ms": 500}),
    )
    .await;
    event_of(&mut c, "input_request").await;
    let result = event_of(&mut c, "result").await;
    assert_eq!(result["result"]["error_kind"], "timeout", "{result}");
}

#[tokio::test]
async fn list_changes_and_resource_updates_come_through_subscriptions_listen_also_after_a_reconnect(
) {
    let d =
        daemon_with(|dir| json!({"fx": fixture(dir, json!({"FIXTURE_RESOURCES": "fx"}))})).await;
    assert_eq!(ready(&d, "fx").await["protocol_version"], NEW);
    // Subscribed once fx's tools are served: their arrival is not the change awaited.
    common::mcp::wait_serving(&d, "fx", "mcp_fx_echo").await;
    let c = d.client().await;
    let mut changed = c.subscribe_tools_changed().await.unwrap();
    let r = d.invoke("mcp_fx_add_tool", json!({"name": "fresh"})).await;
    assert_eq!(r["ok"], true, "{r}");
    let note = changed.next().await.unwrap().unwrap();
    assert!(note.added.iter().any(|n| n == "mcp_fx_fresh"), "{note:?}");

    // A resource subscription opens the listen again with the URI; the fixture sends its
    // update at once.
    let mut s = d.raw_lines().await;
    let sub = s
        .call("subscribe_resource", json!({"uri": "fixture://shared"}))
        .await;
    assert!(sub.get("result").is_some(), "{sub}");
    let updated = next_notification(&mut s, "resource_updated").await;
    assert_eq!(updated, json!({"uri": "fixture://shared"}));

    // After a reconnect the new connection listens again, with the URI still subscribed.
    let subscribed = || events(&d).matches("subscribed fixture://shared").count();
    assert_eq!(subscribed(), 1);
    let r = d.call("mcp.reload", json!({"server": "fx"})).await;
    assert!(r.get("result").is_some(), "{r}");
    let updated = next_notification(&mut s, "resource_updated").await;
    assert_eq!(updated, json!({"uri": "fixture://shared"}));
    assert_eq!(subscribed(), 2);
    // And the tool list of the new connection still follows its changes.
    let mut changed = c.subscribe_tools_changed().await.unwrap();
    ready(&d, "fx").await;
    let r = d
        .invoke("mcp_fx_add_tool", json!({"name": "fresher"}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
    loop {
        let note = changed.next().await.unwrap().unwrap();
        if note.added.iter().any(|n| n == "mcp_fx_fresher") {
            break;
        }
    }
}

async fn next_notification(conn: &mut RawLines, method: &str) -> Value {
    loop {
        let m = conn.recv().await;
        if m["method"] == method {
            return m["params"]["result"].clone();
        }
    }
}

#[tokio::test]
async fn a_python_sdk_server_of_the_new_era_is_probed_and_its_input_required_answered() {
    let python = common::python_sdk_interpreter().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/facade_py/upstream.py");
    let d = daemon_with(|_| json!({"py": {"command": python, "args": [script]}})).await;
    assert_eq!(ready(&d, "py").await["protocol_version"], NEW);
    let r = d
        .invoke("mcp_py_echo", json!({"text": "from python"}))
        .await;
    assert_eq!(r["output"], "from python", "{r}");
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_py_ask_name", "arguments": {"message": "who?"},
               "call_id": "py", "inputs": ["elicitation"]}),
    )
    .await;
    let q = event_of(&mut c, "input_request").await;
    assert_eq!(q["params"]["message"], "who?", "{q}");
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "py", "request_id": q["request_id"],
                   "result": {"action": "accept", "content": {"name": "Grace"}}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = event_of(&mut c, "result").await;
    assert_eq!(result["result"]["output"], "hello Grace", "{result}");
}
