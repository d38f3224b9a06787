//! The daemon as a process: what its children can see of it, and how it starts and stops
//! with unusual standard descriptors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::json;

/// A bash call reading the daemon's environment (`/proc/$PPID/environ`).
async fn parent_environ(d: &Daemon) -> serde_json::Value {
    d.invoke(
        "bash",
        json!({"command": "tr '\\0' '\\n' < /proc/$PPID/environ"}),
    )
    .await
}

#[tokio::test]
async fn the_tcp_token_is_wiped_from_the_daemons_environment() {
    let mut d = Daemon::unstarted();
    std::fs::write(
        d.config_path(),
        json!({"listen": {"tcp": "127.0.0.1:0"}}).to_string(),
    )
    .unwrap();
    d.spawn(&[
        ("TOOLHOST_TOKEN", "tok-hunter2-secret"),
        ("TOOLHOST_TEST_VISIBLE", "plain-value"),
    ])
    .await;
    let r = parent_environ(&d).await;
    let out = r["stdout"].as_str().unwrap_or_default();
    // Root may still read the environment block: what matters is that the secret is gone
    // from it. (As root the read succeeds, so the check below can see other variables.)
    if nix::unistd::geteuid().is_root() {
        assert!(out.contains("TOOLHOST_TEST_VISIBLE=plain-value"), "{r}");
    }
    assert!(!out.contains("hunter2"), "the token is visible: {out}");
    // The token still guards TCP.
    let log = d.log();
    assert!(log.contains("tcp"), "{log}");
}

#[tokio::test]
async fn children_of_the_same_user_cannot_read_the_daemons_environment() {
    common::require_root("running the daemon as another user");
    common::require_program("/usr/bin/setpriv");
    let d = Daemon::unstarted();
    // The daemon runs as `nobody`, in a directory it owns.
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    for entry in walk(d.dir.path()) {
        nix::unistd::chown(&entry, Some(nobody.uid), Some(nobody.gid)).unwrap();
    }
    let mut cmd = tokio::process::Command::new("/usr/bin/setpriv");
    cmd.args([
        "--reuid",
        &nobody.uid.to_string(),
        "--regid",
        &nobody.gid.to_string(),
        "--clear-groups",
        "--",
    ]);
    let inner = d.command();
    let std_cmd = inner.as_std();
    cmd.arg(std_cmd.get_program());
    cmd.args(std_cmd.get_args());
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", d.dir.path())
        .env("TOOLHOST_TEST_SECRET", "sekrit-42")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    d.wait_ready().await;
    let r = parent_environ(&d).await;
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Permission denied"),
        "a same-user child read the environment: {r}"
    );
    assert!(
        !r.to_string().contains("sekrit-42"),
        "the secret leaked: {r}"
    );
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn sigterm_with_closed_stderr_exits_cleanly_and_removes_the_socket() {
    let d = Daemon::unstarted();
    let mut cmd = d.command();
    cmd.stderr(Stdio::null());
    // SAFETY: close(2) in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::libc::close(2);
            Ok(())
        });
    }
    stop_cleanly(&d, cmd.spawn().unwrap()).await;
}

#[tokio::test]
async fn sigterm_with_a_broken_stderr_pipe_exits_cleanly_and_removes_the_socket() {
    let d = Daemon::unstarted();
    let mut cmd = d.command();
    cmd.stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The reader of stderr goes away: every later log line gets EPIPE.
    drop(child.stderr.take());
    stop_cleanly(&d, child).await;
}

async fn stop_cleanly(d: &Daemon, mut child: tokio::process::Child) {
    d.wait_ready().await;
    // A call that logs, so the daemon writes to fd 2 while serving.
    let r = d.invoke("bash", json!({"command": "echo hi"})).await;
    assert_eq!(r["ok"], true, "{r}");
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(!d.socket().exists(), "the socket file was left behind");
}

/// The daemon runs without glibc's per-thread malloc cache (it starts itself again with the
/// tunable set: src/trim.rs), in the same process, and the programs it runs get the
/// environment it was given: no tunable when it had none, the launcher's own otherwise.
#[tokio::test]
async fn the_daemon_runs_without_the_malloc_thread_cache_and_its_programs_get_its_environment() {
    let seen = |r: &serde_json::Value| r["stdout"].as_str().unwrap_or_default().to_owned();
    let tunables = "echo \"[${GLIBC_TUNABLES-none}]\"; env | grep -c TOOLHOST_LAUNCHER || true";
    for (given, daemon_runs_with, programs_get) in [
        (
            None,
            &["GLIBC_TUNABLES=glibc.malloc.tcache_count=0"][..],
            "[none]\n0\n",
        ),
        (
            Some("glibc.malloc.arena_max=4"),
            &[
                "GLIBC_TUNABLES=glibc.malloc.arena_max=4",
                "glibc.malloc.tcache_count=0",
            ],
            "[glibc.malloc.arena_max=4]\n0\n",
        ),
    ] {
        let mut d = Daemon::unstarted();
        // Programs get what a user passes through (the allow-list has neither).
        let passed = json!({"env_passthrough": ["GLIBC_TUNABLES", "TOOLHOST_LAUNCHER_*"]});
        std::fs::write(d.config_path(), passed.to_string()).unwrap();
        let mut cmd = d.command();
        match given {
            Some(v) => cmd.env("GLIBC_TUNABLES", v),
            None => cmd.env_remove("GLIBC_TUNABLES"),
        };
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap();
        let pid = child.id().unwrap();
        d.child = Some(child);
        d.wait_ready().await;
        // The same process (a launcher's pid, a supervisor's, stays right).
        let r = d.invoke("bash", json!({"command": "echo $PPID"})).await;
        assert_eq!(seen(&r).trim(), pid.to_string(), "{r}");
        // The environment the daemon was started with (glibc cuts its copy of
        // GLIBC_TUNABLES at each `:` as it reads it).
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        let pieces: Vec<&str> = environ.split(['\0', ':']).collect();
        for piece in daemon_runs_with {
            assert!(pieces.contains(piece), "{piece} not in {pieces:?}");
        }
        let r = d.invoke("bash", json!({"command": tunables})).await;
        assert_eq!(seen(&r), programs_get, "{r}");
        // Named after its binary, as `ps`, `pgrep` and `systemctl status` show it (executed
        // again as /proc/self/exe, the kernel would have named it "exe").
        let binary = std::path::Path::new(BIN);
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(
            comm.trim(),
            binary.file_name().unwrap().to_string_lossy(),
            "{given:?}"
        );
    }
}
