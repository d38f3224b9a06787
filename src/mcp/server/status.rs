//! What `mcp.status` shows of a server: its state on the wire, its last error and its
//! counters, read from one moment of its state.

use std::sync::Arc;

use super::{serves, Parked, Phase, Server, State, Trouble};
use crate::protocol::{McpServerStatus, McpTransport};

impl Phase {
    pub(super) fn wire(&self) -> State {
        match self {
            Phase::Disabled | Phase::Stopped => State::Disabled,
            Phase::Parked(Parked::NotStarted) => State::NotStarted,
            Phase::Parked(Parked::Idle) => State::StoppedIdle,
            Phase::Starting | Phase::Waking | Phase::Reconnecting { .. } => State::Connecting,
            Phase::Ready {
                trouble: Some(Trouble::SignIn(_)),
                ..
            }
            | Phase::AuthRequired { .. } => State::AuthRequired,
            Phase::Ready { .. } => State::Ready,
            Phase::Backoff { .. } => State::Failed,
            Phase::CircuitOpen { .. } => State::CircuitOpen,
        }
    }

    pub(super) fn last_error(&self) -> Option<&str> {
        match self {
            Phase::Reconnecting { last_error, .. } => last_error.as_deref(),
            Phase::Ready {
                trouble: Some(Trouble::SignIn(e) | Trouble::Listing(e)),
                ..
            }
            | Phase::Backoff { error: e, .. }
            | Phase::CircuitOpen { error: e, .. }
            | Phase::AuthRequired { hint: e } => Some(e),
            _ => None,
        }
    }

    pub(super) fn failures(&self) -> u32 {
        match self {
            Phase::Reconnecting { failures, .. }
            | Phase::Backoff { failures, .. }
            | Phase::CircuitOpen { failures, .. } => *failures,
            _ => 0,
        }
    }
}

impl Server {
    pub fn status(self: &Arc<Self>, collisions: Vec<String>) -> McpServerStatus {
        let cfg = self.config();
        let instances = self.instances();
        // Read before the state is borrowed: an instance's status borrows its own.
        let instance_status = instances.map_or_else(Vec::new, |i| i.status(self));
        let waiting = instances.map_or(0, |i| i.waiting());
        let in_flight = self.in_flight();
        let state = self.state.borrow();
        let tools = state
            .listing
            .tools
            .iter()
            .filter(|t| serves(&cfg, &t.name))
            .count();
        let phase = &state.phase;
        let pid = match phase {
            Phase::Ready { pid, .. } => *pid,
            _ => None,
        };
        let status = McpServerStatus {
            name: self.name.clone(),
            transport: match cfg.transport() {
                "stdio" => McpTransport::Stdio,
                "sse" => McpTransport::Sse,
                _ => McpTransport::Http,
            },
            state: phase.wire(),
            tools,
            last_error: phase.last_error().map(str::to_owned),
            connected_since: match phase {
                Phase::Ready { since, .. } => Some(*since),
                _ => None,
            },
            protocol_version: match phase {
                Phase::Ready { link, .. } => link.version.as_ref().map(|v| v.to_string()),
                _ => None,
            },
            consecutive_failures: phase.failures(),
            pid,
            rss_kib: None,
            last_used: state.last_used_ms(),
            tools_from: state.tools_from(),
            restarts: state.restarts,
            circuit_opens: state.circuit_opens,
            in_flight,
            // With the calls waiting for room for a new instance of a scoped server.
            queued: state.queued + waiting,
            collisions,
            resource_clashes: Vec::new(),
            scope: cfg.scope,
            instances: instance_status,
        };
        drop(state);
        McpServerStatus {
            rss_kib: pid.and_then(crate::procfs::rss_kib),
            ..status
        }
    }
}
