//! Validation of the (expanded, env-layered) JSON against the config schema.
//!
//! The walker checks every value, collecting *all* problems (each with its JSON path) and
//! warning about unknown keys; what it returns is a normalised copy of the JSON (nulls and
//! unknown keys dropped, environment strings converted to numbers/booleans) that
//! deserialises into [`Config`](super::Config) without surprises.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use super::error::Problem;

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A JSON path such as `mcp_servers.fs.args[1]`; keys that are not plain words are written
/// as `["a key"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JsonPath(pub Vec<Seg>);

pub(crate) fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'$')
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{}]", Value::String(k.clone()))?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The shape of one value.
#[derive(Debug)]
enum Ty {
    Str,
    NonEmpty,
    Bool,
    /// An integer ≥ 1.
    PosInt,
    SocketMode,
    HostPort,
    HttpUrl,
    Class,
    Mode,
    List(&'static Ty),
    /// An object with arbitrary (non-empty) keys.
    Map(&'static Ty),
    Obj(&'static [(&'static str, Ty)]),
    Servers,
}

const LISTEN: &[(&str, Ty)] = &[
    ("socket", Ty::NonEmpty),
    ("socket_mode", Ty::SocketMode),
    ("tcp", Ty::HostPort),
    ("token_file", Ty::NonEmpty),
];
const APPROVAL: &[(&str, Ty)] = &[("mode", Ty::Mode), ("tools", Ty::Map(&Ty::Class))];
const LIMITS: &[(&str, Ty)] = &[
    ("max_request_bytes", Ty::PosInt),
    ("max_output_bytes", Ty::PosInt),
    ("default_timeout_ms", Ty::PosInt),
];
const PROVIDER: &[(&str, Ty)] = &[("base_url", Ty::HttpUrl), ("api_key", Ty::Str)];
const CUSTOM_TOOLS: &[(&str, Ty)] = &[("paths", Ty::List(&Ty::NonEmpty)), ("discover", Ty::Bool)];
/// `type` is accepted (and checked) because Claude Desktop / Cursor blocks often carry it;
/// it is not part of the typed model.
const SERVER: &[(&str, Ty)] = &[
    ("type", Ty::Str),
    ("command", Ty::NonEmpty),
    ("args", Ty::List(&Ty::Str)),
    ("env", Ty::Map(&Ty::Str)),
    ("cwd", Ty::NonEmpty),
    ("url", Ty::HttpUrl),
    ("headers", Ty::Map(&Ty::Str)),
    ("enabled", Ty::Bool),
    ("startup_timeout_ms", Ty::PosInt),
    ("timeout_ms", Ty::PosInt),
    ("include_tools", Ty::List(&Ty::NonEmpty)),
    ("exclude_tools", Ty::List(&Ty::NonEmpty)),
    ("trust_annotations", Ty::Bool),
    ("max_concurrency", Ty::PosInt),
    ("approval", Ty::Map(&Ty::Class)),
];
const ROOT: &[(&str, Ty)] = &[
    ("$schema", Ty::Str),
    ("workspace", Ty::NonEmpty),
    ("data_dir", Ty::NonEmpty),
    ("listen", Ty::Obj(LISTEN)),
    ("approval", Ty::Obj(APPROVAL)),
    ("limits", Ty::Obj(LIMITS)),
    ("providers", Ty::Map(&Ty::Obj(PROVIDER))),
    ("mcp_servers", Ty::Servers),
    ("custom_tools", Ty::Obj(CUSTOM_TOOLS)),
];

/// Keys of the typed model that are dropped from the normalised JSON.
const NOT_IN_MODEL: &[&str] = &["$schema", "type"];

