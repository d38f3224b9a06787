//! The shared approval queue: the database side of [`crate::approvals`].
//!
//! Every entry is a row (`ap-<member>-<n>`, so ids are unique across the fleet). A decision
//! on any member is one conditional UPDATE (`WHERE state = 'pending'`) and a NOTIFY in the
//! same transaction: exactly one decision wins, and the member holding the call learns of
//! it from its LISTEN connection (no polling), then re-reads the row.

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio_postgres::AsyncMessage;

use super::members::CHANNEL;
use super::pins::CHANNEL as PINS;
use super::tokens::CHANNEL as TOKENS;
use super::{outbox::Op, pg_error, Fleet, DB_TIMEOUT};
use crate::approvals::{Approvals, Claim, Deciders, Shared};
use crate::protocol::{ApprovalOutcome, ApprovalVerdictRecord, DecidedApproval, PendingApproval};

/// The queue's view of the fleet.
pub(super) struct SharedQueue(pub(super) Fleet);

impl Shared for SharedQueue {
    fn member(&self) -> &str {
        &self.0 .0.member
    }

    fn publish(&self, entry: &PendingApproval) {
        self.0.queue(Op::Publish(Box::new(entry.clone())));
    }

    fn ended(&self, decided: &DecidedApproval) {
        self.0.queue(Op::Ended(Box::new(decided.clone())));
    }

    fn claim(
        &self,
        id: &str,
        verdict: &ApprovalVerdictRecord,
    ) -> BoxFuture<'static, Result<Claim, String>> {
        let (fleet, id, verdict) = (self.0.clone(), id.to_owned(), verdict.clone());
        Box::pin(async move { fleet.bounded(claim(&fleet, &id, &verdict)).await })
    }

    fn list(&self) -> BoxFuture<'static, Result<Vec<PendingApproval>, String>> {
        let fleet = self.0.clone();
        Box::pin(async move { fleet.bounded(list(&fleet)).await })
    }

    fn deciders(&self) -> Option<&Deciders> {
        self.0 .0.deciders.as_ref()
    }
}

fn decided_from(
    id: String,
    call_id: String,
    tool: String,
    session_id: Option<String>,
    verdict: &str,
) -> Result<DecidedApproval, String> {
    let verdict: ApprovalVerdictRecord = serde_json::from_str(verdict)
        .map_err(|e| format!("approval {id}: unreadable verdict in the database: {e}"))?;
    Ok(DecidedApproval {
        id,
        call_id,
        tool,
        session_id,
        verdict,
    })
}

/// The conditional UPDATE: `Won` when this claim decided the entry.
async fn claim(fleet: &Fleet, id: &str, verdict: &ApprovalVerdictRecord) -> Result<Claim, String> {
    let text = serde_json::to_string(verdict).map_err(|e| e.to_string())?;
    let allow_session = verdict.outcome == ApprovalOutcome::AllowSession;
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    let won = tx
        .query_opt(
            "UPDATE toolhost_approvals
                SET state = 'decided', verdict = $2::text::jsonb, decided_on = $3, decided_at = now()
              WHERE id = $1 AND state = 'pending' AND (NOT $4 OR session_id IS NOT NULL)
              RETURNING call_id, tool, session_id",
            &[&id, &text, &fleet.0.member, &allow_session],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    if let Some(row) = won {
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &id])
            .await
            .map_err(|e| pg_error(&e))?;
        tx.commit().await.map_err(|e| pg_error(&e))?;
        return Ok(Claim::Won(DecidedApproval {
            id: id.to_owned(),
            call_id: row.get(0),
            tool: row.get(1),
            session_id: row.get(2),
            verdict: verdict.clone(),
        }));
    }
    let row = tx
        .query_opt(
            "SELECT state, call_id, tool, session_id, verdict::text FROM toolhost_approvals WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let Some(row) = row else {
        return Ok(Claim::Unknown);
    };
    if row.get::<_, &str>(0) == "pending" {
        return Ok(Claim::Sessionless);
    }
    let verdict: Option<String> = row.get(4);
    decided_from(
        id.to_owned(),
        row.get(1),
        row.get(2),
        row.get(3),
        verdict.as_deref().unwrap_or("null"),
    )
    .map(Claim::Lost)
}

