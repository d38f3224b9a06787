//! Multi-round-trip results through the MCP facade: a 2026-07-28 client's call that asks
//! questions (an MCP server's elicitation, a custom tool's `input_request` lines, a strict
//! session's approval) returns `input_required`, the host call is held, and a retry with
//! `inputResponses` and the echoed `requestState` answers it. Raw JSON over `toolhost mcp`
//! (stdio) and over HTTP `/mcp` on the Unix socket, against the real fixture server and
//! custom tool programs; and the Python MCP SDK pinned to the new era.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::new_era::{self, RawStdio};
use common::{alive, eventually, http_request_with, Daemon, BIN, FIXTURE};
use serde_json::{json, Value};

/// The `_meta` of a new-era request whose client declares `caps`.
fn meta(caps: Value) -> Value {
    new_era::meta("mrtr-test", caps)
}

/// A `tools/call` of a client that answers elicitation; `retry` is merged in
/// (`inputResponses`, `requestState`).
fn call(name: &str, arguments: Value, retry: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments,
                            "_meta": meta(json!({"elicitation": {}}))});
    if let Some(extra) = retry.as_object() {
        for (k, v) in extra {
            params[k] = v.clone();
        }
    }
    params
}

fn write_tool(root: &Path, name: &str, script: &str, extra: Value) {
    let mut manifest = json!({"name": name, "description": format!("the {name} tool"),
                              "command": ["./run.sh"], "approval": "read_only", "asks": true});
    for (k, v) in extra.as_object().unwrap() {
        manifest[k] = v.clone();
    }
    common::write_tool(root, name, manifest, script);
}

/// An elicitation `input_request` line with id `id` and message `message`.
fn question(id: &str, message: &str) -> String {
    json!({"input_request": {"id": id, "kind": "elicitation",
           "params": {"message": message,
                      "requestedSchema": {"type": "object", "properties": {}}}}})
    .to_string()
}

/// A daemon with the fixture server (`mcp_fx_ask_user`) and custom tools: `pair` asks two
/// questions at once, then (after both answers) a third, and returns the three answers;
/// `stuck` writes its pid, asks, and waits; its own timeout is 1.5 s; `patient` is the same
/// with a timeout of a minute.
async fn start(config: Value) -> Daemon {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let tools = dir.join("tools");
    write_tool(
        &tools,
        "pair",
        &format!(
            "read args\necho '{}'\necho '{}'\nread a\nread b\necho '{}'\nread c\n\
             printf '{{\"result\": {{\"answers\": [%s, %s, %s]}}}}\\n' \"$a\" \"$b\" \"$c\"",
            question("first", "one?"),
            question("second", "two?"),
            question("third", "three?"),
        ),
        json!({}),
    );
    write_tool(
        &tools,
        "stuck",
        &format!(
            "echo $$ > {}/stuck.pid\nread args\necho '{}'\nread answer\nsleep 30",
            dir.display(),
            question("q", "still there?")
        ),
        json!({"timeout_ms": 1500}),
    );
    write_tool(
        &tools,
        "patient",
        &format!(
            "echo $$ > {}/patient.pid\nread args\necho '{}'\nread answer\nsleep 30",
            dir.display(),
            question("q", "anyone?")
        ),
        json!({"timeout_ms": 60000}),
    );
    let mut cfg = json!({
        "custom_tools": {"paths": [tools]},
        "mcp_servers": {"fx": {"command": FIXTURE, "env": {"FIXTURE_INPUTS": "1"}}},
    });
    for (k, v) in config.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(30, "the fixture's tools to be listed", || async {
        let list = d.call("list_tools", json!({})).await;
        common::tool_names(&list["result"]).contains(&"mcp_fx_ask_user")
    })
    .await;
    d
}

/// One sessionless new-era POST to `/mcp` over the Unix socket: (status, answer).
async fn post(d: &Daemon, params: Value) -> (u16, Value) {
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", new_era::NEW),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", name.as_str()),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let (status, text) =
        http_request_with(&d.socket(), "POST", "/mcp", &body.to_string(), &headers).await;
    let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    (status, answer)
}

/// The one input request of an `input_required` answer: (key, request, state).
fn sole_request(answer: &Value) -> (String, Value, String) {
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{answer}");
    let (key, request) = requests.iter().next().unwrap();
    let state = result["requestState"].as_str().unwrap().to_owned();
    (key.clone(), request.clone(), state)
}

fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {answer}"))
        .to_owned()
}

fn refused(answer: &Value, why: &str) {
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "{why:?} in {answer}");
}