impl Ty {
    fn expected(&self) -> &'static str {
        match self {
            Ty::Str => "a string",
            Ty::NonEmpty => "a non-empty string",
            Ty::Bool => "true or false",
            Ty::PosInt => "a positive integer",
            Ty::SocketMode => "an octal mode string such as \"0660\"",
            Ty::HostPort => "\"host:port\" such as \"127.0.0.1:7311\"",
            Ty::HttpUrl => "an http:// or https:// URL",
            Ty::Class => "one of \"read_only\", \"write\", \"command\"",
            Ty::Mode => "one of \"auto\", \"strict\", \"read_only\"",
            Ty::List(_) => "an array",
            Ty::Map(_) | Ty::Obj(_) | Ty::Servers => "an object",
        }
    }
}

/// How a value is shown in a message: scalars as JSON (long strings cut), containers by kind.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut shown: String = s.chars().take(60).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            Value::String(shown).to_string()
        }
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

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

/// The result of a validation walk.
pub(crate) struct Checked {
    pub value: Value,
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

/// Validates `root` (an object). `env_origin` maps formatted paths that were set from the
/// environment to the variable's name: those values are strings and are converted to the
/// expected number/boolean, and messages about them name the variable.
pub(crate) fn check_root(root: &Value, env_origin: &HashMap<String, String>) -> Checked {
    let mut c = Checker {
        path: JsonPath::default(),
        problems: Vec::new(),
        warnings: Vec::new(),
        env_origin,
    };
    let value = c
        .check(root, &Ty::Obj(ROOT))
        .unwrap_or(Value::Object(Map::new()));
    Checked {
        value,
        problems: c.problems,
        warnings: c.warnings,
    }
}

struct Checker<'a> {
    path: JsonPath,
    problems: Vec<Problem>,
    warnings: Vec<String>,
    env_origin: &'a HashMap<String, String>,
}

