//! The host's own commands, in the spirit of a shell's `/mcp status`: each expands to the
//! host's live state rendered as Markdown, so a user in any frontend sees the shared host.
//!
//! `mcp reload` is an action: getting it (`get_command`, or its prompt) reloads
//! config.json, exactly as `config.reload` does, and the text reports what changed.
//! Listing commands or completing arguments never runs it.

use crate::protocol::{CommandEntry, CommandSource};

/// The built-in commands; a command file of the same name overrides one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Tools,
    McpStatus,
    McpReload,
    Skills,
    Undo,
}

impl Builtin {
    pub const ALL: [Builtin; 5] = [
        Builtin::Tools,
        Builtin::McpStatus,
        Builtin::McpReload,
        Builtin::Skills,
        Builtin::Undo,
    ];

    /// The name's words: the prompt name is them joined by `_`.
    pub fn words(self) -> &'static [&'static str] {
        match self {
            Builtin::Tools => &["tools"],
            Builtin::McpStatus => &["mcp", "status"],
            Builtin::McpReload => &["mcp", "reload"],
            Builtin::Skills => &["skills"],
            Builtin::Undo => &["undo"],
        }
    }

    fn description(self) -> &'static str {
        match self {
            Builtin::Tools => "The host's live tool list: each tool, where it comes from, what it does.",
            Builtin::McpStatus => "The host's MCP servers: state, tool count and last error of each.",
            Builtin::McpReload => "Reloads the host's config.json now and reports what changed (getting this command runs the reload).",
            Builtin::Skills => "The Agent Skills the host serves, and the ones it skipped.",
            Builtin::Undo => "Undo the last change to this project's files, whichever frontend made it (checkpoint_list, then checkpoint_restore).",
        }
    }

    pub fn entry(self) -> CommandEntry {
        CommandEntry {
            name: self.words().join(" "),
            prompt: self.words().join("_"),
            description: Some(self.description().to_owned()),
            arguments: Vec::new(),
            source: CommandSource::Builtin,
            path: None,
        }
    }
}
