//! A module host process: one Node running `host.mjs` per trust domain (the user's own
//! modules, or one workspace's; see `super::Domain`), started on first need through
//! [`Processes`] (its own group, `PR_SET_PDEATHSIG`, the ledger), confined as a whole by
//! its domain's sandbox, supervised, restarted with backoff when it dies while modules are
//! loaded, stopped when idle and killed when it outgrows `custom_tools.module_max_memory_mb`.
//!
//! Requests are newline JSON objects with an `op` and a numeric `id`, drawn from one
//! counter for every host of the daemon, so no two hosts ever have the same id open; every
//! line a host writes with an `id` goes to that request's receiver *in that host* (a line
//! naming another host's request finds nothing and is dropped), and a *final* line
//! (`result`, `error`, `tools`, `done`, `ack`) closes it. When the process ends, every open
//! receiver is closed, so calls in flight end `unavailable` at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SandboxConfig;
use crate::lock;
use crate::process::node::find_node;
use crate::process::Processes;
use crate::sandbox::{self, Confinement, Plan};

/// The host program, embedded; written under the data dir at a content-addressed name.
const SCRIPT: &str = include_str!("host.mjs");
/// How long a fresh host has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest line read from the host (a result with an embedded image fits).
const MAX_LINE: usize = 64 * 1024 * 1024;
/// Between SIGTERM and SIGKILL when the host is stopped.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// The first and the longest wait before an automatic restart.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A host that lived this long before dying restarts without backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(30);
/// How long a host may sit without a request before it is stopped (the next call starts a
/// new one and loads its module again); [`IDLE_VAR`] overrides it for tests.
const IDLE_AFTER: Duration = Duration::from_secs(600);
/// The test-only switch (like `TOOLHOST_FRAME_TIMEOUT_MS`): the idle time in milliseconds.
pub const IDLE_VAR: &str = "TOOLHOST_TEST_MODULE_IDLE_MS";
/// How often a host's memory is read while it has requests open, and while it has none.
const MEMORY_TICK_BUSY: Duration = Duration::from_millis(100);
const MEMORY_TICK_IDLE: Duration = Duration::from_secs(2);

/// Request ids, one counter for every host of the daemon: a host can only ever name its
/// own requests, never another's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Lines of one request, until its final one.
pub type Replies = mpsc::UnboundedReceiver<Value>;

/// A handle on the module host (cheap to clone).
#[derive(Clone)]
pub struct ModuleHost(Arc<Inner>);

struct Inner {
    processes: Processes,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Where `host.mjs` is written.
    dir: PathBuf,
    /// The `node` config names, if any.
    node: Mutex<Option<PathBuf>>,
    /// The domain's sandbox config and the place workspace-write may write: the sandbox
    /// the whole host runs in.
    sandbox: Mutex<Option<(SandboxConfig, PathBuf)>>,
    /// A host of modules a workspace brought: it may not make Unix sockets, so the daemon's
    /// socket is out of its reach (Landlock cannot refuse a pathname socket's connect), and
    /// neither it nor its children can talk their way out of its sandbox.
    no_unix_sockets: bool,
    /// Config `custom_tools.module_max_memory_mb` in KiB (0: no bound).
    max_memory_kib: AtomicU64,
    /// Kept running however long it idles (its modules listen for session events, which
    /// only a running host hears).
    stay_up: AtomicBool,
    idle_after: Duration,
    state: Mutex<State>,
    /// One start at a time.
    start_lock: tokio::sync::Mutex<()>,
    /// Told after an automatic restart, so the loaded modules are loaded again.
    on_restart: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    /// Cancelled once the shutdown event has run: at shutdown the host waits for it (at
    /// most [`RELEASE_WAIT`]), so `onSession("shutdown")` reaches a live host.
    released: CancellationToken,
}

/// How long a host outlives the daemon's shutdown signal, waiting for the shutdown event.
const RELEASE_WAIT: Duration = Duration::from_secs(7);

#[derive(Default)]
struct State {
    live: Option<Live>,
    /// Counts the processes started; a tool loaded in one generation is unknown to the next.
    generation: u64,
    restarts: u64,
    /// Crashes in a row, for the backoff.
    crashes: u32,
    last_exit: Option<String>,
    node_path: Option<PathBuf>,
    node_version: Option<String>,
    typescript: bool,
    start_error: Option<String>,
    /// Whether a host should run (modules are loaded): only then is a dead one restarted.
    wanted: bool,
}

