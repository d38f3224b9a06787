//! The MCP facade: toolhost as an MCP server in front of its own registry, so agents that
//! speak only MCP (Claude Code, Claude Desktop, Cursor, Codex, the Inspector) use the
//! shared host.
//!
//! One handler, [`Facade`], serves every MCP connection — stdio (`toolhost mcp`) and
//! streamable HTTP (`/mcp` on the daemon's listeners) alike — and talks to the host only
//! through the one Rust client ([`crate::client::Client`]), as any frontend would: the
//! daemon's `/mcp` endpoint connects its client over an in-process socket pair served as an
//! ordinary newline connection. Besides `mcp/`, this is the only module that knows rmcp
//! (its server side).
//!
//! Per MCP connection: one host session (created, or the one `--session` names) with the
//! client's `clientInfo` in its meta; MCP roots set that session's workspace; the daemon's
//! `tools_changed` becomes `notifications/tools/list_changed`; a call's input requests (a
//! server's elicitation, sampling and roots, a strict session's approval) become the same
//! requests to the client, when it declared them (`inputs.rs`).

mod changes;
mod convert;
pub(crate) mod era;
mod events;
mod handoff;
mod http;
mod inputs;
mod listen;
mod manifest;
mod mrtr;
mod persisted;
mod sessions;
mod skills;
mod stdio;
mod surface;
mod upstream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, CustomRequest, CustomResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::SessionRestoreMarker;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use tokio::net::UnixStream;
use tokio::sync::OnceCell;

use crate::client::{Client, ClientError, Subscription};
use crate::lock;
use crate::protocol::{
    ErrorKind, InputKind, InputRequest, InvokeEvent, InvokeParams, InvokeResult, ListToolsParams,
    SessionCreateParams, SessionUpdateParams, SubscribeInvokeParams, ToolEntry, ToolFormat,
    WorkspaceFrom, META_TOKEN, META_WORKSPACE_FROM, REQUIRED_CAPABILITIES,
};

use changes::{Changes, Feed};
pub use http::{Connection, Endpoint};
pub use stdio::run_stdio;

/// Tools per `tools/list` page unless `TOOLHOST_MCP_PAGE_SIZE` says otherwise (tests use a
/// small one to exercise paging).
const PAGE_SIZE: usize = 200;

/// How long a tool call waits for the client's roots to be applied to the session before
/// it runs anyway (a client that declares roots but never answers `roots/list`).
const ROOTS_WAIT: Duration = Duration::from_secs(5);

