//! What changed between two configs, in the terms the reloader acts on.

use super::Config;

/// The difference between the live config and a new one.
///
/// Servers are compared by name over *all* configured servers, enabled or not: toggling
/// `enabled` is a change that needs a restart (`needs_restart` compares it), and the MCP
/// supervisor starts or stops the server according to the new flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// New server names, in the new file's order.
    pub servers_added: Vec<String>,
    /// Names gone from the new config, in the old file's order.
    pub servers_removed: Vec<String>,
    /// Changed so that the connection must be restarted (command, args, env, url, ...).
    pub servers_restart: Vec<String>,
    /// Changed only in what applies without a restart (tool filters, approval classes,
    /// `trust_annotations`): re-filter / re-classify the live tools.
    pub servers_updated: Vec<String>,
    /// Code mode went on for the first view or off for the last: the built-in tools gain
    /// or lose the code tools.
    pub builtins_changed: bool,
    /// Settings that cannot change while the daemon runs and differ, as messages such as
    /// `listen.socket changed; restart the daemon to apply it`. They are *not* applied: the
    /// daemon keeps running with the old values.
    pub needs_restart: Vec<String>,
}

/// Approval, custom tool, provider and limit settings are not in the diff: every reload
/// re-applies them from the new config whole (they are cheap to apply and have no
/// connection to restart).
#[cfg(test)]
impl ConfigDiff {
    /// Nothing changed at all.
    pub fn is_empty(&self) -> bool {
        *self == ConfigDiff::default()
    }
}

