//! The wire contract: every shape that crosses the socket, typed in both directions.
//!
//! The daemon serialises these types and the client ([`crate::client`]) deserialises the
//! same types, so neither side digs through `Value` by string. Every type derives
//! `JsonSchema`: the OpenRPC document of `rpc.discover` is generated from them, enums
//! included, and a test checks every answer of the daemon against it.
//! Architecture Invariant: nothing else is serialised to clients.

mod admin;
mod approval;
mod audit;
mod blocks;
mod checkpoint;
mod commands;
mod fleet;
mod guards;
mod invoke;
mod output;
mod sandbox;
mod session;
mod skills;
mod socket;
mod status;
mod surface;
mod tools;
mod trust;
mod ui;

pub use admin::*;
pub use approval::*;
pub use audit::*;
pub use blocks::*;
pub use checkpoint::*;
pub use commands::*;
pub use fleet::*;
pub use guards::*;
pub use invoke::*;
pub use output::*;
pub use sandbox::*;
pub use session::*;
pub use skills::*;
pub use socket::{
    announced_socket, default_socket, default_sockets, found_without_environment, home_dir,
    location_file, socket_path, socket_paths,
};
pub use status::*;
pub use surface::*;
pub use tools::*;
pub use trust::*;
pub use ui::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Browser origins allowed to call the HTTP doors, `/mcp` and the operator's page (any port): pages on this machine only, so a
/// remote page cannot drive the host through a DNS-rebound name. Requests without an
/// `Origin` (every non-browser client) pass.
pub const LOCAL_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// JSON-RPC error codes (proto-docs/errors.md).
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Over `limits.max_request_bytes`.
    pub const TOO_BIG: i32 = -32007;
    /// Unknown session id: `session not found: <id>`.
    pub const SESSION_NOT_FOUND: i32 = -32001;
    /// A server-side failure that is not the caller's fault (store I/O, config write).
    pub const SERVER_ERROR: i32 = -32000;
    /// A process the host started asked for more than its call has (an admin method, an
    /// approval flag, a sandbox override, a workspace outside, another's session).
    pub const PEER_NOT_ALLOWED: i32 = -32008;
    /// `read_resource` of a URI no server lists or matches: MCP's resource-not-found.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    /// A file of an MCP server's skill that does not match what its server listed (size,
    /// digest, front matter): refused, never served.
    pub const SKILL_REFUSED: i32 = -32009;
}

/// Method and notification names: one spelling for the server, the client and the docs.
pub mod method {
    pub const LIST_TOOLS: &str = "list_tools";
    pub const INVOKE: &str = "invoke";
    pub const CANCEL: &str = "cancel";
    pub const INVOKE_RESPOND: &str = "invoke.respond";
    pub const SUBSCRIBE_INVOKE: &str = "subscribe_invoke";
    pub const UNSUBSCRIBE_INVOKE: &str = "unsubscribe_invoke";
    pub const INVOKE_EVENT: &str = "invoke_event";
    pub const SUBSCRIBE_TOOLS_CHANGED: &str = "subscribe_tools_changed";
    pub const UNSUBSCRIBE_TOOLS_CHANGED: &str = "unsubscribe_tools_changed";
    pub const TOOLS_CHANGED: &str = "tools_changed";
    pub const HEALTH: &str = "host.health";
    pub const STATUS: &str = "host.status";
    pub const CONFIG_STATUS: &str = "config.status";
    pub const CONFIG_RELOAD: &str = "config.reload";
    pub const MCP_STATUS: &str = "mcp.status";
    pub const MCP_RELOAD: &str = "mcp.reload";
    pub const MCP_ADD: &str = "mcp.add";
    pub const MCP_REMOVE: &str = "mcp.remove";
    pub const MCP_LOGIN: &str = "mcp.login";
    pub const MCP_LOGOUT: &str = "mcp.logout";
    pub const SESSION_CREATE: &str = "session.create";
    pub const SESSION_GET: &str = "session.get";
    pub const SESSION_LIST: &str = "session.list";
    pub const SESSION_UPDATE: &str = "session.update";
    pub const SESSION_DELETE: &str = "session.delete";
    pub const SESSION_TOOLS: &str = "session.tools";
    pub const SESSION_RESUME: &str = "session.resume";
    pub const SESSION_REFRESH_TOOLS: &str = "session.refresh_tools";
    pub const LIST_SKILLS: &str = "list_skills";
    pub const GET_SKILL: &str = "get_skill";
    pub const READ_SKILL_FILE: &str = "read_skill_file";
    pub const SUBSCRIBE_SKILLS_CHANGED: &str = "subscribe_skills_changed";
    pub const UNSUBSCRIBE_SKILLS_CHANGED: &str = "unsubscribe_skills_changed";
    pub const SKILLS_CHANGED: &str = "skills_changed";
    pub const LIST_COMMANDS: &str = "list_commands";
    pub const GET_COMMAND: &str = "get_command";
    pub const SUBSCRIBE_COMMANDS_CHANGED: &str = "subscribe_commands_changed";
    pub const UNSUBSCRIBE_COMMANDS_CHANGED: &str = "unsubscribe_commands_changed";
    pub const COMMANDS_CHANGED: &str = "commands_changed";
    pub const TOOLS_SEARCH: &str = "tools.search";
    pub const TOOLS_DESCRIBE: &str = "tools.describe";
    pub const TOOLS_APPROVE: &str = "tools.approve";
    pub const TOOLS_DIFF: &str = "tools.diff";
    pub const TOOLS_PINS_RESET: &str = "tools.pins_reset";
    pub const LIST_PROMPTS: &str = "list_prompts";
    pub const GET_PROMPT: &str = "get_prompt";
    pub const LIST_RESOURCES: &str = "list_resources";
    pub const LIST_RESOURCE_TEMPLATES: &str = "list_resource_templates";
    pub const READ_RESOURCE: &str = "read_resource";
    pub const COMPLETE: &str = "complete";
    pub const SUBSCRIBE_RESOURCE: &str = "subscribe_resource";
    pub const UNSUBSCRIBE_RESOURCE: &str = "unsubscribe_resource";
    pub const RESOURCE_UPDATED: &str = "resource_updated";
    pub const SUBSCRIBE_PROMPTS_CHANGED: &str = "subscribe_prompts_changed";
    pub const UNSUBSCRIBE_PROMPTS_CHANGED: &str = "unsubscribe_prompts_changed";
    pub const PROMPTS_CHANGED: &str = "prompts_changed";
    pub const SUBSCRIBE_RESOURCES_CHANGED: &str = "subscribe_resources_changed";
    pub const UNSUBSCRIBE_RESOURCES_CHANGED: &str = "unsubscribe_resources_changed";
    pub const RESOURCES_CHANGED: &str = "resources_changed";
    pub const TRUST_LIST: &str = "trust.list";
    pub const TRUST_APPROVE: &str = "trust.approve";
    pub const TRUST_FOLDER: &str = "trust.folder";
    pub const TRUST_DIFF: &str = "trust.diff";
    pub const APPROVALS_LIST: &str = "approvals.list";
    pub const APPROVALS_DECIDE: &str = "approvals.decide";
    pub const FLEET_STATUS: &str = "fleet.status";
    pub const FLEET_TOKEN_CREATE: &str = "fleet.token_create";
    pub const FLEET_TOKEN_REVOKE: &str = "fleet.token_revoke";
    pub const FLEET_TOKEN_LIST: &str = "fleet.token_list";
    pub const SUBSCRIBE_APPROVALS: &str = "subscribe_approvals";
    pub const UNSUBSCRIBE_APPROVALS: &str = "unsubscribe_approvals";
    pub const APPROVAL_EVENT: &str = "approval_event";
    pub const DISCOVER: &str = "rpc.discover";
    pub const UI_LOGIN: &str = "ui.login";
    pub const AUDIT_RECENT: &str = "audit.recent";
    pub const CHECKPOINT_LIST: &str = "checkpoint.list";
    pub const CHECKPOINT_DIFF: &str = "checkpoint.diff";
    pub const CHECKPOINT_RESTORE: &str = "checkpoint.restore";
    pub const GUARDS_STATUS: &str = "guards.status";
    pub const GUARDS_RESET: &str = "guards.reset";
}

