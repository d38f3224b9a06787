//! The typed shape of config.json. Defaults live here, next to the fields.
//!
//! This model *is* the schema: [`super::schema`] derives the JSON Schema from it (the
//! `schemars` attributes below add value constraints, and `x-expected` says in words what a
//! pattern-checked value should look like), validation checks the raw JSON against that,
//! and unknown keys are whatever deserialising into it ignores. A field added here is
//! therefore accepted, checked and documented without touching any other table.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::protocol::ServerScope;
use crate::protocol::{ApprovalClass, ApprovalMode, Network, SandboxPolicy};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Config {
    /// The URL of a JSON Schema for editors; not used by the daemon.
    #[serde(rename = "$schema", skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Root for built-in tools' paths; defaults to the daemon's working directory.
    #[schemars(length(min = 1))]
    pub workspace: Option<PathBuf>,
    /// Sessions and spilled outputs; defaults to `$XDG_STATE_HOME/toolhost`.
    #[schemars(length(min = 1))]
    pub data_dir: Option<PathBuf>,
    pub listen: Listen,
    pub approval: Approval,
    pub limits: Limits,
    pub providers: BTreeMap<String, Provider>,
    /// Keyed by server name, in file order (`mcpServers` in the file is an alias).
    #[schemars(with = "BTreeMap<String, McpServer>")]
    pub mcp_servers: indexmap::IndexMap<String, McpServer>,
    pub custom_tools: CustomTools,
    /// Where Agent Skills are found (proto-docs/skills.md).
    pub skills: Skills,
    /// Where slash commands are found (proto-docs/commands.md).
    pub commands: Commands,
    /// Variables set for every child (`bash`, custom tools, stdio MCP servers), on top of
    /// the allow-list and `env_passthrough`.
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub env: BTreeMap<String, String>,
    /// Names or glob patterns (`*`, `?`) of the daemon's own variables that every child
    /// also inherits (e.g. `HTTPS_PROXY`, `*_PROXY`, `NODE_EXTRA_CA_CERTS`).
    #[schemars(inner(length(min = 1)))]
    pub env_passthrough: Vec<String>,
    /// Kernel-enforced confinement of `bash` and custom tool programs (proto-docs/sandbox.md).
    pub sandbox: SandboxConfig,
    /// What reaches the model: deferred tools and the listing budget (proto-docs/catalog.md).
    pub catalog: Catalog,
    /// The MCP facade's streamable HTTP endpoint `/mcp` (proto-docs/mcp-facade.md).
    pub facade: FacadeConfig,
    /// Named views for frontends: `toolhost mcp --profile NAME`, `/mcp?profile=NAME`, or a
    /// session's `profile` (proto-docs/config.md#profiles).
    #[schemars(extend("propertyNames" = {"pattern": "^[A-Za-z0-9_-]+$"}))]
    pub profiles: BTreeMap<String, Profile>,
    /// Undo: a checkpoint around every call that can change the workspace
    /// (proto-docs/checkpoints.md).
    pub checkpoint: Checkpoint,
    /// Rate limits, budgets and loop breakers on tool calls (proto-docs/guards.md). The
    /// built-in loop breaker `default-loop` applies unless a rule of that name replaces it.
    pub guards: Vec<GuardRule>,
    /// Where the shared state lives: `sled` in the data dir (the default), or PostgreSQL
    /// for fleet mode (proto-docs/fleet.md). Restart-only.
    pub store: Store,
    /// Fleet mode: this daemon is one member of a fleet sharing `store` (proto-docs/fleet.md).
    /// Required with a `postgres` store. Restart-only.
    pub fleet: Option<Fleet>,
    /// Code mode: one tool that runs a program calling the session's tools
    /// (proto-docs/code-mode.md).
    pub code_mode: CodeMode,
}

/// The `store` section: which engine holds the state daemons can share.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Store {
    /// Embedded, in the data dir; nothing is shared.
    #[default]
    Sled,
    /// A PostgreSQL database every member of the fleet names.
    Postgres {
        /// `postgres://user@host:port/db` or `host=… port=… user=… dbname=…`; put the
        /// password in as `${NAME}` (the secrets file or the environment), never inline.
        #[schemars(length(min = 1))]
        url: String,
        /// Connections in the pool (besides the one that LISTENs).
        #[serde(default = "default_pool")]
        #[schemars(range(min = 1, max = 64))]
        pool: usize,
    },
}

fn default_pool() -> usize {
    4
}

