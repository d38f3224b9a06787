//! What a tool is, as the catalog and the model see it: its name, description, argument
//! schema, approval class and source. Every source builds one [`ToolSpec`] per tool; the
//! registry pairs it with the code that runs the tool.

use std::path::PathBuf;

use serde_json::Value;

use crate::protocol::ApprovalClass;

/// Where a tool comes from; shown in `list_tools.meta` and used to order name clashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    Builtin,
    /// A custom tool program living in `dir`.
    Custom {
        dir: PathBuf,
        /// For a tool found in a workspace folder (which the session's own programs can
        /// write): the digest of its folder's files, pinned with the definition, so a
        /// changed program is quarantined like a changed definition. `None` for the
        /// user's and configured folders.
        workspace_digest: Option<String>,
    },
    /// A tool of the MCP server `server`; `remote_name` is its name on that server.
    Mcp {
        server: String,
        remote_name: String,
    },
}

/// Everything the host needs to list a tool and to check a call before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The public name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// LLM-facing description: lines starting with "- " saying when to use it and what it returns.
    pub description: String,
    /// JSON Schema of the arguments; always an object schema.
    pub parameters: Value,
    /// Approval class; `None` means unclassified (refused in strict mode).
    pub approval: Option<ApprovalClass>,
    pub source: ToolSource,
    /// Hidden tools are callable but left out of `list_tools` unless `include_hidden`.
    pub hidden: bool,
    /// A hint to frontends that the tool may be loaded lazily.
    pub deferrable: bool,
    /// MCP tool annotations, passed through to `meta` and the `mcp` list format.
    pub annotations: Option<Value>,
}

impl ToolSpec {
    /// A visible, non-deferrable built-in tool.
    pub fn builtin(
        name: &str,
        description: &str,
        parameters: Value,
        approval: ApprovalClass,
    ) -> Self {
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
            approval: Some(approval),
            source: ToolSource::Builtin,
            hidden: false,
            deferrable: false,
            annotations: None,
        }
    }
}
