//! Users' bearer tokens (schema 3, `toolhost_tokens`): made on any member, valid on every
//! member's TCP listener, revoked for all at once. Only a token's SHA-256 is stored. Each
//! member keeps the live tokens' hashes in memory (a request never waits on the database)
//! and reads them again on every `NOTIFY toolhost_tokens` (sent with each change, in its
//! transaction) and after its LISTEN connection comes back; the member that made the
//! change reads them at once.

use std::collections::HashMap;
use std::sync::Arc;

use super::{pg_error, sha256_hex, Fleet};
use crate::protocol::{FleetToken, FleetTokenCreated, FleetTokenRevokeResult};

/// The NOTIFY channel of the tokens (no payload).
pub(super) const CHANNEL: &str = "toolhost_tokens";

/// The live tokens: SHA-256 → whose it is.
pub(super) type Users = HashMap<String, Arc<User>>;

/// Whom a live token stands for: the user, and the roles the token carries (schema 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub roles: Vec<String>,
}

/// A user's or a role's name: 1 to 64 of letters, digits, `.`, `_`, `-`, `@`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// Reads the live tokens into the member's copy.
pub(super) async fn reload(fleet: &Fleet) -> Result<(), String> {
    let client = fleet.client().await?;
    let rows = client
        .query(
            "SELECT sha256, user_name, roles FROM toolhost_tokens WHERE revoked IS NULL",
            &[],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let users: Users = rows
        .iter()
        .map(|r| {
            let user = User {
                name: r.get(1),
                roles: r.get(2),
            };
            (r.get(0), Arc::new(user))
        })
        .collect();
    fleet.0.users.store(Arc::new(users));
    Ok(())
}

/// Tells every member (at the commit of `tx`) that the tokens changed.
async fn notify(tx: &tokio_postgres::Transaction<'_>) -> Result<(), String> {
    tx.execute("SELECT pg_notify($1, '')", &[&CHANNEL])
        .await
        .map_err(|e| pg_error(&e))?;
    Ok(())
}

pub(super) async fn create(
    fleet: &Fleet,
    user: &str,
    roles: &[String],
) -> Result<FleetTokenCreated, String> {
    let invalid = |what: &str, name: &str| {
        format!("invalid {what} {name:?}: 1 to 64 of letters, digits, '.', '_', '-', '@'")
    };
    if !valid_name(user) {
        return Err(invalid("user", user));
    }
    if let Some(bad) = roles.iter().find(|r| !valid_name(r)) {
        return Err(invalid("role", bad));
    }
    let mut roles = roles.to_vec();
    roles.sort();
    roles.dedup();
    let id = format!("tok-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let token = format!(
        "thu_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    tx.execute(
        "INSERT INTO toolhost_tokens (id, user_name, sha256, created_on, roles)
         VALUES ($1, $2, $3, $4, $5)",
        &[&id, &user, &sha256_hex(&token), &fleet.0.member, &roles],
    )
    .await
    .map_err(|e| pg_error(&e))?;
    notify(&tx).await?;
    tx.commit().await.map_err(|e| pg_error(&e))?;
    reload(fleet).await?;
    Ok(FleetTokenCreated {
        id,
        user: user.to_owned(),
        roles,
        token,
    })
}

pub(super) async fn revoke(fleet: &Fleet, id: &str) -> Result<FleetTokenRevokeResult, String> {
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    let exists = tx
        .query_opt(
            "SELECT revoked IS NULL FROM toolhost_tokens WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let Some(live) = exists else {
        return Err(format!(
            "no token with id {id:?} (see `toolhost fleet token list`)"
        ));
    };
    if live.get::<_, bool>(0) {
        tx.execute(
            "UPDATE toolhost_tokens SET revoked = now() WHERE id = $1 AND revoked IS NULL",
            &[&id],
        )
        .await
        .map_err(|e| pg_error(&e))?;
        notify(&tx).await?;
    }
    tx.commit().await.map_err(|e| pg_error(&e))?;
    reload(fleet).await?;
    Ok(FleetTokenRevokeResult {
        id: id.to_owned(),
        revoked: live.get(0),
    })
}

pub(super) async fn list(fleet: &Fleet) -> Result<Vec<FleetToken>, String> {
    let client = fleet.client().await?;
    let rows = client
        .query(
            "SELECT id, user_name, (extract(epoch FROM created) * 1000)::bigint, created_on,
                    (extract(epoch FROM revoked) * 1000)::bigint, roles
               FROM toolhost_tokens ORDER BY created, id",
            &[],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let ms = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(rows
        .iter()
        .map(|r| FleetToken {
            id: r.get(0),
            user: r.get(1),
            created_ms: ms(r.get(2)),
            created_on: r.get(3),
            revoked_ms: r.get::<_, Option<i64>>(4).map(ms),
            roles: r.get(5),
        })
        .collect())
}
