//! What the single-daemon benchmarks (`custom`, `skills`) share: a real `toolhost serve` on
//! a temp folder, a client once it answers, its stop, and latency percentiles.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};
use toolhost::client::Client;

pub const BIN: &str = env!("CARGO_BIN_EXE_toolhost");

/// The daemon a benchmark starts: `TOOLHOST_BENCH_BIN` when set (say, a release daemon
/// driven by a debug-built benchmark, whose own speed is not in the daemon's figures),
/// else the one built beside the benchmark.
pub fn bin() -> String {
    std::env::var("TOOLHOST_BENCH_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// `p50 … p90 … p99 …` of samples in milliseconds.
pub fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  (n={})",
        at(0.5),
        at(0.9),
        at(0.99),
        v.len()
    )
}

/// Starts a daemon on `dir` (workspace `ws`, data `data`, its own XDG config and home) with
/// `config` as its config.json; returns it, a client and the time from spawn to the first
/// answer (polled every 2 ms, so start-up figures are not rounded up).
pub async fn start(dir: &Path, config: &Value) -> (Child, Client, Duration) {
    start_with_log(dir, config, None).await
}

/// [`start`]; with `Some(filter)`, `RUST_LOG` is `filter` and the daemon's log (stderr) is
/// piped (`Child::stderr`), for a benchmark that reads figures the daemon logs.
pub async fn start_with_log(
    dir: &Path,
    config: &Value,
    log: Option<&str>,
) -> (Child, Client, Duration) {
    for d in ["ws", "data", "xdg", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    // Benchmarks repeat one call thousands of times: the built-in loop breaker stays (its
    // check runs on every call) but wide, unless the config names its own guards.
    let mut config = config.clone();
    if let Some(c) = config.as_object_mut() {
        c.entry("guards")
            .or_insert_with(|| serde_json::json!([wide_loop_breaker()]));
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let socket = dir.join("toolhost.sock");
    let started = Instant::now();
    let daemon = Command::new(bin())
        .arg("--socket")
        .arg(&socket)
        .arg("--config")
        .arg(dir.join("config.json"))
        .args(["serve", "--workspace"])
        .arg(dir.join("ws"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("HOME", dir.join("home"))
        .env("RUST_LOG", log.unwrap_or("warn"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(match log {
            Some(_) => Stdio::piped(),
            None => Stdio::inherit(),
        })
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        if let Ok(c) = Client::connect(&socket).await {
            if c.health().await.is_ok() {
                break c;
            }
        }
        assert!(Instant::now() < deadline, "daemon did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    (daemon, client, started.elapsed())
}

/// The built-in loop breaker kept but wide enough for a benchmark: a config's `guards` entry.
fn wide_loop_breaker() -> Value {
    serde_json::json!({"name": "default-loop", "loop": {"calls": 1_000_000_000, "window_s": 60}})
}

/// SIGTERM, then wait for the daemon to exit (at most 10 s).
pub async fn stop(mut daemon: Child) {
    if let Some(pid) = daemon.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), daemon.wait()).await;
}