/// The URL with its password left out: what logs and `Debug` show.
pub fn redacted_url(url: &str) -> String {
    if let Ok(mut u) = url::Url::parse(url) {
        if u.password().is_some() {
            let _ = u.set_password(Some("***"));
        }
        return u.to_string();
    }
    url.split_whitespace()
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Sled => f.write_str("Sled"),
            Store::Postgres { url, pool } => f
                .debug_struct("Postgres")
                .field("url", &redacted_url(url))
                .field("pool", pool)
                .finish(),
        }
    }
}

/// The `fleet` section (proto-docs/fleet.md).
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// The secret every member of one fleet shares (at least 32 characters; put it in as
    /// `${NAME}`): a daemon with another key is refused by the database's fleet.
    #[schemars(length(min = 32))]
    pub key: String,
    /// Where other members reach this one (`http://host:port`), shown in `fleet.status`.
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub internal_url: Option<String>,
    /// How often this member writes its heartbeat.
    #[serde(default = "default_heartbeat_ms")]
    #[schemars(range(min = 100, max = 600_000))]
    pub heartbeat_ms: u64,
    /// A member whose heartbeat is older than this (by the database's clock) is lost, and
    /// its waiting approvals are withdrawn.
    #[serde(default = "default_lost_after_ms")]
    #[schemars(range(min = 500, max = 86_400_000))]
    pub lost_after_ms: u64,
    /// Writes (audit records, approval entries) waiting for the database at most while it
    /// is away; each one more is dropped and counted (`host.health`), and the member goes
    /// on serving calls.
    #[serde(default = "default_max_queued")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub max_queued: usize,
    /// Only a user whose token carries this role (`toolhost fleet token create --role`)
    /// decides approvals, and a call's own frontend is no longer asked; unset: whoever
    /// may call `approvals.decide`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._@-]+$"))]
    pub approver_role: Option<String>,
    /// With `approver_role`: the operator (the daemon's socket, an operator token of
    /// `listen`, a page logged in with either or a login code) decides too.
    #[serde(default = "yes")]
    pub operator_approves: bool,
}

fn default_heartbeat_ms() -> u64 {
    2_000
}

fn default_lost_after_ms() -> u64 {
    10_000
}

fn default_max_queued() -> usize {
    100_000
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("key", &"***")
            .field("internal_url", &self.internal_url)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("lost_after_ms", &self.lost_after_ms)
            .field("max_queued", &self.max_queued)
            .field("approver_role", &self.approver_role)
            .field("operator_approves", &self.operator_approves)
            .finish()
    }
}

/// The `code_mode` section (proto-docs/code-mode.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CodeMode {
    /// Serve the code tool to sessions without a profile (a profile's `code_mode` decides
    /// for its own sessions).
    pub enabled: bool,
    /// Where code mode is on, list only the code tools: every other tool the session sees
    /// stays callable (from programs, and directly by name) and is declared in the code
    /// tool's description, `code_api` and the resource, but its definition is not sent in
    /// each request (a profile's `code_mode: "only"` and a session's meta go over this).
    pub only: bool,
    /// The code tool's public name (read at start).
    #[schemars(length(min = 1), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub tool_name: String,
    /// The whole program's deadline when the call names none (its inner calls keep
    /// their own).
    #[schemars(range(min = 1))]
    pub timeout_ms: u64,
    /// What the program prints and returns, at most; the rest is cut.
    #[schemars(range(min = 1))]
    pub max_output_bytes: usize,
    /// The program's heap; its process may map this much again besides.
    #[schemars(range(min = 16))]
    pub max_memory_mb: u64,
    /// Tool calls one program may make.
    #[schemars(range(min = 1))]
    pub max_inner_calls: u64,
    /// The typed declarations carried in the code tool's description, at most; the rest is
    /// left to `code_api` and the `toolhost://code/tools.d.ts` resource.
    #[schemars(range(min = 256))]
    pub max_description_bytes: usize,
}

impl Default for CodeMode {
    fn default() -> Self {
        CodeMode {
            enabled: false,
            only: false,
            tool_name: "run_code".into(),
            timeout_ms: 60_000,
            max_output_bytes: 64 * 1024,
            max_memory_mb: 256,
            max_inner_calls: 1_000,
            max_description_bytes: 8 * 1024,
        }
    }
}

