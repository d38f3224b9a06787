//! `host.status`: the operator's one view of the host (what `toolhost status` prints).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConfigStatusResult, HealthResult, McpServerStatus};

/// A call running now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallInFlight {
    pub call_id: String,
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Milliseconds since the call started.
    pub age_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostStatusResult {
    /// What `host.health` answers (status, counts, config and manifest errors).
    pub health: HealthResult,
    /// What `config.status` answers (file, revision, last error, warnings).
    pub config: ConfigStatusResult,
    /// What `mcp.status` answers, for every server.
    pub servers: Vec<McpServerStatus>,
    /// Names of the custom tools in the live registry.
    pub custom_tools: Vec<String>,
    /// Calls in flight, oldest first.
    pub calls: Vec<CallInFlight>,
    /// The frontends with live sessions (proto-docs/sessions.md).
    #[serde(default)]
    pub frontends: Vec<super::Frontend>,
    /// The daemon's data directory (sessions, spilled outputs, the audit log).
    pub data_dir: String,
}
