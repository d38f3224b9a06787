//! MCP servers as tool sources (issue 3), against real servers: our fixture
//! (tests/fixtures/mcp_server.rs) and the npm package @modelcontextprotocol/server-everything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};
use toolhost::protocol::{ErrorKind, InvokeParams, ToolsChanged};

/// A stdio server block running our fixture, with its pid and events files in `dir`.
fn fixture(dir: &Path, extra: Value) -> Value {
    let mut env = json!({
        "FIXTURE_PID_FILE": dir.join("fixture.pids"),
        "FIXTURE_EVENTS_FILE": dir.join("fixture.events"),
    });
    if let Some(e) = extra.get("env").and_then(Value::as_object) {
        for (k, v) in e {
            env[k] = v.clone();
        }
    }
    let mut block = json!({"command": FIXTURE, "env": env});
    for (k, v) in extra.as_object().unwrap() {
        if k != "env" {
            block[k] = v.clone();
        }
    }
    block
}

fn everything() -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        dir.exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) to install server-everything"
    );
    json!({"command": "node", "args": [dir, "stdio"]})
}

/// Starts a daemon whose config has these servers, pre-creating its dir so fixture files land there.
async fn daemon_with(servers: impl FnOnce(&Path) -> Value) -> Daemon {
    Daemon::start_in(|dir| json!({"mcp_servers": servers(dir)})).await
}

async fn wait_state(d: &Daemon, server: &str, state: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..800 {
        let r = d.call("mcp.status", json!({"server": server})).await;
        last = r["result"]["servers"][0].clone();
        if last["state"] == state {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("server {server} never reached {state}: {last}");
}

fn events(d: &Daemon) -> String {
    std::fs::read_to_string(d.dir.path().join("fixture.events")).unwrap_or_default()
}

fn pids(d: &Daemon) -> Vec<i32> {
    std::fs::read_to_string(d.dir.path().join("fixture.pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn tools_are_listed_named_and_described() {
    // Pages of three: the listing must follow the server's cursors to the end.
    let d =
        daemon_with(|dir| json!({"fx": fixture(dir, json!({"env": {"FIXTURE_PAGE_SIZE": "3"}}))}))
            .await;
    wait_state(&d, "fx", "ready").await;
    let r = d.call("list_tools", json!({})).await["result"].clone();
    assert_eq!(
        r["meta"]
            .as_object()
            .unwrap()
            .values()
            .filter(|m| m["server"] == "fx")
            .count(),
        10
    );
    let names: Vec<String> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    for n in [
        "mcp_fx_echo",
        "mcp_fx_add",
        "mcp_fx_sleep",
        "mcp_fx_image",
        "mcp_fx_annotated",
    ] {
        assert!(names.contains(&n.to_owned()), "{n} missing: {names:?}");
    }
    let long: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("mcp_fx_a_tool_with"))
        .collect();
    assert_eq!(long.len(), 1);
    assert_eq!(long[0].len(), 64);
    assert!(names.iter().all(|n| n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')));
    assert_eq!(r["meta"]["mcp_fx_echo"]["source"], "mcp");
    assert_eq!(r["meta"]["mcp_fx_echo"]["server"], "fx");
    assert_eq!(
        r["meta"]["mcp_fx_annotated"]["annotations"]["readOnlyHint"],
        true
    );
    // Annotations do not classify tools unless the server is trusted.
    assert_eq!(r["meta"]["mcp_fx_annotated"]["approval"], Value::Null);
    let mcp = d.call("list_tools", json!({"format": "mcp"})).await["result"].clone();
    let ann = mcp["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp_fx_annotated")
        .unwrap();
    assert_eq!(ann["annotations"]["readOnlyHint"], true);
    // The long-named tool is callable under its public name.
    let res = d.invoke(long[0], json!({"text": "long"})).await;
    assert_eq!(res["output"], "long");
}

#[tokio::test]
async fn calls_map_results_and_validate_arguments_first() {
    let d =
        daemon_with(|dir| json!({"fx": fixture(dir, json!({"approval": {"echo": "read_only"}}))}))
            .await;
    wait_state(&d, "fx", "ready").await;
    let r = d.invoke("mcp_fx_echo", json!({"text": "héllo"})).await;
    assert_eq!(
        r,
        json!({"ok": true, "output": "héllo", "structured_content": {"text": "héllo"}})
    );
    let r = d.invoke("mcp_fx_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(r["output"], "5");
    let r = d.invoke("mcp_fx_fail", json!({"message": "nope"})).await;
    assert_eq!(
        r,
        json!({"ok": false, "error": "nope", "error_kind": "failed"})
    );
    let before = events(&d).matches("called add").count();
    let r = d.invoke("mcp_fx_add", json!({"a": "two"})).await;
    assert_eq!(r["error_kind"], "invalid_arguments");
    let msg = r["error"].as_str().unwrap();
    assert!(
        msg.contains("arguments.a") || msg.contains("arguments.b"),
        "{msg}"
    );
    assert_eq!(
        events(&d).matches("called add").count(),
        before,
        "an invalid call reached the server"
    );
    // Images become control fields with a text placeholder.
    let env = d.call("invoke", json!({"name": "mcp_fx_image"})).await["result"].clone();
    assert!(env["control"]["_image_data_url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));
    assert_eq!(env["control"]["_multimodal"], true);
    assert!(env["result"]["output"]
        .as_str()
        .unwrap()
        .contains("[image: image/png"));
    assert!(env["result"].get("_image_data_url").is_none());
    // Approval classes from the server block apply in strict sessions.
    let s = d
        .call("session.create", json!({"approval": "strict"}))
        .await["result"]["id"]
        .clone();
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_echo", "arguments": {"text": "a"}, "session_id": s}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true);
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_add", "arguments": {"a": 1, "b": 1}, "session_id": s}),
        )
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "denied", "{r}");
}

#[tokio::test]
async fn idle_timeout_cancels_upstream() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({"timeout_ms": 300}))})).await;
    wait_state(&d, "fx", "ready").await;
    let r = d.invoke("mcp_fx_sleep", json!({"ms": 20000})).await;
    assert_eq!(r["error_kind"], "timeout", "{r}");
    assert_eq!(
        r["error"],
        "MCP server 'fx' did not answer within 300 ms (timeout_ms, reset by progress)"
    );
    eventually(10, "the fixture to see notifications/cancelled", || async {
        events(&d).contains("cancelled sleep")
    })
    .await;
    // The server is still usable.
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "ok"})).await["output"],
        "ok"
    );
}

