//! When a server's process runs at all (proto-docs/config.md, lifecycle).
//!
//! - **Lazy start** (`"start": "lazy"`): a server whose listing was kept from its last run
//!   (`list_cache.rs`) is not started with the daemon; its tools are listed from that
//!   listing and it is [`Parked::NotStarted`] until its first request. One with no kept
//!   listing is started to learn its tools, like an eager one.
//! - **Idle stop** (`"idle_stop_s"`): a connected server without a request for that long,
//!   and with no resource subscription open, is stopped (its process group terminated as on
//!   a retire) and [`Parked::Idle`], its tools still listed.
//! - **Waking**: a request that finds the server parked turns it to
//!   [`Phase::Waking`] and waits for the supervisor's attempt under its own deadline.
//!   The turn and the idle verdict are both taken under the state's lock, so a request
//!   either counts as a use before the verdict (no stop) or finds the server parked (and
//!   wakes it): never a stop under a request that was already let through.
//! - **Bounded start-ups**: at most [`STARTUP_SLOTS`] start-ups run at once, daemon-wide.
//!
//! There is no timer per request: a request only counts itself in and out ([`InUse`]) and
//! notes the instant; the connection's one idle timer, when it fires, is re-armed from the
//! last use if that was too recent.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Link, Listing, Phase, Server, ServerState};
use crate::lock;
use crate::protocol::McpToolsFrom;
use crate::registry::ToolError;

/// Start-ups (spawn, initialise, first listings) under way at once across the daemon: enough
/// that servers start in parallel and one hanging in `initialize` holds up none of the
/// others, few enough that a config of a hundred servers does not fork a hundred runtimes
/// at once. The slots are taken in order of asking.
pub const STARTUP_SLOTS: usize = 8;

/// Why a server has no process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// A lazy server not started yet in this run, listed from its last run.
    NotStarted,
    /// Stopped after `idle_stop_s` without a request.
    Idle,
}

/// One request to a server (a call, a prompt, a resource read, a completion, a
/// subscription being opened), from its start to its end: while any is held the server is
/// not idle, and its end is the server's last use.
pub struct InUse(Arc<Server>);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.state.send_if_modified(|s| {
            s.uses -= 1;
            s.last_use = Some(Instant::now());
            false
        });
    }
}

impl ServerState {
    /// The last use in ms since the Unix epoch, for `mcp.status`.
    pub(super) fn last_used_ms(&self) -> Option<u64> {
        let ago = self.last_use?.elapsed();
        let ago = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
        Some(crate::now_ms().saturating_sub(ago))
    }

    /// Where the listed tools come from, for `mcp.status`.
    pub(super) fn tools_from(&self) -> Option<McpToolsFrom> {
        if self.listing.tools.is_empty() {
            None
        } else if matches!(self.phase, Phase::Ready { .. }) {
            Some(McpToolsFrom::Live)
        } else if self.listing.live {
            Some(McpToolsFrom::LastListing)
        } else {
            Some(McpToolsFrom::Cache)
        }
    }
}

impl Server {
    /// Begins a request: counts it as a use, wakes the server if it is parked and waits for
    /// the attempt that follows (the caller bounds the wait), then gives the live
    /// connection, or the `unavailable` answer a request always got.
    pub(in crate::mcp) async fn begin_use(self: &Arc<Self>) -> Result<(InUse, Link), ToolError> {
        let mut starting = false;
        self.state.send_if_modified(|s| {
            // Counted under the state's lock: see the module comment.
            s.uses += 1;
            s.last_use = Some(Instant::now());
            match s.phase {
                Phase::Parked(_) => {
                    tracing::info!(server = %self.name, "starting the MCP server for a request");
                    s.phase = Phase::Waking;
                    starting = true;
                    true
                }
                Phase::Waking => {
                    starting = true;
                    false
                }
                _ => false,
            }
        });
        let in_use = InUse(self.clone());
        if starting {
            let mut state = self.state.subscribe();
            let settled = state.wait_for(|s| !matches!(s.phase, Phase::Waking)).await;
            match settled.as_deref().map(|s| &s.phase) {
                Err(_) | Ok(Phase::Stopped) => return Err(self.unavailable("was removed")),
                Ok(Phase::Backoff { error, .. }) => {
                    return Err(self.unavailable(format_args!("failed to start: {error}")))
                }
                Ok(_) => {}
            }
        }
        Ok((in_use, self.link_for_call()?))
    }

