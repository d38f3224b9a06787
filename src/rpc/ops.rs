//! What operators read: `GET /metrics` and `host.status`, gathered from the host's state.

use jsonrpsee::server::{HttpBody, HttpResponse};

use crate::host::Host;
use crate::metrics::{Scrape, CONTENT_TYPE};
use crate::protocol::HostStatusResult;
use crate::registry::ToolSource;

/// `GET /metrics`: the Prometheus text exposition.
pub(super) fn metrics_response(host: &Host) -> HttpResponse {
    let scrape = Scrape {
        in_flight: host.calls().in_flight(),
        sessions: host.sessions().count(),
        tools: host.registry().snapshot().len(),
        config_revision: host.config_state().revision,
        servers: host.mcp().status(None),
    };
    let mut r = HttpResponse::new(HttpBody::from(host.metrics().render(&scrape)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(CONTENT_TYPE),
    );
    r
}

/// `host.status`: health, config, servers, custom tools and calls in flight in one answer.
pub(super) fn status(host: &Host) -> HostStatusResult {
    let snapshot = host.registry().snapshot();
    let custom_tools = snapshot
        .visible_names()
        .into_iter()
        .filter(|n| {
            snapshot
                .get(n)
                .is_some_and(|e| matches!(e.tool.spec().source, ToolSource::Custom { .. }))
        })
        .collect();
    HostStatusResult {
        health: super::methods::health(host),
        config: crate::reload::status(host),
        servers: host.mcp().status(None),
        custom_tools,
        calls: host.calls().list(),
        data_dir: host.data_dir().display().to_string(),
    }
}
