//! `host.health`, `mcp.*` and `config.*`: what operators and scripts ask the host.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `ok`, or `degraded` while something needs the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
    Degraded,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpCounts {
    pub ready: usize,
    pub failed: usize,
    pub connecting: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthResult {
    /// `degraded` while a config error, a tool-name collision, a failed MCP server, a
    /// quarantined tool, a workspace item waiting for trust, a damaged pin or trust file or
    /// damaged guard counters are outstanding.
    pub status: HealthStatus,
    pub version: String,
    pub uptime_s: u64,
    pub tools: usize,
    pub sessions: u64,
    /// The frontends' sessions that work in the daemon's workspace because their frontend
    /// named none (no roots, no `--workspace`, started in `/` or the home directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without_workspace: Vec<FrontendWithoutWorkspace>,
    pub mcp: McpCounts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// Tool names claimed by more than one source (the earlier source keeps the name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collisions: Vec<String>,
    /// The same clashes with both owners, one entry per name lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clashes: Vec<NameClash>,
    /// Custom tool manifests that were skipped: `<file>: <field>: <problem>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_tool_errors: Vec<String>,
    /// Recent failures of custom tools' session-event runs (they never block a session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session_event_errors: Vec<String>,
    /// Skills skipped, or files left out of one: `<file>: <field>: <reason>`; and names
    /// defined twice (two folders, MCP servers, or a folder and a server): which one is
    /// used and why (proto-docs/skills.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_errors: Vec<String>,
    /// Command files skipped: `<file>: <field>: <reason>`; and names defined twice, with
    /// both paths (proto-docs/commands.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_errors: Vec<String>,
    /// What the kernel's Landlock can enforce (proto-docs/sandbox.md).
    pub sandbox: super::SandboxStatus,
    /// The JS/TS tool modules' host (proto-docs/modules.md); absent while no module was
    /// ever found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_host: Option<ModuleHostHealth>,
    /// Tool modules, or tools of one, that were skipped: `<file>: <reason>` (a load error,
    /// a factory result that is not a tool, a duplicate name, a schema zod cannot convert).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub module_errors: Vec<String>,
    /// Tools held back until approved (`toolhost tools diff NAME`, then `tools approve NAME`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<String>,
    /// Why `pins.json` cannot be read, naming it: every pinned tool is quarantined until
    /// the file is repaired or `tools.pins_reset` moves it aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins_error: Option<String>,
    /// What the workspaces bring and wait for the user's trust (`toolhost trust`,
    /// proto-docs/trust.md): not loaded, run, listed or shown to a model until approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trust_waiting: Vec<super::TrustItem>,
    /// Why `trust.json` cannot be read, naming it: nothing it held is trusted meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_error: Option<String>,
    /// Stored `daily` counters of the guards that cannot be read, naming the fix: the
    /// rules they belong to refuse their calls until then (proto-docs/guards.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guard_errors: Vec<String>,
    /// Fleet mode: the shared database as this member sees it (unreachable: `degraded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::FleetHealth>,
}

/// A frontend's session in the daemon's workspace, as `host.health` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FrontendWithoutWorkspace {
    pub session: String,
    /// The client as it named itself (`clientInfo` name and version), else the kind of
    /// frontend (`mcp`, `cli`).
    pub client: String,
}

/// The module host as `host.health` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModuleHostHealth {
    /// The `node` it runs on (config `custom_tools.node`, else `node` on `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// That Node's version, once it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_version: Option<String>,
    /// Whether it loads `.ts`/`.mts` modules (type stripping, Node 22.6 or later).
    pub typescript: bool,
    /// The host process, while one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Automatic restarts since the daemon started.
    pub restarts: u64,
    /// How the last host process ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    /// Why the last start failed (no Node found, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_error: Option<String>,
    /// The folder of the host's own pinned zod and TypeBox (`pi.zod`, `pi.typebox`);
    /// absent until `toolhost modules setup` installed them (proto-docs/modules.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<String>,
    /// Modules loaded, and the tools they define (every host's).
    pub modules: usize,
    pub tools: usize,
    /// The hosts of workspaces' approved modules, one per workspace (the fields above
    /// other than `modules`/`tools` are the user's own modules' host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_hosts: Vec<WorkspaceModuleHost>,
}

/// The module host of one workspace's approved modules, confined by that workspace's
/// sandbox, started on first need and stopped when idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceModuleHost {
    pub workspace: String,
    /// The sandbox policy it runs under (at least `workspace-write`).
    pub policy: super::SandboxPolicy,
    /// The host process, while one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub restarts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_error: Option<String>,
    pub modules: usize,
    pub tools: usize,
}

/// A tool name two sources claim. Owners are `builtin`, `custom` or `mcp:<server>`; the
/// first keeps the name (built-ins, then custom tools, then MCP servers in config order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NameClash {
    pub name: String,
    pub kept: String,
    pub dropped: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// How the host talks to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    Stdio,
    Http,
    // The legacy HTTP+SSE transport (`"type": "sse"`; a `url` that fell back to it stays
    // `http`). A plain comment: a doc comment would turn the schema's `enum` into a `oneOf`.
    Sse,
}

/// Where the tools listed for an MCP server come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpToolsFrom {
    // The live connection's listing.
    Live,
    // The server's last listing in this run: it is not connected now (stopped idle,
    // reconnecting).
    LastListing,
    // The listing kept from an earlier run of the daemon: the server has not run since.
    Cache,
}