fn page_size() -> usize {
    std::env::var("TOOLHOST_MCP_PAGE_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(PAGE_SIZE)
}

/// Opens a fresh connection to the daemon (inside the daemon: one end of a socket pair
/// whose other end the RPC layer serves).
pub type Connect = Arc<dyn Fn() -> std::io::Result<UnixStream> + Send + Sync>;

/// How a facade reaches the daemon.
#[derive(Clone)]
enum Link {
    /// stdio: the bridge's own link, which outlives the daemon (`upstream.rs`), following
    /// the host's changes from the start.
    Bridge(Arc<upstream::Upstream>, Arc<Changes>),
    /// The daemon's one in-process connection for every HTTP session (rmcp builds a
    /// handler per session, and also for requests that never reach `initialize`, so
    /// building one must cost nothing).
    Shared(Arc<http::SharedClient>),
}

/// The workspace a frontend names for its sessions before any roots (`toolhost mcp`:
/// its `--workspace`, else where it was started; proto-docs/sessions.md).
#[derive(Debug, Clone)]
pub struct Workspace {
    /// `None`: the daemon's workspace.
    pub path: Option<String>,
    pub from: WorkspaceFrom,
}

impl Workspace {
    /// The daemon's own (an HTTP client, which has no working directory of ours).
    pub fn daemon() -> Workspace {
        Workspace {
            path: None,
            from: WorkspaceFrom::Daemon,
        }
    }
}

/// The MCP server handler of one MCP connection (one stdio peer or one HTTP session).
pub struct Facade {
    link: Link,
    /// `--session`: use (or create) this host session instead of a new one.
    fixed_session: Option<String>,
    /// `--profile` (stdio); an HTTP session names its own in `/mcp?profile=` instead.
    profile: Option<String>,
    /// The workspace of this connection's session until the client's roots say otherwise.
    workspace: Workspace,
    page_size: usize,
    state: Arc<State>,
    /// The calls held for new-era clients' retries: the process's own (stdio), or the
    /// daemon's, which every HTTP request shares.
    held: Arc<mrtr::HeldCalls>,
}

#[derive(Default)]
struct State {
    /// The client this connection last used (the bridge's changes when it reconnects).
    client: Mutex<Option<Arc<Client>>>,
    /// Who the client is, from `initialize`, until its host session is opened (a bridge
    /// whose daemon did not answer yet opens it at the next request).
    pending: Mutex<Option<era::Peer>>,
    /// What the host session was made with, so a bridge can make it again after the
    /// daemon restarted (same id, workspace, profile and meta).
    identity: Mutex<Option<SessionCreateParams>>,
    /// The workspace the client's roots gave the session since (made again after the
    /// session is: the frontend's id is derived from the workspace it was made in).
    roots: Mutex<Option<String>>,
    /// The host session of this connection, set by `initialize`.
    session: OnceCell<String>,
    /// The config profile this connection is served under, set by `initialize`.
    profile: OnceCell<String>,
    /// `tools_changed`, subscribed in `initialize` (so no change between the first list and
    /// `initialized` is missed) and forwarded from `initialized` on.
    tools_changed: Mutex<Option<Feed>>,
    /// Set once the client's roots (if it declared any) are applied to the session.
    roots_applied: tokio::sync::watch::Sender<bool>,
    /// Tasks that live as long as this connection.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// The host's prompts and resources as this connection follows them.
    following: surface::Following,
    /// Feeds of accepted `subscriptions/listen` requests, opened before they are
    /// acknowledged.
    accepted_listens: listen::Accepted,
    /// The `/mcp` session this facade serves, under which it is kept for a restart (HTTP
    /// sessions with an `Mcp-Session-Id` only).
    mcp_session: OnceLock<String>,
    /// Taken up after a daemon restart: the client hears that its lists may have changed.
    taken_up: AtomicBool,
    /// Whether this connection's `initialize` found tool manifests offered
    /// (`manifest.rs`; a bridge's stdio transport declares them by it).
    manifest_offered: Arc<AtomicBool>,
    /// The host session this connection created for itself (not a `--session` one): it
    /// is deleted when the connection ends, so the store does not fill with the sessions
    /// of every MCP connection there ever was.
    owned_session: Mutex<Option<String>>,
}

impl State {
    /// Deletes the session this connection created, if any (at most once).
    async fn end(&self) {
        if let Some(delete) = self.delete_owned_session() {
            delete.await;
        }
    }

    /// The deletion of the session this connection created, if any and not yet taken.
    fn delete_owned_session(&self) -> Option<impl std::future::Future<Output = ()> + 'static> {
        let id = lock(&self.owned_session).take()?;
        let client = lock(&self.client).clone()?;
        Some(async move {
            if let Err(e) = client.session_delete(&id).await {
                tracing::debug!(%e, session = %id, "cannot delete the MCP connection's session");
            }
        })
    }
}

impl State {
    /// After the bridge reconnected: makes this connection's host session again if the
    /// daemon no longer has it (an ephemeral one ends with the old connection; a daemon
    /// that lost its store lost them all), as it was.
    async fn restore(&self, client: &Client) {
        let Some(params) = lock(&self.identity).clone() else {
            return;
        };
        let Some(id) = params.id.clone() else { return };
        if client.session_get(&id).await.is_ok() {
            return;
        }
        if let Err(e) = client.session_create(&params).await {
            tracing::warn!(%e, session = %id, "cannot restore the host session");
            return;
        }
        let roots = lock(&self.roots).clone();
        if roots.is_some() {
            let update = SessionUpdateParams {
                id: id.clone(),
                workspace: roots,
                ..Default::default()
            };
            if let Err(e) = client.session_update(&update).await {
                tracing::warn!(%e, session = %id, "cannot restore the workspace of the client's roots");
            }
        }
        tracing::info!(session = %id, "restored the host session");
    }

    /// Remembers what the session was made with (see [`State::restore`]).
    fn remember(&self, params: SessionCreateParams) {
        *lock(&self.identity) = Some(params);
    }
}

impl Drop for State {
    fn drop(&mut self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        // An HTTP session ends here (rmcp drops its handler); stdio ends through `end`.
        // Its end is the end of a piece of work ([`crate::trim`]): an `/mcp` session's
        // state is freed after the HTTP connections that carried it have closed (on a
        // DELETE, an eviction or its idle end), so their marks alone trimmed before this
        // memory was free, and it stayed with the allocator.
        match (
            self.delete_owned_session(),
            tokio::runtime::Handle::try_current(),
        ) {
            (Some(delete), Ok(runtime)) => {
                runtime.spawn(async move {
                    delete.await;
                    crate::trim::worked();
                });
            }
            _ => crate::trim::worked(),
        }
    }
}

impl Facade {
    fn with_link(
        link: Link,
        fixed_session: Option<String>,
        profile: Option<String>,
        workspace: Workspace,
    ) -> Facade {
        let held = match &link {
            Link::Bridge(..) => Arc::default(),
            Link::Shared(shared) => shared.held_calls(),
        };
        Facade {
            held,
            link,
            fixed_session,
            profile,
            workspace,
            page_size: page_size(),
            state: Arc::default(),
        }
    }