#[tokio::test]
async fn stdio_an_upstream_elicitation_becomes_input_required_and_only_its_own_retry_answers_it() {
    let d = start(json!({})).await;
    let mut mcp = RawStdio::open(&d).await;
    let args = json!({"message": "your name?"});
    let first = mcp
        .rpc(
            "tools/call",
            call("mcp_fx_ask_user", args.clone(), json!({})),
        )
        .await;
    let (key, request, state) = sole_request(&first);
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["message"], "your name?", "{first}");
    // The fixture speaks 2026-07-28 and names its question `user`: the name reaches the
    // client unchanged (not the host's own `in-1`).
    assert_eq!(key, "user", "{first}");
    assert_eq!(
        first["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "toolhost",
        "{first}"
    );
    let answer = json!({key.clone(): {"action": "accept", "content": {"name": "Ada"}}});

    // Refused, each changing nothing: a tampered state, a retry of other arguments or
    // another tool, an answer of the wrong shape.
    let tampered = format!("{state}-TAMPERED");
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                args.clone(),
                json!({"inputResponses": answer, "requestState": tampered}),
            ),
        )
        .await;
    refused(&r, "not one this server issued");
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                json!({"message": "other"}),
                json!({"inputResponses": answer, "requestState": state}),
            ),
        )
        .await;
    refused(&r, "other arguments");
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_echo",
                args.clone(),
                json!({"inputResponses": answer, "requestState": state}),
            ),
        )
        .await;
    refused(&r, "another tool");
    // Answers without a state are a new call that already knows its answers: the question
    // of that name is answered with them (the held call is not touched); an answer of the
    // wrong shape is not used, and its question is put to the client.
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                args.clone(),
                json!({"inputResponses": answer}),
            ),
        )
        .await;
    assert_eq!(text(&r), r#"accept {"name":"Ada"}"#, "{r}");
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                args.clone(),
                json!({"inputResponses": {key.clone(): {"action": "maybe"}}}),
            ),
        )
        .await;
    let (again, _, _) = sole_request(&r);
    assert_eq!(again, key, "{r}");
    let r = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                args.clone(),
                json!({"inputResponses": {key.clone(): {"action": "maybe"}},
                        "requestState": state}),
            ),
        )
        .await;
    refused(&r, "elicitation/create");

    // The held call still waits: the right retry completes it, with the arguments' keys in
    // another order.
    let done = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                json!({"message": "your name?"}),
                json!({"inputResponses": answer, "requestState": state}),
            ),
        )
        .await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(text(&done), r#"accept {"name":"Ada"}"#);
    // A state works once.
    let replay = mcp
        .rpc(
            "tools/call",
            call(
                "mcp_fx_ask_user",
                args,
                json!({"inputResponses": answer, "requestState": state}),
            ),
        )
        .await;
    refused(&replay, "no call waits");
}

