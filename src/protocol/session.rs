//! `session.*`: persisted sessions and their stable tool views.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ApprovalMode, OpenAiTool, SessionSandbox};

/// A persisted session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub updated_at: u64,
    pub workspace: String,
    pub approval: ApprovalMode,
    pub meta: Map<String, Value>,
    /// The session's sandbox; unset fields (or all, when absent) follow config `sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SessionSandbox>,
    /// The session's stable tool view.
    pub tool_names: Vec<String>,
    pub tools_etag: String,
    /// Deferred tools loaded through `tool_search` in this session; listed with its view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded_tools: Vec<String>,
    /// The config profile this session is served under: its listings, searches and calls
    /// see only what the profile selects (as config.json defines it now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Made by a frontend for one connection of its own (an MCP facade connection): it
    /// ends with that connection, and a daemon that starts deletes every one left over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ephemeral: bool,
}

/// The session meta key of the frontend a session belongs to: a [`Frontend`]'s `id`, set
/// by the daemon on every session it makes.
pub const META_FRONTEND_ID: &str = "frontend_id";

/// The session meta key of the name of the bearer token its maker presented over TCP
/// (`listen.tokens`); set by the daemon only (a value a client sends is dropped).
pub const META_TOKEN: &str = "tcp_token";

impl Session {
    /// The frontend this session belongs to: the one key for whatever is kept per
    /// frontend (limits, undo), the same for every session of one frontend.
    pub fn frontend_id(&self) -> Option<&str> {
        self.meta.get(META_FRONTEND_ID).and_then(Value::as_str)
    }
}

/// A frontend: one program, for one user, in one project, whatever its connections and
/// sessions (two conversations of one Claude Code in one project are two sessions of one
/// frontend). Its `id` is derived from what makes it that frontend (user, client name,
/// the executables that started the bridge, workspace), so it is the same at every
/// connection and after a restart of the daemon or of the frontend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Frontend {
    /// `f_` and 16 hex digits.
    pub id: String,
    /// `clientInfo` name and version (MCP), else the session meta's `client`, else the kind
    /// of frontend (`cli`); for a program's own session, its process name or `User-Agent`.
    pub client: String,
    /// The workspace its first session was made in.
    pub workspace: String,
    /// The user it runs as (`SO_PEERCRED`; a TCP client of this machine too, from the
    /// kernel's socket tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Over TCP: the name of the bearer token it presented (`listen.tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Its processes, nearest first: those that started the connection's process (the
    /// bridge: the frontend itself, Claude Code, Codex, an editor, and what started it), or
    /// for a program's own session that process itself and what started it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started_by: Vec<FrontendProcess>,
    /// Its live sessions.
    pub sessions: Vec<String>,
    /// Milliseconds since the Unix epoch of its last new session.
    pub last_seen_ms: u64,
    /// Milliseconds since the Unix epoch of its first session (kept across restarts).
    #[serde(default)]
    pub first_seen_ms: u64,
    /// Deferred tools it was given in full (`tools.describe`): listed to each of its
    /// sessions, across its reconnects and the daemon's restarts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found_tools: Vec<String>,
}

/// One process of a [`Frontend`]'s chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FrontendProcess {
    pub pid: i32,
    /// Its executable, when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
}

/// The session meta key that says where a frontend's session got its workspace (a
/// [`WorkspaceFrom`]): `host.health` lists the frontends whose sessions say `daemon`.
pub const META_WORKSPACE_FROM: &str = "workspace_from";

/// Where a frontend's session got its workspace, in the order a frontend's is chosen
/// (proto-docs/sessions.md): the client's MCP roots, else the bridge's `--workspace`, else
/// the directory the frontend started it in, else the daemon's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceFrom {
    /// The first local root the MCP client sent.
    Roots,
    /// `--workspace DIR` of `toolhost mcp` (or of `toolhost invoke|call`).
    Flag,
    /// The working directory `toolhost mcp` (or the CLI) was started in.
    Cwd,
    /// None of those: the daemon's workspace (the frontend started us in `/` or the home
    /// directory itself, sent no roots, or named a directory the daemon cannot read).
    Daemon,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SessionSandbox>,
    /// Serve the session under this config profile (an unknown one is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The session lives only as long as the caller's connection (see [`Session::ephemeral`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ephemeral: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionIdParams {
    pub id: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// Page size (default 50, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The `next` cursor of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionListResult {
    pub sessions: Vec<Session>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionUpdateParams {
    pub id: String,
    /// Merged key by key; a `null` value deletes the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Replaces the session's sandbox whole (`{}` returns to the config's defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SessionSandbox>,
    /// Serves the session under this config profile from now on (an unknown one is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeletedResult {
    pub deleted: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionToolsParams {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_etag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionToolsResult {
    pub etag: String,
    /// True when `if_etag` matched; `tools` is then left out.
    pub unchanged: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<OpenAiTool>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionResumeResult {
    pub session: Session,
    pub tools: Vec<OpenAiTool>,
    pub added: Vec<String>,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionRefreshResult {
    pub etag: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}
