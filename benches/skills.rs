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
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::Child;
use toolhost::client::Client;

#[path = "support/daemon.rs"]
mod daemon;
use daemon::{percentiles, stop};

const SKILLS: usize = 1000;

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

/// A daemon on `dir` whose config searches `skills` only.
async fn start(dir: &Path, skills: &Path) -> (Child, Client, Duration) {
    daemon::start(
        dir,
        &json!({"skills": {"paths": [skills], "discover": false}}),
    )
    .await
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