    /// The client of the daemon: the bridge's live one (waiting, bounded, for a daemon
    /// that went away to come back), or the daemon's shared in-process one.
    async fn client(&self) -> Result<Arc<Client>, ErrorData> {
        let client = match &self.link {
            Link::Bridge(up, _) => up.client().await.map_err(internal)?,
            Link::Shared(shared) => {
                if let Some(c) = lock(&self.state.client).clone() {
                    return Ok(c);
                }
                shared
                    .client()
                    .await
                    .map_err(|e| internal(format!("cannot reach the host: {e}")))?
            }
        };
        *lock(&self.state.client) = Some(client.clone());
        Ok(client)
    }

    /// Whether `client` went away under a request (the daemon restarted meanwhile).
    fn lost(&self, client: &Arc<Client>) -> bool {
        match &self.link {
            Link::Bridge(up, _) => up.lost(client),
            Link::Shared(_) => false,
        }
    }

    /// The daemon serving `/mcp` in-process is stopping: a call that fails now was cut by
    /// the stop (its client is told so, as a bridge's is when its daemon goes away).
    fn stopping(&self) -> bool {
        match &self.link {
            Link::Bridge(..) => false,
            Link::Shared(shared) => shared.stopping(),
        }
    }

    /// A bridge whose daemon did not answer at `initialize` opens its host session at the
    /// first request that finds one.
    async fn open_pending(&self) -> Result<(), ErrorData> {
        if self.state.session.get().is_some() {
            return Ok(());
        }
        let Some(peer) = lock(&self.state.pending).take() else {
            return Ok(());
        };
        let client = match self.client().await {
            Ok(c) => c,
            Err(e) => {
                *lock(&self.state.pending) = Some(peer);
                return Err(e);
            }
        };
        self.state
            .session
            .get_or_try_init(|| async {
                let id = self.open_session(&client, &peer).await?;
                if self.fixed_session.is_none() {
                    *lock(&self.state.owned_session) = Some(id.clone());
                }
                Ok::<_, ClientError>(id)
            })
            .await
            .map_err(host_error)?;
        Ok(())
    }