/// Where an MCP server's supervisor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    Connecting,
    Ready,
    Failed,
    Disabled,
    CircuitOpen,
    // An HTTP server wants OAuth sign-in (`toolhost mcp login NAME`; `last_error` says so).
    // A plain comment: a doc comment would turn the schema's `enum` into a `oneOf`.
    AuthRequired,
    // A lazy server not started yet: its tools come from the last run's listing, its first
    // request starts it.
    NotStarted,
    // Stopped after `idle_stop_s` without a request; the next one starts it again.
    StoppedIdle,
}

impl McpServerState {
    /// Every state, for label sets and checks.
    pub const ALL: [McpServerState; 8] = [
        McpServerState::Connecting,
        McpServerState::Ready,
        McpServerState::Failed,
        McpServerState::Disabled,
        McpServerState::CircuitOpen,
        McpServerState::AuthRequired,
        McpServerState::NotStarted,
        McpServerState::StoppedIdle,
    ];

    /// The wire name, as serialised (a test holds the two together).
    pub fn as_str(self) -> &'static str {
        match self {
            McpServerState::Connecting => "connecting",
            McpServerState::Ready => "ready",
            McpServerState::Failed => "failed",
            McpServerState::Disabled => "disabled",
            McpServerState::CircuitOpen => "circuit_open",
            McpServerState::AuthRequired => "auth_required",
            McpServerState::NotStarted => "not_started",
            McpServerState::StoppedIdle => "stopped_idle",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    pub name: String,
    pub transport: McpTransport,
    pub state: McpServerState,
    pub tools: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected_since: Option<u64>,
    /// The MCP revision of the live connection: `2026-07-28` for a server that answered
    /// `server/discover`, else the version it chose in `initialize`. Absent while not
    /// connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    pub consecutive_failures: u32,
    /// A connected stdio server's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// That process's resident memory, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_kib: Option<u64>,
    /// Milliseconds since the Unix epoch of the start or end of the last request to the
    /// server (a call, a prompt, a resource read, a completion); absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<u64>,
    /// Where the tools listed for the server come from; absent while it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_from: Option<McpToolsFrom>,
    pub restarts: u32,
    /// Times the circuit breaker opened since the server was configured.
    #[serde(default)]
    pub circuit_opens: u32,
    pub in_flight: usize,
    pub queued: usize,
    /// Tool names this server could not get because an earlier source holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collisions: Vec<String>,
    /// Resource URIs and templates this server lists that an earlier server holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_clashes: Vec<super::ResourceClash>,
    /// Who shares one process of the server.
    #[serde(default)]
    pub scope: ServerScope,
    /// A scoped server's processes, the daemon's own (which lists the tools) first. The
    /// server's `pid`, `state` and `rss_kib` are that one's; `queued` also counts calls
    /// waiting for room for a new instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<McpInstanceStatus>,
}

/// Who shares one process of a stdio MCP server (`"scope"` in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServerScope {
    /// One process for every session.
    #[default]
    Shared,
    /// One process per distinct session workspace, run in it.
    PerWorkspace,
    /// One process per session.
    PerSession,
}

impl ServerScope {
    /// Whether processes are started per workspace or session.
    pub fn is_scoped(self) -> bool {
        self != ServerScope::Shared
    }
}

/// One process of a scoped MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpInstanceStatus {
    /// The directory it runs in (its `cwd` and `${WORKSPACE}`).
    pub workspace: String,
    /// The session it serves (`per_session`); absent for the daemon's own instance and for
    /// `per_workspace` instances, which every session of the workspace shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The daemon's own instance: it runs from the start, lists the server's tools, prompts
    /// and resources, and serves calls without a session or from the daemon's workspace.
    pub default: bool,
    pub state: McpServerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The process's resident memory, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Calls routed to it that have not ended.
    pub in_flight: usize,
    /// When a call last started or ended on it, in milliseconds since the Unix epoch;
    /// absent before its first call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpStatusResult {
    pub servers: Vec<McpServerStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpAddParams {
    pub name: String,
    /// The server block, same shape as in config.json.
    pub server: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpRemoveParams {
    pub name: String,
}

/// `mcp.login` is called twice: with `redirect_uri` to start, then with `callback_url`
/// to finish (exactly one of the two each time).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpLoginParams {
    pub name: String,
    /// Start: where the authorization server sends the browser back, the caller's
    /// loopback listener, e.g. `http://127.0.0.1:PORT/callback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_uri: Option<String>,
    /// Finish: the full redirect URL the browser arrived at (`code`, `state`, maybe `iss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpLoginResult {
    /// Start: the URL to open in a browser. Absent when finishing, and when no user step
    /// is needed (client credentials); the server is then reconnecting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigStatusResult {
    pub path: String,
    /// Milliseconds since the Unix epoch of the last successful apply.
    pub loaded_at: u64,
    /// How many configs have been applied since start.
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Warnings of the last read (unknown keys, settings that need a restart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Custom tool manifests that were skipped: `<file>: <field>: <problem>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_tool_errors: Vec<String>,
    /// The folders searched and watched for custom tools, in precedence order (config
    /// paths, the user's, the daemon's workspace's, then each session workspace's).
    #[serde(default)]
    pub custom_tool_folders: Vec<String>,
    /// The directory watched for edits: config.json's own, or while that does not exist,
    /// its nearest existing ancestor (the file is picked up once it appears). Absent: hot
    /// reload is off (SIGHUP and `config.reload` still work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watching: Option<String>,
    /// `facade.tool_manifest`: MCP frontends are offered SEP-2636 tool manifests (what
    /// `toolhost mcp` asks before it declares them).
    #[serde(default)]
    pub tool_manifest: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigReloadResult {
    pub applied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub status: ConfigStatusResult,
}
