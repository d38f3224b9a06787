//! Fleet mode's admin method (proto-docs/fleet.md): the members as the database knows them.

use super::Api;
use crate::error::Error;
use crate::protocol::*;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::FLEET_STATUS,
        "Fleet mode: this member's id, the shared database's health (reachable, writes queued), and every member of the fleet (host, version, listeners, started, heartbeat and its age by the database's clock, live or lost, its MCP servers and their states). An error when the daemon is not in fleet mode.",
        |host, _: EmptyParams| async move {
            match host.fleet() {
                Some(fleet) => Ok(fleet.status().await),
                None => Err(Error::InvalidParams(
                    "this daemon is not in fleet mode (config `store` is sled; see proto-docs/fleet.md)".into(),
                )),
            }
        },
    )
}
