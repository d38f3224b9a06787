//! Kernel-enforced confinement of the programs we start for calls (`bash`, custom tool
//! programs, and stdio MCP servers that ask for it), with Linux Landlock for files and
//! network and a seccomp filter for what Landlock has no right for (metadata, `TIOCSTI`).
//!
//! The policy is resolved per call (config default → session → the call's `sandbox: "off"`),
//! then [`plan`] turns it into a [`Plan`]: nothing to do, a refusal or an unconfined run
//! (when the kernel cannot enforce it), or a [`Confinement`] whose Landlock ruleset and
//! seccomp programs are built *before* the fork. The child then only makes raw syscalls
//! between fork and exec (see [`confine`]), because allocating there is unsafe in a
//! multi-threaded parent.

mod confine;
mod seccomp;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

pub use confine::{bench_setup, enter, install, Confinement};

use crate::config::SandboxConfig;
use crate::protocol::{
    Network, SandboxNote, SandboxNoteStatus, SandboxOverride, SandboxPolicy, SandboxStatus,
    SessionSandbox,
};

/// The sandbox of one call, resolved by the pipeline and read by the tools that start
/// programs.
#[derive(Debug, Clone, Default)]
pub struct CallSandbox {
    /// The policy the call runs under (`off` when the call left the sandbox).
    pub policy: SandboxPolicy,
    pub network: Network,
    /// The session's policy, kept to say what a `sandbox: "off"` call left.
    pub left: Option<SandboxPolicy>,
    /// The config's section in force for this call (extra paths, grants, `required`).
    pub config: SandboxConfig,
}

impl CallSandbox {
    /// Config default, then the session's choice, then the call's request to leave it.
    pub fn resolve(
        config: &SandboxConfig,
        session: Option<&SessionSandbox>,
        over: Option<SandboxOverride>,
    ) -> Self {
        let policy = session.and_then(|s| s.policy).unwrap_or(config.policy);
        let network = session.and_then(|s| s.network).unwrap_or(config.network);
        let left =
            (over == Some(SandboxOverride::Off) && policy != SandboxPolicy::Off).then_some(policy);
        CallSandbox {
            policy: if left.is_some() {
                SandboxPolicy::Off
            } else {
                policy
            },
            network,
            left,
            config: config.clone(),
        }
    }

    /// Whether a program started for this call will really be confined (for approval: a
    /// call the kernel cannot confine is not a "sandboxed command").
    pub fn enforced(&self) -> bool {
        self.policy != SandboxPolicy::Off && unsupported(self.policy, self.network).is_none()
    }
}

/// The test-only switch (like `TOOLHOST_FRAME_TIMEOUT_MS`): pretend the kernel has this
/// Landlock ABI (`0`: none). Only ever lowers what is reported and enforceable; the real
/// rules are never weakened by it.
pub const TEST_ABI_VAR: &str = "TOOLHOST_TEST_SANDBOX_ABI";

/// The kernel's Landlock ABI version (0 when Landlock is absent or disabled), probed once.
pub fn abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        let real = confine::probe_abi();
        match std::env::var(TEST_ABI_VAR)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
        {
            Some(simulated) => simulated.min(real),
            None => real,
        }
    })
}

/// The first ABI with TCP rules and with abstract-socket/signal scoping.
const ABI_NET: u32 = 4;
const ABI_SCOPES: u32 = 6;

/// Whether the kernel runs seccomp filters, probed once. The test switch's ABI 0 stands
/// for an old kernel with neither.
fn seccomp_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| abi() > 0 && seccomp::available())
}

/// What the kernel can enforce, for `host.health`.
pub fn status() -> SandboxStatus {
    let abi = abi();
    SandboxStatus {
        abi,
        filesystem: abi >= 1,
        network: abi >= ABI_NET,
        scopes: abi >= ABI_SCOPES,
        seccomp: seccomp_available(),
    }
}

/// Why the kernel cannot enforce `policy`/`network`, if it cannot.
fn unsupported(policy: SandboxPolicy, network: Network) -> Option<String> {
    let abi = abi();
    if policy == SandboxPolicy::Off {
        return None;
    }
    if abi == 0 {
        return Some(format!(
            "the kernel has no Landlock (needs Linux 5.13+ with landlock in the `lsm=` list), so sandbox policy {} cannot be enforced",
            policy.as_str()
        ));
    }
    if !seccomp_available() {
        return Some(format!(
            "the kernel runs no seccomp filters (CONFIG_SECCOMP_FILTER), so sandbox policy {} cannot keep programs from changing modes, owners and times outside",
            policy.as_str()
        ));
    }
    if network == Network::Deny && abi < ABI_NET {
        return Some(format!(
            "network: deny needs Landlock ABI {ABI_NET} (Linux 6.7+); this kernel has ABI {abi}"
        ));
    }
    None
}

/// What starts the name of a confined run's temp dir: `toolhost-call-<pid>.<start>-`, the
/// daemon process that made it and its start time, so that a later daemon tells a killed
/// one's leftovers (it could not remove them) from a live one's ([`sweep_call_dirs`]).
const CALL_DIR: &str = "toolhost-call-";

