//! Fleet mode (issue 45): what a gateway of members on one PostgreSQL serves and costs,
//! on the real `toolhost` binary (`TOOLHOST_BENCH_BIN`, else the one built beside this),
//! a throw-away PostgreSQL and a real HAProxy (the suite's own, `tests/it/common/`). Prints
//! a table; it never fails on a figure.
//!
//! Sections (all by default; `cargo bench --bench fleet -- gateway` runs some):
//! - `gateway`: the same closed-loop load — `CLIENTS` clients, each with its own session
//!   and a keep-alive connection to HAProxy (round robin, a new connection to a member per
//!   request, as deploy/haproxy.cfg), looping JSON-RPC `invoke read_file` in its session —
//!   against one sled daemon, then 1, 2 and 3 members on PostgreSQL. Calls/s, p50/p99, and
//!   the CPU (from /proc) per call of each member, of PostgreSQL and of HAProxy. On 2 cores
//!   client, gateway, database and members share the machine: the calls/s are bounded by
//!   it, and the CPU per call is the figure that carries over.
//! - `session`: `session.create` (a session write: sled's tree, or a row in PostgreSQL)
//!   through the same gateway, one at a time, sled against one member.
//! - `fanout`: a call held for approval on member A, allowed on member C: from C's
//!   `approvals.decide` to A's result (the NOTIFY, A resuming, the call running).
//!
//! `TOOLHOST_BENCH_SECS` (default 6) is each load phase's length; a whole run takes about
//! a minute. Run: `cargo bench --bench fleet`, or on the debug build without the release
//! profile's LTO: `TOOLHOST_BENCH_BIN=target/debug/toolhost cargo bench --profile dev
//! --bench fleet`. Needs Debian's `postgresql` and `haproxy` (tests/run.sh installs them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
#[allow(dead_code)]
mod daemon;
#[path = "support/procs.rs"]
#[allow(dead_code)]
mod procs;
#[path = "support/sections.rs"]
mod sections;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::process::Child;
use toolhost::client::Client;

use common::haproxy::Haproxy;
use common::postgres::Postgres;
use sections::Selection;

const SECTIONS: &[&str] = &["gateway", "session", "fanout"];
const TOKEN: &str = "fleet-bench-operator-token-0123";
const KEY: &str = "fleet-bench-key-0123456789abcdef0123";
const CLIENTS: usize = 8;

/// One daemon of a run: its process, a client on its socket, its TCP address.
struct Member {
    child: Child,
    client: Client,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Member {
    fn pid(&self) -> i32 {
        self.child.id().map_or(0, |p| p as i32)
    }
}

/// A free `127.0.0.1:PORT`.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// A daemon on TCP with the operator's [`TOKEN`]: on sled (`pg` none) or a member of the
/// fleet on `pg`; approval `mode`.
async fn member(pg: Option<&Postgres>, mode: &str) -> Member {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let addr = free_addr();
    let mut config = json!({
        "listen": {"tcp": addr, "token_file": token},
        "approval": {"mode": mode, "wait_s": 60},
    });
    if let Some(pg) = pg {
        config["store"] = json!({"kind": "postgres", "url": pg.url(), "pool": 4});
        config["fleet"] = json!({"key": KEY});
    }
    let (child, client, _) = daemon::start(dir.path(), &config).await;
    std::fs::write(dir.path().join("ws/f.txt"), "hello fleet\n").unwrap();
    Member {
        child,
        client,
        addr,
        _dir: dir,
    }
}

/// A keep-alive HTTP/1.1 connection to the gateway.
struct Conn(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Conn {
    async fn open(addr: &str) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        Conn(sender)
    }

    /// One JSON-RPC call: its result, and the member that answered (`X-Served-By`).
    async fn call(&mut self, method: &str, params: Value) -> (Value, String) {
        self.0.ready().await.unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let req = hyper::Request::post("/")
            .header("Host", "gateway")
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let res = self.0.send_request(req).await.unwrap();
        let by = res
            .headers()
            .get("x-served-by")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (v["result"].clone(), by)
    }
}

/// A session through the gateway; its id.
async fn session(conn: &mut Conn) -> String {
    let (r, _) = conn.call("session.create", json!({})).await;
    r["id"].as_str().expect("session.create").to_owned()
}

/// What one load phase measured.
struct Phase {
    latencies_ms: Vec<f64>,
    failed: usize,
    /// Calls answered by each member (`m0`, `m1`, …), in order.
    served: Vec<usize>,
    elapsed: Duration,
}

/// `CLIENTS` closed-loop clients through `gw` for `secs`.
async fn load(gw: &Haproxy, members: usize, secs: u64) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for n in 0..CLIENTS {
        let (addr, stop) = (gw.addr.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            let id = session(&mut conn).await;
            let mut samples = Vec::new();
            let (mut failed, mut served) = (0, vec![0usize; members]);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let params = json!({"name": "read_file", "arguments": {"path": "f.txt"},
                                    "session_id": id, "call_id": format!("b{n}-{i}")});
                let t = Instant::now();
                let (r, by) = conn.call("invoke", params).await;
                samples.push(t.elapsed().as_secs_f64() * 1e3);
                if r["result"]["ok"] != true {
                    failed += 1;
                }
                if let Some(k) = by.strip_prefix('m').and_then(|k| k.parse::<usize>().ok()) {
                    if let Some(s) = served.get_mut(k) {
                        *s += 1;
                    }
                }
            }
            (samples, failed, served)
        }));
    }
    // Each client's session.create falls in the phase too: one call of hundreds.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut phase = Phase {
        latencies_ms: Vec::new(),
        failed: 0,
        served: vec![0; members],
        elapsed: Duration::ZERO,
    };
    for t in tasks {
        let (samples, failed, served) = t.await.unwrap();
        phase.latencies_ms.extend(samples);
        phase.failed += failed;
        for (all, s) in phase.served.iter_mut().zip(served) {
            *all += s;
        }
    }
    phase.elapsed = started.elapsed();
    phase
}

