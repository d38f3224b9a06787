//! The host's own commands rendered (`tools`, `mcp status`, `mcp reload`, `skills`, `undo`): the
//! live state as Markdown, so a user in any frontend sees the shared host. Here, beside the
//! other methods that read the host, because `commands` itself must not know the host.
//! `mcp reload` is an action: getting it reloads config.json, exactly as `config.reload`
//! does, and the text reports what changed.

use std::fmt::Write as _;

use serde::Serialize;

use crate::commands::builtin::Builtin;
use crate::host::Host;
use crate::protocol::McpServerStatus;

/// A built-in command's live answer, as Markdown.
pub(super) async fn render(builtin: Builtin, host: &Host) -> String {
    match builtin {
        Builtin::Tools => tools(host),
        Builtin::McpStatus => mcp_status(&host.mcp().status(None)),
        Builtin::McpReload => mcp_reload(host).await,
        Builtin::Skills => skills(host),
        Builtin::Undo => undo(host),
    }
}

/// A wire enum's own spelling (`circuit_open`), for the text.
fn label(value: &impl Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The first line of a description, for a one-line list item.
fn first_line(text: &str) -> &str {
    text.lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

fn tools(host: &Host) -> String {
    let snapshot = host.registry().snapshot();
    // Deferred tools included (they are callable), hidden ones not (as `list_tools`).
    let listed: Vec<_> = snapshot.listed(false, true).collect();
    let mut out = format!("# Tools ({})\n\n", listed.len());
    for (name, entry) in listed {
        let source = match &entry.tool.spec().source {
            crate::catalog::ToolSource::Builtin => "built-in".to_owned(),
            crate::catalog::ToolSource::Custom { .. } => "custom".to_owned(),
            crate::catalog::ToolSource::Mcp { server, .. } => format!("MCP server {server}"),
        };
        let description = first_line(&entry.tool.spec().description);
        let _ = writeln!(out, "- `{name}` ({source}): {description}");
    }
    let quarantined: Vec<_> = snapshot.quarantined_tools().map(|q| &q.name).collect();
    if !quarantined.is_empty() {
        let _ = writeln!(
            out,
            "\nHeld back until approved (`toolhost tools diff NAME`):"
        );
        for name in quarantined {
            let _ = writeln!(out, "- `{name}`");
        }
    }
    out
}

fn mcp_status(servers: &[McpServerStatus]) -> String {
    if servers.is_empty() {
        return "# MCP servers\n\nNo MCP server is configured.\n".to_owned();
    }
    let mut out = format!("# MCP servers ({})\n\n", servers.len());
    for s in servers {
        let _ = write!(
            out,
            "- **{}** ({}): {}, {} tool{}",
            s.name,
            label(&s.transport),
            label(&s.state),
            s.tools,
            if s.tools == 1 { "" } else { "s" }
        );
        if let Some(v) = &s.protocol_version {
            let _ = write!(out, ", MCP {v}");
        }
        if s.restarts > 0 {
            let _ = write!(out, ", {} restarts", s.restarts);
        }
        if let Some(e) = &s.last_error {
            let _ = write!(out, "\n  - last error: {}", first_line(e));
        }
        if !s.collisions.is_empty() {
            let _ = write!(
                out,
                "\n  - names taken by another source: {}",
                s.collisions.join(", ")
            );
        }
        out.push('\n');
    }
    out
}

async fn mcp_reload(host: &Host) -> String {
    let before = host.mcp().status(None);
    let tools_before = host.registry().snapshot().len();
    let result = crate::reload::reload(host).await;
    let after = host.mcp().status(None);
    let tools_after = host.registry().snapshot().len();
    let mut out = String::from("# Config reload\n\n");
    match &result.error {
        Some(e) => {
            let _ = writeln!(out, "Not applied: {e}\n\nThe config in force is unchanged.");
        }
        None => {
            let _ = writeln!(
                out,
                "Applied {} (revision {}).",
                result.status.path, result.status.revision
            );
        }
    }
    let names = |list: &[McpServerStatus], other: &[McpServerStatus]| -> Vec<String> {
        list.iter()
            .filter(|s| !other.iter().any(|o| o.name == s.name))
            .map(|s| s.name.clone())
            .collect()
    };
    let added = names(&after, &before);
    let removed = names(&before, &after);
    if added.is_empty() && removed.is_empty() {
        let _ = writeln!(out, "\nMCP servers: unchanged ({}).", after.len());
    } else {
        if !added.is_empty() {
            let _ = writeln!(out, "\nMCP servers added: {}.", added.join(", "));
        }
        if !removed.is_empty() {
            let _ = writeln!(out, "\nMCP servers removed: {}.", removed.join(", "));
        }
    }
    let _ = writeln!(out, "\nTools: {tools_before} before, {tools_after} now.");
    for w in &result.status.warnings {
        let _ = writeln!(out, "\n- warning: {w}");
    }
    out.push('\n');
    out.push_str(&mcp_status(&after));
    out
}

/// `/undo`: what the model is to do, with the tools (they act on its own session's
/// workspace, which this rendering does not know).
fn undo(host: &Host) -> String {
    if !host.config().checkpoint_anywhere() {
        return "# Undo\n\nCheckpoints are off on this host, so no change is recorded and none can be undone here. They are turned on with `\"checkpoint\": {\"enabled\": true}` in the host's config.json (proto-docs/checkpoints.md). Tell the user so.\n".to_owned();
    }
    "# Undo\n\nUndo the last change made to this project's files.\n\n\
     1. Call `checkpoint_list` and take the newest entry made by a tool call (not one marked \"outside the host\", unless the user asks for that one); call `checkpoint_list` with its `id` to read its diff.\n\
     2. Tell the user in one or two lines which change that is (tool, frontend, files) and call `checkpoint_restore` with its `id`.\n\
     3. If the restore is refused because files changed since, name each file and the change that touched it, and ask the user before repeating it with `force: true`. If a call is still running in the project, wait and try again.\n\
     4. Say what was restored and that the restore can itself be undone with `checkpoint_restore` of its own entry.\n".to_owned()
}

fn skills(host: &Host) -> String {
    let catalog = host.skills().catalog();
    let mut out = format!("# Skills ({})\n\n", catalog.len());
    for s in catalog.skills() {
        let _ = writeln!(out, "- **{}**: {}", s.name, first_line(&s.description));
    }
    let problems: Vec<String> = catalog.problems().collect();
    if !problems.is_empty() {
        let _ = writeln!(out, "\nSkipped or incomplete:");
        for p in problems {
            let _ = writeln!(out, "- {p}");
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_are_distinct_and_follow_the_name_rule() {
        let entries: Vec<_> = Builtin::ALL.iter().map(|b| b.entry()).collect();
        let prompts: std::collections::HashSet<_> = entries.iter().map(|e| &e.prompt).collect();
        assert_eq!(prompts.len(), Builtin::ALL.len());
        for b in Builtin::ALL {
            for w in b.words() {
                crate::skills::skill::check_name(w).unwrap();
            }
        }
        assert_eq!(Builtin::McpStatus.entry().prompt, "mcp_status");
    }
}
