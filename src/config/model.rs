//! The typed shape of config.json (config.md). Defaults live here, next to the fields.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::approval::{ApprovalClass, ApprovalMode};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Root for built-in tools' paths; defaults to the daemon's working directory.
    pub workspace: Option<PathBuf>,
    /// Sessions and spilled outputs; defaults to `$XDG_STATE_HOME/toolhost`.
    pub data_dir: Option<PathBuf>,
    pub listen: Listen,
    pub approval: Approval,
    pub limits: Limits,
    pub providers: BTreeMap<String, Provider>,
    /// Keyed by server name, in file order.
    pub mcp_servers: indexmap::IndexMap<String, McpServer>,
    pub custom_tools: CustomTools,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Listen {
    pub socket: Option<PathBuf>,
    /// Octal string such as `"0660"`; default `"0600"`.
    pub socket_mode: Option<String>,
    pub tcp: Option<String>,
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Approval {
    /// The mode of calls without a session and the default for new sessions.
    pub mode: ApprovalMode,
    /// Per-tool class overrides (any source).
    pub tools: HashMap<String, ApprovalClass>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_output_bytes: usize,
    pub default_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 10 * 1024 * 1024,
            max_output_bytes: 1024 * 1024,
            default_timeout_ms: 120_000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Provider {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
}

/// One MCP server: exactly one of `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServer {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub enabled: bool,
    pub startup_timeout_ms: u64,
    /// Idle timeout of one call (reset by progress).
    pub timeout_ms: u64,
    pub include_tools: Vec<String>,
    pub exclude_tools: Vec<String>,
    pub trust_annotations: bool,
    pub max_concurrency: usize,
    /// Approval classes of this server's tools, by their name on the server.
    pub approval: HashMap<String, ApprovalClass>,
}

impl Default for McpServer {
    fn default() -> Self {
        McpServer {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            enabled: true,
            startup_timeout_ms: 30_000,
            timeout_ms: 60_000,
            include_tools: Vec::new(),
            exclude_tools: Vec::new(),
            trust_annotations: false,
            max_concurrency: 8,
            approval: HashMap::new(),
        }
    }
}

impl McpServer {
    pub fn transport(&self) -> &'static str {
        if self.url.is_some() {
            "http"
        } else {
            "stdio"
        }
    }

    /// Whether a change from `self` to `new` needs the connection restarted; tool filters
    /// and approval classes apply without one.
    pub fn needs_restart(&self, new: &McpServer) -> bool {
        let strip = |s: &McpServer| McpServer {
            include_tools: Vec::new(),
            exclude_tools: Vec::new(),
            approval: HashMap::new(),
            trust_annotations: false,
            ..s.clone()
        };
        strip(self) != strip(new)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomTools {
    pub paths: Vec<PathBuf>,
    pub discover: bool,
}

impl Default for CustomTools {
    fn default() -> Self {
        CustomTools {
            paths: Vec::new(),
            discover: true,
        }
    }
}