#[tokio::test]
async fn call_timeout_and_cancel_send_cancelled_upstream() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    wait_state(&d, "fx", "ready").await;
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_sleep", "arguments": {"ms": 20000}, "timeout_ms": 1000}),
        )
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "timeout");
    assert_eq!(
        r["result"]["result"]["error"],
        "Tool 'mcp_fx_sleep' timed out after 1000 ms"
    );
    eventually(10, "cancelled after the call timeout", || async {
        events(&d).matches("cancelled sleep").count() == 1
    })
    .await;

    let c = d.client().await;
    let call = tokio::spawn(async move {
        let mut params = InvokeParams::new("mcp_fx_sleep", args(json!({"ms": 20000})));
        params.call_id = Some("zz".into());
        c.invoke(&params).await
    });
    // Cancel once the request has reached the server (a call cancelled earlier never
    // leaves the host, which is right but not what this test is about).
    eventually(10, "the second sleep to reach the server", || async {
        events(&d).matches("called sleep").count() == 2
    })
    .await;
    assert_eq!(
        d.call("cancel", json!({"call_id": "zz"})).await["result"]["cancelled"],
        true
    );
    let r = call.await.unwrap().unwrap();
    assert_eq!(r.result.error_kind, Some(ErrorKind::Cancelled), "{r:?}");
    assert_eq!(
        r.result.error.as_deref(),
        Some("Call to 'mcp_fx_sleep' was cancelled")
    );
    eventually(10, "cancelled after cancel", || async {
        events(&d).matches("cancelled sleep").count() == 2
    })
    .await;
}