/// The `checkpoint` section: the per-workspace timeline of changes (proto-docs/checkpoints.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Checkpoint {
    /// Record checkpoints around calls that can change the workspace.
    pub enabled: bool,
    /// Glob patterns (gitignore syntax, relative to the workspace) never recorded, on top of
    /// the workspace's `.gitignore` files.
    #[schemars(inner(length(min = 1)))]
    pub exclude: Vec<String>,
    /// Files larger than this are recorded by size and digest only, and cannot be restored.
    #[schemars(range(min = 1))]
    pub max_file_bytes: u64,
    /// A workspace with more files than this gets no checkpoints (reported in `host.health`)
    /// rather than calls slowed by a walk of its whole tree.
    #[schemars(range(min = 1))]
    pub max_files: usize,
    /// How long entries are kept; the newest entry is always kept.
    pub keep: CheckpointKeep,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint {
            // Opt-in while a checkpoint costs two stat walks of the workspace per call (no
            // change watcher yet: proto-docs/checkpoints.md, Cost).
            enabled: false,
            exclude: Vec::new(),
            max_file_bytes: 16 << 20,
            max_files: 200_000,
            keep: CheckpointKeep::default(),
        }
    }
}

/// One guard: which calls it matches (every given matcher must hold; none given: every
/// call), how it counts them (`scope`), and the limits it holds (at least one, unless
/// `enabled` is false). Counters belong to the rule's name, so editing a rule keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct GuardRule {
    /// The rule's name: its counters, its metric label and what `guards.reset` takes.
    #[schemars(
        regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"),
        extend("x-expected" = "a name of 1 to 64 letters, digits, '_', '.' or '-'")
    )]
    pub name: String,
    /// `false` keeps the rule (and its counters) but checks nothing.
    pub enabled: bool,
    /// Public tool names or glob patterns (`*`, `?`, `[...]`, `{a,b}`).
    #[schemars(inner(length(min = 1)))]
    pub tools: Vec<String>,
    /// Where the tool comes from.
    pub sources: Vec<GuardSource>,
    /// MCP servers whose tools it matches.
    #[schemars(inner(length(min = 1)))]
    pub servers: Vec<String>,
    /// Approval classes it matches (unclassified tools match none).
    pub approval: Vec<ApprovalClass>,
    /// Who shares one set of counters.
    pub scope: GuardScope,
    /// At most `calls` per `per_s` seconds (a token bucket holding `burst`, default `calls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "RateLimit")]
    pub rate: Option<RateLimit>,
    /// At most `limit` cost units (1 per call unless `cost` says otherwise) per calendar day.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "DailyLimit")]
    pub daily: Option<DailyLimit>,
    /// At most `max` calls at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ConcurrencyLimit")]
    pub concurrency: Option<ConcurrencyLimit>,
    /// The same tool with the same arguments at most `calls` times in `window_s`.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "LoopLimit")]
    pub loop_: Option<LoopLimit>,
}

impl Default for GuardRule {
    fn default() -> Self {
        GuardRule {
            name: String::new(),
            enabled: true,
            tools: Vec::new(),
            sources: Vec::new(),
            servers: Vec::new(),
            approval: Vec::new(),
            scope: GuardScope::default(),
            rate: None,
            daily: None,
            concurrency: None,
            loop_: None,
        }
    }
}

/// `checkpoint.keep`: the bounds of one workspace's timeline, pruned oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CheckpointKeep {
    /// Entries older than this many seconds are pruned.
    #[schemars(range(min = 1))]
    pub age_s: u64,
    /// Stored content beyond this many bytes per workspace prunes the oldest entries.
    #[schemars(range(min = 1))]
    pub max_bytes: u64,
}

impl Default for CheckpointKeep {
    fn default() -> Self {
        CheckpointKeep {
            age_s: 7 * 24 * 3600,
            max_bytes: 1 << 30,
        }
    }
}

/// A tool's source as a guard matches it (a JS/TS module is `module`, not `custom`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardSource {
    Builtin,
    Custom,
    Module,
    Mcp,
}

