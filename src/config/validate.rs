//! The rules a schema cannot say: server names, one MCP server block's fields together,
//! and values that could never be handed to a program. Types and values are checked by the
//! schema derived from the model (see [`super::check`]).

use std::collections::HashMap;
use std::fmt;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::{Map, Value};

use super::error::Problem;
use super::path::{JsonPath, Seg};

/// Server names become part of tool names (`mcp_<server>_<tool>`).
pub(crate) fn check_server_name(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("server names must not be empty".to_owned())
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some(format!(
            "server name {} must match ^[A-Za-z0-9_-]+$ (it becomes part of tool names mcp_<server>_<tool>)",
            Value::String(name.to_owned())
        ))
    } else {
        None
    }
}

/// Problems and warnings, with the environment variable named for values that came from one.
pub(crate) struct Report<'a> {
    pub(super) problems: Vec<Problem>,
    pub(super) warnings: Vec<String>,
    pub(super) env_origin: &'a HashMap<String, String>,
}

impl Report<'_> {
    pub(crate) fn problem(&mut self, path: &JsonPath, message: impl Into<String>) {
        let path = path.to_string();
        let mut message = message.into();
        if let Some(var) = self.env_origin.get(&path) {
            message = format!("{message} (from {var})");
        }
        self.problems.push(Problem::new(path, message));
    }

    pub(crate) fn warn(&mut self, path: &JsonPath, message: impl fmt::Display) {
        let path = path.to_string();
        let line = if path.is_empty() {
            message.to_string()
        } else {
            format!("{path}: {message}{}", self.made_by(&path))
        };
        self.warnings.push(line);
    }

    /// A problem about a key, naming the environment variable(s) that made it, if any.
    pub(crate) fn key_problem(&mut self, path: &JsonPath, message: impl fmt::Display) {
        let at = path.to_string();
        let message = format!("{message}{}", self.made_by(&at));
        self.problems.push(Problem::new(at, message));
    }

    /// ` (from VAR, …)` when keys at or under `path` came from the environment.
    fn made_by(&self, path: &str) -> String {
        let mut vars: Vec<&str> = self
            .env_origin
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(path)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
            .map(|(_, v)| v.as_str())
            .collect();
        if path.is_empty() || vars.is_empty() {
            return String::new();
        }
        vars.sort_unstable();
        format!(" (from {})", vars.join(", "))
    }
}

/// Sandbox paths must be absolute (a relative one would depend on each program's cwd).
pub(crate) fn sandbox_rules(root: &Value, r: &mut Report) {
    let mut sections = vec![(
        JsonPath(vec![Seg::Key("sandbox".into())]),
        root.get("sandbox"),
    )];
    if let Some(Value::Object(servers)) = root.get("mcp_servers") {
        for (name, s) in servers {
            let path = JsonPath(vec![
                Seg::Key("mcp_servers".into()),
                Seg::Key(name.clone()),
                Seg::Key("sandbox".into()),
            ]);
            sections.push((path, s.get("sandbox")));
        }
    }
    for (base, section) in sections {
        let Some(Value::Array(items)) = section.and_then(|s| s.get("writable")) else {
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            if item.as_str().is_some_and(|p| !p.starts_with('/')) {
                let mut at = base.clone();
                at.0.push(Seg::Key("writable".into()));
                at.0.push(Seg::Index(i));
                r.problem(&at, format!("expected an absolute path, found {item}"));
            }
        }
    }
}

/// A `postgres` store is a fleet's: it needs the `fleet` section (whose key tells fleets
/// apart in one database), and a `fleet` needs a `postgres` store to share.
pub(crate) fn fleet_rules(root: &Value, r: &mut Report) {
    let postgres = root
        .get("store")
        .and_then(|s| s.get("kind"))
        .is_some_and(|k| k == "postgres");
    let fleet = root.get("fleet").is_some_and(|f| !f.is_null());
    if postgres && !fleet {
        let at = JsonPath(vec![Seg::Key("store".into())]);
        r.problem(
            &at,
            "a postgres store is a fleet's: add a `fleet` section with the fleet's shared `key`",
        );
    }
    if fleet && !postgres {
        let at = JsonPath(vec![Seg::Key("fleet".into())]);
        r.problem(
            &at,
            "a fleet shares a database: set `store` to {\"kind\": \"postgres\", \"url\": …}",
        );
    }
}