/// The CPU seconds of each process tree of `pids`.
fn cpu(pids: &[i32]) -> Vec<f64> {
    pids.iter()
        .map(|&p| procs::tree(p).iter().map(|&q| procs::cpu_secs(q)).sum())
        .collect()
}

fn percentile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// The postmaster's pid (the first line of its `postmaster.pid`).
fn postmaster(pg: &Postgres) -> i32 {
    let text =
        std::fs::read_to_string(pg.dir.path().join("data/postmaster.pid")).unwrap_or_default();
    text.lines()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0)
}

/// One row of the gateway table: `members` daemons (sled when `pg` is none) behind HAProxy.
async fn gateway_row(pg: Option<&Postgres>, n: usize, secs: u64) -> Vec<String> {
    let mut members = Vec::new();
    for _ in 0..n {
        members.push(member(pg, "auto").await);
    }
    let backends: Vec<String> = members.iter().map(|m| m.addr.clone()).collect();
    let gw = Haproxy::start(&backends, TOKEN).await;
    let mut pids: Vec<i32> = members.iter().map(Member::pid).collect();
    pids.push(gw_pid(&gw));
    pids.push(pg.map_or(0, postmaster));
    let before = cpu(&pids);
    let phase = load(&gw, n, secs).await;
    let after = cpu(&pids);
    let used: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let calls = phase.latencies_ms.len();
    let per_call = |secs: f64, calls: usize| {
        if calls == 0 {
            "-".to_owned()
        } else {
            format!("{:.2}", secs * 1e3 / calls as f64)
        }
    };
    let member_cpu: Vec<String> = (0..n).map(|i| per_call(used[i], phase.served[i])).collect();
    let row = vec![
        format!("{n}"),
        if pg.is_some() { "postgres" } else { "sled" }.to_owned(),
        format!("{calls}"),
        format!("{}", phase.failed),
        format!("{:.0}", calls as f64 / phase.elapsed.as_secs_f64()),
        format!("{:.2}", percentile(&phase.latencies_ms, 0.5)),
        format!("{:.2}", percentile(&phase.latencies_ms, 0.99)),
        member_cpu.join(" / "),
        if pg.is_some() {
            per_call(used[n + 1], calls)
        } else {
            "-".to_owned()
        },
        per_call(used[n], calls),
    ];
    drop(gw);
    for m in members {
        daemon::stop(m.child).await;
    }
    row
}

fn gw_pid(gw: &Haproxy) -> i32 {
    gw.pid().map_or(0, |p| p as i32)
}