/// Any `timeout_ms` a caller sends is a deadline, however far, for an MCP tool (which keeps
/// its own deadline) as for a built-in one (whose deadline the pipeline keeps).
#[tokio::test]
async fn the_largest_timeout_is_a_deadline_far_away() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    wait_state(&d, "fx", "ready").await;
    for timeout_ms in [u64::MAX, u64::MAX / 1000, 1 << 53] {
        let r = d
            .call(
                "invoke",
                json!({"name": "mcp_fx_echo", "arguments": {"text": "far"}, "timeout_ms": timeout_ms}),
            )
            .await;
        assert_eq!(r["result"]["result"]["output"], "far", "{timeout_ms}: {r}");
    }
    let r = d
        .call(
            "invoke",
            json!({"name": "read_file", "arguments": {"path": "nope"}, "timeout_ms": u64::MAX}),
        )
        .await;
    assert!(
        r["result"]["result"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such file")),
        "{r}"
    );
}

/// An MCP server in Node that answers the handshake and then, at its first `tools/call`,
/// stops reading its input for good.
const DEAF_SERVER: &str = r#"
const rl = require("readline").createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") {
    send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "deaf", version: "1" } } });
  } else if (m.method === "tools/list") {
    send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "echo", inputSchema: { type: "object" } }] } });
  } else if (m.method === "tools/call") {
    rl.close();
    process.stdin.pause();
  }
});
setInterval(() => {}, 1 << 30);
"#;

/// A server that stops reading cannot hold a call past its deadline: a request waiting for
/// room in the server's pipe is under the call's deadline too (the MCP tool keeps it, not
/// the pipeline), and the host goes on answering.
#[tokio::test]
async fn a_server_that_stops_reading_cannot_hold_a_call_past_its_deadline() {
    let d = daemon_with(|dir| {
        let script = dir.join("deaf.js");
        std::fs::write(&script, DEAF_SERVER).unwrap();
        json!({"deaf": {"command": "node", "args": [script], "timeout_ms": 60000}})
    })
    .await;
    wait_state(&d, "deaf", "ready").await;
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_deaf_echo", "arguments": {"text": "x"}, "timeout_ms": 300}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error"], "Tool 'mcp_deaf_echo' timed out after 300 ms",
        "{r}"
    );
    // More than a pipe holds: the write waits for room that never comes.
    let big = "y".repeat(1 << 20);
    let started = std::time::Instant::now();
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_deaf_echo", "arguments": {"text": big}, "timeout_ms": 500}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error"], "Tool 'mcp_deaf_echo' timed out after 500 ms",
        "{r}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

/// A call waiting for a slot keeps its deadline and can be cancelled, and one that gives
/// up its place leaves the queue `mcp.status` shows (it used to stay counted there).
#[tokio::test]
async fn a_call_waiting_for_a_slot_times_out_or_is_cancelled_and_leaves_the_queue() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({"max_concurrency": 1}))})).await;
    wait_state(&d, "fx", "ready").await;
    let status = || async {
        let st =
            d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0].clone();
        (st["in_flight"].as_u64(), st["queued"].as_u64())
    };
    let c = std::sync::Arc::new(d.client().await);
    let holder = {
        let c = c.clone();
        tokio::spawn(async move {
            c.invoke(&InvokeParams::new(
                "mcp_fx_sleep",
                args(json!({"ms": 4000})),
            ))
            .await
        })
    };
    eventually(10, "the first sleep to hold the only slot", || async {
        events(&d).matches("called sleep").count() == 1
    })
    .await;

    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_sleep", "arguments": {"ms": 1}, "timeout_ms": 300}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error"], "Tool 'mcp_fx_sleep' timed out after 300 ms",
        "{r}"
    );
    assert_eq!(status().await, (Some(1), Some(0)));

    let queued = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut params = InvokeParams::new("mcp_fx_sleep", args(json!({"ms": 1})));
            params.call_id = Some("queued".into());
            c.invoke(&params).await
        })
    };
    eventually(10, "the second call to queue", || async {
        status().await == (Some(1), Some(1))
    })
    .await;
    assert_eq!(
        d.call("cancel", json!({"call_id": "queued"})).await["result"]["cancelled"],
        true
    );
    let r = queued.await.unwrap().unwrap();
    assert_eq!(r.result.error_kind, Some(ErrorKind::Cancelled), "{r:?}");
    assert_eq!(status().await, (Some(1), Some(0)));

    assert!(holder.await.unwrap().unwrap().result.ok);
    assert_eq!(status().await, (Some(0), Some(0)));
    // Neither call that gave up reached the server.
    assert_eq!(events(&d).matches("called sleep").count(), 1);
}

