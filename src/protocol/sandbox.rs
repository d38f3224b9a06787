//! The sandbox on the wire: the policies a session may choose, a call's request to leave
//! them, what `host.health` says the kernel can enforce, and the `sandbox` field of a
//! result. Resolving and enforcing them is `sandbox`'s job, on the daemon's side.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a confined program may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxPolicy {
    /// No confinement: the daemon user's full rights (the default, today's behaviour).
    #[default]
    Off,
    /// Read anywhere; write only the workspace, the per-call temp dir and configured paths.
    WorkspaceWrite,
    /// Read anywhere; write only the per-call temp dir (removed after the call), whatever
    /// `writable` or grants say.
    ReadOnly,
}

impl SandboxPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxPolicy::Off => "off",
            SandboxPolicy::WorkspaceWrite => "workspace-write",
            SandboxPolicy::ReadOnly => "read-only",
        }
    }
}

/// Whether a confined program may open TCP connections and bind TCP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    #[default]
    Allow,
    /// TCP connect and bind refused (Landlock ABI 4+), abstract Unix sockets outside the
    /// sandbox too (ABI 6+). UDP and other protocols are not covered.
    Deny,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Allow => "allow",
            Network::Deny => "deny",
        }
    }
}

/// A session's sandbox; unset fields follow the config's `sandbox` section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSandbox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<SandboxPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

/// The one thing a call may ask of the sandbox: to leave it (needs `approved: true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxOverride {
    Off,
}

/// What the kernel can enforce, for `host.health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxStatus {
    /// Landlock ABI version; 0 when Landlock is not available.
    pub abi: u32,
    /// File-system policies (`workspace-write`, `read-only`) can be enforced.
    pub filesystem: bool,
    /// `network: deny` can be enforced (TCP connect/bind rules, ABI 4+).
    pub network: bool,
    /// Signals to and abstract Unix sockets of processes outside the sandbox are blocked
    /// (ABI 6+).
    pub scopes: bool,
    /// The seccomp filter runs with every confined program: no owner, extended-attribute or
    /// set-ID changes, no faked terminal input (and no mode or time changes under
    /// `read-only`).
    pub seccomp: bool,
}

impl SandboxStatus {
    /// One line for `toolhost health`.
    pub fn summary(&self) -> String {
        if !self.filesystem {
            return "unavailable (no Landlock in this kernel): confined policies are refused or run unconfined (sandbox.required)".to_owned();
        }
        let mut can = vec!["file-system policies"];
        if self.network {
            can.push("network deny (TCP)");
        }
        if self.scopes {
            can.push("signal and abstract-socket scoping");
        }
        if self.seccomp {
            can.push("metadata and terminal-input filter (seccomp)");
        }
        format!("Landlock ABI {}: {}", self.abi, can.join(", "))
    }
}

/// The `sandbox` field of a tool's result (proto-docs/sandbox.md): a run that was not
/// confined although a policy applies, a call that left the sandbox, or a confined run the
/// sandbox probably refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxNote {
    /// The policy in force: `off` for a call that left the sandbox.
    pub policy: SandboxPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// The session's policy that a `sandbox: "off"` call left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<SandboxPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SandboxNoteStatus>,
    /// What happened, in words for the model.
    pub note: String,
}

/// Why a result carries a [`SandboxNote`] (absent when the call left the sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxNoteStatus {
    // The kernel cannot enforce the policy and `sandbox.required` refused the call. (Plain
    // comments: a doc comment would turn the schema's `enum` into a `oneOf`.)
    Unavailable,
    // The kernel cannot enforce the policy; the program ran unconfined.
    Unenforced,
    // A confined run failed with an error that looks like the sandbox refusing it.
    Denied,
}
