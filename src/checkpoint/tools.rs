//! The timeline as tools, for a model in any frontend (proto-docs/checkpoints.md#the-tools):
//! `checkpoint_list` (read-only) and `checkpoint_restore` (write class). Both act on the
//! call's own workspace only: an entry of another workspace is unknown to them.
//!
//! They reach the daemon's stores and config through [`Reach`], which the host implements
//! (this module does not import the host); they are registered while checkpoints are on
//! for some view (`Config::checkpoint_anywhere`).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::restore::Refused;
use super::{Caller, Checkpoints};
use crate::catalog::ToolSpec;
use crate::config::Config;
use crate::protocol::{
    ApprovalClass, CheckpointEntry, CheckpointKind, CheckpointListParams, CheckpointRestoreParams,
    ErrorKind, FileChange, RestoreScope, ToolOutput,
};
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

/// What the tools need of the daemon.
pub trait Reach: Send + Sync {
    fn checkpoints(&self) -> &Checkpoints;
    fn config(&self) -> Arc<Config>;
}

/// The two tools, or none when no view has checkpoints on.
pub fn tools(config: &Config, reach: Weak<dyn Reach>) -> Vec<Arc<dyn Tool>> {
    if !config.checkpoint_anywhere() {
        return Vec::new();
    }
    vec![
        Arc::new(CheckpointTool::list(reach.clone())),
        Arc::new(CheckpointTool::restore(reach)),
    ]
}

pub const LIST_TOOL: &str = "checkpoint_list";
pub const RESTORE_TOOL: &str = "checkpoint_restore";

/// Entries the list tool shows unless asked for another number (a model reads them all).
const TOOL_LIMIT: usize = 20;

pub struct CheckpointTool {
    spec: ToolSpec,
    restore: bool,
    reach: Weak<dyn Reach>,
}

impl CheckpointTool {
    fn list(reach: Weak<dyn Reach>) -> Self {
        let description = "- The timeline of changes to this project's files, newest first: each tool call that changed files (from any frontend or agent), changes made outside between calls (an editor, a `git checkout`), and restores.\n\
             - Each entry: its id, time, what made it (tool and frontend), and the files with +/- lines.\n\
             - With `id`: that entry's unified diff.\n\
             - Undo an entry with checkpoint_restore.";
        let parameters = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "Show this entry's diff instead of the timeline."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": format!("At most this many entries (default {TOOL_LIMIT}).")},
                "frontend": {"type": "string", "description": "Only entries of calls from this frontend (its client name)."},
                "session": {"type": "string", "description": "Only entries of calls of this session."},
                "since": {"type": "integer", "minimum": 0, "description": "Only entries at or after this time (milliseconds since the epoch)."}
            },
            "additionalProperties": false
        });
        CheckpointTool {
            spec: ToolSpec::builtin(LIST_TOOL, description, parameters, ApprovalClass::ReadOnly),
            restore: false,
            reach,
        }
    }

    fn restore(reach: Weak<dyn Reach>) -> Self {
        let description = "- Undoes a change in this project: puts back the files of one timeline entry (see checkpoint_list), whichever frontend or agent made it.\n\
             - scope \"call\" (default) reverts exactly that entry's changes; \"before\" puts every file that entry or a later one changed back as it was before it.\n\
             - Refuses when a file was changed again since (a conflict), naming each file and the entry that changed it: show them to the user, and repeat with force: true only if the user agrees to lose those later changes.\n\
             - Refuses while another call is running in the project: try again when it has ended.\n\
             - The restore is itself an entry, so it can be undone too. dry_run only says what would be done.";
        let parameters = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The entry to undo (checkpoint_list's id, e.g. cp_3f2a9c0d1e4b5a69_4)."},
                "scope": {"type": "string", "enum": ["call", "before"], "description": "\"call\": revert that entry's changes only (default); \"before\": the project's files as they were before that entry."},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "Only these files of the entry (as checkpoint_list shows them)."},
                "force": {"type": "boolean", "description": "Overwrite files changed since the entry (conflicts) instead of refusing (default false)."},
                "dry_run": {"type": "boolean", "description": "Only say what would be restored and what conflicts (default false)."}
            },
            "required": ["id"],
            "additionalProperties": false
        });
        CheckpointTool {
            spec: ToolSpec::builtin(RESTORE_TOOL, description, parameters, ApprovalClass::Write),
            restore: true,
            reach,
        }
    }

    fn reach(&self) -> Result<Arc<dyn Reach>, ToolError> {
        self.reach
            .upgrade()
            .ok_or_else(|| ToolError::new(ErrorKind::Unavailable, "the host is shutting down"))
    }
}

