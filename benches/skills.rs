//! Skills speed, on the real `toolhost` binary over its Unix socket, with 1,000 skills:
//!
//! - `list_skills` latency (the catalog is parsed when the folders change, and its answer
//!   serialised once): target p50 ≤ 2 ms;
//! - start-up: from spawn to the first answer, with 1,000 skills against none (the skills
//!   are scanned before the socket answers): target ≤ 200 ms more.
//!
//! Prints figures and never fails on them. `TOOLHOST_BENCH_N` sets the sample count
//! (default 200). Run: `cargo bench --bench skills`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::{Child, Command};
use toolhost::client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_toolhost");
const SKILLS: usize = 1000;

fn percentiles(mut v: Vec<f64>) -> String {
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

/// `count` skills of a realistic size (a paragraph of description, a page of body, a script).
fn write_skills(root: &Path, count: usize) {
    for i in 0..count {
        let name = format!("skill-{i:04}");
        let dir = root.join(&name);
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        let description = format!("Does task {i} for the benchmark. Use it when the user asks for task {i}, or for anything that looks like it.");
        let body = "Step one: read the input.\nStep two: run scripts/run.sh.\n".repeat(20);
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n{body}"),
        )
        .unwrap();
        std::fs::write(dir.join("scripts/run.sh"), "#!/bin/sh\necho ok\n").unwrap();
    }
}

/// Starts a daemon on `dir` whose config searches `skills` only; returns it, a client and
/// the time from spawn to the first answer.
async fn start(dir: &Path, skills: &Path) -> (Child, Client, Duration) {
    for d in ["ws", "data", "xdg", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("config.json"),
        json!({"skills": {"paths": [skills], "discover": false}}).to_string(),
    )
    .unwrap();
    let socket = dir.join("toolhost.sock");
    let started = Instant::now();
    let daemon = Command::new(BIN)
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
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
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

async fn stop(mut daemon: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), daemon.wait()).await;
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "toolhost skills benchmark ({cpus} CPUs shared by client and daemon, {SKILLS} skills)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let skills = tmp.path().join("skills");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    write_skills(&skills, SKILLS);

    let mut without = Vec::new();
    let mut with = Vec::new();
    for round in 0..5 {
        let dir = tmp.path().join(format!("none-{round}"));
        let (d, _, t) = start(&dir, &empty).await;
        without.push(t.as_secs_f64() * 1e3);
        stop(d).await;
        let dir = tmp.path().join(format!("all-{round}"));
        let (d, _, t) = start(&dir, &skills).await;
        with.push(t.as_secs_f64() * 1e3);
        stop(d).await;
    }
    println!("start-up, no skills:    {}", percentiles(without));
    println!("start-up, {SKILLS} skills: {}", percentiles(with));

    let (daemon, client, _) = start(&tmp.path().join("list"), &skills).await;
    let first: Value = client.call("list_skills", &json!({})).await.unwrap();
    assert_eq!(first["skills"].as_array().unwrap().len(), SKILLS);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: Value = client.call("list_skills", &json!({})).await.unwrap();
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "list_skills ({SKILLS} skills, {} KB): {}",
        first.to_string().len() / 1024,
        percentiles(samples)
    );
    stop(daemon).await;
}
