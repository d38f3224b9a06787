//! Server-to-client requests, progress and logging, relayed to the frontend of the call
//! (issue 25), over the socket with raw JSON-RPC, against real servers: our fixture
//! (tests/fixtures/mcp_server.rs with `FIXTURE_INPUTS=1`) and server-everything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// A stdio server block running our fixture with its asking tools, in the `initialize` era
/// (whose server asks mid-call; `tests/it/mcp_era.rs` covers `input_required`).
fn fixture() -> Value {
    json!({"command": FIXTURE, "env": {"FIXTURE_INPUTS": "1", "FIXTURE_ERA": "2025"}})
}

fn everything() -> Value {
    let index = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(index.exists(), "run `npm ci --prefix tests`");
    json!({"command": "node", "args": [index, "stdio"]})
}

async fn daemon_with(servers: Value) -> Daemon {
    let names: Vec<String> = servers.as_object().unwrap().keys().cloned().collect();
    let d = Daemon::start_in(|_: &Path| json!({"mcp_servers": servers})).await;
    for name in names {
        let prefix = format!("mcp_{name}_");
        eventually(30, "the server's tools to be listed", || async {
            let list = d.call("list_tools", json!({})).await;
            tool_names(&list["result"])
                .iter()
                .any(|n| n.starts_with(&prefix))
        })
        .await;
    }
    d
}

/// Starts a `subscribe_invoke` on `c`; returns the subscription id.
async fn subscribe(c: &mut RawLines, params: Value) -> Value {
    let r = c.call("subscribe_invoke", params).await;
    assert!(r["result"].is_u64() || r["result"].is_string(), "{r}");
    r["result"].clone()
}

/// The next `invoke_event` of the connection.
async fn next_event(c: &mut RawLines) -> Value {
    loop {
        let n = c.recv().await;
        if n["method"] == "invoke_event" {
            return n["params"]["result"].clone();
        }
    }
}

/// Events up to and including the first of `kind`.
async fn events_until(c: &mut RawLines, kind: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let e = next_event(c).await;
        let last = e["kind"] == kind;
        assert!(
            last || e["kind"] != "result",
            "a result while waiting for {kind}: {e}"
        );
        seen.push(e);
        if last {
            return seen;
        }
    }
}

#[tokio::test]
async fn an_elicitation_mid_call_reaches_the_socket_frontend_and_bad_answers_change_nothing() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_fx_ask_user", "arguments": {"message": "your name?"},
               "call_id": "ask-1", "inputs": ["elicitation"]}),
    )
    .await;
    let q = events_until(&mut c, "input_request").await.pop().unwrap();
    assert_eq!(q["call_id"], "ask-1");
    assert_eq!(q["input"], "elicitation");
    assert_eq!(q["params"]["message"], "your name?");
    let request_id = q["request_id"].clone();

    let mut other = d.raw_lines().await;
    for bad in [
        json!({"call_id": "nope", "request_id": request_id, "result": {"action": "accept"}}),
        json!({"call_id": "ask-1", "request_id": "in-999", "result": {"action": "accept"}}),
        json!({"call_id": "ask-1", "request_id": request_id, "result": {"action": "maybe"}}),
        json!({"call_id": "ask-1", "request_id": request_id}),
        json!({"call_id": "ask-1", "request_id": request_id, "result": {"action": "accept"},
               "error": {"code": 1, "message": "both"}}),
    ] {
        let r = other.call("invoke.respond", bad.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
    // The question still waits: the good answer, from another connection, is taken.
    let r = other
        .call(
            "invoke.respond",
            json!({"call_id": "ask-1", "request_id": request_id,
                   "result": {"action": "accept", "content": {"name": "Ada"}}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = events_until(&mut c, "result").await.pop().unwrap();
    assert_eq!(result["result"]["ok"], true, "{result}");
    assert_eq!(result["result"]["output"], r#"accept {"name":"Ada"}"#);
}

#[tokio::test]
async fn a_frontend_that_answers_nothing_is_never_asked_and_roots_keep_the_servers_answer() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    // A plain invoke: the server hears -32601 at once, the call does not wait.
    let r = d
        .invoke("mcp_fx_ask_user", json!({"message": "anyone?"}))
        .await;
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("-32601")
            || r["error"].as_str().unwrap().contains("no frontend"),
        "{r}"
    );
    // roots/list from a call whose frontend does not answer roots: the server's root.
    let r = d.invoke("mcp_fx_ask_roots", json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["output"].as_str().unwrap().starts_with("file:///"), "{r}");
    // A frontend that answers roots: its own.
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_fx_ask_roots", "call_id": "r-1", "inputs": ["roots"]}),
    )
    .await;
    let q = events_until(&mut c, "input_request").await.pop().unwrap();
    assert_eq!(q["input"], "roots");
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "r-1", "request_id": q["request_id"],
                   "result": {"roots": [{"uri": "file:///frontend/root"}]}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = events_until(&mut c, "result").await.pop().unwrap();
    assert_eq!(result["result"]["output"], "file:///frontend/root");
}

#[tokio::test]
async fn a_frontend_that_leaves_while_asked_ends_the_call_and_the_server_hears_an_error() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_fx_ask_user", "arguments": {"message": "still there?"},
               "call_id": "gone-1", "inputs": ["elicitation"]}),
    )
    .await;
    events_until(&mut c, "input_request").await;
    drop(c);
    eventually(10, "the call to end", || async {
        d.call("host.status", json!({})).await["result"]["calls_in_flight"]
            .as_array()
            .is_none_or(|calls| calls.iter().all(|c| c["call_id"] != "gone-1"))
    })
    .await;
    // The server is free again: the same tool, asked of a plain invoke, answers at once.
    let r = d.invoke("mcp_fx_echo", json!({"text": "alive"})).await;
    assert_eq!(r["output"], "alive", "{r}");
}

