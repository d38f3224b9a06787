//! A frontend's workspace as the command line knows it: `toolhost mcp` (the stdio bridge)
//! and `toolhost invoke|call` choose it the same way (proto-docs/sessions.md).

use std::path::Path;

use serde_json::{Map, Value};

use crate::client::{Client, ClientError};
use crate::protocol::{SessionCreateParams, META_WORKSPACE_FROM};

pub use crate::facade::Workspace;
use crate::protocol::WorkspaceFrom;

/// `--workspace DIR` when given (it must be a directory: anything else is an error naming
/// it), else the current directory, unless that is `/` or the home directory itself, which
/// are nobody's project: then the daemon's workspace. An MCP client's roots, when it sends
/// any, replace this later (the facade applies them).
pub fn resolve(flag: Option<&Path>) -> Result<Workspace, String> {
    if let Some(dir) = flag {
        let path = dir
            .canonicalize()
            .map_err(|e| format!("--workspace {}: {e}", dir.display()))?;
        if !path.is_dir() {
            return Err(format!("--workspace {}: not a directory", dir.display()));
        }
        return Ok(Workspace {
            path: Some(path.display().to_string()),
            from: WorkspaceFrom::Flag,
        });
    }
    let daemon = Workspace {
        path: None,
        from: WorkspaceFrom::Daemon,
    };
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(daemon);
    };
    let home = crate::protocol::home_dir().and_then(|h| h.canonicalize().ok());
    if cwd == Path::new("/") || Some(&cwd) == home.as_ref() {
        return Ok(daemon);
    }
    Ok(Workspace {
        path: Some(cwd.display().to_string()),
        from: WorkspaceFrom::Cwd,
    })
}

/// The session a CLI call without `--session` runs in: an ephemeral one (it ends with this
/// process's connection) in the workspace [`resolve`] finds, or none (the daemon's
/// workspace, as a call without a session always had).
pub async fn call_session(client: &Client, ws: &Workspace) -> Result<Option<String>, ClientError> {
    let Some(path) = &ws.path else {
        return Ok(None);
    };
    let mut meta = Map::new();
    meta.insert("frontend".into(), "cli".into());
    meta.insert(
        META_WORKSPACE_FROM.into(),
        serde_json::to_value(ws.from).unwrap_or(Value::Null),
    );
    let params = SessionCreateParams {
        workspace: Some(path.clone()),
        meta: Some(meta),
        ephemeral: true,
        ..Default::default()
    };
    Ok(Some(client.session_create(&params).await?.id))
}
