//! `toolhost trust`: what the workspaces bring and wait for the user's trust (list), and the
//! decisions — `trust DIR` ("trust this folder"), `trust approve PATH` (one item, or every
//! item beneath PATH), `trust revoke DIR` (proto-docs/trust.md); `trust diff PATH` shows
//! what changed in a waiting item since it was approved.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::render::{emit, print_table, say, Output};
use super::Globals;
use crate::client::{Client, ClientError};
use crate::protocol::{
    method, EmptyParams, TrustApproveParams, TrustDecisionResult, TrustDiffParams, TrustDiffResult,
    TrustFolderParams, TrustItem, TrustListResult,
};

#[derive(clap::Args, Debug)]
pub struct TrustArgs {
    #[command(subcommand)]
    command: Option<TrustCommand>,
    /// Trust this folder as a whole: everything its workspaces bring, now and changed later.
    folder: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum TrustCommand {
    /// Approve one waiting item (its path, as listed), or every waiting item beneath PATH,
    /// as it is now: a later change waits again.
    Approve { path: PathBuf },
    /// Show what changed in the waiting item at PATH since it was approved, file by file.
    Diff { path: PathBuf },
    /// Stop trusting a folder as a whole (its items wait again, unless approved one by one).
    Revoke { folder: PathBuf },
}

pub async fn run(g: &Globals, args: TrustArgs) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let decided: TrustDecisionResult = match (args.command, args.folder) {
        (None, None) => return list(&client, g.out).await,
        (Some(TrustCommand::Diff { path }), _) => {
            let params = TrustDiffParams {
                path: absolute(&path).display().to_string(),
            };
            let r: TrustDiffResult = client.call(method::TRUST_DIFF, &params).await?;
            if g.out.json {
                emit(g.out, &r);
            } else {
                print_files_diff(&r);
            }
            return Ok(ExitCode::SUCCESS);
        }
        (Some(TrustCommand::Approve { path }), _) => {
            let params = TrustApproveParams {
                path: absolute(&path).display().to_string(),
            };
            client.call(method::TRUST_APPROVE, &params).await?
        }
        (Some(TrustCommand::Revoke { folder }), _) => {
            let params = TrustFolderParams {
                folder: absolute(&folder).display().to_string(),
                trusted: false,
            };
            client.call(method::TRUST_FOLDER, &params).await?
        }
        (None, Some(folder)) => {
            let params = TrustFolderParams {
                folder: absolute(&folder).display().to_string(),
                trusted: true,
            };
            client.call(method::TRUST_FOLDER, &params).await?
        }
    };
    if g.out.json {
        emit(g.out, &decided);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(folder) = &decided.folder {
        say!("Folder {folder}: decided.");
    }
    for item in &decided.admitted {
        say!("admitted {} {}", item.kind.as_str(), item.path);
    }
    Ok(ExitCode::SUCCESS)
}

/// The daemon resolves nothing against the CLI's directory: paths go absolute.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

async fn list(client: &Client, out: Output) -> Result<ExitCode, ClientError> {
    let r: TrustListResult = client.call(method::TRUST_LIST, &EmptyParams {}).await?;
    if out.json {
        emit(out, &r);
        return Ok(ExitCode::SUCCESS);
    }
    print_waiting(&r.waiting);
    if !r.folders.is_empty() {
        say!("\nTrusted folders:");
        for f in &r.folders {
            say!("  {f}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The waiting items as a table with the commands that decide them (also under
/// `toolhost approvals`).
pub fn print_waiting(waiting: &[TrustItem]) {
    if waiting.is_empty() {
        say!("Nothing waits for workspace trust.");
        return;
    }
    say!("Waiting for workspace trust (not loaded, run or shown to a model until approved):");
    let mut rows = vec![["KIND", "WORKSPACE", "ITEM"].map(str::to_owned).to_vec()];
    rows.extend(waiting.iter().map(|w| {
        vec![
            w.kind.as_str().to_owned(),
            w.workspace.clone(),
            w.item.clone(),
        ]
    }));
    print_table(&rows);
    say!("Approve one with `toolhost trust approve PATH`, or a whole folder with `toolhost trust DIR`.");
}

/// A waiting item's changed files, each as a unified diff (`trust diff`, `tools diff`).
pub fn print_files_diff(d: &TrustDiffResult) {
    say!(
        "{} {} waits for workspace trust{}",
        d.item.kind.as_str(),
        d.item.path,
        match &d.note {
            Some(note) => format!(" ({note})"),
            None => ": its files changed since they were approved".to_owned(),
        }
    );
    if d.changes.is_empty() {
        say!("(no file differs from the approved ones)");
    }
    for c in &d.changes {
        print!("{}", super::render::printable(&c.diff));
    }
}
