//! Approval on the wire: a tool's class (in its `meta`) and a session's mode, and the
//! daemon-wide queue of calls waiting for an operator's decision (`approvals.list`,
//! `approvals.decide`, `subscribe_approvals`). The rules that read them are
//! `approval::decide` and the queue `approvals`, on the daemon's side.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// What a call that needs approval would do, in one line (`write_file (write)
/// path="out.txt"`, or a module's own `formatApprovalDetails` text): what its frontend asks
/// the user, the queue shows ([`PendingApproval::summary`]) and an `approval_required`
/// result carries ([`super::CallOutcome::approval`]). On the wire a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ApprovalSummary(String);

impl ApprovalSummary {
    pub fn new(summary: impl Into<String>) -> Self {
        ApprovalSummary(summary.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ApprovalSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A call waiting in the approval queue for an operator (proto-docs/approvals.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingApproval {
    /// The queue entry's id, which `approvals.decide` names.
    pub id: String,
    pub call_id: String,
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The frontend's own name: session meta `client` (or `clientInfo.name`), else its
    /// connection's `User-Agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The tool's approval class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ApprovalClass>,
    /// What the call would do, in one line: the summary an elicitation shows the user.
    pub summary: ApprovalSummary,
    /// The call's arguments, values under secret-looking names masked.
    pub arguments: Map<String, Value>,
    /// The call's own frontend was asked too; the first answer wins.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub caller_asked: bool,
    /// Milliseconds since the Unix epoch when the call began to wait.
    pub since_ms: u64,
    /// When the wait ends without a decision (the call then fails `approval_required`).
    pub deadline_ms: u64,
}

/// An operator's decision on a pending call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Runs this call.
    AllowOnce,
    /// Runs this call, and the tool needs no approval in this session from now on.
    AllowSession,
    /// The call fails `denied`.
    Deny,
}

/// How a queue entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOutcome {
    AllowOnce,
    AllowSession,
    Deny,
    /// Nobody decided before the deadline.
    TimedOut,
    /// The call left before a decision: cancelled, its caller gone, or the daemon stopping.
    Withdrawn,
}

impl From<ApprovalDecision> for ApprovalOutcome {
    fn from(d: ApprovalDecision) -> Self {
        match d {
            ApprovalDecision::AllowOnce => ApprovalOutcome::AllowOnce,
            ApprovalDecision::AllowSession => ApprovalOutcome::AllowSession,
            ApprovalDecision::Deny => ApprovalOutcome::Deny,
        }
    }
}

impl ApprovalOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::AllowOnce => "allow_once",
            ApprovalOutcome::AllowSession => "allow_session",
            ApprovalOutcome::Deny => "deny",
            ApprovalOutcome::TimedOut => "timed_out",
            ApprovalOutcome::Withdrawn => "withdrawn",
        }
    }
}

/// Where a decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecidedVia {
    /// `approvals.decide` from a socket client that said nothing else.
    #[default]
    Socket,
    /// `toolhost approvals allow|deny`.
    Cli,
    /// The operator's page.
    Ui,
    /// The call's own frontend answered its approval question (never a `via` param).
    Caller,
}

impl DecidedVia {
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedVia::Socket => "socket",
            DecidedVia::Cli => "cli",
            DecidedVia::Ui => "ui",
            DecidedVia::Caller => "caller",
        }
    }
}

/// Who decided: the surface, and the deciding connection's peer as the kernel names it
/// (`SO_PEERCRED`; none for the caller's own answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalDecider {
    pub via: DecidedVia,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The peer's process name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Fleet mode: the member the decision was made on (proto-docs/fleet.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Fleet mode: the user whose token the decider came in with (proto-docs/fleet.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl ApprovalDecider {
    /// `uid 1000 pid 4242 (toolhost) via cli`, `user bob via socket on m-…`, or `the
    /// caller`.
    pub fn describe(&self) -> String {
        if self.via == DecidedVia::Caller {
            return "the caller".into();
        }
        let mut who = String::new();
        if let Some(user) = &self.user {
            who.push_str(&format!("user {user} "));
        }
        if let Some(uid) = self.uid {
            who.push_str(&format!("uid {uid} "));
        }
        if let Some(pid) = self.pid {
            who.push_str(&format!("pid {pid} "));
        }
        if let Some(p) = &self.process {
            who.push_str(&format!("({p}) "));
        }
        if who.is_empty() {
            // A TCP client: the kernel names no peer.
            who.push_str("an unnamed peer ");
        }
        match &self.member {
            Some(m) => format!("{who}via {} on {m}", self.via.as_str()),
            None => format!("{who}via {}", self.via.as_str()),
        }
    }
}

/// How a call's wait in the queue ended: what the audit log keeps of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalVerdictRecord {
    pub outcome: ApprovalOutcome,
    /// Who decided; none for `timed_out` and `withdrawn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<ApprovalDecider>,
    /// The decider's reason (a denial's, usually).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long the call waited, in milliseconds.
    pub waited_ms: u64,
}

/// A queue entry that ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecidedApproval {
    pub id: String,
    pub call_id: String,
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(flatten)]
    pub verdict: ApprovalVerdictRecord,
}

/// A notification of `subscribe_approvals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalEvent {
    /// A call began to wait (and, first of all, each call waiting when the subscription began).
    ApprovalPending(PendingApproval),
    /// A call's wait ended: decided, timed out or withdrawn.
    ApprovalDecided(DecidedApproval),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalsListResult {
    /// Oldest first.
    pub pending: Vec<PendingApproval>,
    /// What the workspaces bring and wait for the user's trust (`trust.approve`,
    /// `trust.folder`; proto-docs/trust.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trust: Vec<super::TrustItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsDecideParams {
    /// The queue entry (`id` of `approvals.list`).
    pub id: String,
    pub decision: ApprovalDecision,
    /// Shown to the caller with a denial, and kept in the audit log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The surface deciding, for the audit log: `socket` (default), `cli` or `ui`.
    #[serde(default)]
    pub via: DecidedVia,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{CallOutcome, ErrorKind};
    use serde_json::json;

    #[test]
    fn an_approval_required_result_carries_its_summary_typed() {
        let wire = json!({"ok": false, "error": "needs approval", "error_kind": "approval_required",
                          "approval": "write_file (write) path=\"out.txt\"", "path": "out.txt"});
        let outcome: CallOutcome = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(outcome.error_kind, Some(ErrorKind::ApprovalRequired));
        assert_eq!(
            outcome.approval,
            Some(ApprovalSummary::new("write_file (write) path=\"out.txt\""))
        );
        // Typed, not one of the tool's own fields; on the wire as before.
        assert!(!outcome.output.fields.contains_key("approval"));
        assert_eq!(serde_json::to_value(&outcome).unwrap(), wire);
    }
}
