//! Many frontends through one restart (issue 40): 100 stdio bridges (`toolhost mcp`)
//! connected when the daemon restarts all reconnect within 5 s with their sessions, and
//! once they are gone nothing of them is left in the daemon (fds, sessions); a daemon
//! restarted from a new copy of the binary (an upgrade) keeps the bridges working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::identity::{bash, initialize, tools_changed};
use common::new_era::RawStdio;
use common::{toolhost, Daemon};
use futures::future::join_all;
use serde_json::{json, Value};

/// The bound: every bridge back within this after the daemon answers again.
const BOUND: Duration = Duration::from_secs(5);

fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The sessions of clients named `prefix…`, by id.
async fn sessions(d: &Daemon, prefix: &str) -> Vec<String> {
    let r = d.call("session.list", json!({"limit": 1000})).await;
    let mut ids: Vec<String> = r["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["meta"]["mcp_client"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// `n` bridges started in `dir`, initialized as `prefix-i`, each having run one call.
async fn bridges(d: &Daemon, dir: &Path, prefix: &str, n: usize) -> Vec<RawStdio> {
    let mut all: Vec<RawStdio> = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(RawStdio::open_in(d, Some(dir), &[], &[]).await);
    }
    join_all(all.iter_mut().enumerate().map(|(i, mcp)| async move {
        initialize(mcp, &format!("{prefix}-{i}"), None).await;
        assert_eq!(bash(mcp, 2, &format!("echo {i}")).await, format!("{i}\n"));
    }))
    .await;
    all
}

/// Every bridge has its session back and runs a call, each within [`BOUND`] of `since`;
/// the slowest one's time.
async fn all_back(all: &mut [RawStdio], since: Instant, call_id: u64) -> Duration {
    let times = join_all(all.iter_mut().enumerate().map(|(i, mcp)| async move {
        tokio::time::timeout(BOUND, tools_changed(mcp))
            .await
            .unwrap_or_else(|_| panic!("bridge {i} not back within {BOUND:?}"));
        let back = since.elapsed();
        assert_eq!(
            bash(mcp, call_id, &format!("echo {i}")).await,
            format!("{i}\n")
        );
        back
    }))
    .await;
    times.into_iter().max().unwrap_or_default()
}

/// `toolhost session list --all --json`: every session, ephemeral ones included.
async fn session_list_all(d: &Daemon) -> Vec<Value> {
    let out = toolhost(d.dir.path())
        .args(["--json", "--socket"])
        .arg(d.socket())
        .args(["session", "list", "--all", "--limit", "1000"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["sessions"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_hundred_bridges_are_back_within_five_seconds_of_a_restart_and_leave_nothing() {
    const N: usize = 100;
    let mut d = Daemon::start().await;
    let dir = d.subdir("storm");
    let idle = fds(d.pid());
    let mut all = bridges(&d, &dir, "storm", N).await;
    let before = sessions(&d, "storm-").await;
    assert_eq!(before.len(), N);
    let connected = fds(d.pid());

    d.stop().await;
    d.spawn(&[]).await;
    let ready = Instant::now();
    let slowest = all_back(&mut all, ready, 3).await;
    eprintln!("{N} bridges back, the slowest {slowest:?} after the new daemon answered");
    assert_eq!(
        sessions(&d, "storm-").await,
        before,
        "the same sessions, by id"
    );
    let reconnected = fds(d.pid());
    eprintln!("daemon fds: idle {idle}, {N} bridges {connected}, after the restart {reconnected}");
    assert!(
        reconnected <= connected + 8,
        "the new daemon holds {reconnected} fds for what the old one held in {connected}"
    );

    // Kill -9 this time: the same.
    d.kill9().await;
    d.spawn(&[]).await;
    let ready = Instant::now();
    let slowest = all_back(&mut all, ready, 4).await;
    eprintln!("after kill -9: the slowest back {slowest:?} after the new daemon answered");
    assert_eq!(sessions(&d, "storm-").await, before);

    // The frontends close: every session and every fd they held goes.
    drop(all);
    common::eventually(20, "every bridge's session to end", || async {
        session_list_all(&d).await.is_empty()
    })
    .await;
    let pid = d.pid();
    common::eventually(20, "the daemon's fds back to idle", || async move {
        fds(pid) <= idle + 4
    })
    .await;
    eprintln!(
        "daemon fds once the bridges left: {} (idle {idle})",
        fds(pid)
    );
}

/// `toolhost serve` for `d` from another copy of the binary.
fn serve_from(d: &Daemon, bin: &Path) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(bin);
    common::isolate(cmd.as_std_mut(), d.dir.path());
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--config")
        .arg(d.config_path())
        .arg("--socket")
        .arg(d.socket())
        .arg("serve")
        .arg("--workspace")
        .arg(d.workspace())
        .arg("--data-dir")
        .arg(d.data_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    cmd.spawn().unwrap()
}

#[tokio::test]
async fn a_daemon_restarted_from_a_new_binary_keeps_the_bridges_working() {
    let mut d = Daemon::start().await;
    let dir = d.subdir("upgrade");
    let mut all = bridges(&d, &dir, "upgrade", 3).await;
    let before = sessions(&d, "upgrade-").await;

    // The upgrade: a new file at another path (as a package manager's rename leaves it),
    // the old daemon stopped, the new one started.
    let new_bin: PathBuf = d.dir.path().join("new/toolhost");
    std::fs::create_dir_all(new_bin.parent().unwrap()).unwrap();
    std::fs::copy(common::BIN, &new_bin).unwrap();
    d.stop().await;
    d.child = Some(serve_from(&d, &new_bin));
    d.wait_ready().await;
    let exe = std::fs::read_link(format!("/proc/{}/exe", d.pid())).unwrap();
    assert_eq!(exe, new_bin);
    let ready = Instant::now();
    all_back(&mut all, ready, 3).await;
    assert_eq!(sessions(&d, "upgrade-").await, before);
    // And back to the first binary, by kill -9.
    d.kill9().await;
    d.spawn(&[]).await;
    all_back(&mut all, Instant::now(), 4).await;
    assert_eq!(sessions(&d, "upgrade-").await, before);
}