/// Profiles: names usable in a URL query (`/mcp?profile=NAME`), patterns that compile,
/// and a warning for a server no block defines (it selects nothing).
pub(crate) fn profile_rules(root: &Value, r: &mut Report) {
    let Some(Value::Object(profiles)) = root.get("profiles") else {
        return;
    };
    let servers = root.get("mcp_servers").and_then(Value::as_object);
    for (name, profile) in profiles {
        let base = JsonPath(vec![Seg::Key("profiles".into()), Seg::Key(name.clone())]);
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            r.key_problem(
                &base,
                format!(
                    "profile name {} must match ^[A-Za-z0-9_-]+$",
                    Value::String(name.clone())
                ),
            );
        }
        let at = |k: &str, i: usize| {
            let mut p = base.clone();
            p.0.push(Seg::Key(k.to_owned()));
            p.0.push(Seg::Index(i));
            p
        };
        for key in ["tools", "exclude"] {
            let Some(Value::Array(patterns)) = profile.get(key) else {
                continue;
            };
            for (i, p) in patterns.iter().enumerate() {
                if let Some(Err(e)) = p.as_str().map(super::profile::name_glob) {
                    r.problem(&at(key, i), format!("is not a valid glob pattern: {e}"));
                }
            }
        }
        if let Some(Value::Array(names)) = profile.get("servers") {
            for (i, s) in names.iter().enumerate() {
                if let Some(s) = s
                    .as_str()
                    .filter(|s| servers.is_none_or(|m| !m.contains_key(*s)))
                {
                    r.warn(
                        &at("servers", i),
                        format_args!("no MCP server named {s:?}; it selects nothing"),
                    );
                }
            }
        }
    }
}

/// Guards: unique names, at least one limit in an enabled rule, patterns that compile, time
/// zones that exist, and a warning for a server no block defines (it matches nothing).
pub(crate) fn guard_rules(root: &Value, r: &mut Report) {
    let Some(Value::Array(rules)) = root.get("guards") else {
        return;
    };
    let servers = root.get("mcp_servers").and_then(Value::as_object);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, rule) in rules.iter().enumerate() {
        let base = JsonPath(vec![Seg::Key("guards".into()), Seg::Index(i)]);
        let at = |k: &str| {
            let mut p = base.clone();
            p.0.push(Seg::Key(k.to_owned()));
            p
        };
        let Value::Object(m) = rule else { continue };
        match m.get("name").and_then(Value::as_str) {
            None => r.problem(
                &base,
                "needs a \"name\" (its counters and metrics go by it)",
            ),
            Some(name) => {
                if let Some(first) = seen.insert(name, i) {
                    r.problem(
                        &at("name"),
                        format!(
                            "{name:?} is also the name of guards[{first}]; each rule needs its own"
                        ),
                    );
                }
            }
        }
        let enabled = m.get("enabled") != Some(&Value::Bool(false));
        let limits = ["rate", "daily", "concurrency", "loop"];
        if enabled
            && !limits
                .iter()
                .any(|k| m.get(*k).is_some_and(|v| !v.is_null()))
        {
            r.problem(
                &base,
                "holds no limit: give it one or more of \"rate\", \"daily\", \"concurrency\", \"loop\" (or \"enabled\": false)",
            );
        }
        if let Some(Value::Array(patterns)) = m.get("tools") {
            for (j, p) in patterns.iter().enumerate() {
                if let Some(Err(e)) = p.as_str().map(super::profile::name_glob) {
                    let mut at = at("tools");
                    at.0.push(Seg::Index(j));
                    r.problem(&at, format!("is not a valid glob pattern: {e}"));
                }
            }
        }
        if let Some(tz) = m
            .get("daily")
            .and_then(|d| d.get("time_zone"))
            .and_then(Value::as_str)
        {
            if let Err(e) = jiff::tz::TimeZone::get(tz) {
                let mut at = at("daily");
                at.0.push(Seg::Key("time_zone".into()));
                r.problem(
                    &at,
                    format!("{tz:?} is no time zone this system knows (an IANA name such as \"Europe/Berlin\" or \"UTC\"): {e}"),
                );
            }
        }
        if let Some(Value::Array(names)) = m.get("servers") {
            for (j, s) in names.iter().enumerate() {
                if let Some(s) = s
                    .as_str()
                    .filter(|s| servers.is_none_or(|m| !m.contains_key(*s)))
                {
                    let mut at = at("servers");
                    at.0.push(Seg::Index(j));
                    r.warn(
                        &at,
                        format_args!("no MCP server named {s:?}; it matches nothing"),
                    );
                }
            }
        }
    }
}

