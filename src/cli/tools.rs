//! `toolhost tools`: the live tools, `toolhost tools approve|diff NAME`: reviewing and
//! accepting quarantined tools, and `toolhost tools pins reset`: starting over from a
//! damaged pin file.

use std::process::ExitCode;

use clap::Subcommand;

use super::render::{emit, first_line, print_table, printable, say, wire, Output};
use super::Globals;
use crate::client::{Client, ClientError};
use crate::protocol::{
    method, EmptyParams, ListToolsParams, ToolMeta, ToolNameParams, ToolsApproveResult,
    ToolsDiffResult, ToolsPinsResetResult,
};

#[derive(Subcommand, Debug)]
pub enum ToolsCommand {
    /// Accept a quarantined tool's current definition and list it again.
    Approve { name: String },
    /// Show a tool's pinned definition against its current one (`-` pinned, `+` current).
    Diff { name: String },
    /// The pin store (`pins.json` in the data dir).
    Pins {
        #[command(subcommand)]
        command: PinsCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum PinsCommand {
    /// Move a damaged pins.json aside and pin every tool afresh (refused while it is sound).
    Reset,
}

pub async fn run(
    g: &Globals,
    command: Option<ToolsCommand>,
    all: bool,
) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    match command {
        None => list(&client, all, g.out).await,
        Some(command) => review(&client, command, g.out).await,
    }
}

/// One row per tool: name, source, approval class, the description's first line.
async fn list(client: &Client, all: bool, out: Output) -> Result<ExitCode, ClientError> {
    let params = ListToolsParams {
        include_hidden: all,
        ..Default::default()
    };
    let r = client.list_tools(&params).await?;
    if out.json {
        emit(out, &r);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = r
        .tools
        .iter()
        .map(|t| {
            let name = t.name();
            let meta = r.meta.get(name);
            let source = match meta {
                Some(ToolMeta {
                    server: Some(s), ..
                }) => format!("mcp:{s}"),
                Some(m) => wire(&m.source),
                None => String::new(),
            };
            let approval = meta
                .and_then(|m| m.approval)
                .map_or("-", crate::protocol::ApprovalClass::as_str);
            vec![
                name.to_owned(),
                source,
                approval.to_owned(),
                first_line(t.description()).to_owned(),
            ]
        })
        .collect();
    print_table(&rows);
    Ok(ExitCode::SUCCESS)
}

async fn review(
    client: &Client,
    command: ToolsCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    match command {
        ToolsCommand::Approve { name } => {
            let r: ToolsApproveResult = client
                .call(method::TOOLS_APPROVE, &ToolNameParams { name })
                .await?;
            if out.json {
                emit(out, &r);
            } else {
                say!("approved {} (revision {})", r.name, r.revision);
            }
        }
        ToolsCommand::Pins {
            command: PinsCommand::Reset,
        } => {
            let r: ToolsPinsResetResult = client
                .call(method::TOOLS_PINS_RESET, &EmptyParams {})
                .await?;
            if out.json {
                emit(out, &r);
            } else {
                say!(
                    "moved the damaged pin file to {}; every tool is pinned afresh (revision {})",
                    r.moved_to,
                    r.revision
                );
            }
        }
        ToolsCommand::Diff { name } => {
            let r: ToolsDiffResult = client
                .call(method::TOOLS_DIFF, &ToolNameParams { name })
                .await?;
            if out.json {
                emit(out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            match (&r.quarantine, &r.files) {
                (Some(q), _) => say!("{}", q.message),
                (None, None) => say!("{} is not quarantined", r.name),
                (None, Some(_)) => {}
            }
            print!("{}", printable(&r.diff));
            if let Some(files) = &r.files {
                super::trust::print_files_diff(files);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
