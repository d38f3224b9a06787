//! A real HAProxy (Debian's `haproxy`, installed by tests/run.sh) in front of daemons'
//! TCP listeners: `mode http`, round robin with no affinity (a request a dead backend
//! refuses is sent to the next), every answer naming the
//! backend that gave it (`X-Served-By`), and the bearer token added on the way in (the
//! gateway holds it, as a deployment's would). Killed with its process group when dropped.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

pub struct Haproxy {
    _dir: tempfile::TempDir,
    child: tokio::process::Child,
    /// `127.0.0.1:PORT` it listens on.
    pub addr: String,
}

impl Haproxy {
    /// Starts HAProxy balancing `backends` (`host:port` each, named `m0`, `m1`, …) round
    /// robin; returns once it accepts connections.
    pub async fn start(backends: &[String], token: &str) -> Haproxy {
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, b)| format!("  server m{i} {b}\n"))
            .collect();
        Haproxy::run(|addr| {
            format!(
                "global\n  maxconn 512\n\
                 defaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n  option http-server-close\n  option redispatch\n  retries 2\n\
                 frontend mcp\n  bind {addr}\n  http-request set-header Authorization \"Bearer {token}\"\n  default_backend members\n\
                 backend members\n  balance roundrobin\n  http-response set-header X-Served-By %[srv_name]\n{servers}"
            )
        })
        .await
    }

    /// Starts HAProxy on the config `config` makes for a free `127.0.0.1:PORT` (the address
    /// it must bind); returns once it accepts connections there.
    pub async fn run(config: impl FnOnce(&str) -> String) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config(&addr)).unwrap();
        Haproxy::spawn(dir, &path, addr, &[]).await
    }

    /// Starts HAProxy on the shipped deploy/haproxy.cfg, as is, in front of the three
    /// members `backends` (its `TOOLHOST_MEMBER_1..3`), listening on a free port.
    pub async fn deployed(backends: &[String; 3]) -> Haproxy {
        let addr = free_addr();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy.cfg");
        let env = [
            ("TOOLHOST_GATEWAY_BIND", addr.clone()),
            ("TOOLHOST_MEMBER_1", backends[0].clone()),
            ("TOOLHOST_MEMBER_2", backends[1].clone()),
            ("TOOLHOST_MEMBER_3", backends[2].clone()),
        ];
        Haproxy::spawn(tempfile::tempdir().unwrap(), &path, addr, &env).await
    }

    async fn spawn(
        dir: tempfile::TempDir,
        config: &std::path::Path,
        addr: String,
        env: &[(&str, String)],
    ) -> Haproxy {
        super::require_program("haproxy");
        let mut child = tokio::process::Command::new("haproxy")
            .arg("-f")
            .arg(config)
            .arg("-db")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("start haproxy");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("haproxy exited: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "haproxy never listened on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Haproxy {
            _dir: dir,
            child,
            addr,
        }
    }
}

impl Haproxy {
    /// Its process id (a benchmark reads its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// A free `127.0.0.1:PORT`.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
