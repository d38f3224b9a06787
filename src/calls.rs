//! The calls in flight, by `call_id`: how `cancel` reaches a call from any connection, how
//! shutdown knows when the host is idle, and what a call may do, for the processes it
//! started when they call the daemon back (`rpc/peer.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::inputs::CallInputs;
use crate::lock;
use crate::protocol::{ApprovalMode, Network, SandboxPolicy};

/// What a call may do: its workspace, its session's sandbox (the session's, also when the
/// call itself was approved to leave it) and its approval mode. A process the call started
/// gets no more when it calls the daemon back.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRights {
    pub workspace: PathBuf,
    pub sandbox: SandboxPolicy,
    pub network: Network,
    pub approval: ApprovalMode,
}

/// One call in flight: how to cancel it, how `invoke.respond` reaches its questions, what
/// `host.status` shows of it, and its rights.
struct Entry {
    token: CancellationToken,
    inputs: Arc<CallInputs>,
    tool: String,
    session: Option<String>,
    started: Instant,
    rights: CallRights,
}

/// Calls in flight by `call_id`.
#[derive(Default)]
pub struct CallTable {
    calls: Mutex<HashMap<String, Entry>>,
    /// Woken whenever the table becomes empty (shutdown waits on it instead of polling).
    idle: Notify,
    /// Calls started plus calls ended: the operator's page compares it after a change
    /// notice (`crate::notice`) instead of hearing of each call.
    changes: AtomicU64,
}

impl CallTable {
    /// Registers a call; the returned guard unregisters it when the call ends.
    /// `None` when a call with this id is already in flight.
    pub fn register(
        self: &Arc<Self>,
        call_id: &str,
        token: CancellationToken,
        inputs: Arc<CallInputs>,
        tool: &str,
        session: Option<&str>,
        rights: CallRights,
    ) -> Option<CallGuard> {
        let mut calls = lock(&self.calls);
        if calls.contains_key(call_id) {
            return None;
        }
        calls.insert(
            call_id.to_owned(),
            Entry {
                token,
                inputs,
                tool: tool.to_owned(),
                session: session.map(str::to_owned),
                started: Instant::now(),
                rights,
            },
        );
        self.changes.fetch_add(1, Ordering::Relaxed);
        crate::notice::changed();
        Some(CallGuard {
            table: self.clone(),
            call_id: call_id.to_owned(),
        })
    }

    /// Cancels the call `call_id`; false when no such call is running.
    pub fn cancel(&self, call_id: &str) -> bool {
        match lock(&self.calls).get(call_id) {
            Some(e) => {
                e.token.cancel();
                true
            }
            None => false,
        }
    }

    /// The rights of the call `call_id`, while it is in flight.
    pub fn rights(&self, call_id: &str) -> Option<CallRights> {
        lock(&self.calls).get(call_id).map(|e| e.rights.clone())
    }

    /// The questions of call `call_id`, if it is in flight.
    pub fn inputs(&self, call_id: &str) -> Option<Arc<CallInputs>> {
        lock(&self.calls).get(call_id).map(|e| e.inputs.clone())
    }

    /// Whether a call `call_id` is in flight.
    pub fn is_running(&self, call_id: &str) -> bool {
        lock(&self.calls).contains_key(call_id)
    }

    /// Calls started plus calls ended so far: a different number means a different table.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.calls).len()
    }

    /// The calls in flight, oldest first.
    pub fn list(&self) -> Vec<crate::protocol::CallInFlight> {
        let mut calls: Vec<crate::protocol::CallInFlight> = lock(&self.calls)
            .iter()
            .map(|(id, e)| crate::protocol::CallInFlight {
                call_id: id.clone(),
                tool: e.tool.clone(),
                session_id: e.session.clone(),
                age_ms: u64::try_from(e.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
            .collect();
        calls.sort_by_key(|c| std::cmp::Reverse(c.age_ms));
        calls
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
        self.table.changes.fetch_add(1, Ordering::Relaxed);
        crate::notice::changed();
        if calls.is_empty() {
            self.table.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rights() -> CallRights {
        CallRights {
            workspace: "/w".into(),
            sandbox: SandboxPolicy::ReadOnly,
            network: Network::Deny,
            approval: ApprovalMode::Strict,
        }
    }

    fn unanswered() -> Arc<CallInputs> {
        Arc::new(CallInputs::unanswered("a"))
    }

    #[tokio::test]
    async fn ids_are_unique_while_in_flight_and_idle_wakes_when_empty() {
        let table = Arc::new(CallTable::default());
        let a = table.register(
            "a",
            CancellationToken::new(),
            unanswered(),
            "bash",
            None,
            rights(),
        );
        assert!(a.is_some());
        assert_eq!(table.rights("a"), Some(rights()));
        assert!(table
            .register(
                "a",
                CancellationToken::new(),
                unanswered(),
                "bash",
                None,
                rights()
            )
            .is_none());
        let waiter = tokio::spawn({
            let t = table.clone();
            async move { t.idle().await }
        });
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(table.rights("a"), None);
        assert!(table
            .register(
                "a",
                CancellationToken::new(),
                unanswered(),
                "bash",
                None,
                rights()
            )
            .is_some());
    }
}
