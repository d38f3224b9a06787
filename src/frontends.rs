//! The frontends the host serves (proto-docs/sessions.md): what it knows of a caller,
//! one record per frontend whatever its connections and sessions, named by a stable id
//! that each of its sessions carries (`Session::frontend_id`); and which of them work in
//! the daemon's workspace because they named none, for `host.health`.
//!
//! Each frontend is kept in the store (record kind `frontends`, its [`Frontend`] without
//! sessions), so a restarted daemon still lists the frontends of the last
//! [`SHOWN_FOR_MS`] before their bridges come back; one not seen for [`KEPT_FOR_MS`] is
//! forgotten at the next start.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::lock;
use crate::protocol::{
    Frontend, FrontendProcess, FrontendWithoutWorkspace, Session, SessionCreateParams,
    WorkspaceFrom, META_FRONTEND_ID, META_TOKEN, META_WORKSPACE_FROM,
};
use crate::session::{RecordKind, Sessions};

/// How many processes of a frontend's chain are recorded (the bridge's parent first).
const CHAIN: usize = 3;

/// A frontend without a live session is still listed this long after its last one.
pub const SHOWN_FOR_MS: u64 = 24 * 3600 * 1000;
/// A frontend not seen for this long is dropped from the store at start.
const KEPT_FOR_MS: u64 = 30 * 24 * 3600 * 1000;

/// The frontends known to this daemon (those of the store, then each new one).
#[derive(Default)]
pub struct Frontends {
    without_workspace: Mutex<BTreeMap<String, String>>,
    known: Mutex<Known>,
}

/// The frontends by id: whole while they have live sessions, else as the record the store
/// keeps, read again when one comes back or is listed. Held whole, the frontends of 1,000
/// projects opened once cost ≈ 0.6 MB for the daemon's life (`benches/idle.rs
/// workspaces`); as records, half of that.
#[derive(Default)]
struct Known {
    live: BTreeMap<String, Frontend>,
    resting: BTreeMap<String, Resting>,
}

/// A frontend without live sessions: its record ([`Frontends::keep`]'s JSON).
struct Resting {
    last_seen_ms: u64,
    record: Box<str>,
}

impl Resting {
    fn of(f: &Frontend) -> Option<Resting> {
        Some(Resting {
            last_seen_ms: f.last_seen_ms,
            record: serde_json::to_string(f).ok()?.into(),
        })
    }

    fn frontend(&self) -> Option<Frontend> {
        serde_json::from_str(&self.record).ok()
    }
}

impl Known {
    /// Frontend `id` made whole (it comes back), or `None` when it is not known.
    fn wake(&mut self, id: &str) -> Option<&mut Frontend> {
        if !self.live.contains_key(id) {
            let f = self.resting.remove(id)?.frontend()?;
            self.live.insert(id.to_owned(), f);
        }
        self.live.get_mut(id)
    }

    /// Puts frontend `id` to rest when it has no live session.
    fn rest_if_idle(&mut self, id: &str) {
        let Some(f) = self.live.get(id).filter(|f| f.sessions.is_empty()) else {
            return;
        };
        if let Some(r) = Resting::of(f) {
            self.live.remove(id);
            self.resting.insert(id.to_owned(), r);
        }
    }
}

