//! What operators read: `host.health`, `GET /metrics` and `host.status`, gathered from the
//! host's state.

use jsonrpsee::server::{HttpBody, HttpResponse};

use crate::catalog::ToolSource;
use crate::host::Host;
use crate::metrics::{Scrape, CONTENT_TYPE};
use crate::protocol::{HealthResult, HealthStatus, HostStatusResult};

/// `GET /metrics`: the Prometheus text exposition.
pub(super) fn metrics_response(host: &Host) -> HttpResponse {
    let text = with_scrape(host, |scrape| host.metrics().render(scrape));
    let mut r = HttpResponse::new(HttpBody::from(text));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(CONTENT_TYPE),
    );
    r
}

/// The exposition for the operator's page's charts: the same counters, none dropped.
pub(super) fn metrics_peek(host: &Host) -> String {
    with_scrape(host, |scrape| host.metrics().peek(scrape))
}

/// Runs `f` on what the host knows now, for the metrics exposition.
fn with_scrape<R>(host: &Host, f: impl FnOnce(&Scrape) -> R) -> R {
    let snapshot = host.registry().snapshot();
    f(&Scrape {
        in_flight: host.calls().in_flight(),
        sessions: host.sessions().count(),
        tools: snapshot.len(),
        is_registered: &|name| snapshot.get(name).is_some(),
        config_revision: host.config_state().revision,
        servers: host.mcp().status(None),
        guard_refusals: host.guards().refusals(),
    })
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
        health: health(host),
        config: crate::reload::status(host),
        servers: host.mcp().status(None),
        custom_tools,
        calls: host.calls().list(),
        frontends: host.frontends().list(),
        data_dir: host.data_dir().display().to_string(),
    }
}

/// `host.health`: liveness, and `degraded` while something needs the operator.
pub(super) fn health(host: &Host) -> HealthResult {
    let snapshot = host.registry().snapshot();
    let config_error = host.config_state().last_error;
    let collisions: Vec<String> = snapshot
        .collisions()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    // Tool names, then prompt names (named by the same rule, so clashing the same way).
    let clashes: Vec<_> = snapshot
        .collisions()
        .iter()
        .map(|c| crate::protocol::NameClash {
            name: c.name.clone(),
            kept: c.kept.to_string(),
            dropped: c.dropped.to_string(),
        })
        .chain(host.mcp().surface().prompt_clashes.iter().cloned())
        .collect();
    let mcp = host.mcp().counts();
    // A configured server that cannot start, or whose circuit is open, needs the operator.
    let custom_tool_errors = host.custom().errors();
    let modules = host.custom().modules().health();
    let module_errors: Vec<String> = host
        .custom()
        .module_scan_problems()
        .into_iter()
        .chain(modules.problems)
        .collect();
    let skill_errors: Vec<String> = host
        .skills()
        .problems()
        .into_iter()
        .chain(mcp_skill_clashes(host))
        .collect();
    let command_errors: Vec<String> = host.commands().catalog().problems().collect();
    let quarantined: Vec<String> = snapshot
        .quarantined_tools()
        .map(|q| q.name.clone())
        .collect();
    let pins_error = host.registry().pins_damage();
    let trust_waiting = host.trust().waiting();
    let trust_error = host.trust().damage();
    let guard_errors = host.guards().errors();
    let fleet = host.fleet().map(|f| f.health());
    let degraded = fleet.as_ref().is_some_and(|f| !f.reachable)
        || !quarantined.is_empty()
        || !guard_errors.is_empty()
        || pins_error.is_some()
        || !trust_waiting.is_empty()
        || trust_error.is_some()
        || config_error.is_some()
        || !clashes.is_empty()
        || mcp.failed > 0
        || !custom_tool_errors.is_empty()
        || !module_errors.is_empty()
        || !skill_errors.is_empty()
        || !command_errors.is_empty();
    HealthResult {
        status: if degraded {
            HealthStatus::Degraded
        } else {
            HealthStatus::Ok
        },
        version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_s: host.uptime().as_secs(),
        tools: snapshot.len(),
        sessions: host.sessions().count(),
        without_workspace: host.frontends().without_workspace(),
        sandbox: crate::sandbox::status(),
        mcp,
        config_error,
        collisions,
        clashes,
        custom_tool_errors,
        session_event_errors: host
            .custom()
            .event_failures()
            .into_iter()
            .chain(modules.event_failures)
            .collect(),
        module_host: {
            let node = modules.host.node.clone().or_else(|| {
                modules
                    .workspace_hosts
                    .iter()
                    .find_map(|(_, h, _, _)| h.node.clone())
            });
            let version = modules.host.node_version.clone().or_else(|| {
                modules
                    .workspace_hosts
                    .iter()
                    .find_map(|(_, h, _, _)| h.node_version.clone())
            });
            let typescript = modules.host.typescript
                || modules
                    .workspace_hosts
                    .iter()
                    .any(|(_, h, _, _)| h.typescript);
            let any_error = modules.host.start_error.is_some()
                || modules
                    .workspace_hosts
                    .iter()
                    .any(|(_, h, _, _)| h.start_error.is_some());
            (node.is_some() || any_error).then(|| crate::protocol::ModuleHostHealth {
                node: node.map(|n| n.display().to_string()),
                node_version: version,
                typescript,
                pid: modules.host.pid,
                restarts: modules.host.restarts,
                last_exit: modules.host.last_exit,
                start_error: modules.host.start_error,
                packages: crate::custom::modules::packages::installed()
                    .map(|d| d.join("node_modules").display().to_string()),
                modules: modules.modules,
                tools: modules.tools,
                workspace_hosts: modules
                    .workspace_hosts
                    .into_iter()
                    .map(
                        |(ws, h, modules, tools)| crate::protocol::WorkspaceModuleHost {
                            workspace: ws.display().to_string(),
                            policy: h.policy,
                            pid: h.pid,
                            restarts: h.restarts,
                            last_exit: h.last_exit,
                            start_error: h.start_error,
                            modules,
                            tools,
                        },
                    )
                    .collect(),
            })
        },
        module_errors,
        skill_errors,
        command_errors,
        quarantined,
        pins_error,
        trust_waiting,
        trust_error,
        guard_errors,
        fleet,
    }
}

/// The MCP servers' skills that share a name: with one another (the first server in config
/// order is used) or with one of the host's own (the host's is used: its skills are listed
/// first), in the words of a clash of two skill folders.
fn mcp_skill_clashes(host: &Host) -> Vec<String> {
    let surface = host.mcp().surface();
    let own = host.skills().catalog();
    let shadowed = surface.skills.values().filter_map(|s| {
        let mine = own.get(&s.name)?;
        Some(format!(
            "skill '{}' is defined twice: {} is used, MCP server '{}' ({}) is ignored (the host's own skills come before its MCP servers')",
            s.name,
            mine.dir.display(),
            s.server,
            s.skill.uri
        ))
    });
    surface
        .skill_clashes
        .iter()
        .cloned()
        .chain(shadowed)
        .collect()
}
