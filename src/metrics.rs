//! Prometheus metrics for `GET /metrics`.
//!
//! Events (a finished call, a connection, a reload) bump atomic counters here as they
//! happen; state the host already keeps (calls in flight, MCP server states, sessions) is
//! read at scrape time into a [`Scrape`] and rendered with the live counters, so nothing
//! is counted twice and the call path only touches counters. This module knows no host
//! type: the RPC layer gathers the [`Scrape`].

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::protocol::{ErrorKind, McpServerState, McpServerStatus};

/// The `Content-Type` of the exposition (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Where a tool comes from, as a label.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Source {
    builtin,
    custom,
    mcp,
    /// A call of a tool that does not exist.
    unknown,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::builtin => "builtin",
            Source::custom => "custom",
            Source::mcp => "mcp",
            Source::unknown => "unknown",
        }
    }
}

/// How a call ended, as a label: `ok`, or its `error_kind`'s wire name.
pub fn outcome(error_kind: Option<ErrorKind>) -> &'static str {
    error_kind.map_or("ok", ErrorKind::as_str)
}

/// The framing a connection speaks.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Framing {
    newline,
    http,
    websocket,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    source: Source,
    /// The MCP server (empty for other sources).
    server: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: Source,
    server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FramingLabels {
    framing: Framing,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerStateLabels {
    server: String,
    state: &'static str,
}

/// Call latency buckets in seconds: a relayed call takes ~100 µs, a build minutes.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
    30.0, 300.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The event counters; every handle inside is a shared atomic, cheap to bump from any task.
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<SourceLabels, Histogram, fn() -> Histogram>,
    connections_open: Family<FramingLabels, Gauge>,
    connections: Family<FramingLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    audit_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            connections_open: Family::default(),
            connections: Family::default(),
            reloads: Family::default(),
            audit_dropped: Counter::default(),
        }
    }
}

/// What the host knows at scrape time (gathered by the RPC layer).
pub struct Scrape {
    pub in_flight: usize,
    pub sessions: u64,
    pub tools: usize,
    pub config_revision: u64,
    pub servers: Vec<McpServerStatus>,
}

impl Metrics {
    /// Counts a finished call and its latency.
    pub fn call_finished(
        &self,
        tool: &str,
        source: Source,
        server: &str,
        outcome: &'static str,
        seconds: f64,
    ) {
        let labels = CallLabels {
            tool: tool.to_owned(),
            source,
            server: server.to_owned(),
            outcome,
        };
        self.calls.get_or_create(&labels).inc();
        let CallLabels { source, server, .. } = labels;
        self.latency
            .get_or_create(&SourceLabels { source, server })
            .observe(seconds);
    }

    /// Counts an accepted connection; the guard counts it closed when dropped.
    pub fn connection(self: &std::sync::Arc<Self>, framing: Framing) -> ConnectionGuard {
        let labels = FramingLabels { framing };
        self.connections.get_or_create(&labels).inc();
        self.connections_open.get_or_create(&labels).inc();
        ConnectionGuard {
            metrics: self.clone(),
            framing,
        }
    }

