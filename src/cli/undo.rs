//! `toolhost undo` and `toolhost checkpoints`: the current directory's workspace timeline
//! (proto-docs/checkpoints.md).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use super::render::{emit, print_table, say, say_err};
use super::Globals;
use crate::client::ClientError;
use crate::protocol::{
    method, CheckpointDiffParams, CheckpointDiffResult, CheckpointEntry, CheckpointKind,
    CheckpointListParams, CheckpointListResult, CheckpointRestoreParams, CheckpointRestoreResult,
    FileChange, RestoreScope,
};

#[derive(clap::Args, Debug)]
pub struct UndoArgs {
    /// Undo the change of this call (its call id) instead of the last change.
    #[arg(long, value_name = "ID")]
    call: Option<String>,
    /// Undo the last change made through this frontend (its client name).
    #[arg(long, value_name = "NAME")]
    frontend: Option<String>,
    /// Do it without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Overwrite files changed since (otherwise the undo is refused, naming them).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args, Debug)]
pub struct CheckpointsArgs {
    /// Print each entry's unified diff too.
    #[arg(long)]
    diff: bool,
    /// At most this many entries.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

fn cwd() -> Option<String> {
    std::env::current_dir()
        .ok()
        .map(|d| d.to_string_lossy().into_owned())
}

fn time_of(ms: u64) -> String {
    let ago = crate::now_ms().saturating_sub(ms) / 1000;
    match ago {
        0..=59 => format!("{ago}s ago"),
        60..=3599 => format!("{}m ago", ago / 60),
        3600..=86399 => format!("{}h ago", ago / 3600),
        _ => format!("{}d ago", ago / 86400),
    }
}

fn who(e: &CheckpointEntry) -> String {
    match e.kind {
        CheckpointKind::Outside => "(outside the host)".to_owned(),
        _ => format!(
            "{} from {}",
            e.tool.as_deref().unwrap_or("?"),
            e.frontend.as_deref().unwrap_or("?")
        ),
    }
}

fn files_line(e: &CheckpointEntry) -> String {
    e.files
        .iter()
        .map(|f| {
            let sign = match f.change {
                FileChange::Added => "+",
                FileChange::Deleted => "-",
                FileChange::Modified => "~",
            };
            format!("{sign}{}", f.path)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn checkpoints(g: &Globals, args: CheckpointsArgs) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let params = CheckpointListParams {
        workspace: cwd(),
        limit: Some(args.limit),
        ..Default::default()
    };
    let list: CheckpointListResult = client.call(method::CHECKPOINT_LIST, &params).await?;
    if g.out.json {
        emit(g.out, &list);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(why) = &list.disabled {
        say!("Checkpoints are off for {}: {why}", list.workspace);
    }
    if list.lost > 0 {
        say!(
            "{} entries of this timeline are lost (a damaged store).",
            list.lost
        );
    }
    if list.entries.is_empty() {
        say!("No changes recorded in {}.", list.workspace);
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![["ID", "WHEN", "WHAT", "CALL", "FILES"]
        .map(str::to_owned)
        .to_vec()];
    rows.extend(list.entries.iter().map(|e| {
        vec![
            e.id.clone(),
            time_of(e.time),
            who(e),
            e.call_id.clone().unwrap_or_else(|| "-".into()),
            files_line(e),
        ]
    }));
    print_table(&rows);
    if args.diff {
        for e in &list.entries {
            let d: CheckpointDiffResult = client
                .call(
                    method::CHECKPOINT_DIFF,
                    &CheckpointDiffParams {
                        id: e.id.clone(),
                        path: None,
                    },
                )
                .await?;
            say!("\n# {} ({})\n{}", e.id, who(e), d.diff);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn undo(g: &Globals, args: UndoArgs) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let params = CheckpointListParams {
        workspace: cwd(),
        frontend: args.frontend.clone(),
        limit: Some(if args.call.is_some() { usize::MAX } else { 50 }),
        ..Default::default()
    };
    let list: CheckpointListResult = client.call(method::CHECKPOINT_LIST, &params).await?;
    let entry = match &args.call {
        Some(id) => list
            .entries
            .iter()
            .find(|e| e.call_id.as_deref() == Some(id.as_str())),
        // The last change a call or a restore made (a change made outside is the user's own).
        None => list
            .entries
            .iter()
            .find(|e| e.kind != CheckpointKind::Outside),
    };
    let Some(entry) = entry else {
        say_err!("Nothing to undo in {}.", list.workspace);
        return Ok(ExitCode::from(1));
    };
    let diff: CheckpointDiffResult = client
        .call(
            method::CHECKPOINT_DIFF,
            &CheckpointDiffParams {
                id: entry.id.clone(),
                path: None,
            },
        )
        .await?;
    let restore = |dry_run: bool| CheckpointRestoreParams {
        id: entry.id.clone(),
        scope: RestoreScope::Call,
        paths: None,
        force: args.force,
        dry_run,
    };
    let preview: CheckpointRestoreResult = client
        .call(method::CHECKPOINT_RESTORE, &restore(true))
        .await?;
    if !g.out.json {
        say!(
            "Undo {} ({}, {}):",
            entry.id,
            who(entry),
            time_of(entry.time)
        );
        say!("{}", diff.diff.trim_end());
        for c in &preview.conflicts {
            say!("conflict: {} was changed later by {}", c.path, c.changed_by);
        }
        for n in &preview.not_restorable {
            say!("cannot restore: {n}");
        }
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            say_err!("Not undone: confirm with --yes (no terminal to ask on).");
            return Ok(ExitCode::from(1));
        }
        eprint!("Undo this change? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            say_err!("Not undone.");
            return Ok(ExitCode::from(1));
        }
    }
    let done: CheckpointRestoreResult = client
        .call(method::CHECKPOINT_RESTORE, &restore(false))
        .await?;
    if g.out.json {
        emit(g.out, &done);
    } else {
        say!(
            "Undone: {} file(s) restored{}.",
            done.files.len(),
            done.entry
                .as_ref()
                .map(|e| format!(" (entry {})", e.id))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}
