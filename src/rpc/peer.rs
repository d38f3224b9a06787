//! What a connection's peer may do: a process the host itself started (a call's command, a
//! custom tool, an MCP server, or anything they forked) gets no more through the socket
//! than a call has, or a sandboxed command could call `invoke` with `sandbox: "off"` and
//! walk out of its sandbox.
//!
//! Who the peer is comes from the kernel (`SO_PEERCRED`, see [`Caller`]): a process is
//! *started by the host* when its parent chain leads to the daemon (the daemon is the child
//! subreaper, so a double-forked or `setsid` escapee is re-parented to it and still leads
//! there) or it carries this daemon's instance cookie. Such a peer is [`Limited`] to the
//! rights of the call whose process tree it is in (`Processes::call_of`, `CallTable`): its
//! workspace, its session's sandbox and approval mode as a floor. A peer of no call (an MCP
//! server, a session event, a call that has ended) gets the most restricted rights. The
//! check runs once, where the connection dispatches every method, and refuses what would
//! give it more — approval flags, sandbox overrides, a looser sandbox or approval mode,
//! workspaces outside its call's, admin methods, sessions it did not create. A method this
//! table does not name is refused: a new admin method is closed to such peers until listed
//! here.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;

use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};
use serde_json::{json, Map, Value};

use crate::audit::Caller;
use crate::calls::CallRights;
use crate::host::Host;
use crate::lock;
use crate::process::INSTANCE_VAR;
use crate::procfs;
use crate::protocol::{codes, method, ApprovalMode, Network, SandboxPolicy};

/// The sessions created by host-started peers: the only ones such a peer may use. Kept in
/// memory, so after a restart they are closed to such peers too (the safe side).
#[derive(Default)]
pub(super) struct StartedSessions(Mutex<HashSet<String>>);

impl StartedSessions {
    fn holds(&self, id: &str) -> bool {
        lock(&self.0).contains(id)
    }
}

/// A host-started peer's limits: the rights of its call (the workspace canonical, the
/// outer bound of every workspace it may name), which the sessions it creates get and may
/// only tighten.
pub(super) struct Limited {
    rights: CallRights,
}

/// Whether the peer is a process the host started; `None` (no limits) for the user's own
/// clients and for the daemon itself (the MCP facade's in-process connection).
pub(super) fn limits(host: &Host, caller: Option<&Caller>) -> Option<Limited> {
    if !started_by_host(host, caller) {
        return None;
    }
    let caller = caller?;
    let call = caller.pid.and_then(|pid| host.processes().call_of(pid));
    let mut rights = call
        .and_then(|c| host.calls().rights(&c))
        .unwrap_or_else(|| most_restricted(host.workspace()));
    if let Ok(canonical) = rights.workspace.canonicalize() {
        rights.workspace = canonical;
    }
    Some(Limited { rights })
}

/// Whether the peer is a process the host started (or one that cannot be named: not
/// trusted); `false` for the user's own clients and the daemon itself.
pub(super) fn started_by_host(host: &Host, caller: Option<&Caller>) -> bool {
    let Some(caller) = caller else {
        return false;
    };
    let me = std::process::id() as i32;
    // SO_PEERCRED always names the peer on Linux; a peer we cannot name is not trusted.
    match caller.pid {
        Some(pid) if pid == me => false,
        Some(pid) => descends_from(pid, me) || carries_cookie(pid, host.processes().instance()),
        None => true,
    }
}

/// The rights of a peer that is no call's: the daemon's workspace, read-only, no network,
/// strict (reads run; writes and commands wait for an approval it cannot give).
fn most_restricted(workspace: &Path) -> CallRights {
    CallRights {
        workspace: workspace.to_path_buf(),
        sandbox: SandboxPolicy::ReadOnly,
        network: Network::Deny,
        approval: ApprovalMode::Strict,
    }
}

/// How strict each setting is, loosest first: a peer may ask for its call's or stricter.
fn policy_rank(p: SandboxPolicy) -> u8 {
    match p {
        SandboxPolicy::Off => 0,
        SandboxPolicy::WorkspaceWrite => 1,
        SandboxPolicy::ReadOnly => 2,
    }
}

fn network_rank(n: Network) -> u8 {
    match n {
        Network::Allow => 0,
        Network::Deny => 1,
    }
}

fn approval_rank(a: ApprovalMode) -> u8 {
    match a {
        ApprovalMode::Auto => 0,
        ApprovalMode::Strict => 1,
        ApprovalMode::ReadOnly => 2,
    }
}

