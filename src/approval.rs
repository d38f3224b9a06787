//! The policy decision: may this call run in this session's mode? (The classes and modes
//! it reads are wire types, in `protocol`.)
//!
//! One function, [`decide`], owns the rule table of proto-docs/tools.md ("Approval") so the invoke pipeline,
//! the docs and the tests all point at the same place.

use crate::catalog::ToolSource;
use crate::config::SandboxedCommands;
use crate::protocol::{ApprovalClass, ApprovalMode};

/// The sandbox facts of one call that bear on approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sandboxing {
    /// The tool's program will run confined by a policy the kernel enforces.
    pub confined: bool,
    /// The call asks to leave the session's sandbox (`sandbox: "off"`).
    pub leaves: bool,
    /// `approval.sandboxed_commands`.
    pub commands: SandboxedCommands,
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

/// Applies the rule table of the approval modes (proto-docs/tools.md, "Approval").
pub fn decide(
    mode: ApprovalMode,
    class: Option<ApprovalClass>,
    approved: bool,
    tool: &str,
    source: &ToolSource,
) -> Decision {
    use ApprovalClass::*;
    match (mode, class) {
        (ApprovalMode::Auto, _) => Decision::Allow,
        (_, Some(ReadOnly)) => Decision::Allow,
        (ApprovalMode::Strict, Some(Write | Command)) if approved => Decision::Allow,
        (ApprovalMode::Strict, Some(Write | Command)) => Decision::NeedsApproval,
        (ApprovalMode::Strict, None) => Decision::Deny(format!(
            "Tool '{tool}' has no approval class, so strict mode refuses it. {}",
            where_to_classify(tool, source)
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

/// Where the user gives `tool` its approval class: the places that apply to its source.
fn where_to_classify(tool: &str, source: &ToolSource) -> String {
    const CLASSES: &str = "\"read_only\"|\"write\"|\"command\"";
    let config = format!("in config.json under approval.tools (\"{tool}\": {CLASSES})");
    match source {
        ToolSource::Mcp {
            server,
            remote_name,
        } => format!(
            "Classify it in config.json under mcp_servers.{server}.approval \
             (\"{remote_name}\": {CLASSES}), or {config}."
        ),
        ToolSource::Custom { dir, .. } => format!(
            "Classify it with \"approval\": {CLASSES} in {}, or {config}.",
            dir.join("tool.json").display()
        ),
        ToolSource::Builtin => format!("Classify it {config}."),
    }
}

/// [`decide`] with the sandbox: leaving the sandbox always needs `approved: true` (in
/// every mode that lets the tool run at all), and with `approval.sandboxed_commands: auto`
/// a strict session runs confined `command` tools without asking.
pub fn decide_sandboxed(
    mode: ApprovalMode,
    class: Option<ApprovalClass>,
    approved: bool,
    tool: &str,
    source: &ToolSource,
    sandbox: Sandboxing,
) -> Decision {
    let base = decide(mode, class, approved, tool, source);
    match base {
        Decision::Deny(_) => base,
        _ if sandbox.leaves && !approved => Decision::NeedsApproval,
        Decision::NeedsApproval
            if mode == ApprovalMode::Strict
                && class == Some(ApprovalClass::Command)
                && sandbox.confined
                && !sandbox.leaves
                && sandbox.commands == SandboxedCommands::Auto =>
        {
            Decision::Allow
        }
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_rules() {
        use ApprovalClass::*;
        use ApprovalMode as M;
        let auto = Sandboxing {
            confined: true,
            leaves: false,
            commands: SandboxedCommands::Auto,
        };
        let d = |m, c, a, s| decide_sandboxed(m, Some(c), a, "t", &ToolSource::Builtin, s);
        assert_eq!(d(M::Strict, Command, false, auto), Decision::Allow);
        // Writes and unconfined commands still ask.
        assert_eq!(d(M::Strict, Write, false, auto), Decision::NeedsApproval);
        let unconfined = Sandboxing {
            confined: false,
            ..auto
        };
        assert_eq!(
            d(M::Strict, Command, false, unconfined),
            Decision::NeedsApproval
        );
        let ask = Sandboxing {
            commands: SandboxedCommands::Ask,
            ..auto
        };
        assert_eq!(d(M::Strict, Command, false, ask), Decision::NeedsApproval);
        // Leaving the sandbox needs approval even in auto mode.
        let leaves = Sandboxing {
            confined: false,
            leaves: true,
            commands: SandboxedCommands::Auto,
        };
        assert_eq!(d(M::Auto, Command, false, leaves), Decision::NeedsApproval);
        assert_eq!(
            d(M::Strict, Command, false, leaves),
            Decision::NeedsApproval
        );
        assert_eq!(d(M::Strict, Command, true, leaves), Decision::Allow);
        assert!(matches!(
            d(M::ReadOnly, Command, true, leaves),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn rule_table() {
        use ApprovalClass::*;
        use ApprovalMode as M;
        assert_eq!(
            decide(M::Auto, None, false, "t", &ToolSource::Builtin),
            Decision::Allow
        );
        assert_eq!(
            decide(M::Strict, Some(ReadOnly), false, "t", &ToolSource::Builtin),
            Decision::Allow
        );
        assert_eq!(
            decide(M::Strict, Some(Write), false, "t", &ToolSource::Builtin),
            Decision::NeedsApproval
        );
        assert_eq!(
            decide(M::Strict, Some(Command), true, "t", &ToolSource::Builtin),
            Decision::Allow
        );
        assert!(matches!(
            decide(M::Strict, None, true, "t", &ToolSource::Builtin),
            Decision::Deny(_)
        ));
        assert!(matches!(
            decide(M::ReadOnly, Some(Write), true, "t", &ToolSource::Builtin),
            Decision::Deny(_)
        ));
        assert_eq!(
            decide(
                M::ReadOnly,
                Some(ReadOnly),
                false,
                "t",
                &ToolSource::Builtin
            ),
            Decision::Allow
        );
    }
}
