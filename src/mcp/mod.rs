//! MCP servers as tool sources, on rmcp's client side. rmcp is known here and in the
//! facade (`facade/`, its server side), nowhere else.
//!
//! [`McpManager`] owns one [`server::Server`] per configured server; each runs a supervisor
//! task that connects (stdio child in its own process group, or streamable HTTP), lists
//! tools, follows `tools/list_changed`, reconnects with backoff and opens a circuit after
//! repeated failures. Tools are named `mcp_<server>_<tool>` ([`naming`]). Beyond staying
//! connected, a server's process has a lifecycle (`server/lifecycle.rs`): a lazy one starts
//! at its first request, listed until then from the listing kept from its last run
//! ([`list_cache`]); an idle one stops after `idle_stop_s`; and start-ups are bounded.

mod auth;
mod client;
mod era;
mod held;
mod instances;
mod launcher;
mod list_cache;
mod listen;
mod listing;
pub(crate) mod mrtr;
pub mod naming;
mod origin;
mod relay;
mod server;
pub mod skills;
mod sse;
mod stdio;
pub mod surface;
mod tool;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;

use crate::config::McpServer;
use crate::error::UnknownServer;
use crate::protocol::{McpCounts, McpServerStatus};
use crate::registry::{Registry, SourceKey, SourceUpdate};

pub use server::{Server, State};

/// What one daemon's servers share: its processes (a stdio server is one of its children)
/// and its OAuth token store.
#[derive(Clone)]
pub struct Runtime {
    pub processes: crate::process::Processes,
    pub oauth: Arc<auth::OAuth>,
    /// Every server's prompts, resources and templates, and their live catalog.
    pub surface: Arc<surface::Hub>,
    /// Every server's last tool listing, kept across restarts for lazy servers.
    pub lists: Arc<list_cache::ListCache>,
    /// Start-ups (spawn, initialise, list) under way at once, across all servers
    /// ([`server::STARTUP_SLOTS`]).
    pub startups: Arc<tokio::sync::Semaphore>,
    /// Prompt and resource requests of `initialize`-era servers held while they ask.
    pub held: Arc<held::Held>,
}

/// The set of configured servers.
pub struct McpManager {
    servers: Mutex<IndexMap<String, Arc<Server>>>,
    registry: Registry,
    tracker: tokio_util::task::TaskTracker,
    /// The host workspace: where servers run unless told otherwise.
    workspace: std::path::PathBuf,
    runtime: Runtime,
}

