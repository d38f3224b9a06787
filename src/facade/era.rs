//! Which era of MCP the peer of a request speaks, asked in one place.
//!
//! The facade serves both eras from one endpoint and one `toolhost mcp` process: a client
//! of the `initialize` era (up to 2025-11-25) negotiated its version and capabilities once,
//! in `initialize`; a client of the 2026-07-28 era sends them in every request's `_meta`
//! and never initializes. rmcp resolves both into the request's context (the request's own
//! `_meta` first, then what `initialize` recorded); this module is the facade's one reading
//! of it, so every handler (and the input-request translation) decides the same way.

#[allow(deprecated)] // logging: deprecated by SEP-2577, still what servers send
use rmcp::model::{
    CacheScope, CallToolResult, ClientCapabilities, CompleteResult, GetPromptResult,
    GetSkillResult, Implementation, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult, ListToolsResult,
    LoggingLevel, MetaObject, ProtocolVersion, ReadResourceResult, ResultType,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::{host_error, Facade, Link};
use crate::lock;

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

/// How long a new-era client may treat a list (tools, prompts, resources, templates) as
/// fresh. The lists change only on a config reload, an MCP server's reconnect or its own
/// `list_changed`, none of which can be foreseen, so no long promise is true; a listener
/// (`subscriptions/listen`) hears of each change at once, and everyone else asks again
/// after this long.
pub const LIST_TTL_MS: u64 = 5_000;

/// A resource's content belongs to its MCP server and may change at any moment
/// (`notifications/resources/updated` says when): it is never promised fresh.
pub const CONTENT_TTL_MS: u64 = 0;

/// The `_meta` key under which a new-era result names its server.
const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// A result whose `_meta` can carry `serverInfo` and that carries `resultType` (every
/// result the facade returns).
pub trait Stamped {
    fn meta_mut(&mut self) -> &mut Option<MetaObject>;
    /// Says `resultType: "complete"` unless the result already says what it is.
    fn mark_complete(&mut self);
}

/// A result that carries caching hints for new-era peers.
pub trait Cached: Stamped {
    fn set_hints(&mut self, ttl_ms: u64, scope: CacheScope);
}

macro_rules! stamped {
    ($($t:ty),*) => {$(
        impl Stamped for $t {
            fn meta_mut(&mut self) -> &mut Option<MetaObject> {
                &mut self.meta
            }
            fn mark_complete(&mut self) {
                self.result_type.get_or_insert(ResultType::COMPLETE);
            }
        }
    )*};
}

macro_rules! cached {
    ($($t:ty),*) => {$(
        stamped!($t);
        impl Cached for $t {
            fn set_hints(&mut self, ttl_ms: u64, scope: CacheScope) {
                self.ttl_ms = Some(ttl_ms);
                self.cache_scope = Some(scope);
            }
        }
    )*};
}

stamped!(CallToolResult, GetPromptResult, CompleteResult);

/// An `input_required` result always says so (its `resultType` is no option).
impl Stamped for InputRequiredResult {
    fn meta_mut(&mut self) -> &mut Option<MetaObject> {
        &mut self.meta
    }
    fn mark_complete(&mut self) {}
}
cached!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult,
    ListSkillsResult,
    GetSkillResult
);

/// For a new-era peer: `resultType` (results read back from the host's JSON have none)
/// and `serverInfo` in the result's `_meta`. An old-era peer gets the result as before
/// (rmcp strips `resultType` for it).
pub fn stamp<R: Stamped>(ctx: &RequestContext<RoleServer>, result: &mut R) {
    if !is_modern(ctx) {
        return;
    }
    result.mark_complete();
    if let Ok(info) = serde_json::to_value(super::server_info()) {
        result
            .meta_mut()
            .get_or_insert_with(MetaObject::default)
            .0
            .insert(SERVER_INFO_KEY.to_owned(), info);
    }
}

/// [`stamp`], and the caching hints: `ttl_ms`, `private` when the connection's session
/// or profile shapes the answer, else `public` (the host's one live list, the same for
/// every caller of the URL).
pub fn stamp_cached<R: Cached>(
    ctx: &RequestContext<RoleServer>,
    result: &mut R,
    ttl_ms: u64,
    shaped: bool,
) {
    if !is_modern(ctx) {
        return;
    }
    let scope = if shaped {
        CacheScope::Private
    } else {
        CacheScope::Public
    };
    result.set_hints(ttl_ms, scope);
    stamp(ctx, result);
}