/// `session.create` one at a time through a gateway in front of one daemon: p50, p99.
async fn session_row(pg: Option<&Postgres>, n: usize) -> Vec<String> {
    let m = member(pg, "auto").await;
    let gw = Haproxy::start(std::slice::from_ref(&m.addr), TOKEN).await;
    let mut conn = Conn::open(&gw.addr).await;
    let mut samples = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        session(&mut conn).await;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(gw);
    daemon::stop(m.child).await;
    vec![
        if pg.is_some() { "postgres" } else { "sled" }.to_owned(),
        format!("{n}"),
        format!("{:.2}", percentile(&samples, 0.5)),
        format!("{:.2}", percentile(&samples, 0.99)),
    ]
}

/// `rounds` calls held on A and allowed on C: decide → result on A, and the decide's own
/// round trip, in ms.
async fn fanout(pg: &Postgres, rounds: usize) -> (Vec<f64>, Vec<f64>) {
    let a = member(Some(pg), "strict").await;
    let c = member(Some(pg), "strict").await;
    let (mut resumed, mut decided) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let call_id = format!("fan-{i}");
        let params = serde_json::from_value(json!({"name": "write_file",
            "arguments": {"path": format!("out-{i}.txt"), "content": "x"}, "call_id": call_id}))
        .unwrap();
        let sub = a.client.subscribe_invoke(&params).await.unwrap();
        let id = loop {
            let list = c.client.approvals_list().await.unwrap();
            if let Some(e) = list.pending.iter().find(|e| e.call_id == call_id) {
                break e.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let decide = serde_json::from_value(json!({"id": id, "decision": "allow_once"})).unwrap();
        let t = Instant::now();
        c.client.approvals_decide(&decide).await.unwrap();
        decided.push(t.elapsed().as_secs_f64() * 1e3);
        let (_, result) = sub.finish().await.unwrap();
        resumed.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(result.result.ok, "fan-out call {i} failed");
    }
    daemon::stop(a.child).await;
    daemon::stop(c.child).await;
    (resumed, decided)
}

fn print_table(rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("  {}", line.join("  ").trim_end());
    }
}

#[tokio::main]
async fn main() {
    let only = Selection::from_args(SECTIONS);
    let secs = std::env::var("TOOLHOST_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let (cpus, load) = sections::machine();
    println!(
        "toolhost fleet benchmark: {} on {cpus} CPUs, load average {load}\n\
         PostgreSQL and HAProxy are the suite's (tests/it/common), on this machine too",
        daemon::bin()
    );
    let pg = Postgres::start();
    if only.has("gateway") {
        println!(
            "\n## gateway: {CLIENTS} clients, JSON-RPC invoke read_file in a session, {secs} s a row\n\
             CPU ms per call: each member's per call it served; PostgreSQL's and HAProxy's per call"
        );
        let mut rows = vec![[
            "members",
            "store",
            "calls",
            "failed",
            "calls/s",
            "p50 ms",
            "p99 ms",
            "member CPU ms/call",
            "postgres",
            "haproxy",
        ]
        .map(str::to_owned)
        .to_vec()];
        rows.push(gateway_row(None, 1, secs).await);
        for n in 1..=3 {
            rows.push(gateway_row(Some(&pg), n, secs).await);
        }
        print_table(&rows);
        println!(
            "  the 1-member rows side by side are what PostgreSQL-backed sessions and audit add"
        );
    }
    if only.has("session") {
        println!("\n## session: session.create through the gateway, one at a time");
        let mut rows = vec![["store", "n", "p50 ms", "p99 ms"]
            .map(str::to_owned)
            .to_vec()];
        rows.push(session_row(None, 200).await);
        rows.push(session_row(Some(&pg), 200).await);
        print_table(&rows);
    }
    if only.has("fanout") {
        let rounds = 30;
        let (resumed, decided) = fanout(&pg, rounds).await;
        println!("\n## fanout: a call held on A, allowed on C ({rounds} rounds)");
        let row = |what: &str, v: &[f64]| {
            vec![
                what.to_owned(),
                format!("{:.2}", percentile(v, 0.5)),
                format!("{:.2}", percentile(v, 0.99)),
                format!("{:.2}", v.iter().cloned().fold(0.0, f64::max)),
            ]
        };
        print_table(&[
            ["", "p50 ms", "p99 ms", "max ms"]
                .map(str::to_owned)
                .to_vec(),
            row("C's approvals.decide answered", &decided),
            row("decide sent on C → result on A", &resumed),
        ]);
        println!("  target: a decision reaches A within 200 ms");
    }
}
