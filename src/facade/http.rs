//! `/mcp`: the facade as MCP streamable HTTP on the daemon's own listeners.
//!
//! rmcp's `StreamableHttpService` does the transport (sessions with `Mcp-Session-Id`, POST
//! answered as JSON or SSE, the standalone GET stream, DELETE, protocol-version checks);
//! the RPC layer routes `/mcp` here after its bearer check (TCP). Every MCP session gets its
//! own [`Facade`] and its own in-process connection to the host.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use hyper::body::Bytes;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{Connect, Facade, Link};

/// An MCP session idle this long (no message either way) is closed; the client then gets
/// 404 and starts a new one, as the transport spec says. rmcp's default (5 minutes) would
/// also end a tool call that stays silent that long.
const IDLE_SESSION: Duration = Duration::from_secs(3600);

/// Browser origins allowed to call `/mcp` (any port): pages on this machine only, so a
/// remote page cannot drive the host through a DNS-rebound name. Requests without an
/// `Origin` (every non-browser client) pass.
const ALLOWED_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// The `/mcp` endpoint, shared by every listener of the daemon.
#[derive(Clone)]
pub struct Endpoint {
    service: StreamableHttpService<Facade, LocalSessionManager>,
}

impl Endpoint {
    /// `connect` opens an in-process connection to the host; `shutdown` ends every session
    /// and open SSE stream (so a graceful HTTP shutdown does not wait on them).
    pub fn new(connect: Connect, shutdown: CancellationToken) -> Endpoint {
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(IDLE_SESSION);
        // The Host header is not checked: the Unix socket is reachable only through the
        // file system, and TCP requires the bearer token (which a rebinding page cannot
        // know); the Origin check still refuses foreign browser pages.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_allowed_origins(ALLOWED_ORIGINS)
            .enforce_origin_validation()
            .with_cancellation_token(shutdown);
        let service = StreamableHttpService::new(
            move || Ok(Facade::with_link(Link::Connect(connect.clone()), None)),
            Arc::new(sessions),
            config,
        );
        Endpoint { service }
    }

    /// Serves one HTTP request addressed to `/mcp`.
    pub async fn handle<B>(
        &self,
        req: http::Request<B>,
    ) -> http::Response<BoxBody<Bytes, Infallible>>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        self.service.handle(req).await
    }
}
