//! What an idle daemon costs, and whether it gives memory back after load (issue #48).
//! Prints tables; it never fails on a figure (each target is printed beside its figure).
//!
//! Sections (all by default; `cargo bench --bench idle -- wakeups` runs one):
//! - `wakeups`: wake-ups (context switches of every thread, from
//!   `/proc/<pid>/task/*/status`) and CPU (each thread's `schedstat`) of the daemon over 10 s, in
//!   each idle state: no MCP servers; two stdio servers connected; each with the config,
//!   tool and skill folders watched (always) and after a burst of calls; each
//!   35 s after the start or the burst (see `SETTLE`). Target: ≤ 1
//!   wake-up/s and ≤ 0.1 ms CPU/s.
//! - `memory`: the daemon's RSS idle, right after `TOOLHOST_BENCH_BIG` (default 10,000)
//!   calls with 1 MB outputs (8 at a time), and 5 s and 60 s later. Target: within 5 MB of
//!   idle a minute later.
//!
//! Runs on the fixture MCP server (tests/fixtures/mcp_server.rs); needs nothing installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolhost::client::Client;
use toolhost::protocol::InvokeParams;

#[path = "support/daemon.rs"]
#[allow(dead_code)]
mod daemon;
#[path = "support/procs.rs"]
#[allow(dead_code)]
mod procs;
#[path = "support/sections.rs"]
mod sections;
#[path = "support/threads.rs"]
mod threads;

const SECTIONS: &[&str] = &["wakeups", "memory"];
const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");
/// How long the daemon is watched in each state.
const WINDOW: Duration = Duration::from_secs(10);
/// How long after its start (or a burst) the daemon is left before it is watched: the
/// escapee scans of running servers back off from 0.5 s to once in 30 s by then.
const SETTLE: Duration = Duration::from_secs(35);

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let selection = sections::Selection::from_args(SECTIONS);
    let (cpus, load) = sections::machine();
    println!(
        "toolhost idle benchmark ({cpus} CPUs; load average {load})\nbinary: {}",
        daemon::BIN
    );
    if selection.has("wakeups") {
        wakeups().await;
    }
    if selection.has("memory") {
        memory().await;
    }
}

/// A config with `servers` fixture servers (their `big` and `echo` tools need no approval).
fn config(servers: usize) -> Value {
    let blocks: serde_json::Map<String, Value> = (0..servers)
        .map(|i| {
            let block = json!({"command": FIXTURE,
                               "approval": {"echo": "read_only", "big": "read_only"}});
            (format!("fx{i}"), block)
        })
        .collect();
    json!({"mcp_servers": blocks})
}

async fn start(dir: &Path, servers: usize) -> (tokio::process::Child, Client) {
    // Watched folders: a workspace tool folder and skills.
    for folder in [
        "ws/.toolhost/tools",
        "ws/.agents/skills",
        "xdg/toolhost/tools",
    ] {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
    }
    let (child, client, _) = daemon::start(dir, &config(servers)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st: Value = client.call("mcp.status", &json!({})).await.unwrap();
        let ready = st["servers"]
            .as_array()
            .is_some_and(|s| s.len() == servers && s.iter().all(|s| s["state"] == "ready"));
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "servers not ready: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, client)
}

async fn echo(c: &Client, server: usize) {
    let args = json!({"text": "hi"}).as_object().unwrap().clone();
    let r = c
        .invoke(&InvokeParams::new(format!("mcp_fx{server}_echo"), args))
        .await
        .unwrap();
    assert!(r.result.ok, "echo failed");
}

/// Wake-ups and CPU of `pid` over [`WINDOW`]: (wake-ups/s, CPU ms/s, the busiest threads).
async fn watch(pid: i32) -> (f64, f64, String) {
    let (before, cpu) = (threads::switches(pid), threads::cpu_ns(pid));
    tokio::time::sleep(WINDOW).await;
    let woke = threads::woke(&before, &threads::switches(pid));
    let cpu = threads::cpu_ns(pid).saturating_sub(cpu) as f64 / 1e9;
    let secs = WINDOW.as_secs_f64();
    let total: u64 = woke.iter().map(|w| w.1).sum();
    let top: Vec<String> = woke
        .iter()
        .take(3)
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    (total as f64 / secs, cpu * 1000.0 / secs, top.join(", "))
}

async fn wakeups() {
    println!(
        "\n== idle wake-ups and CPU over {} s (target ≤ 1 wake-up/s, ≤ 0.1 ms CPU/s)",
        WINDOW.as_secs()
    );
    println!(
        "  {:<44} {:>10} {:>10}  busiest threads (wake-ups)",
        "state", "wakes/s", "CPU ms/s"
    );
    for servers in [0, 2] {
        let tmp = tempfile::tempdir().unwrap();
        let (child, client) = start(tmp.path(), servers).await;
        let pid = child.id().unwrap() as i32;
        let label = match servers {
            0 => "no MCP servers".to_owned(),
            n => format!("{n} stdio servers connected"),
        };
        tokio::time::sleep(SETTLE).await;
        let rows = [(label.clone(), watch(pid).await)];
        for _ in 0..20 {
            for s in 0..servers {
                echo(&client, s).await;
            }
        }
        let bash = json!({"command": "true"}).as_object().unwrap().clone();
        let _ = client.invoke(&InvokeParams::new("bash", bash)).await;
        tokio::time::sleep(SETTLE).await;
        let after = (format!("{label}, after a burst"), watch(pid).await);
        for (label, (wakes, cpu, top)) in rows.iter().chain([&after]) {
            let met = if *wakes <= 1.0 && *cpu <= 0.1 {
                "(met)"
            } else {
                "(MISSED)"
            };
            println!("  {label:<44} {wakes:>10.1} {cpu:>10.2}  {met} {top}");
        }
        drop(client);
        daemon::stop(child).await;
    }
}

fn rss_mib(pid: i32) -> f64 {
    procs::Mem::mib(procs::mem(pid).rss)
}

async fn memory() {
    let calls: usize = std::env::var("TOOLHOST_BENCH_BIG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    println!(
        "\n== memory after load: {calls} calls with 1 MB outputs, 8 at a time \
         (target: RSS within 5 MB of idle a minute later)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (child, client) = start(tmp.path(), 1).await;
    let pid = child.id().unwrap() as i32;
    echo(&client, 0).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = rss_mib(pid);
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let worker = || async {
        let args = json!({"bytes": 1_000_000}).as_object().unwrap().clone();
        let big = InvokeParams::new("mcp_fx0_big", args);
        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
            let r = client.invoke(&big).await.unwrap();
            assert!(r.result.ok, "a big call failed");
        }
    };
    futures::future::join_all((0..8).map(|_| worker())).await;
    let took = started.elapsed();
    let loaded = rss_mib(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_5 = rss_mib(pid);
    tokio::time::sleep(Duration::from_secs(55)).await;
    let after_60 = rss_mib(pid);
    let met = if after_60 - idle <= 5.0 {
        "(met)"
    } else {
        "(MISSED)"
    };
    println!(
        "  RSS idle {idle:.1} MiB; right after ({:.1} s) {loaded:.1} MiB; 5 s later \
         {after_5:.1} MiB; 60 s later {after_60:.1} MiB, {:+.1} MiB against idle {met}",
        took.as_secs_f64(),
        after_60 - idle
    );
    drop(client);
    daemon::stop(child).await;
}
