//! Session semantics that involve the live registry: a session's stable tool view.
//!
//! A session records `tool_names` when created, so a frontend's prompt (and its cache)
//! stays stable while the host's live list changes; `resume` and `refresh_tools` move the
//! view forward explicitly.

use std::collections::HashSet;

use std::path::Path;

use crate::catalog::ToolSource;
use crate::config::ProfileView;
use crate::error::{Error, Result};
use crate::now_ms;
use crate::protocol::ApprovalMode;
use crate::protocol::SessionSandbox;
use crate::protocol::{
    Session, SessionCreateParams, SessionRefreshResult, SessionResumeResult, SessionToolsParams,
    SessionToolsResult, SessionUpdateParams,
};
use crate::protocol::{META_FRONTEND_ID, META_TOKEN};
use crate::registry::{Entry, Registry, Snapshot};
use serde_json::{Map, Value};

/// What the session operations need of the host: the store, the live registry and the
/// defaults a new session starts from. (Borrowed, so `session` never depends on the host.)
pub struct Scope<'a> {
    pub sessions: &'a super::Sessions,
    pub registry: &'a Registry,
    /// The host's workspace: the default, and the base of relative session workspaces.
    pub workspace: &'a Path,
    pub default_approval: ApprovalMode,
    /// The config as it is now (profiles named by sessions are checked against it).
    pub config: std::sync::Arc<crate::config::Config>,
}

impl Scope<'_> {
    fn sessions(&self) -> &super::Sessions {
        self.sessions
    }
    fn registry(&self) -> &Registry {
        self.registry
    }
    fn workspace(&self) -> &Path {
        self.workspace
    }
}

/// Resolves a session workspace: relative paths are taken from the host's workspace.
pub fn workspace_of(host: &Scope<'_>, requested: Option<String>) -> Result<String> {
    let Some(w) = requested else {
        return Ok(host.workspace().display().to_string());
    };
    let path = host.workspace().join(&w);
    let path = path.canonicalize().map_err(|e| {
        Error::InvalidParams(format!(
            "workspace {w:?} is not an accessible directory: {e}"
        ))
    })?;
    if !path.is_dir() {
        return Err(Error::InvalidParams(format!(
            "workspace {w:?} is not a directory"
        )));
    }
    // One the daemon may enter but not list would hide its files from every tool.
    if let Err(e) = std::fs::read_dir(&path) {
        return Err(Error::InvalidParams(format!(
            "workspace {w:?} cannot be read by the daemon: {e}"
        )));
    }
    Ok(path.display().to_string())
}

/// The stored sessions with their workspaces, the oldest first: the daemon searches each
/// workspace for a project's tools, skills and commands while a session is in it. An
/// unreadable page ends the list (what was read still counts; the store reports its damage
/// elsewhere).
pub async fn workspaces(sessions: &super::Sessions) -> Vec<(String, std::path::PathBuf)> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let Ok((page, next)) = sessions.list(1000, after.as_deref()).await else {
            break;
        };
        all.extend(page.into_iter().map(|s| (s.id, s.workspace.into())));
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    all.reverse();
    all
}

/// Largest `meta` a session may carry, serialised: meta is runtime state for frontends
/// (model, provider, flags), not a document store, and small records keep the store fast.
pub const MAX_META_BYTES: usize = 64 * 1024;

fn check_meta_size(meta: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let size = serde_json::to_string(meta)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if size > MAX_META_BYTES {
        return Err(Error::InvalidParams(format!(
            "session meta would be {size} bytes; the limit is {MAX_META_BYTES}"
        )));
    }
    Ok(())
}

/// A profile a session is to be served under must be in config.json.
fn check_profile(host: &Scope<'_>, profile: Option<&str>) -> Result<()> {
    match profile {
        Some(name) => host
            .config
            .profile(name)
            .map(|_| ())
            .map_err(|e| Error::InvalidParams(e.to_string())),
        None => Ok(()),
    }
}

/// Whether `view` serves the registered tool `entry` (by its name, MCP server and approval
/// class in force): the one mapping from a registry entry to the profile rule. The built-in
/// `tool_search` is served under any profile that serves anything: it is the way to the
/// deferred tools, and it finds only those the profile serves.
pub fn serves(view: &ProfileView<'_>, entry: &Entry) -> bool {
    if crate::registry::is_search_tool(&entry.tool) {
        return !matches!(view, ProfileView::Nothing);
    }
    if entry.tool.code_mode().is_some() {
        return view.code_mode();
    }
    let spec = entry.tool.spec();
    let server = match &spec.source {
        ToolSource::Mcp { server, .. } => Some(server.as_str()),
        ToolSource::Builtin | ToolSource::Custom { .. } => None,
    };
    view.allows_tool(&spec.name, server, entry.approval)
}

