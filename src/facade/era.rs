//! Which era of MCP the peer of a request speaks, asked in one place.
//!
//! The facade serves both eras from one endpoint and one `toolhost mcp` process: a client
//! of the `initialize` era (up to 2025-11-25) negotiated its version and capabilities once,
//! in `initialize`; a client of the 2026-07-28 era sends them in every request's `_meta`
//! and never initializes. rmcp resolves both into the request's context (the request's own
//! `_meta` first, then what `initialize` recorded); this module is the facade's one reading
//! of it, so every handler (and the input-request translation) decides the same way.

use rmcp::model::{ClientCapabilities, ProtocolVersion};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

/// The era and the declared client capabilities of one request's peer.
#[derive(Debug, Clone, Default)]
pub struct PeerEra {
    /// The protocol version the request is served under (its `_meta` version, else the one
    /// `initialize` negotiated); `None` before anything named one.
    pub version: Option<ProtocolVersion>,
    /// The capabilities the client declared: in this request's `_meta` (new era), else at
    /// `initialize` (old era); empty when it declared none.
    pub client_capabilities: ClientCapabilities,
}

impl PeerEra {
    /// Whether the peer speaks 2026-07-28 or later: no `initialize`, no sessions, no
    /// server-to-client requests (input requests become `input_required` results), and
    /// results that carry `resultType`, caching hints and `serverInfo`.
    pub fn is_modern(&self) -> bool {
        self.version.as_ref().is_some_and(is_modern_version)
    }
}

/// The era of the peer that sent the request of `ctx`.
pub fn of(ctx: &RequestContext<RoleServer>) -> PeerEra {
    PeerEra {
        version: ctx.protocol_version(),
        client_capabilities: ctx.client_capabilities().unwrap_or_default(),
    }
}

/// Whether the request of `ctx` comes from a 2026-07-28-era peer.
pub fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    PeerEra {
        version: ctx.protocol_version(),
        ..PeerEra::default()
    }
    .is_modern()
}

/// Versions compare as their ISO dates (rmcp's own rule).
fn is_modern_version(version: &ProtocolVersion) -> bool {
    version.as_str() >= ProtocolVersion::NO_INITIALIZE.as_str()
}
