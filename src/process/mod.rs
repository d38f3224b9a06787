//! Spawning children in their own process group, and the guard that kills the whole group.
//!
//! Architecture Invariant: every process the host starts (bash calls, custom tools, stdio MCP
//! servers) is spawned through [`spawn_group`] and owned by a [`GroupGuard`]. Dropping the
//! guard sends SIGTERM to the group and SIGKILL after a grace, so a child — and anything it
//! forked, like the `node` under `npx` — dies with its call, its server or the daemon.

use std::io;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

pub mod runner;

/// How long a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(2000);

/// Environment variables a child inherits from the daemon; everything else is explicit.
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "npm_config_cache",
    "NODE_PATH",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "SSL_CERT_FILE",
];

/// Clears the command's environment and passes only the allow-list (plus what the caller
/// adds afterwards), so tokens in the daemon's environment do not leak into children.
pub fn scrub_env(cmd: &mut Command) {
    cmd.env_clear();
    for key in ENV_ALLOW_LIST {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
}

/// Spawns `cmd` as the leader of a new process group.
pub async fn spawn_group(mut cmd: Command) -> io::Result<(Child, GroupGuard)> {
    cmd.process_group(0).kill_on_drop(true);
    let child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("child exited before its pid could be read"))?;
    Ok((child, GroupGuard::new(pid)))
}

/// Owns a process group: kills it (TERM, then KILL after [`KILL_GRACE`]) when dropped.
#[derive(Debug)]
pub struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    /// Takes ownership of the group led by `pid` (the child was spawned with `process_group(0)`).
    pub fn new(pid: u32) -> Self {
        GroupGuard {
            pgid: i32::try_from(pid).ok().map(Pid::from_raw),
        }
    }

    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Terminates the group and waits (asynchronously) until it is gone or has been killed.
    /// If this future is dropped midway, the guard's `Drop` still delivers the KILL.
    pub async fn terminate(mut self, grace: Duration) {
        let Some(pgid) = self.pgid else { return };
        if signal_group(pgid, Signal::SIGTERM) {
            let deadline = tokio::time::Instant::now() + grace;
            while group_alive(pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            signal_group(pgid, Signal::SIGKILL);
        }
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let Some(pgid) = self.pgid.take() else { return };
        if !signal_group(pgid, Signal::SIGTERM) {
            return;
        }
        // Drop cannot wait; a short-lived thread delivers the KILL after the grace so the
        // runtime is never blocked and the kill still happens during runtime shutdown.
        let _ = std::thread::Builder::new()
            .name("killpg".into())
            .spawn(move || {
                let deadline = std::time::Instant::now() + KILL_GRACE;
                while std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                    if !group_alive(pgid) {
                        return;
                    }
                }
                signal_group(pgid, Signal::SIGKILL);
            });
    }
}

/// Sends `sig` to the group; false when the group no longer exists.
fn signal_group(pgid: Pid, sig: Signal) -> bool {
    !matches!(killpg(pgid, sig), Err(Errno::ESRCH))
}

fn group_alive(pgid: Pid) -> bool {
    // Signal 0 checks existence. Zombies of an unreaped leader still count, which is fine:
    // SIGKILL to a group of zombies is harmless.
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// Whether any process of the group `pgid` is alive (used by tests and status).
pub fn group_exists(pgid: i32) -> bool {
    group_alive(Pid::from_raw(pgid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_guard_kills_grandchildren() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30 & wait"]);
        let (mut child, guard) = spawn_group(cmd).await.unwrap();
        let pgid = guard.pgid().unwrap();
        assert!(group_exists(pgid));
        guard.terminate(Duration::from_secs(2)).await;
        let _ = child.wait().await;
        // Reaped leader; the sleeps were reparented and killed by the group signal.
        for _ in 0..100 {
            if !group_exists(pgid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("process group {pgid} survived");
    }
}
