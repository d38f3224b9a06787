//! The OpenRPC document of `rpc.discover` is the contract: every method the daemon serves
//! is in it, its enums list their values, and every answer the daemon sends (results and
//! subscription notifications) validates against the document's own schemas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{json, Value};

/// A validator for `schema`, resolving `#/components/schemas/…` against the document.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    if let Value::Object(o) = &mut root {
        o.insert("components".into(), doc["components"].clone());
    } else {
        root = json!({"allOf": [schema], "components": doc["components"]});
    }
    jsonschema::validator_for(&root).unwrap_or_else(|e| panic!("bad schema {schema}: {e}"))
}

fn method<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the OpenRPC document"))
}

fn check(doc: &Value, name: &str, result: &Value) {
    let schema = &method(doc, name)["result"]["schema"];
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(result)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{name}: the answer does not match its schema: {errors:?}\nanswer: {result}"
    );
}

fn check_notification(doc: &Value, subscribe: &str, params: &Value) {
    let schema = &method(doc, subscribe)["x-notification"]["params"]["result"];
    let v = validator(doc, schema);
    let errors: Vec<String> = v
        .iter_errors(&params["result"])
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{subscribe} notification does not match its schema: {errors:?}\n{params}"
    );
}

/// Calls `name` and checks the answer; returns the result.
async fn call_checked(
    d: &Daemon,
    doc: &Value,
    seen: &mut BTreeSet<String>,
    name: &str,
    params: Value,
) -> Value {
    let r = d.call(name, params).await;
    let result = r
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{name} failed: {r}"));
    check(doc, name, &result);
    seen.insert(name.to_owned());
    result
}