/// A server's `scope` with what it needs: a stdio server (one HTTP endpoint serves
/// everyone), no `cwd` of its own (each instance runs in its workspace), and absolute
/// `roots` (a scoped server's may start at `${WORKSPACE}`).
fn scope_rules(m: &Map<String, Value>, base: &JsonPath, http: bool, r: &mut Report) {
    let at = |k: &str| {
        let mut p = base.clone();
        p.0.push(Seg::Key(k.to_owned()));
        p
    };
    let scoped = super::model::names_scoped(m.get("scope"));
    if scoped && http {
        r.problem(
            &at("scope"),
            "only stdio servers (\"command\") have instances; an HTTP server is shared",
        );
    }
    if scoped && m.get("cwd").is_some_and(|c| !c.is_null()) {
        r.problem(
            &at("cwd"),
            "a scoped server runs in the workspace of each instance; use ${WORKSPACE} in args",
        );
    }
    let workspace = format!("${{{}}}", super::model::WORKSPACE_VAR);
    if let Some(Value::Array(roots)) = m.get("roots") {
        for (i, root) in roots.iter().enumerate() {
            let Some(path) = root.as_str() else { continue };
            if !(path.starts_with('/') || scoped && path.starts_with(&workspace)) {
                let mut p = at("roots");
                p.0.push(Seg::Index(i));
                r.problem(&p, format!("expected an absolute path, found {root}"));
            }
        }
    }
}

/// What a schema cannot express: server names, one MCP server block's fields together, and
/// values that could never be handed to a program (NUL bytes, `=` in variable names).
pub(crate) fn server_rules(root: &Value, r: &mut Report) {
    if let Value::Object(top) = root {
        env_rules(top, &JsonPath::default(), r);
    }
    let Some(Value::Object(servers)) = root.get("mcp_servers") else {
        return;
    };
    let tcp = root
        .get("listen")
        .and_then(|l| l.get("tcp"))
        .and_then(Value::as_str);
    for (name, server) in servers {
        let base = JsonPath(vec![Seg::Key("mcp_servers".into()), Seg::Key(name.clone())]);
        if let Some(msg) = check_server_name(name) {
            r.problem(&base, msg);
        }
        if let Value::Object(m) = server {
            one_server(m, &base, r);
            if let (Some(url), Some(tcp)) = (m.get("url").and_then(Value::as_str), tcp) {
                if is_own_listener(url, tcp) {
                    let mut at = base.clone();
                    at.0.push(Seg::Key("url".into()));
                    r.problem(
                        &at,
                        format!(
                            "is this daemon's own listener (listen.tcp {tcp}): toolhost cannot \
                             be an upstream server of itself (its tools are already served)"
                        ),
                    );
                }
            }
        }
    }
}

