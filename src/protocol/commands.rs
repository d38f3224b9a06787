//! Slash commands on the socket (proto-docs/commands.md): `list_commands`, `get_command`
//! and the `commands_changed` notification. Every command is also an MCP prompt (named
//! [`CommandEntry::prompt`]) in `list_prompts` / `get_prompt`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::PromptMessage;

/// Where a command comes from, in precedence order (the first definition of a name wins;
/// a file overrides the built-in command of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandSource {
    /// A folder of config `commands.paths`.
    Config,
    /// `<workspace>/.toolhost/commands`.
    Workspace,
    /// `$XDG_CONFIG_HOME/toolhost/commands`.
    User,
    /// Claude Code's `<workspace>/.claude/commands`.
    WorkspaceClaude,
    /// Gemini CLI's `<workspace>/.gemini/commands` (TOML).
    WorkspaceGemini,
    /// Claude Code's `~/.claude/commands`.
    UserClaude,
    /// Codex's `$CODEX_HOME/prompts` (default `~/.codex/prompts`).
    UserCodex,
    /// Gemini CLI's `~/.gemini/commands` (TOML).
    UserGemini,
    /// One of the host's own (`tools`, `mcp status`, `mcp reload`, `skills`).
    Builtin,
}

impl CommandSource {
    /// A folder inside a workspace: what is found there passes the workspace-trust gate.
    pub fn is_workspace(self) -> bool {
        matches!(
            self,
            CommandSource::Workspace
                | CommandSource::WorkspaceClaude
                | CommandSource::WorkspaceGemini
        )
    }
}

/// One declared argument of a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub required: bool,
    /// The values it takes; completion offers them, and `get_command` refuses others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

/// One command as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandEntry {
    /// As typed after the slash: `mcp status` for `mcp/status.md`.
    pub name: String,
    /// Its MCP prompt name: the words joined by `_` (`mcp_status`).
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<CommandArgument>,
    pub source: CommandSource,
    /// The Markdown file (absent for a built-in command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListCommandsResult {
    /// Sorted by name.
    pub commands: Vec<CommandEntry>,
    /// Changes whenever a command is added, edited or removed.
    pub etag: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetCommandParams {
    /// The command as listed (`mcp status`); a leading `/` is ignored.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Argument values by name.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

/// A command expanded: MCP's `prompts/get` result shape, plus the command's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetCommandResult {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// One `user` message with the expanded text.
    pub messages: Vec<PromptMessage>,
}

/// Sent once per change of the command set (a command file added, edited or removed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandsChanged {
    /// The new [`ListCommandsResult::etag`].
    pub etag: String,
    pub count: usize,
}