impl Checker<'_> {
    fn env_var(&self) -> Option<&String> {
        if self.env_origin.is_empty() {
            return None;
        }
        self.env_origin.get(&self.path.to_string())
    }

    fn problem(&mut self, message: impl Into<String>) {
        let mut message = message.into();
        if let Some(var) = self.env_var() {
            message = format!("{message} (from {var})");
        }
        self.problems
            .push(Problem::new(self.path.to_string(), message));
    }

    fn mismatch(&mut self, ty: &Ty, v: &Value) {
        let msg = format!("expected {}, found {}", ty.expected(), describe(v));
        self.problem(msg);
    }

    fn warn(&mut self, message: impl fmt::Display) {
        let path = self.path.to_string();
        let mut line = if path.is_empty() {
            message.to_string()
        } else {
            format!("{path}: {message}")
        };
        // An unknown key that came from the environment: say which variable made it.
        let mut vars: Vec<&String> = self
            .env_origin
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(path.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
            .map(|(_, v)| v)
            .collect();
        if !path.is_empty() && !vars.is_empty() {
            vars.sort();
            let vars: Vec<&str> = vars.iter().map(|v| v.as_str()).collect();
            line = format!("{line} (from {})", vars.join(", "));
        }
        self.warnings.push(line);
    }

    fn at<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.0.push(seg);
        let out = f(self);
        self.path.0.pop();
        out
    }

    fn check(&mut self, v: &Value, ty: &Ty) -> Option<Value> {
        match ty {
            Ty::Str => match v {
                Value::String(_) => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::NonEmpty => match v {
                Value::String(s) if !s.is_empty() => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::Bool => match v {
                Value::Bool(_) => Some(v.clone()),
                Value::String(s) if self.env_var().is_some() => {
                    match s.trim().to_ascii_lowercase().as_str() {
                        "true" | "1" => Some(Value::Bool(true)),
                        "false" | "0" => Some(Value::Bool(false)),
                        _ => self.fail(ty, v),
                    }
                }
                _ => self.fail(ty, v),
            },
            Ty::PosInt => {
                let n = match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) if self.env_var().is_some() => s.trim().parse::<u64>().ok(),
                    _ => None,
                };
                match n {
                    Some(0) => {
                        self.problem("must be at least 1, found 0");
                        None
                    }
                    Some(n) => Some(Value::from(n)),
                    None => self.fail(ty, v),
                }
            }
            Ty::SocketMode => match v {
                Value::String(s) if valid_mode(s) => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::HostPort => match v {
                Value::String(s) if valid_host_port(s) => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::HttpUrl => match v {
                Value::String(s) if valid_http_url(s) => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::Class => match v.as_str() {
                Some("read_only" | "write" | "command") => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::Mode => match v.as_str() {
                Some("auto" | "strict" | "read_only") => Some(v.clone()),
                _ => self.fail(ty, v),
            },
            Ty::List(item) => match v {
                Value::Array(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for (i, x) in items.iter().enumerate() {
                        if let Some(x) = self.at(Seg::Index(i), |c| c.check(x, item)) {
                            out.push(x);
                        }
                    }
                    Some(Value::Array(out))
                }
                _ => self.fail(ty, v),
            },
            Ty::Map(item) => match v {
                Value::Object(m) => {
                    let mut out = Map::new();
                    for (k, x) in m {
                        let checked = self.at(Seg::Key(k.clone()), |c| {
                            if k.is_empty() {
                                c.problem("keys must not be empty");
                            }
                            c.check(x, item)
                        });
                        if let Some(x) = checked {
                            out.insert(k.clone(), x);
                        }
                    }
                    Some(Value::Object(out))
                }
                _ => self.fail(ty, v),
            },
            Ty::Obj(fields) => match v {
                Value::Object(m) => Some(Value::Object(self.object(m, fields))),
                _ => self.fail(ty, v),
            },
            Ty::Servers => match v {
                Value::Object(m) => {
                    let mut out = Map::new();
                    for (name, x) in m {
                        let checked = self.at(Seg::Key(name.clone()), |c| {
                            if let Some(msg) = check_server_name(name) {
                                c.problem(msg);
                            }
                            c.server(x)
                        });
                        if let Some(x) = checked {
                            out.insert(name.clone(), x);
                        }
                    }
                    Some(Value::Object(out))
                }
                _ => self.fail(ty, v),
            },
        }
    }

    fn fail(&mut self, ty: &Ty, v: &Value) -> Option<Value> {
        self.mismatch(ty, v);
        None
    }

    /// Checks the known fields (nulls mean "default"), warns about unknown ones.
    fn object(&mut self, m: &Map<String, Value>, fields: &[(&str, Ty)]) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, x) in m {
            match fields.iter().find(|(name, _)| name == k) {
                Some((_, _)) if x.is_null() => {}
                Some((name, ty)) => {
                    let checked = self.at(Seg::Key(k.clone()), |c| c.check(x, ty));
                    if let Some(x) = checked {
                        if !NOT_IN_MODEL.contains(name) {
                            out.insert(k.clone(), x);
                        }
                    }
                }
                None => self.at(Seg::Key(k.clone()), |c| {
                    let hint = suggest(k, fields.iter().map(|(n, _)| *n))
                        .map(|s| format!(" (did you mean {s:?}?)"))
                        .unwrap_or_default();
                    c.warn(format_args!("unknown key{hint}"));
                }),
            }
        }
        out
    }

    /// One MCP server block: the fields, then exactly one of `command` / `url`.
    fn server(&mut self, v: &Value) -> Option<Value> {
        let Value::Object(m) = v else {
            return self.fail(&Ty::Obj(SERVER), v);
        };
        let out = self.object(m, SERVER);
        let present = |k: &str| m.get(k).is_some_and(|x| !x.is_null());
        let (command, url) = (present("command"), present("url"));
        match (command, url) {
            (true, true) => self.problem(
                "has both \"command\" and \"url\"; a server is either a stdio process (command) \
                 or a streamable HTTP endpoint (url), never both",
            ),
            (false, false) => self.problem(
                "needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)",
            ),
            _ => {}
        }
        if let Some(t) = m.get("type").and_then(Value::as_str) {
            let t_lower = t.to_ascii_lowercase();
            let problem = match t_lower.as_str() {
                "stdio" if url && !command => Some("is \"stdio\" but the server has a \"url\""),
                "http" | "streamable-http" | "streamable_http" | "streamablehttp"
                    if command && !url =>
                {
                    Some("is an HTTP type but the server has a \"command\"")
                }
                "stdio" | "http" | "streamable-http" | "streamable_http" | "streamablehttp" => None,
                "sse" => Some(
                    "the legacy SSE transport is not supported; use the server's streamable \
                     HTTP endpoint",
                ),
                _ => Some("expected \"stdio\" or \"http\""),
            };
            if let Some(p) = problem {
                self.at(Seg::Key("type".into()), |c| c.problem(p));
            }
        }
        if url && !command {
            for k in ["args", "env", "cwd"] {
                if present(k) {
                    self.at(Seg::Key(k.into()), |c| {
                        c.warn("ignored: only stdio servers (\"command\") use it")
                    });
                }
            }
        }
        if command && !url && present("headers") {
            self.at(Seg::Key("headers".into()), |c| {
                c.warn("ignored: only HTTP servers (\"url\") use it")
            });
        }
        Some(Value::Object(out))
    }
}

fn valid_mode(s: &str) -> bool {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    (3..=4).contains(&digits.len())
        && digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
        && u32::from_str_radix(digits, 8).is_ok_and(|m| m <= 0o7777)
}

fn valid_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}