/// Whether `url` reaches the TCP listener `tcp` (`host:port`, as `listen.tcp` spells it):
/// the same port, and the same host, or a loopback host when the listener is on loopback or
/// on every address (`0.0.0.0`, `::`). Config validation refuses such an upstream, and
/// `toolhost import` leaves such an entry out: it is toolhost itself.
pub(crate) fn is_own_listener(url: &str, tcp: &str) -> bool {
    let Ok(url) = url::Url::parse(url) else {
        return false;
    };
    let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
        return false;
    };
    let Some((lhost, lport)) = tcp.rsplit_once(':') else {
        return false;
    };
    if lport.parse::<u16>().ok() != Some(port) {
        return false;
    }
    let lhost = lhost.trim_start_matches('[').trim_end_matches(']');
    let loopback = |h: &str| {
        h.eq_ignore_ascii_case("localhost")
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    let host = match host {
        url::Host::Domain(d) => d.to_owned(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    };
    let every = lhost.is_empty()
        || lhost
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
    host.eq_ignore_ascii_case(lhost) || (loopback(&host) && (loopback(lhost) || every))
}

fn one_server(m: &Map<String, Value>, base: &JsonPath, r: &mut Report) {
    let at = |k: &str| {
        let mut p = base.clone();
        p.0.push(Seg::Key(k.to_owned()));
        p
    };
    let present = |k: &str| m.get(k).is_some_and(|x| !x.is_null());
    let (command, url) = (present("command"), present("url"));
    match (command, url) {
        (true, true) => r.problem(
            base,
            "has both \"command\" and \"url\"; a server is either a stdio process (command) \
             or a streamable HTTP endpoint (url), never both",
        ),
        (false, false) => r.problem(
            base,
            "needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)",
        ),
        _ => {}
    }
    if let Some(t) = m.get("type").and_then(Value::as_str) {
        let problem = match t.to_ascii_lowercase().as_str() {
            "stdio" if url && !command => Some("is \"stdio\" but the server has a \"url\""),
            "http" | "streamable-http" | "streamable_http" | "streamablehttp"
                if command && !url =>
            {
                Some("is an HTTP type but the server has a \"command\"")
            }
            "sse" if command && !url => Some("is \"sse\" but the server has a \"command\""),
            "stdio" | "http" | "streamable-http" | "streamable_http" | "streamablehttp" | "sse" => {
                None
            }
            _ => Some("expected \"stdio\", \"http\" or \"sse\""),
        };
        if let Some(p) = problem {
            r.problem(&at("type"), p);
        }
    }
    if url && !command {
        for k in ["args", "env", "cwd"] {
            if present(k) {
                r.warn(&at(k), "ignored: only stdio servers (\"command\") use it");
            }
        }
    }
    scope_rules(m, base, url && !command, r);
    if command && !url && present("headers") {
        r.warn(
            &at("headers"),
            "ignored: only HTTP servers (\"url\") use it",
        );
    }

    // exec(2) takes C strings: a NUL byte can never reach the program, and `=` ends a
    // variable's name.
    const NUL: &str = "contains a NUL byte, which cannot be passed to a program";
    for k in ["command", "cwd"] {
        if m.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| s.contains('\0'))
        {
            r.problem(&at(k), NUL);
        }
    }
    if let Some(Value::Array(args)) = m.get("args") {
        for (i, a) in args.iter().enumerate() {
            if a.as_str().is_some_and(|s| s.contains('\0')) {
                let mut p = at("args");
                p.0.push(Seg::Index(i));
                r.problem(&p, NUL);
            }
        }
    }
    // Header names and values the HTTP client would refuse at connect time.
    if let Some(Value::Object(headers)) = m.get("headers") {
        for (k, v) in headers {
            let mut p = at("headers");
            p.0.push(Seg::Key(k.clone()));
            if !k.is_empty() && http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                r.problem(&p, "is not a valid HTTP header name");
            } else if v
                .as_str()
                .is_some_and(|v| http::HeaderValue::from_str(v).is_err())
            {
                r.problem(
                    &p,
                    "is not a valid HTTP header value (control characters such as line \
                     breaks are not allowed)",
                );
            }
        }
    }
    env_rules(m, base, r);
    if m.get("enabled") == Some(&Value::Bool(true)) && m.get("disabled") == Some(&Value::Bool(true))
    {
        r.problem(
            &at("disabled"),
            "contradicts \"enabled\": true; keep one of them (disabled: true is the same as \
             enabled: false)",
        );
    }
}