/// Who shares one set of a guard's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardScope {
    /// Every call of every frontend.
    Host,
    /// One frontend (its name and user; proto-docs/guards.md).
    Frontend,
    /// One session (a call without a session counts as its frontend's).
    #[default]
    Session,
    /// One workspace.
    Workspace,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RateLimit {
    #[schemars(range(min = 1))]
    pub calls: u32,
    /// The window, in seconds (fractions allowed).
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub per_s: f64,
    /// Calls that may come at once after a quiet spell; default `calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DailyLimit {
    #[schemars(range(min = 1))]
    pub limit: u64,
    /// Cost units of a call of these tools (public names); others cost 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub cost: BTreeMap<String, u64>,
    /// The IANA time zone whose midnight starts a new day (`Europe/Berlin`); default the
    /// system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub time_zone: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConcurrencyLimit {
    #[schemars(range(min = 1))]
    pub max: u32,
    /// `true` (default): a call past `max` waits (within its timeout) for a slot; `false`:
    /// it is refused at once.
    #[serde(default = "yes")]
    pub queue: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoopLimit {
    /// Identical calls allowed in the window; the next is refused.
    #[schemars(range(min = 1))]
    pub calls: u32,
    #[schemars(range(min = 1))]
    pub window_s: u64,
    /// Argument fields (top-level names) left out when comparing calls (a request id, a
    /// timestamp).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1)))]
    pub ignore: Vec<String>,
}

/// What one frontend is served: the tools (and prompts, resources) `servers` or `tools`
/// select (everything when both are empty), of the `approval` classes when given, minus
/// `exclude`. The rule itself is `ProfileView` (src/config/profile.rs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Profile {
    /// MCP servers whose tools it serves.
    #[schemars(inner(length(min = 1)))]
    pub servers: Vec<String>,
    /// Public tool names or glob patterns (`*`, `?`, `[...]`, `{a,b}`) it serves.
    #[schemars(inner(length(min = 1)))]
    pub tools: Vec<String>,
    /// Public names or glob patterns never served, whatever selects them.
    #[schemars(inner(length(min = 1)))]
    pub exclude: Vec<String>,
    /// When not empty, only tools of these approval classes (unclassified ones are left out).
    pub approval: Vec<ApprovalClass>,
    /// Checkpoints for its sessions, over `checkpoint.enabled` (a session's meta
    /// `{"checkpoint": {"enabled": …}}` goes over this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointSwitch>,
    /// Serve the code tool to this profile's sessions (default: `code_mode.enabled`),
    /// whatever `tools` selects; `"only"`: and list nothing else (`code_mode.only`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<ProfileCodeMode>,
}

/// A profile's `code_mode`: `true`/`false`, or `"only"` (on, and its sessions list the code
/// tools alone, whatever `code_mode.only` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProfileCodeMode {
    Switch(bool),
    Only(OnlyWord),
}

/// The word `"only"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OnlyWord {
    #[serde(rename = "only")]
    Only,
}

impl ProfileCodeMode {
    /// Whether the code tools are served.
    pub fn enabled(self) -> bool {
        self != ProfileCodeMode::Switch(false)
    }

    /// Whether the code tools alone are listed, when the profile says (`"only"`).
    pub fn only(self) -> Option<bool> {
        matches!(self, ProfileCodeMode::Only(_)).then_some(true)
    }
}

/// `{"enabled": bool}`: checkpoints on or off for a profile's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSwitch {
    pub enabled: bool,
}

/// The MCP facade (`toolhost mcp`, `/mcp`): bounds on the sessions of `/mcp`, so abandoned
/// clients cannot pile up, and the draft extensions it offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct FacadeConfig {
    /// Offer SEP-2636 tool manifests (`tools/manifest`, `tools/describe`, capability
    /// `tools.manifest`; a draft, so off unless asked for). proto-docs/mcp-facade.md.
    pub tool_manifest: bool,
    /// MCP sessions open at most; past it, a new session evicts the longest idle one.
    #[schemars(range(min = 1))]
    pub max_sessions: usize,
    /// A session with no message either way for this long is closed (minutes, not an
    /// hour: the short-lived probes of frontends leave sessions that would otherwise linger).
    #[schemars(range(min = 1))]
    pub session_idle_ms: u64,
}

impl Default for FacadeConfig {
    fn default() -> Self {
        FacadeConfig {
            tool_manifest: false,
            max_sessions: 256,
            session_idle_ms: 600_000,
        }
    }
}

/// Deferral of tools from `list_tools` (they stay callable and findable by `tool_search`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Catalog {
    /// Defer tools (never built-ins) once the listed catalog would exceed this many tokens,
    /// estimated from the serialised definitions (bytes / 4).
    #[schemars(range(min = 1))]
    pub max_tokens: Option<usize>,
    /// Public tool names always deferred.
    #[schemars(inner(length(min = 1)))]
    pub defer: Vec<String>,
}

