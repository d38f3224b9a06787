//! `toolhost fleet`: the fleet's members as the database knows them; `toolhost fleet token
//! create|revoke|list`: the users' bearer tokens (proto-docs/fleet.md).

use std::process::ExitCode;

use super::render::{emit, print_table, say};
use super::Globals;
use crate::client::ClientError;
use crate::protocol::{FleetMemberState, FleetTokenCreateParams, FleetTokenRevokeParams};

#[derive(clap::Subcommand, Debug)]
pub enum FleetCommand {
    /// Every member and the database's health (the default).
    Status,
    /// The users' bearer tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// A new token for a user, valid on every member at once (printed this once).
    Create {
        #[arg(long)]
        user: String,
        /// A role the token carries (e.g. `approver` for `fleet.approver_role`); repeat
        /// for more.
        #[arg(long = "role")]
        roles: Vec<String>,
    },
    /// Revoke a token (by the id `list` shows): every member refuses it from now on.
    Revoke { id: String },
    /// Every token made, revoked ones too (never the token itself).
    List,
}

pub async fn run(g: &Globals, command: Option<FleetCommand>) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    match command {
        None | Some(FleetCommand::Status) => {}
        Some(FleetCommand::Token { command }) => return token(g, &client, command).await,
    }
    let status = client.fleet_status().await?;
    let healthy = status.database.reachable
        && status
            .members
            .iter()
            .all(|m| m.state == FleetMemberState::Live);
    if g.out.json {
        emit(g.out, &status);
        return Ok(super::success_if(healthy));
    }
    let db = &status.database;
    match &db.error {
        None => say!(
            "database: reachable (schema {}), {} write(s) queued",
            db.schema_version,
            db.queued
        ),
        Some(e) => say!(
            "database: UNREACHABLE ({e}), {} write(s) queued, {} dropped",
            db.queued,
            db.dropped
        ),
    }
    let mut rows = vec![[
        "MEMBER",
        "HOST",
        "VERSION",
        "STATE",
        "HEARTBEAT",
        "SERVERS",
        "LISTENS",
    ]
    .map(str::to_owned)
    .to_vec()];
    for m in &status.members {
        let me = if m.id == status.member { " (this)" } else { "" };
        let servers: Vec<String> = m
            .servers
            .iter()
            .map(|s| format!("{} {}", s.name, s.state))
            .collect();
        rows.push(vec![
            format!("{}{me}", m.id),
            m.host.clone(),
            m.version.clone(),
            match m.state {
                FleetMemberState::Live => "live".into(),
                FleetMemberState::Lost => "LOST".into(),
            },
            format!("{:.1} s ago", m.heartbeat_age_ms as f64 / 1000.0),
            if servers.is_empty() {
                "-".into()
            } else {
                servers.join(", ")
            },
            m.listeners.join(", "),
        ]);
    }
    print_table(&rows);
    Ok(super::success_if(healthy))
}

async fn token(
    g: &Globals,
    client: &crate::client::Client,
    command: TokenCommand,
) -> Result<ExitCode, ClientError> {
    match command {
        TokenCommand::Create { user, roles } => {
            let t = client
                .fleet_token_create(&FleetTokenCreateParams { user, roles })
                .await?;
            if g.out.json {
                emit(g.out, &t);
            } else if t.roles.is_empty() {
                say!("{} (user {}, id {})", t.token, t.user, t.id);
            } else {
                let roles = t.roles.join(",");
                say!("{} (user {}, roles {roles}, id {})", t.token, t.user, t.id);
            }
        }
        TokenCommand::Revoke { id } => {
            let r = client
                .fleet_token_revoke(&FleetTokenRevokeParams { id })
                .await?;
            if g.out.json {
                emit(g.out, &r);
            } else if r.revoked {
                say!("{}: revoked on every member", r.id);
            } else {
                say!("{}: revoked already", r.id);
            }
        }
        TokenCommand::List => {
            let r = client.fleet_token_list().await?;
            if g.out.json {
                emit(g.out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            let mut rows = vec![["ID", "USER", "ROLES", "MADE ON", "STATE"]
                .map(str::to_owned)
                .to_vec()];
            for t in &r.tokens {
                rows.push(vec![
                    t.id.clone(),
                    t.user.clone(),
                    if t.roles.is_empty() {
                        "-".into()
                    } else {
                        t.roles.join(",")
                    },
                    t.created_on.clone(),
                    if t.revoked_ms.is_some() {
                        "revoked".into()
                    } else {
                        "live".into()
                    },
                ]);
            }
            print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}