impl Frontends {
    /// Before a session is made: the frontend it belongs to, found or recorded, and its id
    /// put in the session's meta. The caller is the current request's (`SO_PEERCRED`).
    /// Returns the frontend as it is to be kept ([`Frontends::keep`]).
    pub fn identify(&self, p: &mut SessionCreateParams, workspace: &str) -> Frontend {
        let caller = crate::audit::current_caller();
        // The token's name is the daemon's word: set over TCP, never taken from a client;
        // the MCP facade (the daemon's own connection) names the token of its `/mcp` caller.
        let token = match &caller {
            Some(c) if c.token.is_some() => c.token.clone(),
            Some(c) if c.is_daemon() => p
                .meta
                .as_ref()
                .and_then(|m| m.get(META_TOKEN))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        if let Some(name) = &token {
            let meta = p.meta.get_or_insert_default();
            meta.insert(META_TOKEN.into(), name.as_str().into());
        } else if let Some(meta) = p.meta.as_mut() {
            meta.remove(META_TOKEN);
        }
        let meta = p.meta.get_or_insert_default();
        // A caller that names no kind of frontend (a program on the socket or over TCP
        // making its own session) is its own frontend: named by its meta `client` (or
        // `clientInfo.name`), else its process or its `User-Agent`.
        let own = !meta.contains_key("frontend");
        let client = match (own, crate::audit::client_name(meta)) {
            (true, Some(name)) => name,
            (true, None) => caller
                .as_ref()
                .and_then(|c| c.process.clone().or_else(|| c.agent.clone()))
                .unwrap_or_else(|| "socket".into()),
            _ => client_of(meta),
        };
        let uid = caller.as_ref().and_then(|c| c.uid);
        // The daemon's own in-process connection (`/mcp`) has no process chain of its own.
        let started_by = caller
            .filter(|c| !c.is_daemon())
            .and_then(|c| c.pid)
            .map(|pid| {
                if own {
                    chain_from(pid)
                } else {
                    chain_above(pid)
                }
            })
            .unwrap_or_default();
        let mut hash = Sha256::new();
        for part in [
            uid.map(|u| u.to_string()).unwrap_or_default().as_str(),
            client.as_str(),
            workspace,
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        // Over TCP the token names the caller (a frontend without one keeps its id).
        if let Some(name) = &token {
            hash.update(b"token\0");
            hash.update(name.as_bytes());
            hash.update([0]);
        }
        for p in &started_by {
            hash.update(p.exe.as_deref().unwrap_or("?").as_bytes());
            hash.update([0]);
        }
        let id = format!("f_{}", &hex::encode(hash.finalize())[..16]);
        meta.insert(META_FRONTEND_ID.into(), id.clone().into());
        let mut known = lock(&self.known);
        // One that rests comes back whole (its first sighting and found tools with it).
        known.wake(&id);
        let f = known.live.entry(id.clone()).or_insert_with(|| Frontend {
            id,
            client,
            workspace: workspace.to_owned(),
            uid,
            token: token.clone(),
            started_by: Vec::new(),
            sessions: Vec::new(),
            last_seen_ms: 0,
            first_seen_ms: crate::now_ms(),
            found_tools: Vec::new(),
        });
        f.started_by = started_by;
        f.last_seen_ms = crate::now_ms();
        Frontend {
            sessions: Vec::new(),
            ..f.clone()
        }
    }

    /// Keeps `f` (from [`Frontends::identify`]) in the store.
    pub async fn keep(&self, store: &Sessions, f: Frontend) {
        let value = match serde_json::to_vec(&f) {
            Ok(v) => v,
            Err(e) => return tracing::warn!(%e, frontend = %f.id, "cannot encode a frontend"),
        };
        if let Err(e) = store
            .write_records(RecordKind::Frontend, vec![(f.id.clone(), Some(value))])
            .await
        {
            tracing::warn!(%e, frontend = %f.id, "cannot keep a frontend in the store");
        }
    }

    /// At start: the frontends the store kept; those not seen for [`KEPT_FOR_MS`] are
    /// dropped from it.
    pub async fn load(&self, store: &Sessions) {
        let records = match store.records(RecordKind::Frontend).await {
            Ok(r) => r,
            Err(e) => return tracing::warn!(%e, "cannot read the kept frontends"),
        };
        let now = crate::now_ms();
        let mut stale = Vec::new();
        {
            let mut known = lock(&self.known);
            for (id, bytes) in records {
                match serde_json::from_slice::<Frontend>(&bytes) {
                    Ok(f) if f.last_seen_ms.saturating_add(KEPT_FOR_MS) > now => {
                        let f = Frontend {
                            sessions: Vec::new(),
                            ..f
                        };
                        if let Some(r) = Resting::of(&f) {
                            known.resting.insert(id, r);
                        }
                    }
                    Ok(_) => stale.push((id, None)),
                    Err(e) => {
                        tracing::warn!(%e, frontend = %id, "a kept frontend is unreadable; dropping it");
                        stale.push((id, None));
                    }
                }
            }
        }
        if let Err(e) = store.write_records(RecordKind::Frontend, stale).await {
            tracing::warn!(%e, "cannot drop the frontends not seen for a long time");
        }
    }

    /// After a session was made or changed: its frontend's sessions, and whether its
    /// frontend named a workspace.
    pub fn saw(&self, s: &Session) {
        if let Some(id) = s.frontend_id() {
            if let Some(f) = lock(&self.known).wake(id) {
                if !f.sessions.contains(&s.id) {
                    f.sessions.push(s.id.clone());
                }
            }
        }
        let from = s
            .meta
            .get(META_WORKSPACE_FROM)
            .and_then(|v| serde_json::from_value::<WorkspaceFrom>(v.clone()).ok());
        let mut without = lock(&self.without_workspace);
        if from == Some(WorkspaceFrom::Daemon) {
            without.insert(s.id.clone(), client_of(&s.meta));
        } else {
            without.remove(&s.id);
        }
    }

    /// The deferred tools frontend `id` found (`tools.describe`).
    pub fn found(&self, id: &str) -> Vec<String> {
        let known = lock(&self.known);
        match known.live.get(id) {
            Some(f) => f.found_tools.clone(),
            None => known
                .resting
                .get(id)
                .and_then(Resting::frontend)
                .map(|f| f.found_tools)
                .unwrap_or_default(),
        }
    }

    /// Records `tools` as found by frontend `id`; returns the frontend to keep
    /// ([`Frontends::keep`]) when that changed it.
    pub fn find(&self, id: &str, tools: &[String]) -> Option<Frontend> {
        let mut known = lock(&self.known);
        let f = known.wake(id)?;
        let before = f.found_tools.len();
        crate::catalog::merge_loaded(&mut f.found_tools, tools);
        let changed = (f.found_tools.len() > before).then(|| Frontend {
            sessions: Vec::new(),
            ..f.clone()
        });
        known.rest_if_idle(id);
        changed
    }

    /// After session `id` ended.
    pub fn ended(&self, id: &str) {
        lock(&self.without_workspace).remove(id);
        let mut known = lock(&self.known);
        let mut idle = Vec::new();
        for (key, f) in known.live.iter_mut() {
            f.sessions.retain(|s| s != id);
            if f.sessions.is_empty() {
                idle.push(key.clone());
            }
        }
        for f in idle {
            known.rest_if_idle(&f);
        }
    }

    /// For `host.status`: the frontends with live sessions, and those seen within
    /// [`SHOWN_FOR_MS`] (also by an earlier daemon).
    pub fn list(&self) -> Vec<Frontend> {
        let since = crate::now_ms().saturating_sub(SHOWN_FOR_MS);
        let known = lock(&self.known);
        let live = known
            .live
            .values()
            .filter(|f| !f.sessions.is_empty() || f.last_seen_ms >= since)
            .cloned();
        let resting = known
            .resting
            .values()
            .filter(|r| r.last_seen_ms >= since)
            .filter_map(Resting::frontend);
        let mut all: Vec<Frontend> = live.chain(resting).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// For `host.health`.
    pub fn without_workspace(&self) -> Vec<FrontendWithoutWorkspace> {
        lock(&self.without_workspace)
            .iter()
            .map(|(session, client)| FrontendWithoutWorkspace {
                session: session.clone(),
                client: client.clone(),
            })
            .collect()
    }
}

/// The processes above `pid`, nearest first: its parent (for a bridge, the frontend
/// itself), and so on, [`CHAIN`] at most, never init.
fn chain_above(pid: i32) -> Vec<FrontendProcess> {
    let mut chain = Vec::with_capacity(CHAIN);
    let mut at = pid;
    while chain.len() < CHAIN {
        let Some(parent) = crate::procfs::stat(at).map(|s| s.ppid) else {
            break;
        };
        if parent <= 1 {
            break;
        }
        chain.push(process(parent));
        at = parent;
    }
    chain
}

/// `pid` itself (a socket client is its own frontend), then the processes above it,
/// [`CHAIN`] in all.
fn chain_from(pid: i32) -> Vec<FrontendProcess> {
    let mut chain = vec![process(pid)];
    chain.extend(chain_above(pid).into_iter().take(CHAIN - 1));
    chain
}

fn process(pid: i32) -> FrontendProcess {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    FrontendProcess { pid, exe }
}

/// The client as a session's meta names it: `clientInfo` name and version, else its
/// `client`, else the kind of frontend.
fn client_of(meta: &serde_json::Map<String, Value>) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    match (meta.get("mcp_client"), meta.get("client")) {
        (Some(c), _) => format!("{} {}", text(c.get("name")), text(c.get("version")))
            .trim()
            .to_owned(),
        (None, Some(Value::String(c))) => c.clone(),
        _ => text(meta.get("frontend")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, meta: &serde_json::Map<String, Value>) -> Session {
        serde_json::from_value(serde_json::json!({
            "id": id, "created_at": 0, "updated_at": 0, "workspace": "/p",
            "approval": "auto", "meta": meta, "tool_names": [], "tools_etag": ""
        }))
        .unwrap()
    }

    /// A frontend whose last session ended rests as its record (not whole, issue 48),
    /// still listed, and comes back whole with what it found.
    #[test]
    fn a_frontend_without_sessions_rests_listed_and_comes_back_whole() {
        let fronts = Frontends::default();
        let mut p = SessionCreateParams::default();
        let f = fronts.identify(&mut p, "/p");
        let meta = p.meta.clone().unwrap();
        fronts.saw(&session("s1", &meta));
        assert!(fronts.find(&f.id, &["t".to_owned()]).is_some());
        fronts.ended("s1");
        {
            let known = lock(&fronts.known);
            assert!(known.live.is_empty(), "held whole without a session");
            assert_eq!(known.resting.len(), 1);
        }
        let listed = fronts.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, f.id);
        assert_eq!(fronts.found(&f.id), vec!["t".to_owned()]);
        // A tool found while it rests is kept, and it rests again.
        assert!(fronts.find(&f.id, &["u".to_owned()]).is_some());
        assert!(lock(&fronts.known).live.is_empty());
        // Back: the same frontend, first seen when it was.
        let again = fronts.identify(&mut SessionCreateParams::default(), "/p");
        assert_eq!(again.id, f.id);
        assert_eq!(again.first_seen_ms, f.first_seen_ms);
        assert_eq!(again.found_tools, vec!["t".to_owned(), "u".to_owned()]);
    }
}