/// How the host treats a tool definition it has not pinned yet, or one that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Pin new tools; quarantine a tool whose definition changes until approved.
    #[default]
    Pin,
    /// Accept changes (the pin follows the tool).
    Auto,
    /// Like `pin`, and new tools also wait for approval.
    QuarantineNew,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Listen {
    /// The Unix socket path; default `$XDG_RUNTIME_DIR/toolhost/toolhost.sock`.
    #[schemars(length(min = 1))]
    pub socket: Option<PathBuf>,
    /// Octal string such as `"0660"`; default `"0600"`.
    #[schemars(
        regex(pattern = r"^(0o)?[0-7]{3,4}$"),
        extend("x-expected" = "an octal mode string such as \"0660\"")
    )]
    pub socket_mode: Option<String>,
    /// Also listen on this TCP address (`host:port`).
    #[schemars(
        regex(pattern = r"^.+:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"),
        extend("x-expected" = "\"host:port\" such as \"127.0.0.1:7311\"")
    )]
    pub tcp: Option<String>,
    /// The file holding the bearer token that TCP clients must present.
    #[schemars(length(min = 1))]
    pub token_file: Option<PathBuf>,
    /// More TCP bearer tokens, each named: name → the file holding it. A TCP caller is
    /// known by its token's name (that of `token_file` is `default`), in its frontend
    /// record, its sessions' meta and the audit log.
    #[schemars(extend("propertyNames" = {"pattern": "^[A-Za-z0-9_.-]{1,64}$"}))]
    pub tokens: BTreeMap<String, PathBuf>,
    /// Open connections on the Unix socket at most; a new one past this pushes out the one
    /// silent longest and waits for its slot (proto-docs/transport.md).
    #[schemars(range(min = 1))]
    pub max_unix_connections: usize,
    /// Open TCP connections at most, authenticated or not; a new one past this pushes out
    /// the one silent longest and waits for its slot.
    #[schemars(range(min = 1))]
    pub max_tcp_connections: usize,
    /// TCP connections that have not yet passed the bearer check, at most; a new one past
    /// this closes the oldest of them.
    #[schemars(range(min = 1))]
    pub max_tcp_unauthenticated: usize,
    /// How long a new connection may take to send its first byte and, on TCP, to pass the
    /// bearer check; it is closed otherwise.
    #[schemars(range(min = 1))]
    pub handshake_timeout_ms: u64,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            socket: None,
            socket_mode: None,
            tcp: None,
            token_file: None,
            tokens: BTreeMap::new(),
            max_unix_connections: 4096,
            max_tcp_connections: 1024,
            max_tcp_unauthenticated: 64,
            handshake_timeout_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Approval {
    /// The mode of calls without a session and the default for new sessions.
    pub mode: ApprovalMode,
    /// Per-tool class overrides (any source).
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub tools: HashMap<String, ApprovalClass>,
    /// `auto`: strict sessions run `command` tools confined by the sandbox without approval.
    pub sandboxed_commands: SandboxedCommands,
    /// Seconds a call that needs approval waits in the approval queue for an operator
    /// (`toolhost approvals`, the page, `approvals.decide`); 0: it fails at once with
    /// `approval_required` unless its own frontend is asked.
    #[schemars(range(max = 86_400))]
    pub wait_s: u64,
}

impl Default for Approval {
    fn default() -> Self {
        Approval {
            mode: ApprovalMode::default(),
            tools: HashMap::new(),
            sandboxed_commands: SandboxedCommands::default(),
            wait_s: 120,
        }
    }
}

/// Whether strict sessions must approve `command` tools that run confined by the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxedCommands {
    /// Like every other command: `approved: true` needed.
    #[default]
    Ask,
    /// Confined commands run without approval (the kernel bounds what they can do).
    Auto,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Limits {
    /// The largest request a client may send.
    #[schemars(range(min = 1))]
    pub max_request_bytes: usize,
    /// The bytes that requests still arriving may hold over all connections together
    /// (each request's first 16 KiB are not counted); a large request that finds no room
    /// is refused at once. Never less than `max_request_bytes`.
    #[schemars(range(min = 1))]
    pub max_buffered_request_bytes: usize,
    /// Tool output beyond this is cut (the rest is spilled to a file).
    #[schemars(range(min = 1))]
    pub max_output_bytes: usize,
    /// The timeout of a call that does not name one.
    #[schemars(range(min = 1))]
    pub default_timeout_ms: u64,
}

