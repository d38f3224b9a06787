//! The fleet's schema: versioned migrations embedded in the binary, applied in order under
//! an advisory lock (two daemons starting together migrate once), and the fleet's key.

use anyhow::Context;
use deadpool_postgres::Client;

use super::pg_error;

/// Each migration: its version and its SQL (`migrations/NNNN_*.sql`), oldest first.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_fleet.sql")),
    (2, include_str!("migrations/0002_sessions.sql")),
    (3, include_str!("migrations/0003_trust.sql")),
    (4, include_str!("migrations/0004_roles.sql")),
];

/// The newest schema this binary knows.
pub const LATEST: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Held while migrating: one daemon at a time changes the schema.
const LOCK: i64 = 0x746f_6f6c_686f_7374; // "toolhost"

/// Brings the schema to [`LATEST`] and checks the fleet's key (its SHA-256 is stored by
/// the first member); refuses a newer schema and another fleet's database. Returns the
/// schema version.
pub async fn migrate(client: &mut Client, key_sha256: &str) -> anyhow::Result<i32> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| anyhow::anyhow!("{}", pg_error(&e)))?;
    let step = |what: &'static str| {
        move |e: tokio_postgres::Error| anyhow::anyhow!("{what}: {}", pg_error(&e))
    };
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await
        .map_err(step("taking the migration lock"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolhost_schema (
            version integer PRIMARY KEY,
            applied timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(step("creating the schema table"))?;
    let current: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM toolhost_schema", &[])
        .await
        .map_err(step("reading the schema version"))?
        .get(0);
    if current > LATEST {
        anyhow::bail!(
            "the database's toolhost schema is version {current}, newer than this toolhost \
             ({}) supports (up to {LATEST}): upgrade this daemon, or name another database",
            env!("CARGO_PKG_VERSION")
        );
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| anyhow::anyhow!("migration {version}: {}", pg_error(&e)))?;
        tx.execute(
            "INSERT INTO toolhost_schema (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(step("recording a migration"))?;
        tracing::info!(version, "fleet store: schema migrated");
    }
    tx.execute(
        "INSERT INTO toolhost_fleet (key_sha256) VALUES ($1) ON CONFLICT (id) DO NOTHING",
        &[&key_sha256],
    )
    .await
    .map_err(step("recording the fleet's key"))?;
    let stored: String = tx
        .query_one("SELECT key_sha256 FROM toolhost_fleet", &[])
        .await
        .map_err(step("reading the fleet's key"))?
        .get(0);
    if stored != key_sha256 {
        anyhow::bail!(
            "this database belongs to another fleet (its fleet key differs from this daemon's \
             fleet.key): two fleets cannot share one database; check fleet.key or store.url"
        );
    }
    tx.commit().await.context("committing the migration")?;
    Ok(LATEST.max(current))
}

/// The key that seals MRTR `requestState`s (src/facade/mrtr.rs), one for the whole fleet so
/// a retry that lands on another member opens there: drawn by the first member, kept in
/// `toolhost_records` (kind `fleet`), read by every later one.
pub async fn request_state_key(client: &Client) -> anyhow::Result<Vec<u8>> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("drawing the requestState key: {e}"))?;
    client
        .execute(
            "INSERT INTO toolhost_records (kind, key, value) VALUES ('fleet', 'request_state_key', $1)
             ON CONFLICT (kind, key) DO NOTHING",
            &[&key.as_slice()],
        )
        .await
        .map_err(|e| anyhow::anyhow!("storing the requestState key: {}", pg_error(&e)))?;
    let row = client
        .query_one(
            "SELECT value FROM toolhost_records WHERE kind = 'fleet' AND key = 'request_state_key'",
            &[],
        )
        .await
        .map_err(|e| anyhow::anyhow!("reading the requestState key: {}", pg_error(&e)))?;
    Ok(row.get(0))
}