    /// Parks the connected server if it has had no request for `after` (counting from
    /// `since`, its connection, when it has had none since): `None`. Otherwise the instant
    /// to look again.
    pub(super) fn park_if_idle(&self, after: Duration, since: Instant) -> Option<Instant> {
        // Read outside the state's lock; a subscription is opened under an `InUse`.
        let subscribed = lock(&self.runtime.surface.subscribers)
            .keys()
            .any(|(server, _)| *server == self.name);
        let mut next = None;
        self.state.send_if_modified(|s| {
            let last = s.last_use.map_or(since, |at| at.max(since));
            if subscribed || s.uses > 0 {
                next = Some(Instant::now() + after);
            } else if last.elapsed() < after {
                next = Some(last + after);
            } else if matches!(s.phase, Phase::Ready { .. }) {
                s.phase = Phase::Parked(Parked::Idle);
                return true;
            } else {
                next = Some(Instant::now() + after);
            }
            false
        });
        next
    }

    /// Takes up the listing kept from the server's last run, if there is one for its
    /// launch config: the server is then [`Parked::NotStarted`] with those tools published.
    pub(super) fn listed_from_cache(self: &Arc<Self>) -> bool {
        let cfg = self.config();
        let Some(kept) = self.runtime.lists.load(&self.name, &cfg) else {
            return false;
        };
        self.state.send_if_modified(|s| {
            s.listing = Listing {
                tools: kept.tools.into(),
                live: false,
            };
            false
        });
        if let Some(surface) = kept.surface {
            self.runtime.surface.listed(&self.name, surface);
        }
        self.publish_tools();
        // Last: a reload collecting the tools waits for the state to leave `Starting`, and
        // a frontend seeing `not_started` finds the tools listed.
        self.enter(Phase::Parked(Parked::NotStarted));
        true
    }

    /// Keeps a listing the server just gave: as the one served, and for its next run.
    pub(super) fn keep_listing(&self, tools: Vec<rmcp::model::Tool>) {
        if self.keeps_listing {
            self.runtime
                .lists
                .store_tools(&self.name, &self.config(), &tools);
        }
        self.state.send_if_modified(|s| {
            s.listing = Listing {
                tools: tools.into(),
                live: true,
            };
            false
        });
    }

    /// Whether the server's listing names the tool `remote` (its own name for it); `None`
    /// while it has no listing to tell by.
    pub(in crate::mcp) fn lists_tool(&self, remote: &str) -> Option<bool> {
        let tools = self.listed_tools();
        (!tools.is_empty()).then(|| tools.iter().any(|t| t.name == remote))
    }
}

impl Server {
    /// One of the daemon's start-up slots, waited for in order when all are taken (said in
    /// the log, so an operator sees why a server is slow to come up).
    pub(super) async fn startup_slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let slots = &self.runtime.startups;
        if let Ok(slot) = slots.try_acquire() {
            return Some(slot);
        }
        tracing::info!(server = %self.name, "waiting for a start-up slot: {STARTUP_SLOTS} MCP servers are starting");
        // Never closed, so never an error.
        slots.acquire().await.ok()
    }
}

/// Waits, parked, for a request to wake the server: `false` if it is retired first.
pub(super) async fn parked(server: &Server) -> bool {
    let mut state = server.state.subscribe();
    tokio::select! {
        woken = state.wait_for(|s| matches!(s.phase, Phase::Waking)) => woken.is_ok(),
        _ = server.stop.cancelled() => false,
    }
}
