//! Prometheus metrics for `GET /metrics`.
//!
//! Events (a finished call, a connection, a reload) bump atomic counters here as they
//! happen; state the host already keeps (calls in flight, MCP server states, sessions) is
//! read at scrape time into a [`Scrape`] and rendered with the live counters, so nothing
//! is counted twice and the call path only touches counters. This module knows no host
//! type: the RPC layer gathers the [`Scrape`].
//!
//! Every label set is bounded by what the host knows, never by what a caller sends: a call
//! of a tool that is not registered counts under one series per outcome (`tool=""`,
//! `source="unknown"`), so invented names leave no trace. A series whose tool has left the
//! registry (or, for an MCP tool, whose server has left the config: a server that restarts
//! keeps its counts) is shown once more at the next scrape, with its last count, and then
//! dropped, so tools that come and go under new names leave no history behind.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
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
    /// A call of a tool that is not registered (or is quarantined).
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
    /// The registered tool (empty for `source="unknown"`: its name is the caller's).
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
struct RuleLabels {
    rule: String,
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

/// A metric family that remembers its label sets, so the series of a tool or server that
/// has left the registry can be dropped (prometheus_client's `Family` cannot list them).
struct Tracked<S, M, C = fn() -> M> {
    family: Family<S, M, C>,
    /// Every label set in `family`. A new one enters both under this lock, and a prune
    /// removes from both under it, so none is ever in `family` alone.
    labels: Mutex<HashSet<S>>,
}

impl<S: Clone + Hash + Eq, M, C: MetricConstructor<M>> Tracked<S, M, C> {
    fn new(family: Family<S, M, C>) -> Self {
        Tracked {
            family,
            labels: Mutex::new(HashSet::new()),
        }
    }

    /// Runs `f` on the series of `labels`, created if new. An existing series costs a
    /// shared read lock, as with a plain `Family`.
    fn with(&self, labels: &S, f: impl FnOnce(&M)) {
        if let Some(metric) = self.family.get(labels) {
            f(&metric);
            return;
        }
        let mut known = crate::lock(&self.labels);
        known.insert(labels.clone());
        f(&self.family.get_or_create(labels));
    }

    /// Drops every series whose labels `keep` refuses.
    fn retain(&self, keep: impl Fn(&S) -> bool) {
        crate::lock(&self.labels).retain(|l| {
            let kept = keep(l);
            if !kept {
                self.family.remove(l);
            }
            kept
        });
    }
}

/// The event counters; every handle inside is a shared atomic, cheap to bump from any task.
pub struct Metrics {
    calls: Tracked<CallLabels, Counter>,
    latency: Tracked<SourceLabels, Histogram>,
    connections_open: Family<FramingLabels, Gauge>,
    connections: Family<FramingLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    audit_dropped: Counter,
    /// Whether a scraper has read the series (`GET /metrics`): a series of a tool that left
    /// is then kept for its last showing.
    scraped: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            calls: Tracked::new(Family::new_with_constructor(Counter::default)),
            latency: Tracked::new(Family::new_with_constructor(latency_histogram)),
            connections_open: Family::default(),
            connections: Family::default(),
            reloads: Family::default(),
            audit_dropped: Counter::default(),
            scraped: AtomicBool::new(false),
        }
    }
}

/// What the host knows at scrape time (gathered by the RPC layer).
pub struct Scrape<'a> {
    pub in_flight: usize,
    pub sessions: u64,
    pub tools: usize,
    /// Whether a tool of this name is in the live registry (a built-in or custom tool's
    /// series are kept while it is).
    pub is_registered: &'a dyn Fn(&str) -> bool,
    pub config_revision: u64,
    /// Every configured MCP server; the series of any other server are dropped.
    pub servers: Vec<McpServerStatus>,
    /// Calls each guard rule in force refused (one series per rule: the label set is
    /// bounded by the config, and a rule's count goes with it).
    pub guard_refusals: Vec<(String, u64)>,
}

impl Scrape<'_> {
    fn knows_server(&self, server: &str) -> bool {
        server.is_empty() || self.servers.iter().any(|s| s.name == server)
    }
}

