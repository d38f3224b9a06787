//! Checking one config: the schema derived from the model ([`super::schema`]) decides
//! types and values, [`super::validate`] adds the rules a schema cannot say, and
//! deserialising with `serde_ignored` finds the unknown keys. Every problem is collected
//! (each with its JSON path), not just the first.

use std::collections::HashMap;

use serde_json::Value;

use super::error::Problem;
use super::path::{describe, segments, suggest, JsonPath, Seg};
use super::schema;
use super::validate::{server_rules, Report};
use super::Config;

/// The result of validating one config.
pub(crate) struct Checked {
    /// The normalised JSON: nulls of known fields dropped ("use the default"), environment
    /// strings converted to the number/boolean the schema asks for. Only the unit tests
    /// look at it; callers use `config`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub value: Value,
    /// The typed config; `Some` exactly when there are no problems.
    pub config: Option<Config>,
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

/// Validates `root` (an object) against the schema derived from the model, then the rules a
/// schema cannot say (one MCP server block's fields together), then deserialises it,
/// collecting the keys the model ignores as "unknown key" warnings.
///
/// `env_origin` maps formatted paths that were set from the environment to the variable's
/// name: those values are strings and are converted to the expected number/boolean, and
/// messages about them name the variable. Problems come in file order, a block's own
/// problems after those of its fields.
pub(crate) fn check_root(root: &Value, env_origin: &HashMap<String, String>) -> Checked {
    if root.as_object().is_some_and(serde_json::Map::is_empty) {
        return empty();
    }
    check_against_schema(root, env_origin)
}

fn check_against_schema(root: &Value, env_origin: &HashMap<String, String>) -> Checked {
    let mut value = root.clone();
    normalise(
        &mut value,
        Some(schema::schema()),
        &mut JsonPath::default(),
        env_origin,
    );
    let mut r = Report {
        problems: Vec::new(),
        warnings: Vec::new(),
        env_origin,
    };
    let bad = schema_problems(&value, &mut r);
    server_rules(&value, &mut r);
    super::validate::sandbox_rules(&value, &mut r);
    super::validate::profile_rules(&value, &mut r);
    super::validate::fleet_rules(&value, &mut r);
    super::validate::guard_rules(&value, &mut r);
    let mut order = HashMap::new();
    post_order(&value, &mut JsonPath::default(), &mut order);
    r.problems
        .sort_by_key(|p| order.get(&p.path).copied().unwrap_or(usize::MAX));

    // Unknown keys are what the model ignores; values that failed validation are pruned
    // first so that they can still be found when the config is invalid.
    let input = if r.problems.is_empty() {
        value.clone()
    } else {
        let mut pruned = value.clone();
        for path in bad.iter().rev() {
            remove(&mut pruned, path);
        }
        pruned
    };
    let mut unknown = Vec::new();
    let typed: Result<Config, _> =
        serde_ignored::deserialize(input, |p| unknown.push(segments(&p)));
    for path in unknown {
        let Some((Seg::Key(key), parent)) = path.split_last() else {
            continue;
        };
        let hint = schema::at(parent)
            .and_then(|node| suggest(key, schema::fields(node)))
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        let at = JsonPath(path.clone());
        if let Some(why) = strict_parent(parent) {
            r.key_problem(&at, format_args!("unknown key{hint}; {why}"));
        } else {
            r.warn(&at, format_args!("unknown key{hint}"));
        }
    }
    let config = match typed {
        Ok(mut c) if r.problems.is_empty() => {
            fold_disabled(&mut c);
            Some(c)
        }
        Ok(_) => None,
        Err(e) => {
            if r.problems.is_empty() {
                r.problems.push(Problem::new(
                    "",
                    format!("config does not fit the model: {e}"),
                ));
            }
            None
        }
    };
    Checked {
        value,
        config,
        problems: r.problems,
        warnings: r.warnings,
    }
}

/// Why an unknown key is an error there and a warning elsewhere.
const STRICT_WHY: &str = "a misspelt key at the top level or in \"listen\", \"approval\" or a \
                          \"sandbox\" section would silently run with weaker defaults";
/// Why an unknown key in a guard is an error.
const GUARD_WHY: &str = "a misspelt key in a guard would leave the calls it guards unlimited";

/// Why an unknown key under `parent` is an error, if it is: at the top level (a misspelt
/// `approval` would drop the whole policy) and directly inside `listen` and `approval`
/// (security settings). Elsewhere unknown keys stay warnings, so configs pasted from
/// other tools keep working. Decided by position, so sections added to the model later
/// are covered without a list to keep up to date.
fn strict_parent(parent: &[Seg]) -> Option<&'static str> {
    // Anywhere in a guard: a misspelt limit (`rat`) would leave calls unguarded.
    if matches!(parent.first(), Some(Seg::Key(k)) if k == "guards") {
        return Some(GUARD_WHY);
    }
    // Anywhere inside a `sandbox` section, too: a typo (`polcy`) would leave it off.
    let in_sandbox = parent
        .iter()
        .any(|s| matches!(s, Seg::Key(k) if k == "sandbox"));
    let strict = in_sandbox
        || match parent {
            [] => true,
            [Seg::Key(k)] => k == "listen" || k == "approval",
            _ => false,
        };
    strict.then_some(STRICT_WHY)
}

