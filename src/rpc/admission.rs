//! Which connections the server takes and for how long they may stay silent
//! (proto-docs/transport.md, "Connection limits").
//!
//! Each listener has its own budget of open connections, so a flood on one (TCP, reachable
//! by anyone who can connect) cannot take the slots of the other (the local Unix socket).
//! A new connection must begin in time: send its first byte (Unix) or pass the bearer check
//! (TCP) within `listen.handshake_timeout_ms`.
//!
//! A connection is *silent* until it has made its first request (Unix: a complete frame;
//! TCP: one that passed the bearer check). Silent connections are what an attacker can
//! hold at no cost, so they give way: when a listener's slots are all taken, a newcomer
//! pushes out the connection silent longest (past [`SILENT_GRACE`]) and waits for its slot,
//! rather than being refused; on TCP, silent connections also share a much smaller budget,
//! in which a new one pushes out the oldest. A client that speaks at once therefore gets
//! in however many idle connections others hold. Accepted connections waiting for a slot
//! are at most [`LINE`]; past that the accept loop waits, and new clients wait in the
//! kernel's listen backlog (a delay, not a refusal).

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

/// How long a connection may be silent before a newcomer may push it out: an honest
/// client's first request is read well within it, even in a burst.
const SILENT_GRACE: Duration = Duration::from_secs(1);

/// Accepted connections that may wait for a slot at once (each holds a descriptor).
const LINE: usize = 256;

/// How often a connection waiting for a slot pushes out another silent one.
const RETRY: Duration = Duration::from_millis(100);

/// The open connections of one listener, at most `max`.
pub(super) struct Budget {
    slots: Arc<Semaphore>,
    /// The part of `slots` processes the host started may hold ([`Ticket::admit_peer`]).
    started: Arc<Semaphore>,
    /// Accepted connections waiting for a slot ([`LINE`]).
    line: Arc<Semaphore>,
    /// This listener's connections that have not yet spoken.
    silent: Arc<Silent>,
    /// How long a connection that has not spoken may stay.
    silent_for: Duration,
    max: usize,
    listener: &'static str,
    handshake: Duration,
    /// Connections open over all listeners (shared by every budget).
    open: Arc<AtomicUsize>,
}

impl Budget {
    /// `max` connections; at most `max_silent` of them silent at once (TCP's
    /// `listen.max_tcp_unauthenticated`; `usize::MAX` on the Unix socket), each for at most
    /// `silent_for`.
    pub(super) fn new(
        listener: &'static str,
        max: usize,
        max_silent: usize,
        handshake: Duration,
        silent_for: Duration,
        open: Arc<AtomicUsize>,
    ) -> Arc<Budget> {
        Arc::new(Budget {
            slots: Arc::new(Semaphore::new(max)),
            started: Arc::new(Semaphore::new((max / STARTED_SHARE).max(1))),
            line: Arc::new(Semaphore::new(LINE)),
            silent: Silent::new(max_silent),
            silent_for,
            max,
            listener,
            handshake,
            open,
        })
    }

    /// A place in the line of accepted connections, waited for before the next accept.
    pub(super) async fn place(&self) -> Option<OwnedSemaphorePermit> {
        self.line.clone().acquire_owned().await.ok()
    }

