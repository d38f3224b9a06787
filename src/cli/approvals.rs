//! `toolhost approvals`: the calls waiting for an operator's approval (list, `--follow`),
//! and `approvals allow|deny ID`, which decide one of them (proto-docs/approvals.md).

use std::process::ExitCode;

use clap::Subcommand;

use super::render::{emit, print_table, say, Output};
use super::Globals;
use crate::client::{Client, ClientError};
use crate::protocol::{
    ApprovalDecision, ApprovalEvent, ApprovalsDecideParams, DecidedApproval, DecidedVia,
    PendingApproval,
};

#[derive(clap::Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: Option<ApprovalsCommand>,
    /// Print the queue's events as they come (the calls waiting now first), until
    /// interrupted.
    #[arg(long)]
    follow: bool,
}

#[derive(Subcommand, Debug)]
enum ApprovalsCommand {
    /// Let a waiting call run.
    Allow {
        id: String,
        /// Also let its tool run without approval for the rest of the call's session.
        #[arg(long)]
        session: bool,
    },
    /// Refuse a waiting call (it fails `denied`).
    Deny {
        id: String,
        /// Told to the caller and kept in the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn run(g: &Globals, args: ApprovalsArgs) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let (id, decision, reason) = match args.command {
        None if args.follow => return follow(&client, g.out).await,
        None => return list(&client, g.out).await,
        Some(ApprovalsCommand::Allow { id, session }) => {
            let decision = if session {
                ApprovalDecision::AllowSession
            } else {
                ApprovalDecision::AllowOnce
            };
            (id, decision, None)
        }
        Some(ApprovalsCommand::Deny { id, reason }) => (id, ApprovalDecision::Deny, reason),
    };
    let params = ApprovalsDecideParams {
        id,
        decision,
        reason,
        via: DecidedVia::Cli,
    };
    let decided = client.approvals_decide(&params).await?;
    if g.out.json {
        emit(g.out, &decided);
    } else {
        say!("{}", decided_line(&decided));
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per waiting call, oldest first.
async fn list(client: &Client, out: Output) -> Result<ExitCode, ClientError> {
    let r = client.approvals_list().await?;
    if out.json {
        emit(out, &r);
        return Ok(ExitCode::SUCCESS);
    }
    if !r.trust.is_empty() {
        super::trust::print_waiting(&r.trust);
        say!("");
    }
    if r.pending.is_empty() {
        say!("No call waits for approval.");
        return Ok(ExitCode::SUCCESS);
    }
    let now = crate::now_ms();
    let mut rows = vec![[
        "ID", "TOOL", "SESSION", "CLIENT", "WAITING", "LEFT", "SUMMARY",
    ]
    .map(str::to_owned)
    .to_vec()];
    rows.extend(r.pending.iter().map(|p| {
        vec![
            p.id.clone(),
            p.tool.clone(),
            p.session_id.clone().unwrap_or_else(|| "-".into()),
            p.client.clone().unwrap_or_else(|| "-".into()),
            seconds(now.saturating_sub(p.since_ms)),
            seconds(p.deadline_ms.saturating_sub(now)),
            p.summary.to_string(),
        ]
    }));
    print_table(&rows);
    Ok(ExitCode::SUCCESS)
}

/// Prints each event of the queue as it comes, until the daemon goes away.
async fn follow(client: &Client, out: Output) -> Result<ExitCode, ClientError> {
    let mut events = client.subscribe_approvals().await?;
    while let Some(event) = events.next().await {
        let event = event?;
        if out.json {
            emit(out, &event);
            continue;
        }
        match &event {
            ApprovalEvent::ApprovalPending(p) => say!("{}", pending_line(p)),
            ApprovalEvent::ApprovalDecided(d) => say!("{}", decided_line(d)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn pending_line(p: &PendingApproval) -> String {
    let mut line = format!("pending {} {}", p.id, p.summary);
    if let Some(s) = &p.session_id {
        line.push_str(&format!(" session={s}"));
    }
    if let Some(c) = &p.client {
        line.push_str(&format!(" client={c}"));
    }
    line.push_str(&format!(
        " (call {}; waits {})",
        p.call_id,
        seconds(p.deadline_ms.saturating_sub(p.since_ms))
    ));
    line
}

fn decided_line(d: &DecidedApproval) -> String {
    let v = &d.verdict;
    let mut line = format!(
        "decided {} {} (call {}, {})",
        d.id,
        v.outcome.as_str(),
        d.call_id,
        d.tool
    );
    if let Some(by) = &v.by {
        line.push_str(&format!(" by {}", by.describe()));
    }
    if let Some(reason) = &v.reason {
        line.push_str(&format!(": {reason}"));
    }
    line
}

fn seconds(ms: u64) -> String {
    format!("{}s", ms / 1000)
}
