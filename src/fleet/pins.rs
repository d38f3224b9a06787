//! The catalog's pins for the fleet (schema 3): approved on one member, trusted on all; a
//! definition one member sees differ from its pin is marked, and every member holds the
//! tool back until a definition is approved. Each change is written with a NOTIFY on
//! [`CHANNEL`] in the same transaction; every member's LISTEN connection
//! ([`super::queue::listen_loop`]) then reads the table again (no polling).

use std::collections::BTreeMap;

use super::store::PgStore;
use crate::catalog::pins::{Pin, Shared, Table};

/// The NOTIFY channel of the pins (payload: the member that changed them).
pub(super) const CHANNEL: &str = "toolhost_pins";

fn rows(rows: &[tokio_postgres::Row]) -> Result<BTreeMap<String, Pin>, String> {
    rows.iter()
        .map(|r| {
            let name: String = r.get(0);
            let pin = serde_json::from_str(r.get(1))
                .map_err(|e| format!("the pin of {name} is unreadable: {e}"))?;
            Ok((name, pin))
        })
        .collect()
}

/// `(name, pin as JSON)` of each of `pins`.
fn encoded(pins: &[(String, Pin)]) -> Result<Vec<(String, String)>, String> {
    pins.iter()
        .map(|(n, p)| {
            Ok((
                n.clone(),
                serde_json::to_string(p).map_err(|e| e.to_string())?,
            ))
        })
        .collect()
}

impl Shared for PgStore {
    fn load(&self) -> Result<Table, String> {
        let (pins, marks) = self
            .run(|c| async move {
                let pins = c
                    .query("SELECT name, pin::text FROM toolhost_pins", &[])
                    .await?;
                let marks = c
                    .query("SELECT name, seen::text FROM toolhost_pin_marks", &[])
                    .await?;
                Ok((pins, marks))
            })
            .map_err(|e| e.to_string())?;
        Ok(Table {
            pins: rows(&pins)?,
            marks: rows(&marks)?,
        })
    }

    fn pin(&self, new: &[(String, Pin)]) -> Result<(), String> {
        write(
            self,
            "INSERT INTO toolhost_pins (name, pin, member) VALUES ($1, $2::text::jsonb, $3)
             ON CONFLICT (name) DO UPDATE
                SET pin = excluded.pin, member = excluded.member, pinned = now()",
            true,
            new,
        )
    }

    fn mark(&self, seen: &[(String, Pin)]) -> Result<(), String> {
        write(
            self,
            "INSERT INTO toolhost_pin_marks (name, seen, member) VALUES ($1, $2::text::jsonb, $3)
             ON CONFLICT (name) DO UPDATE
                SET seen = excluded.seen, member = excluded.member, marked = now()",
            false,
            seen,
        )
    }
}

/// Writes each of `pins` with `upsert` (`$1` name, `$2` pin, `$3` this member), ending
/// their marks when `unmark`, and tells the other members, in one transaction.
fn write(
    store: &PgStore,
    upsert: &'static str,
    unmark: bool,
    pins: &[(String, Pin)],
) -> Result<(), String> {
    let pins = encoded(pins)?;
    let member = store.member().to_owned();
    store
        .run(move |mut c| async move {
            let tx = c.transaction().await?;
            for (name, pin) in &pins {
                tx.execute(upsert, &[name, pin, &member]).await?;
                if unmark {
                    tx.execute("DELETE FROM toolhost_pin_marks WHERE name = $1", &[name])
                        .await?;
                }
            }
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &member])
                .await?;
            tx.commit().await
        })
        .map_err(|e| e.to_string())
}
