//! `toolhost status [--json] [--watch]`: the operator's one view of a running daemon, and
//! `toolhost health`, its one-line summary.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use super::render::{emit, printable, say, wire};
use super::{success_if, Globals};
use crate::client::{Client, ClientError};
use crate::protocol::{HealthResult, HealthStatus, HostStatusResult, PendingApproval};

/// Prints the status once, or every `watch` seconds until interrupted. Exit 0 when the
/// host is `ok`, 1 when `degraded` (as `toolhost health`).
pub async fn run(g: &Globals, watch: Option<f64>) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let json = g.out.json;
    let Some(every) = watch else {
        let s = client.status().await?;
        print(&s, &pending(&client).await, json);
        return Ok(exit_code(&s));
    };
    let every = Duration::from_secs_f64(every.clamp(0.2, 3600.0));
    loop {
        let s = client.status().await?;
        let pending = pending(&client).await;
        if json {
            print(&s, &pending, true);
        } else {
            // Clear the terminal and redraw from the top.
            print!("\x1b[2J\x1b[H");
            print(&s, &pending, false);
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(exit_code(&s)),
        }
    }
}

/// The calls waiting for the user's approval (none when the daemon does not say: an
/// older daemon, or a caller not allowed to list them).
async fn pending(client: &Client) -> Vec<PendingApproval> {
    client
        .approvals_list()
        .await
        .map(|r| r.pending)
        .unwrap_or_default()
}

fn exit_code(s: &HostStatusResult) -> ExitCode {
    success_if(s.health.status == HealthStatus::Ok)
}

/// `toolhost health`: exit 0 when `ok`, 1 when `degraded`.
pub async fn health(g: &Globals) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let r = client.health().await?;
    if g.out.json {
        emit(g.out, &r);
    } else {
        say!(
            "{} — toolhost {}, up {}s, {} tools, {} sessions, mcp ready {} / failed {} / connecting {}",
            wire(&r.status),
            r.version,
            r.uptime_s, r.tools, r.sessions, r.mcp.ready, r.mcp.failed, r.mcp.connecting
        );
        for cause in degraded_causes(&r) {
            say!("  {cause}");
        }
        let pending = pending(&client).await;
        if !pending.is_empty() {
            say!(
                "{} call(s) wait for approval (`toolhost approvals`)",
                pending.len()
            );
        }
        if let Ok(m) = client.mcp_status(None).await {
            let scoped: usize = m
                .servers
                .iter()
                .map(|s| s.instances.iter().filter(|i| !i.default).count())
                .sum();
            if scoped > 0 {
                say!("{scoped} scoped MCP server instance(s) run (`toolhost status` lists them)");
            }
        }
        say!("sandbox: {}", r.sandbox.summary());
    }
    Ok(success_if(r.status == HealthStatus::Ok))
}