/// The running process, as requests see it.
#[derive(Clone)]
pub struct Live {
    pub generation: u64,
    pub pid: u32,
    writer: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Value>>>>,
    /// The process groups named in `{"id", "pgid"}` lines, by the open request that named
    /// each first: a second line naming one is refused, so one call cannot have the daemon
    /// end another call's children. Lines are read in order, and the host names a child's
    /// group as it spawns it, before module code can learn its pid.
    groups: Arc<Mutex<HashMap<i64, u64>>>,
    /// Cancelled to stop this process (and only this one).
    kill: CancellationToken,
    /// When a request was last sent or answered (the idle clock).
    last_used: Arc<Mutex<Instant>>,
    /// Why the daemon stopped it, when it did so on its own account.
    stopped: Arc<Mutex<Option<Stop>>>,
}

/// Why the daemon stopped a host of its own accord.
#[derive(Debug, Clone)]
enum Stop {
    /// No request for the idle time: not restarted until the next call.
    Idle,
    /// It outgrew the memory bound (the text says by how much).
    Memory(String),
}

impl Live {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Why the daemon killed this process, if it killed it for its memory: the error of
    /// the calls it ends.
    pub fn killed_for(&self) -> Option<String> {
        match &*lock(&self.stopped) {
            Some(Stop::Memory(why)) => Some(why.clone()),
            _ => None,
        }
    }

    fn stop(&self, why: Stop) {
        lock(&self.stopped).get_or_insert(why);
        self.kill.cancel();
    }
}

/// What `host.health` says of the module host.
#[derive(Debug, Clone, Default)]
pub struct Health {
    pub node: Option<PathBuf>,
    pub node_version: Option<String>,
    pub typescript: bool,
    pub pid: Option<u32>,
    pub restarts: u64,
    pub last_exit: Option<String>,
    pub start_error: Option<String>,
    /// The policy it runs under (`off`: unconfined).
    pub policy: crate::protocol::SandboxPolicy,
}

impl ModuleHost {
    /// `dir` is a private folder of the daemon's (the data dir's `modules/`);
    /// `no_unix_sockets` for a host of a workspace's modules (see [`Inner`]).
    pub fn new(
        processes: Processes,
        tracker: TaskTracker,
        shutdown: CancellationToken,
        dir: PathBuf,
        no_unix_sockets: bool,
    ) -> Self {
        ModuleHost(Arc::new(Inner {
            processes,
            tracker,
            shutdown,
            dir,
            no_unix_sockets,
            node: Mutex::new(None),
            sandbox: Mutex::new(None),
            max_memory_kib: AtomicU64::new(0),
            stay_up: AtomicBool::new(false),
            idle_after: std::env::var(IDLE_VAR)
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(IDLE_AFTER, Duration::from_millis),
            state: Mutex::default(),
            start_lock: tokio::sync::Mutex::new(()),
            on_restart: Mutex::new(None),
            released: CancellationToken::new(),
        }))
    }

    /// The shutdown event has run: the host may stop now.
    pub fn release(&self) {
        self.0.released.cancel();
    }

    /// Sets config `custom_tools.node`; a change stops the running host (the next request
    /// starts the new node, and the restart hook loads the modules into it).
    pub fn set_node(&self, node: Option<PathBuf>) {
        let changed = {
            let mut n = lock(&self.0.node);
            let changed = *n != node;
            *n = node;
            changed
        };
        if changed {
            if let Some(live) = lock(&self.0.state).live.clone() {
                live.kill.cancel();
            }
        }
    }

    /// Sets config `custom_tools.module_max_memory_mb` (0: no bound); read by the running
    /// host's watcher at its next look.
    pub fn set_max_memory_mb(&self, mb: u64) {
        self.0
            .max_memory_kib
            .store(mb.saturating_mul(1024), Ordering::Relaxed);
    }

    /// Keeps the host running however long it idles (`true`), or lets it stop when idle.
    pub fn set_stay_up(&self, stay: bool) {
        self.0.stay_up.store(stay, Ordering::Relaxed);
    }