#[tokio::test]
async fn a_frontend_that_never_answers_gets_the_calls_timeout() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_fx_ask_user", "arguments": {"message": "hello?"},
               "timeout_ms": 500, "inputs": ["elicitation"]}),
    )
    .await;
    let events = events_until(&mut c, "result").await;
    assert!(events.iter().any(|e| e["kind"] == "input_request"));
    let result = events.last().unwrap();
    assert_eq!(result["result"]["error_kind"], "timeout", "{result}");
}

#[tokio::test]
async fn two_frontends_on_one_http_server_each_get_only_their_own_question() {
    let mut fx = tokio::process::Command::new(FIXTURE)
        .args(["--http", "127.0.0.1:0"])
        .env("FIXTURE_INPUTS", "1")
        .env("FIXTURE_ERA", "2025")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(fx.stdout.take().unwrap()));
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.trim_start_matches("listening on ").to_owned();
    let d = daemon_with(json!({"web": {"url": url}})).await;
    let mut a = d.raw_lines().await;
    let mut b = d.raw_lines().await;
    for (c, who) in [(&mut a, "a"), (&mut b, "b")] {
        subscribe(
            c,
            json!({"name": "mcp_web_ask_user", "arguments": {"message": format!("for {who}")},
                   "call_id": format!("two-{who}"), "inputs": ["elicitation"]}),
        )
        .await;
    }
    // Both questions are out at once; each frontend has its own, and answers it.
    let qa = events_until(&mut a, "input_request").await.pop().unwrap();
    let qb = events_until(&mut b, "input_request").await.pop().unwrap();
    assert_eq!(qa["params"]["message"], "for a", "{qa}");
    assert_eq!(qb["params"]["message"], "for b", "{qb}");
    for (c, q, name) in [(&mut a, &qa, "A"), (&mut b, &qb, "B")] {
        let r = c
            .call(
                "invoke.respond",
                json!({"call_id": q["call_id"], "request_id": q["request_id"],
                       "result": {"action": "accept", "content": {"name": name}}}),
            )
            .await;
        assert_eq!(r["result"]["accepted"], true, "{r}");
    }
    let ra = events_until(&mut a, "result").await.pop().unwrap();
    let rb = events_until(&mut b, "result").await.pop().unwrap();
    assert_eq!(ra["result"]["output"], r#"accept {"name":"A"}"#, "{ra}");
    assert_eq!(rb["result"]["output"], r#"accept {"name":"B"}"#, "{rb}");
    let _ = fx.kill().await;
}

#[tokio::test]
async fn two_frontends_on_one_stdio_server_never_get_each_others_question() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    let mut a = d.raw_lines().await;
    let mut b = d.raw_lines().await;
    // a's call is in flight (asking a), then b's starts: b's question could be either's.
    subscribe(
        &mut a,
        json!({"name": "mcp_fx_ask_user", "arguments": {"message": "for a"},
               "call_id": "st-a", "inputs": ["elicitation"]}),
    )
    .await;
    let qa = events_until(&mut a, "input_request").await.pop().unwrap();
    assert_eq!(qa["params"]["message"], "for a");
    subscribe(
        &mut b,
        json!({"name": "mcp_fx_ask_user", "arguments": {"message": "for b"},
               "call_id": "st-b", "inputs": ["elicitation"]}),
    )
    .await;
    // Ambiguous over stdio: b's question is refused, never shown to a.
    let rb = events_until(&mut b, "result").await;
    assert!(rb.iter().all(|e| e["kind"] != "input_request"), "{rb:?}");
    let rb = rb.last().unwrap();
    assert_eq!(rb["result"]["ok"], false, "{rb}");
    let r = a
        .call(
            "invoke.respond",
            json!({"call_id": "st-a", "request_id": qa["request_id"],
                   "result": {"action": "decline"}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let ra = events_until(&mut a, "result").await;
    assert_eq!(
        ra.iter().filter(|e| e["kind"] == "input_request").count(),
        0,
        "{ra:?}"
    );
    assert_eq!(ra.last().unwrap()["result"]["output"], "decline null");
}

#[tokio::test]
async fn progress_and_a_log_sent_right_before_the_result_arrive_before_it() {
    let d = daemon_with(json!({"fx": fixture()})).await;
    let mut c = d.raw_lines().await;
    for _ in 0..5 {
        subscribe(
            &mut c,
            json!({"name": "mcp_fx_notes_then_result", "arguments": {"steps": 4}}),
        )
        .await;
        let events = events_until(&mut c, "result").await;
        let steps: Vec<f64> = events
            .iter()
            .filter_map(|e| e["progress"]["progress"].as_f64())
            .collect();
        assert_eq!(steps, [1.0, 2.0, 3.0, 4.0], "{events:?}");
        let log = events.iter().find(|e| e["kind"] == "log");
        assert_eq!(
            log.map(|l| l["data"].clone()),
            Some(json!("about to answer")),
            "{events:?}"
        );
        assert_eq!(events.last().unwrap()["result"]["output"], "done");
    }
}

#[tokio::test]
async fn server_everythings_long_operation_gives_every_step_before_its_result() {
    let d = daemon_with(json!({"everything": everything()})).await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_everything_trigger-long-running-operation",
               "arguments": {"duration": 1, "steps": 4}}),
    )
    .await;
    let events = events_until(&mut c, "result").await;
    let steps: Vec<f64> = events
        .iter()
        .filter_map(|e| e["progress"]["progress"].as_f64())
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0, 4.0], "{events:?}");
    assert_eq!(events.last().unwrap()["result"]["ok"], true);
}

