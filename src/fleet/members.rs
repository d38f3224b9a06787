//! The fleet's members: each daemon's row, its heartbeat (the database's clock, so a
//! member with a skewed clock is judged right), and the sweep that withdraws the waiting
//! approvals of a member whose heartbeat stopped.

use std::time::Duration;

use super::{pg_error, Fleet, DB_TIMEOUT};
use crate::config;
use crate::protocol::{FleetMember, FleetMemberState, FleetServer};

/// The NOTIFY channel of the approval queue (payload: an entry id).
pub(super) const CHANNEL: &str = "toolhost_approval";

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Writes this member's row.
pub(super) async fn register(
    client: &tokio_postgres::Client,
    member: &str,
    cfg: &config::Fleet,
    listeners: &[String],
) -> anyhow::Result<()> {
    let listeners = serde_json::to_string(listeners)?;
    client
        .execute(
            "INSERT INTO toolhost_members (id, host, version, listeners, internal_url)
             VALUES ($1, $2, $3, $4::text::jsonb, $5)",
            &[
                &member,
                &host_name(),
                &env!("CARGO_PKG_VERSION"),
                &listeners,
                &cfg.internal_url,
            ],
        )
        .await
        .map_err(|e| anyhow::anyhow!("{}", pg_error(&e)))?;
    Ok(())
}

/// Every `heartbeat_ms`: the heartbeat (with the member's servers), then the sweep of lost
/// members. Ends at shutdown.
pub(super) async fn heartbeat_loop(fleet: Fleet, cx: super::Context) {
    let every = Duration::from_millis(fleet.0.cfg.heartbeat_ms);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = cx.shutdown.cancelled() => return,
        }
        let servers = (cx.servers)();
        match tokio::time::timeout(DB_TIMEOUT, beat(&fleet, &servers)).await {
            Ok(Ok(())) => fleet.reached(),
            Ok(Err(e)) => {
                fleet.failed(e);
                continue;
            }
            Err(_) => {
                fleet.failed("the heartbeat timed out".into());
                continue;
            }
        }
        if let Ok(Err(e)) = tokio::time::timeout(DB_TIMEOUT, sweep(&fleet)).await {
            fleet.failed(e);
        }
    }
}

/// One heartbeat; re-registers a row that is gone (removed by hand, or a database
/// restored from an older backup).
async fn beat(fleet: &Fleet, servers: &[FleetServer]) -> Result<(), String> {
    let client = fleet.client().await?;
    let servers = serde_json::to_string(servers).map_err(|e| e.to_string())?;
    let n = client
        .execute(
            "UPDATE toolhost_members SET heartbeat = now(), servers = $2::text::jsonb WHERE id = $1",
            &[&fleet.0.member, &servers],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    if n == 0 {
        register(&client, &fleet.0.member, &fleet.0.cfg, &fleet.0.listeners)
            .await
            .map_err(|e| format!("{e:#}"))?;
    }
    Ok(())
}

/// Withdraws the waiting approvals of every member that is lost (heartbeat older than
/// `lost_after_ms` by the database's clock) or gone, with the reason, and wakes their
/// members (should one come back) with a NOTIFY per entry.
async fn sweep(fleet: &Fleet) -> Result<(), String> {
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    let lost_after = fleet.0.cfg.lost_after_ms as f64 / 1000.0;
    let rows = tx
        .query(
            "UPDATE toolhost_approvals a
                SET state = 'decided', decided_at = now(), decided_on = $2,
                    verdict = jsonb_build_object(
                        'outcome', 'withdrawn', 'waited_ms', 0,
                        'reason', 'member ' || a.member || ' was lost: no heartbeat for over '
                                  || ($1 * 1000)::bigint || ' ms')
              WHERE a.state = 'pending'
                AND NOT EXISTS (SELECT 1 FROM toolhost_members m
                                 WHERE m.id = a.member
                                   AND m.heartbeat >= now() - make_interval(secs => $1))
              RETURNING a.id, a.member",
            &[&lost_after, &fleet.0.member],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    for row in &rows {
        let id: String = row.get(0);
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &id])
            .await
            .map_err(|e| pg_error(&e))?;
    }
    tx.commit().await.map_err(|e| pg_error(&e))?;
    for row in &rows {
        let (id, member): (String, String) = (row.get(0), row.get(1));
        tracing::warn!(%id, lost = %member, "withdrew a lost member's waiting approval");
    }
    Ok(())
}

/// Every member, oldest first, with its state by the database's clock.
pub(super) async fn list(fleet: &Fleet) -> Result<Vec<FleetMember>, String> {
    let client = fleet.client().await?;
    let lost_after = fleet.0.cfg.lost_after_ms as f64 / 1000.0;
    let rows = tokio::time::timeout(
        DB_TIMEOUT,
        client.query(
            "SELECT id, host, version, listeners::text, internal_url,
                    (extract(epoch FROM started) * 1000)::bigint,
                    (extract(epoch FROM heartbeat) * 1000)::bigint,
                    greatest((extract(epoch FROM now() - heartbeat) * 1000)::bigint, 0),
                    heartbeat < now() - make_interval(secs => $1),
                    servers::text
               FROM toolhost_members ORDER BY started, id",
            &[&lost_after],
        ),
    )
    .await
    .map_err(|_| "listing the members timed out".to_owned())?
    .map_err(|e| pg_error(&e))?;
    Ok(rows
        .iter()
        .map(|r| {
            let ms = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
            FleetMember {
                id: r.get(0),
                host: r.get(1),
                version: r.get(2),
                listeners: serde_json::from_str(r.get(3)).unwrap_or_default(),
                internal_url: r.get(4),
                started_ms: ms(5),
                heartbeat_ms: ms(6),
                heartbeat_age_ms: ms(7),
                state: if r.get::<_, bool>(8) {
                    FleetMemberState::Lost
                } else {
                    FleetMemberState::Live
                },
                servers: serde_json::from_str(r.get(9)).unwrap_or_default(),
            }
        })
        .collect())
}

/// Member `id`'s `internal_url` while it is live (by the database's clock).
pub(super) async fn reach(fleet: &Fleet, id: &str) -> Result<String, String> {
    let client = fleet.client().await?;
    let lost_after = fleet.0.cfg.lost_after_ms as f64 / 1000.0;
    let row = tokio::time::timeout(
        DB_TIMEOUT,
        client.query_opt(
            "SELECT internal_url, heartbeat < now() - make_interval(secs => $2)
               FROM toolhost_members WHERE id = $1",
            &[&id, &lost_after],
        ),
    )
    .await
    .map_err(|_| "looking the member up timed out".to_owned())?
    .map_err(|e| fleet.failed(pg_error(&e)))?;
    let Some(row) = row else {
        return Err(format!("member {id} is gone (it stopped or was removed)"));
    };
    if row.get::<_, bool>(1) {
        return Err(format!(
            "member {id} is lost (no heartbeat for over {} ms)",
            fleet.0.cfg.lost_after_ms
        ));
    }
    row.get::<_, Option<String>>(0)
        .ok_or_else(|| format!("member {id} has no internal_url to be reached at"))
}

/// Removes this member's row at a clean shutdown (its waiting calls were withdrawn first).
pub(super) async fn leave(fleet: &Fleet) -> Result<(), String> {
    let client = fleet.client().await?;
    tokio::time::timeout(
        DB_TIMEOUT,
        client.execute(
            "DELETE FROM toolhost_members WHERE id = $1",
            &[&fleet.0.member],
        ),
    )
    .await
    .map_err(|_| "timed out".to_owned())?
    .map_err(|e| pg_error(&e))?;
    Ok(())
}
