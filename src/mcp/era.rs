//! Which MCP era a server speaks, and what follows from it on our client side.
//!
//! Revision 2026-07-28 has no `initialize`: a client probes with `server/discover` and
//! sends the protocol version, its info and its capabilities in every request's `_meta`.
//! Servers of the older era answer the probe with an error (or, over HTTP, a 4xx), and
//! then get the `initialize` handshake on the same connection. rmcp's client runs both
//! (`ClientLifecycleMode::Auto`) and adds the `_meta` to every request it sends; what is
//! ours is the bound on the probe (`stdio.rs` for stdio, [`probe_bound`] here for both),
//! the `_meta` of the tool calls that go beside rmcp (`stdio.rs`'s `DirectCalls`), and the
//! version kept for `mcp.status`.

use std::time::Duration;

#[allow(deprecated)] // logging: deprecated by SEP-2577, still what servers send
use rmcp::model::{LoggingLevel, ProtocolVersion, RequestMetaObject};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Map, Value};

use super::client::Client;

/// How we open a session: the probe first, preferring the newest revision, and the newest
/// `initialize` revision for a server that refuses it.
pub fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// The longest a `server/discover` probe waits before the server is taken for one of the
/// `initialize` era: half the connect timeout, so the fallback has the other half, and no
/// more than rmcp's own ten seconds.
pub fn probe_bound(startup_timeout: Duration) -> Duration {
    (startup_timeout / 2).min(Duration::from_secs(10))
}

/// Whether the session speaks the era without `initialize`.
pub fn is_new(version: &ProtocolVersion) -> bool {
    !version.has_initialize()
}

/// Whether the live session behind `peer` speaks the era without `initialize`.
pub fn peer_is_new(peer: &rmcp::service::Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| is_new(&info.protocol_version))
}

/// The revision the session runs on; `None` before it is open.
pub fn version(service: &RunningService<RoleClient, Client>) -> Option<ProtocolVersion> {
    service
        .peer_info()
        .map(|info| info.protocol_version.clone())
}

/// The per-request `_meta` entries a request of ours must carry to a server of the new
/// era (the same rmcp puts on the requests it sends); `None` for the `initialize` era.
pub fn request_meta(service: &RunningService<RoleClient, Client>) -> Option<Map<String, Value>> {
    let version = version(service).filter(is_new)?;
    let info = service.service().get_info();
    let mut meta =
        RequestMetaObject::with_client_context(version, info.client_info, info.capabilities);
    meta.extend(log_meta());
    match serde_json::to_value(meta) {
        Ok(Value::Object(meta)) => Some(meta),
        _ => None,
    }
}

/// The `_meta` of a tool call to a server of the new era, besides what rmcp adds: the log
/// level, every message. Such a server sends `notifications/message` only at a level a
/// request names; one of the `initialize` era sends whatever it logs. Asking for every
/// message keeps the two alike, and the facade filters for each frontend.
#[allow(deprecated)]
pub fn log_meta() -> RequestMetaObject {
    let mut meta = RequestMetaObject::default();
    meta.set_log_level(LoggingLevel::Debug);
    meta
}

/// Refuses a session on a revision we do not know (we follow every one rmcp knows, both
/// eras).
pub fn check(service: &RunningService<RoleClient, Client>) -> anyhow::Result<()> {
    match version(service) {
        None => anyhow::bail!("the server sent no initialize or discover result"),
        Some(v) if ProtocolVersion::KNOWN_VERSIONS.contains(&v) => Ok(()),
        Some(v) => {
            anyhow::bail!("the server chose protocol version {v}, which toolhost does not support")
        }
    }
}

/// `Client::serve` with our lifecycle, for transports rmcp drives itself.
pub async fn serve<T, E, A>(
    client: Client,
    transport: T,
) -> Result<RunningService<RoleClient, Client>, rmcp::service::ClientInitializeError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    client.serve_with_lifecycle(transport, lifecycle()).await
}