/// Whether `view` lists the registered tool `entry`: it serves it, and unless the view lists
/// the code tools alone (`code_mode.only`), it is one of them. A served tool left out stays
/// callable, from programs and by name; the code tool declares it.
pub fn lists(view: &ProfileView<'_>, entry: &Entry) -> bool {
    serves(view, entry) && (!view.code_only() || entry.tool.code_mode().is_some())
}

/// A new session id, as `session.create` makes one when the params name none: the one
/// place ids are minted.
fn new_id() -> String {
    format!("s_{}", uuid::Uuid::new_v4().simple())
}

pub async fn create(host: &Scope<'_>, p: SessionCreateParams) -> Result<Session> {
    check_profile(host, p.profile.as_deref())?;
    if let Some(id) = &p.id {
        if id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control()) {
            return Err(Error::InvalidParams(
                "id must be 1-128 printable characters".into(),
            ));
        }
    }
    let snapshot = host.registry().snapshot();
    let now = now_ms();
    let workspace = workspace_of(host, p.workspace.clone())?;
    let (meta, approval) = taken_up(host, &p);
    let session = Session {
        id: p.id.unwrap_or_else(new_id),
        created_at: now,
        updated_at: now,
        tool_names: snapshot.visible_names_in(Path::new(&workspace)),
        workspace,
        approval: approval.unwrap_or(host.default_approval),
        meta: meta.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        sandbox: p.sandbox,
        tools_etag: snapshot.etag().to_owned(),
        loaded_tools: Vec::new(),
        profile: p.profile,
        ephemeral: p.ephemeral,
    };
    check_meta_size(&session.meta)?;
    host.sessions().create(session).await
}

/// The meta and approval of a session about to be made: those of `p`, unless it makes again
/// an ephemeral session the last daemon left (a bridge's after a restart): then that
/// session's, as `session.update` had left them, with the keys only the daemon sets
/// (`frontend_id`, `tcp_token`) as `p` has them now.
fn taken_up(
    host: &Scope<'_>,
    p: &SessionCreateParams,
) -> (Map<String, Value>, Option<ApprovalMode>) {
    let fresh = p.meta.clone().unwrap_or_default();
    let left =
        p.id.as_deref()
            .filter(|_| p.ephemeral)
            .and_then(|id| host.sessions().take_left(id));
    let Some(left) = left else {
        return (fresh, p.approval);
    };
    let mut meta = left.meta;
    for key in [META_FRONTEND_ID, META_TOKEN] {
        match fresh.get(key) {
            Some(v) => meta.insert(key.to_owned(), v.clone()),
            None => meta.remove(key),
        };
    }
    (meta, Some(left.approval))
}

pub async fn update(host: &Scope<'_>, p: SessionUpdateParams) -> Result<Session> {
    check_profile(host, p.profile.as_deref())?;
    let workspace = match p.workspace {
        Some(w) => Some(workspace_of(host, Some(w))?),
        None => None,
    };
    let now = now_ms();
    if let Some(meta) = &p.meta {
        check_meta_size(meta)?;
    }
    // The merged meta is checked inside the atomic update; an oversized result leaves the
    // session untouched and is reported after.
    let too_big = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = too_big.clone();
    let session = host
        .sessions()
        .update(&p.id, move |s| {
            let mut meta = s.meta.clone();
            if let Some(patch) = &p.meta {
                // The token's name is the daemon's word (`META_TOKEN`): no update changes it.
                for (k, v) in patch.iter().filter(|(k, _)| *k != META_TOKEN) {
                    if v.is_null() {
                        meta.remove(k);
                    } else {
                        meta.insert(k.clone(), v.clone());
                    }
                }
            }
            let oversized = check_meta_size(&meta).is_err();
            flag.store(oversized, std::sync::atomic::Ordering::SeqCst);
            if oversized {
                return;
            }
            s.meta = meta;
            if let Some(a) = p.approval {
                s.approval = a;
            }
            if let Some(w) = &workspace {
                s.workspace = w.clone();
            }
            if let Some(sb) = p.sandbox {
                s.sandbox = (sb != SessionSandbox::default()).then_some(sb);
            }
            if let Some(profile) = &p.profile {
                s.profile = Some(profile.clone());
            }
            s.updated_at = now.max(s.updated_at);
        })
        .await?;
    if too_big.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Error::InvalidParams(format!(
            "session meta would exceed {MAX_META_BYTES} bytes; nothing was changed"
        )));
    }
    Ok(session)
}

