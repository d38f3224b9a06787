//! The one Rust client of the daemon: typed, multiplexed, with subscriptions.
//!
//! One newline-JSON connection carries any number of calls in flight at once: a reader
//! task routes each response to its caller by id and each notification to its
//! subscription. The CLI, the integration tests, the benchmark and the MCP facade all talk
//! to the daemon through it, with the [`crate::protocol`] types.

mod connection;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::{self, method, *};

pub use connection::Connection;

/// How long a call waits for its answer unless told otherwise. Tool calls carry their own
/// deadline (`timeout_ms`), and the wait is extended to cover it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(150);

/// Why a call failed; scripts map each kind to an exit code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("no toolhost daemon is answering on {path}: {reason}\nstart one with `toolhost serve` (or pass --socket / set TOOLHOST_SOCKET)")]
    NoDaemon { path: PathBuf, reason: String },
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("no answer to {method} within {after:?}")]
    Timeout { method: String, after: Duration },
    #[error("connection to the daemon failed: {0}")]
    Io(String),
    /// The connection was gone before the request could be sent: the daemon never saw it.
    #[error("connection to the daemon failed before the request was sent: {0}")]
    NotSent(String),
    #[error("the daemon's answer does not match the protocol: {0}")]
    Decode(String),
}

impl ClientError {
    /// The JSON-RPC error code, for errors the daemon answered with.
    pub fn code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The socket a client should use when none is given: `TOOLHOST_SOCKET`, else config
/// `listen.socket` (read from `config` without evaluating the rest of the file), else the
/// default location — the same resolution as the daemon's.
pub fn default_socket(explicit: Option<&Path>, config: Option<&Path>) -> PathBuf {
    let configured = configured_socket(explicit, config);
    protocol::socket_path(explicit, configured.as_deref())
}

/// Every socket a client tries, in order, when none is given ([`protocol::socket_paths`]):
/// the one named socket, else each default location.
pub fn default_sockets(explicit: Option<&Path>, config: Option<&Path>) -> Vec<PathBuf> {
    let configured = configured_socket(explicit, config);
    protocol::socket_paths(explicit, configured.as_deref())
}

/// Config `listen.socket`, read only when neither `--socket` nor `TOOLHOST_SOCKET` names one.
fn configured_socket(explicit: Option<&Path>, config: Option<&Path>) -> Option<PathBuf> {
    if explicit.is_some() || std::env::var_os("TOOLHOST_SOCKET").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let config = config
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::config::default_path);
    crate::config::socket_from_file(&config).ok().flatten()
}

/// A typed, multiplexed connection to the daemon. Cheap to share: every method takes
/// `&self`, so several calls can be in flight from several tasks.
pub struct Client {
    conn: Connection,
    timeout: Duration,
}