impl McpManager {
    /// The servers of the daemon whose workspace and data dir are given, children of
    /// `processes`; their OAuth tokens live in `<data_dir>/oauth`, their kept tool listings
    /// in `<data_dir>/mcp-tools`.
    pub fn new(
        registry: Registry,
        tracker: tokio_util::task::TaskTracker,
        workspace: &std::path::Path,
        data_dir: &std::path::Path,
        processes: crate::process::Processes,
    ) -> Self {
        McpManager {
            servers: Mutex::default(),
            registry,
            tracker,
            workspace: workspace.to_path_buf(),
            runtime: Runtime {
                processes,
                oauth: Arc::new(auth::OAuth::new(data_dir)),
                surface: Arc::default(),
                lists: Arc::new(list_cache::ListCache::new(data_dir)),
                startups: Arc::new(tokio::sync::Semaphore::new(server::STARTUP_SLOTS)),
                held: Arc::default(),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IndexMap<String, Arc<Server>>> {
        crate::lock(&self.servers)
    }

    /// Starts a server. With `publish` its tools go to the registry as soon as it connects
    /// (daemon start); without, the caller collects them for a single reload swap.
    pub fn start(&self, name: &str, config: McpServer, publish: bool) -> Arc<Server> {
        self.runtime.surface.started(name, config.enabled);
        let server = Server::spawn(
            name,
            config,
            self.registry.clone(),
            publish,
            &self.tracker,
            &self.workspace,
            self.runtime.clone(),
        );
        if let Some(old) = self.lock().insert(name.to_owned(), server.clone()) {
            old.retire();
        }
        server
    }

    pub fn get(&self, name: &str) -> Option<Arc<Server>> {
        self.lock().get(name).cloned()
    }

    /// Stops and forgets a server (its process group is killed by its supervisor).
    pub fn remove(&self, name: &str) -> Option<Arc<Server>> {
        let s = self.lock().shift_remove(name);
        if let Some(s) = &s {
            s.retire();
            self.runtime.surface.removed(name);
        }
        s
    }

    /// Reconnects one server, or all.
    pub fn reconnect(&self, name: Option<&str>) -> usize {
        let servers: Vec<Arc<Server>> = match name {
            Some(n) => self.get(n).into_iter().collect(),
            None => self.lock().values().cloned().collect(),
        };
        for s in &servers {
            s.reconnect();
            if let Some(set) = s.instances() {
                set.reconnect();
            }
        }
        servers.len()
    }

    pub fn status(&self, name: Option<&str>) -> Vec<McpServerStatus> {
        let snapshot = self.registry.snapshot();
        let surface = self.surface();
        self.lock()
            .values()
            .filter(|s| name.is_none_or(|n| n == s.name()))
            .map(|s| {
                let key = SourceKey::Mcp(s.name().to_owned());
                let collisions = snapshot
                    .collisions()
                    .iter()
                    .filter(|c| c.dropped == key)
                    .map(|c| c.name.clone())
                    .collect();
                let mut status = s.status(collisions);
                status.resource_clashes =
                    surface.clashes.get(s.name()).cloned().unwrap_or_default();
                status
            })
            .collect()
    }

    pub fn counts(&self) -> McpCounts {
        let mut c = McpCounts {
            ready: 0,
            failed: 0,
            connecting: 0,
        };
        for s in self.lock().values() {
            match s.state() {
                State::Ready => c.ready += 1,
                State::Failed | State::CircuitOpen | State::AuthRequired => c.failed += 1,
                // Retrying after a failure counts as failed, so health does not flap to
                // `ok` between attempts.
                State::Connecting if s.failing() => c.failed += 1,
                State::Connecting => c.connecting += 1,
                // Parked on purpose (lazy, or stopped idle): neither up nor failing.
                State::Disabled | State::NotStarted | State::StoppedIdle => {}
            }
        }
        c
    }

    /// `mcp.login`: starts signing in to an HTTP server; returns the URL for the browser.
    pub async fn login(&self, name: &str, redirect_uri: &str) -> anyhow::Result<Option<String>> {
        let server = self.known(name)?;
        let url = self
            .runtime
            .oauth
            .begin_login(name, &server.config(), redirect_uri)
            .await?;
        if url.is_none() {
            server.reconnect();
        }
        Ok(url)
    }

    /// `mcp.login` with a callback URL: finishes a sign-in and reconnects the server with its tokens.
    pub async fn login_callback(&self, name: &str, callback_url: &str) -> anyhow::Result<()> {
        let server = self.known(name)?;
        self.runtime
            .oauth
            .finish_login(name, &server.config(), callback_url)
            .await?;
        server.reconnect();
        Ok(())
    }

    /// `mcp.logout`: forgets a server's tokens and, if it had any, reconnects it (so it
    /// shows `auth_required`). Whether there were tokens.
    pub fn logout(&self, name: &str) -> anyhow::Result<bool> {
        let server = self.known(name)?;
        let had = self.runtime.oauth.logout(name)?;
        if had {
            server.reconnect();
        }
        Ok(had)
    }

    /// The live server `name`.
    pub fn known(&self, name: &str) -> Result<Arc<Server>, UnknownServer> {
        self.get(name).ok_or_else(|| UnknownServer::live(name))
    }

    /// The session `id` was deleted: its instances of per-session servers stop.
    pub fn session_ended(&self, id: &str) {
        for s in self.lock().values() {
            if let Some(set) = s.instances() {
                set.session_ended(id);
            }
        }
    }

    /// Stops every server; the caller waits for their supervisors through the task tracker.
    pub fn stop_all(&self) {
        for s in self.lock().values() {
            s.retire();
        }
    }

    /// Waits for the first connection attempt of `servers`, each bounded by its
    /// `startup_timeout_ms` and by `wait`, and returns their tools for one registry swap,
    /// with whether each one's first attempt finished in time. A server that did not (one
    /// that hangs in its handshake) must not hold the swap: it publishes its tools itself
    /// once the caller calls [`Server::start_publishing`] and [`Server::publish_tools`].
    pub async fn collect_tools(
        servers: &[Arc<Server>],
        wait: Duration,
    ) -> (Vec<SourceUpdate>, Vec<bool>) {
        let waits = servers.iter().map(|s| {
            let limit =
                Duration::from_millis(s.config().startup_timeout_ms.saturating_add(1000)).min(wait);
            async move {
                tokio::time::timeout(limit, s.first_attempt_done())
                    .await
                    .is_ok()
            }
        });
        let joined = futures::future::join_all(waits).await;
        let tools = servers
            .iter()
            .map(|s| (SourceKey::Mcp(s.name().to_owned()), Some(s.tools())))
            .collect();
        (tools, joined)
    }
}