    /// Counts a reload: applied or refused.
    pub fn reload(&self, applied: bool) {
        let result = if applied { "applied" } else { "refused" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts an audit record that could not be queued (the writer fell behind).
    pub fn audit_dropped(&self) {
        self.audit_dropped.inc();
    }

    /// The exposition: the live counters plus the scrape-time state.
    pub fn render(&self, s: &Scrape) -> String {
        let mut r = Registry::with_prefix("toolhost");
        r.register(
            "calls",
            "Finished tool calls by tool, source, MCP server and outcome (ok or error_kind)",
            self.calls.clone(),
        );
        r.register(
            "call_duration_seconds",
            "Tool call latency by source and MCP server",
            self.latency.clone(),
        );
        r.register(
            "connections",
            "Accepted connections by framing",
            self.connections.clone(),
        );
        r.register(
            "connections_open",
            "Open connections by framing",
            self.connections_open.clone(),
        );
        r.register(
            "config_reloads",
            "Config reloads by result",
            self.reloads.clone(),
        );
        r.register(
            "audit_dropped",
            "Audit records dropped because the writer fell behind",
            self.audit_dropped.clone(),
        );
        gauge(
            &mut r,
            "calls_in_flight",
            "Tool calls running now",
            s.in_flight,
        );
        let queued: usize = s.servers.iter().map(|x| x.queued).sum();
        gauge(
            &mut r,
            "calls_queued",
            "Calls waiting for an MCP server's concurrency slot",
            queued,
        );
        gauge(&mut r, "sessions", "Persisted sessions", s.sessions);
        gauge(&mut r, "tools", "Tools in the live registry", s.tools);
        gauge(
            &mut r,
            "config_revision",
            "Configs applied since start",
            s.config_revision,
        );

        let state: Family<ServerStateLabels, Gauge> = Family::default();
        let tools: Family<ServerLabels, Gauge> = Family::default();
        let restarts: Family<ServerLabels, Counter> = Family::default();
        let circuit_opens: Family<ServerLabels, Counter> = Family::default();
        let in_flight: Family<ServerLabels, Gauge> = Family::default();
        let queued: Family<ServerLabels, Gauge> = Family::default();
        for srv in &s.servers {
            let l = ServerLabels {
                server: srv.name.clone(),
            };
            for st in McpServerState::ALL {
                let on = i64::from(srv.state == st);
                state
                    .get_or_create(&ServerStateLabels {
                        server: srv.name.clone(),
                        state: st.as_str(),
                    })
                    .set(on);
            }
            tools.get_or_create(&l).set(to_i64(srv.tools));
            restarts.get_or_create(&l).inc_by(u64::from(srv.restarts));
            circuit_opens
                .get_or_create(&l)
                .inc_by(u64::from(srv.circuit_opens));
            in_flight.get_or_create(&l).set(to_i64(srv.in_flight));
            queued.get_or_create(&l).set(to_i64(srv.queued));
        }
        r.register(
            "mcp_server_state",
            "1 for the state each MCP server is in, 0 for the others",
            state,
        );
        r.register("mcp_server_tools", "Tools an MCP server offers", tools);
        r.register(
            "mcp_server_restarts",
            "Reconnections of an MCP server after its first connection",
            restarts,
        );
        r.register(
            "mcp_server_circuit_opens",
            "Times an MCP server's circuit breaker opened",
            circuit_opens,
        );
        r.register(
            "mcp_server_calls_in_flight",
            "Calls running on an MCP server",
            in_flight,
        );
        r.register(
            "mcp_server_calls_queued",
            "Calls waiting for an MCP server's concurrency slot",
            queued,
        );
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &r);
        out
    }
}

fn to_i64(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

fn gauge(r: &mut Registry, name: &str, help: &str, value: impl TryInto<i64>) {
    let g: Gauge = Gauge::default();
    g.set(to_i64(value));
    r.register(name, help, g);
}

/// Counts a connection closed when dropped.
pub struct ConnectionGuard {
    metrics: std::sync::Arc<Metrics>,
    framing: Framing,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics
            .connections_open
            .get_or_create(&FramingLabels {
                framing: self.framing,
            })
            .dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_counters_and_scrape_state() {
        let m = std::sync::Arc::new(Metrics::default());
        m.call_finished("bash", Source::builtin, "", outcome(None), 0.002);
        m.call_finished(
            "bash",
            Source::builtin,
            "",
            outcome(Some(ErrorKind::Timeout)),
            1.5,
        );
        let g = m.connection(Framing::http);
        m.reload(false);
        let text = m.render(&Scrape {
            in_flight: 2,
            sessions: 3,
            tools: 6,
            config_revision: 1,
            servers: Vec::new(),
        });
        drop(g);
        for line in [
            "toolhost_calls_total{tool=\"bash\",source=\"builtin\",server=\"\",outcome=\"ok\"} 1",
            "toolhost_calls_total{tool=\"bash\",source=\"builtin\",server=\"\",outcome=\"timeout\"} 1",
            "toolhost_call_duration_seconds_count{source=\"builtin\",server=\"\"} 2",
            "toolhost_connections_open{framing=\"http\"} 1",
            "toolhost_config_reloads_total{result=\"refused\"} 1",
            "toolhost_calls_in_flight 2",
            "toolhost_sessions 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
