//! Every JSON-RPC method, registered through [`Api`], which records each method's params
//! and result schema as it registers it: `rpc.discover` is generated from the very table
//! the server serves, so the two cannot drift apart.
//!
//! Both kinds go into our own tables, which the connection calls directly: plain methods
//! ([`Methods::plain`]) answer with their whole reply, subscriptions
//! ([`Methods::subscriptions`]) with a stream the connection runs (see `subscription`).
//! jsonrpsee's `raw_json_request` re-parsed each request, cloned the module's extensions,
//! made a channel and wrote a reply whose id we then swapped, all on the hot path of every
//! `invoke`; its subscriptions needed a connection of its own.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use futures::FutureExt;

use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

mod approvals;
mod builtin_commands;
mod checkpoint;
mod commands;
mod fleet;
mod guards;
mod skills;
mod trust;

use super::openrpc::{self, MethodDoc};
use super::peer::{Admit, Peer};
use super::subscription::{self, Sink, Stream, Subscribe, Subscription};
use crate::custom::events::SessionEvent;
use crate::error::{Error, UnknownServer};
use crate::host::Host;
use crate::protocol::*;
use crate::registry::UpdateSink;
use crate::reload;
use crate::session::Holder;

mod surface;
mod ui;

/// Maps a protocol-level failure to its JSON-RPC error (the one place that does).
fn rpc_error(e: Error) -> ErrorObjectOwned {
    let code = match &e {
        Error::SessionNotFound(_) => codes::SESSION_NOT_FOUND,
        Error::InvalidParams(_) | Error::UnknownServer(_) => codes::INVALID_PARAMS,
        Error::Server(_) => codes::SERVER_ERROR,
        Error::ResourceNotFound(_) => codes::RESOURCE_NOT_FOUND,
        Error::SkillRefused(_) => codes::SKILL_REFUSED,
        Error::Upstream { code, .. } => *code,
    };
    let data = match &e {
        Error::Upstream { data, .. } => data.clone(),
        _ => None,
    };
    ErrorObject::owned(code, e.to_string(), data)
}

/// Sign-in failures: an unknown server is the caller's mistake, the rest are the server's.
fn login_error(e: anyhow::Error) -> Error {
    match e.downcast::<UnknownServer>() {
        Ok(unknown) => unknown.into(),
        Err(e) => Error::Server(format!("{e:#}")),
    }
}

/// A plain method: parses its params (`None`: absent), runs, and answers with its whole
/// reply to `id` (its result serialised straight into the reply: a 1,000-tool list is
/// copied once, not three times). A notification (no id) runs and answers nothing.
pub(crate) type Plain = Arc<
    dyn Fn(
            &Arc<Peer>,
            Option<&str>,
            Option<Box<RawValue>>,
        ) -> BoxFuture<'static, Result<String, ErrorObjectOwned>>
        + Send
        + Sync,
>;

/// Every method the server serves.
pub(crate) struct Methods {
    /// Plain methods by name, run directly by the connection.
    pub plain: HashMap<&'static str, Plain>,
    /// Subscription methods by name, run by the connection.
    pub subscriptions: HashMap<&'static str, Subscription>,
    /// Each unsubscribe method, to the subscribe method whose subscriptions it ends.
    pub unsubscribes: HashMap<&'static str, &'static str>,
}

/// Params are by name; absent params mean `{}`.
fn parse_str<P: DeserializeOwned>(params: Option<&str>) -> Result<P, ErrorObjectOwned> {
    let raw = params.map(str::trim).unwrap_or("{}");
    if raw.starts_with('[') {
        return Err(ErrorObject::owned(
            codes::INVALID_PARAMS,
            "Invalid params: params must be an object (by name), not an array",
            None::<()>,
        ));
    }
    serde_json::from_str(raw).map_err(|e| {
        ErrorObject::owned(
            codes::INVALID_PARAMS,
            format!("Invalid params: {e}"),
            None::<()>,
        )
    })
}

/// A plain method's reply to `id` with `result`; empty for a notification (no id).
pub(super) fn reply(
    id: Option<Box<RawValue>>,
    result: &impl Serialize,
) -> Result<String, ErrorObjectOwned> {
    let Some(id) = id else {
        return Ok(String::new());
    };
    super::envelope::result_reply(&id, result).map_err(|e| {
        ErrorObject::owned(
            codes::INTERNAL_ERROR,
            format!("Internal error: {e}"),
            None::<()>,
        )
    })
}

