//! The stdio bridge's link to the daemon, which outlives the daemon: when the daemon goes
//! away (a restart, an upgrade, a crash), `toolhost mcp` keeps its stdio side open,
//! reconnects with backoff, restores its host session (same id, workspace, profile),
//! follows the host's changes and the resources its client subscribed to again, and then
//! tells its client that every list may have changed. Meanwhile a request waits for the
//! daemon, at most [`RECONNECT_WAIT`] (`toolhost mcp --reconnect-wait`), and then fails with a message naming every socket
//! tried; a call in flight when the daemon went away ends with a tool error saying it may
//! or may not have run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::{Changes, State};
use crate::client::Client;
use crate::lock;

/// How long a request waits for a daemon that went away to come back, unless `toolhost mcp
/// --reconnect-wait` says otherwise.
const RECONNECT_WAIT: Duration = Duration::from_secs(30);
/// How long a request waits for a daemon that never answered: it may be starting.
const FIRST_WAIT: Duration = Duration::from_secs(2);
/// The backoff between attempts to reach the daemon, doubling from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

pub(super) struct Upstream {
    /// Every socket to try, in order.
    sockets: Vec<PathBuf>,
    changes: Arc<Changes>,
    /// The live client; `None` while the daemon is away.
    live: watch::Sender<Option<Arc<Client>>>,
    /// Why the daemon cannot be reached (every path tried), while it cannot.
    why: Mutex<String>,
    /// Whether a daemon ever answered this bridge.
    reached: AtomicBool,
    /// How long a request waits for a daemon that went away.
    reconnect_wait: Duration,
    /// The daemon's `facade.tool_manifest` as `config.status` said at the last connect.
    tool_manifest: AtomicBool,
}

impl Upstream {
    /// Tries the daemon once; the link exists either way (a bridge without a daemon still
    /// answers its client, and [`Upstream::keep`] goes on trying). A request waits
    /// `reconnect_wait` (default [`RECONNECT_WAIT`]) for a daemon that went away.
    pub(super) async fn open(
        sockets: Vec<PathBuf>,
        changes: Arc<Changes>,
        reconnect_wait: Option<Duration>,
    ) -> Arc<Upstream> {
        let up = Arc::new(Upstream {
            sockets,
            changes,
            live: watch::Sender::new(None),
            why: Mutex::new(String::new()),
            reached: AtomicBool::new(false),
            reconnect_wait: reconnect_wait.unwrap_or(RECONNECT_WAIT),
            tool_manifest: AtomicBool::new(false),
        });
        match up.connect().await {
            Ok(c) => up.publish(c),
            Err(e) => {
                tracing::warn!(%e, "no toolhost daemon answers yet; trying again in the background");
                *lock(&up.why) = e;
            }
        }
        up
    }

    /// The live client, waiting (bounded) for the daemon to come back; else why not.
    pub(super) async fn client(&self) -> Result<Arc<Client>, String> {
        let wait = if self.reached.load(Ordering::Relaxed) {
            self.reconnect_wait
        } else {
            FIRST_WAIT
        };
        let mut rx = self.live.subscribe();
        // Not one whose connection closed already: [`Upstream::keep`] replaces it soon.
        let usable = |c: &Option<Arc<Client>>| c.as_ref().is_some_and(|c| !c.is_closed());
        let live = tokio::time::timeout(wait, rx.wait_for(usable)).await;
        match live
            .as_ref()
            .map(|l| l.as_ref().map(|c| c.as_ref().cloned()))
        {
            Ok(Ok(Some(c))) => Ok(c),
            _ => Err(self.unreachable()),
        }
    }

    /// Whether the daemon offered tool manifests when the bridge last connected.
    pub(super) fn tool_manifest(&self) -> bool {
        self.tool_manifest.load(Ordering::Relaxed)
    }

    /// The live client now, if there is one.
    pub(super) fn current(&self) -> Option<Arc<Client>> {
        self.live.borrow().clone()
    }

    /// Whether `client` is no longer the live one (the daemon went away under it).
    pub(super) fn lost(&self, client: &Arc<Client>) -> bool {
        client.is_closed()
            || !self
                .live
                .borrow()
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, client))
    }

    /// Why no daemon answers, for the client to show.
    pub(super) fn unreachable(&self) -> String {
        format!(
            "the toolhost daemon is not reachable ({}); start it with `toolhost serve` (or `systemctl --user start toolhost`), or name its socket with `toolhost mcp --socket PATH`",
            lock(&self.why)
        )
    }

    /// Keeps the link for as long as the bridge runs: whenever the daemon goes away,
    /// reconnects with backoff, restores `state`'s host session, and tells the client its
    /// lists may have changed.
    pub(super) async fn keep(self: Arc<Self>, state: Arc<State>) {
        let mut backoff = BACKOFF.0;
        loop {
            if let Some(c) = self.current() {
                c.closed().await;
                tracing::warn!("the toolhost daemon went away; reconnecting");
                self.live.send_replace(None);
                backoff = BACKOFF.0;
            }
            match self.connect().await {
                Ok(c) => {
                    state.restore(&c).await;
                    state.following.follow_again(&c).await;
                    self.publish(c);
                    self.changes.all_changed();
                    tracing::info!("reconnected to the toolhost daemon");
                }
                Err(e) => {
                    *lock(&self.why) = e;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF.1);
                }
            }
        }
    }

    fn publish(&self, client: Arc<Client>) {
        self.reached.store(true, Ordering::Relaxed);
        lock(&self.why).clear();
        self.live.send_replace(Some(client));
    }

    /// A client of a live daemon (one that answers `host.health`), following its changes,
    /// with its [`Upstream::tool_manifest`] switch.
    async fn connect(&self) -> Result<Arc<Client>, String> {
        let client = Client::connect_first(&self.sockets)
            .await
            .map_err(|e| e.to_string())?;
        // Health, the subscriptions and the switch together: one round trip before the
        // bridge serves.
        let (health, followed, config) = tokio::join!(
            client.health(),
            self.changes.follow(&client),
            client.config_status()
        );
        health.map_err(|e| e.to_string())?;
        followed.map_err(|e| e.to_string())?;
        // Without an answer the last one stands, as it did before.
        if let Ok(config) = config {
            self.tool_manifest
                .store(config.tool_manifest, Ordering::Relaxed);
        }
        Ok(Arc::new(client))
    }
}
