//! Who is on the other end of a connection and what it may do: [`Peer`], made once per
//! connection and handed to every method it calls, which checks its rights on the method's
//! parsed params ([`Admit`]) before running and records the sessions the call made or
//! ended.
//!
//! A process the host itself started (a call's command, a custom tool, an MCP server, or
//! anything they forked) gets no more through the socket or TCP than a call has, or a
//! sandboxed command could call `invoke` with `sandbox: "off"` and walk out of its sandbox.
//! Who the peer is comes from the kernel (`SO_PEERCRED`, or the socket tables for a
//! loopback TCP peer; see [`Caller`]): a process is *started by the host* when its parent
//! chain leads to the daemon (the daemon is the child subreaper, so a double-forked or
//! `setsid` escapee is re-parented to it and still leads there) or it carries this daemon's
//! instance cookie. Such a peer is [`Limited`] to the rights of the call whose process tree
//! it is in (`Processes::call_of`, `CallTable`): its workspace, its session's sandbox and
//! approval mode as a floor. A peer of no call (an MCP server, a session event, a call that
//! has ended) gets the most restricted rights.
//!
//! The rules are per method, on typed params: a method registered with `method` is open to
//! such a peer only when [`is_open`] names it (reads nothing private, changes nothing),
//! else refused as an admin method, so a new method is closed until listed; a method
//! registered with `method_checked` implements [`Admit`] for its params, which refuses
//! approval flags, sandbox overrides, a looser sandbox or approval mode, workspaces outside
//! the call's and sessions the peer did not create, and fills a new session's settings
//! with the call's. Params that do not parse are refused before any of this runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};

use super::Shared;
use crate::audit::Caller;
use crate::calls::CallRights;
use crate::host::Host;
use crate::lock;
use crate::process::INSTANCE_VAR;
use crate::procfs;
use crate::protocol::{
    codes, method, ApprovalMode, InvokeParams, ListToolsParams, Network, SandboxPolicy, Session,
    SessionCreateParams, SessionIdParams, SessionSandbox, SessionToolsParams, SessionUpdateParams,
    SubscribeInvokeParams, ToolNameParams, ToolsDescribeParams, ToolsSearchParams,
};

/// One connection's peer, as every method it calls sees it.
pub(crate) struct Peer {
    shared: Arc<Shared>,
    /// The peer as the kernel names it (`None`: a TCP client on another machine).
    caller: Option<Arc<Caller>>,
    /// A host-started peer's limits (`None`: a client of the user), worked out on the
    /// connection's first call.
    limits: OnceLock<Option<Limited>>,
    /// The ephemeral sessions a message connection made (`session.create` with `ephemeral:
    /// true`): the connection owns them, and they end with it however it ends (the client
    /// closes it, its process is killed, it is cut off half-way), once its last message
    /// has run (each running method holds the `Peer`). A stopping daemon leaves them to the
    /// next start, which deletes every ephemeral session. `None` on HTTP POST, whose
    /// connection is no client's session. Each id with its session's `created_at`: a
    /// session someone else made later under the same id is not the connection's.
    ephemeral: Option<Mutex<HashMap<String, u64>>>,
}

impl Peer {
    /// The peer of a connection; `ephemeral`: whether its ephemeral sessions end with it.
    pub(super) fn new(shared: Arc<Shared>, caller: Option<Arc<Caller>>, ephemeral: bool) -> Peer {
        Peer {
            shared,
            caller,
            limits: OnceLock::new(),
            ephemeral: ephemeral.then(Mutex::default),
        }
    }

    pub(super) fn host(&self) -> &Host {
        &self.shared.host
    }

    pub(super) fn caller(&self) -> Option<&Arc<Caller>> {
        self.caller.as_ref()
    }

    fn limits(&self) -> Option<&Limited> {
        self.limits
            .get_or_init(|| limits(&self.shared.host, self.caller.as_deref()))
            .as_ref()
    }

    /// Whether this peer is a process the host started (its rights bounded by its call).
    pub(super) fn host_started(&self) -> bool {
        self.limits().is_some()
    }

    /// A method registered without a params check: open to a host-started peer only when
    /// [`is_open`] names it.
    pub(super) fn admit_name(&self, name: &str) -> Result<(), ErrorObjectOwned> {
        match self.limits() {
            Some(_) if !is_open(name) => Err(refused(format!("{name} is an admin method"))),
            _ => Ok(()),
        }
    }

    /// A method's parsed params, checked (and a new session's settings filled in) for a
    /// host-started peer; a user's client passes as it is.
    pub(super) fn admit<P: Admit>(&self, p: &mut P) -> Result<(), ErrorObjectOwned> {
        match self.limits() {
            Some(l) => p.admit(l, &self.shared.started_sessions),
            None => Ok(()),
        }
    }

