//! Which connections the server takes and for how long they may stay silent
//! (proto-docs/transport.md, "Connection limits").
//!
//! Each listener has its own budget of open connections, so a flood on one (TCP, reachable
//! by anyone who can connect) cannot take the slots of the other (the local Unix socket).
//! A new connection must begin in time: send its first byte (Unix) or pass the bearer check
//! (TCP) within `listen.handshake_timeout_ms`. On TCP, connections that have not yet
//! authenticated also share a much smaller budget, in which a new connection pushes out the
//! oldest waiting one rather than being refused: an attacker holding idle connections then
//! cannot keep a client that authenticates at once from getting in.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::audit::Caller;
use crate::lock;

/// Processes the host started may hold one in this many of a listener's slots.
pub(super) const STARTED_SHARE: usize = 8;

/// The open connections of one listener, at most `max`.
pub(super) struct Budget {
    slots: Arc<Semaphore>,
    /// The part of `slots` processes the host started may hold ([`Ticket::admit_peer`]).
    started: Arc<Semaphore>,
    max: usize,
    listener: &'static str,
    handshake: Duration,
    /// Connections open over all listeners (shared by every budget).
    open: Arc<AtomicUsize>,
}

impl Budget {
    pub(super) fn new(
        listener: &'static str,
        max: usize,
        handshake: Duration,
        open: Arc<AtomicUsize>,
    ) -> Budget {
        Budget {
            slots: Arc::new(Semaphore::new(max)),
            started: Arc::new(Semaphore::new((max / STARTED_SHARE).max(1))),
            max,
            listener,
            handshake,
            open,
        }
    }

    /// A slot for a new connection, or `None` (and a warning) when all are taken: the
    /// connection is closed at once rather than queued.
    pub(super) fn admit(&self) -> Option<Ticket> {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            tracing::warn!(
                "{} {} connections are open; refusing a new one",
                self.max,
                self.listener
            );
            return None;
        };
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(Ticket(Arc::new(Slot {
            _slot: slot,
            started: self.started.clone(),
            started_slot: std::sync::OnceLock::new(),
            handshake: self.handshake,
            open: self.open.clone(),
        })))
    }
}

/// An admitted connection's slot, held for as long as the connection is open (by its
/// WebSocket task too, after an upgrade). Cheap to clone.
#[derive(Clone)]
pub(super) struct Ticket(Arc<Slot>);

struct Slot {
    _slot: OwnedSemaphorePermit,
    started: Arc<Semaphore>,
    /// Held while the peer is a process the host started.
    started_slot: std::sync::OnceLock<OwnedSemaphorePermit>,
    handshake: Duration,
    open: Arc<AtomicUsize>,
}

impl Ticket {
    /// How long the connection may take to begin.
    pub(super) fn handshake(&self) -> Duration {
        self.0.handshake
    }

    /// Whether the connection may stay, now that its peer is known: a process the host
    /// started (a sandboxed call's, an MCP server's: `peer.rs`) takes a slot of the
    /// listener's share for such peers, one [`STARTED_SHARE`]th of its budget, and is
    /// closed when that share is full. So however many connections a call opens and holds
    /// idle, the rest of the slots stay for the user's own clients (the CLI, frontends).
    pub(super) fn admit_peer(&self, host: &crate::host::Host, caller: Option<&Caller>) -> bool {
        if !super::peer::started_by_host(host, caller) {
            return true;
        }
        match self.0.started.clone().try_acquire_owned() {
            Ok(permit) => {
                let _ = self.0.started_slot.set(permit);
                true
            }
            Err(_) => {
                tracing::warn!("processes the host started hold their whole share of connections; closing a new one");
                false
            }
        }
    }
}

impl Drop for Slot {
    /// A connection's end is the end of a piece of work: its buffers go back to the system
    /// once the daemon is quiet ([`crate::trim`]), and at once when it was the last one.
    /// glibc otherwise keeps freed memory in its arenas: measured with
    /// tests/it/rpc_edges.rs `memory_comes_back_after_clients_leave`, RSS stayed at the peak
    /// after 2,000 connections had all left.
    fn drop(&mut self) {
        crate::trim::worked();
        if self.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            crate::trim::now();
        }
    }
}

/// TCP connections that have not yet passed the bearer check, at most `max`, oldest first.
pub(super) struct Unauthenticated {
    waiting: Mutex<VecDeque<(u64, CancellationToken)>>,
    max: usize,
    next: AtomicU64,
}

impl Unauthenticated {
    pub(super) fn new(max: usize) -> Arc<Unauthenticated> {
        Arc::new(Unauthenticated {
            waiting: Mutex::new(VecDeque::new()),
            max,
            next: AtomicU64::new(0),
        })
    }

    /// Enters a new connection, pushing out the oldest waiting one when the budget is full.
    pub(super) fn admit(self: &Arc<Self>, within: Duration) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let pushed_out = CancellationToken::new();
        let mut waiting = lock(&self.waiting);
        if waiting.len() >= self.max {
            if let Some((_, oldest)) = waiting.pop_front() {
                tracing::debug!(
                    "{} tcp connections are waiting to authenticate; closing the oldest",
                    self.max
                );
                oldest.cancel();
            }
        }
        waiting.push_back((id, pushed_out.clone()));
        Pending(Arc::new(Waiting {
            pool: self.clone(),
            id,
            pushed_out,
            authenticated: CancellationToken::new(),
            deadline: Instant::now() + within,
        }))
    }

    fn leave(&self, id: u64) {
        lock(&self.waiting).retain(|(i, _)| *i != id);
    }
}

/// A TCP connection's place among the unauthenticated ones, until it authenticates.
#[derive(Clone)]
pub(super) struct Pending(Arc<Waiting>);

struct Waiting {
    pool: Arc<Unauthenticated>,
    id: u64,
    pushed_out: CancellationToken,
    authenticated: CancellationToken,
    deadline: Instant,
}

impl Pending {
    /// A request passed the bearer check: the connection leaves the unauthenticated budget
    /// and its deadline no longer applies.
    pub(super) fn authenticated(&self) {
        if !self.0.authenticated.is_cancelled() {
            self.0.authenticated.cancel();
            self.0.pool.leave(self.0.id);
        }
    }

    /// Resolves when the connection must be closed: pushed out by newer ones, or its
    /// deadline passed before it authenticated. Never resolves once it has authenticated.
    pub(super) async fn refused(&self) {
        let w = &self.0;
        tokio::select! {
            _ = w.authenticated.cancelled() => std::future::pending().await,
            _ = w.pushed_out.cancelled() => {}
            _ = tokio::time::sleep_until(w.deadline) => {
                if w.authenticated.is_cancelled() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.pool.leave(self.id);
    }
}
