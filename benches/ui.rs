//! The operator's page, on the real `toolhost` binary over its Unix socket:
//!
//! - first byte of `GET /ui/` (request written → first byte of the answer read) and the
//!   first load's size (the page, its script and its style); targets ≤ 50 ms and ≤ 100 KB;
//! - what an open page costs the daemon: its CPU over a few seconds of 1,000 `read_file`
//!   calls a second, without and then with a `GET /ui/events` stream open and read (the
//!   stream batches per 100 ms); target ≤ 1 % of a core more.
//!
//! Prints figures and never fails on them. `TOOLHOST_BENCH_N` sets the first-byte sample
//! count (default 200), `TOOLHOST_BENCH_SECS` each CPU window (default 5). Run:
//! `cargo bench --bench ui`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use toolhost::client::Client;
use toolhost::protocol::InvokeParams;

#[path = "support/daemon.rs"]
mod daemon;
use daemon::{percentiles, stop};

/// The rate the CPU windows call at.
const CALLS_PER_SECOND: u64 = 1000;
/// CPU windows of each kind.
const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let n = env("TOOLHOST_BENCH_N", 200) as usize;
    let secs = env("TOOLHOST_BENCH_SECS", 5);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (daemon, client, _) = daemon::start(dir, &json!({})).await;
    std::fs::write(dir.join("ws/small.txt"), "hello\n").unwrap();
    let socket = dir.join("toolhost.sock");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("toolhost operator page benchmark ({cpus} CPUs shared by client and daemon)");

    first_byte(&socket, n).await;
    let pid = daemon.id().unwrap() as i32;
    let client = Arc::new(client);
    // Windows without and with a page alternate, so the machine's noise hits both alike;
    // the medians are compared.
    let (mut quiet, mut watched, mut streamed) = (Vec::new(), Vec::new(), 0);
    for _ in 0..ROUNDS {
        quiet.push(cpu_under_load(&client, pid, secs).await);
        let (stream, read) = open_events(&socket).await;
        watched.push(cpu_under_load(&client, pid, secs).await);
        stream.abort();
        streamed += read.load(Ordering::Relaxed);
    }
    let (quiet, watched) = (median(quiet), median(watched));
    println!(
        "daemon CPU at {CALLS_PER_SECOND} calls/s (median of {ROUNDS} windows of {secs} s each): {quiet:.1} % of a core without a page, {watched:.1} % with /ui/events open ({streamed} bytes streamed); the page adds {:.2} %   [target ≤ 1 %]",
        watched - quiet
    );
    stop(daemon).await;
}

/// One request on a fresh connection; the time to the answer's first byte and its bytes.
async fn get(socket: &Path, path: &str) -> (Duration, Vec<u8>) {
    let mut s = UnixStream::connect(socket).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let t = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut first = [0u8; 1];
    s.read_exact(&mut first).await.unwrap();
    let ttfb = t.elapsed();
    let mut rest = first.to_vec();
    s.read_to_end(&mut rest).await.unwrap();
    (ttfb, rest)
}

async fn first_byte(socket: &Path, n: usize) {
    let load: usize = {
        let mut total = 0;
        for path in ["/ui/", "/ui/app.js", "/ui/app.css"] {
            total += get(socket, path).await.1.len();
        }
        total
    };
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        samples.push(get(socket, "/ui/").await.0.as_secs_f64() * 1000.0);
    }
    println!(
        "first byte of GET /ui/: {}   [target ≤ 50 ms]; first load {:.1} KB with headers   [target ≤ 100 KB]",
        percentiles(samples),
        load as f64 / 1024.0
    );
}

/// Opens `/ui/events` with a fresh page token and reads it in a task, counting the bytes.
async fn open_events(socket: &Path) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let mut login = UnixStream::connect(socket).await.unwrap();
    login
        .write_all(b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    login.read_to_string(&mut answer).await.unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let page: Value = serde_json::from_str(body).unwrap();
    let token = page["page_token"].as_str().unwrap().to_owned();
    let mut s = UnixStream::connect(socket).await.unwrap();
    let req =
        format!("GET /ui/events HTTP/1.1\r\nHost: localhost\r\nX-Toolhost-Page: {token}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counted = read.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            counted.fetch_add(n, Ordering::Relaxed);
        }
    });
    (task, read)
}

/// Calls `read_file` at [`CALLS_PER_SECOND`] for `secs` and returns the daemon's CPU over
/// that time, in percent of one core.
async fn cpu_under_load(client: &Arc<Client>, pid: i32, secs: u64) -> f64 {
    let mut args = Map::new();
    args.insert("path".into(), json!("small.txt"));
    let params = Arc::new(InvokeParams::new("read_file", args));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / CALLS_PER_SECOND));
    let (cpu0, t0) = (cpu_time(pid), Instant::now());
    let mut calls = tokio::task::JoinSet::new();
    while t0.elapsed() < Duration::from_secs(secs) {
        tick.tick().await;
        let (client, params) = (client.clone(), params.clone());
        calls.spawn(async move { client.invoke(&params).await.map(|r| r.result.ok) });
        while let Some(done) = calls.try_join_next() {
            assert!(matches!(done, Ok(Ok(true))), "{done:?}");
        }
    }
    while calls.join_next().await.is_some() {}
    let (cpu, wall) = (cpu_time(pid) - cpu0, t0.elapsed());
    cpu.as_secs_f64() / wall.as_secs_f64() * 100.0
}

/// The process's user and system CPU time so far, from `/proc/PID/stat`.
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) close with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}