    /// Records a session this peer made: a host-started peer's own from now on (bounded
    /// by its call's rights), and an ephemeral one the connection's.
    pub(super) fn created(&self, s: &Session) {
        if let Some(l) = self.limits() {
            lock(&self.shared.started_sessions.0).insert(s.id.clone(), l.rights.clone());
        }
        if let Some(ids) = self.ephemeral.as_ref().filter(|_| s.ephemeral) {
            lock(ids).insert(s.id.clone(), s.created_at);
        }
    }

    /// Forgets a deleted session (whoever made it): no peer owns its id any more, so a
    /// session made later under the same id is no host-started peer's.
    pub(super) fn ended(&self, id: &str) {
        self.shared.started_sessions.forget(id);
        if let Some(ids) = &self.ephemeral {
            lock(ids).remove(id);
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let Some(ids) = self.ephemeral.take() else {
            return;
        };
        let ids = ids.into_inner().unwrap_or_else(|e| e.into_inner());
        let host = &self.shared.host;
        if ids.is_empty() || host.shutdown_token().is_cancelled() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = self.shared.clone();
        let end = async move {
            for (id, created_at) in ids {
                let same = shared.host.sessions().get(&id).await;
                if !same.is_ok_and(|s| s.created_at == created_at) {
                    continue;
                }
                shared.started_sessions.forget(&id);
                match super::methods::delete_session(&shared.host, &id).await {
                    Ok(deleted) => tracing::debug!(
                        session = %id,
                        deleted,
                        "the connection that made this ephemeral session ended"
                    ),
                    Err(e) => tracing::warn!(%e, session = %id, "cannot end an ephemeral session"),
                }
            }
        };
        host.tracker().spawn_on(end, &runtime);
    }
}

/// The sessions host-started peers created, each with the rights of the call that made
/// it: the only sessions such a peer may use, and only one whose rights are no looser than
/// its own call's (a stricter call's process cannot borrow a looser call's session). Kept
/// in memory, so after a restart they are closed to such peers too (the safe side).
#[derive(Default)]
pub(super) struct StartedSessions(Mutex<HashMap<String, CallRights>>);

impl StartedSessions {
    fn forget(&self, id: &str) {
        lock(&self.0).remove(id);
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
    // A TCP client of another machine (known by its token only) is no process of ours.
    if caller.uid.is_none() {
        return false;
    }
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

/// Whether `r` gives no more than `floor`: each setting as strict or stricter, the
/// workspace inside.
fn no_looser(r: &CallRights, floor: &CallRights) -> bool {
    policy_rank(r.sandbox) >= policy_rank(floor.sandbox)
        && network_rank(r.network) >= network_rank(floor.network)
        && approval_rank(r.approval) >= approval_rank(floor.approval)
        && r.workspace.starts_with(&floor.workspace)
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

/// The methods open to a host-started peer without a params check: they read nothing
/// private and change nothing. Every other method registered without [`Admit`] is an
/// admin method to such a peer: config, MCP servers, pins, trust (a process never approves
/// what its own workspace brings), the approval queue (it never sees others' calls'
/// arguments nor decides an approval, its own call's least of all), the guards (their
/// status names others' sessions, and a reset would let a runaway call lift its own
/// limit), `cancel` and `invoke.respond` (of any call), `session.list` (everyone's), and
/// whatever is added later.
pub(super) fn is_open(name: &str) -> bool {
    matches!(
        name,
        method::HEALTH
            | method::STATUS
            | method::CONFIG_STATUS
            | method::MCP_STATUS
            | method::DISCOVER
            | method::SUBSCRIBE_TOOLS_CHANGED
    )
}

fn refused(why: String) -> ErrorObjectOwned {
    ErrorObject::owned(
        codes::PEER_NOT_ALLOWED,
        format!("Not allowed from a process the host started: {why}"),
        None::<()>,
    )
}

/// The params of a method open to host-started peers within their call's rights: checks
/// them against `limits`, and fills in what a new session takes from the call.
pub(super) trait Admit {
    fn admit(
        &mut self,
        limits: &Limited,
        started: &StartedSessions,
    ) -> Result<(), ErrorObjectOwned>;
}

impl Limited {
    /// The rights session `id` was made with, when it is one this peer may use.
    fn own(&self, started: &StartedSessions, id: &str) -> Result<CallRights, ErrorObjectOwned> {
        lock(&started.0)
            .get(id)
            .filter(|r| no_looser(r, &self.rights))
            .cloned()
            .ok_or_else(|| refused(format!("session {id:?} is not one it created")))
    }

    fn own_if_named(
        &self,
        started: &StartedSessions,
        id: Option<&String>,
    ) -> Result<(), ErrorObjectOwned> {
        id.map_or(Ok(()), |id| self.own(started, id).map(drop))
    }
}

/// A session's `sandbox`: each part given no looser than `floor`'s; on `create` the parts
/// not given are `floor`'s.
fn floor_sandbox(
    given: &mut Option<SessionSandbox>,
    floor: &CallRights,
    create: bool,
) -> Result<(), ErrorObjectOwned> {
    let (policy, network) = given
        .as_ref()
        .map_or((None, None), |s| (s.policy, s.network));
    if policy.is_some_and(|p| policy_rank(p) < policy_rank(floor.sandbox))
        || network.is_some_and(|n| network_rank(n) < network_rank(floor.network))
    {
        return Err(refused(format!(
            "a session's sandbox cannot be looser than its call's (policy {}, network {})",
            floor.sandbox.as_str(),
            serde_json::json!(floor.network)
        )));
    }
    if create {
        *given = Some(SessionSandbox {
            policy: Some(policy.unwrap_or(floor.sandbox)),
            network: Some(network.unwrap_or(floor.network)),
        });
    }
    Ok(())
}

/// A session's `approval`: no looser than `floor`'s; on `create`, `floor`'s if not given.
fn floor_approval(
    given: &mut Option<ApprovalMode>,
    floor: &CallRights,
    create: bool,
) -> Result<(), ErrorObjectOwned> {
    if given.is_some_and(|m| approval_rank(m) < approval_rank(floor.approval)) {
        return Err(refused(format!(
            "a session's approval cannot be looser than its call's ({})",
            serde_json::json!(floor.approval)
        )));
    }
    if create && given.is_none() {
        *given = Some(floor.approval);
    }
    Ok(())
}

/// Replaces a requested workspace by its canonical path, which must lie inside `floor`'s
/// (the session stores the path checked here, not one a symlink swapped in later could
/// redirect); on `create` without one, `floor`'s.
fn confine_workspace(
    given: &mut Option<String>,
    floor: &CallRights,
    create: bool,
) -> Result<(), ErrorObjectOwned> {
    let workspace = &floor.workspace;
    let Some(w) = given.as_deref() else {
        if create {
            *given = Some(workspace.display().to_string());
        }
        return Ok(());
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
    *given = Some(canonical.display().to_string());
    Ok(())
}

/// `invoke`: in a session of its own (whose calls keep its call's limits), never approved
/// by itself nor out of its sandbox.
impl Admit for InvokeParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        let Some(id) = &self.session_id else {
            return Err(refused(
                "a call must name a session it created (whose calls keep its call's limits)".into(),
            ));
        };
        l.own(started, id)?;
        if self.approved {
            return Err(refused("`approved` is the user's to give".into()));
        }
        if self.sandbox.is_some() {
            return Err(refused("a call cannot leave its sandbox".into()));
        }
        Ok(())
    }
}

impl Admit for SubscribeInvokeParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        self.call.admit(l, started)
    }
}

impl Admit for ListToolsParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        l.own_if_named(started, self.session_id.as_ref())
    }
}