    /// Sets the sandbox the host runs in: `config`'s policy, with `workspace` as the place
    /// workspace-write may write. Every module of the host shares this sandbox, whatever a
    /// session's own policy. A change stops the running host, like a new `node`.
    pub fn set_sandbox(&self, config: &SandboxConfig, workspace: &Path) {
        let wanted = (config.clone(), workspace.to_path_buf());
        let changed = {
            let mut current = lock(&self.0.sandbox);
            let changed = current.as_ref() != Some(&wanted);
            *current = Some(wanted);
            changed
        };
        if changed {
            if let Some(live) = lock(&self.0.state).live.clone() {
                live.kill.cancel();
            }
        }
    }

    /// The confinement a new host process starts in, if a policy applies and the kernel
    /// can enforce it (one it cannot is refused when `sandbox.required`, else logged).
    fn confinement(&self) -> Result<Option<Confinement>, String> {
        let Some((mut config, workspace)) = lock(&self.0.sandbox).clone() else {
            return Ok(None);
        };
        config.hidden = readable_script_dir(&config.hidden, &self.0.dir);
        let call = sandbox::CallSandbox::resolve(&config, None, None);
        match sandbox::plan(&call, &workspace, &sandbox::Extras::default()) {
            Ok(Plan::Confined(c)) if self.0.no_unix_sockets => c
                .without_unix_sockets()
                .map(Some)
                .map_err(|e| format!("could not set up the module host's sandbox: {e}")),
            Ok(Plan::Confined(c)) => Ok(Some(c)),
            Ok(Plan::Off { .. }) => Ok(None),
            Ok(Plan::Unenforced { reason, .. }) => {
                tracing::warn!("the module host runs unconfined: {reason}");
                Ok(None)
            }
            Err(refused) => Err(format!(
                "the module host cannot start sandboxed: {}",
                refused.message
            )),
        }
    }

    /// Called after each automatic restart.
    pub fn on_restart(&self, f: Arc<dyn Fn() + Send + Sync>) {
        *lock(&self.0.on_restart) = Some(f);
    }

    /// Whether a host should be kept running (modules are loaded in it).
    pub fn set_wanted(&self, wanted: bool) {
        let live = {
            let mut st = lock(&self.0.state);
            st.wanted = wanted;
            if wanted {
                None
            } else {
                st.live.clone()
            }
        };
        if let Some(live) = live {
            live.kill.cancel();
        }
    }

    /// The running process, if one runs (none is started).
    pub fn current(&self) -> Option<Live> {
        lock(&self.0.state).live.clone()
    }

    /// The generation of the running process (0: none runs).
    pub fn generation(&self) -> u64 {
        self.current().map_or(0, |l| l.generation)
    }

    pub fn health(&self) -> Health {
        let policy = lock(&self.0.sandbox)
            .as_ref()
            .map_or(crate::protocol::SandboxPolicy::Off, |(c, _)| c.policy);
        let st = lock(&self.0.state);
        Health {
            policy,
            node: st.node_path.clone(),
            node_version: st.node_version.clone(),
            typescript: st.typescript,
            pid: st.live.as_ref().map(|l| l.pid),
            restarts: st.restarts,
            last_exit: st.last_exit.clone(),
            start_error: st.start_error.clone(),
        }
    }