/// What a method checks of a host-started peer before it runs (see `peer`).
enum Rule<P> {
    /// Open or admin by its name, before its params are read.
    ByName(&'static str),
    /// Its parsed params' own check ([`peer::Admit`]).
    Params(fn(&Peer, &mut P) -> Result<(), ErrorObjectOwned>),
}

impl<P> Clone for Rule<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Rule<P> {}

/// Runs handler `f` for `peer` on the params as sent, once `rule` admits them; a params
/// error, a refusal or the handler's own error becomes its JSON-RPC error.
fn run<P, O, F, Fut>(
    f: &F,
    rule: Rule<P>,
    peer: &Arc<Peer>,
    params: Option<&str>,
) -> impl Future<Output = Result<O, ErrorObjectOwned>> + Send + 'static
where
    P: DeserializeOwned,
    F: Fn(Host, P, Arc<Peer>) -> Fut,
    Fut: Future<Output = Result<O, Error>> + Send + 'static,
{
    let admitted = || {
        if let Rule::ByName(name) = rule {
            peer.admit_name(name)?;
        }
        let mut p = parse_str::<P>(params)?;
        if let Rule::Params(check) = rule {
            check(peer, &mut p)?;
        }
        Ok::<_, ErrorObjectOwned>(p)
    };
    // Boxed where it is made: a handler's future (a call's whole pipeline) is kilobytes,
    // and each move on its way to the connection's task would copy it.
    let call = admitted().map(|p| Box::pin(f(peer.host().clone(), p, peer.clone())));
    async move { call?.await.map_err(rpc_error) }
}

#[derive(Default)]
struct Api {
    plain: HashMap<&'static str, Plain>,
    subscriptions: HashMap<&'static str, Subscription>,
    unsubscribes: HashMap<&'static str, &'static str>,
    docs: Vec<WriteDoc>,
}

/// Writes one method's OpenRPC entry. Run on the first `rpc.discover`, not at start-up:
/// deriving the schemas costs a daemon nobody asks about a few hundred KB of code and heap.
type WriteDoc = Box<dyn Fn() -> MethodDoc + Send + Sync>;

impl Api {
    /// Registers `name` with params `P` and result `R` (also what the OpenRPC doc says),
    /// open to host-started peers only when `peer::is_open` names it.
    fn method<P, R, F, Fut>(
        &mut self,
        name: &'static str,
        summary: &'static str,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + JsonSchema + Send + 'static,
        F: Fn(Host, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Error>> + Send + 'static,
    {
        self.method_as::<P, R, R, _, _>(name, summary, f)
    }

    /// Like [`Api::method`], for handlers answering with a pre-serialised `O` documented as `R`.
    fn method_as<P, R, O, F, Fut>(
        &mut self,
        name: &'static str,
        summary: &'static str,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        R: JsonSchema + 'static,
        O: Serialize + Send + 'static,
        F: Fn(Host, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Error>> + Send + 'static,
    {
        let f = move |host, p, _: Arc<Peer>| f(host, p);
        self.register::<P, R, O, _, _>(name, summary, Rule::ByName(name), f)
    }

    /// Registers `name`, open to host-started peers within their call's rights, which its
    /// params' [`peer::Admit`] checks; the handler is given the peer, to record the
    /// sessions it makes or ends.
    fn method_checked<P, R, F, Fut>(
        &mut self,
        name: &'static str,
        summary: &'static str,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Admit + Send + 'static,
        R: Serialize + JsonSchema + Send + 'static,
        F: Fn(Host, P, Arc<Peer>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Error>> + Send + 'static,
    {
        self.register::<P, R, R, _, _>(name, summary, Rule::Params(Peer::admit::<P>), f)
    }

    fn register<P, R, O, F, Fut>(
        &mut self,
        name: &'static str,
        summary: &'static str,
        rule: Rule<P>,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        R: JsonSchema + 'static,
        O: Serialize + Send + 'static,
        F: Fn(Host, P, Arc<Peer>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Error>> + Send + 'static,
    {
        self.docs
            .push(Box::new(move || openrpc::method::<P, R>(name, summary)));
        let plain: Plain = Arc::new(move |peer: &Arc<Peer>, params: Option<&str>, id| {
            let call = run(&f, rule, peer, params);
            async move { reply(id, &call.await?) }.boxed()
        });
        if self.plain.insert(name, plain).is_some() {
            anyhow::bail!("method {name} registered twice");
        }
        Ok(())
    }

    /// Registers subscription `name` with params `P`, sending `notification`s whose result
    /// is `N`, ended by `unsubscribe` (also what the OpenRPC doc says). `f` checks the
    /// params and returns the stream to run once the client has the subscription id.
    fn subscription<P, N, F, Fut>(
        &mut self,
        names: [&'static str; 3],
        summary: &'static str,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        N: JsonSchema + 'static,
        F: Fn(Host, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Stream, Error>> + Send + 'static,
    {
        let f = move |host, p, _: Arc<Peer>| f(host, p);
        self.register_subscription::<P, N, _, _>(names, summary, Rule::ByName(names[0]), f)
    }

    /// Like [`Api::subscription`], open to host-started peers within their call's rights,
    /// which its params' [`peer::Admit`] checks.
    fn subscription_checked<P, N, F, Fut>(
        &mut self,
        names: [&'static str; 3],
        summary: &'static str,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Admit + Send + 'static,
        N: JsonSchema + 'static,
        F: Fn(Host, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Stream, Error>> + Send + 'static,
    {
        let f = move |host, p, _: Arc<Peer>| f(host, p);
        let rule = Rule::Params(Peer::admit::<P>);
        self.register_subscription::<P, N, _, _>(names, summary, rule, f)
    }

    fn register_subscription<P, N, F, Fut>(
        &mut self,
        [name, notification, unsubscribe]: [&'static str; 3],
        summary: &'static str,
        rule: Rule<P>,
        f: F,
    ) -> anyhow::Result<()>
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        N: JsonSchema + 'static,
        F: Fn(Host, P, Arc<Peer>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Stream, Error>> + Send + 'static,
    {
        self.docs.push(Box::new(move || {
            openrpc::subscription::<P, N>(name, notification, unsubscribe, summary)
        }));
        self.docs
            .push(Box::new(move || openrpc::unsubscribe(unsubscribe, name)));
        let subscribe: Subscribe = Arc::new(move |peer: &Arc<Peer>, params: Option<&str>| {
            run(&f, rule, peer, params).boxed()
        });
        let entry = Subscription {
            notification,
            subscribe,
        };
        if self.subscriptions.insert(name, entry).is_some()
            || self.unsubscribes.insert(unsubscribe, name).is_some()
        {
            anyhow::bail!("subscription {name} registered twice");
        }
        Ok(())
    }
}

/// Every method; `access` is the operator's page's, whose codes `ui.login` mints.
pub(crate) fn methods(access: Arc<crate::ui::Access>) -> anyhow::Result<Methods> {
    let mut api = Api::default();

    api.register::<ListToolsParams, ListToolsResult, _, _, _>(
        method::LIST_TOOLS,
        "The live tool list (or a session's view) in openai or mcp format, with revision, etag and meta.",
        Rule::Params(Peer::admit),
        |host, p: ListToolsParams, _| async move { list_tools(&host, p).await },
    )?;
    api.method_checked(
        method::INVOKE,
        "Runs one tool call and returns its envelope; tool failures are ok:false results.",
        |host, p: InvokeParams, _| async move {
            crate::invoke::invoke(&host, p, UpdateSink::default(), None).await
        },
    )?;
    api.method(
        method::INVOKE_RESPOND,
        "Answers an `input_request` event of a call in flight (from any connection): `result`, the MCP result of the request's kind, or `error`.",
        |host, p: RespondParams| async move { respond(&host, p) },
    )?;
    api.method(
        method::CANCEL,
        "Cancels a call in flight (from any connection).",
        |host, p: CancelParams| async move {
            Ok(CancelResult {
                cancelled: host.calls().cancel(&p.call_id),
            })
        },
    )?;
    api.method(
        method::HEALTH,
        "Liveness and a summary of the host's state.",
        |host, _: EmptyParams| async move { Ok(super::ops::health(&host)) },
    )?;
    api.method(
        method::STATUS,
        "Everything an operator looks at: health, config, MCP servers, custom tools, calls in flight.",
        |host, _: EmptyParams| async move { Ok(super::ops::status(&host)) },
    )?;
    api.method(
        method::CONFIG_STATUS,
        "Which config file is live, when it was applied, and the last error.",
        |host, _: EmptyParams| async move { Ok(reload::status(&host)) },
    )?;
    api.method(
        method::CONFIG_RELOAD,
        "Reads config.json now and applies it (same path as the file watcher and SIGHUP).",
        |host, _: EmptyParams| async move { Ok(reload::reload(&host).await) },
    )?;
    api.method(
        method::MCP_STATUS,
        "State of each MCP server (or one).",
        |host, p: McpServerParams| async move {
            if let Some(name) = &p.server {
                host.mcp().known(name)?;
            }
            Ok(McpStatusResult {
                servers: host.mcp().status(p.server.as_deref()),
            })
        },
    )?;
    api.method(
        method::MCP_RELOAD,
        "Reconnects one MCP server, or all.",
        |host, p: McpServerParams| async move {
            if host.mcp().reconnect(p.server.as_deref()) == 0 {
                if let Some(name) = p.server {
                    return Err(UnknownServer::live(&name).into());
                }
            }
            Ok(McpStatusResult {
                servers: host.mcp().status(None),
            })
        },
    )?;
    api.method(method::MCP_ADD, "Adds an MCP server to config.json (atomic write, other keys kept); the reload that follows starts it.", |host, p: McpAddParams| async move {
        reload::edit_mcp_server(&host, p.name, Some(p.server)).await?;
        Ok(OkResult { ok: true })
    })?;
    api.method(
        method::MCP_REMOVE,
        "Removes an MCP server from config.json; the reload that follows stops it.",
        |host, p: McpRemoveParams| async move {
            if !reload::edit_mcp_server(&host, p.name.clone(), None).await? {
                return Err(UnknownServer::in_config_file(&p.name).into());
            }
            Ok(OkResult { ok: true })
        },
    )?;
    api.method(
        method::MCP_LOGIN,
        "OAuth sign-in to an HTTP MCP server, in two calls. With redirect_uri: discovery, registration and PKCE in the daemon; returns the authorization URL for the caller's browser. With callback_url (where the browser came back): exchanges the code, stores the tokens, reconnects the server.",
        |host, p: McpLoginParams| async move {
            let url = match (p.redirect_uri, p.callback_url) {
                (Some(redirect), None) => host
                    .mcp()
                    .login(&p.name, &redirect)
                    .await
                    .map_err(login_error)?,
                (None, Some(callback)) => {
                    host.mcp()
                        .login_callback(&p.name, &callback)
                        .await
                        .map_err(login_error)?;
                    None
                }
                _ => {
                    return Err(Error::InvalidParams(
                        "give exactly one of redirect_uri (start) or callback_url (finish)".into(),
                    ))
                }
            };
            Ok(McpLoginResult {
                authorization_url: url,
            })
        },
    )?;
    api.method(
        method::MCP_LOGOUT,
        "Forgets an MCP server's OAuth tokens and reconnects it; ok is whether there were any.",
        |host, p: McpRemoveParams| async move {
            let had = host.mcp().logout(&p.name).map_err(login_error)?;
            Ok(OkResult { ok: had })
        },
    )?;
    session_methods(&mut api)?;
    catalog_methods(&mut api)?;

    subscribe_invoke(&mut api)?;
    subscribe_tools_changed(&mut api)?;
    surface::register(&mut api)?;
    skills::register(&mut api)?;
    commands::register(&mut api)?;
    checkpoint::register(&mut api)?;
    approvals::register(&mut api)?;
    fleet::register(&mut api)?;
    trust::register(&mut api)?;
    guards::register(&mut api)?;
    ui::register(&mut api, access)?;

    // rpc.discover documents itself too, then serves the finished document.
    api.docs.push(Box::new(|| {
        openrpc::method::<EmptyParams, Value>(method::DISCOVER, "This OpenRPC document.")
    }));
    let docs = std::mem::take(&mut api.docs);
    let doc = OnceLock::new();
    let discover: Plain = Arc::new(move |_: &Arc<Peer>, _: Option<&str>, id| {
        let doc = doc.get_or_init(|| {
            let methods: Vec<MethodDoc> = docs.iter().map(|write| write()).collect();
            openrpc::document(&methods)
        });
        let answer = reply(id, doc);
        async move { answer }.boxed()
    });
    api.plain.insert(method::DISCOVER, discover);
    Ok(Methods {
        plain: api.plain,
        subscriptions: api.subscriptions,
        unsubscribes: api.unsubscribes,
    })
}

/// A `list_tools` answer: the live list as the snapshot cached it (written into the reply
/// as it is), or a session's view.
enum ListAnswer {
    Live(Arc<crate::registry::Snapshot>, ListToolsParams),
    View(Box<RawValue>),
}

impl Serialize for ListAnswer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ListAnswer::Live(snapshot, p) => snapshot
                .list_json(p.format, p.include_hidden, p.include_deferred)
                .serialize(s),
            ListAnswer::View(json) => json.serialize(s),
        }
    }
}

async fn list_tools(host: &Host, p: ListToolsParams) -> Result<ListAnswer, Error> {
    let snapshot = host.registry().snapshot();
    let config = host.config();
    if let Some(name) = &p.profile {
        config
            .profile(name)
            .map_err(|e| Error::InvalidParams(e.to_string()))?;
    }
    let asked = config.view(p.profile.as_deref());
    let session = match &p.session_id {
        Some(id) => Some(host.sessions().get(id).await?),
        None => None,
    };
    let own = session
        .as_ref()
        .map(|s| config.session_view(s.profile.as_deref(), &s.meta));
    // What the caller is served (the code tool declares it): the views, and custom tools of
    // the session's workspace (else of none).
    let workspace = session.as_ref().map(|s| std::path::Path::new(&s.workspace));
    let serves = |e: &crate::registry::Entry| {
        crate::session::serves(&asked, e)
            && own.as_ref().is_none_or(|o| crate::session::serves(o, e))
            && e.tool
                .workspace_scope()
                .is_none_or(|w| Some(w) == workspace)
    };
    // What is listed of what is served: the code tools alone where the view says so
    // (`code_mode.only`); the code tool declares the rest.
    let lists = |e: &crate::registry::Entry| {
        serves(e)
            && crate::session::lists(&asked, e)
            && own.as_ref().is_none_or(|o| crate::session::lists(o, e))
    };
    let names: Vec<&str> = match &session {
        // The cached whole listing, unless it holds code tools that this view does not
        // serve (code mode on for a profile only) or lists them alone.
        None if p.profile.is_none()
            && !asked.code_only()
            && (asked.code_mode() || !crate::code::registered(&snapshot)) =>
        {
            return Ok(ListAnswer::Live(snapshot, p))
        }
        None => snapshot
            .listed(p.include_hidden, p.include_deferred)
            .filter(|(_, e)| crate::session::lists(&asked, e))
            .map(|(n, _)| n)
            .collect(),
        // The live list as the session is served it (an MCP connection's), with the
        // deferred tools its frontend found (`tools.describe`).
        Some(session) if p.live => {
            let found = session
                .frontend_id()
                .map(|f| host.frontends().found(f))
                .unwrap_or_default();
            snapshot
                .listed(p.include_hidden, true)
                .filter(|(n, _)| {
                    p.include_deferred || !snapshot.is_deferred(n) || found.iter().any(|f| f == n)
                })
                .filter(|(_, e)| lists(e))
                .map(|(n, _)| n)
                .collect()
        }
        Some(session) => {
            let own = own.as_ref().unwrap_or(&asked);
            // The view, then the tools this session loaded through tool_search.
            session
                .tool_names
                .iter()
                .chain(session.loaded_tools.iter())
                .filter_map(|n| snapshot.get(n).map(|e| (n, e)))
                .filter(|(_, e)| p.include_hidden || !e.hidden())
                .filter(|(_, e)| crate::session::lists(&asked, e) && crate::session::lists(own, e))
                .map(|(n, _)| n.as_str())
                .collect()
        }
    };
    serde_json::value::to_raw_value(&snapshot.list_in(&names, p.format, &serves))
        .map(ListAnswer::View)
        .map_err(Error::server)
}

fn catalog_methods(api: &mut Api) -> anyhow::Result<()> {
    api.method_checked(
        method::TOOLS_SEARCH,
        "Ranks deferred tools by relevance to a query (BM25, or a regex) and returns full definitions; with session_id, the matches are remembered as loaded in that session.",
        |host, p: ToolsSearchParams, _| async move {
            let snapshot = host.registry().snapshot();
            let profile = match &p.session_id {
                Some(id) => host.sessions().get(id).await?.profile,
                None => None,
            };
            let config = host.config();
            let view = config.view(profile.as_deref());
            let result = snapshot.search(&p.query, p.limit, p.format, |e| {
                crate::session::serves(&view, e)
            });
            if let Some(id) = &p.session_id {
                let found: Vec<String> = result.matches.iter().map(|m| m.name.clone()).collect();
                crate::session::remember_loaded(host.sessions(), id, found).await?;
            }
            Ok(result)
        },
    )?;
    api.method_checked(
        method::TOOLS_DESCRIBE,
        "Records that a session's frontend was given these tools' full definitions (an MCP client's tools/describe): the deferred ones among them are listed to every session of that frontend from then on (list_tools with live). A name the session is not served is invalid.",
        |host, p: ToolsDescribeParams, _| async move {
            let session = host.sessions().get(&p.session_id).await?;
            let snapshot = host.registry().snapshot();
            let config = host.config();
            let view = config.session_view(session.profile.as_deref(), &session.meta);
            let unknown: Vec<&str> = p
                .names
                .iter()
                .filter(|n| {
                    snapshot
                        .get(n)
                        .is_none_or(|e| !crate::session::serves(&view, e))
                })
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                return Err(Error::InvalidParams(format!(
                    "no such tool for this session: {}",
                    unknown.join(", ")
                )));
            }
            let found: Vec<String> = p
                .names
                .into_iter()
                .filter(|n| snapshot.is_deferred(n))
                .collect();
            if let Some(f) = session
                .frontend_id()
                .and_then(|id| host.frontends().find(id, &found))
            {
                host.frontends().keep(host.sessions(), f).await;
            }
            Ok(ToolsDescribeResult { found })
        },
    )?;
    api.method(
        method::TOOLS_APPROVE,
        "Accepts a quarantined tool's current definition (pins it) and lists the tool again; for a workspace tool or module that waits for workspace trust under that name, approves it there (trust.approve).",
        |host, p: ToolNameParams| async move {
            let pinned = host.registry().approve(&p.name);
            if pinned.is_err() {
                let name = p.name.clone();
                let admitted =
                    trust::off_runtime(&host, move |t| t.approve_tool_named(&name)).await?;
                if !admitted.is_empty() {
                    trust::rescan(&host).await;
                    return Ok(ToolsApproveResult {
                        revision: host.registry().snapshot().revision(),
                        name: p.name,
                    });
                }
            }
            let revision = pinned.map_err(Error::InvalidParams)?;
            Ok(ToolsApproveResult {
                name: p.name,
                revision,
            })
        },
    )?;
    api.method(
        method::TOOLS_PINS_RESET,
        "Moves a damaged pins.json aside and pins every tool afresh; refused while the pin file is sound.",
        |host, _: EmptyParams| async move {
            let (aside, revision) = host
                .registry()
                .reset_pins()
                .map_err(Error::InvalidParams)?;
            Ok(ToolsPinsResetResult {
                moved_to: aside.display().to_string(),
                revision,
            })
        },
    )?;
    api.method_checked(
        method::TOOLS_DIFF,
        "A tool's pinned definition against its current one (as a unified diff too), its quarantine if any, and for a workspace tool or module waiting for trust its files against the approved ones (as trust.diff; not for a process the host started).",
        |host, p: ToolNameParams, peer| async move {
            let name = p.name.clone();
            let files = match peer.host_started() {
                true => None,
                false => {
                    trust::off_runtime(&host, move |t| t.diff_tool_named(&name).transpose())
                        .await?
                }
            };
            match host.registry().pin_diff(&p.name) {
                Some(d) => Ok(ToolsDiffResult { files, ..d }),
                None if files.is_some() || host.trust().waiting_tool(&p.name).is_some() => {
                    Ok(ToolsDiffResult {
                        name: p.name,
                        quarantine: None,
                        pinned: None,
                        current: None,
                        diff: String::new(),
                        files,
                    })
                }
                None => Err(Error::InvalidParams(format!("no tool named '{}'", p.name))),
            }
        },
    )?;
    Ok(())
}

/// A session's workspace brings its `.toolhost/tools/` (custom/mod.rs), its skill folders
/// (skills/mod.rs) and its `.toolhost/commands/` (commands/mod.rs) while a session is in it:
/// scanned before the session is answered, so its view and the caller's next `list_tools`,
/// `list_skills` and `list_commands` show what is there; gone with its last session.
async fn place_session(host: &Host, id: &str, workspace: Option<&str>) {
    let placed = (Holder::Session(id.to_owned()), workspace.map(PathBuf::from));
    reload::place_sessions(host, vec![placed]).await;
}

fn session_methods(api: &mut Api) -> anyhow::Result<()> {
    api.method_checked(
        method::SESSION_CREATE,
        "Creates a session; records the tools visible now as its view.",
        |host, mut p: SessionCreateParams, peer| async move {
            let workspace =
                crate::session::workspace_of(&host.session_scope(), p.workspace.clone())?;
            let frontend = host.frontends().identify(&mut p, &workspace);
            // The project's tools are searched first, so the view records those approved;
            // the creation holds the workspace until the session (if made) takes it over.
            let creating = crate::lock(host.session_workspaces()).creating();
            let held = vec![(creating.clone(), Some(PathBuf::from(&workspace)))];
            reload::place_sessions(&host, held).await;
            let made = crate::session::create(&host.session_scope(), p).await;
            let mut handed = vec![(creating, None)];
            if let Ok(s) = &made {
                handed.insert(
                    0,
                    (
                        Holder::Session(s.id.clone()),
                        Some(s.workspace.clone().into()),
                    ),
                );
            }
            reload::place_sessions(&host, handed).await;
            let s = made?;
            peer.created(&s);
            host.frontends().saw(&s);
            host.frontends().keep(host.sessions(), frontend).await;
            session_event(&host, SessionEvent::Start, &s.id, &s.workspace);
            Ok(s)
        },
    )?;
    api.method_checked(
        method::SESSION_GET,
        "One session by id.",
        |host, p: SessionIdParams, _| async move { host.sessions().get(&p.id).await },
    )?;
    api.method(
        method::SESSION_LIST,
        "Sessions, newest first, paged with `after` = the previous page's `next`.",
        |host, p: SessionListParams| async move {
            let limit = p.limit.unwrap_or(50).clamp(1, 1000);
            let (sessions, next) = host.sessions().list(limit, p.after.as_deref()).await?;
            Ok(SessionListResult { sessions, next })
        },
    )?;
    api.method_checked(
        method::SESSION_UPDATE,
        "Merges meta key by key (null deletes), sets approval or workspace.",
        |host, p: SessionUpdateParams, _| async move {
            let s = crate::session::update(&host.session_scope(), p).await?;
            host.frontends().saw(&s);
            place_session(&host, &s.id, Some(&s.workspace)).await;
            Ok(s)
        },
    )?;
    api.method_checked(
        method::SESSION_DELETE,
        "Deletes a session.",
        |host, p: SessionIdParams, peer| async move {
            let deleted = delete_session(&host, &p.id).await?;
            peer.ended(&p.id);
            Ok(DeletedResult { deleted })
        },
    )?;
    api.method_checked(
        method::SESSION_TOOLS,
        "The session's stable tool view (openai format); `unchanged` when `if_etag` matches.",
        |host, p: SessionToolsParams, _| async move {
            crate::session::tools(&host.session_scope(), p).await
        },
    )?;
    api.method_checked(
        method::SESSION_RESUME,
        "Merges the persisted tool names with the live tools and persists the result.",
        |host, p: SessionIdParams, _| async move {
            let r = crate::session::resume(&host.session_scope(), &p.id).await?;
            let ws = host.sessions().get(&p.id).await.map(|s| s.workspace);
            let ws = ws.unwrap_or_else(|_| host.workspace().display().to_string());
            session_event(&host, SessionEvent::Resume, &p.id, &ws);
            Ok(r)
        },
    )?;
    api.method_checked(
        method::SESSION_REFRESH_TOOLS,
        "Moves the session's view to the live registry.",
        |host, p: SessionIdParams, _| async move {
            crate::session::refresh_tools(&host.session_scope(), &p.id).await
        },
    )?;
    Ok(())
}

/// Tells custom tools that asked for it about a session event, off the caller's path.
/// Ends session `id`: `session.delete`, and a connection's end for the ephemeral sessions
/// it made (`connection.rs`). False when there was no such session.
pub(super) async fn delete_session(host: &Host, id: &str) -> Result<bool, Error> {
    // The workspace is read first: the handler may clean up files there.
    let workspace = host.sessions().get(id).await.ok().map(|s| s.workspace);
    let deleted = host.sessions().delete(id).await?;
    host.frontends().ended(id);
    host.approvals().forget_session(id);
    host.mcp().session_ended(id);
    place_session(host, id, None).await;
    if deleted {
        let ws = workspace.unwrap_or_else(|| host.workspace().display().to_string());
        session_event(host, SessionEvent::Delete, id, &ws);
    }
    Ok(deleted)
}

fn session_event(host: &Host, event: SessionEvent, id: &str, workspace: &str) {
    host.custom().session_event(
        host.tracker(),
        event,
        Some(id),
        std::path::Path::new(workspace),
    );
}

/// `invoke.respond`: hands an answer to the question of a call in flight.
fn respond(host: &Host, p: RespondParams) -> Result<RespondResult, Error> {
    let answer = match (p.result, p.error) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error),
        _ => {
            return Err(Error::InvalidParams(
                "give exactly one of result and error".into(),
            ))
        }
    };
    let inputs = host
        .calls()
        .inputs(&p.call_id)
        .ok_or_else(|| Error::InvalidParams(format!("no call {:?} in flight", p.call_id)))?;
    inputs.respond(&p.request_id, answer)?;
    Ok(RespondResult { accepted: true })
}

fn subscribe_invoke(api: &mut Api) -> anyhow::Result<()> {
    api.subscription_checked::<SubscribeInvokeParams, InvokeEvent, _, _>(
        [method::SUBSCRIBE_INVOKE, method::INVOKE_EVENT, method::UNSUBSCRIBE_INVOKE],
        "Runs a call and streams its partial results, then exactly one `result` event. Unsubscribing or closing the connection cancels the call. WebSocket and newline framing only.",
        |host, p: SubscribeInvokeParams| async move {
            // An unknown session or a call_id in use is a protocol error, answered before the
            // subscription exists (the call's own check stays the authority on a race).
            if let Some(id) = &p.call.session_id {
                host.sessions().get(id).await?;
            }
            if let Some(id) = p.call.call_id.as_deref().filter(|id| host.calls().is_running(id)) {
                return Err(crate::invoke::call_id_in_use(id));
            }
            Ok(subscription::stream(move |sink| stream_invoke(host, p, sink)))
        },
    )
}

/// Runs one call, sending its updates and then its one result; dropped (unsubscribed, or
/// the connection ended), it cancels the call.
async fn stream_invoke(host: Host, p: SubscribeInvokeParams, sink: Sink) {
    let SubscribeInvokeParams {
        call: mut p,
        inputs,
    } = p;
    let call_id = p
        .call_id
        .get_or_insert_with(crate::invoke::new_call_id)
        .clone();
    let (tx, mut rx) = mpsc::channel(256);
    let (events_tx, mut events) = mpsc::channel(64);
    let stream = crate::invoke::Stream {
        events: events_tx,
        inputs,
    };
    let call = crate::invoke::invoke(&host, p, UpdateSink::new(tx), Some(stream));
    tokio::pin!(call);
    let update = |u: crate::registry::ToolUpdate, call_id: &str| {
        InvokeEvent::Update(InvokeUpdate {
            call_id: call_id.to_owned(),
            content: u.content,
            details: u.details,
            progress: u.progress,
        })
    };
    loop {
        tokio::select! {
            r = &mut call => {
                let envelope = match r {
                    Ok(env) => env,
                    Err(e) => return sink.fail(rpc_error(e).message()).await,
                };
                while let Ok(u) = rx.try_recv() {
                    if !sink.send(&update(u, &envelope.call_id)).await {
                        return;
                    }
                }
                // Log messages sent before the result (no question outlives its call).
                while let Ok(e) = events.try_recv() {
                    if !sink.send(&e).await {
                        return;
                    }
                }
                sink.send(&InvokeEvent::Result(envelope)).await;
                return;
            }
            // A slow reader loses updates, never the call or the connection.
            Some(u) = rx.recv() => sink.try_send(&update(u, &call_id)),
            // A question waits for room (its asker waits for the answer anyway); a log
            // message is dropped like an update.
            Some(e) = events.recv() => match e {
                InvokeEvent::InputRequest(_) => if !sink.send(&e).await { return },
                _ => sink.try_send(&e),
            },
            _ = sink.closed() => return,
        }
    }
}

fn subscribe_tools_changed(api: &mut Api) -> anyhow::Result<()> {
    api.subscription::<EmptyParams, ToolsChanged, _, _>(
        [
            method::SUBSCRIBE_TOOLS_CHANGED,
            method::TOOLS_CHANGED,
            method::UNSUBSCRIBE_TOOLS_CHANGED,
        ],
        "A notification whenever the live registry changes. WebSocket and newline framing only.",
        |host, _: EmptyParams| async move {
            // Subscribed before the reply goes out: no change after it is missed.
            Ok(forward(host.registry().subscribe(), method::TOOLS_CHANGED))
        },
    )
}

/// A change-notification stream: every message of `rx` to the subscriber, until either
/// side ends (see [`subscription::relay`]).
fn forward<N>(mut rx: broadcast::Receiver<N>, what: &'static str) -> Stream
where
    N: Serialize + Clone + Send + Sync + 'static,
{
    subscription::stream(move |sink: Sink| async move {
        subscription::relay(&mut rx, &sink, what, Some).await;
    })
}
