//! The file tools under attack, through the real daemon: a directory swapped for a symlink to
//! the outside while tools run, FIFOs and devices where files are expected, and odd paths.
//!
//! `TOOLHOST_STRESS=<n>` multiplies the iteration counts for a longer run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use nix::sys::stat::Mode;
use serde_json::{json, Value};

/// Iterations scaled by `TOOLHOST_STRESS` (default 1).
fn iterations(base: u64) -> u64 {
    let factor = std::env::var("TOOLHOST_STRESS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1);
    base * factor
}

/// `invoke` on an open connection; returns the tool result envelope.
async fn invoke(c: &mut RawLines, name: &str, args: Value) -> Value {
    let r = c
        .call("invoke", json!({"name": name, "arguments": args}))
        .await;
    r["result"]["result"].clone()
}

/// The same, failing the test if the daemon does not answer within 5 s (a tool stuck in
/// `open()` on a FIFO never would).
async fn invoke_promptly(c: &mut RawLines, name: &str, args: Value) -> Value {
    tokio::time::timeout(Duration::from_secs(5), invoke(c, name, args))
        .await
        .unwrap_or_else(|_| panic!("{name} did not answer within 5 s"))
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o644)).unwrap();
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_an_outside_symlink_never_leaks_reads_or_writes() {
    let d = Daemon::start().await;
    let ws = d.workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "OUTSIDE\n").unwrap();
    std::fs::write(outside.path().join("marker.txt"), "OUTSIDE\n").unwrap();
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/f.txt"), "inside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("swap")).unwrap();

    // `d` flips between the real directory and the symlink as fast as the kernel allows.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (a, b) = (ws.join("d"), ws.join("swap"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut c = d.raw_lines().await;
    let n = iterations(150);
    let (mut inside_reads, mut outside_reads, mut writes) = (0, 0, 0);
    for i in 0..n {
        let r = invoke(&mut c, "read_file", json!({"path": "d/f.txt"})).await;
        let content = r["content"].as_str().unwrap_or_default();
        if content.contains("OUTSIDE") {
            outside_reads += 1;
        } else if r["ok"] == true {
            assert_eq!(content, "     1\tinside\n", "{r}");
            inside_reads += 1;
        }
        let r = invoke(
            &mut c,
            "write_file",
            json!({"path": format!("d/w{i}.txt"), "content": "x"}),
        )
        .await;
        if r["ok"] == true {
            writes += 1;
        }
        // The walks must not wander outside either.
        let r = invoke(
            &mut c,
            "search_files",
            json!({"pattern": "OUTSIDE", "path": "d"}),
        )
        .await;
        assert!(r["match_count"] == 0 || r["ok"] == false, "{r}");
        let r = invoke(&mut c, "list_dir", json!({"path": "d"})).await;
        assert!(!r.to_string().contains("marker.txt"), "{r}");
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    assert_eq!(outside_reads, 0, "reads that returned the outside file");
    assert_eq!(
        names(outside.path()),
        ["f.txt", "marker.txt"],
        "files created outside the workspace"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
        "OUTSIDE\n"
    );
    // The race was real, and the tools still worked whenever `d` was the directory.
    assert!(swaps.load(Ordering::Relaxed) > n, "only {swaps:?} swaps");
    assert!(
        inside_reads > 0 && writes > 0,
        "{inside_reads} reads, {writes} writes"
    );
}