/// Every entry waiting fleet-wide, oldest first. Another member's entry carries that
/// member's clock, which may be minutes off: its times are moved onto this member's clock
/// by the row's age on the database's, so no call shows as waiting for minutes (or as not
/// begun yet) because of a skewed clock.
async fn list(fleet: &Fleet) -> Result<Vec<PendingApproval>, String> {
    let client = fleet.client().await?;
    let rows = client
        .query(
            "SELECT entry::text, member,
                    greatest((extract(epoch FROM now() - created) * 1000)::bigint, 0)
               FROM toolhost_approvals WHERE state = 'pending' ORDER BY created, id",
            &[],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let now = crate::now_ms();
    Ok(rows
        .iter()
        .filter_map(|r| {
            let mut e: PendingApproval = serde_json::from_str(r.get(0)).ok()?;
            if r.get::<_, &str>(1) != fleet.0.member {
                let age = u64::try_from(r.get::<_, i64>(2)).unwrap_or(0);
                let wait = e.deadline_ms.saturating_sub(e.since_ms);
                e.since_ms = now.saturating_sub(age);
                e.deadline_ms = e.since_ms.saturating_add(wait);
            }
            Some(e)
        })
        .collect())
}

/// The decided rows among `ids`.
async fn decided(fleet: &Fleet, ids: &[String]) -> Result<Vec<DecidedApproval>, String> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let client = fleet.client().await?;
    let rows = client
        .query(
            "SELECT id, call_id, tool, session_id, verdict::text FROM toolhost_approvals
              WHERE id = ANY($1) AND state = 'decided'",
            &[&ids],
        )
        .await
        .map_err(|e| pg_error(&e))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let verdict: Option<String> = r.get(4);
            decided_from(r.get(0), r.get(1), r.get(2), r.get(3), verdict.as_deref()?).ok()
        })
        .collect())
}

/// Applies the decisions made elsewhere on this member's waiting calls.
async fn catch_up(fleet: &Fleet, approvals: &Approvals, ids: Vec<String>) -> Result<(), String> {
    for d in decided(fleet, &ids).await? {
        approvals.apply(&d);
    }
    Ok(())
}

/// Keeps one connection LISTENing on the queue's, the pins' and the tokens' channels. On
/// each notification for one of this member's waiting calls, reads the decision and applies
/// it; on each change of the pins by another member, has the catalog read them again; on
/// each change of the tokens, reads them again. After every (re)connect it catches up on all, so nothing changed while it was away is
/// missed. Ends at shutdown.
pub(super) async fn listen_loop(fleet: Fleet, cx: super::Context) {
    let (shutdown, approvals) = (cx.shutdown.clone(), cx.approvals.clone());
    let pins_changed = || {
        let refresh = cx.pins_changed.clone();
        // The catalog reads the database synchronously: off the event loop.
        drop(tokio::task::spawn_blocking(move || refresh()));
    };
    loop {
        let connected = tokio::select! {
            c = tokio::time::timeout(DB_TIMEOUT, fleet.0.pg.connect(tokio_postgres::NoTls)) => c,
            _ = shutdown.cancelled() => return,
        };
        let (client, mut conn) = match connected {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                fleet.failed(format!("the LISTEN connection: {}", pg_error(&e)));
                retry_pause(&shutdown).await;
                continue;
            }
            Err(_) => {
                fleet.failed("the LISTEN connection timed out".into());
                retry_pause(&shutdown).await;
                continue;
            }
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String)>();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(m)) = messages.next().await {
                if let AsyncMessage::Notification(n) = m {
                    let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
                }
            }
        });
        let listen = format!("LISTEN {CHANNEL}; LISTEN {PINS}; LISTEN {TOKENS}");
        if let Err(e) = client.batch_execute(&listen).await {
            fleet.failed(format!("LISTEN: {}", pg_error(&e)));
            driver.abort();
            retry_pause(&shutdown).await;
            continue;
        }
        if let Err(e) = catch_up(&fleet, &approvals, approvals.local_ids()).await {
            fleet.failed(e);
        }
        pins_changed();
        fleet.reload_users().await;
        loop {
            tokio::select! {
                note = rx.recv() => match note {
                    Some((channel, _)) if channel == TOKENS => fleet.reload_users().await,
                    Some((channel, from)) if channel == PINS => {
                        if from != fleet.0.member {
                            pins_changed();
                        }
                    }
                    Some((_, id)) if approvals.is_local(&id) => {
                        if let Err(e) = catch_up(&fleet, &approvals, vec![id]).await {
                            fleet.failed(e);
                        }
                    }
                    Some(_) => {}
                    None => break,
                },
                _ = shutdown.cancelled() => {
                    driver.abort();
                    return;
                }
            }
        }
        fleet.failed("the LISTEN connection was lost".into());
        retry_pause(&shutdown).await;
    }
}

async fn retry_pause(shutdown: &tokio_util::sync::CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
        _ = shutdown.cancelled() => {}
    }
}
