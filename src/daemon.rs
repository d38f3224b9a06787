//! `toolhost serve`: bind, build the host, serve until told to stop, shut down in order.
//!
//! [`serve`] owns everything process-wide (signals, the environment, systemd); [`run`]
//! takes its listeners and its shutdown signal as parameters, so a test can drive a whole
//! daemon in-process.

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::config;
use crate::host::{Dirs, Host};
use crate::process::Processes;
use crate::reload;
use crate::rpc::{self, Listeners};

/// How long in-flight calls get to finish after SIGTERM before they are cancelled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What `toolhost serve` was asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
}

impl ServeOptions {
    /// config.json: `--config`, else the default resolution.
    pub fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(config::default_path)
    }

    /// The workspace and data directory: the command line, else the config, else the
    /// current directory and the XDG state directory.
    fn dirs(&self, cfg: &config::Config) -> anyhow::Result<Dirs> {
        let workspace = match self.workspace.clone().or_else(|| cfg.workspace.clone()) {
            Some(w) => w,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workspace = workspace
            .canonicalize()
            .with_context(|| format!("workspace {} is not accessible", workspace.display()))?;
        let data_dir = config::data_dir(self.data_dir.clone(), Some(cfg));
        Ok(Dirs {
            config_path: self.config_path(),
            workspace,
            data_dir,
        })
    }
}

/// What `toolhost config check` can tell of a start-up before starting: the problems
/// `serve` would refuse to start with, and what only starting can show.
#[derive(Debug, Default)]
pub struct Preflight {
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
    /// Checks `serve` runs that need the running daemon (binding, opening the store).
    pub unchecked: Vec<&'static str>,
}

/// The start-up checks of [`serve`] on a valid `cfg`, run with the same code: the
/// workspace, the workspace of `/`, and a TCP listener's token.
pub fn preflight(opts: &ServeOptions, cfg: &config::Config) -> Preflight {
    let mut p = Preflight::default();
    match opts.dirs(cfg) {
        Ok(dirs) => p.warnings.extend(workspace_warning(&dirs)),
        Err(e) => p.problems.push(format!("{e:#}")),
    }
    if opts.workspace.is_none() && cfg.workspace.is_none() {
        p.unchecked.push(
            "the workspace: without `workspace` (or --workspace) it is the directory serve starts in",
        );
    }
    if cfg.listen.tcp.is_some() {
        if let Err(e) = rpc::tcp_token(cfg) {
            p.problems.push(format!("{e:#}"));
        }
    }
    p.unchecked.extend([
        "binding the socket and the TCP address (another daemon, a port in use)",
        "opening the data directory and its session store",
        "starting the MCP servers (each one's own state is in `toolhost status`)",
    ]);
    p
}

/// The warning for a workspace of `/`, where the built-in tools reach the whole system.
fn workspace_warning(dirs: &Dirs) -> Option<String> {
    (dirs.workspace == std::path::Path::new("/")).then(|| {
        "the workspace is / (no --workspace, no config `workspace`, started in /): \
         built-in tools resolve paths against the whole file system; set one"
            .to_owned()
    })
}

pub use crate::trim::exec_without_thread_cache;

/// Process-wide set-up, first thing in `main`, before any thread or file exists.
///
/// - fds 0–2 are opened on /dev/null when closed, so no socket, store file or epoll fd
///   ever lands on them (a closed stderr would otherwise receive log lines, and writing
///   them would fail or corrupt whatever took its place);
/// - every other descriptor inherited from whoever started us is marked close-on-exec
///   ([`keep_inherited_from_children`]);
/// - the process is made non-dumpable, so processes of the same user (a `bash` call)
///   cannot read its memory or `/proc/<pid>/environ`;
/// - secrets read once are taken out of the environment ([`crate::secrets`]);
/// - the soft descriptor limit is raised to the hard one ([`crate::fds`]).
pub fn prepare_process() {
    use nix::libc;
    for fd in 0..=2 {
        // SAFETY: F_GETFD only queries the descriptor; open/dup2 on a closed std fd is the
        // classic daemon idiom and touches no fd we own.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 && null != fd {
                    libc::dup2(null, fd);
                    libc::close(null);
                }
            }
        }
    }
    keep_inherited_from_children();
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("toolhost: cannot make the process non-dumpable: {e}");
    }
    crate::secrets::take_from_env();
    crate::fds::raise_limit();
}

