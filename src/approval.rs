//! Approval classes and the policy decision: may this call run in this session's mode?
//!
//! One function, [`decide`], owns the rule table of protocol.md §5 so the invoke pipeline,
//! the docs and the tests all point at the same place.

use serde::{Deserialize, Serialize};

/// What a tool may do to the machine; decides whether a strict session must ask first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
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

/// The outcome of the policy check for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The call must be repeated with `approved: true`.
    NeedsApproval,
    /// The call can never run in this mode; the message says why and what to change.
    Deny(String),
}

/// Applies the rules of protocol.md §5.
pub fn decide(
    mode: ApprovalMode,
    class: Option<ApprovalClass>,
    approved: bool,
    tool: &str,
) -> Decision {
    use ApprovalClass::*;
    match (mode, class) {
        (ApprovalMode::Auto, _) => Decision::Allow,
        (_, Some(ReadOnly)) => Decision::Allow,
        (ApprovalMode::Strict, Some(Write | Command)) if approved => Decision::Allow,
        (ApprovalMode::Strict, Some(Write | Command)) => Decision::NeedsApproval,
        (ApprovalMode::Strict, None) => Decision::Deny(format!(
            "Tool '{tool}' has no approval class, so strict mode refuses it. Classify it in \
             config.json under approval.tools (\"{tool}\": \"read_only\"|\"write\"|\"command\"), \
             in the MCP server's \"approval\" map, or in its tool.json."
        )),
        (ApprovalMode::ReadOnly, Some(c)) => Decision::Deny(format!(
            "Tool '{tool}' is classified '{}' and this session is read_only: only read_only \
             tools may run.",
            c.as_str()
        )),
        (ApprovalMode::ReadOnly, None) => Decision::Deny(format!(
            "Tool '{tool}' has no approval class and this session is read_only: only read_only \
             tools may run."
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_table() {
        use ApprovalClass::*;
        use ApprovalMode as M;
        assert_eq!(decide(M::Auto, None, false, "t"), Decision::Allow);
        assert_eq!(
            decide(M::Strict, Some(ReadOnly), false, "t"),
            Decision::Allow
        );
        assert_eq!(
            decide(M::Strict, Some(Write), false, "t"),
            Decision::NeedsApproval
        );
        assert_eq!(decide(M::Strict, Some(Command), true, "t"), Decision::Allow);
        assert!(matches!(
            decide(M::Strict, None, true, "t"),
            Decision::Deny(_)
        ));
        assert!(matches!(
            decide(M::ReadOnly, Some(Write), true, "t"),
            Decision::Deny(_)
        ));
        assert_eq!(
            decide(M::ReadOnly, Some(ReadOnly), false, "t"),
            Decision::Allow
        );
    }
}
