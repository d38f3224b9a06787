//! The JSON-RPC server: listeners, framing, methods, subscriptions, OpenRPC.
//!
//! Architecture Invariant: the only module that knows jsonrpsee, and no jsonrpsee type
//! leaks out of it; handlers convert between `protocol` types and the host. The envelope,
//! the framings and the method tables are our own; of jsonrpsee this module uses the
//! error object types, the HTTP request/body types, the WebSocket upgrade check and the
//! stop handle that ends the server.

/// The write half of a stream wrapper that only watches what is read (`head_timeout`,
/// `ws_limit`): every write goes straight to the wrapper's `io`.
macro_rules! writes_pass_through {
    ($wrapper:ident) => {
        impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<I> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }
        }
    };
}

mod admission;
mod connection;
mod envelope;
mod frame_budget;
mod framing;
mod head_timeout;
mod http;
mod listener;
mod methods;
mod openrpc;
mod ops;
mod peer;
mod subscription;
mod ui;
mod websocket;
mod ws_limit;

use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::server::{stop_channel, ServerHandle, StopHandle};

use crate::audit::Caller;
use crate::host::Host;

pub use listener::{tcp_token, Listeners};

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
    /// What requests still arriving may hold over all connections (`frame_budget`).
    frame_budget: Arc<frame_budget::FrameBudget>,
    frame_timeout: Duration,
    /// `/mcp`: the MCP facade over streamable HTTP.
    mcp: crate::facade::Endpoint,
    /// The sessions host-started peers created, the only ones they may use (see `peer`).
    started_sessions: peer::StartedSessions,
    /// `/ui`: the operator's page's login codes and page tokens.
    ui: Arc<crate::ui::Access>,
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
    let ui_access = Arc::new(crate::ui::Access::default());
    if let Some(addr) = listeners
        .tcp
        .as_ref()
        .and_then(|(l, _)| l.local_addr().ok())
    {
        ui_access.set_tcp(addr);
    }
    let methods::Methods {
        plain,
        subscriptions,
        unsubscribes,
    } = methods::methods(ui_access.clone())?;
    let (stop, handle) = stop_channel();
    let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| Shared {
        host: host.clone(),
        plain,
        subscriptions,
        unsubscribes,
        stop,
        max_request_bytes: max_request,
        frame_budget: frame_budget::FrameBudget::new(cfg.limits.request_buffer_budget()),
        frame_timeout: frame_timeout(),
        mcp: crate::facade::Endpoint::new(host.clone(), in_process(weak.clone())),
        started_sessions: peer::StartedSessions::default(),
        ui: ui_access,
    });
    shared.mcp.connect_early();
    let accept = host.shutdown_token().child_token();
    let handshake = Duration::from_millis(cfg.listen.handshake_timeout_ms);
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));

    let Listeners {
        unix, owned, tcp, ..
    } = listeners;
    {
        // A Unix connection that has not spoken goes by the time the framing's own limits
        // (first byte, then a first frame) would close it anyway.
        let budget = admission::Budget::new(
            "unix",
            cfg.listen.max_unix_connections,
            usize::MAX,
            handshake,
            handshake + shared.frame_timeout,
            open.clone(),
        );
        let (shared, accept) = (shared.clone(), accept.clone());
        tokio::spawn(async move {
            loop {
                let Some((stream, place)) = next(&budget, &accept, || unix.accept()).await else {
                    break;
                };
                let (budget, shared) = (budget.clone(), shared.clone());
                tokio::spawn(async move {
                    let Some(ticket) = budget.admit(place).await else {
                        return;
                    };
                    let silent = ticket.silent();
                    tokio::select! {
                        _ = framing::serve_unix(stream, shared, Some(ticket)) => {}
                        _ = silent.refused() => {
                            tracing::debug!("a unix connection that had not spoken gave way to a new one");
                        }
                    }
                });
            }
        });
    }
    if let Some((tcp, tokens)) = tcp {
        let budget = admission::Budget::new(
            "tcp",
            cfg.listen.max_tcp_connections,
            cfg.listen.max_tcp_unauthenticated,
            handshake,
            handshake,
            open,
        );
        let (shared, accept) = (shared.clone(), accept.clone());
        tokio::spawn(async move {
            loop {
                let Some((stream, place)) = next(&budget, &accept, || tcp.accept()).await else {
                    break;
                };
                let _ = stream.set_nodelay(true);
                let (budget, tokens, shared) = (budget.clone(), tokens.clone(), shared.clone());
                tokio::spawn(async move {
                    let Some(ticket) = budget.admit(place).await else {
                        return;
                    };
                    let pending = ticket.silent();
                    let bearer =
                        http::Bearer::new(tokens, shared.host.fleet().cloned(), pending.clone());
                    let serve = async move {
                        // The peer is looked up (a scan of /proc) once the connection sends
                        // something, so thousands of idle ones cost nothing; and while they
                        // wait, newer ones can push them out.
                        if stream.readable().await.is_err() {
                            return;
                        }
                        // A process on this host is held to the same peer rule as on the
                        // Unix socket (`peer.rs`): a token a sandboxed call read gives it
                        // nothing.
                        let caller = Caller::of_tcp(&stream).await;
                        if !ticket.admit_peer(&shared.host, caller.as_deref()) {
                            return;
                        }
                        http::serve_http(stream, shared, Some(ticket), Some(bearer), caller).await
                    };
                    tokio::select! {
                        _ = serve => {}
                        _ = pending.refused() => {
                            tracing::debug!("a tcp connection did not authenticate in time, or newer ones pushed it out; closing it");
                        }
                    }
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

/// The next accepted connection of a listener and its place in the budget's line (waited
/// for first, so past the line new clients wait in the kernel's backlog); `None` once the
/// server stops accepting. A failed accept (no descriptor left) is retried shortly.
async fn next<S, Addr, A>(
    budget: &admission::Budget,
    stop: &tokio_util::sync::CancellationToken,
    accept: impl Fn() -> A,
) -> Option<(S, tokio::sync::OwnedSemaphorePermit)>
where
    A: std::future::Future<Output = std::io::Result<(S, Addr)>>,
{
    let place = tokio::select! {
        place = budget.place() => place?,
        _ = stop.cancelled() => return None,
    };
    loop {
        tokio::select! {
            r = accept() => match r {
                Ok((stream, _)) => return Some((stream, place)),
                Err(e) => {
                    tracing::warn!(%e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.cancelled() => return None,
        }
    }
}

/// Opens a connection to this server without a socket file: one end of a socket pair,
/// whose other end is served like any accepted connection (the MCP facade's client).
fn in_process(shared: std::sync::Weak<Shared>) -> crate::facade::Connect {
    Arc::new(move || {
        let shared = shared
            .upgrade()
            .ok_or_else(|| std::io::Error::other("the server has stopped"))?;
        let (ours, theirs) = tokio::net::UnixStream::pair()?;
        tokio::spawn(framing::serve_unix(theirs, shared, None));
        Ok(ours)
    })
}
