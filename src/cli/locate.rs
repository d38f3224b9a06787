//! `toolhost where`: the paths this client would use (socket, config file, data directory)
//! and whether a daemon answers on that socket — the first thing to run when a frontend
//! "cannot find toolhost".
//!
//! Every path comes from the one resolution the daemon and the other commands use
//! ([`client::default_socket`], [`crate::config::default_path`],
//! [`crate::config::data_dir`]); when a daemon answers, its own config file and data
//! directory are shown, as they may differ from this shell's defaults.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::render::{emit, say};
use super::Globals;
use crate::client::{self, Client};

/// How long `where` waits for a daemon's answer: it is a diagnosis, not a call.
const PROBE: Duration = Duration::from_secs(3);

/// What `toolhost where` found (also its `--json` shape).
#[derive(Debug, Serialize)]
struct Whereabouts {
    /// The CLI's own version.
    version: &'static str,
    /// The socket this client connects to.
    socket: String,
    /// The daemon answering there, or why none does.
    daemon: Daemon,
    /// The config file: the daemon's when one answers, else this client's default.
    config: String,
    config_exists: bool,
    /// Sessions, spilled outputs and the audit log: the daemon's when one answers.
    data_dir: String,
}

/// The one path `toolhost where PATH` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Only {
    Socket,
    Config,
    DataDir,
}

#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Daemon {
    Answering { version: String, uptime_s: u64 },
    NotAnswering { reason: String },
}

/// `toolhost where`: exit 0 when a daemon answers, 3 when none does (as any client command).
pub async fn run(g: &Globals, only: Option<Only>) -> ExitCode {
    let sockets = g.socket_paths();
    // The daemon's socket is the first path that answers; with none, the first path is
    // where a daemon started now would serve.
    let socket = match answering(&sockets).await {
        Some(s) => s,
        None => sockets.first().cloned().unwrap_or_default(),
    };
    let local_config = g.config.clone().unwrap_or_else(crate::config::default_path);
    let answer = async {
        // Tried in order again, so a daemon that stops meanwhile is reported with every path.
        let c = Client::connect_first(&sockets).await?.with_timeout(PROBE);
        Ok::<_, client::ClientError>((c.health().await?, c.status().await?))
    }
    .await;
    let (daemon, config, data_dir) = match answer {
        Ok((health, status)) => (
            Daemon::Answering {
                version: health.version,
                uptime_s: health.uptime_s,
            },
            std::path::PathBuf::from(status.config.path),
            status.data_dir,
        ),
        Err(e) => {
            let loaded = crate::config::load(&local_config).ok().map(|l| l.config);
            let data_dir = crate::config::data_dir(None, loaded.as_ref());
            let reason = match e {
                client::ClientError::NoDaemon { reason, .. } => reason,
                other => other.to_string(),
            };
            (
                Daemon::NotAnswering { reason },
                local_config,
                data_dir.display().to_string(),
            )
        }
    };
    let answering = matches!(daemon, Daemon::Answering { .. });
    let w = Whereabouts {
        version: env!("CARGO_PKG_VERSION"),
        socket: socket.display().to_string(),
        config_exists: config.is_file(),
        config: config.display().to_string(),
        daemon,
        data_dir,
    };
    match only {
        Some(Only::Socket) => say!("{}", w.socket),
        Some(Only::Config) => say!("{}", w.config),
        Some(Only::DataDir) => say!("{}", w.data_dir),
        None if g.out.json => emit(g.out, &w),
        None => print(&w),
    }
    if answering {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// The first of `sockets` a daemon answers on.
pub async fn answering(sockets: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    for path in sockets {
        if Client::connect(path).await.is_ok() {
            return Some(path.clone());
        }
    }
    None
}

fn print(w: &Whereabouts) {
    say!("toolhost {}", w.version);
    match &w.daemon {
        Daemon::Answering { version, uptime_s } => say!(
            "socket    {} (daemon {version} answering, up {uptime_s}s)",
            w.socket
        ),
        Daemon::NotAnswering { reason } => say!(
            "socket    {} (no daemon answering: {reason}; start one with `toolhost serve`)",
            w.socket
        ),
    }
    let missing = if w.config_exists {
        ""
    } else {
        " (not there yet: all defaults)"
    };
    say!("config    {}{missing}", w.config);
    say!("data dir  {}", w.data_dir);
}
