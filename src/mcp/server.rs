//! One configured MCP server: its shared state and the supervisor task that keeps it
//! connected (connect → list → serve → on crash back off and reconnect; circuit breaker).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::service::{Peer, ServiceError};
use rmcp::RoleClient;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::client::{Client, Notice};
use super::launcher::{self, Connection};
use super::naming::public_name;
use super::tool::{McpTool, Slot};
use crate::catalog::{ToolSource, ToolSpec};
use crate::config::McpServer;
use crate::lock;
use crate::now_ms;
use crate::process::KILL_GRACE;
use crate::protocol::ApprovalClass;
use crate::protocol::{ErrorKind, McpServerStatus, McpTransport};
use crate::registry::{Change, Registry, SourceKey, Tool, ToolError};

/// Consecutive failed connection attempts that open the circuit.
pub const BREAKER_THRESHOLD: u32 = 5;
/// How long an open circuit waits before one half-open attempt.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Where a server's supervisor is (the wire enum is the state itself).
pub use crate::protocol::McpServerState as State;

#[derive(Debug, Clone)]
struct Status {
    state: State,
    last_error: Option<String>,
    connected_since: Option<u64>,
    tools: usize,
}

/// Commands from the manager to a supervisor.
#[derive(Debug)]
enum Control {
    Reconnect,
    Stop,
}

/// What a call needs of a live connection: rmcp's peer, and for a stdio server the direct
/// way to call its tools.
#[derive(Clone)]
pub(super) struct Link {
    pub peer: Peer<RoleClient>,
    pub direct: Option<Arc<super::stdio::DirectCalls>>,
}

pub struct Server {
    name: String,
    /// The live config; filters and approval can change without a reconnect.
    config: ArcSwap<McpServer>,
    status: Mutex<Status>,
    link: Mutex<Option<Link>>,
    progress: ProgressDispatcher,
    /// Bounds calls in flight (`max_concurrency`); waiters are the queue.
    permits: Arc<Semaphore>,
    pub(super) in_flight: AtomicUsize,
    queued: AtomicUsize,
    consecutive_failures: AtomicU32,
    restarts: AtomicU32,
    circuit_opens: AtomicU32,
    /// Woken by a call that found the server down: reconnect now instead of after backoff.
    wake: Notify,
    control: mpsc::UnboundedSender<Control>,
    /// The server's last tool listing, so filters can be re-applied without a reconnect.
    remote_tools: Mutex<Vec<Value>>,
    /// Becomes true once the first connection attempt has finished (either way).
    first_attempt: watch::Sender<bool>,
    registry: Registry,
    /// Whether the supervisor publishes its tools itself; false while a reload waits to
    /// publish them together with every other change in one swap.
    publish: AtomicBool,
    /// Set once the server is removed or replaced.
    retired: AtomicBool,
    /// The `file://` URI answered to the server's `roots/list`: its `cwd`, else the host
    /// workspace.
    root: String,
    /// The daemon's processes and OAuth tokens.
    runtime: super::Runtime,
}