impl Limits {
    /// The budget of requests still arriving: `max_buffered_request_bytes`, but never less
    /// than one request of the largest size, which must always be able to arrive.
    pub fn request_buffer_budget(&self) -> usize {
        self.max_buffered_request_bytes.max(self.max_request_bytes)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 10 * 1024 * 1024,
            max_buffered_request_bytes: 32 * 1024 * 1024,
            max_output_bytes: 1024 * 1024,
            default_timeout_ms: 120_000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Provider {
    #[schemars(
        regex(pattern = r"^https?://[^/\s][^\s]*$"),
        extend("x-expected" = "an http:// or https:// URL")
    )]
    pub base_url: Option<String>,
    pub api_key: Option<String>,
}

/// One MCP server: exactly one of `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct McpServer {
    /// `"stdio"`, `"http"` or `"sse"`: accepted because pasted Claude Desktop / Cursor
    /// blocks carry it and checked against `command`/`url`. Only `"sse"` (the legacy
    /// HTTP+SSE transport of a `url`) changes anything: otherwise the transport follows from
    /// which of the two is set.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub transport_type: Option<String>,
    /// The program of a stdio server (looked up in `PATH`).
    #[schemars(length(min = 1))]
    pub command: Option<String>,
    pub args: Vec<String>,
    /// The child's environment on top of the daemon's allow-list and the top-level
    /// `env`/`env_passthrough`.
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub env: BTreeMap<String, String>,
    /// More of the daemon's variables (names or glob patterns) for this server only.
    #[schemars(inner(length(min = 1)))]
    pub env_passthrough: Vec<String>,
    #[schemars(length(min = 1))]
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    #[schemars(
        regex(pattern = r"^https?://[^/\s][^\s]*$"),
        extend("x-expected" = "an http:// or https:// URL")
    )]
    pub url: Option<String>,
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub headers: BTreeMap<String, String>,
    /// How to sign in to an HTTP server (see proto-docs/oauth.md); without it a server that
    /// answers 401 still gets OAuth with discovery and dynamic registration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<McpAuth>,
    pub enabled: bool,
    /// `true` is the same as `enabled: false` (the spelling Cline and Claude Code use).
    /// Folded into `enabled` when the config is loaded, so nothing else reads it.
    pub disabled: bool,
    #[schemars(range(min = 1))]
    pub startup_timeout_ms: u64,
    /// Idle timeout of one call (reset by progress), and the time one `tools/list` page
    /// may take.
    #[schemars(range(min = 1))]
    pub timeout_ms: u64,
    /// Most `tools/list` pages followed in one listing; a server that pages on is refused
    /// rather than followed without end.
    #[schemars(range(min = 1))]
    pub max_list_pages: usize,
    /// Most tools one listing may hold; a longer listing is refused whole, not cut.
    #[schemars(range(min = 1))]
    pub max_tools: usize,
    #[schemars(inner(length(min = 1)))]
    pub include_tools: Vec<String>,
    #[schemars(inner(length(min = 1)))]
    pub exclude_tools: Vec<String>,
    pub trust_annotations: bool,
    /// Calls in flight to this server at once; more wait in a queue. The default is far
    /// above normal use, so slow calls from many frontends never serialise; set it to
    /// protect a server that cannot take parallel calls.
    #[schemars(range(min = 1))]
    pub max_concurrency: usize,
    /// Approval classes of this server's tools, by their name on the server.
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub approval: HashMap<String, ApprovalClass>,
    /// Run this stdio server confined (default off, so existing servers keep working).
    pub sandbox: ServerSandbox,
    /// Defer all of this server's tools from `list_tools` (found through `tool_search`).
    pub defer: bool,
    /// `false` exposes the server's tools and prompts under their own names instead of
    /// `mcp_<server>_<name>`; a name another source already holds stays with that source
    /// (proto-docs/config.md).
    pub prefix: bool,
    /// What a new or changed tool definition of this server needs before it is listed.
    pub trust: Trust,
    /// Who shares one process of this stdio server (proto-docs/config.md#server-scopes).
    pub scope: ServerScope,
    /// Whether its tools act on the workspace, so each call gets a checkpoint (a tool with
    /// `readOnlyHint` never does); unset: true for a `per_workspace` server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<bool>,
    /// Processes of a scoped server alive at once, beside the one for the daemon's
    /// workspace; a new one past this stops the least recently used idle one first.
    #[schemars(range(min = 1))]
    pub max_instances: usize,
    /// When the server's process starts: with the daemon, or at its first call.
    pub start: Start,
    /// Stop the server after this many seconds without a request (restarted by the next
    /// one); none keeps it running. A scoped server's instances for sessions' workspaces or
    /// sessions are stopped after this, or 600 s when it is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub idle_stop_s: Option<u64>,
    /// The directories answered to the server's `roots/list` (absolute; `${WORKSPACE}` in a
    /// scoped server's). Default: the existing directories among `args`, else the
    /// directory the server runs in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1)))]
    pub roots: Vec<String>,
}

