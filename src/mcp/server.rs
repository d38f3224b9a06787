//! One configured MCP server: its state and the supervisor task that keeps it connected
//! (connect → list → serve → on crash back off and reconnect; circuit breaker), and, in
//! [`lifecycle`], when its process runs at all (lazy start, idle stop, bounded start-ups).
//!
//! `server.rs` and `tool.rs` import each other on purpose: the server builds its `McpTool`s
//! and hands out call slots, and a tool calls back into its server's link and slots. They
//! are the two halves of one server; merged they would be one file of ~1,000 lines.

mod lifecycle;
mod status;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use futures::FutureExt;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::ErrorCode;
use rmcp::service::{Peer, ServiceError};
use rmcp::RoleClient;
use serde_json::Value;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::CancellationToken;

use super::client::{Client, Notice};
use super::instances::Instances;
use super::launcher::{self, Connection};
use super::listing::{self, Bounds, ListError};
use super::tool::{serves, McpTool};
use crate::config::{McpServer, Start};
use crate::now_ms;
use crate::process::KILL_GRACE;
use crate::protocol::ErrorKind;
use crate::registry::{Change, Registry, SourceKey, Tool, ToolError};

/// Consecutive failed connection attempts that open the circuit.
pub const BREAKER_THRESHOLD: u32 = 5;
/// How long an open circuit waits before one half-open attempt.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How long a closed session may take to end by itself before its process group is
/// terminated (MCP's stdio shutdown: close stdin, wait, then signals).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(super) use lifecycle::{InUse, Parked, STARTUP_SLOTS};

/// Where a server's supervisor is, as `mcp.status` shows it.
pub use crate::protocol::McpServerState as State;

/// Everything about a server that changes while it runs, in one value: where it is
/// ([`Phase`], with what that phase knows), its last listing, what callers asked of its
/// supervisor, its uses and the counters `mcp.status` shows.
///
/// It lives on a `watch` channel. The supervisor writes the phase; outside it a call notes
/// that its token was refused ([`Trouble::SignIn`]), a reconnect withdraws that verdict,
/// and requests count themselves in and out. `mcp.status`, calls looking for the live
/// connection, the supervisor waiting for an ask and a reload waiting for the first attempt
/// read it by borrowing the current value or waiting for the next one. So a reader sees
/// the phase, its error, the connection, the failure count, the listing and the counters of
/// one moment, never a mix of two, and a waiter cannot miss the change it waits for (the
/// asks were `Notify`s, the rest mutexes and atomics beside the phase). Codex's rmcp client
/// keeps its client state the same way. Writes that nobody waits for (a use, a queued call)
/// change the value without waking the receivers.
pub(super) struct ServerState {
    pub phase: Phase,
    /// The server's last tool listing, kept across reconnects so that filters can be
    /// re-applied without one (and, for a lazy server not started yet, the one kept from its
    /// last run).
    pub listing: Listing,
    /// What callers asked of the supervisor and it has not taken up yet.
    asked: Asked,
    /// Requests begun and not ended ([`InUse`]): while any is, the server is not idle.
    uses: usize,
    /// When the last request began or ended (monotonic, so the idle timer is immune to
    /// clock changes); `None` before the first.
    last_use: Option<tokio::time::Instant>,
    /// Calls waiting for a concurrency slot.
    queued: usize,
    /// Connections made after the first of a run.
    restarts: u32,
    /// Times the circuit opened.
    circuit_opens: u32,
    /// Whether the supervisor publishes its tools itself; false while a reload waits to
    /// publish them together with every other change in one swap.
    publish: bool,
}

/// A server's tool listing as it sent it (rmcp's typed `Tool`s).
#[derive(Clone, Default)]
pub(super) struct Listing {
    pub tools: Arc<[rmcp::model::Tool]>,
    /// Whether it came from the server in this run, not from the kept listing of the last.
    pub live: bool,
}

/// What a caller asked of the supervisor.
#[derive(Clone, Copy, Default)]
struct Asked {
    /// Drop the connection, if any, and connect again (`mcp.reconnect`, `mcp.login`).
    reconnect: bool,
    /// A call found the server down: attempt now instead of after the backoff.
    attempt: bool,
}