#[tokio::test]
async fn progress_is_forwarded_to_streaming_callers() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    wait_state(&d, "fx", "ready").await;
    let mut ws = d.ws().await;
    ws.call(
        "subscribe_invoke",
        json!({"name": "mcp_fx_sleep", "arguments": {"ms": 400, "progress": true}}),
    )
    .await;
    let mut updates = Vec::new();
    loop {
        let ev = ws.recv().await["params"]["result"].clone();
        if ev["kind"] == "result" {
            assert_eq!(ev["result"]["ok"], true, "{ev}");
            break;
        }
        updates.push(ev);
    }
    assert!(
        updates.len() >= 2,
        "expected several progress updates, got {updates:?}"
    );
    assert!(updates[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("slept"));
    assert!(updates[0]["progress"]["progress"].is_number());
}

#[tokio::test]
async fn list_changed_updates_the_registry_with_one_notification() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    // Subscribed once fx's tools are served, so the change awaited is add_tool's, not the
    // arrival of fx's tools (which goes out just after it turns ready).
    common::mcp::wait_serving(&d, "fx", "mcp_fx_echo").await;
    let c = d.client().await;
    let mut sub = c.subscribe_tools_changed().await.unwrap();
    let rev = c.list_tools(&Default::default()).await.unwrap().revision;
    assert_eq!(
        d.invoke("mcp_fx_add_tool", json!({"name": "fresh"})).await["ok"],
        true
    );
    let n = sub.next().await.unwrap().unwrap();
    let live = c.list_tools(&Default::default()).await.unwrap();
    assert_eq!(
        n,
        ToolsChanged {
            revision: rev + 1,
            etag: live.etag,
            added: vec!["mcp_fx_fresh".into()],
            removed: vec![],
            changed: vec![],
        }
    );
    assert_eq!(
        d.invoke("mcp_fx_fresh", json!({"text": "new"})).await["output"],
        "new"
    );
}

#[tokio::test]
async fn crash_then_unavailable_then_reconnect_and_work() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    wait_state(&d, "fx", "ready").await;
    let r = d.invoke("mcp_fx_crash", json!({})).await;
    assert_eq!(r["error_kind"], "unavailable", "{r}");
    assert_eq!(
        r["error"],
        "MCP server 'fx' is not connected (the connection closed during the call)"
    );
    eventually(20, "reconnect after the crash", || async {
        d.invoke("mcp_fx_echo", json!({"text": "back"})).await["output"] == "back"
    })
    .await;
    let st = wait_state(&d, "fx", "ready").await;
    assert_eq!(st["restarts"], 1);
    assert_eq!(pids(&d).len(), 2);
    assert!(!alive(pids(&d)[0]));
}