impl Metrics {
    /// Counts a finished call and its latency. `tool` is not kept for `Source::unknown`.
    pub fn call_finished(
        &self,
        tool: &str,
        source: Source,
        server: &str,
        outcome: &'static str,
        seconds: f64,
    ) {
        let tool = match source {
            Source::unknown => String::new(),
            _ => tool.to_owned(),
        };
        let labels = CallLabels {
            tool,
            source,
            server: server.to_owned(),
            outcome,
        };
        self.calls.with(&labels, |c| {
            c.inc();
        });
        let CallLabels { source, server, .. } = labels;
        self.latency
            .with(&SourceLabels { source, server }, |h| h.observe(seconds));
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

    /// The exposition: the live counters plus the scrape-time state. The series of tools
    /// and servers that `s` no longer knows are dropped after this last showing.
    pub fn render(&self, s: &Scrape) -> String {
        let out = self.encode(s);
        self.scraped.store(true, Ordering::Relaxed);
        self.calls.retain(|l| match l.source {
            Source::unknown => true,
            Source::mcp => s.knows_server(&l.server),
            Source::builtin | Source::custom => (s.is_registered)(&l.tool),
        });
        self.latency.retain(|l| s.knows_server(&l.server));
        out
    }

    /// `tools` left the registry: their series go now when no scraper has read any (none is
    /// owed a last showing; else [`Metrics::render`] drops them after it), so a daemon
    /// without a scraper keeps no series per tool ever called.
    pub fn forget_tools(&self, tools: &[String]) {
        if tools.is_empty() || self.scraped.load(Ordering::Relaxed) {
            return;
        }
        self.calls.retain(|l| {
            !matches!(l.source, Source::builtin | Source::custom) || !tools.contains(&l.tool)
        });
    }

    /// The exposition as [`Metrics::render`] writes it, without dropping any series: the
    /// operator's page reads it every second, and only a scrape may take a departed
    /// tool's last showing.
    pub fn peek(&self, s: &Scrape) -> String {
        self.encode(s)
    }

    fn encode(&self, s: &Scrape) -> String {
        let mut r = Registry::with_prefix("toolhost");
        r.register(
            "calls",
            "Finished tool calls by tool, source, MCP server and outcome (ok or error_kind)",
            self.calls.family.clone(),
        );
        r.register(
            "call_duration_seconds",
            "Tool call latency by source and MCP server",
            self.latency.family.clone(),
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
        let refusals: Family<RuleLabels, Counter> = Family::default();
        for (rule, n) in &s.guard_refusals {
            refusals
                .get_or_create(&RuleLabels { rule: rule.clone() })
                .inc_by(*n);
        }
        r.register(
            "guard_refusals",
            "Calls refused by each guard rule (rate, daily, concurrency or loop limits)",
            refusals,
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
            is_registered: &|name| name == "bash",
            config_revision: 1,
            servers: Vec::new(),
            guard_refusals: vec![("paid".into(), 3)],
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
            "toolhost_guard_refusals_total{rule=\"paid\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    fn scrape<'a>(is_registered: &'a dyn Fn(&str) -> bool, servers: &[&str]) -> Scrape<'a> {
        Scrape {
            in_flight: 0,
            sessions: 0,
            tools: 0,
            is_registered,
            config_revision: 0,
            guard_refusals: Vec::new(),
            servers: servers
                .iter()
                .map(|name| McpServerStatus {
                    name: (*name).to_owned(),
                    transport: crate::protocol::McpTransport::Stdio,
                    state: McpServerState::Ready,
                    tools: 0,
                    last_error: None,
                    connected_since: None,
                    protocol_version: None,
                    consecutive_failures: 0,
                    pid: None,
                    rss_kib: None,
                    last_used: None,
                    tools_from: None,
                    restarts: 0,
                    circuit_opens: 0,
                    in_flight: 0,
                    queued: 0,
                    collisions: Vec::new(),
                    resource_clashes: Vec::new(),
                    scope: Default::default(),
                    instances: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn invented_names_share_one_series() {
        let m = Metrics::default();
        let unknown = outcome(Some(ErrorKind::UnknownTool));
        m.call_finished("invented_0", Source::unknown, "", unknown, 0.0);
        let before = m.render(&scrape(&|_| false, &[]));
        for i in 1..5000 {
            m.call_finished(&format!("invented_{i}"), Source::unknown, "", unknown, 0.0);
        }
        let after = m.render(&scrape(&|_| false, &[]));
        assert!(after.contains(
            "toolhost_calls_total{tool=\"\",source=\"unknown\",server=\"\",outcome=\"unknown_tool\"} 5000"
        ));
        assert!(!after.contains("invented"), "{after}");
        assert_eq!(before.lines().count(), after.lines().count());
    }

    #[test]
    fn a_series_of_what_left_the_registry_is_shown_once_more_then_dropped() {
        let m = Metrics::default();
        m.call_finished("gone", Source::custom, "", outcome(None), 0.0);
        m.call_finished("mcp_old_echo", Source::mcp, "old", outcome(None), 0.0);
        m.call_finished("bash", Source::builtin, "", outcome(None), 0.0);
        // Not registered while its server restarts; the server is still configured.
        m.call_finished("mcp_fx_echo", Source::mcp, "fx", outcome(None), 0.0);
        let only_bash = |name: &str| name == "bash";
        let last = m.render(&scrape(&only_bash, &["fx"]));
        for line in [
            "toolhost_calls_total{tool=\"gone\",source=\"custom\",server=\"\",outcome=\"ok\"} 1",
            "toolhost_call_duration_seconds_count{source=\"mcp\",server=\"old\"} 1",
        ] {
            assert!(
                last.lines().any(|l| l == line),
                "missing {line:?} in\n{last}"
            );
        }
        let next = m.render(&scrape(&only_bash, &["fx"]));
        assert!(!next.contains("gone") && !next.contains("old"), "{next}");
        assert!(next.contains("tool=\"bash\"") && next.contains("tool=\"mcp_fx_echo\""));
        assert_eq!(crate::lock(&m.calls.labels).len(), 2);
        assert_eq!(crate::lock(&m.latency.labels).len(), 3);
    }
}