impl Server {
    /// Creates the server and starts its supervisor. With `publish` false the first tool
    /// list is left for the caller to collect with [`Server::tools`] and publish.
    pub fn spawn(
        name: &str,
        config: McpServer,
        registry: Registry,
        publish: bool,
        tracker: &tokio_util::task::TaskTracker,
        root: String,
        runtime: super::Runtime,
    ) -> Arc<Server> {
        let (control, control_rx) = mpsc::unbounded_channel();
        let state = if config.enabled {
            State::Connecting
        } else {
            State::Disabled
        };
        let server = Arc::new(Server {
            name: name.to_owned(),
            permits: Arc::new(Semaphore::new(config.max_concurrency.max(1))),
            config: ArcSwap::from_pointee(config),
            status: Mutex::new(Status {
                state,
                last_error: None,
                connected_since: None,
                tools: 0,
            }),
            link: Mutex::new(None),
            progress: ProgressDispatcher::new(),
            in_flight: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            consecutive_failures: AtomicU32::new(0),
            restarts: AtomicU32::new(0),
            circuit_opens: AtomicU32::new(0),
            wake: Notify::new(),
            control,
            remote_tools: Mutex::new(Vec::new()),
            first_attempt: watch::channel(false).0,
            registry,
            publish: AtomicBool::new(publish),
            retired: AtomicBool::new(false),
            root,
            runtime,
        });
        if server.config().enabled {
            tracker.spawn(supervise(server.clone(), control_rx));
        } else {
            server.first_attempt.send_replace(true);
        }
        server
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
    pub fn state(&self) -> State {
        lock(&self.status).state
    }
    /// Whether the last connection attempt failed (or the connection was lost) and no
    /// attempt has succeeded since: a retrying server is not serving.
    pub fn failing(&self) -> bool {
        self.consecutive_failures.load(Ordering::Relaxed) > 0
    }
    /// Waits until the first connection attempt has finished (bounded by the caller).
    pub async fn first_attempt_done(&self) {
        let mut rx = self.first_attempt.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Starts publishing tool changes directly (after a reload has done its one swap).
    pub fn start_publishing(&self) {
        self.publish.store(true, Ordering::SeqCst);
    }

    /// Applies a config change that needs no reconnect (filters, approval classes).
    pub fn update_config(&self, config: McpServer) {
        self.config.store(Arc::new(config));
    }

    pub fn reconnect(&self) {
        let _ = self.control.send(Control::Reconnect);
    }

    /// Stops the supervisor for good: its connection closes, its process group is killed,
    /// and it never publishes again (a replacement may already own its registry source).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        let _ = self.control.send(Control::Stop);
    }

    pub fn status(self: &Arc<Self>, collisions: Vec<String>) -> McpServerStatus {
        let s = lock(&self.status).clone();
        McpServerStatus {
            name: self.name.clone(),
            transport: if self.config().url.is_some() {
                McpTransport::Http
            } else {
                McpTransport::Stdio
            },
            state: s.state,
            tools: s.tools,
            last_error: s.last_error,
            connected_since: s.connected_since,
            consecutive_failures: self.consecutive_failures.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            circuit_opens: self.circuit_opens.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            collisions,
        }
    }

    /// The connection to call on, or the `unavailable` answer (waking a reconnect).
    pub(super) fn link_for_call(&self) -> Result<Link, ToolError> {
        if let Some(link) = lock(&self.link)
            .as_ref()
            .filter(|l| !l.peer.is_transport_closed())
        {
            return Ok(link.clone());
        }
        let state = self.state();
        if state == State::AuthRequired {
            let hint = lock(&self.status).last_error.clone().unwrap_or_default();
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("MCP server '{}' is unavailable: {hint}", self.name),
            ));
        }
        if state == State::CircuitOpen {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("MCP server '{}' is unreachable (circuit open after {} failed attempts; it is retried every {} s)", self.name, self.consecutive_failures.load(Ordering::Relaxed), BREAKER_COOLDOWN.as_secs()),
            ));
        }
        self.wake.notify_one();
        Err(ToolError::new(
            ErrorKind::Unavailable,
            format!("MCP server '{}' is not connected", self.name),
        ))
    }

    /// Waits for a concurrency slot; the wait counts against the call's timeout.
    pub(super) async fn acquire_slot(self: &Arc<Self>) -> Result<Slot, ToolError> {
        /// Counts a call in the queue while it waits, also when the wait is given up
        /// (the call cancelled or timed out in the queue).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.queued.fetch_add(1, Ordering::Relaxed);
        let waiting = Waiting(&self.queued);
        let permit = self.permits.clone().acquire_owned().await;
        drop(waiting);
        let permit = permit.map_err(|_| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("MCP server '{}' was removed", self.name),
            )
        })?;
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            server: self.clone(),
            _permit: permit,
        })
    }

    pub(super) fn call_error(&self, e: ServiceError) -> ToolError {
        if let Some(needed) = self
            .runtime
            .oauth
            .needs_auth(&self.name, e.auth_challenge())
        {
            // A rejected token (refresh already tried) or a step-up for more scope.
            self.set_state(State::AuthRequired, Some(needed.hint.clone()));
            return ToolError::new(ErrorKind::Unavailable, needed.hint);
        }
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                self.wake.notify_one();
                ToolError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "MCP server '{}' is not connected (the connection closed during the call)",
                        self.name
                    ),
                )
            }
            ServiceError::McpError(err) => ToolError::failed(format!(
                "MCP server '{}' refused the call: {}",
                self.name, err.message
            )),
            ServiceError::Cancelled { .. } => {
                ToolError::new(ErrorKind::Cancelled, "the call was cancelled")
            }
            other => ToolError::failed(format!("MCP server '{}': {other}", self.name)),
        }
    }

    /// The host tools for the server's current listing under the current config.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        let cfg = self.config();
        let remote = lock(&self.remote_tools).clone();
        let tools: Vec<Arc<dyn Tool>> = remote
            .iter()
            .filter_map(|t| {
                let remote_name = t["name"].as_str()?.to_owned();
                if !cfg.include_tools.is_empty() && !cfg.include_tools.contains(&remote_name) {
                    return None;
                }
                if cfg.exclude_tools.contains(&remote_name) {
                    return None;
                }
                Some(Arc::new(self.tool_for(&cfg, remote_name, t)) as Arc<dyn Tool>)
            })
            .collect();
        lock(&self.status).tools = tools.len();
        tools
    }

    fn tool_for(self: &Arc<Self>, cfg: &McpServer, remote_name: String, t: &Value) -> McpTool {
        let mut parameters = t.get("inputSchema").cloned().unwrap_or(Value::Null);
        match parameters.as_object_mut() {
            Some(o) if !o.is_empty() => {
                o.entry("type").or_insert_with(|| json!("object"));
                if o.get("type") == Some(&json!("object")) {
                    o.entry("properties").or_insert_with(|| json!({}));
                }
            }
            _ => parameters = json!({"type": "object", "properties": {}}),
        }
        let annotations = t.get("annotations").filter(|a| !a.is_null()).cloned();
        let trusted_read_only = cfg.trust_annotations
            && annotations
                .as_ref()
                .and_then(|a| a["readOnlyHint"].as_bool())
                == Some(true);
        let approval = cfg
            .approval
            .get(&remote_name)
            .copied()
            .or(trusted_read_only.then_some(ApprovalClass::ReadOnly));
        McpTool {
            spec: ToolSpec {
                name: public_name(&self.name, &remote_name),
                description: t["description"].as_str().unwrap_or("").to_owned(),
                parameters,
                approval,
                source: ToolSource::Mcp {
                    server: self.name.clone(),
                    remote_name: remote_name.clone(),
                },
                hidden: false,
                deferrable: false,
                annotations,
            },
            title: t["title"]
                .as_str()
                .or_else(|| t["annotations"]["title"].as_str())
                .map(str::to_owned),
            output_schema: t.get("outputSchema").filter(|s| s.is_object()).cloned(),
            remote_name,
            server: self.clone(),
        }
    }

    /// Publishes the current tools as this server's registry source (when publishing).
    pub fn publish_tools(self: &Arc<Self>) {
        if self.publish.load(Ordering::SeqCst) && !self.retired.load(Ordering::SeqCst) {
            let tools = self.tools();
            self.registry.apply(Change {
                sources: vec![(SourceKey::Mcp(self.name.clone()), Some(tools))],
                approval_overrides: None,
            });
        }
    }

    pub(super) fn set_state(&self, state: State, error: Option<String>) {
        let mut s = lock(&self.status);
        s.state = state;
        if error.is_some() {
            s.last_error = error;
        }
    }

    async fn refresh_tools(self: &Arc<Self>, peer: &Peer<RoleClient>) -> anyhow::Result<()> {
        let tools = peer.list_all_tools().await?;
        let tools: Vec<Value> = tools
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect();
        *lock(&self.remote_tools) = tools;
        self.publish_tools();
        Ok(())
    }
}