#[tokio::test]
async fn server_everythings_sampling_reaches_the_socket_frontend() {
    let d = daemon_with(json!({"everything": everything()})).await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "mcp_everything_trigger-sampling-request",
               "arguments": {"prompt": "say hi"}, "call_id": "s-1", "inputs": ["sampling"]}),
    )
    .await;
    let q = events_until(&mut c, "input_request").await.pop().unwrap();
    assert_eq!(q["input"], "sampling");
    let text = q["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("say hi"), "{q}");
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "s-1", "request_id": q["request_id"],
                   "result": {"role": "assistant", "model": "test-model",
                              "content": {"type": "text", "text": "hi from the frontend"}}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = events_until(&mut c, "result").await.pop().unwrap();
    assert_eq!(result["result"]["ok"], true, "{result}");
    assert!(
        result["result"]
            .to_string()
            .contains("hi from the frontend"),
        "{result}"
    );
}

/// Runs `tests/facade_py/inputs.py` (the Python MCP SDK through `toolhost mcp`) against
/// `d`; `None` when python3 is absent.
async fn python_inputs(d: &Daemon, root: &Path, mode: &str) -> Value {
    let socket = d.socket();
    let args = [BIN, socket.to_str().unwrap(), root.to_str().unwrap(), mode];
    common::python_sdk("inputs.py", &args, &[]).await
}

#[tokio::test]
async fn the_python_sdk_answers_its_calls_questions_through_the_facade() {
    let d = daemon_with(json!({"everything": everything(), "fx": fixture()})).await;
    let root = tempfile::tempdir().unwrap();
    let seen = python_inputs(&d, root.path(), "with").await;
    let text = |k: &str| seen[k]["text"].as_str().unwrap_or("").to_owned();
    assert_eq!(seen["elicitation"]["is_error"], false, "{seen}");
    assert!(text("elicitation").contains("Ada"), "{seen}");
    assert_eq!(seen["sampling"]["is_error"], false, "{seen}");
    assert!(text("sampling").contains("hi from python"), "{seen}");
    let root_uri = url::Url::from_file_path(root.path()).unwrap().to_string();
    assert_eq!(text("roots"), root_uri, "{seen}");
    assert_eq!(seen["progress"], json!([1.0, 2.0, 3.0, 4.0]), "{seen}");
    assert_eq!(seen["notes"]["text"], "done", "{seen}");
    assert_eq!(seen["logs"], json!(["about to answer"]), "{seen}");
    for kind in ["elicitation", "sampling", "roots"] {
        assert!(
            seen["asked"].as_array().unwrap().iter().any(|a| a == kind),
            "{seen}"
        );
    }
}

