//! Guards' cost (proto-docs/guards.md): the check the call pipeline runs for every call,
//! timed in-process on the very code the daemon runs (`toolhost::guards_bench_check`):
//!
//! - `off`: no rule at all (the built-in loop breaker switched off): the cost every call
//!   pays with guards off;
//! - `default`: the built-in loop breaker only (the out-of-the-box config);
//! - `20 rules`: twenty rules, five of which match the call (a host `rate`, a session
//!   `rate`, a `concurrency`, a `loop` and the built-in loop breaker) and fifteen that match
//!   other tools, servers or classes: target p50 ≤ 1 µs.
//!
//! Each check is of a different call (as an agent's are), so the loop breaker counts but
//! never refuses. Prints figures and never fails on them. `TOOLHOST_BENCH_N` sets the
//! sample count (default 200,000). Run: `cargo bench --bench guards`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

fn twenty_rules() -> Value {
    let mut rules = vec![
        json!({"name": "files-host", "tools": ["read_*"], "scope": "host", "rate": {"calls": 1_000_000, "per_s": 1}}),
        json!({"name": "files-session", "sources": ["builtin"], "rate": {"calls": 1_000_000, "per_s": 1, "burst": 100_000}}),
        json!({"name": "reads-at-once", "approval": ["read_only"], "scope": "frontend", "concurrency": {"max": 64, "queue": false}}),
        json!({"name": "tight-loop", "tools": ["read_file"], "loop": {"calls": 1000, "window_s": 10, "ignore": ["request_id"]}}),
    ];
    for i in 0..8 {
        rules.push(json!({"name": format!("server-{i}"), "servers": [format!("srv{i}")], "scope": "host", "rate": {"calls": 10, "per_s": 1}}));
    }
    for i in 0..4 {
        rules.push(json!({"name": format!("paid-{i}"), "tools": [format!("mcp_paid{i}_*")], "daily": {"limit": 100, "time_zone": "UTC"}}));
    }
    rules
        .push(json!({"name": "writes", "approval": ["write"], "rate": {"calls": 30, "per_s": 60}}));
    rules.push(json!({"name": "commands", "approval": ["command"], "concurrency": {"max": 4}}));
    rules.push(
        json!({"name": "modules", "sources": ["module"], "rate": {"calls": 30, "per_s": 60}}),
    );
    assert_eq!(
        rules.len() + 1,
        20,
        "19 rules and the built-in loop breaker"
    );
    Value::Array(rules)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    println!("toolhost guards benchmark: the check of one call, {n} samples each (ns)");
    let off = json!([{"name": "default-loop", "enabled": false}]);
    for (name, rules) in [
        ("off", off),
        ("default", json!([])),
        ("20 rules", twenty_rules()),
    ] {
        let mut t = toolhost::guards_bench_check(rules, n).unwrap();
        t.sort_unstable();
        println!(
            "guards {name:<9} p50 {:>6} ns  p90 {:>6} ns  p99 {:>6} ns",
            percentile(&t, 0.5),
            percentile(&t, 0.9),
            percentile(&t, 0.99)
        );
    }
}
