//! The operator's page's two methods: `ui.login` (a one-time login code for a link to the
//! page) and `audit.recent` (the audit log's last calls, which the page lists).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AuditRecord;

/// `ui.login`: a one-time code that the page exchanges for a page token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UiLoginResult {
    /// Good once, for two minutes.
    pub code: String,
    /// The page on the TCP listener with the code in its fragment (never sent to a
    /// server), when the daemon listens on TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditRecentParams {
    /// At most this many records, newest last (default and limit 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecentResult {
    /// Oldest first.
    pub records: Vec<AuditRecord>,
}

/// The names of the events of the page's stream `GET /ui/events` (server-sent events, one
/// JSON object each). A change of tools is [`super::method::TOOLS_CHANGED`] with a
/// [`super::ToolsChanged`], as a frontend gets it.
pub mod ui_event {
    /// [`super::super::McpStatusResult`]: a server's state, tools or last error changed.
    pub const SERVERS: &str = "servers";
    /// [`super::UiCalls`]: calls started or ended since the last batch.
    pub const CALLS: &str = "calls";
    /// [`super::UiMetrics`]: once a second.
    pub const METRICS: &str = "metrics";
    /// [`super::super::ConfigStatusResult`]: a config was applied or refused.
    pub const CONFIG: &str = "config";
    /// `{}`: the stream missed changes (its reader fell behind); read everything again.
    pub const RESYNC: &str = "resync";
}

/// The calls in flight, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UiCalls {
    pub calls: Vec<super::CallInFlight>,
}

/// The counters of `GET /metrics`, for the page's charts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UiMetrics {
    /// Prometheus text, as `/metrics` writes it.
    pub exposition: String,
}