/// Whether `pid`'s parent chain reaches `root`, or cannot be followed (the peer is gone, or
/// an ancestor vanished mid-walk: not vouched for). Every descendant of `root` started after
/// it, so the walk stops at the first ancestor older than `root`: a user's client, whose
/// shell predates the daemon, costs one or two /proc reads.
fn descends_from(pid: i32, root: i32) -> bool {
    let Some(root_start) = procfs::stat(root).map(|s| s.starttime) else {
        return true;
    };
    let mut cur = pid;
    // Bounded: a chain can be no longer than the number of processes.
    for _ in 0..65_536 {
        if cur == root {
            return true;
        }
        let Some(s) = procfs::stat(cur) else {
            return true;
        };
        if s.starttime < root_start || s.ppid <= 1 {
            return false;
        }
        cur = s.ppid;
    }
    true
}

/// Whether the process carries this daemon's instance cookie (it was started by us and
/// left the tree some other way).
fn carries_cookie(pid: i32, instance: &str) -> bool {
    procfs::environ_has(pid, format!("{INSTANCE_VAR}={instance}").as_bytes())
}

/// How a method is open to a host-started peer.
enum Access {
    /// Reads nothing private and changes nothing: open.
    Open,
    /// Changes the host for everyone (config, MCP servers, pins) or reaches others' calls
    /// and sessions: refused.
    Admin,
    /// Takes an optional `session_id`, which must be one of its own; `invoke` also refuses
    /// approval flags and sandbox overrides.
    Call,
    /// Names a session in `id`, which must be one of its own.
    OwnSession,
    /// `session.create`/`session.update`: a sandbox and approval mode no looser than the
    /// call's, a workspace inside the call's.
    SessionSettings,
}

fn access(name: &str) -> Access {
    match name {
        method::HEALTH
        | method::STATUS
        | method::CONFIG_STATUS
        | method::MCP_STATUS
        | method::TOOLS_DIFF
        | method::DISCOVER
        | method::SUBSCRIBE_TOOLS_CHANGED
        | method::UNSUBSCRIBE_TOOLS_CHANGED
        | method::UNSUBSCRIBE_INVOKE => Access::Open,
        method::INVOKE | method::SUBSCRIBE_INVOKE | method::LIST_TOOLS | method::TOOLS_SEARCH => {
            Access::Call
        }
        method::SESSION_GET
        | method::SESSION_DELETE
        | method::SESSION_TOOLS
        | method::SESSION_RESUME
        | method::SESSION_REFRESH_TOOLS => Access::OwnSession,
        method::SESSION_CREATE | method::SESSION_UPDATE => Access::SessionSettings,
        // The approval queue: a process the host started never sees others' calls' arguments
        // nor decides an approval (its own call's, least of all).
        method::APPROVALS_LIST
        | method::APPROVALS_DECIDE
        | method::SUBSCRIBE_APPROVALS
        | method::UNSUBSCRIBE_APPROVALS => Access::Admin,
        // The guards: their status names others' sessions and workspaces, and a reset
        // would let a runaway call lift its own limit.
        method::GUARDS_STATUS | method::GUARDS_RESET => Access::Admin,
        // config.reload, mcp.add/remove/reload/login/logout, tools.approve, trust.* (a
        // process never approves what its own workspace brings), cancel (of any
        // call), session.list (everyone's sessions), and whatever is added later.
        _ => Access::Admin,
    }
}

fn refused(why: String) -> ErrorObjectOwned {
    ErrorObject::owned(
        codes::PEER_NOT_ALLOWED,
        format!("Not allowed from a process the host started: {why}"),
        None::<()>,
    )
}

/// What a checked call runs with.
pub(super) enum Admitted {
    /// The params as sent.
    AsSent,
    /// Rewritten params (a session's id made explicit, a workspace made canonical); a
    /// `session.create` with them makes session `created`, the peer's own from then on.
    Rewritten {
        params: String,
        created: Option<String>,
    },
}