/// The supervisor: one task per server, owning its connection.
async fn supervise(server: Arc<Server>, mut control: mpsc::UnboundedReceiver<Control>) {
    let mut first = true;
    loop {
        server.set_state(State::Connecting, None);
        let (notice_tx, mut notices) = mpsc::unbounded_channel();
        let root = match &server.config().cwd {
            Some(cwd) => super::client::file_uri(cwd),
            None => server.root.clone(),
        };
        let client = Client::new(server.progress.clone(), notice_tx, root);
        let attempt = tokio::select! {
            r = connect_and_list(&server, client) => Some(r),
            c = control.recv() => match c {
                Some(Control::Reconnect) => None,
                Some(Control::Stop) | None => return,
            },
        };
        let Some(result) = attempt else { continue };
        match result {
            Ok(conn) => {
                if !first {
                    server.restarts.fetch_add(1, Ordering::Relaxed);
                }
                first = false;
                server.consecutive_failures.store(0, Ordering::Relaxed);
                server.first_attempt.send_replace(true);
                let outcome = serve_connection(&server, conn, &mut control, &mut notices).await;
                *lock(&server.link) = None;
                match outcome {
                    Ended::Stop => return,
                    Ended::Reconnect => continue,
                    Ended::Closed(reason) => {
                        tracing::warn!(server = %server.name, %reason, "MCP server connection lost; reconnecting");
                        server.set_state(State::Connecting, Some(reason));
                        server.consecutive_failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(e) => {
                // Waiting for sign-in is not a failure to back off from: no retries until
                // `mcp.login` (or a reload) reconnects.
                if let Some(needed) = server.runtime.oauth.needed_in(&server.name, &e) {
                    tracing::warn!(server = %server.name, "MCP server needs sign-in");
                    server.set_state(State::AuthRequired, Some(needed.hint));
                    first = false;
                    server.first_attempt.send_replace(true);
                    match control.recv().await {
                        Some(Control::Reconnect) => continue,
                        Some(Control::Stop) | None => return,
                    }
                }
                let message = format!("{e:#}");
                tracing::warn!(server = %server.name, error = %message, "MCP server failed to connect");
                server.consecutive_failures.fetch_add(1, Ordering::Relaxed);
                server.set_state(State::Failed, Some(message));
                first = false;
                server.first_attempt.send_replace(true);
            }
        }
        // Back off (or wait out an open circuit), unless a call or a command wakes us.
        let failures = server.consecutive_failures.load(Ordering::Relaxed);
        if failures == BREAKER_THRESHOLD {
            server.circuit_opens.fetch_add(1, Ordering::Relaxed);
        }
        let wait = if failures >= BREAKER_THRESHOLD {
            server.set_state(State::CircuitOpen, None);
            BREAKER_COOLDOWN
        } else {
            backoff(failures)
        };
        let woken_by_use = failures < BREAKER_THRESHOLD;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = server.wake.notified(), if woken_by_use => {}
            c = control.recv() => match c {
                Some(Control::Reconnect) => {}
                Some(Control::Stop) | None => return,
            },
        }
    }
}

fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE
        .saturating_mul(1 << failures.min(10))
        .min(BACKOFF_MAX);
    // Full jitter in [exp/2, exp] so restarted servers do not reconnect in lockstep.
    exp / 2 + exp.mul_f64(fastrand::f64() / 2.0)
}

async fn connect_and_list(server: &Arc<Server>, client: Client) -> anyhow::Result<Connection> {
    let cfg = server.config();
    let conn = launcher::connect(&server.name, &cfg, client, &server.runtime).await?;
    let peer = conn.service.peer().clone();
    tokio::time::timeout(
        Duration::from_millis(cfg.startup_timeout_ms),
        server.refresh_tools(&peer),
    )
    .await
    .map_err(|_| anyhow::anyhow!("tools/list did not answer within startup_timeout_ms"))??;
    {
        let mut s = lock(&server.status);
        s.connected_since = Some(now_ms());
        s.state = State::Ready;
        s.last_error = None;
    }
    *lock(&server.link) = Some(Link {
        peer,
        direct: conn.direct.clone(),
    });
    Ok(conn)
}

enum Ended {
    Stop,
    Reconnect,
    Closed(String),
}

async fn serve_connection(
    server: &Arc<Server>,
    conn: Connection,
    control: &mut mpsc::UnboundedReceiver<Control>,
    notices: &mut mpsc::UnboundedReceiver<Notice>,
) -> Ended {
    let Connection { service, group, .. } = conn;
    let peer = service.peer().clone();
    let cancel = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let ended = loop {
        tokio::select! {
            quit = &mut waiting => break Ended::Closed(format!("the server closed the connection ({quit:?})")),
            c = control.recv() => match c {
                Some(Control::Reconnect) => break Ended::Reconnect,
                Some(Control::Stop) | None => break Ended::Stop,
            },
            Some(Notice::ToolListChanged) = notices.recv() => {
                // Coalesce a burst of list_changed into one refresh; refreshes never overlap
                // because this loop runs them one at a time.
                while notices.try_recv().is_ok() {}
                if let Err(e) = server.refresh_tools(&peer).await {
                    tracing::warn!(server = %server.name, error = %e, "refreshing tools after list_changed failed");
                }
            }
        }
    };
    if !matches!(ended, Ended::Closed(_)) {
        cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
    }
    if let Some(g) = group {
        g.terminate(KILL_GRACE).await;
    }
    ended
}
