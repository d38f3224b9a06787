//! The calls each session made, as the host saw them end: what a tool module reads as
//! `ctx.sessionManager` (proto-docs/modules.md). The host keeps no conversation, only its
//! own calls: tool, outcome, times and the size of the arguments — what the audit log keeps
//! of a call, never the arguments or the result.
//!
//! In memory and bounded (the last [`PER_SESSION`] calls of each of the [`SESSIONS`]
//! sessions used last): a record per call in the session store would cost a durable write
//! per call. So a restarted daemon's sessions start with an empty history.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::lock;
use crate::protocol::ErrorKind;

/// The most calls kept per session.
pub const PER_SESSION: usize = 200;
/// The most sessions kept; the one used least recently goes first.
const SESSIONS: usize = 1024;

/// One call that ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub call_id: String,
    pub tool: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    pub duration_ms: u64,
    /// Size of the arguments as JSON.
    pub args_bytes: u64,
}

/// The sessions' recent calls (cheap to clone: one shared table).
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Table>>);

#[derive(Debug, Default)]
struct Table {
    sessions: HashMap<String, Log>,
    /// Counts records, to know which session was used least recently.
    clock: u64,
}

#[derive(Debug, Default)]
struct Log {
    calls: VecDeque<CallRecord>,
    touched: u64,
}

impl History {
    /// A call of `session` ended.
    pub fn record(&self, session: &str, call: CallRecord) {
        let mut t = lock(&self.0);
        t.clock += 1;
        let clock = t.clock;
        if !t.sessions.contains_key(session) && t.sessions.len() >= SESSIONS {
            let oldest = t
                .sessions
                .iter()
                .min_by_key(|(_, log)| log.touched)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                t.sessions.remove(&id);
            }
        }
        let log = t.sessions.entry(session.to_owned()).or_default();
        log.touched = clock;
        if log.calls.len() == PER_SESSION {
            log.calls.pop_front();
        }
        log.calls.push_back(call);
    }

    /// The calls of `session` kept, oldest first.
    pub fn recent(&self, session: &str) -> Vec<CallRecord> {
        lock(&self.0)
            .sessions
            .get(session)
            .map(|log| log.calls.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The session was deleted.
    pub fn forget(&self, session: &str) {
        lock(&self.0).sessions.remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(n: usize) -> CallRecord {
        CallRecord {
            call_id: format!("c{n}"),
            tool: "bash".into(),
            ok: true,
            error_kind: None,
            started_ms: n as u64,
            duration_ms: 1,
            args_bytes: 2,
        }
    }

    #[test]
    fn each_session_keeps_its_last_calls_and_the_least_used_session_goes_first() {
        let h = History::default();
        for n in 0..PER_SESSION + 5 {
            h.record("a", call(n));
        }
        let kept = h.recent("a");
        assert_eq!(kept.len(), PER_SESSION);
        assert_eq!(kept[0].call_id, "c5");
        assert_eq!(
            kept.last().unwrap().call_id,
            format!("c{}", PER_SESSION + 4)
        );
        for s in 0..SESSIONS {
            h.record(&format!("s{s}"), call(s));
        }
        // "a" was used least recently: it made room for the last one.
        assert!(h.recent("a").is_empty());
        assert_eq!(h.recent("s0").len(), 1);
        h.forget("s0");
        assert!(h.recent("s0").is_empty());
    }
}