/// Where a server is, with what each phase knows.
#[derive(Clone)]
pub(super) enum Phase {
    /// `enabled: false`: no supervisor runs.
    Disabled,
    /// No process, on purpose ([`lifecycle`]): its tools are listed from its last listing,
    /// and the next request wakes it.
    Parked(Parked),
    /// A request woke the parked server and waits for it: the first attempt since.
    Waking,
    /// The first connection attempt is under way.
    Starting,
    /// An attempt is under way, or waits out the backoff after a lost connection;
    /// `failures` attempts in a row have failed before it (0 after a requested
    /// reconnect), and `last_error` says how the last one ended.
    Reconnecting {
        failures: u32,
        last_error: Option<String>,
    },
    /// Connected and listed: calls go through `link`. `since` is ms since the epoch.
    Ready {
        link: Link,
        since: u64,
        /// A stdio server's process.
        pid: Option<u32>,
        trouble: Option<Trouble>,
    },
    /// The last attempt failed; the next one comes after a backoff, or at once when a call
    /// needs the server.
    Backoff { failures: u32, error: String },
    /// [`BREAKER_THRESHOLD`] attempts in a row failed: one attempt every
    /// [`BREAKER_COOLDOWN`], and calls are refused without trying.
    CircuitOpen { failures: u32, error: String },
    /// An HTTP server wants sign-in: no attempts until `mcp.login` (or a reload) asks for a
    /// reconnect. Not a failure to back off from.
    AuthRequired { hint: String },
    /// Removed or replaced: the supervisor has ended.
    Stopped,
}

/// Something wrong on a live connection that does not end it.
#[derive(Clone)]
pub(super) enum Trouble {
    /// A call's token was refused or a tool wants more scope: the server needs `mcp.login`
    /// (`mcp.status` says `auth_required`), but calls still go through, as other tools
    /// may need no more than the token has.
    SignIn(String),
    /// Listing again after `tools/list_changed` failed; the previous listing stays.
    Listing(String),
}

/// What a call needs of a live connection: rmcp's peer, and for a stdio server the direct
/// way to call its tools.
#[derive(Clone)]
pub(super) struct Link {
    pub peer: Peer<RoleClient>,
    pub direct: Option<Arc<super::stdio::DirectCalls>>,
    /// The revision negotiated (`2026-07-28` after `server/discover`).
    pub version: Option<rmcp::model::ProtocolVersion>,
}

pub struct Server {
    name: String,
    /// The live config; filters and approval can change without a reconnect.
    config: ArcSwap<McpServer>,
    state: watch::Sender<ServerState>,
    progress: ProgressDispatcher,
    /// The calls in flight, to which the server's own requests and log messages go.
    origins: Arc<super::origin::Origins>,
    /// Bounds calls in flight (`max_concurrency`, fixed at the start: the calls in flight
    /// are its permits taken); waiters are the queue. Closed when the server is retired.
    permits: Arc<Semaphore>,
    max_concurrency: usize,
    /// Retires the server. Every wait of the supervisor races it, so a stop is seen even
    /// while the server hangs in the middle of a request, and its process group is killed.
    stop: CancellationToken,
    registry: Registry,
    /// The host workspace: where a shared server without `cwd` runs, and its root.
    home: PathBuf,
    /// Where a scoped server's process runs (the daemon's workspace for the server itself,
    /// a session's for an instance); `None` for a shared server.
    workspace: Option<PathBuf>,
    /// A scoped server's instances for other workspaces or sessions (`instances.rs`).
    instances: Option<Arc<Instances>>,
    /// Whether its listings are kept for the next run (`list_cache.rs`): not an instance's,
    /// since the daemon's own instance's listing is the server's.
    keeps_listing: bool,
    /// The daemon's processes, OAuth tokens and surface hub.
    pub(super) runtime: super::Runtime,
}