/// How an `env_passthrough` pattern is read: a glob over the whole variable name,
/// case-sensitive, `*` any run of characters, `?` one, `[...]` a class, `{a,b}` either.
/// The one reading: config checks patterns with it, and every child's environment is
/// built with what [`env_patterns`] compiles.
fn env_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern).literal_separator(false).build()
}

/// `patterns` compiled into one matcher. Patterns that do not compile were refused when
/// the config loaded; should one get here anyway it matches nothing (and is logged).
pub fn env_patterns(patterns: &[String]) -> GlobSet {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        match env_glob(p) {
            Ok(g) => {
                set.add(g);
            }
            Err(e) => tracing::warn!("env_passthrough pattern {p:?} ignored: {e}"),
        }
    }
    set.build().unwrap_or_else(|e| {
        tracing::warn!("env_passthrough patterns ignored: {e}");
        GlobSet::empty()
    })
}

/// The characters a pattern may hold: those of variable names people use, and the glob
/// syntax [`env_glob`] reads.
fn pattern_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_.-*?[]{},!^".contains(&b)
}

/// `env` and `env_passthrough` of the top level or a server: names and values that
/// exec(2) can take, and patterns that compile and can match a variable name.
fn env_rules(m: &Map<String, Value>, base: &JsonPath, r: &mut Report) {
    const NUL: &str = "contains a NUL byte, which cannot be passed to a program";
    if let Some(Value::Array(patterns)) = m.get("env_passthrough") {
        for (i, p) in patterns.iter().enumerate() {
            let Some(p) = p.as_str().filter(|p| !p.is_empty()) else {
                continue; // the schema reports non-strings and empty strings
            };
            let mut at = base.clone();
            at.0.push(Seg::Key("env_passthrough".into()));
            at.0.push(Seg::Index(i));
            if !p.bytes().all(pattern_char) {
                r.problem(
                    &at,
                    format!(
                        "expected a variable name or a glob pattern such as \"*_PROXY\" \
                         (letters, digits, _ . - and the glob syntax * ? [...] {{a,b}}), found {}",
                        Value::String(p.to_owned())
                    ),
                );
            } else if let Err(e) = env_glob(p) {
                r.problem(
                    &at,
                    format!(
                        "is not a valid glob pattern ({}): {}",
                        e.kind(),
                        Value::String(p.to_owned())
                    ),
                );
            }
        }
    }
    if let Some(Value::Object(env)) = m.get("env") {
        for (k, v) in env {
            let mut p = base.clone();
            p.0.push(Seg::Key("env".into()));
            p.0.push(Seg::Key(k.clone()));
            if k.contains('\0') {
                r.problem(&p, format!("the variable name {NUL}"));
            } else if k.contains('=') {
                r.problem(&p, "environment variable names cannot contain \"=\"");
            }
            if v.as_str().is_some_and(|s| s.contains('\0')) {
                r.problem(&p, NUL);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::check::{check_root, Checked};
    use serde_json::{json, Value};
    use std::collections::HashMap;

    fn run(v: Value) -> Checked {
        check_root(&v, &HashMap::new())
    }

    fn problems(v: Value) -> Vec<String> {
        run(v).problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn env_patterns_match_whole_names() {
        let matches = |p: &str, name: &str| super::env_patterns(&[p.to_owned()]).is_match(name);
        let yes = [
            ("HTTPS_PROXY", "HTTPS_PROXY"),
            ("*_PROXY", "HTTP_PROXY"),
            ("*_PROXY", "NO_PROXY"),
            ("NODE_*", "NODE_EXTRA_CA_CERTS"),
            ("GO?ATH", "GOPATH"),
            ("*", "ANY"),
            ("A*B*C", "AxxBxxC"),
            ("{HTTP,HTTPS}_PROXY", "HTTPS_PROXY"),
            ("[A-C]_X", "B_X"),
        ];
        for (p, t) in yes {
            assert!(matches(p, t), "{p} should match {t}");
        }
        let no = [
            ("*_PROXY", "HTTP_PROXY_X"),
            ("HTTPS_PROXY", "https_proxy"),
            ("NODE_*", "XNODE_A"),
            ("GO?ATH", "GOATH"),
            ("A*B*C", "AxxBxx"),
            ("{HTTP,HTTPS}_PROXY", "FTP_PROXY"),
            ("[!A-C]_X", "B_X"),
        ];
        for (p, t) in no {
            assert!(!matches(p, t), "{p} should not match {t}");
        }
    }

    #[test]
    fn env_passthrough_patterns_that_do_not_compile_are_config_errors() {
        assert_eq!(
            problems(json!({
                "env_passthrough": ["{HTTP,HTTPS}_PROXY", "[A-"],
                "mcp_servers": {"s": {"command": "x", "env_passthrough": ["[z-a]_X"]}}
            })),
            vec![
                "env_passthrough[1]: is not a valid glob pattern (unclosed character class; missing ']'): \"[A-\"",
                "mcp_servers.s.env_passthrough[0]: is not a valid glob pattern (invalid range; 'z' > 'a'): \"[z-a]_X\"",
            ]
        );
    }

    #[test]
    fn sandbox_sections_refuse_typos_and_relative_paths() {
        let c = run(json!({
            "sandbox": {"polcy": "read-only", "writable": ["/ok", "rel"]},
            "approval": {"sandboxed_commands": "yes"},
            "mcp_servers": {"a": {"command": "x", "sandbox": {"policy": "bad", "writable": ["r"]}}},
        }));
        let problems: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            vec![
                "sandbox.writable[1]: expected an absolute path, found \"rel\"",
                "approval.sandboxed_commands: expected one of \"ask\", \"auto\", found \"yes\"",
                "mcp_servers.a.sandbox.policy: expected one of \"off\", \"workspace-write\", \"read-only\", found \"bad\"",
                "mcp_servers.a.sandbox.writable[0]: expected an absolute path, found \"r\"",
                "sandbox.polcy: unknown key (did you mean \"policy\"?); a misspelt key at the top level or in \"listen\", \"approval\" or a \"sandbox\" section would silently run with weaker defaults",
            ]
        );
        assert!(c.config.is_none());
        assert!(problems_of_ok().is_empty());
    }

    fn problems_of_ok() -> Vec<String> {
        problems(
            json!({"sandbox": {"policy": "workspace-write", "network": "deny",
            "writable": ["/var/cache/x"], "required": false,
            "tools": {"t": {"network": true, "writable": true}}},
            "approval": {"sandboxed_commands": "auto"}}),
        )
    }

    #[test]
    fn an_upstream_at_our_own_listener_is_refused() {
        for (url, tcp, own) in [
            ("http://127.0.0.1:7311/mcp", "127.0.0.1:7311", true),
            ("http://localhost:7311/mcp", "127.0.0.1:7311", true),
            ("http://[::1]:7311/mcp", "0.0.0.0:7311", true),
            ("http://10.1.2.3:7311/mcp", "10.1.2.3:7311", true),
            ("http://127.0.0.1:7312/mcp", "127.0.0.1:7311", false),
            ("http://example.com:7311/mcp", "127.0.0.1:7311", false),
            ("http://localhost/mcp", "127.0.0.1:80", true),
        ] {
            assert_eq!(super::is_own_listener(url, tcp), own, "{url} {tcp}");
        }
        let p = problems(json!({"listen": {"tcp": "127.0.0.1:7311"},
            "mcp_servers": {"me": {"url": "http://localhost:7311/mcp"}}}));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("mcp_servers.me.url: is this daemon's own listener"),
            "{p:?}"
        );
    }

    #[test]
    fn empty_server_name_is_an_error() {
        let p = problems(json!({"mcp_servers": {"": {"command": "x"}}}));
        assert_eq!(p, vec!["mcp_servers[\"\"]: server names must not be empty"]);
    }

    #[test]
    fn pasted_blocks_with_type_are_accepted() {
        let c = run(json!({"mcp_servers": {"d": {"command": "x", "mcpx": 1},
            "a": {"type": "stdio", "command": "x"},
            "b": {"type": "http", "url": "https://h/mcp"},
            "c": {"type": "sse", "url": "https://h/sse"},
            "e": {"type": "SSE", "command": "x"}
        }}));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        // The legacy HTTP+SSE transport is accepted (issue 25), for a `url` only.
        assert_eq!(
            p,
            vec!["mcp_servers.e.type: is \"sse\" but the server has a \"command\""]
        );
        assert_eq!(c.warnings, vec!["mcp_servers.d.mcpx: unknown key"]);
        // `type` is part of the model (documented by the schema), not an unknown key.
        let c = run(json!({"mcp_servers": {"a": {"type": "stdio", "command": "x"}}}));
        let server = &c.config.unwrap().mcp_servers["a"];
        assert_eq!(server.transport_type.as_deref(), Some("stdio"));
    }

    #[test]
    fn transport_specific_fields_warn() {
        let c = run(json!({"mcp_servers": {
            "a": {"url": "https://h/mcp", "args": ["x"]},
            "b": {"command": "x", "headers": {"A": "b"}}
        }}));
        assert_eq!(
            c.warnings,
            vec![
                "mcp_servers.a.args: ignored: only stdio servers (\"command\") use it",
                "mcp_servers.b.headers: ignored: only HTTP servers (\"url\") use it",
            ]
        );
    }

    #[test]
    fn scopes_belong_to_stdio_servers_that_run_in_their_workspace() {
        let c = run(json!({"mcp_servers": {
            "a": {"url": "https://h/mcp", "scope": "per_session"},
            "b": {"command": "x", "scope": "per_workspace", "cwd": "/w",
                  "roots": ["${WORKSPACE}/src", "rel"]},
            "c": {"command": "x", "max_instances": 2, "roots": ["/abs", "${WORKSPACE}"]},
            "d": {"command": "x", "scope": "per_workspace", "max_instances": 2, "args": ["${WORKSPACE}"]}
        }}));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec![
                "mcp_servers.a.scope: only stdio servers (\"command\") have instances; an HTTP server is shared",
                "mcp_servers.b.cwd: a scoped server runs in the workspace of each instance; use ${WORKSPACE} in args",
                "mcp_servers.b.roots[1]: expected an absolute path, found \"rel\"",
                "mcp_servers.c.roots[1]: expected an absolute path, found \"${WORKSPACE}\"",
            ]
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn values_no_program_can_take_are_refused() {
        let p = problems(json!({"mcp_servers": {
            "a": {"command": "x\0y", "args": ["ok", "b\0"], "cwd": "/w\0",
                  "env": {"A=B": "1", "C": "v\0", "D\0": "1"}},
            "b": {"command": ""}
        }}));
        let nul = "contains a NUL byte, which cannot be passed to a program";
        assert_eq!(
            p,
            vec![
                format!("mcp_servers.a.command: {nul}"),
                format!("mcp_servers.a.args[1]: {nul}"),
                format!("mcp_servers.a.cwd: {nul}"),
                "mcp_servers.a.env[\"A=B\"]: environment variable names cannot contain \"=\""
                    .to_owned(),
                format!("mcp_servers.a.env.C: {nul}"),
                format!("mcp_servers.a.env[\"D\\u0000\"]: the variable name {nul}"),
                "mcp_servers.b.command: expected a non-empty string, found \"\"".to_owned(),
            ]
        );
    }

    #[test]
    fn header_names_and_values_must_be_valid_http() {
        let p = problems(
            json!({"mcp_servers": {"h": {"url": "https://h/mcp", "headers": {
                "Bad Name": "x", "X-Ok": "line\r\nInjected: 1", "Authorization": "Bearer t"
            }}}}),
        );
        assert_eq!(
            p,
            vec![
                "mcp_servers.h.headers[\"Bad Name\"]: is not a valid HTTP header name",
                "mcp_servers.h.headers.X-Ok: is not a valid HTTP header value (control characters such as line breaks are not allowed)",
            ]
        );
    }
}