    /// The running process, started if there is none.
    pub async fn live(&self) -> Result<Live, String> {
        if let Some(l) = lock(&self.0.state).live.clone() {
            l.touch();
            return Ok(l);
        }
        if self.0.shutdown.is_cancelled() {
            return Err("the daemon is shutting down".into());
        }
        let _one = self.0.start_lock.lock().await;
        if let Some(l) = lock(&self.0.state).live.clone() {
            return Ok(l);
        }
        let started = self.start().await;
        let mut st = lock(&self.0.state);
        match started {
            Ok(live) => {
                st.start_error = None;
                Ok(live)
            }
            Err(e) => {
                st.start_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Sends `message` (an object with `op`) under a fresh id; its lines come on the
    /// receiver, which closes after the final one or when the process ends.
    pub fn request(&self, live: &Live, mut message: Value) -> (u64, Replies) {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        message["id"] = json!(id);
        live.touch();
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&live.pending).insert(id, tx);
        write(live, &message);
        (id, rx)
    }

    /// Sends a message that has no reply.
    pub fn tell(&self, live: &Live, message: &Value) {
        write(live, message);
    }

    /// Cancels request `id` (its caller left): the host aborts the call's signal and
    /// acknowledges at once. A host that does not acknowledge within `grace` is stuck in
    /// synchronous code; it is killed, so the supervisor restarts it.
    pub fn cancel(&self, live: &Live, id: u64, grace: Duration) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        lock(&live.pending).insert(id, tx);
        write(live, &json!({"op": "cancel", "id": id}));
        let live = live.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let acked = tokio::select! {
                r = tokio::time::timeout(grace, rx.recv()) => r.is_ok(),
                _ = live.kill.cancelled() => true,
            };
            if !acked {
                tracing::warn!(
                    pid = live.pid,
                    "the module host did not acknowledge a cancel within {} ms (stuck in synchronous code?); restarting it",
                    grace.as_millis()
                );
                live.kill.cancel();
            }
        });
    }

    /// Stops the process of `live` (a load that never finished, say).
    pub fn restart(&self, live: &Live, why: &str) {
        tracing::warn!(pid = live.pid, "restarting the module host: {why}");
        live.kill.cancel();
    }

    /// Starts a process (boxed: its supervisor restarts through [`Self::live`], which
    /// comes back here).
    fn start(&self) -> futures::future::BoxFuture<'_, Result<Live, String>> {
        Box::pin(self.start_once())
    }

    async fn start_once(&self) -> Result<Live, String> {
        let node = find_node(lock(&self.0.node).clone())?;
        let script = write_script(&self.0.dir)?;
        let confinement = self.confinement()?;
        let mut flags: Vec<&str> = Vec::new();
        loop {
            let mut cmd = tokio::process::Command::new(&node);
            cmd.args(&flags).arg(&script);
            self.0
                .processes
                .scrub_env(&mut cmd, &globset::GlobSet::empty());
            cmd.current_dir(&self.0.dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(c) = &confinement {
                cmd.env("TMPDIR", c.tmpdir());
                sandbox::install(&mut cmd, c);
            }
            let (mut child, group) = self
                .0
                .processes
                .spawn_group(cmd)
                .await
                .map_err(|e| format!("cannot start {}: {e}", node.display()))?;
            let (Some(stdout), Some(stdin), stderr) =
                (child.stdout.take(), child.stdin.take(), child.stderr.take())
            else {
                return Err("the module host started without its pipes".into());
            };
            if let Some(stderr) = stderr {
                self.0.tracker.spawn(log_stderr(stderr));
            }
            let mut reader = BufReader::new(stdout);
            let hello = tokio::time::timeout(HELLO_TIMEOUT, read_line(&mut reader))
                .await
                .map_err(|_| {
                    format!(
                        "{} did not start the module host within {} s",
                        node.display(),
                        HELLO_TIMEOUT.as_secs()
                    )
                })?
                .and_then(|l| l.get("hello").cloned())
                .ok_or_else(|| {
                    format!("{} ended before the module host started", node.display())
                })?;
            let version = hello["node"].as_str().unwrap_or_default().to_owned();
            let typescript = hello["typescript"].as_bool().unwrap_or(false);
            if !typescript && flags.is_empty() && crate::process::node::needs_strip_flag(&version) {
                // 22.6 to 22.17 (and 23.0 to 23.5) strip types only when asked.
                group.terminate(STOP_GRACE).await;
                flags.push("--experimental-strip-types");
                continue;
            }
            let pid = child.id().unwrap_or_default();
            let (writer, written) = mpsc::unbounded_channel::<Vec<u8>>();
            let live = {
                let mut st = lock(&self.0.state);
                st.generation += 1;
                st.node_path = Some(node.clone());
                st.node_version = Some(version.clone());
                st.typescript = typescript;
                let live = Live {
                    generation: st.generation,
                    pid,
                    writer,
                    pending: Arc::default(),
                    groups: Arc::default(),
                    kill: CancellationToken::new(),
                    last_used: Arc::new(Mutex::new(Instant::now())),
                    stopped: Arc::default(),
                };
                st.live = Some(live.clone());
                live
            };
            tracing::info!(pid, node = %node.display(), version, typescript, "module host started");
            self.0.tracker.spawn(write_lines(stdin, written));
            self.0.tracker.spawn(route(reader, live.clone()));
            self.0.tracker.spawn(self.clone().watch(live.clone()));
            let me = self.clone();
            let supervised = live.clone();
            // Its temp dir lives as long as the process.
            let confinement = confinement.clone();
            self.0.tracker.spawn(async move {
                let started = Instant::now();
                let shutdown = async {
                    me.0.shutdown.cancelled().await;
                    let _ = tokio::time::timeout(RELEASE_WAIT, me.0.released.cancelled()).await;
                };
                let exit = tokio::select! {
                    status = child.wait() => match status {
                        Ok(s) => format!("exited with {s}"),
                        Err(e) => format!("could not be waited for: {e}"),
                    },
                    _ = supervised.kill.cancelled() => "stopped by the daemon".to_owned(),
                    _ = shutdown => {
                        supervised.kill.cancel();
                        "stopped at shutdown".to_owned()
                    }
                };
                group.terminate(STOP_GRACE).await;
                drop(child);
                drop(confinement);
                me.ended(&supervised, exit, started.elapsed()).await;
            });
            return Ok(live);
        }
    }

    /// The process of `live` ended: its requests fail, and a wanted host comes back after
    /// the backoff.
    async fn ended(&self, live: &Live, exit: String, ran: Duration) {
        lock(&live.pending).clear();
        lock(&live.groups).clear();
        let stopped = lock(&live.stopped).clone();
        let delay = {
            let mut st = lock(&self.0.state);
            if st.live.as_ref().map(|l| l.generation) == Some(live.generation) {
                st.live = None;
            }
            let exit = match &stopped {
                Some(Stop::Idle) => format!(
                    "stopped after {} ms without a request (the next call starts it again)",
                    self.0.idle_after.as_millis()
                ),
                Some(Stop::Memory(why)) => why.clone(),
                None => exit,
            };
            if matches!(stopped, Some(Stop::Memory(_))) {
                tracing::warn!(pid = live.pid, "module host {exit}");
            } else if live.kill.is_cancelled() {
                tracing::debug!(pid = live.pid, "module host {exit}");
            } else {
                tracing::warn!(pid = live.pid, "module host {exit}");
            }
            st.last_exit = Some(exit);
            if self.0.shutdown.is_cancelled() || !st.wanted || matches!(stopped, Some(Stop::Idle)) {
                return;
            }
            st.restarts += 1;
            st.crashes = if ran >= HEALTHY_RUN {
                0
            } else {
                st.crashes + 1
            };
            backoff(st.crashes)
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.0.shutdown.cancelled() => return,
        }
        if !lock(&self.0.state).wanted {
            return;
        }
        if let Err(e) = self.live().await {
            tracing::warn!("module host not restarted: {e}");
        }
        let hook = lock(&self.0.on_restart).clone();
        if let Some(hook) = hook {
            hook();
        }
    }
}