/// Marks every descriptor above 2 close-on-exec. Those the daemon opens itself always are;
/// those its launcher left open (a supervisor's socket, a shell's saved descriptors) would
/// otherwise reach every program the daemon starts, and one that outlives the daemon (a
/// stopped, double-forked child after a kill -9) would keep them open.
fn keep_inherited_from_children() {
    use nix::libc;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: only the descriptor flags change; a descriptor that is gone (the
        // directory's own) fails harmlessly.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Runs the daemon until SIGTERM/SIGINT: the entry point of `toolhost serve`.
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    // Signal handlers first: a SIGTERM that arrives once the socket answers must be ours.
    let stop_signal = stop_signal()?;
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    start(opts, stop_signal, Some(hangup)).await
}

/// Runs a whole daemon as `serve` does, until `shutdown` resolves, without touching the
/// process's signals: for embedding and for tests that drive a daemon in-process.
pub async fn serve_until(
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    start(opts, shutdown, None).await
}

async fn start(
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
    hangup: Option<tokio::signal::unix::Signal>,
) -> anyhow::Result<()> {
    let path = opts.config_path();
    let mut loaded =
        config::load(&path).with_context(|| format!("invalid config {}", path.display()))?;
    // A named file that is missing is a typo more often than a plan: refuse to start rather
    // than run on defaults (the default path, unnamed, may be missing).
    if config::is_named(opts.config.as_deref())
        && config::file_state(&path) == config::FileState::Missing
    {
        anyhow::bail!(
            "{}; create it (`echo {{}} > {}` for an empty one) or leave out --config",
            config::missing_named(&path),
            path.display()
        );
    }
    let dirs = opts.dirs(&loaded.config)?;
    loaded.warnings.extend(workspace_warning(&dirs));
    let processes = Processes::new(reload::child_env(&loaded.config));
    // The socket first: a second daemon must fail on the live socket, not on the store lock.
    let listeners = Listeners::bind(opts.socket.as_deref(), &loaded.config).await?;
    let fleet = crate::fleet::Fleet::open(
        &loaded.config,
        vec![listeners.describe()],
        listeners.tcp_addr(),
    )
    .await;
    let host = match fleet.and_then(|f| Host::new(dirs, loaded, processes, f)) {
        Ok(h) => h,
        Err(e) => {
            if let Some(s) = &listeners.owned {
                s.remove();
            }
            return Err(e);
        }
    };
    // What a killed daemon could not clean up: its confined runs' temp dirs.
    let _ = tokio::task::spawn_blocking(crate::sandbox::sweep_call_dirs).await;
    // The process's own daemon (not one embedded in a test) says where it listens.
    let _announced = hangup.is_some().then(|| Announced::write(&listeners.path));
    if let Some(hangup) = hangup {
        host.tracker().spawn(reload_on_sighup(host.clone(), hangup));
    }
    run(host, listeners, shutdown).await
}

/// The daemon's socket written to the user's location file
/// (`protocol::location_file`), where every client looks whatever its environment;
/// removed at exit unless another daemon has announced itself there since.
struct Announced {
    file: PathBuf,
    socket: PathBuf,
}

impl Announced {
    fn write(socket: &Path) -> Option<Announced> {
        let file = crate::protocol::location_file()?;
        let text = format!("{}\n", socket.display());
        if let Some(dir) = file.parent() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        match crate::atomic_file::write_atomic(
            &file,
            text.as_bytes(),
            crate::atomic_file::Durability::Atomic,
        ) {
            Ok(()) => Some(Announced {
                file,
                socket: socket.to_path_buf(),
            }),
            Err(e) => {
                tracing::warn!(%e, file = %file.display(), "cannot write the socket location file");
                None
            }
        }
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.file)
            .is_ok_and(|t| Path::new(t.trim_end_matches('\n')) == self.socket);
        if ours {
            let _ = std::fs::remove_file(&self.file);
        }
    }
}

