//! Checkpoint cost, on the real `toolhost` binary over its Unix socket (the `checkpoint`
//! section; proto-docs/checkpoints.md): the latency of a call with checkpoints on against
//! the same call with them off, on generated workspaces (a source tree with a mix of file
//! sizes, and a `.gitignore`d `target/` of 50,000 files), for
//!
//! - (a) nothing changed: `bash true`;
//! - (b) one file changed: `write_file` of one file;
//! - (c) 100 files changed: one `bash` appending to 100 files;
//!
//! side by side, in the same run, with the shadow-git approach other frontends use: the same
//! change, then `git add -A && git commit` into a `--git-dir` outside the tree. Also the
//! first call's cost (the workspace's first full record) and the store's growth per
//! one-line change.
//!
//! Prints a table and never fails on it. `TOOLHOST_BENCH_N` sets the samples per cell
//! (default 30), `TOOLHOST_BENCH_FILES` the sizes (default `1000,10000,100000`). Run:
//! `cargo bench --bench checkpoint`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use serde_json::{json, Value};
use toolhost::client::Client;

#[path = "support/daemon.rs"]
#[allow(dead_code)]
mod daemon;
use daemon::stop;

const IGNORED: usize = 50_000;

/// `files` source files of 200 B – 30 KB (mostly small, a few large), 100 to a folder, and
/// a `.gitignore`d `target/` of many small files.
fn generate(ws: &Path, files: usize) {
    for i in 0..files {
        let dir = ws.join(format!("src/d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let size = match i % 20 {
            0 => 30_000,
            1..=4 => 8_000,
            _ => 200 + (i * 7919) % 3000,
        };
        let line = format!("fn item_{i}() -> u64 {{ {i} }}\n");
        let body = line.repeat(size / line.len() + 1);
        std::fs::write(dir.join(format!("f{:03}.rs", i % 100)), &body[..size]).unwrap();
    }
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    for i in 0..IGNORED {
        let dir = ws.join(format!("target/debug/o{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("{i}.o")), "obj").unwrap();
    }
}

/// p50 and p95 of samples in ms.
fn p50_p95(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

async fn call(client: &Client, name: &str, args: Value) -> f64 {
    let started = Instant::now();
    let r: Value = client
        .call("invoke", &json!({"name": name, "arguments": args}))
        .await
        .unwrap();
    let ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(r["result"]["ok"], true, "{r}");
    ms
}

const HUNDRED: &str =
    "for i in $(seq 0 99); do echo \"// $RANDOM\" >> src/d000/f$(printf %03d $i).rs; done";

/// The three scenarios' samples against one daemon: (a), (b), (c).
async fn scenarios(client: &Client, n: usize) -> [Vec<f64>; 3] {
    let mut out: [Vec<f64>; 3] = Default::default();
    for i in 0..n {
        out[0].push(call(client, "bash", json!({"command": "true"})).await);
        let content = format!("fn changed() -> u64 {{ {i} }}\n");
        out[1].push(
            call(
                client,
                "write_file",
                json!({"path": "src/d001/f001.rs", "content": content}),
            )
            .await,
        );
        out[2].push(call(client, "bash", json!({"command": HUNDRED})).await);
    }
    out
}

fn git(git_dir: &Path, ws: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("--work-tree")
        .arg(ws)
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// `git add -A && git commit` after each scenario's change, timed (the change itself not).
fn shadow_git(git_dir: &Path, ws: &Path, n: usize) -> (f64, [Vec<f64>; 3]) {
    let snapshot = || {
        let started = Instant::now();
        git(git_dir, ws, &["add", "-A"]);
        git(
            git_dir,
            ws,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "--no-verify",
                "-m",
                "checkpoint",
            ],
        );
        started.elapsed().as_secs_f64() * 1e3
    };
    git(git_dir, ws, &["init", "-q"]);
    let first = snapshot();
    let mut out: [Vec<f64>; 3] = Default::default();
    for i in 0..n {
        out[0].push(snapshot());
        std::fs::write(
            ws.join("src/d001/f001.rs"),
            format!("fn changed() -> u64 {{ {i} }}\n"),
        )
        .unwrap();
        out[1].push(snapshot());
        let ok = std::process::Command::new("bash")
            .args(["-c", HUNDRED])
            .current_dir(ws)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        out[2].push(snapshot());
    }
    (first, out)
}

fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else { continue };
        total += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    total
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let sizes: Vec<usize> = std::env::var("TOOLHOST_BENCH_FILES")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("toolhost checkpoint benchmark ({cpus} CPUs, n={n} per cell, a target/ of {IGNORED} ignored files)");
    println!(
        "{:>7}  {:<22} {:>17} {:>17} {:>17} {:>19}",
        "files", "scenario", "off p50/p95", "on p50/p95", "on - off (p50)", "git add+commit"
    );
    for files in sizes {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("off/ws");
        std::fs::create_dir_all(&ws).unwrap();
        generate(&ws, files);

        // Checkpoints off, then on, on the same tree.
        let (d, client, _) = daemon::start(
            &dir.path().join("off"),
            // The loop breaker would refuse the 9th identical `bash true`.
            &json!({"checkpoint": {"enabled": false}, "guards": [{"name": "default-loop", "enabled": false}]}),
        )
        .await;
        let off = scenarios(&client, n).await;
        stop(d).await;
        std::fs::rename(dir.path().join("off/ws"), dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("on")).unwrap();
        std::fs::rename(dir.path().join("ws"), dir.path().join("on/ws")).unwrap();
        let (d, client, _) = daemon::start(
            &dir.path().join("on"),
            &json!({"checkpoint": {"enabled": true}, "guards": [{"name": "default-loop", "enabled": false}]}),
        )
        .await;
        let first = call(&client, "bash", json!({"command": "true"})).await;
        let store = dir.path().join("on/data/checkpoints");
        let before = du(&store);
        call(
            &client,
            "write_file",
            json!({"path": "src/d002/f002.rs", "content": "one line\n"}),
        )
        .await;
        let one_line = du(&store).saturating_sub(before);
        let on = scenarios(&client, n).await;
        // Proof that the "on" column measured checkpoints: every (b) and (c) call is an
        // entry, and whether the watcher fed the scans.
        let t: Value = client
            .call("checkpoint.list", &json!({"limit": 10_000}))
            .await
            .unwrap();
        let entries = t["entries"].as_array().map_or(0, Vec::len);
        assert!(entries >= 2 * n, "checkpoints were not on: {t}");
        let watched = t["watched"] == true;
        stop(d).await;

        let ws = dir.path().join("on/ws");
        let (git_first, git) = shadow_git(&dir.path().join("shadow.git"), &ws, n);
        let names = [
            "(a) nothing changed",
            "(b) 1 file changed",
            "(c) 100 files changed",
        ];
        for (i, name) in names.iter().enumerate() {
            let (o50, o95) = p50_p95(off[i].clone());
            let (c50, c95) = p50_p95(on[i].clone());
            let (g50, g95) = p50_p95(git[i].clone());
            println!(
                "{files:>7}  {name:<22} {:>7.2} / {:>7.2} {:>7.2} / {:>7.2} {:>14.2} ms {:>8.2} / {:>8.2}",
                o50, o95, c50, c95, c50 - o50, g50, g95
            );
        }
        println!(
            "{files:>7}  first call (whole tree recorded) {first:.0} ms, first git add+commit {git_first:.0} ms; store growth for a one-line change {one_line} B; {entries} entries, watched: {watched}"
        );
    }
}
