//! The frontends the host serves, as their sessions describe them: what `host.health`
//! says of frontends working in the daemon's workspace because they named none of their
//! own (proto-docs/sessions.md, a frontend's workspace).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::lock;
use crate::protocol::{FrontendWithoutWorkspace, Session, WorkspaceFrom, META_WORKSPACE_FROM};

/// The live sessions whose frontend named no workspace, by session id. In memory only:
/// a restarted daemon hears of them again as their bridges restore their sessions.
#[derive(Default)]
pub struct Frontends {
    without_workspace: Mutex<BTreeMap<String, String>>,
}

impl Frontends {
    /// After a session was made or changed: whether its frontend named a workspace.
    pub fn saw(&self, s: &Session) {
        let from = s
            .meta
            .get(META_WORKSPACE_FROM)
            .and_then(|v| serde_json::from_value::<WorkspaceFrom>(v.clone()).ok());
        let mut without = lock(&self.without_workspace);
        if from == Some(WorkspaceFrom::Daemon) {
            without.insert(s.id.clone(), client_of(s));
        } else {
            without.remove(&s.id);
        }
    }

    /// After session `id` ended.
    pub fn ended(&self, id: &str) {
        lock(&self.without_workspace).remove(id);
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

/// The client as a session's meta names it: `clientInfo` name and version, else the kind
/// of frontend.
fn client_of(s: &Session) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    match s.meta.get("mcp_client") {
        Some(c) => format!("{} {}", text(c.get("name")), text(c.get("version")))
            .trim()
            .to_owned(),
        None => text(s.meta.get("frontend")),
    }
}