/// `tools.diff`: a definition diff is what the catalog shows anyway; a waiting item's
/// files (which may lie outside the peer's sandbox) are left out by the method for a
/// host-started peer ([`Peer::host_started`]).
impl Admit for ToolNameParams {
    fn admit(&mut self, _: &Limited, _: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        Ok(())
    }
}

impl Admit for ToolsSearchParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        l.own_if_named(started, self.session_id.as_ref())
    }
}

impl Admit for ToolsDescribeParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        l.own(started, &self.session_id).map(drop)
    }
}

impl Admit for SessionIdParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        l.own(started, &self.id).map(drop)
    }
}

impl Admit for SessionToolsParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        l.own(started, &self.id).map(drop)
    }
}

/// A new session: the call's settings where none are given, none looser, its workspace
/// inside the call's.
impl Admit for SessionCreateParams {
    fn admit(&mut self, l: &Limited, _: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        floor_sandbox(&mut self.sandbox, &l.rights, true)?;
        floor_approval(&mut self.approval, &l.rights, true)?;
        confine_workspace(&mut self.workspace, &l.rights, true)
    }
}

/// A change to one of its sessions: nothing looser than the rights that session was made
/// with.
impl Admit for SessionUpdateParams {
    fn admit(&mut self, l: &Limited, started: &StartedSessions) -> Result<(), ErrorObjectOwned> {
        let floor = l.own(started, &self.id)?;
        floor_sandbox(&mut self.sandbox, &floor, false)?;
        floor_approval(&mut self.approval, &floor, false)?;
        confine_workspace(&mut self.workspace, &floor, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn rights(sandbox: SandboxPolicy, approval: ApprovalMode) -> CallRights {
        CallRights {
            workspace: std::env::temp_dir().canonicalize().unwrap(),
            sandbox,
            network: Network::Deny,
            approval,
        }
    }

    fn limited() -> Limited {
        Limited {
            rights: most_restricted(&std::env::temp_dir().canonicalize().unwrap()),
        }
    }

    fn parsed<P: serde::de::DeserializeOwned>(v: Value) -> P {
        serde_json::from_value(v).unwrap()
    }

    fn admit<P: Admit>(l: &Limited, s: &StartedSessions, mut p: P) -> Result<P, i32> {
        p.admit(l, s).map(|()| p).map_err(|e| e.code())
    }

    #[test]
    fn only_listed_methods_are_open() {
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
            method::TRUST_DIFF,
            method::SESSION_LIST,
            method::CANCEL,
            "future.admin",
        ] {
            assert!(!is_open(name), "{name}");
        }
        assert!(is_open(method::HEALTH));
    }

    #[test]
    fn calls_keep_their_limits() {
        let s = StartedSessions::default();
        let l = limited();
        lock(&s.0).insert("mine".into(), l.rights.clone());
        let ok: InvokeParams = parsed(json!({"name": "bash", "session_id": "mine"}));
        assert!(admit(&l, &s, ok).is_ok());
        for bad in [
            json!({"name": "bash"}),
            json!({"name": "bash", "session_id": "mine", "approved": true}),
            json!({"name": "bash", "session_id": "mine", "sandbox": "off"}),
            json!({"name": "bash", "session_id": "someone_else"}),
        ] {
            let p: InvokeParams = parsed(bad.clone());
            assert_eq!(
                admit(&l, &s, p).err(),
                Some(codes::PEER_NOT_ALLOWED),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_new_session_gets_the_calls_settings_and_none_looser() {
        let s = StartedSessions::default();
        let l = Limited {
            rights: CallRights {
                network: Network::Allow,
                ..rights(SandboxPolicy::WorkspaceWrite, ApprovalMode::Auto)
            },
        };
        let p = admit(&l, &s, parsed::<SessionCreateParams>(json!({}))).unwrap();
        assert_eq!(
            json!(p.sandbox),
            json!({"policy": "workspace-write", "network": "allow"})
        );
        assert_eq!(p.approval, Some(ApprovalMode::Auto));
        assert_eq!(
            p.workspace.as_deref(),
            Some(l.rights.workspace.to_str().unwrap())
        );
        let p = parsed(json!({"sandbox": {"network": "deny"}, "approval": "strict"}));
        let p: SessionCreateParams = admit(&l, &s, p).unwrap();
        assert_eq!(
            json!(p.sandbox),
            json!({"policy": "workspace-write", "network": "deny"})
        );
        for looser in [
            json!({"sandbox": {"policy": "off"}}),
            json!({"workspace": "/"}),
            json!({"workspace": ".."}),
        ] {
            let p: SessionCreateParams = parsed(looser.clone());
            assert_eq!(
                admit(&l, &s, p).err(),
                Some(codes::PEER_NOT_ALLOWED),
                "{looser}"
            );
        }
    }

    #[test]
    fn a_stricter_calls_process_cannot_borrow_a_looser_calls_session() {
        let s = StartedSessions::default();
        let loose = rights(SandboxPolicy::WorkspaceWrite, ApprovalMode::Auto);
        lock(&s.0).insert("loose".into(), loose.clone());
        let strict = Limited {
            rights: rights(SandboxPolicy::ReadOnly, ApprovalMode::Strict),
        };
        let call: InvokeParams = parsed(json!({"name": "bash", "session_id": "loose"}));
        assert!(admit(&strict, &s, call.clone()).is_err());
        assert!(admit(&Limited { rights: loose }, &s, call).is_ok());
        // Nor loosen a session it may use beyond the rights that session was made with.
        lock(&s.0).insert("strict".into(), strict.rights.clone());
        let l = Limited {
            rights: rights(SandboxPolicy::WorkspaceWrite, ApprovalMode::Auto),
        };
        let update: SessionUpdateParams = parsed(json!({"id": "strict", "approval": "auto"}));
        assert!(admit(&l, &s, update).is_err());
        s.forget("strict");
        let get: SessionIdParams = parsed(json!({"id": "strict"}));
        assert!(admit(&l, &s, get).is_err());
    }

    #[test]
    fn the_test_process_is_not_its_own_descendant() {
        let me = std::process::id() as i32;
        assert!(descends_from(me, me));
        let parent = procfs::stat(me).unwrap().ppid;
        assert!(!descends_from(parent, me));
    }
}
