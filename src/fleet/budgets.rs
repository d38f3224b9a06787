//! The guards' daily budgets for the fleet (schema 3, `toolhost_budgets`): each counter is
//! a row `(key, day, used)` that one statement charges — the new day's count, or the
//! day's count plus the cost, only while it stays within the limit — so concurrent calls
//! on any members never pass the budget together. The session store reads and resets the
//! same rows ([`super::store`]), as the guards' counters.

use super::{pg_error, Fleet};
use crate::guards::DailyCharge;

/// See [`Fleet::charge`].
pub(super) async fn charge(
    fleet: &Fleet,
    charges: &[DailyCharge],
) -> Result<Result<Vec<u64>, (usize, u64)>, String> {
    let mut client = fleet.client().await?;
    let tx = client.transaction().await.map_err(|e| pg_error(&e))?;
    let mut used = Vec::with_capacity(charges.len());
    for (n, c) in charges.iter().enumerate() {
        let (cost, limit) = (to_i64(c.cost), to_i64(c.limit));
        let charged = tx
            .query_opt(
                "INSERT INTO toolhost_budgets AS b (key, day, used) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE
                    SET day = greatest(b.day, excluded.day),
                        used = CASE WHEN excluded.day > b.day THEN excluded.used
                                    ELSE b.used + excluded.used END
                  WHERE CASE WHEN excluded.day > b.day THEN excluded.used
                             ELSE b.used + excluded.used END <= $4
                 RETURNING used",
                &[&c.key, &c.day, &cost, &limit],
            )
            .await
            .map_err(|e| pg_error(&e))?;
        match charged {
            Some(row) => used.push(to_u64(row.get(0))),
            None => {
                let now: i64 = tx
                    .query_one(
                        "SELECT used FROM toolhost_budgets WHERE key = $1",
                        &[&c.key],
                    )
                    .await
                    .map_err(|e| pg_error(&e))?
                    .get(0);
                // Dropping the transaction rolls back the charges made before this one.
                return Ok(Err((n, to_u64(now))));
            }
        }
    }
    tx.commit().await.map_err(|e| pg_error(&e))?;
    Ok(Ok(used))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