impl Limited {
    /// Checks one call of `name` against these limits.
    pub(super) fn admit(
        &self,
        sessions: &StartedSessions,
        name: &str,
        params: Option<&str>,
    ) -> Result<Admitted, ErrorObjectOwned> {
        let access = access(name);
        if let Access::Admin = access {
            return Err(refused(format!("{name} is an admin method")));
        }
        if let Access::Open = access {
            return Ok(Admitted::AsSent);
        }
        // Params the method cannot parse are left to it: it answers with its own error.
        let Some(Value::Object(mut p)) = params.and_then(|s| serde_json::from_str(s).ok()) else {
            return Ok(Admitted::AsSent);
        };
        let own = |key: &str| match p.get(key) {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(id)) if sessions.holds(id) => Ok(()),
            Some(id) => Err(refused(format!("session {id} is not one it created"))),
        };
        match access {
            Access::Call => {
                own("session_id")?;
                let sessionless = p.get("session_id").is_none_or(Value::is_null);
                if sessionless && matches!(name, method::INVOKE | method::SUBSCRIBE_INVOKE) {
                    return Err(refused(
                        "a call must name a session it created (whose calls keep its call's limits)"
                            .into(),
                    ));
                }
                if p.get("approved").is_some_and(|a| a != &Value::Bool(false)) {
                    return Err(refused("`approved` is the user's to give".into()));
                }
                if p.get("sandbox").is_some_and(|s| !s.is_null()) {
                    return Err(refused("a call cannot leave its sandbox".into()));
                }
                Ok(Admitted::AsSent)
            }
            Access::OwnSession => {
                own("id")?;
                Ok(Admitted::AsSent)
            }
            Access::SessionSettings => {
                let create = name == method::SESSION_CREATE;
                let created = if create {
                    let id = match p.get("id") {
                        Some(Value::String(id)) => id.clone(),
                        _ => crate::session::new_id(),
                    };
                    p.insert("id".into(), Value::String(id.clone()));
                    Some(id)
                } else {
                    own("id")?;
                    None
                };
                self.floor_sandbox(&mut p, create)?;
                self.floor_approval(&mut p, create)?;
                self.confine_workspace(&mut p, create)?;
                let params = Value::Object(p).to_string();
                Ok(Admitted::Rewritten { params, created })
            }
            Access::Open | Access::Admin => Ok(Admitted::AsSent),
        }
    }

    /// A session's `sandbox`: each part given must be no looser than the call's; on
    /// `create` the parts not given are the call's.
    fn floor_sandbox(
        &self,
        p: &mut Map<String, Value>,
        create: bool,
    ) -> Result<(), ErrorObjectOwned> {
        let given = match p.get("sandbox") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Ok(()), // the method refuses a mistyped sandbox itself
        };
        let floor = &self.rights;
        let policy = given
            .get("policy")
            .map(|v| serde_json::from_value::<SandboxPolicy>(v.clone()));
        let network = given
            .get("network")
            .map(|v| serde_json::from_value::<Network>(v.clone()));
        let (Ok(policy), Ok(network)) = (policy.transpose(), network.transpose()) else {
            return Ok(()); // unknown values: the method answers with its own error
        };
        if policy.is_some_and(|p| policy_rank(p) < policy_rank(floor.sandbox))
            || network.is_some_and(|n| network_rank(n) < network_rank(floor.network))
        {
            return Err(refused(format!(
                "a session's sandbox cannot be looser than its call's (policy {}, network {})",
                floor.sandbox.as_str(),
                json!(floor.network)
            )));
        }
        if create {
            p.insert(
                "sandbox".into(),
                json!({
                    "policy": policy.unwrap_or(floor.sandbox),
                    "network": network.unwrap_or(floor.network),
                }),
            );
        }
        Ok(())
    }

    /// A session's `approval`: no looser than the call's; on `create`, the call's if not
    /// given.
    fn floor_approval(
        &self,
        p: &mut Map<String, Value>,
        create: bool,
    ) -> Result<(), ErrorObjectOwned> {
        let floor = self.rights.approval;
        let given = match p.get("approval") {
            None | Some(Value::Null) => None,
            Some(v) => match serde_json::from_value::<ApprovalMode>(v.clone()) {
                Ok(mode) => Some(mode),
                Err(_) => return Ok(()), // the method refuses it itself
            },
        };
        if given.is_some_and(|m| approval_rank(m) < approval_rank(floor)) {
            return Err(refused(format!(
                "a session's approval cannot be looser than its call's ({})",
                json!(floor)
            )));
        }
        if create {
            p.insert("approval".into(), json!(given.unwrap_or(floor)));
        }
        Ok(())
    }

    /// Replaces a requested workspace by its canonical path, which must lie inside the
    /// call's workspace (the session stores the path checked here, not one a symlink
    /// swapped in later could redirect); on `create` without one, the call's.
    fn confine_workspace(
        &self,
        p: &mut Map<String, Value>,
        create: bool,
    ) -> Result<(), ErrorObjectOwned> {
        let workspace = &self.rights.workspace;
        let Some(requested) = p.get("workspace").filter(|w| !w.is_null()) else {
            if create {
                p.insert("workspace".into(), path_value(workspace));
            }
            return Ok(());
        };
        let Value::String(w) = requested else {
            return Ok(()); // the method refuses a mistyped workspace itself
        };
        let inside = workspace
            .join(w)
            .canonicalize()
            .ok()
            .filter(|c| c.starts_with(workspace));
        let Some(canonical) = inside else {
            return Err(refused(format!(
                "workspace {w:?} is not inside its call's workspace {}",
                workspace.display()
            )));
        };
        p.insert("workspace".into(), path_value(&canonical));
        Ok(())
    }
}

fn path_value(path: &Path) -> Value {
    Value::String(path.display().to_string())
}

