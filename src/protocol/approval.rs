//! Approval on the wire: a tool's class (in its `meta`) and a session's mode. The rules
//! that read them are `approval::decide`, on the daemon's side.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a tool may do to the machine; decides whether a strict session must ask first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalClass {
    /// Reads only: never needs approval.
    ReadOnly,
    /// Changes files.
    Write,
    /// Runs commands.
    Command,
}

impl ApprovalClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalClass::ReadOnly => "read_only",
            ApprovalClass::Write => "write",
            ApprovalClass::Command => "command",
        }
    }
}

/// A session's approval mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Every tool runs, classified or not.
    #[default]
    Auto,
    /// Read-only tools run; write/command tools need `approved: true`; unclassified are denied.
    Strict,
    /// Only read-only tools run.
    ReadOnly,
}