impl Tool for CheckpointTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let reach = self.reach()?;
            if self.restore {
                restore(reach.as_ref(), args, &ctx).await
            } else {
                list(reach.as_ref(), args, &ctx.workspace).await
            }
        })
    }

    /// The user approving a restore sees what it would put back (a dry run).
    fn approval_details<'a>(
        &'a self,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            if !self.restore {
                return None;
            }
            let reach = self.reach().ok()?;
            let mut p = restore_params(args.clone()).ok()?;
            p.dry_run = true;
            let id = p.id.clone();
            let r = super::restore(reach.checkpoints(), &reach.config(), p, Caller::default())
                .await
                .ok()?;
            let files: Vec<String> = r.files.iter().map(|f| f.path.clone()).collect();
            Some(format!(
                "undo {id}: restore {} file{} ({}){}",
                files.len(),
                plural(files.len()),
                files.join(", "),
                if r.conflicts.is_empty() {
                    String::new()
                } else {
                    format!(", overwriting {} later change(s)", r.conflicts.len())
                }
            ))
        })
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn restore_params(args: Map<String, Value>) -> Result<CheckpointRestoreParams, ToolError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError::invalid(format!("invalid arguments: {e}")))
}

/// An id of another workspace than the call's is as unknown as one that never existed.
fn check_own(checkpoints: &Checkpoints, id: &str, workspace: &Path) -> Result<(), ToolError> {
    if checkpoints.holds(workspace, id) {
        Ok(())
    } else {
        Err(ToolError::invalid(format!(
            "no checkpoint entry {id:?} in this project (checkpoint_list shows its entries)"
        )))
    }
}

async fn list(reach: &dyn Reach, args: Map<String, Value>, workspace: &Path) -> ToolResult {
    let config = reach.config();
    let checkpoints = reach.checkpoints();
    if let Some(id) = args.get("id").and_then(Value::as_str) {
        check_own(checkpoints, id, workspace)?;
        let d = checkpoints
            .diff(&config, id, None)
            .await
            .map_err(|e| ToolError::invalid(e.to_string()))?;
        let mut out = Map::new();
        out.insert("id".into(), json!(d.id));
        let text = if d.diff.is_empty() {
            "(no textual change)".to_owned()
        } else {
            d.diff
        };
        out.insert("output".into(), json!(text));
        return Ok(ToolOutput::from_fields(out));
    }
    let mut p: CheckpointListParams = serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError::invalid(format!("invalid arguments: {e}")))?;
    p.workspace = Some(workspace.display().to_string());
    p.limit = Some(p.limit.unwrap_or(TOOL_LIMIT));
    let r = checkpoints
        .list(&config, workspace, p)
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let mut text = String::new();
    if let Some(why) = &r.disabled {
        let _ = writeln!(text, "Checkpoints are off for this project: {why}.");
    }
    if r.lost > 0 {
        let _ = writeln!(
            text,
            "{} entr{} of this timeline could not be read (a damaged store).",
            r.lost,
            if r.lost == 1 { "y" } else { "ies" }
        );
    }
    if r.entries.is_empty() {
        let _ = writeln!(text, "No changes are recorded in {}.", r.workspace);
    }
    for e in &r.entries {
        describe(&mut text, e);
    }
    let mut out = Map::new();
    out.insert("workspace".into(), json!(r.workspace));
    out.insert("output".into(), json!(text));
    let mut structured = Map::new();
    structured.insert(
        "entries".into(),
        serde_json::to_value(&r.entries).unwrap_or(Value::Null),
    );
    let mut output = ToolOutput::from_fields(out);
    output.structured_content = Some(structured);
    Ok(output)
}