impl Client {
    /// Connects to the daemon on `socket`.
    pub async fn connect(socket: &Path) -> Result<Client, ClientError> {
        Ok(Client {
            conn: Connection::open(socket).await?,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Connects to the first of `sockets` that a daemon answers on; when none does, the
    /// error names each path tried and why it failed.
    pub async fn connect_first(sockets: &[PathBuf]) -> Result<Client, ClientError> {
        let mut failed = Vec::new();
        for socket in sockets {
            match Client::connect(socket).await {
                Ok(c) => return Ok(c),
                Err(ClientError::NoDaemon { path, reason }) => failed.push((path, reason)),
                Err(e) => return Err(e),
            }
        }
        let mut tried = failed.into_iter();
        let Some((path, first)) = tried.next() else {
            return Err(ClientError::NoDaemon {
                path: PathBuf::new(),
                reason: "no socket to try".into(),
            });
        };
        let reason = tried.fold(first, |reason, (other, why)| {
            format!("{reason}; nor on {}: {why}", other.display())
        });
        Err(ClientError::NoDaemon { path, reason })
    }

    /// Whether the daemon closed this client's connection (it went away).
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Resolves once the daemon closed this client's connection.
    pub async fn closed(&self) {
        self.conn.closed().await;
    }

    /// A client over an already connected stream (one end of a socket pair whose other
    /// end the daemon serves).
    pub fn from_stream(stream: tokio::net::UnixStream) -> Client {
        Client {
            conn: Connection::from_stream(stream),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same client with another default wait for answers.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Any method, raw params in and raw result out (for `toolhost call`).
    pub async fn call_raw(&self, method: &str, params: &RawValue) -> Result<String, ClientError> {
        // Not parsed again here: checking a 1,000-tool list as JSON took longer than the
        // daemon took to send it, and every caller parses what it uses anyway.
        self.conn.request(method, params, self.timeout).await
    }

    /// Any method with typed params and result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, ClientError> {
        self.call_within(method, params, self.timeout).await
    }

    async fn call_within<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<R, ClientError> {
        let params = to_raw(params)?;
        let text = self.conn.request(method, &params, timeout).await?;
        serde_json::from_str(&text).map_err(|e| ClientError::Decode(format!("{method}: {e}")))
    }

    /// Sends a notification (a request without an id): it runs, and nothing answers.
    pub async fn notify<P: Serialize>(&self, method: &str, params: &P) -> Result<(), ClientError> {
        self.conn.notify(method, &to_raw(params)?).await
    }

    pub async fn list_tools(
        &self,
        params: &ListToolsParams,
    ) -> Result<ListToolsResult, ClientError> {
        self.call(method::LIST_TOOLS, params).await
    }

    /// Records that the session's frontend was given these tools in full (SEP-2636).
    pub async fn tools_describe(
        &self,
        params: &ToolsDescribeParams,
    ) -> Result<ToolsDescribeResult, ClientError> {
        self.call(method::TOOLS_DESCRIBE, params).await
    }

    /// One tool call; waits at least as long as the call's own deadline.
    pub async fn invoke(&self, params: &InvokeParams) -> Result<InvokeResult, ClientError> {
        self.call_within(method::INVOKE, params, self.invoke_wait(params))
            .await
    }

    /// How long to wait for a call's result: the client's wait, extended to cover the
    /// call's own deadline.
    pub fn invoke_wait(&self, params: &InvokeParams) -> Duration {
        params
            .timeout_ms
            .map(|ms| Duration::from_millis(ms) + Duration::from_secs(5))
            .map_or(self.timeout, |w| w.max(self.timeout))
    }

    /// Answers an `input_request` of a call in flight.
    pub async fn respond(&self, params: &RespondParams) -> Result<RespondResult, ClientError> {
        self.call(method::INVOKE_RESPOND, params).await
    }

    pub async fn cancel(&self, call_id: &str) -> Result<CancelResult, ClientError> {
        let params = CancelParams {
            call_id: call_id.to_owned(),
        };
        self.call(method::CANCEL, &params).await
    }

    pub async fn health(&self) -> Result<HealthResult, ClientError> {
        self.call(method::HEALTH, &EmptyParams {}).await
    }

    /// `host.status`: health, config, servers, custom tools and calls in flight.
    pub async fn status(&self) -> Result<HostStatusResult, ClientError> {
        self.call(method::STATUS, &EmptyParams {}).await
    }

    pub async fn config_status(&self) -> Result<ConfigStatusResult, ClientError> {
        self.call(method::CONFIG_STATUS, &EmptyParams {}).await
    }

    pub async fn config_reload(&self) -> Result<ConfigReloadResult, ClientError> {
        self.call(method::CONFIG_RELOAD, &EmptyParams {}).await
    }

    pub async fn mcp_status(&self, server: Option<&str>) -> Result<McpStatusResult, ClientError> {
        let params = McpServerParams {
            server: server.map(str::to_owned),
        };
        self.call(method::MCP_STATUS, &params).await
    }

    /// Adds an MCP server to config.json; the daemon's reload starts it.
    pub async fn mcp_add(&self, params: &McpAddParams) -> Result<OkResult, ClientError> {
        self.call(method::MCP_ADD, params).await
    }

    /// Removes an MCP server from config.json; the daemon's reload stops it.
    pub async fn mcp_remove(&self, name: &str) -> Result<OkResult, ClientError> {
        let params = McpRemoveParams {
            name: name.to_owned(),
        };
        self.call(method::MCP_REMOVE, &params).await
    }

    /// Reconnects one MCP server (or all) and returns every server's state.
    pub async fn mcp_reload(&self, server: Option<&str>) -> Result<McpStatusResult, ClientError> {
        let params = McpServerParams {
            server: server.map(str::to_owned),
        };
        self.call(method::MCP_RELOAD, &params).await
    }

    pub async fn session_create(
        &self,
        params: &SessionCreateParams,
    ) -> Result<Session, ClientError> {
        self.call(method::SESSION_CREATE, params).await
    }

    pub async fn session_get(&self, id: &str) -> Result<Session, ClientError> {
        self.call(method::SESSION_GET, &SessionIdParams { id: id.to_owned() })
            .await
    }

    pub async fn session_list(
        &self,
        params: &SessionListParams,
    ) -> Result<SessionListResult, ClientError> {
        self.call(method::SESSION_LIST, params).await
    }

    pub async fn session_update(
        &self,
        params: &SessionUpdateParams,
    ) -> Result<Session, ClientError> {
        self.call(method::SESSION_UPDATE, params).await
    }

    pub async fn session_delete(&self, id: &str) -> Result<DeletedResult, ClientError> {
        self.call(
            method::SESSION_DELETE,
            &SessionIdParams { id: id.to_owned() },
        )
        .await
    }

    /// Starts a call and streams its events: updates as they come, then one result.
    pub async fn subscribe_invoke(
        &self,
        params: &InvokeParams,
    ) -> Result<Subscription<InvokeEvent>, ClientError> {
        self.subscribe(method::SUBSCRIBE_INVOKE, method::UNSUBSCRIBE_INVOKE, params)
            .await
    }

    /// Starts a call whose frontend answers the input requests of `params.inputs`
    /// (`input_request` events, answered with [`Client::respond`]).
    pub async fn subscribe_invoke_answering(
        &self,
        params: &SubscribeInvokeParams,
    ) -> Result<Subscription<InvokeEvent>, ClientError> {
        self.subscribe(method::SUBSCRIBE_INVOKE, method::UNSUBSCRIBE_INVOKE, params)
            .await
    }

    /// A `tools_changed` notification whenever the live registry changes.
    pub async fn subscribe_tools_changed(&self) -> Result<Subscription<ToolsChanged>, ClientError> {
        self.subscribe(
            method::SUBSCRIBE_TOOLS_CHANGED,
            method::UNSUBSCRIBE_TOOLS_CHANGED,
            &EmptyParams {},
        )
        .await
    }

    /// The calls waiting in the approval queue.
    pub async fn approvals_list(&self) -> Result<ApprovalsListResult, ClientError> {
        self.call(method::APPROVALS_LIST, &EmptyParams {}).await
    }

    /// Fleet mode: the members and the shared database's health.
    pub async fn fleet_status(&self) -> Result<FleetStatusResult, ClientError> {
        self.call(method::FLEET_STATUS, &EmptyParams {}).await
    }

    /// Fleet mode: a new bearer token for a user.
    pub async fn fleet_token_create(
        &self,
        params: &FleetTokenCreateParams,
    ) -> Result<FleetTokenCreated, ClientError> {
        self.call(method::FLEET_TOKEN_CREATE, params).await
    }

    /// Fleet mode: revokes a user's token on every member.
    pub async fn fleet_token_revoke(
        &self,
        params: &FleetTokenRevokeParams,
    ) -> Result<FleetTokenRevokeResult, ClientError> {
        self.call(method::FLEET_TOKEN_REVOKE, params).await
    }

    /// Fleet mode: every user token made.
    pub async fn fleet_token_list(&self) -> Result<FleetTokenListResult, ClientError> {
        self.call(method::FLEET_TOKEN_LIST, &EmptyParams {}).await
    }

    /// The guards' rules and counters.
    pub async fn guards_status(&self) -> Result<GuardsStatusResult, ClientError> {
        self.call(method::GUARDS_STATUS, &EmptyParams {}).await
    }

    /// Clears a guard rule's counters (of one scope, or all).
    pub async fn guards_reset(
        &self,
        params: &GuardsResetParams,
    ) -> Result<GuardsResetResult, ClientError> {
        self.call(method::GUARDS_RESET, params).await
    }

    /// Decides a call waiting in the approval queue.
    pub async fn approvals_decide(
        &self,
        params: &ApprovalsDecideParams,
    ) -> Result<DecidedApproval, ClientError> {
        self.call(method::APPROVALS_DECIDE, params).await
    }

    /// The approval queue's events: the calls waiting now, then every change.
    pub async fn subscribe_approvals(&self) -> Result<Subscription<ApprovalEvent>, ClientError> {
        self.subscribe(
            method::SUBSCRIBE_APPROVALS,
            method::UNSUBSCRIBE_APPROVALS,
            &EmptyParams {},
        )
        .await
    }

    pub async fn list_prompts(
        &self,
        params: &SurfaceListParams,
    ) -> Result<ListPromptsResult, ClientError> {
        self.call(method::LIST_PROMPTS, params).await
    }

    pub async fn get_prompt(
        &self,
        params: &GetPromptParams,
    ) -> Result<GetPromptResult, ClientError> {
        self.call(method::GET_PROMPT, params).await
    }

    pub async fn list_resources(
        &self,
        params: &SurfaceListParams,
    ) -> Result<ListResourcesResult, ClientError> {
        self.call(method::LIST_RESOURCES, params).await
    }

    pub async fn list_resource_templates(
        &self,
        params: &SurfaceListParams,
    ) -> Result<ListResourceTemplatesResult, ClientError> {
        self.call(method::LIST_RESOURCE_TEMPLATES, params).await
    }

    pub async fn read_resource(
        &self,
        params: &ReadResourceParams,
    ) -> Result<ReadResourceResult, ClientError> {
        self.call(method::READ_RESOURCE, params).await
    }

    pub async fn complete(&self, params: &CompleteParams) -> Result<CompleteResult, ClientError> {
        self.call(method::COMPLETE, params).await
    }

    /// A `resource_updated` notification whenever the resource's server says it changed.
    pub async fn subscribe_resource(
        &self,
        params: &ResourceParams,
    ) -> Result<Subscription<ResourceUri>, ClientError> {
        self.subscribe(
            method::SUBSCRIBE_RESOURCE,
            method::UNSUBSCRIBE_RESOURCE,
            params,
        )
        .await
    }

    /// A `prompts_changed` notification whenever the live prompts change.
    pub async fn subscribe_prompts_changed(
        &self,
    ) -> Result<Subscription<PromptsChanged>, ClientError> {
        self.subscribe(
            method::SUBSCRIBE_PROMPTS_CHANGED,
            method::UNSUBSCRIBE_PROMPTS_CHANGED,
            &EmptyParams {},
        )
        .await
    }

    /// A `resources_changed` notification whenever the live resources or templates change.
    pub async fn subscribe_resources_changed(
        &self,
    ) -> Result<Subscription<ResourcesChanged>, ClientError> {
        self.subscribe(
            method::SUBSCRIBE_RESOURCES_CHANGED,
            method::UNSUBSCRIBE_RESOURCES_CHANGED,
            &EmptyParams {},
        )
        .await
    }

    async fn subscribe<P: Serialize, N: Notification>(
        &self,
        subscribe: &str,
        unsubscribe: &'static str,
        params: &P,
    ) -> Result<Subscription<N>, ClientError> {
        let (id, rx) = self
            .conn
            .subscribe(subscribe, &to_raw(params)?, self.timeout)
            .await?;
        Ok(Subscription {
            id,
            rx,
            conn: self.conn.clone(),
            unsubscribe,
            ended: false,
            _item: std::marker::PhantomData,
        })
    }
}

/// The notifications of one subscription. Dropping it unsubscribes (which, for
/// `subscribe_invoke`, cancels the call).
pub struct Subscription<N> {
    id: Box<RawValue>,
    rx: mpsc::UnboundedReceiver<Box<RawValue>>,
    conn: Connection,
    unsubscribe: &'static str,
    /// The daemon sent the last notification and ended the subscription itself.
    ended: bool,
    _item: std::marker::PhantomData<fn() -> N>,
}

/// A subscription's notification.
pub trait Notification: DeserializeOwned {
    /// Whether the daemon ends the subscription after this one (so there is nothing left
    /// to unsubscribe).
    fn is_last(&self) -> bool {
        false
    }
}

impl Notification for InvokeEvent {
    fn is_last(&self) -> bool {
        matches!(self, InvokeEvent::Result(_))
    }
}

impl Notification for ToolsChanged {}
impl Notification for ApprovalEvent {}
impl Notification for PromptsChanged {}
impl Notification for ResourcesChanged {}
impl Notification for ResourceUri {}

impl<N: Notification> Subscription<N> {
    /// The next notification; `None` once the daemon ended the subscription or the
    /// connection closed.
    pub async fn next(&mut self) -> Option<Result<N, ClientError>> {
        let raw = self.rx.recv().await?;
        let item = serde_json::from_str::<N>(raw.get());
        self.ended |= item.as_ref().is_ok_and(N::is_last);
        Some(item.map_err(|e| ClientError::Decode(e.to_string())))
    }

    /// Ends the subscription now and waits for the daemon to confirm.
    pub async fn unsubscribe(self) -> Result<bool, ClientError> {
        // Unsubscribe takes the subscription id positionally: `[id]`.
        let params = format!("[{}]", self.id.get());
        let params =
            RawValue::from_string(params).map_err(|e| ClientError::Decode(e.to_string()))?;
        let text = self
            .conn
            .request(self.unsubscribe, &params, DEFAULT_TIMEOUT)
            .await?;
        serde_json::from_str(&text).map_err(|e| ClientError::Decode(e.to_string()))
    }
}

impl Subscription<InvokeEvent> {
    /// Collects the call's updates and waits for its one result (a call that asks
    /// nothing: its subscriber listed no `inputs`; log messages are skipped).
    pub async fn finish(mut self) -> Result<(Vec<InvokeUpdate>, InvokeResult), ClientError> {
        let mut updates = Vec::new();
        while let Some(event) = self.next().await {
            match event? {
                InvokeEvent::Update(u) => updates.push(u),
                InvokeEvent::Result(r) => return Ok((updates, r)),
                InvokeEvent::InputRequest(_) | InvokeEvent::Log(_) => {}
            }
        }
        Err(ClientError::Io(
            "the subscription ended without a result".into(),
        ))
    }
}

impl<N> Drop for Subscription<N> {
    fn drop(&mut self) {
        // An ended subscription is only routed no more; a live one is unsubscribed too.
        let unsubscribe = (!self.ended).then_some(self.unsubscribe);
        self.conn.forget(&self.id, unsubscribe);
    }
}

fn to_raw<P: Serialize>(params: &P) -> Result<Box<RawValue>, ClientError> {
    serde_json::value::to_raw_value(params).map_err(|e| ClientError::Decode(e.to_string()))
}
