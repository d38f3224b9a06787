//! The JSON-RPC server: listeners, framing, methods, subscriptions, OpenRPC.
//!
//! Architecture Invariant: the only module that knows jsonrpsee, and no jsonrpsee type
//! leaks out of it; handlers convert between `protocol` types and the host. The envelope,
//! the framings and the method tables are our own; of jsonrpsee this module uses the
//! error object types, the HTTP request/body types, the WebSocket upgrade check and the
//! stop handle that ends the server.

mod connection;
mod envelope;
mod framing;
mod head_timeout;
mod http;
mod listener;
mod methods;
mod openrpc;
mod ops;
mod peer;
mod subscription;
mod websocket;

use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::server::{stop_channel, ServerHandle, StopHandle};

use crate::host::Host;

pub use listener::Listeners;

/// Open connections at most, over all listeners and framings; more are closed at accept.
const MAX_CONNECTIONS: usize = 4096;

/// How long a started frame (a line, HTTP headers, an HTTP body) may take to arrive in full.
/// Idle time between frames is not limited.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// `FRAME_TIMEOUT`, unless `TOOLHOST_FRAME_TIMEOUT_MS` sets it (tests use a short one).
fn frame_timeout() -> Duration {
    std::env::var("TOOLHOST_FRAME_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(FRAME_TIMEOUT, Duration::from_millis)
}

/// What every connection needs, shared.
pub(crate) struct Shared {
    host: Host,
    /// Plain methods, run directly by the connection.
    plain: std::collections::HashMap<&'static str, methods::Plain>,
    /// Subscription methods, run by the connection too.
    subscriptions: std::collections::HashMap<&'static str, subscription::Subscription>,
    /// Unsubscribe methods, to the subscribe method they belong to.
    unsubscribes: std::collections::HashMap<&'static str, &'static str>,
    stop: StopHandle,
    max_request_bytes: usize,
    frame_timeout: Duration,
    /// `/mcp`: the MCP facade over streamable HTTP.
    mcp: crate::facade::Endpoint,
    /// The sessions host-started peers created, the only ones they may use (see `peer`).
    started_sessions: peer::StartedSessions,
}

/// A running server: stop accepting, then wait for connections to drain.
pub struct RunningServer {
    handle: ServerHandle,
    accept: tokio_util::sync::CancellationToken,
    socket_to_remove: Option<listener::OwnedSocket>,
}

impl RunningServer {
    /// Stops accepting connections and removes the socket file we created.
    pub fn stop_accepting(&self) {
        self.accept.cancel();
        if let Some(s) = &self.socket_to_remove {
            s.remove();
        }
    }

    /// Tells open connections to close and waits for them at most `grace`.
    pub async fn stopped(self, grace: Duration) {
        let _ = self.handle.stop();
        if tokio::time::timeout(grace, self.handle.stopped())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the shutdown grace; closing anyway");
        }
    }
}

/// Starts serving on `listeners`; returns at once.
pub fn start(host: Host, listeners: Listeners) -> anyhow::Result<RunningServer> {
    let cfg = host.config();
    let max_request = cfg.limits.max_request_bytes;
    let methods::Methods {
        plain,
        subscriptions,
        unsubscribes,
    } = methods::methods()?;
    let (stop, handle) = stop_channel();
    let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| Shared {
        host: host.clone(),
        plain,
        subscriptions,
        unsubscribes,
        stop,
        max_request_bytes: max_request,
        frame_timeout: frame_timeout(),
        mcp: crate::facade::Endpoint::new(in_process(weak.clone()), host.shutdown_token().clone()),
        started_sessions: peer::StartedSessions::default(),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let accept = host.shutdown_token().child_token();

    let Listeners {
        unix, owned, tcp, ..
    } = listeners;
    {
        let (shared, accept, slots) = (shared.clone(), accept.clone(), slots.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = unix.accept() => match r {
                        Ok((s, _)) => s,
                        Err(e) => { tracing::warn!(%e, "accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue }
                    },
                    _ = accept.cancelled() => break,
                };
                let Some(slot) = take_slot(&slots) else {
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    framing::serve_unix(stream, shared).await;
                    release(slot);
                });
            }
        });
    }
    if let Some((tcp, token)) = tcp {
        let token: Arc<str> = token.into();
        let (shared, accept, slots) = (shared.clone(), accept.clone(), slots.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok((s, _)) => s,
                        Err(e) => { tracing::warn!(%e, "tcp accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue }
                    },
                    _ = accept.cancelled() => break,
                };
                let _ = stream.set_nodelay(true);
                let Some(slot) = take_slot(&slots) else {
                    continue;
                };
                let (shared, token) = (shared.clone(), token.clone());
                tokio::spawn(async move {
                    http::serve_http(stream, shared, Some(token), None).await;
                    release(slot);
                });
            }
        });
    }
    Ok(RunningServer {
        handle,
        accept,
        socket_to_remove: owned,
    })
}

/// Opens a connection to this server without a socket file: one end of a socket pair,
/// whose other end is served like any accepted connection (the MCP facade's client).
fn in_process(shared: std::sync::Weak<Shared>) -> crate::facade::Connect {
    Arc::new(move || {
        let shared = shared
            .upgrade()
            .ok_or_else(|| std::io::Error::other("the server has stopped"))?;
        let (ours, theirs) = tokio::net::UnixStream::pair()?;
        tokio::spawn(framing::serve_unix(theirs, shared));
        Ok(ours)
    })
}

/// A connection slot, or `None` (and a warning) when all are taken: the connection is
/// closed at once rather than queued, and the slot comes back when a connection ends.
fn take_slot(slots: &Arc<tokio::sync::Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let slot = slots.clone().try_acquire_owned().ok();
    if slot.is_none() {
        tracing::warn!("{MAX_CONNECTIONS} connections are open; refusing a new one");
    }
    slot
}

/// Gives a connection slot back; when it was the last connection, hands the heap's free
/// memory back to the system (at most once a second). glibc otherwise keeps freed memory
/// in its arenas: measured with tests/rpc_edges.rs `memory_comes_back_after_clients_leave`,
/// RSS stayed at the peak after 2,000 connections had all left.
fn release(slot: tokio::sync::OwnedSemaphorePermit) {
    let slots = slot.semaphore().clone();
    drop(slot);
    if slots.available_permits() == MAX_CONNECTIONS {
        trim_heap();
    }
}

/// Gives freed heap back to the system (at most once a second) after the last client leaves.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if LAST.swap(now, Ordering::Relaxed) == now {
        return;
    }
    tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim only walks glibc's own heap under its own locks.
        unsafe { nix::libc::malloc_trim(0) };
    });
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}