#[tokio::test]
async fn fifos_and_sockets_are_refused_promptly_by_every_file_tool() {
    let d = Daemon::start().await;
    let ws = d.workspace();
    mkfifo(&ws.join("p"));
    let mut c = d.raw_lines().await;
    let refused = json!({"ok": false, "error": "p is not a regular file (fifo)"});
    let r = invoke_promptly(&mut c, "read_file", json!({"path": "p"})).await;
    assert_eq!(
        (r["ok"].clone(), r["error"].clone()),
        (refused["ok"].clone(), refused["error"].clone()),
        "{r}"
    );
    let r = invoke_promptly(&mut c, "write_file", json!({"path": "p", "content": "x"})).await;
    assert_eq!(r["error"], refused["error"], "{r}");
    let r = invoke_promptly(
        &mut c,
        "patch_file",
        json!({"path": "p", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(r["error"], refused["error"], "{r}");
    let r = invoke_promptly(&mut c, "search_files", json!({"pattern": "x", "path": "p"})).await;
    assert_eq!(r["error"], refused["error"], "{r}");
    let _sock = std::os::unix::net::UnixListener::bind(ws.join("s")).unwrap();
    let r = invoke_promptly(&mut c, "read_file", json!({"path": "s"})).await;
    assert_eq!(r["error"], "s is not a regular file (socket)", "{r}");
    let r = invoke_promptly(&mut c, "write_file", json!({"path": "s", "content": "x"})).await;
    assert_eq!(r["error"], "s is not a regular file (socket)", "{r}");
    // The FIFO is still a FIFO: write_file did not replace it.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(ws.join("p"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[tokio::test]
async fn device_symlinks_are_refused_as_escapes() {
    let d = Daemon::start().await;
    std::os::unix::fs::symlink("/dev/zero", d.workspace().join("zero")).unwrap();
    let mut c = d.raw_lines().await;
    for (tool, args) in [
        ("read_file", json!({"path": "zero"})),
        (
            "patch_file",
            json!({"path": "zero", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let r = invoke_promptly(&mut c, tool, args).await;
        assert_eq!(r["ok"], false, "{tool}: {r}");
        assert_eq!(
            r["error"], "path escapes the workspace: zero leads outside it through a symbolic link",
            "{tool}: {r}"
        );
    }
}

#[tokio::test]
async fn search_and_list_complete_over_a_tree_with_fifos() {
    let d = Daemon::start().await;
    let ws = d.workspace();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.rs"), "needle\n").unwrap();
    mkfifo(&ws.join("src/b.rs"));
    // Even an ignore file that is a FIFO must not hang the walk.
    mkfifo(&ws.join(".gitignore"));
    mkfifo(&ws.join("src/.ignore"));
    let mut c = d.raw_lines().await;
    let r = invoke_promptly(&mut c, "search_files", json!({"pattern": "needle"})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["matches"], "src/a.rs:1: needle");
    assert_eq!(r["files_searched"], 1);
    let r = invoke_promptly(&mut c, "list_dir", json!({"path": "src"})).await;
    assert_eq!(r["entries"], "src/.ignore\nsrc/a.rs\nsrc/b.rs", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_fifo_reads_leave_the_daemon_responsive() {
    let d = Daemon::start().await;
    mkfifo(&d.workspace().join("p"));
    let total = iterations(600) as usize;
    let conns = 6;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let mut c = d.raw_lines().await;
        let per = total / conns;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..per {
                ids.push(
                    c.send(
                        "invoke",
                        json!({"name": "read_file", "arguments": {"path": "p"}}),
                    )
                    .await,
                );
            }
            let mut answered = 0;
            while answered < ids.len() {
                let m = c.recv().await;
                if m.get("id").is_some() {
                    answered += 1;
                }
            }
            answered
        }));
    }
    let health = tokio::time::timeout(Duration::from_secs(5), d.call("host.health", json!({})))
        .await
        .expect("host.health within 5 s while FIFO reads are in flight");
    assert_eq!(health["result"]["status"], "ok", "{health}");
    let mut answered = 0;
    for t in tasks {
        answered += tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every FIFO read answered")
            .unwrap();
    }
    assert_eq!(answered, total / conns * conns);
}

#[tokio::test]
async fn a_hard_link_to_an_outside_file_is_replaced_not_written_through() {
    let d = Daemon::start().await;
    // Same filesystem as the workspace, so the link can be made.
    let outside = d.dir.path().join("outside.txt");
    std::fs::write(&outside, "secret\n").unwrap();
    std::fs::hard_link(&outside, d.workspace().join("link.txt")).unwrap();
    let mut c = d.raw_lines().await;
    let r = invoke_promptly(
        &mut c,
        "write_file",
        json!({"path": "link.txt", "content": "new\n"}),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    let r = invoke_promptly(
        &mut c,
        "patch_file",
        json!({"path": "link.txt", "old_string": "new", "new_string": "newer"}),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("link.txt")).unwrap(),
        "newer\n"
    );
}

#[tokio::test]
async fn dot_dot_nul_and_overlong_paths_fail_cleanly() {
    let d = Daemon::start().await;
    let ws = d.workspace();
    std::fs::create_dir(ws.join("a")).unwrap();
    std::fs::write(ws.join("b.txt"), "b\n").unwrap();
    let mut c = d.raw_lines().await;
    // `..` inside the workspace is fine; climbing above it is not, however it is spelled.
    let r = invoke_promptly(&mut c, "read_file", json!({"path": "a/../b.txt"})).await;
    assert_eq!(r["content"], "     1\tb\n", "{r}");
    let name = ws.file_name().unwrap().to_string_lossy().into_owned();
    for raw in ["a/../../x", "../x", &format!("../{name}/b.txt")] {
        let r = invoke_promptly(&mut c, "write_file", json!({"path": raw, "content": "x"})).await;
        assert_eq!(r["ok"], false, "{raw}: {r}");
        assert_eq!(r["error_kind"], "invalid_arguments", "{raw}: {r}");
        assert!(
            r["error"]
                .as_str()
                .unwrap()
                .starts_with(&format!("path escapes the workspace: {raw} ")),
            "{r}"
        );
    }
    let r = invoke_promptly(&mut c, "read_file", json!({"path": "b.txt\u{0}x"})).await;
    assert_eq!(r["error"], "path contains a NUL byte: \"b.txt\\0x\"", "{r}");
    // A name over NAME_MAX and a path over PATH_MAX: an error, not a panic or a hang.
    for raw in ["n".repeat(300), "d/".repeat(3000) + "f.txt"] {
        for (tool, args) in [
            ("read_file", json!({"path": raw})),
            ("write_file", json!({"path": raw, "content": "x"})),
        ] {
            let r = invoke_promptly(&mut c, tool, args).await;
            assert_eq!(r["ok"], false, "{tool}: {r}");
            let e = r["error"].as_str().unwrap();
            assert!(
                e.contains("File name too long") || e.contains("no such file"),
                "{tool}: {e}"
            );
        }
    }
    assert_eq!(names(&ws), ["a", "b.txt"]);
}
