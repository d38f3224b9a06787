//! The calls in flight, by `call_id`: how `cancel` reaches a call from any connection and
//! how shutdown knows when the host is idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::lock;

/// Calls in flight by `call_id`.
#[derive(Default)]
pub struct CallTable {
    calls: Mutex<HashMap<String, CancellationToken>>,
    /// Woken whenever the table becomes empty (shutdown waits on it instead of polling).
    idle: Notify,
}

impl CallTable {
    /// Registers a call; the returned guard unregisters it when the call ends.
    /// `None` when a call with this id is already in flight.
    pub fn register(
        self: &Arc<Self>,
        call_id: &str,
        token: CancellationToken,
    ) -> Option<CallGuard> {
        let mut calls = lock(&self.calls);
        if calls.contains_key(call_id) {
            return None;
        }
        calls.insert(call_id.to_owned(), token);
        Some(CallGuard {
            table: self.clone(),
            call_id: call_id.to_owned(),
        })
    }

    /// Cancels the call `call_id`; false when no such call is running.
    pub fn cancel(&self, call_id: &str) -> bool {
        match lock(&self.calls).get(call_id) {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.calls).len()
    }

    /// Resolves once no call is in flight.
    pub async fn idle(&self) {
        loop {
            // Register interest before looking, so an end between the two is not missed.
            let woken = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            woken.await;
        }
    }
}

/// Keeps a call registered while it runs.
pub struct CallGuard {
    table: Arc<CallTable>,
    call_id: String,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut calls = lock(&self.table.calls);
        calls.remove(&self.call_id);
        if calls.is_empty() {
            self.table.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_are_unique_while_in_flight_and_idle_wakes_when_empty() {
        let table = Arc::new(CallTable::default());
        let a = table.register("a", CancellationToken::new());
        assert!(a.is_some());
        assert!(table.register("a", CancellationToken::new()).is_none());
        let waiter = tokio::spawn({
            let t = table.clone();
            async move { t.idle().await }
        });
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(table.register("a", CancellationToken::new()).is_some());
    }
}