#[tokio::test]
async fn a_server_that_keeps_failing_opens_the_circuit() {
    let d = daemon_with(|dir| {
        json!({
            "bad": fixture(dir, json!({"env": {"FIXTURE_FAIL_START": "1"}})),
            "missing": {"command": "/nonexistent/toolhost-no-such-server"},
        })
    })
    .await;
    let st = wait_state(&d, "missing", "failed").await;
    assert!(
        st["last_error"].as_str().unwrap().contains("cannot start"),
        "{st}"
    );
    // Each reload is an immediate attempt; after five failures the circuit opens.
    let mut st = Value::Null;
    for _ in 0..200 {
        st = d.call("mcp.status", json!({"server": "bad"})).await["result"]["servers"][0].clone();
        if st["state"] == "circuit_open" {
            break;
        }
        d.call("mcp.reload", json!({"server": "bad"})).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(st["state"], "circuit_open", "{st}");
    assert!(st["consecutive_failures"].as_u64().unwrap() >= 5);
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(h["mcp"]["ready"], 0, "{h}");
    assert!(h["mcp"]["failed"].as_u64().unwrap() >= 1, "{h}");
    // The daemon keeps serving its other tools.
    assert_eq!(
        d.invoke("bash", json!({"command": "echo fine"})).await["stdout"],
        "fine\n"
    );
}

#[tokio::test]
async fn circuit_open_calls_answer_unreachable_without_trying() {
    // The server starts once; after the flag file exists every restart fails.
    let d = daemon_with(|dir| {
        let flag = dir.join("broken");
        json!({"fx": {
            "command": "sh",
            "args": ["-c", format!("if [ -e {} ]; then exit 3; fi; exec {FIXTURE}", flag.display())],
            "env": {"FIXTURE_EVENTS_FILE": dir.join("fixture.events")},
        }})
    })
    .await;
    wait_state(&d, "fx", "ready").await;
    std::fs::write(d.dir.path().join("broken"), "").unwrap();
    assert_eq!(
        d.invoke("mcp_fx_crash", json!({})).await["error_kind"],
        "unavailable"
    );
    let mut st = Value::Null;
    for _ in 0..200 {
        st = d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0].clone();
        if st["state"] == "circuit_open" {
            break;
        }
        d.call("mcp.reload", json!({"server": "fx"})).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(st["state"], "circuit_open", "{st}");
    let r = d.invoke("mcp_fx_echo", json!({"text": "x"})).await;
    assert_eq!(r["error_kind"], "unavailable");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("unreachable (circuit open"),
        "{r}"
    );
    assert!(!events(&d).contains("called echo"));
    // Fixing the server and reloading closes the circuit.
    std::fs::remove_file(d.dir.path().join("broken")).unwrap();
    d.call("mcp.reload", json!({"server": "fx"})).await;
    wait_state(&d, "fx", "ready").await;
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "x"})).await["output"],
        "x"
    );
}