    /// A slot for a connection accepted with `place`: at once while one is free; else the
    /// connection silent longest is pushed out (one per [`RETRY`]) and this one waits for
    /// a slot, at most its handshake time, after which it is closed (`None`).
    pub(super) async fn admit(&self, place: OwnedSemaphorePermit) -> Option<Ticket> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let wait = async {
                    loop {
                        self.silent.push_out_oldest(SILENT_GRACE);
                        match tokio::time::timeout(RETRY, self.slots.clone().acquire_owned()).await
                        {
                            Ok(slot) => return slot.ok(),
                            Err(_) => continue,
                        }
                    }
                };
                match tokio::time::timeout(self.handshake, wait).await {
                    Ok(Some(slot)) => slot,
                    _ => {
                        tracing::warn!(
                            "{} {} connections are open and none gave way; closing a new one",
                            self.max,
                            self.listener
                        );
                        return None;
                    }
                }
            }
        };
        drop(place);
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(Ticket(Arc::new(Slot {
            _slot: slot,
            started: self.started.clone(),
            started_slot: std::sync::OnceLock::new(),
            handshake: self.handshake,
            silent: self.silent.enter(self.silent_for),
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
    /// Its place among the silent connections, until it speaks.
    silent: Pending,
    open: Arc<AtomicUsize>,
}

impl Ticket {
    /// How long the connection may take to begin.
    pub(super) fn handshake(&self) -> Duration {
        self.0.handshake
    }

    /// The connection made its first request: it no longer gives way to newcomers.
    pub(super) fn spoke(&self) {
        self.0.silent.spoke();
    }

    /// Its place among the silent connections (TCP's bearer check marks it).
    pub(super) fn silent(&self) -> Pending {
        self.0.silent.clone()
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

/// A listener's connections that have not yet spoken, at most `max`, oldest first.
struct Silent {
    waiting: Mutex<VecDeque<(u64, Instant, CancellationToken)>>,
    max: usize,
    next: AtomicU64,
}

impl Silent {
    fn new(max: usize) -> Arc<Silent> {
        Arc::new(Silent {
            waiting: Mutex::new(VecDeque::new()),
            max,
            next: AtomicU64::new(0),
        })
    }

    /// Enters a new connection, pushing out the oldest silent one when the budget is full.
    fn enter(self: &Arc<Self>, within: Duration) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let pushed_out = CancellationToken::new();
        let mut waiting = lock(&self.waiting);
        if waiting.len() >= self.max {
            if let Some((_, _, oldest)) = waiting.pop_front() {
                tracing::debug!("{} connections are silent; closing the oldest", self.max);
                oldest.cancel();
            }
        }
        waiting.push_back((id, Instant::now(), pushed_out.clone()));
        Pending(Arc::new(Waiting {
            pool: self.clone(),
            id,
            pushed_out,
            spoke: CancellationToken::new(),
            deadline: Instant::now() + within,
        }))
    }

    /// Pushes out the connection silent longest, if it has been for `at_least`.
    fn push_out_oldest(&self, at_least: Duration) {
        let mut waiting = lock(&self.waiting);
        if waiting
            .front()
            .is_some_and(|(_, since, _)| since.elapsed() >= at_least)
        {
            if let Some((_, _, oldest)) = waiting.pop_front() {
                tracing::debug!(
                    "a new connection waits for a slot; closing the one silent longest"
                );
                oldest.cancel();
            }
        }
    }

    fn leave(&self, id: u64) {
        lock(&self.waiting).retain(|(i, _, _)| *i != id);
    }
}

/// A connection's place among the silent ones, until it speaks.
#[derive(Clone)]
pub(super) struct Pending(Arc<Waiting>);

struct Waiting {
    pool: Arc<Silent>,
    id: u64,
    pushed_out: CancellationToken,
    spoke: CancellationToken,
    deadline: Instant,
}

impl Pending {
    /// The connection made its first request (on TCP: one that passed the bearer check):
    /// it leaves the silent ones and its deadline no longer applies.
    pub(super) fn spoke(&self) {
        if !self.0.spoke.is_cancelled() {
            self.0.spoke.cancel();
            self.0.pool.leave(self.0.id);
        }
    }

    /// Resolves when the connection must be closed: pushed out by newer ones, or its
    /// deadline passed before it spoke. Never resolves once it has spoken.
    pub(super) async fn refused(&self) {
        let w = &self.0;
        tokio::select! {
            _ = w.spoke.cancelled() => std::future::pending().await,
            _ = w.pushed_out.cancelled() => {}
            _ = tokio::time::sleep_until(w.deadline) => {
                if w.spoke.is_cancelled() {
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