impl StartedSessions {
    /// Records what a successful call changed: a created session becomes the peer's own, a
    /// deleted one is forgotten.
    pub(super) fn settle(&self, name: &str, params: Option<&str>, created: Option<String>) {
        if let Some(id) = created {
            lock(&self.0).insert(id);
        } else if name == method::SESSION_DELETE {
            let id = params
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .and_then(|p| p.get("id")?.as_str().map(str::to_owned));
            if let Some(id) = id {
                lock(&self.0).remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited() -> Limited {
        Limited {
            rights: most_restricted(&std::env::temp_dir().canonicalize().unwrap()),
        }
    }

    #[test]
    fn unlisted_methods_are_closed() {
        let s = StartedSessions::default();
        for name in [
            method::MCP_ADD,
            method::CONFIG_RELOAD,
            method::TOOLS_APPROVE,
            method::APPROVALS_LIST,
            method::APPROVALS_DECIDE,
            method::SUBSCRIBE_APPROVALS,
            method::TRUST_LIST,
            method::TRUST_APPROVE,
            method::TRUST_FOLDER,
            "future.admin",
        ] {
            assert!(limited().admit(&s, name, None).is_err(), "{name}");
        }
        assert!(limited().admit(&s, method::HEALTH, None).is_ok());
    }

    #[test]
    fn calls_keep_their_limits() {
        let s = StartedSessions::default();
        let l = limited();
        assert!(l.admit(&s, method::LIST_TOOLS, Some("{}")).is_ok());
        for bad in [
            r#"{"name":"bash"}"#,
            r#"{"name":"bash","approved":true}"#,
            r#"{"name":"bash","sandbox":"off"}"#,
            r#"{"name":"bash","session_id":"someone_else"}"#,
        ] {
            let e = l.admit(&s, method::INVOKE, Some(bad)).err().unwrap();
            assert_eq!(e.code(), codes::PEER_NOT_ALLOWED, "{bad}");
        }
    }

    #[test]
    fn created_sessions_become_its_own() {
        let s = StartedSessions::default();
        let l = limited();
        let Ok(Admitted::Rewritten { params, created }) =
            l.admit(&s, method::SESSION_CREATE, Some("{}"))
        else {
            panic!("create is rewritten");
        };
        let id = created.clone().unwrap();
        let p: Value = serde_json::from_str(&params).unwrap();
        assert_eq!(p["id"], id.as_str());
        assert_eq!(p["sandbox"]["policy"], "read-only");
        assert_eq!(p["approval"], "strict");
        s.settle(method::SESSION_CREATE, Some(&params), created);
        let call = format!(r#"{{"name":"bash","session_id":"{id}"}}"#);
        assert!(l.admit(&s, method::INVOKE, Some(&call)).is_ok());
        let outside = r#"{"workspace":"/"}"#;
        assert!(l.admit(&s, method::SESSION_CREATE, Some(outside)).is_err());
        let sandbox = r#"{"sandbox":{"policy":"off"}}"#;
        assert!(l.admit(&s, method::SESSION_CREATE, Some(sandbox)).is_err());
    }

    #[test]
    fn a_calls_rights_are_the_floor_of_its_sessions() {
        let s = StartedSessions::default();
        let ws = std::env::temp_dir().canonicalize().unwrap();
        let l = Limited {
            rights: CallRights {
                workspace: ws.clone(),
                sandbox: SandboxPolicy::WorkspaceWrite,
                network: Network::Allow,
                approval: ApprovalMode::Auto,
            },
        };
        let created = |params: &str| match l.admit(&s, method::SESSION_CREATE, Some(params)) {
            Ok(Admitted::Rewritten { params, .. }) => {
                Ok(serde_json::from_str::<Value>(&params).unwrap())
            }
            Ok(Admitted::AsSent) => panic!("create is rewritten"),
            Err(e) => Err(e.code()),
        };
        let p = created("{}").unwrap();
        assert_eq!(
            p["sandbox"],
            json!({"policy": "workspace-write", "network": "allow"})
        );
        assert_eq!(
            (&p["approval"], &p["workspace"]),
            (&json!("auto"), &path_value(&ws))
        );
        let p = created(r#"{"sandbox":{"network":"deny"},"approval":"strict"}"#).unwrap();
        assert_eq!(
            p["sandbox"],
            json!({"policy": "workspace-write", "network": "deny"})
        );
        assert_eq!(p["approval"], "strict");
        for looser in [r#"{"sandbox":{"policy":"off"}}"#, r#"{"workspace":"/"}"#] {
            assert_eq!(created(looser), Err(codes::PEER_NOT_ALLOWED), "{looser}");
        }
    }

    #[test]
    fn the_test_process_is_not_its_own_descendant() {
        let me = std::process::id() as i32;
        assert!(descends_from(me, me));
        let parent = procfs::stat(me).unwrap().ppid;
        assert!(!descends_from(parent, me));
    }
}