/// Why a tool call failed; the `error_kind` of an `ok:false` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    UnknownTool,
    InvalidArguments,
    ApprovalRequired,
    Denied,
    Timeout,
    Cancelled,
    Unavailable,
    Failed,
    // The call's sandbox policy cannot be enforced by this kernel and `sandbox.required`
    // is true. (A plain comment: a doc comment would turn the schema's `enum` into `oneOf`.)
    SandboxUnavailable,
    // The tool's definition changed or was flagged; `tools.approve` lets it through. (A
    // plain comment: a doc comment would turn the schema's `enum` into a `oneOf`.)
    Quarantined,
    // A guard refused the call (a rate, daily, concurrency or loop limit); the result's
    // `guard` says which (proto-docs/guards.md). A plain comment, as above.
    Limited,
}

impl ErrorKind {
    /// Every kind, for label sets and checks.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::UnknownTool,
        ErrorKind::InvalidArguments,
        ErrorKind::ApprovalRequired,
        ErrorKind::Denied,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::Unavailable,
        ErrorKind::Failed,
        ErrorKind::SandboxUnavailable,
        ErrorKind::Quarantined,
        ErrorKind::Limited,
    ];

    /// The wire name, as serialised (for metric labels and tables; a test holds the two
    /// together).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::ApprovalRequired => "approval_required",
            ErrorKind::Denied => "denied",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Failed => "failed",
            ErrorKind::SandboxUnavailable => "sandbox_unavailable",
            ErrorKind::Quarantined => "quarantined",
            ErrorKind::Limited => "limited",
        }
    }
}

/// Params of methods that take none (`{}` or absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyParams {}

/// `{"ok": true}`: the answer of methods whose effect is the whole point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OkResult {
    pub ok: bool,
}

/// The length of `value` as JSON, counted without writing it anywhere (0 if it cannot be
/// serialised): how the output cap and the facade's event budget measure a message.
pub fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

#[cfg(test)]
mod wire_names {
    use super::*;

    /// The names a string enum's schema allows.
    fn schema_names<T: JsonSchema>() -> Vec<String> {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        let mut names: Vec<String> = schema["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    fn check<T: Serialize + JsonSchema + Copy>(all: &[T], as_str: fn(T) -> &'static str) {
        for v in all {
            assert_eq!(serde_json::to_value(v).unwrap_or_default(), as_str(*v));
        }
        let mut names: Vec<String> = all.iter().map(|v| as_str(*v).to_owned()).collect();
        names.sort();
        assert_eq!(names, schema_names::<T>(), "ALL lists every variant once");
    }

    #[test]
    fn as_str_is_the_serialised_name_and_all_lists_every_variant() {
        check(&ErrorKind::ALL, ErrorKind::as_str);
        check(&McpServerState::ALL, McpServerState::as_str);
    }
}