/// Each reason `host.health` says `degraded`, one line each, with where to look next
/// (every condition `rpc::ops::health` counts).
fn degraded_causes(h: &HealthResult) -> Vec<String> {
    let mut causes = Vec::new();
    if let Some(e) = &h.config_error {
        causes.push(format!("config error: {e}"));
    }
    if !h.collisions.is_empty() {
        causes.push(format!("name collisions: {}", h.collisions.join(", ")));
    }
    for c in &h.clashes {
        causes.push(format!(
            "name clash: {} kept from {}, dropped from {}",
            c.name, c.kept, c.dropped
        ));
    }
    if h.mcp.failed > 0 {
        causes.push(format!(
            "{} MCP server(s) failed (`toolhost mcp status` says which and why)",
            h.mcp.failed
        ));
    }
    for e in &h.custom_tool_errors {
        causes.push(format!("custom tool skipped: {e}"));
    }
    for e in &h.module_errors {
        causes.push(format!("tool module skipped: {e}"));
    }
    for e in &h.skill_errors {
        causes.push(format!("skill skipped: {e}"));
    }
    for e in &h.command_errors {
        causes.push(format!("command skipped: {e}"));
    }
    if let Some(e) = &h.pins_error {
        causes.push(format!("{e}: pinned tools are quarantined until it is repaired or `toolhost tools pins reset` moves it aside"));
    }
    if !h.quarantined.is_empty() {
        causes.push(format!(
            "quarantined tools (see `toolhost tools diff NAME`): {}",
            h.quarantined.join(", ")
        ));
    }
    for t in &h.trust_waiting {
        causes.push(format!(
            "waits for workspace trust: {} {} in {} (`toolhost trust`)",
            wire(&t.kind),
            t.path,
            t.workspace
        ));
    }
    if let Some(e) = &h.trust_error {
        causes.push(format!("trust file: {e}"));
    }
    for e in &h.guard_errors {
        causes.push(format!("guard: {e}"));
    }
    if let Some(f) = h.fleet.as_ref().filter(|f| !f.reachable) {
        causes.push(format!(
            "fleet database unreachable{}",
            f.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
    }
    causes
}

fn print(s: &HostStatusResult, pending: &[PendingApproval], json: bool) {
    if json {
        say!("{}", serde_json::to_string(s).unwrap_or_default());
    } else {
        print!("{}", printable(&render(s, pending)));
    }
}

/// The human view.
pub fn render(s: &HostStatusResult, pending: &[PendingApproval]) -> String {
    let h = &s.health;
    let mut o = String::new();
    let status = if h.status == HealthStatus::Ok {
        "ok"
    } else {
        "DEGRADED"
    };
    let _ = writeln!(
        o,
        "toolhost {} — {status}, up {}, {} tools, {} sessions, data {}",
        h.version,
        age(h.uptime_s.saturating_mul(1000)),
        h.tools,
        h.sessions,
        s.data_dir
    );
    for cause in degraded_causes(h) {
        let _ = writeln!(o, "  degraded: {cause}");
    }
    let c = &s.config;
    let _ = writeln!(o, "\nconfig   {} (revision {})", c.path, c.revision);
    for w in &c.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    let _ = writeln!(o, "\nmcp servers ({})", s.servers.len());
    for m in &s.servers {
        let _ = writeln!(
            o,
            "  {:<20} {:<5} {:<12} tools {:<4} restarts {:<3} circuit opens {:<3} in-flight {:<3} queued {}",
            m.name,
            wire(&m.transport),
            wire(&m.state),
            m.tools,
            m.restarts,
            m.circuit_opens,
            m.in_flight,
            m.queued
        );
        if let Some(e) = &m.last_error {
            let _ = writeln!(o, "  {:<20} last error: {e}", "");
        }
        for i in m.instances.iter().filter(|i| !i.default) {
            let _ = writeln!(
                o,
                "  {:<20} {} instance in {}{}: {} pid {} in-flight {}",
                "",
                wire(&m.scope),
                i.workspace,
                i.session_id
                    .as_deref()
                    .map(|s| format!(" (session {s})"))
                    .unwrap_or_default(),
                wire(&i.state),
                i.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                i.in_flight
            );
        }
    }
    let _ = writeln!(o, "\ncustom tools ({})", s.custom_tools.len());
    if !s.custom_tools.is_empty() {
        let _ = writeln!(o, "  {}", s.custom_tools.join(", "));
    }
    for e in &h.session_event_errors {
        let _ = writeln!(o, "  session event error: {e}");
    }
    let _ = writeln!(o, "\npending approvals ({})", pending.len());
    for p in pending {
        let _ = writeln!(
            o,
            "  {}  {:<28} {:<16} {}",
            p.id,
            p.tool,
            p.client.as_deref().unwrap_or("-"),
            p.summary
        );
    }
    let _ = writeln!(o, "\nfrontends ({})", s.frontends.len());
    for f in &s.frontends {
        let by = f
            .started_by
            .first()
            .and_then(|p| p.exe.as_deref())
            .unwrap_or("-");
        let _ = writeln!(
            o,
            "  {}  {:<24} {} session(s)  in {}  started by {by}",
            f.id,
            f.client,
            f.sessions.len(),
            f.workspace
        );
    }
    for w in &h.without_workspace {
        let _ = writeln!(
            o,
            "  no workspace of its own: {} (session {}): the daemon's is used",
            w.client, w.session
        );
    }
    let _ = writeln!(o, "\ncalls in flight ({})", s.calls.len());
    for call in &s.calls {
        let _ = writeln!(
            o,
            "  {:<40} {:<28} {:>8}  {}",
            call.call_id,
            call.tool,
            age(call.age_ms),
            call.session_id.as_deref().unwrap_or("-")
        );
    }
    o
}

/// `850ms`, `12.3s`, `4m05s`, `2h10m`.
fn age(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_naturally() {
        assert_eq!(
            [age(850), age(12_345), age(245_000), age(7_800_000)],
            ["850ms", "12.3s", "4m05s", "2h10m"]
        );
    }
}
