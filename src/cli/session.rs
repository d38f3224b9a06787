//! `toolhost session …`: persisted sessions. `recover` works on the store itself (no daemon
//! needed); the others ask the running daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Map, Value};

use super::render::{emit, first_line, list_or_none, print_table, say, say_err, wire, Output};
use super::{parse_json_object, Globals};
use crate::client::{Client, ClientError};
use crate::protocol::ApprovalMode;
use crate::protocol::*;

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    #[command(flatten)]
    Daemon(DaemonCommand),
    /// Rebuild a damaged session store from what can be read (no daemon needed; refuses
    /// while one uses the store). The damaged store is kept as `sessions.corrupt-<time>`.
    Recover {
        /// The daemon's data dir (default: as `serve` resolves it).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Internal: print the sessions of the store copy in DIR (run by `recover` itself).
        #[arg(long, hide = true, value_name = "DIR")]
        export_from: Option<PathBuf>,
    },
}

/// The subcommands the running daemon answers.
#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Sessions, newest first; the ephemeral ones (a frontend's for one connection) only
    /// with `--all`.
    List {
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed by the previous page.
        #[arg(long)]
        after: Option<String>,
        /// Ephemeral sessions too.
        #[arg(long)]
        all: bool,
    },
    /// One session.
    Show { id: String },
    /// Create a session.
    Create {
        #[arg(long)]
        id: Option<String>,
        /// Initial meta as a JSON object.
        #[arg(long)]
        meta: Option<String>,
        #[arg(long)]
        workspace: Option<String>,
        /// auto, strict or read_only.
        #[arg(long, value_parser = parse_approval)]
        approval: Option<ApprovalMode>,
    },
    /// Change a session: merge meta (a null value deletes a key), set approval or workspace.
    Update {
        id: String,
        /// Meta to merge, as a JSON object.
        #[arg(long)]
        meta: Option<String>,
        #[arg(long)]
        workspace: Option<String>,
        /// auto, strict or read_only.
        #[arg(long, value_parser = parse_approval)]
        approval: Option<ApprovalMode>,
    },
    /// Resume a session: merge its persisted tool names with the live tools.
    Resume { id: String },
    /// The session's tool view (OpenAI function format).
    Tools {
        id: String,
        /// Print only whether the view still has this etag.
        #[arg(long)]
        if_etag: Option<String>,
    },
    /// Delete a session.
    Delete { id: String },
}

pub async fn run(g: &Globals, command: SessionCommand) -> Result<ExitCode, ClientError> {
    match command {
        SessionCommand::Recover {
            data_dir,
            export_from,
        } => Ok(crate::session::recover_cli(
            data_dir,
            g.config.clone(),
            export_from,
        )),
        SessionCommand::Daemon(command) => ask(&g.connect().await?, command, g.out).await,
    }
}

async fn ask(
    client: &Client,
    command: DaemonCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    match command {
        DaemonCommand::List { limit, after, all } => {
            let params = SessionListParams {
                limit: Some(limit),
                after,
            };
            let mut r = client.session_list(&params).await?;
            let listed = r.sessions.len();
            if !all {
                r.sessions.retain(|s| !s.ephemeral);
            }
            let hidden = listed - r.sessions.len();
            if out.json {
                emit(out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = r
                .sessions
                .iter()
                .map(|s| {
                    vec![
                        s.id.clone(),
                        wire(&s.approval),
                        s.workspace.clone(),
                        format!("{} tools", s.tool_names.len()),
                        serde_json::to_string(&s.meta).unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&rows);
            if hidden > 0 {
                say!("({hidden} ephemeral sessions not shown: --all)");
            }
            if let Some(next) = &r.next {
                say!("(more: --after {next})");
            }
        }
        DaemonCommand::Show { id } => emit(out, &client.session_get(&id).await?),
        DaemonCommand::Create {
            id,
            meta,
            workspace,
            approval,
        } => {
            let meta = match parse_meta(meta.as_deref()) {
                Ok(m) => m,
                Err(code) => return Ok(code),
            };
            let params = SessionCreateParams {
                id,
                workspace,
                approval,
                meta,
                ..Default::default()
            };
            emit(out, &client.session_create(&params).await?);
        }
        DaemonCommand::Update {
            id,
            meta,
            workspace,
            approval,
        } => {
            let meta = match parse_meta(meta.as_deref()) {
                Ok(m) => m,
                Err(code) => return Ok(code),
            };
            let params = SessionUpdateParams {
                id,
                meta,
                approval,
                workspace,
                ..Default::default()
            };
            emit(out, &client.session_update(&params).await?);
        }
        DaemonCommand::Resume { id } => {
            let r: SessionResumeResult = client
                .call(method::SESSION_RESUME, &SessionIdParams { id })
                .await?;
            if out.json {
                emit(out, &r);
            } else {
                say!(
                    "resumed {}: {} tools, added {}, missing {}",
                    r.session.id,
                    r.tools.len(),
                    list_or_none(&r.added),
                    list_or_none(&r.missing)
                );
            }
        }
        DaemonCommand::Tools { id, if_etag } => {
            let r: SessionToolsResult = client
                .call(method::SESSION_TOOLS, &SessionToolsParams { id, if_etag })
                .await?;
            if out.json {
                emit(out, &r);
            } else if r.unchanged {
                say!("unchanged (etag {})", r.etag);
            } else {
                let rows: Vec<Vec<String>> = r
                    .tools
                    .iter()
                    .flatten()
                    .map(|t| {
                        vec![
                            t.function.name.clone(),
                            first_line(&t.function.description).to_owned(),
                        ]
                    })
                    .collect();
                print_table(&rows);
                say!("(etag {})", r.etag);
            }
        }
        DaemonCommand::Delete { id } => {
            let r = client.session_delete(&id).await?;
            if !r.deleted {
                say_err!("toolhost: no session {id}");
                return Ok(ExitCode::from(1));
            }
            emit(out, &r);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A session's `--meta`, when given.
fn parse_meta(meta: Option<&str>) -> Result<Option<Map<String, Value>>, ExitCode> {
    meta.map(|m| parse_json_object("--meta", m)).transpose()
}

/// `--approval`: parsed here so a typo is a usage error, not a round trip to the daemon.
fn parse_approval(text: &str) -> Result<ApprovalMode, String> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| format!("{text:?} is not one of auto, strict, read_only"))
}
