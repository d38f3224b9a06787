//! `toolhost fleet`: the fleet's members as the database knows them (proto-docs/fleet.md).

use std::process::ExitCode;

use super::render::{emit, print_table, say};
use super::Globals;
use crate::client::ClientError;
use crate::protocol::FleetMemberState;

pub async fn run(g: &Globals) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
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