/// When an MCP server's process starts (proto-docs/config.md, lifecycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// With the daemon (and with a reload that adds it).
    #[default]
    Eager,
    /// At its first call; until then its tools are listed from the last run's listing.
    Lazy,
}

/// The variable a scoped server's instance expands to its workspace; loading leaves it as
/// written in the keys [`WORKSPACE_KEYS`] of a scoped server.
pub const WORKSPACE_VAR: &str = "WORKSPACE";
/// The keys of a scoped server where `${WORKSPACE}` names the instance's workspace.
pub const WORKSPACE_KEYS: [&str; 3] = ["args", "env", "roots"];

/// Whether a server block's raw `scope` value (before the config is typed) names a scoped
/// server.
pub(crate) fn names_scoped(raw: Option<&serde_json::Value>) -> bool {
    raw.and_then(|v| serde_json::from_value::<ServerScope>(v.clone()).ok())
        .is_some_and(ServerScope::is_scoped)
}

impl Default for McpServer {
    fn default() -> Self {
        McpServer {
            transport_type: None,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_passthrough: Vec::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            auth: None,
            enabled: true,
            disabled: false,
            startup_timeout_ms: 30_000,
            timeout_ms: 60_000,
            max_list_pages: 100,
            max_tools: 10_000,
            include_tools: Vec::new(),
            exclude_tools: Vec::new(),
            trust_annotations: false,
            max_concurrency: 256,
            approval: HashMap::new(),
            sandbox: ServerSandbox::default(),
            defer: false,
            prefix: true,
            trust: Trust::Pin,
            scope: ServerScope::Shared,
            checkpoint: None,
            max_instances: 16,
            start: Start::Eager,
            idle_stop_s: None,
            roots: Vec::new(),
        }
    }
}

impl McpServer {
    /// Whether calls of its tools get checkpoints: config `checkpoint`, else whether each
    /// workspace has its own process (a server acting on the workspace).
    pub fn checkpointed(&self) -> bool {
        self.checkpoint
            .unwrap_or(self.scope == ServerScope::PerWorkspace)
    }

    pub fn transport(&self) -> &'static str {
        if self.url.is_none() {
            "stdio"
        } else if self.legacy_sse() {
            "sse"
        } else {
            "http"
        }
    }

    /// `"type": "sse"`: the server speaks the legacy HTTP+SSE transport at `url`.
    pub fn legacy_sse(&self) -> bool {
        self.transport_type
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("sse"))
    }

    /// Whether a change from `self` to `new` needs the connection restarted; tool filters,
    /// naming and approval classes apply without one.
    pub fn needs_restart(&self, new: &McpServer) -> bool {
        let strip = |s: &McpServer| McpServer {
            // Only `sse` picks a transport; the other spellings are decoration.
            transport_type: s.legacy_sse().then(|| "sse".to_owned()),
            include_tools: Vec::new(),
            exclude_tools: Vec::new(),
            approval: HashMap::new(),
            trust_annotations: false,
            defer: false,
            prefix: true,
            trust: Trust::Pin,
            checkpoint: None,
            ..s.clone()
        };
        strip(self) != strip(new)
    }
}

/// Sign-in settings of an HTTP MCP server; the tokens themselves live in the state
/// directory, never here. (A flat struct, not a tagged enum, so the schema-driven key
/// check can follow it.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct McpAuth {
    #[serde(rename = "type")]
    pub kind: McpAuthKind,
    /// A client pre-registered with the authorization server (else a client ID metadata
    /// document or dynamic registration); required for `client_credentials`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub client_id: Option<String>,
    /// Its secret; required for `client_credentials`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes to ask for (default: the server's challenge or `scopes_supported`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// HTTPS URL of this client's metadata document, used as its client ID (`oauth`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
}