/// The empty config (no file, or `{}`, and no overrides): the model's defaults, which break
/// no rule. It skips the schema, whose validator a daemon without config would otherwise
/// compile and keep for its life (about 2 MB of code and heap).
fn empty() -> Checked {
    let value = Value::Object(serde_json::Map::new());
    match serde_json::from_value::<Config>(value.clone()) {
        Ok(config) => Checked {
            value,
            config: Some(config),
            problems: Vec::new(),
            warnings: Vec::new(),
        },
        Err(e) => Checked {
            value,
            config: None,
            problems: vec![Problem::new(
                "",
                format!("internal error: the empty config does not fit the model: {e}"),
            )],
            warnings: Vec::new(),
        },
    }
}

/// `disabled: true` (Cline, Claude Code) means `enabled: false`; folded here so the rest
/// of the daemon reads only `enabled`.
fn fold_disabled(c: &mut Config) {
    for s in c.mcp_servers.values_mut() {
        if s.disabled {
            s.enabled = false;
            s.disabled = false;
        }
    }
}

/// Drops nulls of known fields and converts environment strings, guided by the schema.
fn normalise(
    v: &mut Value,
    node: Option<&'static Value>,
    path: &mut JsonPath,
    env_origin: &HashMap<String, String>,
) {
    match v {
        Value::Object(m) => {
            if let Some(node) = node {
                m.retain(|k, x| !(x.is_null() && schema::is_field(node, k)));
            }
            for (k, x) in m.iter_mut() {
                path.0.push(Seg::Key(k.clone()));
                normalise(x, node.and_then(|n| schema::child(n, k)), path, env_origin);
                path.0.pop();
            }
        }
        Value::Array(items) => {
            let item = node.and_then(schema::item);
            for (i, x) in items.iter_mut().enumerate() {
                path.0.push(Seg::Index(i));
                normalise(x, item, path, env_origin);
                path.0.pop();
            }
        }
        // JSON Schema counts 5.0 as an integer, serde does not: agree with the schema.
        Value::Number(n) if n.is_f64() => {
            let is_int = node.is_some_and(|node| schema::types(node).contains(&"integer"));
            if let Some(f) = n.as_f64().filter(|f| is_int && f.fract() == 0.0) {
                if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                    *v = Value::from(f as u64);
                }
            }
        }
        Value::String(s) if !env_origin.is_empty() => {
            let Some(node) = node else { return };
            if !env_origin.contains_key(&path.to_string()) {
                return;
            }
            let types = schema::types(node);
            let text = s.trim().to_ascii_lowercase();
            if types.contains(&"integer") {
                if let Ok(n) = text.parse::<u64>() {
                    *v = Value::from(n);
                }
            } else if types.contains(&"boolean") {
                match text.as_str() {
                    "true" | "1" => *v = Value::Bool(true),
                    "false" | "0" => *v = Value::Bool(false),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// The schema's verdict, one problem per JSON path, worded from the schema node there.
/// Returns the failing paths, sorted.
fn schema_problems(value: &Value, r: &mut Report) -> Vec<Vec<Seg>> {
    use jsonschema::error::ValidationErrorKind as K;
    let validator = match schema::validator() {
        Ok(v) => v,
        Err(e) => {
            r.problems.push(Problem::new(
                "",
                format!("internal error: the config schema does not compile: {e}"),
            ));
            return Vec::new();
        }
    };
    let mut bad: Vec<Vec<Seg>> = Vec::new();
    for err in validator.iter_errors(value) {
        let mut segs = locate(value, err.instance_path());
        let message = match err.kind() {
            K::PropertyNames { error } => {
                let key = error.instance().as_str().unwrap_or_default();
                segs.push(Seg::Key(key.to_owned()));
                if key.is_empty() {
                    "keys must not be empty".to_owned()
                } else {
                    format!("invalid key: {error}")
                }
            }
            K::Minimum { limit } if err.instance().as_u64().is_some() => {
                format!(
                    "must be at least {limit}, found {}",
                    describe(err.instance())
                )
            }
            _ => match schema::at(&segs) {
                Some(node) => {
                    // A misspelt enum value (`"sesion"`) gets the likely one named; short
                    // values need a closer match than keys (`"later"` is no `"eager"`).
                    let hint = err
                        .instance()
                        .as_str()
                        .and_then(|s| {
                            suggest(s, schema::string_constants(node)).filter(|k| {
                                strsim::levenshtein(&s.to_ascii_lowercase(), k) <= k.len() / 3
                            })
                        })
                        .map(|s| format!(" (did you mean {s:?}?)"))
                        .unwrap_or_default();
                    format!(
                        "expected {}, found {}{hint}",
                        schema::expected(node),
                        describe(err.instance())
                    )
                }
                None => err.to_string(),
            },
        };
        if !bad.contains(&segs) {
            r.problem(&JsonPath(segs.clone()), message);
            bad.push(segs);
        }
    }
    bad.sort();
    bad
}

/// The path of a schema error's instance as our segments (a numeric key of an object stays
/// a key).
fn locate(value: &Value, location: &jsonschema::paths::Location) -> Vec<Seg> {
    use jsonschema::paths::LocationSegment as L;
    let mut cur = Some(value);
    let mut out = Vec::new();
    for seg in location {
        let seg = match (cur, seg) {
            (Some(Value::Array(_)), L::Index(i)) => Seg::Index(i),
            (_, L::Index(i)) => Seg::Key(i.to_string()),
            (_, L::Property(p)) => Seg::Key(p.into_owned()),
        };
        cur = match (&seg, cur) {
            (Seg::Key(k), Some(Value::Object(m))) => m.get(k),
            (Seg::Index(i), Some(Value::Array(a))) => a.get(*i),
            _ => None,
        };
        out.push(seg);
    }
    out
}

/// Each path's position when children come before their parent.
fn post_order(v: &Value, path: &mut JsonPath, out: &mut HashMap<String, usize>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.0.push(Seg::Key(k.clone()));
                post_order(x, path, out);
                path.0.pop();
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                path.0.push(Seg::Index(i));
                post_order(x, path, out);
                path.0.pop();
            }
        }
        _ => {}
    }
    let n = out.len();
    out.entry(path.to_string()).or_insert(n);
}

/// Removes the value at `path` (no-op if absent; the root itself is kept).
fn remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parent {
        let next = match (seg, cur) {
            (Seg::Key(k), Value::Object(m)) => m.get_mut(k),
            (Seg::Index(i), Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (last, cur) {
        (Seg::Key(k), Value::Object(m)) => {
            m.shift_remove(k);
        }
        (Seg::Index(i), Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value) -> Checked {
        check_root(&v, &HashMap::new())
    }

    fn problems(v: Value) -> Vec<String> {
        run(v).problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_empty_config_skips_the_schema_and_checks_as_it_would_through_it() {
        let full = check_against_schema(&json!({}), &HashMap::new());
        assert!(full.problems.is_empty() && full.warnings.is_empty());
        let short = run(json!({}));
        assert!(short.problems.is_empty() && short.warnings.is_empty());
        assert_eq!(short.value, full.value);
        assert_eq!(short.config, full.config);
        assert!(short.config.is_some());
    }

    #[test]
    fn whole_floats_are_integers_as_in_json_schema() {
        let c = run(
            json!({"limits": {"max_output_bytes": 5.0, "default_timeout_ms": 1.5,
            "max_request_bytes": -2.0}}),
        );
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec![
                "limits.default_timeout_ms: expected a positive integer, found 1.5",
                "limits.max_request_bytes: expected a positive integer, found -2.0",
            ]
        );
        assert_eq!(c.value["limits"]["max_output_bytes"], json!(5));
    }

    #[test]
    fn wrong_type_names_the_path() {
        let p = problems(json!({"mcp_servers": {"fs": {"command": "x", "args": ["a", 3]}}}));
        assert_eq!(
            p,
            vec!["mcp_servers.fs.args[1]: expected a string, found 3"]
        );
    }

    #[test]
    fn all_problems_are_collected() {
        let p = problems(json!({
            "listen": {"socket_mode": "660x", "tcp": "7311"},
            "approval": {"mode": "lax", "tools": {"t": "exec"}},
            "limits": {"max_output_bytes": 0, "default_timeout_ms": -5},
            "mcp_servers": {
                "a b": {"command": "x"},
                "both": {"command": "x", "url": "https://h/mcp"},
                "none": {"args": []},
                "q": {"command": "x", "max_concurrency": 0, "approval": {"t": "admin"}}
            }
        }));
        let want = [
            "listen.socket_mode: expected an octal mode string such as \"0660\", found \"660x\"",
            "listen.tcp: expected \"host:port\" such as \"127.0.0.1:7311\", found \"7311\"",
            "approval.mode: expected one of \"auto\", \"strict\", \"read_only\", found \"lax\"",
            "approval.tools.t: expected one of \"read_only\", \"write\", \"command\", found \"exec\"",
            "limits.max_output_bytes: must be at least 1, found 0",
            "limits.default_timeout_ms: expected a positive integer, found -5",
            "mcp_servers[\"a b\"]: server name \"a b\" must match ^[A-Za-z0-9_-]+$ (it becomes part of tool names mcp_<server>_<tool>)",
            "mcp_servers.both: has both \"command\" and \"url\"; a server is either a stdio process (command) or a streamable HTTP endpoint (url), never both",
            "mcp_servers.none: needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)",
            "mcp_servers.q.max_concurrency: must be at least 1, found 0",
            "mcp_servers.q.approval.t: expected one of \"read_only\", \"write\", \"command\", found \"admin\"",
        ];
        assert_eq!(p, want);
    }

    #[test]
    fn lifecycle_keys_are_checked() {
        let ok =
            json!({"mcp_servers": {"q": {"command": "x", "start": "lazy", "idle_stop_s": 300}}});
        assert_eq!(problems(ok), Vec::<String>::new());
        let p = problems(json!({
            "mcp_servers": {"q": {"command": "x", "start": "later", "idle_stop_s": 0}}
        }));
        assert_eq!(
            p,
            [
                "mcp_servers.q.start: expected one of \"eager\", \"lazy\", found \"later\"",
                "mcp_servers.q.idle_stop_s: must be at least 1, found 0",
            ]
        );
    }

    #[test]
    fn unknown_keys_warn_with_a_hint() {
        let c = run(json!({
            "limits": {"max_output_byte": 1},
            "mcp_servers": {"fs": {"comand": "x", "command": "y", "foo": 1}}
        }));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(
            c.warnings,
            vec![
                "limits.max_output_byte: unknown key (did you mean \"max_output_bytes\"?)",
                "mcp_servers.fs.comand: unknown key (did you mean \"command\"?)",
                "mcp_servers.fs.foo: unknown key",
            ]
        );
        assert!(c.config.is_some());
    }

    /// A typo at the top level or in `listen`/`approval` would run with weaker defaults
    /// (no strict mode, a world-readable socket), so it refuses the config.
    #[test]
    fn unknown_keys_in_security_sections_are_errors() {
        let c = run(json!({
            "aproval": {"mode": "strict"},
            "listen": {"socket_mod": "0600"},
            "approval": {"mdoe": "strict", "tools": {"any_name": "write"}},
            "mcp_servers": {"fs": {"command": "y", "approval": {"whatever": "write"}}}
        }));
        let why = "a misspelt key at the top level or in \"listen\", \"approval\" or a \
                   \"sandbox\" section would silently run with weaker defaults";
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec![
                format!("aproval: unknown key (did you mean \"approval\"?); {why}"),
                format!("listen.socket_mod: unknown key (did you mean \"socket_mode\"?); {why}"),
                format!("approval.mdoe: unknown key (did you mean \"mode\"?); {why}"),
            ]
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(c.config.is_none());
    }

    #[test]
    fn disabled_folds_into_enabled_and_cannot_contradict_it() {
        let c = run(json!({"mcp_servers": {
            "a": {"command": "x", "disabled": true},
            "b": {"command": "x", "disabled": false},
            "c": {"command": "x", "enabled": true, "disabled": true}
        }}));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec![
                "mcp_servers.c.disabled: contradicts \"enabled\": true; keep one of them \
                 (disabled: true is the same as enabled: false)"
            ]
        );
        let c = run(json!({"mcp_servers": {
            "a": {"command": "x", "disabled": true},
            "b": {"command": "x", "disabled": false}
        }}));
        let cfg = c.config.unwrap();
        assert_eq!(
            (cfg.mcp_servers["a"].enabled, cfg.mcp_servers["b"].enabled),
            (false, true)
        );
        assert!(!cfg.mcp_servers["a"].disabled, "folded away");
    }

    #[test]
    fn env_passthrough_patterns_are_checked() {
        let c = run(json!({
            "env_passthrough": ["HTTPS_PROXY", "*_PROXY", "BAD NAME"],
            "env": {"A=B": "x"},
            "mcp_servers": {"s": {"command": "x", "env_passthrough": ["", "$HOME"]}}
        }));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec![
                "env_passthrough[2]: expected a variable name or a glob pattern such as \"*_PROXY\" (letters, digits, _ . - and the glob syntax * ? [...] {a,b}), found \"BAD NAME\"",
                "env[\"A=B\"]: environment variable names cannot contain \"=\"",
                "mcp_servers.s.env_passthrough[0]: expected a non-empty string, found \"\"",
                "mcp_servers.s.env_passthrough[1]: expected a variable name or a glob pattern such as \"*_PROXY\" (letters, digits, _ . - and the glob syntax * ? [...] {a,b}), found \"$HOME\"",
            ]
        );
    }

    #[test]
    fn nulls_mean_default_and_are_dropped() {
        let c = run(json!({"workspace": null, "limits": {"max_output_bytes": null}}));
        assert!(c.problems.is_empty());
        assert_eq!(c.value, json!({"limits": {}}));
    }

    #[test]
    fn env_strings_convert_only_when_env_var() {
        let origin = HashMap::from([(
            "limits.max_output_bytes".to_owned(),
            "TOOLHOST_LIMITS__MAX_OUTPUT_BYTES".to_owned(),
        )]);
        let c = check_root(
            &json!({"limits": {"max_output_bytes": "123", "max_request_bytes": "5"}}),
            &origin,
        );
        assert_eq!(c.value["limits"]["max_output_bytes"], json!(123));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            p,
            vec!["limits.max_request_bytes: expected a positive integer, found \"5\""]
        );
        let c = check_root(&json!({"limits": {"max_output_bytes": "x"}}), &origin);
        assert_eq!(
            c.problems[0].to_string(),
            "limits.max_output_bytes: expected a positive integer, found \"x\" (from TOOLHOST_LIMITS__MAX_OUTPUT_BYTES)"
        );
    }

    #[test]
    fn modes_hosts_urls() {
        let mode = |m: &str| problems(json!({"listen": {"socket_mode": m}})).is_empty();
        assert!(mode("0660") && mode("660") && mode("0o600"));
        assert!(!mode("0968") && !mode("66") && !mode("17777"));
        let tcp = |t: &str| problems(json!({"listen": {"tcp": t}})).is_empty();
        assert!(tcp("127.0.0.1:7311") && tcp("[::1]:1") && tcp("h:65535"));
        assert!(!tcp(":80") && !tcp("h:99999") && !tcp("h:65536"));
        let url = |u: &str| problems(json!({"providers": {"p": {"base_url": u}}})).is_empty();
        assert!(url("https://a/b") && url("http://h:1/x"));
        assert!(!url("ftp://a") && !url("https://") && !url("https:///x") && !url("https://a b"));
    }

    /// Every field of the model, filled in and serialised, passes the unknown-key check and
    /// round-trips; and the schema declares exactly the keys the model writes. A field added
    /// to the model is covered here without editing any table.

    #[test]
    fn every_model_field_is_known_without_a_table() {
        use crate::config::{Listen, McpServer, Provider};
        let mut server = McpServer {
            transport_type: Some("stdio".into()),
            command: Some("x".into()),
            args: vec!["a".into()],
            cwd: Some("/w".into()),
            include_tools: vec!["t".into()],
            exclude_tools: vec!["u".into()],
            idle_stop_s: Some(60),
            roots: vec!["/r".into()],
            checkpoint: Some(true),
            auth: Some(crate::config::McpAuth {
                kind: crate::config::McpAuthKind::Oauth,
                client_id: Some("c".into()),
                client_secret: Some("s".into()),
                scopes: vec!["r".into()],
                client_metadata_url: Some("https://m/c.json".into()),
            }),
            ..McpServer::default()
        };
        server.env.insert("A".into(), "1".into());
        server.headers.insert("H".into(), "v".into());
        server
            .approval
            .insert("t".into(), crate::protocol::ApprovalClass::Write);
        let mut config = Config {
            schema: Some("https://example.com/schema.json".into()),
            workspace: Some("/w".into()),
            data_dir: Some("/d".into()),
            listen: Listen {
                socket: Some("/s.sock".into()),
                socket_mode: Some("0660".into()),
                tcp: Some("127.0.0.1:1".into()),
                token_file: Some("/t".into()),
                ..Listen::default()
            },
            ..Config::default()
        };
        config.providers.insert(
            "p".into(),
            Provider {
                base_url: Some("https://h/v1".into()),
                api_key: Some("k".into()),
            },
        );
        config
            .approval
            .tools
            .insert("t".into(), crate::protocol::ApprovalClass::ReadOnly);
        config.mcp_servers.insert("s".into(), server);
        let v = serde_json::to_value(&config).unwrap();
        let c = run(v.clone());
        assert_eq!(c.problems, vec![]);
        // (The only warning: a stdio server with headers, which this test sets on purpose.)
        assert_eq!(
            c.warnings,
            vec!["mcp_servers.s.headers: ignored: only HTTP servers (\"url\") use it"]
        );
        assert_eq!(c.config, Some(config));

        fn same_keys(v: &Value, node: &'static Value, path: &str) {
            let Value::Object(m) = v else { return };
            let mut declared = schema::fields(node);
            if !declared.is_empty() {
                let mut written: Vec<&str> = m.keys().map(String::as_str).collect();
                declared.sort_unstable();
                written.sort_unstable();
                assert_eq!(declared, written, "at {path:?}");
            }
            for (k, x) in m {
                let child = schema::child(node, k).unwrap();
                same_keys(x, child, &format!("{path}.{k}"));
            }
        }
        same_keys(&v, schema::schema(), "");
    }

    #[test]
    fn empty_map_keys_are_refused() {
        let p = problems(json!({"approval": {"tools": {"": "write"}},
            "mcp_servers": {"a": {"command": "x", "env": {"": "1"}}}}));
        assert_eq!(
            p,
            vec![
                "approval.tools[\"\"]: keys must not be empty",
                "mcp_servers.a.env[\"\"]: keys must not be empty",
            ]
        );
    }
}