fn call_dir_prefix() -> String {
    let pid = std::process::id() as i32;
    let start = crate::procfs::stat(pid).map_or(0, |s| s.starttime);
    format!("{CALL_DIR}{pid}.{start}-")
}

/// A new private temp dir of one run outside the sandbox, named like a confined run's (so
/// the next start sweeps it if this daemon is killed before removing it).
pub fn call_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&call_dir_prefix())
        .tempdir()
}

/// Removes the temp dirs of confined runs whose daemon is gone, in `$TMPDIR` and in
/// `/tmp` (a daemon may have run with either): ours (by owner), real directories (not
/// symlinks), named by a process that no longer runs with that start time. Blocking; run
/// once at start. Returns how many were removed.
pub fn sweep_call_dirs() -> usize {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let mut places = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    places.dedup();
    let mut removed = 0;
    for place in places {
        let Ok(entries) = std::fs::read_dir(&place) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name
                .to_str()
                .and_then(|n| n.strip_prefix(CALL_DIR))
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(owner, _)| owner.split_once('.'))
                .and_then(|(pid, start)| {
                    Some((pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?))
                })
            else {
                continue;
            };
            let ours = entry
                .metadata()
                .is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid);
            let alive = crate::procfs::stat(owner.0).is_some_and(|s| s.starttime == owner.1);
            if ours && !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    if removed > 0 {
        tracing::info!("removed {removed} temp dirs of confined runs a killed daemon left");
    }
    removed
}

/// What to do about the sandbox for one program run.
#[derive(Debug)]
pub enum Plan {
    /// Policy `off`; `left` is the policy the call asked to leave.
    Off {
        left: Option<SandboxPolicy>,
    },
    /// The kernel cannot enforce the policy and config allows running without it.
    Unenforced {
        policy: SandboxPolicy,
        network: Network,
        reason: String,
    },
    Confined(Confinement),
}

/// Extra rights a custom tool's manifest asks for and config granted.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub network: bool,
    pub writable: Vec<PathBuf>,
}

/// Decides and prepares the sandbox of one run in `workspace`. Errors with
/// `sandbox_unavailable` when the kernel cannot enforce the policy and `required` is true.
pub fn plan(call: &CallSandbox, workspace: &Path, extras: &Extras) -> Result<Plan, Refusal> {
    if call.policy == SandboxPolicy::Off {
        return Ok(Plan::Off { left: call.left });
    }
    let network = if extras.network {
        Network::Allow
    } else {
        call.network
    };
    if let Some(reason) = unsupported(call.policy, network) {
        if call.config.required {
            return Err(Refusal {
                message: format!("{reason}; refused because sandbox.required is true (set it to false to run unconfined, or use sandbox policy off)"),
                note: Some(note(call.policy, network, SandboxNoteStatus::Unavailable, &reason)),
            });
        }
        return Ok(Plan::Unenforced {
            policy: call.policy,
            network,
            reason,
        });
    }
    // Read-only writes nowhere but the run's own temp dir (and /dev/null and friends).
    let mut writable: Vec<PathBuf> = Vec::new();
    if call.policy == SandboxPolicy::WorkspaceWrite {
        writable.push(workspace.to_path_buf());
        writable.extend(call.config.writable.iter().cloned());
        writable.extend(extras.writable.iter().cloned());
    }
    Confinement::build(call.policy, network, &writable, &call.config.hidden)
        .map(Plan::Confined)
        .map_err(|e| Refusal {
            message: format!("could not set up the sandbox: {e}"),
            note: None,
        })
}

/// A run the sandbox cannot confine as asked: the call fails with `sandbox_unavailable`
/// (the registry turns it into the tool error), `note` becoming the result's `sandbox`.
#[derive(Debug)]
pub struct Refusal {
    pub message: String,
    pub note: Option<Value>,
}

impl Plan {
    /// The `sandbox` field of a run's result, when there is something to say: the run was
    /// not confined although a policy applies, the call left the sandbox, or a confined run
    /// failed with an error that looks like the sandbox refusing (`denied`).
    pub fn result_note(&self, failed: bool, stderr: &str) -> Option<Value> {
        match self {
            Plan::Off { left: None } => None,
            Plan::Off { left: Some(p) } => Some(to_value(SandboxNote {
                policy: SandboxPolicy::Off,
                network: None,
                left: Some(*p),
                status: None,
                note: format!("ran outside the sandbox (the session's policy is {}), as approved", p.as_str()),
            })),
            Plan::Unenforced {
                policy,
                network,
                reason,
            } => Some(note(*policy, *network, SandboxNoteStatus::Unenforced, &format!(
                "{reason}; ran unconfined because sandbox.required is false"
            ))),
            Plan::Confined(c) if failed && looks_denied(stderr) => Some(note(
                c.policy(),
                c.network(),
                SandboxNoteStatus::Denied,
                &format!(
                    "the sandbox ({}, network {}) probably refused this: writes are allowed only in {}{}; ask the user to run it outside the sandbox (sandbox: \"off\", approved: true) if it must",
                    c.policy().as_str(),
                    c.network().as_str(),
                    if c.policy() == SandboxPolicy::WorkspaceWrite { "the workspace, " } else { "" },
                    "$TMPDIR and the configured sandbox.writable paths",
                ),
            )),
            Plan::Confined(_) => None,
        }
    }
}