impl Server {
    /// Creates the server of the daemon whose workspace is `home` and starts its
    /// supervisor. With `publish` false the first tool list is left for the caller to
    /// collect with [`Server::tools`] and publish.
    pub fn spawn(
        name: &str,
        config: McpServer,
        registry: Registry,
        publish: bool,
        tracker: &tokio_util::task::TaskTracker,
        home: &Path,
        runtime: super::Runtime,
    ) -> Arc<Server> {
        let instances = Instances::of(&config, home, &registry, tracker, &runtime);
        let workspace = instances.as_ref().map(|set| set.home().to_path_buf());
        let server = Self::build(name, config, registry, publish, home, workspace, runtime);
        let server = Arc::new(Server {
            instances,
            ..server
        });
        if let Some(set) = &server.instances {
            let stop = server.stop.clone();
            tracker.spawn(super::instances::reap(
                set.clone(),
                Arc::downgrade(&server),
                stop,
            ));
        }
        server.supervise(tracker)
    }

    /// Starts the supervisor of an enabled server.
    pub(super) fn supervise(
        self: Arc<Self>,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Arc<Server> {
        if self.config().enabled {
            tracker.spawn(supervise(self.clone()));
        }
        self
    }

    /// The server, its supervisor not started; `workspace` is where a scoped server's
    /// process runs.
    pub(super) fn build(
        name: &str,
        config: McpServer,
        registry: Registry,
        publish: bool,
        home: &Path,
        workspace: Option<PathBuf>,
        runtime: super::Runtime,
    ) -> Server {
        let enabled = config.enabled;
        let max_concurrency = config.max_concurrency.max(1);
        Server {
            name: name.to_owned(),
            permits: Arc::new(Semaphore::new(max_concurrency)),
            max_concurrency,
            config: ArcSwap::from_pointee(config),
            state: watch::Sender::new(ServerState {
                phase: if enabled {
                    Phase::Starting
                } else {
                    Phase::Disabled
                },
                listing: Listing::default(),
                asked: Asked::default(),
                uses: 0,
                last_use: None,
                queued: 0,
                restarts: 0,
                circuit_opens: 0,
                publish,
            }),
            progress: ProgressDispatcher::new(),
            origins: Arc::default(),
            stop: CancellationToken::new(),
            registry,
            home: home.to_path_buf(),
            workspace,
            instances: None,
            keeps_listing: true,
            runtime,
        }
    }

    /// The server as an instance of a scoped server: it keeps no listing for the next run.
    pub(super) fn into_instance(self) -> Server {
        Server {
            keeps_listing: false,
            ..self
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn config(&self) -> Arc<McpServer> {
        self.config.load_full()
    }
    pub fn progress(&self) -> &ProgressDispatcher {
        &self.progress
    }
    /// The config the server's process is started with: a scoped server's runs in its
    /// workspace (`instances::for_workspace`, which refuses a workspace path it cannot
    /// put into a shell line safely).
    pub(super) fn launch_config(&self) -> anyhow::Result<Arc<McpServer>> {
        let cfg = self.config();
        match &self.workspace {
            Some(workspace) => super::instances::for_workspace(&cfg, workspace)
                .map(Arc::new)
                .map_err(|e| anyhow::anyhow!("cannot start in {}: {e}", workspace.display())),
            None => Ok(cfg),
        }
    }
    /// The roots the server is offered (`client::roots_of`); none when it cannot start.
    pub(super) fn roots(&self) -> Vec<String> {
        self.launch_config()
            .map(|cfg| super::client::roots_of(&cfg, &self.home))
            .unwrap_or_default()
    }
    /// A scoped server's instances beside this one.
    pub(super) fn instances(&self) -> Option<&Arc<Instances>> {
        self.instances.as_ref()
    }
    /// The process of a connected stdio server.
    pub(super) fn pid(&self) -> Option<u32> {
        match self.state.borrow().phase {
            Phase::Ready { pid, .. } => pid,
            _ => None,
        }
    }
    pub(super) fn origins(&self) -> &Arc<super::origin::Origins> {
        &self.origins
    }
    pub fn state(&self) -> State {
        self.state.borrow().phase.wire()
    }
    /// Whether the last connection attempt failed (or the connection was lost) and no
    /// attempt has succeeded since: a retrying server is not serving.
    pub fn failing(&self) -> bool {
        self.state.borrow().phase.failures() > 0
    }
    /// Waits until the first connection attempt has finished (bounded by the caller).
    pub async fn first_attempt_done(&self) {
        let mut state = self.state.subscribe();
        let _ = state
            .wait_for(|s| !matches!(s.phase, Phase::Starting))
            .await;
    }

    /// Starts publishing tool changes directly (after a reload has done its one swap).
    pub fn start_publishing(&self) {
        self.state.send_if_modified(|s| {
            s.publish = true;
            false
        });
    }

    /// Applies a config change that needs no reconnect (filters, approval classes).
    pub fn update_config(&self, config: McpServer) {
        self.config.store(Arc::new(config));
    }

    /// Asks for a new connection. It will find out again whether sign-in is needed, so a
    /// sign-in verdict turns into `connecting` at once: a caller polling `mcp.status` after
    /// `mcp.login` sees neither the old verdict nor the old connection as `ready`.
    pub fn reconnect(&self) {
        self.state.send_if_modified(|s| {
            let hint = match &mut s.phase {
                // A parked server has no connection: its next request starts it (an ask
                // left pending would instead cut short that start).
                Phase::Parked(_) => return false,
                Phase::AuthRequired { hint }
                | Phase::Ready {
                    trouble: Some(Trouble::SignIn(hint)),
                    ..
                } => std::mem::take(hint),
                _ => {
                    s.asked.reconnect = true;
                    return true;
                }
            };
            s.phase = Phase::Reconnecting {
                failures: 0,
                last_error: Some(hint),
            };
            s.asked.reconnect = true;
            true
        });
    }

    /// Asks the supervisor for an attempt now (a call found the server down).
    fn want_attempt(&self) {
        self.state.send_if_modified(|s| {
            s.asked.attempt = true;
            true
        });
    }

    /// Waits until a caller asks what `wanted` picks, then takes up every ask: whatever the
    /// supervisor does next (connect again, attempt now) answers them all.
    async fn asked(&self, wanted: impl Fn(Asked) -> bool) {
        let mut state = self.state.subscribe();
        // The sender lives as long as `self`: the wait ends only with an ask.
        if state.wait_for(|s| wanted(s.asked)).await.is_ok() {
            self.state.send_if_modified(|s| {
                s.asked = Asked::default();
                false
            });
        }
    }

    /// Stops the supervisor for good: its connection closes, its process group is killed,
    /// and it never publishes again (a replacement may already own its registry source).
    /// Calls waiting for a slot fail at once.
    pub fn retire(&self) {
        self.stop.cancel();
        self.permits.close();
        if let Some(set) = &self.instances {
            set.retire();
        }
    }

    /// The server's own names of the tools it last listed (before include/exclude).
    pub fn remote_tool_names(&self) -> Vec<String> {
        let tools = self.listed_tools();
        tools.iter().map(|t| t.name.to_string()).collect()
    }

    /// The tools of the last listing.
    pub(super) fn listed_tools(&self) -> Arc<[rmcp::model::Tool]> {
        self.state.borrow().listing.tools.clone()
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> ToolError {
        ToolError::new(
            ErrorKind::Unavailable,
            format!("MCP server '{}' {why}", self.name),
        )
    }

    /// The connection to call on, or the `unavailable` answer (waking a reconnect).
    pub(super) fn link_for_call(&self) -> Result<Link, ToolError> {
        if self.stop.is_cancelled() {
            return Err(self.unavailable("was removed"));
        }
        match &self.state.borrow().phase {
            Phase::Ready { link, .. } if !link.peer.is_transport_closed() => {
                return Ok(link.clone())
            }
            Phase::AuthRequired { hint } => {
                return Err(self.unavailable(format_args!("is unavailable: {hint}")))
            }
            Phase::CircuitOpen { failures, .. } => {
                return Err(self.unavailable(format_args!(
                    "is unreachable (circuit open after {failures} failed attempts; it is retried every {} s)",
                    BREAKER_COOLDOWN.as_secs()
                )))
            }
            _ => {}
        }
        self.want_attempt();
        Err(self.unavailable("is not connected"))
    }

    /// Waits for a concurrency slot; the wait counts against the call's timeout.
    /// The call holds its slot until the permit is dropped.
    pub(super) async fn acquire_slot(&self) -> Result<OwnedSemaphorePermit, ToolError> {
        /// Counts a call in the queue while it waits, also when the wait is given up
        /// (the call cancelled or timed out in the queue).
        struct Waiting<'a>(&'a Server);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.state.send_if_modified(|s| {
                    s.queued -= 1;
                    false
                });
            }
        }
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::Closed) => Err(()),
            Err(TryAcquireError::NoPermits) => {
                self.state.send_if_modified(|s| {
                    s.queued += 1;
                    false
                });
                let _waiting = Waiting(self);
                self.permits.clone().acquire_owned().await.map_err(drop)
            }
        };
        permit.map_err(|()| self.unavailable("was removed"))
    }

    /// Calls holding a concurrency slot.
    pub(super) fn in_flight(&self) -> usize {
        self.max_concurrency
            .saturating_sub(self.permits.available_permits())
    }

    pub(super) fn call_error(&self, e: ServiceError) -> ToolError {
        if let Some(needed) = self
            .runtime
            .oauth
            .needs_auth(&self.name, e.auth_challenge())
        {
            // A rejected token (refresh already tried) or a step-up for more scope.
            self.note(Trouble::SignIn(needed.hint.clone()));
            return ToolError::new(ErrorKind::Unavailable, needed.hint);
        }
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                self.want_attempt();
                self.unavailable("is not connected (the connection closed during the call)")
            }
            ServiceError::McpError(err) => {
                let refused = ToolError::failed(format!(
                    "MCP server '{}' refused the call: {}",
                    self.name, err.message
                ));
                let required = err
                    .data
                    .filter(|_| err.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY)
                    .and_then(|mut d| d.get_mut("requiredCapabilities").map(Value::take));
                match required {
                    Some(caps) => refused.with_field(crate::protocol::REQUIRED_CAPABILITIES, caps),
                    None => refused,
                }
            }
            ServiceError::Cancelled { .. } => {
                ToolError::new(ErrorKind::Cancelled, "the call was cancelled")
            }
            other => ToolError::failed(format!("MCP server '{}': {other}", self.name)),
        }
    }

    /// Notes `trouble` on the live connection (a sign-in verdict is not replaced by a
    /// listing problem); nothing when there is none.
    fn note(&self, trouble: Trouble) {
        self.state.send_if_modified(|s| match &mut s.phase {
            Phase::Ready { trouble: now, .. } => {
                if !matches!(
                    (&now, &trouble),
                    (Some(Trouble::SignIn(_)), Trouble::Listing(_))
                ) {
                    *now = Some(trouble);
                }
                true
            }
            _ => false,
        });
    }

    /// The host tools for the server's current listing under the current config.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        let cfg = self.config();
        let remote = self.listed_tools();
        remote
            .iter()
            .filter(|t| serves(&cfg, &t.name))
            .map(|t| Arc::new(McpTool::new(self, &cfg, t)) as Arc<dyn Tool>)
            .collect()
    }

    /// Publishes the current tools as this server's registry source (when publishing).
    pub fn publish_tools(self: &Arc<Self>) {
        if self.state.borrow().publish && !self.stop.is_cancelled() {
            let tools = self.tools();
            self.registry.apply(Change {
                sources: vec![(SourceKey::Mcp(self.name.clone()), Some(tools))],
                approval_overrides: None,
            });
        }
    }

    /// Hands a new listing of prompts, resources and templates to the hub (unless retired:
    /// a replacement may already own the entry).
    pub(super) fn surface_listed(&self, surface: super::surface::ServerSurface) {
        if !self.stop.is_cancelled() {
            if self.keeps_listing {
                self.runtime
                    .lists
                    .store_surface(&self.name, &self.config(), &surface);
            }
            self.runtime.surface.listed(&self.name, surface);
        }
    }

    /// Keeps a new listing and publishes it.
    fn listed(self: &Arc<Self>, tools: Vec<rmcp::model::Tool>) {
        self.keep_listing(tools);
        self.publish_tools();
    }

    /// Takes the outcome of listing again after `tools/list_changed`: a failure keeps the
    /// previous listing (the connection still serves it) and shows in `last_error`.
    fn relisted(self: &Arc<Self>, outcome: Result<Vec<rmcp::model::Tool>, ListError>) {
        match outcome {
            Ok(tools) => {
                self.listed(tools);
                self.state.send_if_modified(|s| match &mut s.phase {
                    Phase::Ready { trouble, .. }
                        if matches!(trouble, Some(Trouble::Listing(_))) =>
                    {
                        *trouble = None;
                        true
                    }
                    _ => false,
                });
            }
            Err(e) => {
                let kept = self.listed_tools().len();
                tracing::warn!(server = %self.name, error = %e, "listing tools after list_changed failed");
                self.note(Trouble::Listing(format!(
                    "{e}, after tools/list_changed; the {kept} tools listed before stay"
                )));
            }
        }
    }
}