#[tokio::test]
async fn a_client_without_the_capabilities_is_never_asked_and_the_server_hears_the_error() {
    let d = daemon_with(json!({"everything": everything(), "fx": fixture()})).await;
    let root = tempfile::tempdir().unwrap();
    let seen = python_inputs(&d, root.path(), "without").await;
    assert_eq!(seen["asked"], json!([]), "{seen}");
    // server-everything's tools fail on the refusal (a tool error, not a hang).
    for k in ["elicitation", "sampling"] {
        assert!(
            seen[k]["is_error"] == true || seen[k]["error"].is_i64(),
            "{k}: {seen}"
        );
    }
    // roots/list: the server's own root, as before.
    assert!(
        seen["roots"]["text"]
            .as_str()
            .unwrap()
            .starts_with("file:///"),
        "{seen}"
    );
    assert_eq!(seen["progress"], json!([1.0, 2.0, 3.0, 4.0]), "{seen}");
}

/// A daemon with one custom tool `asker` whose program asks an elicitation question and
/// returns the `input_response` line it read back.
async fn daemon_with_asking_tool() -> Daemon {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let tool = dir.join("tools/asker");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::create_dir_all(dir.join("xdg")).unwrap();
    let script = r#"#!/bin/sh
read args
echo '{"input_request": {"id": "q1", "kind": "elicitation", "params": {"message": "go?", "requestedSchema": {"type": "object", "properties": {}}}}}'
read answer
printf '{"result": {"answer": %s}}\n' "$answer"
"#;
    let prog = tool.join("run.sh");
    std::fs::write(&prog, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_atomic(
        &tool.join("tool.json"),
        &json!({"name": "asker", "description": "asks the user", "command": ["./run.sh"],
                "approval": "read_only", "asks": true}),
    );
    let cfg = json!({"custom_tools": {"paths": [dir.join("tools")]}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let xdg = dir.join("xdg");
    d.spawn(&[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]).await;
    d
}

#[tokio::test]
async fn a_custom_tool_asks_the_frontend_and_reads_the_answer_on_stdin() {
    let d = daemon_with_asking_tool().await;
    let mut c = d.raw_lines().await;
    subscribe(
        &mut c,
        json!({"name": "asker", "call_id": "cu-1", "inputs": ["elicitation"]}),
    )
    .await;
    let q = events_until(&mut c, "input_request").await.pop().unwrap();
    assert_eq!(q["input"], "elicitation");
    assert_eq!(q["params"]["message"], "go?");
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "cu-1", "request_id": q["request_id"],
                   "result": {"action": "accept", "content": {}}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = events_until(&mut c, "result").await.pop().unwrap();
    assert_eq!(
        result["result"]["answer"],
        json!({"input_response": {"id": "q1", "result": {"action": "accept", "content": {}}}}),
        "{result}"
    );
    // A plain invoke cannot be asked: the program reads the refusal at once.
    let r = d.invoke("asker", json!({})).await;
    assert_eq!(r["answer"]["input_response"]["id"], "q1", "{r}");
    assert_eq!(
        r["answer"]["input_response"]["error"]["code"], -32601,
        "{r}"
    );
}

#[tokio::test]
async fn a_strict_sessions_approval_is_an_input_request_of_the_call() {
    let d = Daemon::start_with(Some(json!({"approval": {"mode": "strict", "wait_s": 0}}))).await;
    let marker = d.workspace().join("ran");
    let mut c = d.raw_lines().await;
    for (action, runs) in [("decline", false), ("accept", true)] {
        let call_id = format!("ap-{action}");
        subscribe(
            &mut c,
            json!({"name": "bash", "arguments": {"command": "touch ran"},
                   "call_id": call_id, "inputs": ["elicitation"]}),
        )
        .await;
        let q = events_until(&mut c, "input_request").await.pop().unwrap();
        let message = q["params"]["message"].as_str().unwrap();
        assert!(message.contains("command=\"touch ran\""), "{q}");
        let r = c
            .call(
                "invoke.respond",
                json!({"call_id": call_id, "request_id": q["request_id"],
                       "result": {"action": action}}),
            )
            .await;
        assert_eq!(r["result"]["accepted"], true, "{r}");
        let result = events_until(&mut c, "result").await.pop().unwrap();
        assert_eq!(result["result"]["ok"], runs, "{result}");
        assert_eq!(marker.exists(), runs);
    }
    // A frontend that does not answer elicitation gets approval_required, as before.
    let r = d.invoke("bash", json!({"command": "true"})).await;
    assert_eq!(r["error_kind"], "approval_required", "{r}");
}