#[tokio::test]
async fn http_two_questions_at_once_then_a_third_in_a_second_round() {
    let d = start(json!({})).await;
    let (status, first) = post(&d, call("pair", json!({}), json!({}))).await;
    assert_eq!(status, 200, "{first}");
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    let messages: Vec<&str> = requests
        .values()
        .map(|r| r["params"]["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.len(), 2, "{first}");
    assert!(
        messages.contains(&"one?") && messages.contains(&"two?"),
        "{first}"
    );
    let state = result["requestState"].as_str().unwrap();
    let mut answers = serde_json::Map::new();
    for (key, r) in requests {
        let which = r["params"]["message"]
            .as_str()
            .unwrap()
            .trim_end_matches('?');
        answers.insert(
            key.clone(),
            json!({"action": "accept", "content": {"n": which}}),
        );
    }
    // Only one answer: the other is asked again (with the same key), the call goes on.
    let (one_key, one) = answers
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    let partial = json!({"inputResponses": {one_key.clone(): one}, "requestState": state});
    let (_, second) = post(&d, call("pair", json!({}), partial)).await;
    let (again_key, again, state) = sole_request(&second);
    assert_ne!(again_key, one_key, "{second}");
    assert!(answers.contains_key(&again_key), "{second}");
    assert!(again["params"]["message"].is_string(), "{second}");
    let rest = json!({"inputResponses": {again_key.clone(): answers[&again_key]},
                      "requestState": state});
    let (_, third) = post(&d, call("pair", json!({}), rest)).await;
    let (key, request, state) = sole_request(&third);
    assert_eq!(request["params"]["message"], "three?", "{third}");
    let last = json!({"inputResponses": {key: {"action": "decline"}}, "requestState": state});
    let (status, done) = post(&d, call("pair", json!({}), last)).await;
    assert_eq!(status, 200, "{done}");
    let answers: Value = serde_json::from_str(&text(&done)).unwrap();
    let answers = answers["answers"].as_array().unwrap();
    let results: Vec<&Value> = answers
        .iter()
        .map(|a| &a["input_response"]["result"])
        .collect();
    assert_eq!(results.len(), 3, "{done}");
    assert_eq!(results[2]["action"], "decline", "{done}");
    let mut firsts: Vec<&str> = results[..2]
        .iter()
        .map(|r| r["content"]["n"].as_str().unwrap())
        .collect();
    firsts.sort_unstable();
    assert_eq!(firsts, ["one", "two"], "{done}");
}

#[tokio::test]
async fn a_strict_sessions_approval_is_asked_through_input_required() {
    let d = start(json!({"approval": {"mode": "strict"}})).await;
    let marker = d.workspace().join("ran");
    let mut mcp = RawStdio::open(&d).await;
    let args = json!({"command": "touch ran"});
    let first = mcp
        .rpc("tools/call", call("bash", args.clone(), json!({})))
        .await;
    let (key, request, state) = sole_request(&first);
    let message = request["params"]["message"].as_str().unwrap();
    assert!(message.contains("touch ran"), "{first}");
    assert!(!marker.exists());
    let retry = json!({"inputResponses": {key: {"action": "accept", "content": {}}},
                       "requestState": state});
    let done = mcp.rpc("tools/call", call("bash", args, retry)).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(marker.exists());
}

#[tokio::test]
async fn a_held_call_never_retried_ends_at_its_timeout_and_its_state_is_refused() {
    let d = start(json!({})).await;
    let mut mcp = RawStdio::open(&d).await;
    let first = mcp
        .rpc("tools/call", call("stuck", json!({}), json!({})))
        .await;
    let (key, _, state) = sole_request(&first);
    let pid_file = d.dir.path().join("stuck.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The call's own timeout (1.5 s) ends it while it is held: its program is killed.
    eventually(20, "the held call's program to be stopped", || async {
        !alive(pid)
    })
    .await;
    eventually(10, "no call in flight", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    let retry = json!({"inputResponses": {key: {"action": "accept", "content": {}}},
                       "requestState": state});
    let late = mcp.rpc("tools/call", call("stuck", json!({}), retry)).await;
    refused(&late, "");
}

#[tokio::test]
async fn an_old_era_client_is_still_asked_with_a_classic_request() {
    let d = start(json!({})).await;
    let mut mcp = RawStdio::open(&d).await;
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "old", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "mcp_fx_ask_user", "arguments": {"message": "classic?"}}}),
    ] {
        mcp.send(m).await;
    }
    let asked = loop {
        let m = mcp.next().await;
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_eq!(asked["params"]["message"], "classic?", "{asked}");
    mcp.send(json!({"jsonrpc": "2.0", "id": asked["id"],
                    "result": {"action": "accept", "content": {"name": "Bo"}}}))
        .await;
    let done = loop {
        let m = mcp.next().await;
        if m["id"] == 2 {
            break m;
        }
    };
    assert!(done["result"].get("resultType").is_none(), "{done}");
    assert_eq!(text(&done), r#"accept {"name":"Bo"}"#);
}

/// The Python MCP SDK's `Client` pinned to 2026-07-28 answers the fixture's elicitation
/// through `input_required` rounds (the SDK drives them), over stdio and HTTP.
#[tokio::test]
async fn the_python_sdk_in_new_era_mode_answers_through_input_required() {
    let d = start(json!({})).await;
    let socket = d.socket();
    let args = ["mrtr", BIN, socket.to_str().unwrap()];
    let seen = common::python_sdk("client.py", &args, &[]).await;
    for transport in ["stdio", "http"] {
        assert_eq!(seen[transport]["is_error"], false, "{seen}");
        assert_eq!(seen[transport]["text"], r#"accept {"name":"Py"}"#, "{seen}");
    }
    assert_eq!(
        seen["asked"],
        json!(["name over stdio?", "name over http?"]),
        "{seen}"
    );
}

/// A call whose own timeout is far away is cancelled by the facade when its hold expires
/// (`TOOLHOST_MCP_HOLD_MS`): nothing of a client that never retries stays behind.
#[tokio::test]
async fn a_held_call_is_cancelled_when_its_hold_expires() {
    let d = start(json!({})).await;
    let mut mcp = RawStdio::open_with(&d, &[("TOOLHOST_MCP_HOLD_MS", "1000")]).await;
    let first = mcp
        .rpc("tools/call", call("patient", json!({}), json!({})))
        .await;
    let (key, _, state) = sole_request(&first);
    let pid: i32 = std::fs::read_to_string(d.dir.path().join("patient.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(
        20,
        "the expired held call's program to be stopped",
        || async { !alive(pid) },
    )
    .await;
    eventually(10, "no call in flight", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    let retry = json!({"inputResponses": {key: {"action": "accept", "content": {}}},
                       "requestState": state});
    let late = mcp
        .rpc("tools/call", call("patient", json!({}), retry))
        .await;
    refused(&late, "not one this server issued, or it expired");
}