fn valid_http_url(s: &str) -> bool {
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    matches!(rest, Some(r) if !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}

/// The closest known key, if it is close enough to be a likely typo.
fn suggest<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    known
        .map(|k| (edit_distance(&key_l, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4) && *d < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
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
    fn paths_are_formatted() {
        let p = JsonPath(vec![
            Seg::Key("mcp_servers".into()),
            Seg::Key("fs".into()),
            Seg::Key("args".into()),
            Seg::Index(1),
        ]);
        assert_eq!(p.to_string(), "mcp_servers.fs.args[1]");
        let p = JsonPath(vec![Seg::Key("env".into()), Seg::Key("A B".into())]);
        assert_eq!(p.to_string(), "env[\"A B\"]");
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
    fn empty_server_name_is_an_error() {
        let p = problems(json!({"mcp_servers": {"": {"command": "x"}}}));
        assert_eq!(p, vec!["mcp_servers[\"\"]: server names must not be empty"]);
    }

    #[test]
    fn unknown_keys_warn_with_a_hint() {
        let c = run(json!({
            "limit": {},
            "mcp_servers": {"fs": {"comand": "x", "command": "y", "foo": 1}}
        }));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(
            c.warnings,
            vec![
                "limit: unknown key (did you mean \"limits\"?)",
                "mcp_servers.fs.comand: unknown key (did you mean \"command\"?)",
                "mcp_servers.fs.foo: unknown key",
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
    fn pasted_blocks_with_type_are_accepted() {
        let c = run(json!({"mcpx": 1, "mcp_servers": {
            "a": {"type": "stdio", "command": "x"},
            "b": {"type": "http", "url": "https://h/mcp"},
            "c": {"type": "sse", "url": "https://h/sse"}
        }}));
        let p: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(p, vec!["mcp_servers.c.type: the legacy SSE transport is not supported; use the server's streamable HTTP endpoint"]);
        assert!(c.value["mcp_servers"]["a"].get("type").is_none());
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
    fn modes_hosts_urls() {
        assert!(valid_mode("0660") && valid_mode("660") && valid_mode("0o600"));
        assert!(!valid_mode("0968") && !valid_mode("66") && !valid_mode("17777"));
        assert!(valid_host_port("127.0.0.1:7311") && valid_host_port("[::1]:1"));
        assert!(!valid_host_port(":80") && !valid_host_port("h:99999"));
        assert!(
            valid_http_url("https://a/b")
                && !valid_http_url("ftp://a")
                && !valid_http_url("https://")
        );
    }
}