/// One entry as a model reads it: `cp_… 12:03:04 bash (claude-code): src/a.rs +3 -1, …`.
fn describe(out: &mut String, e: &CheckpointEntry) {
    let secs = e.time / 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let by = match e.kind {
        CheckpointKind::Outside => "outside the host".to_owned(),
        CheckpointKind::Call | CheckpointKind::Restore => {
            let mut by = e.tool.clone().unwrap_or_else(|| "a call".into());
            if let Some(f) = &e.frontend {
                let _ = write!(by, " ({f})");
            }
            if let Some(r) = &e.restores {
                let _ = write!(by, ", undoing {r}");
            }
            by
        }
    };
    let files: Vec<String> = e
        .files
        .iter()
        .map(|f| {
            let how = match f.change {
                FileChange::Added => "added",
                FileChange::Modified => "modified",
                FileChange::Deleted => "deleted",
            };
            match (f.added_lines, f.removed_lines) {
                (Some(a), Some(r)) => format!("{} {how} +{a} -{r}", f.path),
                _ => format!("{} {how}", f.path),
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "{} {h:02}:{m:02}:{s:02} UTC {by}: {}",
        e.id,
        files.join(", ")
    );
}

async fn restore(reach: &dyn Reach, args: Map<String, Value>, ctx: &CallContext) -> ToolResult {
    let p = restore_params(args)?;
    let checkpoints = reach.checkpoints();
    check_own(checkpoints, &p.id, &ctx.workspace)?;
    let id = p.id.clone();
    let dry_run = p.dry_run;
    let scope = p.scope;
    let caller = Caller {
        call_id: Some(ctx.call_id.clone()),
        tool: Some(RESTORE_TOOL.to_owned()),
        // As the pipeline names a call's frontend: the session's client, else the peer's.
        frontend: ctx
            .session_meta
            .as_object()
            .and_then(crate::audit::client_name)
            .or_else(|| crate::audit::current_caller().and_then(|c| c.agent.clone())),
        session: ctx.session_id.clone(),
        restores: None,
    };
    let r = match super::restore(checkpoints, &reach.config(), p, caller).await {
        Ok(r) => r,
        Err(Refused::Busy(calls)) => {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                Refused::Busy(calls.clone()).to_string(),
            )
            .with_field("running", json!(calls)))
        }
        Err(refused @ Refused::Conflicts { .. }) => {
            let conflicts = match &refused {
                Refused::Conflicts { conflicts, .. } => {
                    serde_json::to_value(conflicts).unwrap_or(Value::Null)
                }
                _ => Value::Null,
            };
            return Err(ToolError::failed(refused.to_string()).with_field("conflicts", conflicts));
        }
        Err(Refused::Other(e)) => return Err(ToolError::invalid(e.to_string())),
    };
    let mut text = String::new();
    let verb = if dry_run { "Would restore" } else { "Restored" };
    let what = match scope {
        RestoreScope::Call => format!("the changes of {id}"),
        RestoreScope::Before => format!("the project as it was before {id}"),
    };
    if r.files.is_empty() {
        let _ = writeln!(
            text,
            "Nothing to restore for {what}: the files are already so."
        );
    } else {
        let _ = writeln!(text, "{verb} {what}:");
        for f in &r.files {
            let how = match f.change {
                FileChange::Added => "recreated",
                FileChange::Deleted => "removed",
                FileChange::Modified => "put back",
            };
            let _ = writeln!(text, "- {} {how}", f.path);
        }
    }
    for c in &r.conflicts {
        let _ = writeln!(
            text,
            "- {} was changed later by {}{}",
            c.path,
            c.changed_by,
            if dry_run {
                " (a conflict)"
            } else {
                " (overwritten)"
            }
        );
    }
    for n in &r.not_restorable {
        let _ = writeln!(text, "- {n} cannot be restored (left as it is)");
    }
    if let Some(e) = &r.entry {
        let _ = writeln!(
            text,
            "This restore is entry {}: checkpoint_restore it to undo the undo.",
            e.id
        );
    }
    let mut out = Map::new();
    out.insert("output".into(), json!(text));
    let mut output = ToolOutput::from_fields(out);
    if let Ok(Value::Object(structured)) = serde_json::to_value(&r) {
        output.structured_content = Some(structured);
    }
    Ok(output)
}