fn note(policy: SandboxPolicy, network: Network, status: SandboxNoteStatus, text: &str) -> Value {
    to_value(SandboxNote {
        policy,
        network: Some(network),
        left: None,
        status: Some(status),
        note: text.to_owned(),
    })
}

/// A note as the result field it becomes (tool results are still JSON maps). Serialising
/// a struct of strings and string enums cannot fail.
fn to_value(note: SandboxNote) -> Value {
    serde_json::to_value(note).unwrap_or_default()
}

/// Error texts of a refused write, exec or connect (EACCES, EPERM, EROFS as shells and
/// common tools print them).
fn looks_denied(stderr: &str) -> bool {
    const MARKERS: &[&str] = &[
        "Permission denied",
        "Operation not permitted",
        "Read-only file system",
        "EACCES",
        "EPERM",
    ];
    MARKERS.iter().any(|m| stderr.contains(m))
}

/// Confines a stdio MCP server per its `sandbox` setting (the server's writable place is
/// its `cwd`, else the daemon's working directory). The returned confinement owns the
/// server's `TMPDIR` and must live as long as the server. A policy the kernel cannot
/// enforce is an error: the server does not start, and `mcp.status` says why.
pub fn confine_server(
    cmd: &mut tokio::process::Command,
    s: &crate::config::ServerSandbox,
    cwd: Option<&Path>,
) -> anyhow::Result<Option<Confinement>> {
    if s.policy == SandboxPolicy::Off {
        return Ok(None);
    }
    if let Some(reason) = unsupported(s.policy, s.network) {
        anyhow::bail!("sandbox: {reason}");
    }
    let mut writable = Vec::new();
    if s.policy == SandboxPolicy::WorkspaceWrite {
        match cwd {
            Some(c) => writable.push(c.to_path_buf()),
            None => writable.push(std::env::current_dir()?),
        }
        writable.extend(s.writable.iter().cloned());
    }
    let c = Confinement::build(s.policy, s.network, &writable, &[])?;
    cmd.env("TMPDIR", c.tmpdir());
    install(cmd, &c);
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order_and_leaving() {
        let mut cfg = SandboxConfig {
            policy: SandboxPolicy::ReadOnly,
            ..Default::default()
        };
        cfg.network = Network::Deny;
        let c = CallSandbox::resolve(&cfg, None, None);
        assert_eq!(
            (c.policy, c.network, c.left),
            (SandboxPolicy::ReadOnly, Network::Deny, None)
        );
        let s = SessionSandbox {
            policy: Some(SandboxPolicy::WorkspaceWrite),
            network: None,
        };
        let c = CallSandbox::resolve(&cfg, Some(&s), None);
        assert_eq!(
            (c.policy, c.network, c.left),
            (SandboxPolicy::WorkspaceWrite, Network::Deny, None)
        );
        let c = CallSandbox::resolve(&cfg, Some(&s), Some(SandboxOverride::Off));
        assert_eq!(
            (c.policy, c.left),
            (SandboxPolicy::Off, Some(SandboxPolicy::WorkspaceWrite))
        );
        // Leaving a sandbox that is off is nothing to approve.
        let c = CallSandbox::resolve(&SandboxConfig::default(), None, Some(SandboxOverride::Off));
        assert_eq!((c.policy, c.left), (SandboxPolicy::Off, None));
    }

    /// The note is a protocol type now; its JSON keeps the fields and their order.
    #[test]
    fn result_notes_on_the_wire() {
        let left = Plan::Off {
            left: Some(SandboxPolicy::WorkspaceWrite),
        };
        assert_eq!(
            left.result_note(false, "")
                .map(|v| v.to_string())
                .as_deref(),
            Some(
                r#"{"policy":"off","left":"workspace-write","note":"ran outside the sandbox (the session's policy is workspace-write), as approved"}"#
            )
        );
        let unenforced = Plan::Unenforced {
            policy: SandboxPolicy::ReadOnly,
            network: Network::Deny,
            reason: "no Landlock".into(),
        };
        assert_eq!(
            unenforced
                .result_note(true, "")
                .map(|v| v.to_string())
                .as_deref(),
            Some(
                r#"{"policy":"read-only","network":"deny","status":"unenforced","note":"no Landlock; ran unconfined because sandbox.required is false"}"#
            )
        );
        assert_eq!(Plan::Off { left: None }.result_note(true, "denied"), None);
    }

    #[test]
    fn denial_markers() {
        assert!(looks_denied(
            "touch: cannot touch '/etc/x': Permission denied"
        ));
        assert!(looks_denied("rm: cannot remove 'x': Read-only file system"));
        assert!(!looks_denied("No such file or directory"));
    }
}