/// Serves `host` on `listeners` until `shutdown` resolves, then stops in order: stop
/// accepting → a grace for calls in flight → cancel the rest → stop MCP servers → wait
/// for connections and tasks.
pub async fn run(
    host: Host,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // Owns every child (subreaper, adopted-zombie reaper, ledger sweep); dropped when run
    // returns, it kills whatever is left of this daemon's.
    let _processes = host.processes().own(host.data_dir());
    // A fleet's sessions are every member's: another member's are no orphans.
    let reap = match host.fleet() {
        Some(_) => Ok(0),
        None => host.sessions().reap_ephemeral().await,
    };
    match reap {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            sessions = n,
            "deleted the MCP connections' sessions the last daemon left"
        ),
        Err(e) => tracing::warn!(%e, "cannot delete the sessions the last daemon left"),
    }
    host.frontends().load(host.sessions()).await;
    tracing::info!(socket = %listeners.describe(), activated = listeners.owned.is_none(), workspace = %host.workspace().display(), data_dir = %host.data_dir().display(), "toolhost serving");
    // Every source starts once: custom tools, skills and commands are listed from the first
    // answer on and their folders watched from now; MCP servers connect in the background.
    reload::start(&host).await;
    // Armed before the first answer, so an edit made as soon as the daemon answers is seen.
    let watched = watch_config(&host);
    let server = rpc::start(host.clone(), listeners)?;
    if let Some(fleet) = host.fleet() {
        let h = host.clone();
        fleet.start(crate::fleet::Context {
            approvals: host.approvals().clone(),
            tracker: host.tracker().clone(),
            shutdown: host.shutdown_token().clone(),
            servers: std::sync::Arc::new(move || {
                h.mcp()
                    .status(None)
                    .into_iter()
                    .map(|s| crate::protocol::FleetServer {
                        state: serde_json::to_value(s.state)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        name: s.name,
                    })
                    .collect()
            }),
            pins_changed: {
                let h = host.clone();
                std::sync::Arc::new(move || {
                    h.registry().refresh_pins();
                })
            },
        });
    }
    host.tracker().spawn(crate::outputs::prune_periodically(
        host.outputs_dir(),
        host.shutdown_token().clone(),
    ));
    let _watcher = watched.map(|(watcher, changes)| {
        follow_config(&host, changes);
        watcher
    });
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);

    shutdown.await;
    tracing::info!("shutting down");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    server.stop_accepting();
    if tokio::time::timeout(SHUTDOWN_GRACE, host.calls().idle())
        .await
        .is_err()
    {
        tracing::warn!(
            calls = host.calls().in_flight(),
            "cancelling calls still running"
        );
    }
    host.shutdown_token().cancel();
    host.custom().shutdown_event(host.workspace()).await;
    host.mcp().stop_all();
    server.stopped(SHUTDOWN_GRACE).await;
    host.tracker().close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, host.tracker().wait()).await;
    host.audit().flush(SHUTDOWN_GRACE).await;
    if let Some(fleet) = host.fleet() {
        fleet.stop(SHUTDOWN_GRACE).await;
    }
    Ok(())
}

/// Watches config.json (or, while its directory is missing, the nearest ancestor, until it
/// appears); the returned guard keeps the watch alive, the receiver gets its signals.
/// Without a watch the daemon still serves and SIGHUP / `config.reload` still work.
fn watch_config(
    host: &Host,
) -> Option<(
    config::ConfigWatcher,
    tokio::sync::mpsc::UnboundedReceiver<()>,
)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = match config::watch(host.config_path(), tx) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(path = %host.config_path().display(), "not watching config.json: {e:#}");
            return None;
        }
    };
    let watching = watcher.watching();
    host.update_config_state(|s| s.watching = watching);
    Some((watcher, rx))
}

/// Reloads on every signal of the watch, starting with one look: an edit made between the
/// start-up load and the arming of the watch gave no signal.
fn follow_config(host: &Host, mut rx: tokio::sync::mpsc::UnboundedReceiver<()>) {
    let h = host.clone();
    host.tracker().spawn(async move {
        reload::reload_if_changed(&h).await;
        loop {
            tokio::select! {
                Some(()) = rx.recv() => {
                    while rx.try_recv().is_ok() {}
                    reload::reload_if_changed(&h).await;
                }
                _ = h.shutdown_token().cancelled() => return,
            }
        }
    });
}

async fn reload_on_sighup(host: Host, mut hup: tokio::signal::unix::Signal) {
    loop {
        tokio::select! {
            _ = hup.recv() => { reload::reload(&host).await; }
            _ = host.shutdown_token().cancelled() => return,
        }
    }
}

/// Installs the SIGTERM/SIGINT handlers now; the future resolves on the first signal.
fn stop_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