impl ModuleHost {
    /// Watches one process until it ends: stops it when it had no request for the idle
    /// time (unless it is to stay up), and kills it when its resident memory passes the
    /// bound. Memory is read often while requests are open (that is when a module's code
    /// runs), seldom otherwise.
    async fn watch(self, live: Live) {
        let mut next_memory = Instant::now();
        loop {
            let busy = !lock(&live.pending).is_empty();
            if busy {
                live.touch();
            }
            let limit = self.0.max_memory_kib.load(Ordering::Relaxed);
            let now = Instant::now();
            if limit > 0 && now >= next_memory {
                let rss = crate::procfs::rss_kib(live.pid).unwrap_or(0);
                if rss > limit {
                    live.stop(Stop::Memory(format!(
                        "was killed: its memory ({} MB) passed custom_tools.module_max_memory_mb ({} MB); the next call starts a fresh host",
                        rss / 1024,
                        limit / 1024
                    )));
                    return;
                }
                next_memory = now
                    + if busy {
                        MEMORY_TICK_BUSY
                    } else {
                        MEMORY_TICK_IDLE
                    };
            }
            let idle_at = *lock(&live.last_used) + self.0.idle_after;
            if !busy && now >= idle_at && !self.0.stay_up.load(Ordering::Relaxed) {
                tracing::info!(pid = live.pid, "module host idle; stopping it");
                live.stop(Stop::Idle);
                return;
            }
            // Lines touch the clock as they come, so a busy host only needs waking for its
            // memory.
            let mut wake = idle_at.max(now + MEMORY_TICK_BUSY);
            if limit > 0 {
                wake = wake.min(next_memory.max(now + MEMORY_TICK_BUSY));
            }
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = live.kill.cancelled() => return,
            }
        }
    }
}