impl Default for McpAuth {
    fn default() -> Self {
        McpAuth {
            kind: McpAuthKind::Oauth,
            client_id: None,
            client_secret: None,
            scopes: Vec::new(),
            client_metadata_url: None,
        }
    }
}

/// `oauth`: authorization code with PKCE, signed in with `toolhost mcp login`;
/// `client_credentials`: machine-to-machine, no user and no sign-in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpAuthKind {
    Oauth,
    ClientCredentials,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CustomTools {
    #[schemars(inner(length(min = 1)))]
    pub paths: Vec<PathBuf>,
    pub discover: bool,
    /// Custom tools are the user's own files, so edits pass by default (`auto`); the
    /// definitions are still pinned and screened.
    pub trust: Trust,
    /// Also load JS/TS tool modules (MusePi's factory modules) through the module host
    /// (proto-docs/modules.md); `false` leaves every module file alone.
    pub modules: bool,
    /// The `node` that runs the module host; absent: `node` on `PATH`.
    pub node: Option<PathBuf>,
    /// `node_modules` folders searched for `zod` (`pi.zod`) after the module's own folder
    /// and its parents (relative to config.json's folder).
    #[schemars(inner(length(min = 1)))]
    pub node_modules: Vec<PathBuf>,
    /// The resident memory one module host may use, in MB (0: no bound): a host that
    /// passes it is killed, its calls fail saying so, and the next call starts a new one.
    pub module_max_memory_mb: u64,
}

impl Default for CustomTools {
    fn default() -> Self {
        CustomTools {
            paths: Vec::new(),
            discover: true,
            trust: Trust::Auto,
            modules: true,
            node: None,
            node_modules: Vec::new(),
            module_max_memory_mb: 2048,
        }
    }
}

/// The `skills` section: folders searched for skills before the usual places.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Skills {
    /// Folders holding skill folders, searched first (relative to config.json's folder).
    #[schemars(inner(length(min = 1)))]
    pub paths: Vec<PathBuf>,
    /// Also search the workspace's and the user's `.toolhost/skills`, `.agents/skills` and
    /// `.claude/skills`; `false` keeps only `paths`.
    pub discover: bool,
}

impl Default for Skills {
    fn default() -> Self {
        Skills {
            paths: Vec::new(),
            discover: true,
        }
    }
}

/// The `commands` section: folders searched for slash commands before the usual places.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Commands {
    /// Folders of command files, searched first (relative to config.json's folder).
    #[schemars(inner(length(min = 1)))]
    pub paths: Vec<PathBuf>,
    /// Also search `<workspace>/.toolhost/commands` and `$XDG_CONFIG_HOME/toolhost/commands`;
    /// `false` keeps only `paths`.
    pub discover: bool,
}

impl Default for Commands {
    fn default() -> Self {
        Commands {
            paths: Vec::new(),
            discover: true,
        }
    }
}

/// The `sandbox` section: the default policy and what confined programs may also touch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SandboxConfig {
    /// The policy of calls without a session and of sessions that set none.
    pub policy: SandboxPolicy,
    pub network: Network,
    /// Absolute paths confined programs may also write (caches such as `~/.cargo/registry`);
    /// checked in `validate::sandbox_rules`.
    pub writable: Vec<PathBuf>,
    /// Refuse (`sandbox_unavailable`) a call whose policy the kernel cannot enforce; `false`
    /// runs it unconfined and says so in the result.
    pub required: bool,
    /// Custom tools (by name) whose manifest requests (`sandbox.network`,
    /// `sandbox.writable`) are granted.
    #[schemars(extend("propertyNames" = {"minLength": 1}))]
    pub tools: BTreeMap<String, SandboxGrant>,
    /// The daemon's own files a confined program may not read (config.json, the data dir,
    /// `listen.token_file`): set by the host (`Host::set_config`), never read from
    /// config.json.
    #[serde(skip)]
    #[schemars(skip)]
    pub hidden: Vec<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            policy: SandboxPolicy::Off,
            network: Network::Allow,
            writable: Vec::new(),
            required: true,
            tools: BTreeMap::new(),
            hidden: Vec::new(),
        }
    }
}

/// Which of a custom tool's sandbox requests config grants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SandboxGrant {
    pub network: bool,
    pub writable: bool,
}

/// A stdio MCP server's sandbox: in `workspace-write` it may write its `cwd` (else the
/// daemon's working directory) and its own `writable` paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ServerSandbox {
    pub policy: SandboxPolicy,
    pub network: Network,
    pub writable: Vec<PathBuf>,
}