#[tokio::test]
async fn concurrency_is_bounded_per_server_with_a_visible_queue() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({"max_concurrency": 2}))})).await;
    wait_state(&d, "fx", "ready").await;
    // Six calls in flight on one multiplexed connection.
    let c = std::sync::Arc::new(d.client().await);
    let mut calls = Vec::new();
    for _ in 0..6 {
        let c = c.clone();
        calls.push(tokio::spawn(async move {
            let params = InvokeParams::new("mcp_fx_sleep", args(json!({"ms": 300})));
            c.invoke(&params).await
        }));
    }
    eventually(10, "a queue to form", || async {
        let st =
            d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0].clone();
        st["in_flight"] == 2 && st["queued"].as_u64().unwrap() >= 1
    })
    .await;
    for call in calls {
        let r = call.await.unwrap().unwrap();
        assert!(r.result.ok, "{r:?}");
    }
    let st = d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0].clone();
    assert_eq!(
        (st["in_flight"].as_u64(), st["queued"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn include_exclude_and_collisions_are_applied_and_reported() {
    let d = daemon_with(|dir| json!({
        "f": fixture(dir, json!({"env": {"FIXTURE_TOOL_PREFIX": "x_"}, "include_tools": ["x_echo", "x_add"]})),
        "f_x": fixture(dir, json!({"exclude_tools": ["crash"]})),
    }))
    .await;
    wait_state(&d, "f", "ready").await;
    wait_state(&d, "f_x", "ready").await;
    let r = d.call("list_tools", json!({})).await["result"].clone();
    let names = tool_names(&r);
    let f: Vec<&&str> = names
        .iter()
        .filter(|n| r["meta"][**n]["server"] == "f")
        .collect();
    assert_eq!(f.len(), 2, "{names:?}");
    assert!(!names.contains(&"mcp_f_x_crash"));
    // mcp_f_x_echo is claimed by both servers: the earlier source (f) keeps it.
    assert_eq!(r["meta"]["mcp_f_x_echo"]["server"], "f");
    let st = d.call("mcp.status", json!({"server": "f_x"})).await["result"]["servers"][0].clone();
    assert_eq!(st["collisions"], json!(["mcp_f_x_echo", "mcp_f_x_add"]));
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(h["status"], "degraded");
}

#[tokio::test]
async fn server_everything_from_npm_works_through_the_host() {
    let mut d = Daemon::unstarted();
    let mut server = everything();
    server["env"] = json!({"FROM_CONFIG": "yes"});
    std::fs::write(
        d.config_path(),
        json!({"mcp_servers": {"everything": server}}).to_string(),
    )
    .unwrap();
    d.spawn(&[("TOOLHOST_TEST_SECRET", "must-not-leak")]).await;
    wait_state(&d, "everything", "ready").await;
    // Servers get the config's env plus a small allow-list, never the daemon's secrets.
    let env = d.invoke("mcp_everything_get-env", json!({})).await;
    let text = env["output"].as_str().unwrap_or_else(|| panic!("{env}"));
    assert!(
        text.contains("FROM_CONFIG") && text.contains("PATH"),
        "{text}"
    );
    assert!(
        !text.contains("TOOLHOST_TEST_SECRET") && !text.contains("must-not-leak"),
        "{text}"
    );
    // The server's stderr reaches our log, tagged with the server's name.
    eventually(10, "server stderr in the daemon log", || async {
        d.log()
            .lines()
            .any(|l| l.contains("stderr: Starting") && l.contains("server=everything"))
    })
    .await;
    let r = d
        .invoke("mcp_everything_echo", json!({"message": "hi"}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["output"].as_str().unwrap().contains("hi"));
    let r = d
        .invoke("mcp_everything_get-sum", json!({"a": 2, "b": 40}))
        .await;
    assert!(r["output"].as_str().unwrap().contains("42"), "{r}");
    let env = d
        .call("invoke", json!({"name": "mcp_everything_get-tiny-image"}))
        .await["result"]
        .clone();
    assert_eq!(env["result"]["ok"], true, "{env}");
    assert!(
        env["control"]["_image_data_url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,"),
        "{env}"
    );
    let r = d.invoke("mcp_everything_get-sum", json!({"a": "x"})).await;
    assert_eq!(r["error_kind"], "invalid_arguments");
}

#[tokio::test]
async fn streamable_http_servers_work() {
    let mut fx = tokio::process::Command::new(FIXTURE)
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(fx.stdout.take().unwrap()));
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.trim_start_matches("listening on ").to_owned();
    let d = daemon_with(|_| json!({"web": {"url": url, "headers": {"X-Test": "${HOME}"}}})).await;
    let st = wait_state(&d, "web", "ready").await;
    assert_eq!(st["transport"], "http");
    assert_eq!(
        d.invoke("mcp_web_echo", json!({"text": "over http"})).await["output"],
        "over http"
    );
    let _ = fx.kill().await;
}

#[tokio::test]
async fn no_server_process_outlives_the_daemon() {
    let mut d = daemon_with(|dir| {
        json!({
            "a": fixture(dir, json!({})),
            // Like npx → node: the server is a grandchild (sh stays as its parent).
            "b": {"command": "sh", "args": ["-c", format!("{FIXTURE}; echo exited")],
                  "env": {"FIXTURE_PID_FILE": dir.join("fixture.pids")}},
        })
    })
    .await;
    wait_state(&d, "a", "ready").await;
    wait_state(&d, "b", "ready").await;
    let all = pids(&d);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all.iter().all(|p| alive(*p)));
    assert!(d.stop().await.success());
    for p in all {
        eventually(
            10,
            "fixture processes to be gone",
            || async move { !alive(p) },
        )
        .await;
    }
}

#[tokio::test]
async fn a_huge_mcp_result_is_capped_and_spilled() {
    let d = daemon_with(|dir| json!({"fx": fixture(dir, json!({}))})).await;
    wait_state(&d, "fx", "ready").await;
    let r = d.invoke("mcp_fx_big", json!({"bytes": 3_000_000})).await;
    assert_eq!(
        r["ok"],
        true,
        "{}",
        &r.to_string()[..300.min(r.to_string().len())]
    );
    assert_eq!(r["truncated"], true);
    assert!(r.to_string().len() <= 1024 * 1024);
    let full = std::fs::read_to_string(r["full_output_path"].as_str().unwrap()).unwrap();
    assert_eq!(full.trim_end().len(), 3_000_000);
    // The connection survived the big message.
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "after"})).await["output"],
        "after"
    );
}