pub async fn tools(host: &Scope<'_>, p: SessionToolsParams) -> Result<SessionToolsResult> {
    let session = host.sessions().get(&p.id).await?;
    let snapshot = host.registry().snapshot();
    let (tools, etag) = snapshot.view(&profiled(host, &session, &snapshot, with_loaded(&session)));
    if p.if_etag.as_deref() == Some(etag.as_str()) {
        return Ok(SessionToolsResult {
            etag,
            unchanged: true,
            tools: None,
        });
    }
    Ok(SessionToolsResult {
        etag,
        unchanged: false,
        tools: Some(tools),
    })
}

pub async fn resume(host: &Scope<'_>, id: &str) -> Result<SessionResumeResult> {
    let snapshot = host.registry().snapshot();
    let before = host.sessions().get(id).await?;
    let live = snapshot.visible_names_in(Path::new(&before.workspace));
    let live_set: HashSet<&str> = live.iter().map(String::as_str).collect();
    let known: HashSet<&str> = before.tool_names.iter().map(String::as_str).collect();
    let added: Vec<String> = live
        .iter()
        .filter(|n| !known.contains(n.as_str()))
        .cloned()
        .collect();
    let missing: Vec<String> = before
        .tool_names
        .iter()
        .filter(|n| !live_set.contains(n.as_str()))
        .cloned()
        .collect();
    let (_, etag) = snapshot.view(&merged(&before.tool_names, &added));
    let add = added.clone();
    let session = host
        .sessions()
        .update(id, move |s| {
            s.tool_names = merged(&s.tool_names, &add);
            s.tools_etag = etag.clone();
            s.updated_at = now_ms().max(s.updated_at);
        })
        .await?;
    let (tools, _) = snapshot.view(&profiled(host, &session, &snapshot, with_loaded(&session)));
    Ok(SessionResumeResult {
        session,
        tools,
        added,
        missing,
    })
}

/// `names` cut to what the session's profile serves and lists now.
fn profiled(
    host: &Scope<'_>,
    session: &Session,
    snapshot: &Snapshot,
    names: Vec<String>,
) -> Vec<String> {
    if session.profile.is_none()
        && !session.meta.contains_key("code_mode")
        && !host.config.code_mode.only
    {
        return names;
    }
    let view = host
        .config
        .session_view(session.profile.as_deref(), &session.meta);
    names
        .into_iter()
        .filter(|n| snapshot.get(n).is_some_and(|e| lists(&view, e)))
        .collect()
}

/// The session's view followed by the tools it loaded through `tool_search`.
fn with_loaded(s: &Session) -> Vec<String> {
    merged(&s.tool_names, &s.loaded_tools)
}

/// Records tools found by a `tool_search` of this session as loaded (they are listed with
/// its view from now on, also after a resume).
pub async fn remember_loaded(
    sessions: &super::Sessions,
    id: &str,
    found: Vec<String>,
) -> Result<()> {
    if found.is_empty() {
        sessions.get(id).await?;
        return Ok(());
    }
    sessions
        .update(id, move |s| {
            crate::catalog::merge_loaded(&mut s.loaded_tools, &found);
            s.updated_at = now_ms().max(s.updated_at);
        })
        .await?;
    Ok(())
}

fn merged(names: &[String], added: &[String]) -> Vec<String> {
    let mut out = names.to_vec();
    let have: HashSet<String> = out.iter().cloned().collect();
    out.extend(added.iter().filter(|n| !have.contains(*n)).cloned());
    out
}

pub async fn refresh_tools(host: &Scope<'_>, id: &str) -> Result<SessionRefreshResult> {
    let snapshot = host.registry().snapshot();
    let etag = snapshot.etag().to_owned();
    let before = host.sessions().get(id).await?;
    let live = snapshot.visible_names_in(Path::new(&before.workspace));
    let old: HashSet<&str> = before.tool_names.iter().map(String::as_str).collect();
    let new: HashSet<&str> = live.iter().map(String::as_str).collect();
    let added = live
        .iter()
        .filter(|n| !old.contains(n.as_str()))
        .cloned()
        .collect();
    let removed = before
        .tool_names
        .iter()
        .filter(|n| !new.contains(n.as_str()))
        .cloned()
        .collect();
    let tag = etag.clone();
    host.sessions()
        .update(id, move |s| {
            s.tool_names = live.clone();
            s.tools_etag = tag.clone();
            s.updated_at = now_ms().max(s.updated_at);
        })
        .await?;
    Ok(SessionRefreshResult {
        etag,
        added,
        removed,
    })
}