/// Whether a log message of `level` goes to the peer of `ctx`: always for the old era
/// (where `logging/setLevel` is accepted and the servers choose); for the new era only
/// when the request named a level in `_meta` and the message is at least that severe.
#[allow(deprecated)] // logging: deprecated by SEP-2577, still what servers send
pub fn wants_log(ctx: &RequestContext<RoleServer>, level: &str) -> bool {
    if !is_modern(ctx) {
        return true;
    }
    let Some(min) = ctx.meta.log_level() else {
        return false;
    };
    let Ok(level) = serde_json::from_value::<LoggingLevel>(level.into()) else {
        return false;
    };
    severity(level) >= severity(min)
}

#[allow(deprecated)]
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Facade {
    /// Makes this connection ready to serve a request of a new-era peer, which never sends
    /// `initialize`: the profile (`--profile`, or `/mcp?profile=`), and the host session
    /// its calls run in. stdio: the process's own session, made at the first request with
    /// that request's `clientInfo` (one per process, as with `initialize`). Sessionless
    /// HTTP: a call runs in the host session shared by every request of the same client
    /// (`clientInfo`) and profile ([`super::http::SharedClient::session_for`]); a list asks
    /// no session, so it is the same for every connection. Nothing for an old-era peer.
    pub(super) async fn ready(
        &self,
        ctx: &RequestContext<RoleServer>,
        for_call: bool,
    ) -> Result<(), ErrorData> {
        if matches!(self.link, Link::Bridge(..)) {
            self.open_pending().await?;
        }
        if !is_modern(ctx) {
            return Ok(());
        }
        let client = self.client().await?;
        if self.state.profile.get().is_none() {
            if let Some(p) = self
                .profile
                .clone()
                .or_else(|| super::http::profile_of(ctx))
            {
                let _ = self.state.profile.set(p);
            }
        }
        let peer = Peer::of(ctx);
        match &self.link {
            Link::Bridge(..) => {
                self.state
                    .session
                    .get_or_try_init(|| async {
                        let id = self.open_session(&client, &peer).await?;
                        if self.fixed_session.is_none() {
                            *lock(&self.state.owned_session) = Some(id.clone());
                        }
                        Ok::<_, crate::client::ClientError>(id)
                    })
                    .await
                    .map_err(host_error)?;
            }
            Link::Shared(shared) if for_call => {
                let profile = self.state.profile.get().cloned();
                let id = shared
                    .session_for(&client, profile, &peer)
                    .await
                    .map_err(host_error)?;
                let _ = self.state.session.set(id);
            }
            Link::Shared(_) => {}
        }
        // New-era clients are never asked for roots.
        self.state.roots_applied.send_replace(true);
        Ok(())
    }

    /// A sessionless HTTP call that failed because its shared host session is gone
    /// (someone deleted it with `session.delete`): that session is forgotten and a new one
    /// made, for the call to run in; `None` for any other failure.
    pub(super) async fn replace_lost_session(
        &self,
        ctx: &RequestContext<RoleServer>,
        error: &ErrorData,
    ) -> Result<Option<String>, ErrorData> {
        let Link::Shared(shared) = &self.link else {
            return Ok(None);
        };
        let lost = error.code.0 == crate::protocol::codes::SESSION_NOT_FOUND;
        let (true, Some(session)) = (lost && is_modern(ctx), self.session_id()) else {
            return Ok(None);
        };
        shared.forget(&session).await;
        let client = self.client().await?;
        let profile = self.state.profile.get().cloned();
        shared
            .session_for(&client, profile, &Peer::of(ctx))
            .await
            .map(Some)
            .map_err(host_error)
    }

    /// Whether this connection's session or profile shapes what it lists.
    pub(super) fn shaped(&self) -> bool {
        self.state.session.get().is_some() || self.state.profile.get().is_some()
    }
}

/// Who the client is, as a host session records it.
#[derive(Clone)]
pub struct Peer {
    pub info: Implementation,
    pub protocol_version: String,
    /// The name of the bearer token its request carried (`/mcp` over TCP).
    pub token: Option<String>,
}

impl Peer {
    /// From the request's `_meta` (new era; `clientInfo` is only a SHOULD there).
    fn of(ctx: &RequestContext<RoleServer>) -> Peer {
        Peer {
            info: ctx
                .client_info()
                .unwrap_or_else(|| Implementation::new("mcp-client", "")),
            protocol_version: ctx
                .protocol_version()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            token: super::http::token_of(ctx),
        }
    }

    /// From `initialize` (old era), which came with `token` (see [`Peer::token`]).
    pub fn initialized(
        request: &rmcp::model::InitializeRequestParams,
        token: Option<String>,
    ) -> Peer {
        Peer {
            info: request.client_info.clone(),
            protocol_version: request.protocol_version.to_string(),
            token,
        }
    }
}
