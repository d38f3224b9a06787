//! What `mcp.status` shows of a server: its state on the wire, its last error and its
//! counters, read from one moment of its state.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{serves, Parked, Server, ServerState, State, Trouble};
use crate::lock;
use crate::protocol::{McpServerStatus, McpTransport};

impl ServerState {
    pub(super) fn wire(&self) -> State {
        match self {
            ServerState::Disabled | ServerState::Stopped => State::Disabled,
            ServerState::Parked(Parked::NotStarted) => State::NotStarted,
            ServerState::Parked(Parked::Idle) => State::StoppedIdle,
            ServerState::Starting | ServerState::Waking | ServerState::Reconnecting { .. } => {
                State::Connecting
            }
            ServerState::Ready {
                trouble: Some(Trouble::SignIn(_)),
                ..
            }
            | ServerState::AuthRequired { .. } => State::AuthRequired,
            ServerState::Ready { .. } => State::Ready,
            ServerState::Backoff { .. } => State::Failed,
            ServerState::CircuitOpen { .. } => State::CircuitOpen,
        }
    }

    pub(super) fn last_error(&self) -> Option<&str> {
        match self {
            ServerState::Reconnecting { last_error, .. } => last_error.as_deref(),
            ServerState::Ready {
                trouble: Some(Trouble::SignIn(e) | Trouble::Listing(e)),
                ..
            }
            | ServerState::Backoff { error: e, .. }
            | ServerState::CircuitOpen { error: e, .. }
            | ServerState::AuthRequired { hint: e } => Some(e),
            _ => None,
        }
    }

    pub(super) fn failures(&self) -> u32 {
        match self {
            ServerState::Reconnecting { failures, .. }
            | ServerState::Backoff { failures, .. }
            | ServerState::CircuitOpen { failures, .. } => *failures,
            _ => 0,
        }
    }
}

impl Server {
    pub fn status(self: &Arc<Self>, collisions: Vec<String>) -> McpServerStatus {
        let cfg = self.config();
        let tools = lock(&self.remote_tools)
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| serves(&cfg, n)))
            .count();
        let pid = self.pid();
        let instances = self.instances();
        let state = self.state.borrow();
        McpServerStatus {
            name: self.name.clone(),
            transport: match cfg.transport() {
                "stdio" => McpTransport::Stdio,
                "sse" => McpTransport::Sse,
                _ => McpTransport::Http,
            },
            state: state.wire(),
            tools,
            last_error: state.last_error().map(str::to_owned),
            connected_since: match &*state {
                ServerState::Ready { since, .. } => Some(*since),
                _ => None,
            },
            protocol_version: match &*state {
                ServerState::Ready { link, .. } => link.version.as_ref().map(|v| v.to_string()),
                _ => None,
            },
            consecutive_failures: state.failures(),
            pid,
            rss_kib: pid.and_then(crate::procfs::rss_kib),
            last_used: self.last_used_ms(),
            tools_from: self.tools_from(&state),
            restarts: self.restarts.load(Ordering::Relaxed),
            circuit_opens: self.circuit_opens.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            // With the calls waiting for room for a new instance of a scoped server.
            queued: self.queued.load(Ordering::Relaxed) + instances.map_or(0, |i| i.waiting()),
            collisions,
            resource_clashes: Vec::new(),
            scope: cfg.scope,
            instances: instances.map_or_else(Vec::new, |i| i.status(self)),
        }
    }
}
