//! The member's writes that can wait, in order: approval entries as they begin to wait,
//! endings taken on this member, audit records. One task writes them in batches (one
//! transaction, statements pipelined); while the database is away they stay queued
//! (at most `fleet.max_queued`) and are written when it returns, so nothing acknowledged
//! to this member's callers is lost while the daemon runs within that bound.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::try_join_all;
use tokio::sync::{mpsc, oneshot};

use super::{pg_error, Fleet};
use crate::protocol::{AuditRecord, DecidedApproval, PendingApproval};

/// Writes in one transaction at most.
const BATCH: usize = 500;
/// The pause before writing again after a failure.
const RETRY: Duration = Duration::from_millis(500);

pub(super) enum Op {
    Publish(Box<PendingApproval>),
    Ended(Box<DecidedApproval>),
    Audit(u64, Box<AuditRecord>),
    /// Write everything queued, then answer and end (shutdown).
    Stop(oneshot::Sender<()>),
}

impl Fleet {
    /// Queues a write; dropped (and counted) when `fleet.max_queued` wait already.
    pub(super) fn queue(&self, op: Op) {
        let inner = &self.0;
        if inner.queued.load(Ordering::Relaxed) >= inner.cfg.max_queued {
            self.drop_write();
            return;
        }
        inner.queued.fetch_add(1, Ordering::Relaxed);
        if inner.outbox.send(op).is_err() {
            inner.queued.fetch_sub(1, Ordering::Relaxed);
            self.drop_write();
        }
    }

    /// Counts a dropped write; the first of a run of drops is logged (one line, not one
    /// per drop: a full outbox drops every call's record until the database returns).
    fn drop_write(&self) {
        let inner = &self.0;
        inner.dropped.fetch_add(1, Ordering::Relaxed);
        if !inner.dropping.swap(true, Ordering::Relaxed) {
            tracing::error!(
                max_queued = inner.cfg.max_queued,
                "fleet store outbox full: dropping writes (audit records, approval entries) \
                 until the database takes the backlog; `host.health` counts them"
            );
        }
    }
}

/// The audit log's view of the fleet: every record also goes to `toolhost_audit`.
pub(super) struct SharedAudit(pub(super) Fleet);

impl crate::audit::Shared for SharedAudit {
    fn record(&self, r: &AuditRecord) {
        let seq = self.0 .0.audit_seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.0.queue(Op::Audit(seq, Box::new(r.clone())));
    }
}

/// The outbox's writer: runs until [`Op::Stop`] (or every sender is gone).
pub(super) async fn write_loop(fleet: Fleet, mut rx: mpsc::UnboundedReceiver<Op>) {
    let mut queue: VecDeque<Op> = VecDeque::new();
    let mut stop: Option<oneshot::Sender<()>> = None;
    loop {
        if queue.is_empty() {
            if let Some(ack) = stop.take() {
                let _ = ack.send(());
                return;
            }
            match rx.recv().await {
                Some(Op::Stop(ack)) => {
                    stop = Some(ack);
                    continue;
                }
                Some(op) => queue.push_back(op),
                None => return,
            }
        }
        while let Ok(op) = rx.try_recv() {
            match op {
                Op::Stop(ack) => stop = Some(ack),
                op => queue.push_back(op),
            }
        }
        let n = queue.len().min(BATCH);
        match write(&fleet, queue.range(..n)).await {
            Ok(()) => {
                queue.drain(..n);
                fleet.0.queued.fetch_sub(n, Ordering::Relaxed);
                fleet.reached();
                if fleet.0.dropping.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        dropped = fleet.0.dropped.load(Ordering::Relaxed),
                        "fleet store outbox has room again"
                    );
                }
            }
            Err(e) => {
                fleet.failed(e);
                if stop.is_some() {
                    // Stopping with the database away: what is left is lost with the
                    // daemon (counted in the log).
                    tracing::warn!(
                        writes = queue.len(),
                        "fleet store unreachable at shutdown: queued writes not written"
                    );
                    if let Some(ack) = stop.take() {
                        let _ = ack.send(());
                    }
                    return;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Writes `ops` in one transaction (pipelined). Each is idempotent: a batch written again
/// after a lost acknowledgement changes nothing.
async fn write<'a>(fleet: &Fleet, ops: impl Iterator<Item = &'a Op>) -> Result<(), String> {
    let member = &fleet.0.member;
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    let publish = tx
        .prepare(
            "INSERT INTO toolhost_approvals (id, member, call_id, tool, session_id, entry, state)
             VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, 'pending') ON CONFLICT (id) DO NOTHING",
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let ended = tx
        .prepare(
            "UPDATE toolhost_approvals
                SET state = 'decided', verdict = $2::text::jsonb, decided_on = $3, decided_at = now()
              WHERE id = $1 AND state = 'pending'",
        )
        .await
        .map_err(|e| pg_error(&e))?;
    let audit = tx
        .prepare(
            "INSERT INTO toolhost_audit (member, seq, time_ms, call_id, tool, ok, record)
             VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb) ON CONFLICT DO NOTHING",
        )
        .await
        .map_err(|e| pg_error(&e))?;
    // Rendered first: the statements borrow their parameters.
    let rendered: Vec<(&Op, String, i64, i64)> = ops
        .map(|op| {
            let (json, a, b) = match op {
                Op::Publish(e) => (serde_json::to_string(e), 0, 0),
                Op::Ended(d) => (serde_json::to_string(&d.verdict), 0, 0),
                Op::Audit(seq, r) => (
                    serde_json::to_string(r),
                    i64::try_from(*seq).unwrap_or(i64::MAX),
                    i64::try_from(r.time_ms).unwrap_or(i64::MAX),
                ),
                Op::Stop(_) => (Ok(String::new()), 0, 0),
            };
            (op, json.unwrap_or_default(), a, b)
        })
        .collect();
    type Param<'p> = &'p (dyn tokio_postgres::types::ToSql + Sync);
    let mut statements: Vec<(&tokio_postgres::Statement, Vec<Param<'_>>)> = Vec::new();
    for (op, json, a, b) in &rendered {
        match op {
            Op::Publish(e) => statements.push((
                &publish,
                vec![&e.id, member, &e.call_id, &e.tool, &e.session_id, json],
            )),
            Op::Ended(d) => statements.push((&ended, vec![&d.id, json, member])),
            Op::Audit(_, r) => {
                statements.push((&audit, vec![member, a, b, &r.call_id, &r.tool, &r.ok, json]))
            }
            Op::Stop(_) => {}
        }
    }
    let writes = statements
        .iter()
        .map(|(statement, params)| tx.execute(*statement, params));
    try_join_all(writes).await.map_err(|e| pg_error(&e))?;
    tx.commit().await.map_err(|e| pg_error(&e))
}