    fn session_id(&self) -> Option<String> {
        self.state.session.get().cloned()
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(fut).abort_handle();
        let mut tasks = lock(&self.state.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// The host session for this connection: `--session` (created when missing), else a
    /// new one; either way in the frontend's workspace, with the client's identity in its
    /// meta. A workspace the daemon cannot use (a directory it cannot read) leaves the
    /// session in the daemon's, and its meta says why.
    async fn open_session(&self, client: &Client, peer: &era::Peer) -> Result<String, ClientError> {
        match self.open_session_in(client, peer, &self.workspace).await {
            Err(ClientError::Rpc { code, message, .. })
                if self.workspace.path.is_some()
                    && code == i64::from(crate::protocol::codes::INVALID_PARAMS)
                    && message.contains("workspace") =>
            {
                tracing::warn!(%message, "the frontend's workspace is refused; using the daemon's");
                let id = self
                    .open_session_in(client, peer, &Workspace::daemon())
                    .await?;
                let mut meta = Map::new();
                meta.insert("workspace_refused".into(), message.into());
                let params = SessionUpdateParams {
                    id,
                    meta: Some(meta),
                    ..Default::default()
                };
                let s = client.session_update(&params).await?;
                if let Some(remembered) = lock(&self.state.identity).as_mut() {
                    remembered.meta = Some(s.meta);
                }
                Ok(s.id)
            }
            other => other,
        }
    }

    async fn open_session_in(
        &self,
        client: &Client,
        peer: &era::Peer,
        workspace: &Workspace,
    ) -> Result<String, ClientError> {
        let meta = session_meta(peer, workspace.from);
        let profile = self.state.profile.get().cloned();
        if let Some(id) = &self.fixed_session {
            match client.session_get(id).await {
                Ok(_) => {
                    let params = SessionUpdateParams {
                        id: id.clone(),
                        meta: Some(meta),
                        profile,
                        workspace: workspace.path.clone(),
                        ..Default::default()
                    };
                    let s = client.session_update(&params).await?;
                    self.state.remember(SessionCreateParams {
                        id: Some(s.id.clone()),
                        workspace: Some(s.workspace),
                        meta: Some(s.meta),
                        profile: s.profile,
                        ..Default::default()
                    });
                    return Ok(s.id);
                }
                Err(e)
                    if e.code() == Some(i64::from(crate::protocol::codes::SESSION_NOT_FOUND)) => {}
                Err(e) => return Err(e),
            }
        }
        let params = SessionCreateParams {
            id: self.fixed_session.clone(),
            meta: Some(meta),
            profile,
            workspace: workspace.path.clone(),
            ephemeral: self.fixed_session.is_none(),
            ..Default::default()
        };
        let id = client.session_create(&params).await?.id;
        self.state.remember(SessionCreateParams {
            id: Some(id.clone()),
            ..params
        });
        Ok(id)
    }

    /// Keeps this new `/mcp` session `id` in the store, with the host session it was given,
    /// for a daemon that restarts ([`persisted`]).
    async fn keep(&self, shared: &http::SharedClient, id: &str, request: &InitializeRequestParams) {
        let _ = self.state.mcp_session.set(id.to_owned());
        let kept = persisted::Kept {
            initialize: request.clone(),
            host_session: lock(&self.state.identity).clone(),
            roots: None,
            created_ms: crate::now_ms(),
        };
        shared.persisted().put(id, &kept).await;
    }

    /// Takes up `/mcp` session `id` of an earlier daemon (rmcp replays its `initialize`):
    /// its host session is made again as it was (same id, workspace, profile, frontend) and
    /// its client's roots are not asked again.
    async fn take_up(
        &self,
        shared: &http::SharedClient,
        id: &str,
        token: Option<String>,
    ) -> Result<(), ErrorData> {
        let kept = shared
            .persisted()
            .get(id)
            .await
            .ok_or_else(|| internal(format!("the MCP session {id} is no longer kept")))?;
        let _ = self.state.mcp_session.set(id.to_owned());
        let Some(params) = kept.host_session.filter(|p| p.id.is_some()) else {
            // Kept without its host session (the facade could not write it): a new one.
            *lock(&self.state.pending) = Some(era::Peer::initialized(&kept.initialize, token));
            self.open_pending().await?;
            self.keep(shared, id, &kept.initialize).await;
            return Ok(());
        };
        if let Some(profile) = &params.profile {
            let _ = self.state.profile.set(profile.clone());
        }
        let host_session = params.id.clone().unwrap_or_default();
        *lock(&self.state.roots) = kept.roots;
        self.state.remember(params);
        let client = self.client().await?;
        self.state.restore(&client).await;
        let _ = self.state.session.set(host_session.clone());
        *lock(&self.state.owned_session) = Some(host_session);
        self.state.roots_applied.send_replace(true);
        self.state.taken_up.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Where this connection hears of the host's list changes.
    fn changes(&self) -> &Changes {
        match &self.link {
            Link::Bridge(_, changes) => changes,
            Link::Shared(shared) => shared.changes(),
        }
    }

    /// Asks the client for its roots and makes the first local one the session's
    /// workspace; then marks roots as applied.
    fn refresh_roots(&self, peer: Peer<RoleServer>) {
        let (Some(client), Some(session)) = (lock(&self.state.client).clone(), self.session_id())
        else {
            return;
        };
        let applied = self.state.roots_applied.clone();
        let state = self.state.clone();
        let kept = match &self.link {
            Link::Shared(shared) => self
                .state
                .mcp_session
                .get()
                .map(|id| (shared.persisted().clone(), id.clone())),
            Link::Bridge(..) => None,
        };
        // Roots are deprecated by SEP-2577, but they are what today's clients send.
        #[allow(deprecated)]
        self.spawn(async move {
            let roots = tokio::time::timeout(ROOTS_WAIT, peer.list_roots()).await;
            let path = match roots {
                Ok(Ok(r)) => r.roots.iter().find_map(|r| convert::root_path(&r.uri)),
                Ok(Err(e)) => {
                    tracing::debug!(%e, "the MCP client did not answer roots/list");
                    None
                }
                Err(_) => None,
            };
            if let Some(path) = path {
                let mut meta = Map::new();
                meta.insert(META_WORKSPACE_FROM.into(), wire(WorkspaceFrom::Roots));
                let params = SessionUpdateParams {
                    id: session,
                    workspace: Some(path.clone()),
                    meta: Some(meta),
                    ..Default::default()
                };
                match client.session_update(&params).await {
                    Ok(s) => {
                        *lock(&state.roots) = Some(s.workspace.clone());
                        if let Some(remembered) = lock(&state.identity).as_mut() {
                            remembered.meta = Some(s.meta.clone());
                        }
                        if let Some((persisted, id)) = kept {
                            persisted
                                .update(&id, |k| {
                                    k.roots = Some(s.workspace);
                                    if let Some(h) = k.host_session.as_mut() {
                                        h.meta = Some(s.meta);
                                    }
                                })
                                .await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%e, %path, "cannot make the client's root the session workspace");
                    }
                }
            }
            applied.send_replace(true);
        });
    }

    /// Waits (bounded) until the client's roots are the session's workspace.
    async fn roots_ready(&self) {
        let mut rx = self.state.roots_applied.subscribe();
        let _ = tokio::time::timeout(ROOTS_WAIT, rx.wait_for(|done| *done)).await;
    }

    /// Runs one call: through `subscribe_invoke` when the client asked for progress (updates
    /// become progress notifications) or can answer input requests (they become the same
    /// MCP requests to it, answered with `invoke.respond`; log messages become
    /// `notifications/message`), else a plain `invoke`; either way a cancelled request
    /// cancels the call (killing its process group).
    async fn run(
        &self,
        client: &Client,
        params: &InvokeParams,
        ctx: &RequestContext<RoleServer>,
        progress: Option<&ProgressToken>,
    ) -> Result<InvokeResult, ErrorData> {
        let inputs = inputs::answerable(ctx);
        let call_id = params.call_id.as_deref().unwrap_or_default();
        // Nothing to stream: a plain `invoke` skips the subscription machinery.
        if progress.is_none() && inputs.is_empty() {
            return tokio::select! {
                r = client.invoke(params) => r.map_err(host_error),
                _ = ctx.ct.cancelled() => Err(cancel_call(client, call_id).await),
            };
        }
        let mut sub = self.subscribe(client, params, inputs).await?;
        match self
            .follow(client, &mut sub, call_id, ctx, progress, false)
            .await?
        {
            Followed::Done(r) => Ok(*r),
            Followed::Asked(_) => Err(internal("a classic call's questions were held")),
        }
    }

    /// Starts the call as a stream whose questions of kinds `inputs` come to this facade.
    async fn subscribe(
        &self,
        client: &Client,
        params: &InvokeParams,
        inputs: Vec<InputKind>,
    ) -> Result<Subscription<InvokeEvent>, ErrorData> {
        let streamed = SubscribeInvokeParams {
            call: params.clone(),
            inputs,
        };
        client
            .subscribe_invoke_answering(&streamed)
            .await
            .map_err(host_error)
    }

    /// Follows the stream `sub` of call `call_id` until its result. Updates become progress
    /// notifications and log messages `notifications/message`; questions become the same
    /// MCP requests to the client, or, when `hold` (a new-era client, which has no such
    /// requests), end the following: the call is asked these questions (those that come
    /// within [`GATHER`] of the first are asked together). A cancelled request cancels
    /// the call.
    async fn follow(
        &self,
        client: &Client,
        sub: &mut Subscription<InvokeEvent>,
        call_id: &str,
        ctx: &RequestContext<RoleServer>,
        progress: Option<&ProgressToken>,
        hold: bool,
    ) -> Result<Followed, ErrorData> {
        let mut step = 0.0;
        // Questions put to the client, answered while the call goes on (polled on this
        // task: over HTTP they then go on the call's own response stream).
        let mut asking = futures::stream::FuturesUnordered::new();
        let mut held = Vec::new();
        let gather = tokio::time::sleep(GATHER);
        tokio::pin!(gather);
        loop {
            let event = tokio::select! {
                e = sub.next() => e,
                Some(()) = futures::StreamExt::next(&mut asking) => continue,
                () = &mut gather, if !held.is_empty() => return Ok(Followed::Asked(held)),
                _ = ctx.ct.cancelled() => return Err(cancel_call(client, call_id).await),
            };
            match event {
                Some(Ok(InvokeEvent::Update(u))) => {
                    let Some(token) = progress else { continue };
                    step += 1.0;
                    let note = convert::progress_note(token.clone(), &u, step);
                    let _ = ctx.peer.notify_progress(note).await;
                }
                Some(Ok(InvokeEvent::InputRequest(q))) if hold => {
                    if held.is_empty() {
                        gather.as_mut().reset(tokio::time::Instant::now() + GATHER);
                    }
                    held.push(q);
                }
                Some(Ok(InvokeEvent::InputRequest(q))) => {
                    asking.push(inputs::answer(client, &ctx.peer, q));
                }
                Some(Ok(InvokeEvent::Log(log))) => {
                    if era::wants_log(ctx, &log.level) {
                        inputs::log(&ctx.peer, log).await;
                    }
                }
                Some(Ok(InvokeEvent::Result(r))) => return Ok(Followed::Done(Box::new(r))),
                Some(Err(e)) => return Err(host_error(e)),
                None => return Err(internal("the host ended the call without a result")),
            }
        }
    }
}

/// How long questions asked one after another are gathered into one `input_required`
/// result (a tool that asks two at once gets both answered in one round).
const GATHER: Duration = Duration::from_millis(20);

impl Facade {
    /// The live tools as this connection's session is served them (with the deferred
    /// tools its frontend found), or a sessionless one its profile; every deferred tool
    /// too when `include_deferred`.
    async fn live_tools(
        &self,
        include_deferred: bool,
    ) -> Result<Vec<rmcp::model::Tool>, ErrorData> {
        let client = self.client().await?;
        // Its meta's code-mode switch, its workspace's tools, `run_code` declaring those.
        let mut params = ListToolsParams {
            format: ToolFormat::Mcp,
            profile: self.state.profile.get().cloned(),
            session_id: self.session_id(),
            live: true,
            include_deferred,
            ..Default::default()
        };
        let mut listed = client.list_tools(&params).await;
        // A session the daemon lost (restarted, not yet made again): the profile's list.
        if matches!(&listed, Err(e) if e.code() == Some(i64::from(crate::protocol::codes::SESSION_NOT_FOUND)))
        {
            params.session_id = None;
            listed = client.list_tools(&params).await;
        }
        let list = listed.map_err(host_error)?;
        Ok(list
            .tools
            .iter()
            .filter_map(|t| match t {
                ToolEntry::Mcp(t) => convert::tool(t, list.meta.get(&t.name)),
                ToolEntry::Openai(_) => None,
            })
            .collect())
    }
}

/// Where following a call's stream ended.
enum Followed {
    /// The call ended with this result.
    Done(Box<InvokeResult>),
    /// The call waits for the answers to these questions (new-era clients only).
    Asked(Vec<InputRequest>),
}

impl ServerHandler for Facade {
    #[allow(deprecated)] // logging: deprecated by SEP-2577, still what servers send
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_skills()
                .build(),
        )
        .with_server_info(server_info())
        .with_instructions(
            "toolhost: the shared tool host of this machine (built-in file and shell tools, custom tools, and the tools of its MCP servers).",
        )
    }

    // Every version rmcp knows (its default `supported_protocol_versions`): the
    // `initialize` era negotiates in `initialize`, 2026-07-28 names its version in each
    // request's `_meta` (`era.rs`).

    /// `subscriptions/listen` (new era): every kind this facade announces (rmcp narrows
    /// the request to what `get_info` advertises).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(self.accept_listen(requested))
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.forward_subscription(subscription).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        let kept_as = context
            .extensions
            .get::<sessions::McpSessionId>()
            .map(|m| m.0.to_string());
        let restoring = context.extensions.get::<SessionRestoreMarker>().is_some();
        let opened = async {
            match (&self.link, kept_as) {
                (Link::Shared(shared), Some(id)) if restoring => {
                    self.take_up(shared, &id, http::token_of(&context)).await?
                }
                (link, kept_as) => {
                    if let Some(profile) =
                        self.profile.clone().or_else(|| http::profile_of(&context))
                    {
                        let _ = self.state.profile.set(profile);
                    }
                    *lock(&self.state.pending) =
                        Some(era::Peer::initialized(&request, http::token_of(&context)));
                    match (self.open_pending().await, link) {
                        // A bridge answers without its daemon: the session is opened once one answers.
                        (Err(e), Link::Bridge(..)) => {
                            tracing::warn!(message = %e.message, "initialized without a daemon")
                        }
                        (Err(e), Link::Shared(_)) => return Err(e),
                        (Ok(()), _) => {}
                    }
                    if let (Link::Shared(shared), Some(id)) = (link, kept_as) {
                        self.keep(shared, &id, &request).await;
                    }
                }
            }
            Ok(())
        };
        // A bridge asks its daemon for the switch beside opening the session: their round
        // trips overlap instead of following each other.
        let (opened, _) = tokio::join!(opened, self.offers_manifest());
        opened?;
        *lock(&self.state.tools_changed) = Some(self.changes().tools());
        self.state.following.subscribe(self.changes());
        if request.capabilities.roots.is_none() {
            self.state.roots_applied.send_replace(true);
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(mut feed) = lock(&self.state.tools_changed).take() {
            let peer = context.peer.clone();
            self.spawn(async move {
                while feed.changed().await {
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
            });
        }
        self.state.following.forward(self, &context.peer);
        if self.state.taken_up.load(Ordering::Relaxed) {
            // The daemon restarted: what it serves may have changed meanwhile. Kept for the
            // client's next stream if none is open yet. The roots are the kept ones.
            let peer = context.peer.clone();
            self.spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
                let _ = peer.notify_resource_list_changed().await;
            });
            return;
        }
        let has_roots = context
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.roots.is_some());
        if has_roots {
            self.refresh_roots(context.peer);
        }
    }

    /// Log messages are those of the MCP servers behind the host, passed on as they come;
    /// the level is theirs to choose. 2026-07-28 removed the method (a request names its
    /// level in `_meta`).
    #[allow(deprecated)] // logging: deprecated by SEP-2577, still sent by servers
    async fn set_level(
        &self,
        _: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if era::is_modern(&context) {
            return Err(ErrorData::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.state.roots_applied.send_replace(false);
        self.refresh_roots(context.peer);
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.ready(&context, false).await?;
        let tools = self.live_tools(false).await?;
        let (page, next) = surface::page(&tools, request.and_then(|r| r.cursor), self.page_size)?;
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        era::stamp_cached(&context, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.custom_request(&request.method, request.params, &context)
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.ready(&context, false).await?;
        let mut result = self.prompts_page(request).await?;
        era::stamp_cached(&context, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.ready(&context, false).await?;
        match self.prompt(request, &context).await? {
            GetPromptResponse::Complete(mut result) => {
                era::stamp(&context, &mut result);
                Ok(result.into())
            }
            GetPromptResponse::InputRequired(mut asked) => {
                era::stamp(&context, &mut asked);
                Ok(asked.into())
            }
            other => Ok(other),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.ready(&context, false).await?;
        let mut result = self.resources_page(request).await?;
        era::stamp_cached(&context, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, ErrorData> {
        self.skills_page(request, &context).await
    }

    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, ErrorData> {
        self.skill(request, &context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.ready(&context, false).await?;
        let mut result = self.templates_page(request).await?;
        era::stamp_cached(&context, &mut result, era::LIST_TTL_MS, self.shaped());
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.ready(&context, false).await?;
        let uri = request.uri.clone();
        let answer = self.resource(request, &context).await.map_err(|mut e| {
            // 2026-07-28 names the URI that was not found (rmcp gives it its new code).
            if e.code == ErrorCode::RESOURCE_NOT_FOUND
                && e.data.is_none()
                && era::is_modern(&context)
            {
                e.data = Some(serde_json::json!({ "uri": uri }));
            }
            e
        })?;
        match answer {
            ReadResourceResponse::Complete(mut result) => {
                era::stamp_cached(&context, &mut result, era::CONTENT_TTL_MS, self.shaped());
                Ok(result.into())
            }
            ReadResourceResponse::InputRequired(mut asked) => {
                era::stamp(&context, &mut asked);
                Ok(asked.into())
            }
            other => Ok(other),
        }
    }

    #[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 send
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_resource(request.uri, context.peer).await
    }

    #[allow(deprecated)] // resources/unsubscribe, as for subscribe
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.unsubscribe_resource(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.ready(&context, false).await?;
        let mut result = self.completion(request).await?;
        era::stamp(&context, &mut result);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool_error = |text: String| {
            Ok(finish(
                &context,
                CallToolResult::error(vec![ContentBlock::text(text)]),
            ))
        };
        // A call that never reached a daemon that went away is sent once more, to the next.
        for _ in 0..2 {
            let client = match self.client().await {
                Ok(c) => c,
                // The bridge's daemon is away: the client shows why.
                Err(e) if matches!(self.link, Link::Bridge(..)) => {
                    return tool_error(e.message.into())
                }
                Err(e) => return Err(e),
            };
            return match self.call_tool_on(&client, request.clone(), &context).await {
                Err(e) if self.lost(&client) && not_sent(&e) => continue,
                Err(_) if self.lost(&client) => tool_error(RESTARTED.into()),
                Err(_) if self.stopping() => tool_error(RESTARTED.into()),
                Ok(CallToolResponse::Complete(r))
                    if r.is_error == Some(true) && self.stopping() =>
                {
                    tool_error(RESTARTED.into())
                }
                other => other,
            };
        }
        tool_error(RESTARTED.into())
    }
}

/// What a call in flight when the bridge's daemon went away ends with.
const RESTARTED: &str = "The toolhost daemon restarted (or stopped) while this call ran: it may or may not have run. Check its effects before calling it again.";

impl Facade {
    /// `tools/call` on `client`.
    async fn call_tool_on(
        &self,
        client: &Arc<Client>,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.ready(context, true).await?;
        let client = client.clone();
        self.roots_ready().await;
        let progress = context.meta.get_progress_token();
        let mut params = InvokeParams {
            name: request.name.to_string(),
            arguments: request.arguments.clone(),
            session_id: self.session_id(),
            call_id: Some(crate::invoke::new_call_id()),
            ..Default::default()
        };
        let r = if era::is_modern(context) {
            let rounds = match self
                .call_in_rounds(&client, &request, &params, context, progress.as_ref())
                .await
            {
                // A first round whose shared session was deleted: the call did not run.
                Err(e) if request.request_state.is_none() => {
                    match self.replace_lost_session(context, &e).await? {
                        Some(session) => {
                            params.session_id = Some(session);
                            self.call_in_rounds(
                                &client,
                                &request,
                                &params,
                                context,
                                progress.as_ref(),
                            )
                            .await?
                        }
                        None => return Err(e),
                    }
                }
                other => other?,
            };
            match rounds {
                mrtr::Round::Done(r) => *r,
                mrtr::Round::InputRequired(mut asked) => {
                    era::stamp(context, &mut asked);
                    return Ok(asked.into());
                }
            }
        } else {
            match self.run(&client, &params, context, progress.as_ref()).await {
                Err(e) => match self.replace_lost_session(context, &e).await? {
                    // The call did not run: the host looks the session up first.
                    Some(session) => {
                        params.session_id = Some(session);
                        self.run(&client, &params, context, progress.as_ref())
                            .await?
                    }
                    None => return Err(e),
                },
                Ok(r) => r,
            }
        };
        // Cut short by the daemon's own stop, not by this client: it may or may not have run.
        if r.result.output.fields.get(crate::protocol::DAEMON_STOPPING) == Some(&Value::Bool(true))
        {
            let restarted = CallToolResult::error(vec![ContentBlock::text(RESTARTED)]);
            return Ok(finish(context, restarted));
        }
        if r.result.error_kind == Some(ErrorKind::UnknownTool) {
            return Err(ErrorData::invalid_params(
                r.result
                    .error
                    .unwrap_or_else(|| format!("Unknown tool: {}", request.name)),
                None,
            ));
        }
        // An upstream's -32021 for a capability this client did not declare, passed on.
        if let Some(required) = r.result.output.fields.get(REQUIRED_CAPABILITIES) {
            let required = serde_json::json!({ "requiredCapabilities": required });
            return Err(ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                r.result.error.unwrap_or_default(),
                Some(required),
            ));
        }
        if r.result.error_kind == Some(ErrorKind::ApprovalRequired) {
            let summary = r
                .result
                .approval
                .map_or_else(|| request.name.to_string(), |a| a.to_string());
            // A client that answers elicitation was asked by the host already (an input
            // request of the call); it is left here only when asking failed.
            let can_ask = context
                .client_capabilities()
                .is_some_and(|c| c.elicitation.is_some());
            if can_ask {
                let text = r.result.error.unwrap_or(summary);
                return Ok(finish(
                    context,
                    CallToolResult::error(vec![ContentBlock::text(text)]),
                ));
            }
            {
                let session = self.session_id().unwrap_or_default();
                let text = format!(
                    "Tool '{}' needs the user's approval in this strict session: {summary}. \
                     This MCP client cannot ask the user (it does not support elicitation). \
                     To allow it, switch the session to auto approval \
                     (toolhost call session.update '{{\"id\": \"{session}\", \"approval\": \"auto\"}}') \
                     or run the call yourself with `toolhost invoke {} --session {session} --approved`.",
                    request.name, request.name
                );
                return Ok(finish(
                    context,
                    CallToolResult::error(vec![ContentBlock::text(text)]),
                ));
            }
        }
        Ok(finish(context, convert::call_result(&r.result)))
    }
}

/// What a host session made for an MCP client records of it (the audit log names the
/// client from it).
fn session_meta(peer: &era::Peer, workspace_from: WorkspaceFrom) -> Map<String, Value> {
    let info = &peer.info;
    let mut mcp_client = Map::new();
    mcp_client.insert("name".into(), info.name.clone().into());
    mcp_client.insert("version".into(), info.version.clone().into());
    if let Some(title) = &info.title {
        mcp_client.insert("title".into(), title.clone().into());
    }
    mcp_client.insert(
        "protocol_version".into(),
        peer.protocol_version.clone().into(),
    );
    let mut meta = Map::new();
    meta.insert("frontend".into(), "mcp".into());
    meta.insert("mcp_client".into(), Value::Object(mcp_client));
    meta.insert(META_WORKSPACE_FROM.into(), wire(workspace_from));
    if let Some(token) = &peer.token {
        // Taken from the daemon's own connection only (`Frontends::identify`).
        meta.insert(META_TOKEN.into(), token.clone().into());
    }
    meta
}

/// A protocol value as its JSON.
fn wire(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The facade as an MCP server names itself (in `initialize`, `server/discover` and, for
/// new-era peers, every result's `_meta`).
fn server_info() -> Implementation {
    Implementation::new("toolhost", env!("CARGO_PKG_VERSION"))
}

/// A call's result as the peer of `ctx` gets it.
fn finish(ctx: &RequestContext<RoleServer>, mut result: CallToolResult) -> CallToolResponse {
    era::stamp(ctx, &mut result);
    result.into()
}

/// Cancels the call the client gave up on (its process group is killed) and says so.
async fn cancel_call(client: &Client, call_id: &str) -> ErrorData {
    let _ = client.cancel(call_id).await;
    ErrorData::new(ErrorCode::INTERNAL_ERROR, "cancelled", None)
}

fn internal(msg: impl Into<String>) -> ErrorData {
    ErrorData::internal_error(msg.into(), None)
}

/// A host error as an MCP error: the host's own JSON-RPC code when it answered with one.
fn host_error(e: ClientError) -> ErrorData {
    match e {
        ClientError::Rpc {
            code,
            message,
            data,
        } => ErrorData::new(
            ErrorCode(i32::try_from(code).unwrap_or(ErrorCode::INTERNAL_ERROR.0)),
            message,
            data,
        ),
        // Marked, so a bridge that reconnected sends the call again (it never ran).
        ClientError::NotSent(why) => ErrorData::internal_error(
            format!("the host connection was gone before the request was sent: {why}"),
            Some(serde_json::json!({ NOT_SENT: true })),
        ),
        other => internal(other.to_string()),
    }
}

/// The `data` key of an error whose request never reached the host.
const NOT_SENT: &str = "not_sent";

/// Whether `e` says its request never reached the host.
fn not_sent(e: &ErrorData) -> bool {
    e.data
        .as_ref()
        .and_then(|d| d.get(NOT_SENT))
        .is_some_and(|v| v == &Value::Bool(true))
}