/// Compares `old` (live) with `new`.
///
/// Restart-only settings: `listen.socket`, `listen.socket_mode`, `listen.tcp`,
/// `listen.token_file`, the `listen` connection limits, `data_dir`, `workspace` (built-in tools are rooted at the
/// workspace resolved at start), `limits.max_request_bytes` and
/// `limits.max_buffered_request_bytes` (baked into the transport when it starts). Note these compare config values only: a `--workspace`/`--socket`
/// command-line flag that overrides them is not known here.
pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    // The top-level `env`/`env_passthrough` are part of every stdio server's environment,
    // which only a restart can change.
    let child_env_changed = old.env != new.env || old.env_passthrough != new.env_passthrough;
    for (name, server) in &new.mcp_servers {
        match old.mcp_servers.get(name) {
            None => d.servers_added.push(name.clone()),
            Some(before) if before.needs_restart(server) => d.servers_restart.push(name.clone()),
            Some(_) if child_env_changed && server.command.is_some() && server.enabled => {
                d.servers_restart.push(name.clone())
            }
            Some(before) if before != server => d.servers_updated.push(name.clone()),
            Some(_) => {}
        }
    }
    for name in old.mcp_servers.keys() {
        if !new.mcp_servers.contains_key(name) {
            d.servers_removed.push(name.clone());
        }
    }

    d.builtins_changed = old.code_mode_anywhere() != new.code_mode_anywhere()
        || old.checkpoint_anywhere() != new.checkpoint_anywhere();

    let mut restart = |changed: bool, what: &str| {
        if changed {
            d.needs_restart
                .push(format!("{what} changed; restart the daemon to apply it"));
        }
    };
    restart(old.workspace != new.workspace, "workspace");
    restart(old.data_dir != new.data_dir, "data_dir");
    restart(old.store != new.store, "store");
    restart(old.fleet != new.fleet, "fleet");
    restart(old.listen.socket != new.listen.socket, "listen.socket");
    restart(
        old.listen.socket_mode != new.listen.socket_mode,
        "listen.socket_mode",
    );
    restart(old.listen.tcp != new.listen.tcp, "listen.tcp");
    restart(
        old.listen.token_file != new.listen.token_file,
        "listen.token_file",
    );
    restart(old.listen.tokens != new.listen.tokens, "listen.tokens");
    restart(
        (
            old.listen.max_unix_connections,
            old.listen.max_tcp_connections,
            old.listen.max_tcp_unauthenticated,
            old.listen.handshake_timeout_ms,
        ) != (
            new.listen.max_unix_connections,
            new.listen.max_tcp_connections,
            new.listen.max_tcp_unauthenticated,
            new.listen.handshake_timeout_ms,
        ),
        "listen connection limits",
    );
    restart(
        old.limits.max_request_bytes != new.limits.max_request_bytes,
        "limits.max_request_bytes",
    );
    restart(
        old.limits.max_buffered_request_bytes != new.limits.max_buffered_request_bytes,
        "limits.max_buffered_request_bytes",
    );
    d
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::McpServer;
    use crate::protocol::ApprovalClass;

    fn server(cmd: &str) -> McpServer {
        McpServer {
            command: Some(cmd.to_owned()),
            ..McpServer::default()
        }
    }

    fn with_servers(servers: &[(&str, McpServer)]) -> Config {
        let mut c = Config::default();
        for (n, s) in servers {
            c.mcp_servers.insert((*n).to_owned(), s.clone());
        }
        c
    }

    #[test]
    fn identical_configs_have_an_empty_diff() {
        let c = with_servers(&[("a", server("x"))]);
        let d = diff(&c, &c.clone());
        assert!(d.is_empty());
    }

    #[test]
    fn servers_added_removed_restarted_updated() {
        let mut filtered = server("b");
        filtered.exclude_tools = vec!["t".into()];
        filtered
            .approval
            .insert("t".into(), ApprovalClass::ReadOnly);
        let mut new_args = server("c");
        new_args.args = vec!["--x".into()];
        let mut disabled = server("e");
        disabled.enabled = false;
        let old = with_servers(&[
            ("a", server("a")),
            ("b", server("b")),
            ("c", server("c")),
            ("d", server("d")),
            ("e", server("e")),
        ]);
        let new = with_servers(&[
            ("b", filtered),
            ("c", new_args),
            ("d", server("d")),
            ("e", disabled),
            ("f", server("f")),
        ]);
        let d = diff(&old, &new);
        assert_eq!(d.servers_added, ["f"]);
        assert_eq!(d.servers_removed, ["a"]);
        assert_eq!(d.servers_restart, ["c", "e"]);
        assert_eq!(d.servers_updated, ["b"]);
        assert!(d.needs_restart.is_empty());
    }

    #[test]
    fn restart_only_settings_are_reported() {
        let old = Config::default();
        let mut new = Config::default();
        new.listen.socket = Some("/run/x.sock".into());
        new.data_dir = Some("/d".into());
        new.limits.max_request_bytes = 1;
        new.limits.max_output_bytes = 1;
        new.approval.tools.insert("t".into(), ApprovalClass::Write);
        new.custom_tools.discover = false;
        new.providers.insert("p".into(), Default::default());
        let d = diff(&old, &new);
        assert_eq!(
            d.needs_restart,
            [
                "data_dir changed; restart the daemon to apply it",
                "listen.socket changed; restart the daemon to apply it",
                "limits.max_request_bytes changed; restart the daemon to apply it",
            ]
        );
        assert!(d.servers_added.is_empty() && d.servers_restart.is_empty());
    }

    #[test]
    fn top_level_env_changes_restart_stdio_servers_only() {
        let mut http = McpServer {
            url: Some("https://h/mcp".into()),
            ..McpServer::default()
        };
        http.command = None;
        let mut off = server("c");
        off.enabled = false;
        let old = with_servers(&[("a", server("a")), ("h", http), ("off", off)]);
        let mut new = old.clone();
        new.env_passthrough = vec!["*_PROXY".into()];
        assert_eq!(diff(&old, &new).servers_restart, ["a"]);
        let mut new = old.clone();
        new.env.insert("GOPATH".into(), "/go".into());
        assert_eq!(diff(&old, &new).servers_restart, ["a"]);
        assert!(diff(&old, &old.clone()).is_empty());
    }
}
