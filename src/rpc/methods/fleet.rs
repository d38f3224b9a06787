//! Fleet mode's admin methods (proto-docs/fleet.md): the members as the database knows
//! them, and the users' bearer tokens.

use super::Api;
use crate::error::Error;
use crate::protocol::*;

/// The fleet, for a method that manages the users' tokens: refused outside fleet mode and
/// to a caller who came in with a user's token (a user does not mint or revoke tokens).
fn token_admin(host: &crate::host::Host) -> Result<&crate::fleet::Fleet, Error> {
    let fleet = host.fleet().ok_or_else(not_fleet)?;
    let by_user = crate::audit::current_caller().is_some_and(|c| c.user().is_some());
    if by_user {
        return Err(Error::InvalidParams(
            "a user's token cannot manage the fleet's tokens: use the daemon's socket or an operator token".into(),
        ));
    }
    Ok(fleet)
}

fn not_fleet() -> Error {
    Error::InvalidParams(
        "this daemon is not in fleet mode (config `store` is sled; see proto-docs/fleet.md)".into(),
    )
}

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::FLEET_TOKEN_CREATE,
        "Fleet mode: a new bearer token for `user`, valid at once on every member's TCP listener (the caller is then `user:<user>`: in its frontend identity and every audit line). The token is shown this once; the database keeps its SHA-256.",
        |host, p: FleetTokenCreateParams| async move {
            token_admin(&host)?
                .token_create(&p.user, &p.roles)
                .await
                .map_err(Error::InvalidParams)
        },
    )?;
    api.method(
        method::FLEET_TOKEN_REVOKE,
        "Fleet mode: revokes a user's token (by id): every member refuses it from now on.",
        |host, p: FleetTokenRevokeParams| async move {
            token_admin(&host)?
                .token_revoke(&p.id)
                .await
                .map_err(Error::InvalidParams)
        },
    )?;
    api.method(
        method::FLEET_TOKEN_LIST,
        "Fleet mode: every user token made (id, user, when and where, revoked when), never the token itself.",
        |host, _: EmptyParams| async move {
            let tokens = token_admin(&host)?
                .token_list()
                .await
                .map_err(Error::Server)?;
            Ok(FleetTokenListResult { tokens })
        },
    )?;
    api.method(
        method::FLEET_STATUS,
        "Fleet mode: this member's id, the shared database's health (reachable, writes queued), and every member of the fleet (host, version, listeners, started, heartbeat and its age by the database's clock, live or lost, its MCP servers and their states). An error when the daemon is not in fleet mode.",
        |host, _: EmptyParams| async move {
            match host.fleet() {
                Some(fleet) => Ok(fleet.status().await),
                None => Err(not_fleet()),
            }
        },
    )
}