fn backoff(crashes: u32) -> Duration {
    let factor = 2u32.saturating_pow(crashes.saturating_sub(1).min(16));
    (BACKOFF_FIRST * factor).min(BACKOFF_MAX)
}

fn write(live: &Live, message: &Value) {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    let _ = live.writer.send(line);
}

/// The paths a confined host may not read, with its own script folder (`dir`, inside the
/// data dir) left readable: a hidden folder holding `dir` is replaced by its entries other
/// than the one on the way to `dir`, as they are when the host starts. (Something the
/// daemon adds to the data dir later is not readable either: Landlock grants only the
/// entries listed at the start.)
fn readable_script_dir(hidden: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in hidden {
        let Ok(rest) = dir.strip_prefix(h) else {
            out.push(h.clone());
            continue;
        };
        let Some(first) = rest.components().next() else {
            continue;
        };
        let keep = h.join(first);
        if let Ok(entries) = std::fs::read_dir(h) {
            out.extend(entries.flatten().map(|e| e.path()).filter(|p| *p != keep));
        }
    }
    out
}

/// Writes `host.mjs` to `dir/host-<digest>.mjs` unless it is there already.
fn write_script(dir: &Path) -> Result<PathBuf, String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::DirBuilderExt;
    let digest = hex::encode(&Sha256::digest(SCRIPT.as_bytes())[..8]);
    let path = dir.join(format!("host-{digest}.mjs"));
    if std::fs::read(&path).is_ok_and(|b| b == SCRIPT.as_bytes()) {
        return Ok(path);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| {
            crate::atomic_file::write_atomic(
                &path,
                SCRIPT.as_bytes(),
                crate::atomic_file::Durability::Atomic,
            )
        })
        .map_err(|e| format!("cannot write the module host to {}: {e}", path.display()))?;
    Ok(path)
}

/// The next JSON line (an overlong or unreadable line is skipped); `None` at the end.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Option<Value> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let len = crate::bounded_lines::read_line_bounded(r, MAX_LINE, &mut line)
            .await
            .ok()?;
        if len == 0 {
            return None;
        }
        if len > MAX_LINE {
            tracing::warn!("module host: a line over {MAX_LINE} bytes was dropped");
            continue;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&line) {
            return Some(v);
        }
        tracing::debug!("module host: unreadable line ignored");
    }
}

/// Hands each line with an `id` to that request of this host's; a line naming a request
/// the host does not have open (another host's, or one that ended), or a process group a
/// line named already (see [`Live::groups`]), is dropped and logged.
async fn route<R: tokio::io::AsyncBufRead + Unpin>(mut reader: R, live: Live) {
    const FINAL: [&str; 5] = ["result", "error", "tools", "done", "ack"];
    while let Some(line) = read_line(&mut reader).await {
        let Some(id) = line.get("id").and_then(Value::as_u64) else {
            continue;
        };
        let last = FINAL.iter().any(|k| line.get(*k).is_some());
        let mut p = lock(&live.pending);
        let tx = if last {
            p.remove(&id)
        } else {
            p.get(&id).cloned()
        };
        drop(p);
        let Some(tx) = tx else {
            tracing::warn!(
                pid = live.pid,
                id,
                "module host: a line for a request this host does not have open was ignored"
            );
            continue;
        };
        if last {
            lock(&live.groups).retain(|_, by| *by != id);
        } else if let Some(pgid) = line.get("pgid").and_then(Value::as_i64) {
            let named = match lock(&live.groups).entry(pgid) {
                std::collections::hash_map::Entry::Occupied(first) => Some(*first.get()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(id);
                    None
                }
            };
            if let Some(first) = named {
                tracing::warn!(
                    pid = live.pid,
                    id,
                    pgid,
                    first,
                    "module host: refused to adopt a process group a call of the host named already"
                );
                continue;
            }
        }
        live.touch();
        let _ = tx.send(line);
    }
}

async fn write_lines(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = lines.recv().await {
        if stdin.write_all(&line).await.is_err() {
            return;
        }
    }
}

async fn log_stderr(stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "toolhost::modules", "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_up_to_a_limit() {
        assert_eq!(backoff(1), BACKOFF_FIRST);
        assert_eq!(backoff(2), BACKOFF_FIRST * 2);
        assert_eq!(backoff(40), BACKOFF_MAX);
    }
}