#[tokio::test]
async fn every_answer_validates_against_the_openrpc_document() {
    let fixture = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");
    let d = Daemon::start_in(|dir| {
        let skill = dir.join("ws/.toolhost/skills/demo");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), "---\nname: demo\ndescription: A demo.\n---\nDo it.\n").unwrap();
        // Checkpoints on (they are opt-in), for the checkpoint methods below.
        json!({"checkpoint": {"enabled": true}, "mcp_servers": {"fx": {"command": fixture, "env": {"FIXTURE_PID_FILE": dir.join("pids"), "FIXTURE_INPUTS": "1", "FIXTURE_RESOURCES": "fx"}}}})
    })
    .await;
    let doc = d.call("rpc.discover", json!({})).await["result"].clone();
    let mut seen = BTreeSet::from(["rpc.discover".to_owned()]);

    // The check can fail: a health answer with an unknown status is refused.
    let health = validator(&doc, &method(&doc, "host.health")["result"]["schema"]);
    assert!(!health.is_valid(&json!({"status": "fine", "version": "1", "uptime_s": 0, "tools": 0, "sessions": 0, "mcp": {"ready": 0, "failed": 0, "connecting": 0}})));

    // Enum-like fields list their values.
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["ErrorKind"]["enum"],
        json!([
            "unknown_tool",
            "invalid_arguments",
            "approval_required",
            "denied",
            "timeout",
            "cancelled",
            "unavailable",
            "failed",
            "sandbox_unavailable",
            "quarantined",
            "limited"
        ])
    );
    assert_eq!(
        schemas["McpServerState"]["enum"],
        json!([
            "connecting",
            "ready",
            "failed",
            "disabled",
            "circuit_open",
            "auth_required",
            "not_started",
            "stopped_idle"
        ])
    );
    assert_eq!(schemas["HealthStatus"]["enum"], json!(["ok", "degraded"]));
    assert_eq!(
        schemas["ToolSourceKind"]["enum"],
        json!(["builtin", "custom", "mcp"])
    );

    // Wait for the MCP server, so its tools and status are part of what is checked.
    eventually(20, "fx ready", || async {
        d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    std::fs::write(d.workspace().join("a.txt"), "one\ntwo\n").unwrap();
    // The workspace's skill waits for trust: listed, approved, and the folder trusted (so
    // what the workspace gets later is taken up too).
    eventually(10, "the workspace's skill waiting", || async {
        !d.trust_waiting().await.is_empty()
    })
    .await;
    call_checked(&d, &doc, &mut seen, "trust.list", json!({})).await;
    let skill = d.workspace().join(".toolhost/skills/demo");
    call_checked(&d, &doc, &mut seen, "trust.diff", json!({"path": skill})).await;
    call_checked(&d, &doc, &mut seen, "trust.approve", json!({"path": skill})).await;
    let folder = json!({"folder": d.workspace()});
    call_checked(&d, &doc, &mut seen, "trust.folder", folder).await;

    for format in ["openai", "mcp"] {
        call_checked(
            &d,
            &doc,
            &mut seen,
            "list_tools",
            json!({"format": format, "include_hidden": true}),
        )
        .await;
    }
    // Success, a tool failure, an MCP tool, a big spilled output, a control field.
    call_checked(
        &d,
        &doc,
        &mut seen,
        "invoke",
        json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
    )
    .await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "invoke",
        json!({"name": "read_file", "arguments": {"path": "missing"}}),
    )
    .await;
    call_checked(&d, &doc, &mut seen, "invoke", json!({"name": "nope"})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "invoke",
        json!({"name": "mcp_fx_echo", "arguments": {"text": "hi"}}),
    )
    .await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "invoke",
        json!({"name": "bash", "arguments": {"command": "head -c 3000000 /dev/zero | tr '\\0' x"}}),
    )
    .await;
    call_checked(&d, &doc, &mut seen, "cancel", json!({"call_id": "none"})).await;
    call_checked(&d, &doc, &mut seen, "host.health", json!({})).await;
    call_checked(&d, &doc, &mut seen, "host.status", json!({})).await;
    call_checked(&d, &doc, &mut seen, "config.status", json!({})).await;
    call_checked(&d, &doc, &mut seen, "ui.login", json!({})).await;
    call_checked(&d, &doc, &mut seen, "config.reload", json!({})).await;
    call_checked(&d, &doc, &mut seen, "mcp.status", json!({})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "mcp.add",
        json!({"name": "other", "server": {"command": fixture}}),
    )
    .await;
    call_checked(&d, &doc, &mut seen, "mcp.remove", json!({"name": "other"})).await;

    // Sign-in: a client-credentials server needs no browser, so mcp.login answers at once.
    let m2m = json!({"url": "http://127.0.0.1:9/mcp",
        "auth": {"type": "client_credentials", "client_id": "a", "client_secret": "b"}});
    call_checked(
        &d,
        &doc,
        &mut seen,
        "mcp.add",
        json!({"name": "m2m", "server": m2m}),
    )
    .await;
    eventually(10, "m2m is configured", || async {
        d.call("mcp.status", json!({"server": "m2m"}))
            .await
            .get("result")
            .is_some()
    })
    .await;
    let login = json!({"name": "m2m", "redirect_uri": "http://127.0.0.1:1/callback"});
    let r = call_checked(&d, &doc, &mut seen, "mcp.login", login).await;
    assert_eq!(r, json!({}));
    let r = call_checked(&d, &doc, &mut seen, "mcp.logout", json!({"name": "m2m"})).await;
    assert_eq!(r, json!({"ok": false}));
    call_checked(&d, &doc, &mut seen, "mcp.remove", json!({"name": "m2m"})).await;

    let s = call_checked(
        &d,
        &doc,
        &mut seen,
        "session.create",
        json!({"meta": {"k": 1}}),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    call_checked(&d, &doc, &mut seen, "session.get", json!({"id": id})).await;
    call_checked(&d, &doc, &mut seen, "session.list", json!({"limit": 1})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "session.update",
        json!({"id": id, "meta": {"k": null}}),
    )
    .await;
    let t = call_checked(&d, &doc, &mut seen, "session.tools", json!({"id": id})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "session.tools",
        json!({"id": id, "if_etag": t["etag"]}),
    )
    .await;
    call_checked(&d, &doc, &mut seen, "session.resume", json!({"id": id})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "session.refresh_tools",
        json!({"id": id}),
    )
    .await;
    call_checked(&d, &doc, &mut seen, "list_tools", json!({"session_id": id})).await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "tools.search",
        json!({"query": "echo", "session_id": id}),
    )
    .await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "tools.describe",
        json!({"session_id": id, "names": ["mcp_fx_echo"]}),
    )
    .await;
    call_checked(
        &d,
        &doc,
        &mut seen,
        "tools.diff",
        json!({"name": "mcp_fx_echo"}),
    )
    .await;
    // Approving needs a quarantined tool: tests/it/catalog.rs checks that answer whole.
    seen.insert("tools.approve".into());
    // Resetting pins needs a damaged pin file: tests/it/hardening3_pins.rs checks that answer.
    seen.insert("tools.pins_reset".into());
    // Fleet mode needs PostgreSQL (tests/it/fleet.rs checks that answer); out of it, the
    // method says so as invalid params.
    // (tests/it/fleet_trust.rs checks the token methods' answers).
    for (method, params) in [
        ("fleet.status", json!({})),
        ("fleet.token_list", json!({})),
        ("fleet.token_create", json!({"user": "alice"})),
        ("fleet.token_revoke", json!({"id": "t1"})),
    ] {
        let fleet = d.call(method, params).await;
        assert_eq!(fleet["error"]["code"], -32602, "{method}: {fleet}");
        seen.insert(method.into());
    }
    call_checked(&d, &doc, &mut seen, "session.delete", json!({"id": id})).await;
    // After the tool calls above, which the audit log holds (or will: it writes in batches).
    call_checked(&d, &doc, &mut seen, "audit.recent", json!({"limit": 5})).await;
    // After the tool calls above, so the built-in loop breaker has a scope to show.
    let guards = call_checked(&d, &doc, &mut seen, "guards.status", json!({})).await;
    assert_eq!(guards["rules"][0]["name"], "default-loop");
    let reset = json!({"rule": "default-loop"});
    call_checked(&d, &doc, &mut seen, "guards.reset", reset).await;
    let skills = call_checked(&d, &doc, &mut seen, "list_skills", json!({})).await;
    assert_eq!(skills["skills"][0]["name"], "demo");
    call_checked(&d, &doc, &mut seen, "get_skill", json!({"name": "demo"})).await;
    let file = json!({"name": "demo", "path": "SKILL.md"});
    call_checked(&d, &doc, &mut seen, "read_skill_file", file).await;
    let commands = call_checked(&d, &doc, &mut seen, "list_commands", json!({})).await;
    assert_eq!(commands["commands"][0]["name"], "mcp reload");
    let status = json!({"name": "mcp status"});
    call_checked(&d, &doc, &mut seen, "get_command", status).await;

    // The MCP surface besides tools (the fixture's FIXTURE_RESOURCES).
    call_checked(&d, &doc, &mut seen, "list_prompts", json!({})).await;
    let prompt = json!({"name": "mcp_fx_greet", "arguments": {"name": "Ada"}});
    call_checked(&d, &doc, &mut seen, "get_prompt", prompt).await;
    call_checked(&d, &doc, &mut seen, "list_resources", json!({})).await;
    call_checked(&d, &doc, &mut seen, "list_resource_templates", json!({})).await;
    let uri = json!({"uri": "fixture://fx/bytes"});
    call_checked(&d, &doc, &mut seen, "read_resource", uri).await;
    let complete = json!({"ref": {"type": "ref/prompt", "name": "mcp_fx_greet"},
                          "argument": {"name": "name", "value": "A"}});
    call_checked(&d, &doc, &mut seen, "complete", complete).await;

    // Subscriptions: their notifications and their unsubscribe answers.
    let mut ws = d.ws().await;
    let sub = ws.call("subscribe_tools_changed", json!({})).await;
    let tools_sub = sub["result"].clone();
    seen.insert("subscribe_tools_changed".into());
    let mut surface_subs = Vec::new();
    for method in ["subscribe_prompts_changed", "subscribe_resources_changed"] {
        let sub = ws.call(method, json!({})).await;
        surface_subs.push(sub["result"].clone());
        seen.insert(method.into());
    }
    let sub = ws
        .call("subscribe_resource", json!({"uri": "fixture://shared"}))
        .await;
    let resource_sub = sub["result"].clone();
    seen.insert("subscribe_resource".into());
    loop {
        let n = ws.recv().await;
        if n["method"] == "resource_updated" {
            check_notification(&doc, "subscribe_resource", &n["params"]);
            break;
        }
    }
    let r = ws.call("unsubscribe_resource", json!([resource_sub])).await;
    check(&doc, "unsubscribe_resource", &r["result"]);
    seen.insert("unsubscribe_resource".into());
    let sub = ws
        .call(
            "subscribe_invoke",
            json!({"name": "mcp_fx_sleep", "arguments": {"ms": 300, "progress": true}}),
        )
        .await;
    assert!(sub.get("result").is_some(), "{sub}");
    seen.insert("subscribe_invoke".into());
    let mut kinds = Vec::new();
    while !kinds.contains(&"result".to_owned()) {
        let n = ws.recv().await;
        if n["method"] == "invoke_event" {
            check_notification(&doc, "subscribe_invoke", &n["params"]);
            kinds.push(n["params"]["result"]["kind"].as_str().unwrap().to_owned());
        }
    }
    assert!(kinds.contains(&"update".to_owned()), "{kinds:?}");
    // An input request, answered with invoke.respond.
    let sub = ws
        .call(
            "subscribe_invoke",
            json!({"name": "mcp_fx_ask_user", "arguments": {"message": "ok?"},
                   "call_id": "asking", "inputs": ["elicitation"]}),
        )
        .await;
    assert!(sub.get("result").is_some(), "{sub}");
    let mut kinds = Vec::new();
    while !kinds.contains(&"result".to_owned()) {
        let n = ws.recv().await;
        if n["method"] == "invoke_event" {
            check_notification(&doc, "subscribe_invoke", &n["params"]);
            let event = &n["params"]["result"];
            kinds.push(event["kind"].as_str().unwrap().to_owned());
            if event["kind"] == "input_request" {
                let answer = json!({"call_id": "asking", "request_id": event["request_id"],
                                    "result": {"action": "decline"}});
                call_checked(&d, &doc, &mut seen, "invoke.respond", answer).await;
            }
        }
    }
    assert!(kinds.contains(&"input_request".to_owned()), "{kinds:?}");
    // Only now, as it reconnects the server the calls above used.
    call_checked(&d, &doc, &mut seen, "mcp.reload", json!({"server": "fx"})).await;
    // A config change gives one tools_changed; removing fx, also one prompts_changed and
    // one resources_changed.
    write_atomic(&d.config_path(), &json!({"checkpoint": {"enabled": true}}));
    let mut notified = BTreeSet::new();
    while notified.len() < 3 {
        let n = ws.recv().await;
        let subscribe = match n["method"].as_str() {
            Some("tools_changed") => "subscribe_tools_changed",
            Some("prompts_changed") => "subscribe_prompts_changed",
            Some("resources_changed") => "subscribe_resources_changed",
            _ => continue,
        };
        check_notification(&doc, subscribe, &n["params"]);
        notified.insert(subscribe);
    }
    for (method, sub) in [
        "unsubscribe_prompts_changed",
        "unsubscribe_resources_changed",
    ]
    .into_iter()
    .zip(surface_subs)
    {
        let r = ws.call(method, json!([sub])).await;
        check(&doc, method, &r["result"]);
        seen.insert(method.into());
    }
    // An edited skill gives one skills_changed.
    let sub = ws.call("subscribe_skills_changed", json!({})).await;
    let skills_sub = sub["result"].clone();
    seen.insert("subscribe_skills_changed".into());
    let skill_md = d.workspace().join(".toolhost/skills/demo/SKILL.md");
    std::fs::write(skill_md, "---\nname: demo\ndescription: Edited.\n---\n").unwrap();
    loop {
        let n = ws.recv().await;
        if n["method"] == "skills_changed" {
            check_notification(&doc, "subscribe_skills_changed", &n["params"]);
            break;
        }
    }
    let r = ws
        .call("unsubscribe_skills_changed", json!([skills_sub]))
        .await;
    check(&doc, "unsubscribe_skills_changed", &r["result"]);
    seen.insert("unsubscribe_skills_changed".into());
    // A new command file gives one commands_changed.
    let sub = ws.call("subscribe_commands_changed", json!({})).await;
    let commands_sub = sub["result"].clone();
    seen.insert("subscribe_commands_changed".into());
    let commands_dir = d.workspace().join(".toolhost/commands");
    std::fs::create_dir_all(&commands_dir).unwrap();
    std::fs::write(commands_dir.join("hello.md"), "Hello.\n").unwrap();
    loop {
        let n = ws.recv().await;
        if n["method"] == "commands_changed" {
            check_notification(&doc, "subscribe_commands_changed", &n["params"]);
            break;
        }
    }
    let r = ws
        .call("unsubscribe_commands_changed", json!([commands_sub]))
        .await;
    check(&doc, "unsubscribe_commands_changed", &r["result"]);
    seen.insert("unsubscribe_commands_changed".into());
    let r = ws
        .call("unsubscribe_tools_changed", json!([tools_sub]))
        .await;
    check(&doc, "unsubscribe_tools_changed", &r["result"]);
    seen.insert("unsubscribe_tools_changed".into());
    let r = ws
        .call("unsubscribe_invoke", json!(["no-such-subscription"]))
        .await;
    check(&doc, "unsubscribe_invoke", &r["result"]);
    seen.insert("unsubscribe_invoke".into());

    // The approval queue: a strict session's call waits, is listed, is denied.
    let sub = ws.call("subscribe_approvals", json!({})).await;
    let approvals_sub = sub["result"].clone();
    seen.insert("subscribe_approvals".into());
    let strict = d
        .call("session.create", json!({"approval": "strict"}))
        .await["result"]["id"]
        .clone();
    let mut caller = d.raw_lines().await;
    caller
        .send(
            "subscribe_invoke",
            json!({"name": "bash", "arguments": {"command": "true"}, "session_id": strict}),
        )
        .await;
    let pending = loop {
        let n = ws.recv().await;
        if n["method"] == "approval_event" {
            check_notification(&doc, "subscribe_approvals", &n["params"]);
            break n["params"]["result"].clone();
        }
    };
    assert_eq!(pending["kind"], "approval_pending", "{pending}");
    let list = call_checked(&d, &doc, &mut seen, "approvals.list", json!({})).await;
    assert_eq!(list["pending"][0]["id"], pending["id"], "{list}");
    let deny = json!({"id": pending["id"], "decision": "deny", "reason": "not now"});
    call_checked(&d, &doc, &mut seen, "approvals.decide", deny).await;
    loop {
        let n = ws.recv().await;
        if n["method"] == "approval_event" {
            check_notification(&doc, "subscribe_approvals", &n["params"]);
            assert_eq!(n["params"]["result"]["kind"], "approval_decided", "{n}");
            break;
        }
    }
    let r = ws
        .call("unsubscribe_approvals", json!([approvals_sub]))
        .await;
    check(&doc, "unsubscribe_approvals", &r["result"]);
    seen.insert("unsubscribe_approvals".into());

    // Checkpoints: a write is an entry to list, diff and restore.
    let write = json!({"name": "write_file", "arguments": {"path": "cp.txt", "content": "cp\n"}});
    call_checked(&d, &doc, &mut seen, "invoke", write).await;
    let list = call_checked(&d, &doc, &mut seen, "checkpoint.list", json!({})).await;
    let id = list["entries"][0]["id"].clone();
    assert!(id.is_string(), "{list}");
    call_checked(&d, &doc, &mut seen, "checkpoint.diff", json!({"id": id})).await;
    let restore = json!({"id": id, "force": true});
    call_checked(&d, &doc, &mut seen, "checkpoint.restore", restore).await;

    let documented: BTreeSet<String> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        documented, seen,
        "every documented method is exercised, and nothing else is served"
    );
}