/// The supervisor: one task per server, owning its connection and writing its state.
async fn supervise(server: Arc<Server>) {
    run(&server).await;
    server.enter(Phase::Stopped);
}

async fn run(server: &Arc<Server>) {
    let stop = &server.stop;
    // Whether an attempt has finished before (a later connection counts as a restart).
    let mut attempted = false;
    // A lazy server listed from its last run waits, parked, for its first request.
    if server.config().start == Start::Lazy
        && server.listed_from_cache()
        && !lifecycle::parked(server).await
    {
        return;
    }
    loop {
        if attempted {
            server.retrying();
        }
        let (notice_tx, mut notices) = mpsc::unbounded_channel();
        let client = Client::new(
            server.progress.clone(),
            notice_tx,
            server.roots(),
            server.origins.clone(),
        );
        let attempt = tokio::select! {
            r = connect_and_list(server, client) => r,
            () = server.asked(|a| a.reconnect) => continue,
            _ = stop.cancelled() => return,
        };
        // How the attempt or the connection ended, and whether it was a lost connection.
        let (error, lost) = match attempt {
            Ok(conn) => {
                let link = Link {
                    peer: conn.service.peer().clone(),
                    direct: conn.direct.clone(),
                    version: super::era::version(&conn.service),
                };
                let restart = std::mem::replace(&mut attempted, true);
                server.state.send_modify(|s| {
                    s.restarts += u32::from(restart);
                    s.phase = Phase::Ready {
                        link,
                        since: now_ms(),
                        pid: conn.pid,
                        trouble: None,
                    };
                });
                server.publish_tools();
                match serve_connection(server, conn, &mut notices).await {
                    Ended::Stop => return,
                    Ended::Idle => {
                        tracing::info!(server = %server.name, "MCP server stopped after idle_stop_s without a request");
                        if !lifecycle::parked(server).await {
                            return;
                        }
                        // Woken by a request: a start of its own, not a restart.
                        attempted = false;
                        continue;
                    }
                    Ended::Reconnect => {
                        server.enter(Phase::Reconnecting {
                            failures: 0,
                            last_error: None,
                        });
                        continue;
                    }
                    Ended::Closed(reason) => {
                        tracing::warn!(server = %server.name, %reason, "MCP server connection lost; reconnecting");
                        (reason, true)
                    }
                }
            }
            Err(e) => {
                attempted = true;
                // Waiting for sign-in is not a failure to back off from: no retries until
                // `mcp.login` (or a reload) reconnects.
                if let Some(needed) = server.runtime.oauth.needed_in(&server.name, &e) {
                    tracing::warn!(server = %server.name, "MCP server needs sign-in");
                    server.enter(Phase::AuthRequired { hint: needed.hint });
                    tokio::select! {
                        () = server.asked(|a| a.reconnect) => continue,
                        _ = stop.cancelled() => return,
                    }
                }
                let message = format!("{e:#}");
                tracing::warn!(server = %server.name, error = %message, "MCP server failed to connect");
                (message, false)
            }
        };
        // Back off (or wait out an open circuit), unless a call or a command wakes us.
        let failures = server.failed(error, lost);
        let circuit_open = failures >= BREAKER_THRESHOLD;
        let wait = if circuit_open {
            BREAKER_COOLDOWN
        } else {
            backoff(failures)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            () = server.asked(|a| a.reconnect || (a.attempt && !circuit_open)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

impl Server {
    fn enter(&self, phase: Phase) {
        self.state.send_modify(|s| s.phase = phase);
    }

    /// Another attempt begins: `Reconnecting`, with the failures and the last error of
    /// the phase it leaves.
    fn retrying(&self) {
        self.state.send_modify(|s| {
            let last_error = s.phase.last_error().map(str::to_owned);
            s.phase = Phase::Reconnecting {
                failures: s.phase.failures(),
                last_error,
            };
        });
    }

    /// The attempt ended with `error`, or the connection was `lost` with it: one more
    /// failure in a row. A failed attempt is `Backoff`; a lost connection is
    /// `Reconnecting` at once (it backs off too, but it was serving a moment ago); either
    /// is `CircuitOpen` at [`BREAKER_THRESHOLD`]. Returns the failures in a row.
    fn failed(&self, error: String, lost: bool) -> u32 {
        let mut failures = 0;
        self.state.send_modify(|s| {
            failures = s.phase.failures() + 1;
            if failures == BREAKER_THRESHOLD {
                s.circuit_opens += 1;
            }
            s.phase = if failures >= BREAKER_THRESHOLD {
                Phase::CircuitOpen { failures, error }
            } else if lost {
                Phase::Reconnecting {
                    failures,
                    last_error: Some(error),
                }
            } else {
                Phase::Backoff { failures, error }
            };
        });
        failures
    }
}

fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE
        .saturating_mul(1 << failures.min(10))
        .min(BACKOFF_MAX);
    // Full jitter in [exp/2, exp] so restarted servers do not reconnect in lockstep.
    exp / 2 + exp.mul_f64(fastrand::f64() / 2.0)
}

/// Connects and lists the tools, all within `startup_timeout_ms`, then the rest of the
/// server's surface. The tools are kept, not yet published: the caller publishes them once
/// the server is `Ready`, so no frontend sees a tool it cannot call yet.
async fn connect_and_list(server: &Arc<Server>, client: Client) -> anyhow::Result<Connection> {
    // One of the daemon's start-up slots: many servers starting at once do not all spawn
    // at once, and one that hangs holds one slot, never the others.
    let _slot = server.startup_slot().await;
    let cfg = server.launch_config()?;
    let conn = launcher::connect(&server.name, &cfg, client, &server.runtime).await?;
    let startup = Duration::from_millis(cfg.startup_timeout_ms);
    let tools = tokio::time::timeout(
        startup,
        listing::list_tools(conn.service.peer(), Bounds::of(&cfg)),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "tools/list did not answer within startup_timeout_ms ({} ms)",
            cfg.startup_timeout_ms
        )
    })??;
    server.keep_listing(tools);
    list_surface(server, conn.service.peer(), &cfg).await;
    Ok(conn)
}

/// Lists prompts, resources and templates (within `startup_timeout_ms` again) and
/// subscribes again to the resources that have subscribers. A failure does not fail the
/// connection: its tools serve, and the previous listing stays.
async fn list_surface(server: &Arc<Server>, peer: &Peer<RoleClient>, cfg: &McpServer) {
    use super::surface::{self, Kind};
    let base = server.runtime.surface.of(&server.name);
    let listing = surface::list(
        &server.name,
        cfg.prefix,
        peer,
        Bounds::of(cfg),
        &[Kind::Prompts, Kind::Resources],
        base,
    );
    match tokio::time::timeout(Duration::from_millis(cfg.startup_timeout_ms), listing).await {
        Ok(Ok(listed)) => server.surface_listed(listed),
        Ok(Err(e)) => {
            tracing::warn!(server = %server.name, error = %e, "listing prompts and resources failed")
        }
        Err(_) => {
            tracing::warn!(server = %server.name, "listing prompts and resources did not finish within startup_timeout_ms")
        }
    }
    super::relay::resubscribe(server, peer).await;
}

enum Ended {
    Stop,
    /// Stopped for want of requests; the server is already [`Parked::Idle`].
    Idle,
    Reconnect,
    Closed(String),
}

/// A listing under way after `tools/list_changed`.
type Relisting = BoxFuture<'static, Result<Vec<rmcp::model::Tool>, ListError>>;

/// Serves a connection until it closes, a reconnect is asked for or the server stops.
/// Listing again after `tools/list_changed` runs beside the other waits, not in place of
/// them, so a server that never answers it cannot keep the supervisor from a stop.
async fn serve_connection(
    server: &Arc<Server>,
    conn: Connection,
    notices: &mut mpsc::UnboundedReceiver<Notice>,
) -> Ended {
    let Connection { service, group, .. } = conn;
    let peer = service.peer().clone();
    let cancel = service.cancellation_token();
    let notes_to_self = service.service().notices();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let relist = || -> Relisting {
        let (peer, bounds) = (peer.clone(), Bounds::of(&server.config()));
        async move { listing::list_tools(&peer, bounds).await }.boxed()
    };
    let mut relisting: Option<Relisting> = None;
    // A server of the 2026-07-28 era sends list changes on a listen only.
    let listening = super::listen::follow(server, peer.clone(), notes_to_self);
    tokio::pin!(listening);
    // Prompts and resources listed again after their list_changed, ended with the connection.
    let mut surface = super::surface::Follower::default();
    // A list_changed came during the listing under way: list once more after it.
    let mut stale = false;
    // One idle timer for the connection, re-armed from the last use when it fires early.
    let (idle_after, connected) = (server.config().idle_stop_s, tokio::time::Instant::now());
    let idle_after = idle_after.map(Duration::from_secs);
    let idle = tokio::time::sleep(idle_after.unwrap_or_default());
    tokio::pin!(idle);
    let ended = loop {
        tokio::select! {
            quit = &mut waiting => break Ended::Closed(format!("the server closed the connection ({quit:?})")),
            _ = server.stop.cancelled() => break Ended::Stop,
            () = server.asked(|a| a.reconnect) => break Ended::Reconnect,
            () = &mut listening => {}
            Some(notice) = notices.recv() => {
                // A burst of list_changed is one listing; listings never overlap.
                let burst = std::iter::once(notice).chain(std::iter::from_fn(|| notices.try_recv().ok()));
                let mut tools = false;
                for notice in burst {
                    match notice {
                        Notice::ToolListChanged => tools = true,
                        Notice::ListChanged(kind) => surface.changed(server, &peer, kind),
                        Notice::ResourceUpdated(uri) => server.runtime.surface.updated(&server.name, uri),
                    }
                }
                match (&relisting, tools) {
                    (_, false) => {}
                    (Some(_), true) => stale = true,
                    (None, true) => relisting = Some(relist()),
                }
            }
            outcome = finished(&mut relisting) => {
                relisting = std::mem::take(&mut stale).then(&relist);
                server.relisted(outcome);
            }
            () = &mut idle, if idle_after.is_some() => {
                let after = idle_after.unwrap_or_default();
                match server.park_if_idle(after, connected) {
                    None => break Ended::Idle,
                    Some(next) => idle.as_mut().reset(next),
                }
            }
        }
    };
    if !matches!(ended, Ended::Closed(_)) {
        cancel.cancel();
        let _ = tokio::time::timeout(CLOSE_WAIT, &mut waiting).await;
    }
    if let Some(g) = group {
        g.terminate(KILL_GRACE).await;
    }
    ended
}

/// The output of the future in `slot`, or never when there is none.
async fn finished<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}
