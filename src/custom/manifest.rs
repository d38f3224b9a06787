//! `tool.json`: parsing and validating a custom tool's manifest.
//!
//! Every problem is reported as `<file>: <field>: <what is wrong>`, so a user can fix the
//! manifest without reading our code; a bad manifest is skipped and the rest still load.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::protocol::ApprovalClass;

/// The manifest's file name inside a tool folder.
pub const MANIFEST: &str = "tool.json";
/// The largest `timeout_ms` a manifest may ask for (one hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// A manifest bigger than this is refused (it is read whole into memory).
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// A valid manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub name: String,
    pub label: Option<String>,
    pub description: String,
    pub parameters: Value,
    pub output_schema: Option<Value>,
    /// Program and arguments; `command[0]` is resolved against the tool folder when a file
    /// of that name is there (see [`Manifest::program`]).
    pub command: Vec<String>,
    pub approval: Option<ApprovalClass>,
    /// A template such as `"deploy {env} to {target}"`, filled from the call's arguments
    /// and shown in strict mode instead of the generic summary.
    pub approval_details: Option<String>,
    pub timeout_ms: Option<u64>,
    pub hidden: bool,
    pub deferrable: bool,
    pub strict: bool,
    pub session_events: bool,
    /// The program may print `input_request` lines; its stdin then stays open after the
    /// arguments, for the `input_response` lines (a program that reads stdin to its end
    /// would wait forever otherwise).
    pub asks: bool,
    /// Names of config `providers` whose credentials this tool receives.
    pub providers: Vec<String>,
    /// What the program asks of the sandbox beyond the call's policy; granted only when
    /// config `sandbox.tools.<name>` says so.
    pub sandbox: SandboxRequest,
}

/// A manifest's `sandbox`: `{"network": true, "writable": ["~/.cache/x", "/abs"]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxRequest {
    pub network: bool,
    /// Absolute, or `~/…` (the daemon user's home, resolved at call time).
    pub writable: Vec<String>,
}

impl SandboxRequest {
    /// The paths with `~/` resolved against `home`.
    pub fn writable_paths(&self, home: Option<&Path>) -> Vec<PathBuf> {
        self.writable
            .iter()
            .filter_map(|w| match w.strip_prefix("~/") {
                Some(rest) => home.map(|h| h.join(rest)),
                None => Some(PathBuf::from(w)),
            })
            .collect()
    }
}

/// A manifest problem: the file, the field (when one is at fault) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: {field}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl Manifest {
    /// The program to start: `command[0]` inside the tool folder when such a file exists
    /// (or when it is written as a path, `./run.sh`), else the name looked up in `PATH`.
    pub fn program(&self, dir: &Path) -> PathBuf {
        let first = self.command.first().map(String::as_str).unwrap_or_default();
        let p = Path::new(first);
        if p.is_absolute() {
            return p.to_path_buf();
        }
        let local = dir.join(p);
        if first.contains('/') || local.is_file() {
            local
        } else {
            p.to_path_buf()
        }
    }

    /// The arguments after `command[0]`. The program runs in the session's workspace, so an
    /// argument naming a file of the tool folder (`run.py` in `["python3", "run.py"]`) is
    /// passed as that file's absolute path; everything else is passed as written.
    pub fn args(&self, dir: &Path) -> Vec<std::ffi::OsString> {
        self.command
            .iter()
            .skip(1)
            .map(|a| {
                let p = Path::new(a);
                let local = dir.join(p);
                if !a.starts_with('-') && p.is_relative() && local.is_file() {
                    local.into_os_string()
                } else {
                    a.into()
                }
            })
            .collect()
    }

    /// Fills `{arg}` placeholders of `approval_details` from the call's arguments (strings
    /// as they are, other values as JSON; unknown names are left as written).
    pub fn approval_text(&self, args: &Map<String, Value>) -> Option<String> {
        let template = self.approval_details.as_deref()?;
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find('}') {
                Some(close) => {
                    let key = &after[..close];
                    match args.get(key) {
                        Some(Value::String(s)) => out.push_str(s),
                        Some(v) => out.push_str(&v.to_string()),
                        None => {
                            out.push('{');
                            out.push_str(key);
                            out.push('}');
                        }
                    }
                    rest = &after[close + 1..];
                }
                None => {
                    out.push_str(&rest[open..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        Some(out)
    }
}

/// Reads and validates `<dir>/tool.json`. The file is read once, without blocking, only if
/// it is a regular file of at most [`MAX_MANIFEST_BYTES`] that does not lead out of `dir`
/// (see [`crate::safe_read`]): a FIFO, a device or a symlink to `/proc/self/pagemap` is a
/// manifest error like any other, and cannot stall or swell a scan.
pub fn load(dir: &Path) -> Result<(Manifest, Vec<u8>), ManifestError> {
    let file = dir.join(MANIFEST);
    let err = |field: Option<String>, message: String| ManifestError {
        file: file.clone(),
        field,
        message,
    };
    let bytes = crate::safe_read::read_in_folder(&file, MAX_MANIFEST_BYTES)
        .map_err(|e| err(None, e.to_string()))?;
    let manifest = parse(&bytes).map_err(|(field, message)| err(field, message))?;
    Ok((manifest, bytes))
}

type FieldError = (Option<String>, String);

fn field_err(field: &str, message: impl Into<String>) -> FieldError {
    (Some(field.to_owned()), message.into())
}

/// `tool.json` as written. serde decides the types and finds unknown keys; [`parse`] adds
/// the rules a type cannot say. A missing or `null` field is `None` (its default).
#[derive(Deserialize)]
struct RawManifest {
    /// An editor's schema hint; not ours to read.
    #[serde(rename = "$schema")]
    _schema: Option<Value>,
    name: Option<String>,
    label: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    output_schema: Option<Value>,
    command: Option<Vec<String>>,
    approval: Option<ApprovalClass>,
    approval_details: Option<String>,
    timeout_ms: Option<u64>,
    hidden: Option<bool>,
    deferrable: Option<bool>,
    strict: Option<bool>,
    session_events: Option<bool>,
    asks: Option<bool>,
    providers: Option<Vec<String>>,
    sandbox: Option<RawSandbox>,
}

#[derive(Deserialize)]
struct RawSandbox {
    network: Option<bool>,
    writable: Option<Vec<String>>,
}

/// What a field must be, where serde's own wording ("expected u64", "expected a sequence")
/// would not help the user.
fn shape(path: &str) -> Option<String> {
    Some(match path {
        "command" => "must be a non-empty array of strings, e.g. [\"./run.sh\"]".to_owned(),
        "timeout_ms" => format!("must be an integer from 1 to {MAX_TIMEOUT_MS}"),
        "approval" => {
            "must be an approval class: \"read_only\", \"write\" or \"command\"".to_owned()
        }
        "providers" => "must be an array of provider names".to_owned(),
        "sandbox" => {
            "must be an object such as {\"network\": true, \"writable\": [\"~/.cache/x\"]}"
                .to_owned()
        }
        "sandbox.writable" => "must be an array of absolute paths".to_owned(),
        _ => return None,
    })
}

/// Parses and validates manifest bytes.
pub fn parse(bytes: &[u8]) -> Result<Manifest, FieldError> {
    use crate::config::{duplicate_keys, field_names, from_serde_path, segments, suggest, Seg};
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        (
            None,
            format!(
                "is not valid JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ),
        )
    })?;
    if let Some(dup) = duplicate_keys(bytes).into_iter().next() {
        return Err(field_err(&dup.path, dup.message));
    }
    if !value.is_object() {
        return Err((None, "must be a JSON object".into()));
    }
    let mut unknown = Vec::new();
    let typed: Result<RawManifest, _> = {
        let mut note = |p: serde_ignored::Path| unknown.push(segments(&p));
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(&value, &mut note))
    };
    if let Some((Seg::Key(key), parent)) = unknown.first().and_then(|p| p.split_last()) {
        let known = match parent {
            [] => field_names::<RawManifest>(),
            _ => field_names::<RawSandbox>(),
        };
        let hint = suggest(key, known.to_vec())
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        let at = crate::config::JsonPath(unknown[0].clone());
        return Err(field_err(&at.to_string(), format!("unknown field{hint}")));
    }
    let raw = typed.map_err(|e| {
        let path = from_serde_path(e.path()).to_string();
        let message = shape(&path).unwrap_or_else(|| e.into_inner().to_string());
        (Some(path).filter(|p| !p.is_empty()), message)
    })?;

    let name = raw.name.ok_or_else(|| field_err("name", "is required"))?;
    crate::registry::check_tool_name(&name).map_err(|e| field_err("name", e))?;
    let description = raw
        .description
        .ok_or_else(|| field_err("description", "is required"))?;
    if description.trim().is_empty() {
        return Err(field_err("description", "must not be empty"));
    }

    let parameters = raw
        .parameters
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    check_schema("parameters", &parameters)?;
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(field_err(
            "parameters",
            "must be an object schema (\"type\": \"object\"): arguments are one JSON object",
        ));
    }
    if let Some(s) = &raw.output_schema {
        check_schema("output_schema", s)?;
    }

    let command = raw.command.ok_or_else(|| {
        field_err(
            "command",
            "is required: the program and its arguments, e.g. [\"python3\", \"run.py\"]",
        )
    })?;
    if command.is_empty() {
        return Err(field_err("command", shape("command").unwrap_or_default()));
    }
    if let Some(i) = command
        .iter()
        .enumerate()
        .position(|(i, s)| s.contains('\0') || i == 0 && s.trim().is_empty())
    {
        return Err(field_err(
            &format!("command[{i}]"),
            "must be a string (the program, non-empty, or an argument)",
        ));
    }

    if raw
        .timeout_ms
        .is_some_and(|n| !(1..=MAX_TIMEOUT_MS).contains(&n))
    {
        return Err(field_err(
            "timeout_ms",
            shape("timeout_ms").unwrap_or_default(),
        ));
    }
    let strict = raw.strict.unwrap_or(false);
    if strict {
        strict_compatible(&parameters, "parameters")
            .map_err(|(path, msg)| field_err(&path, format!("strict is true but {msg}")))?;
    }
    let providers = raw.providers.unwrap_or_default();
    if let Some(i) = providers.iter().position(|p| !valid_provider(p)) {
        return Err(field_err(
            &format!("providers[{i}]"),
            "must be a provider name from config `providers` (letters, digits, _ and -)",
        ));
    }
    let sandbox = match raw.sandbox {
        None => SandboxRequest::default(),
        Some(s) => {
            let writable = s.writable.unwrap_or_default();
            if let Some(i) = writable
                .iter()
                .position(|w| !(w.starts_with('/') || w.starts_with("~/")) || w.contains('\0'))
            {
                return Err(field_err(
                    &format!("sandbox.writable[{i}]"),
                    "must be an absolute path or one starting with ~/",
                ));
            }
            SandboxRequest {
                network: s.network.unwrap_or(false),
                writable,
            }
        }
    };

    Ok(Manifest {
        name,
        label: raw.label,
        description,
        parameters,
        output_schema: raw.output_schema,
        command,
        approval: raw.approval,
        approval_details: raw.approval_details,
        timeout_ms: raw.timeout_ms,
        hidden: raw.hidden.unwrap_or(false),
        deferrable: raw.deferrable.unwrap_or(false),
        strict,
        session_events: raw.session_events.unwrap_or(false),
        asks: raw.asks.unwrap_or(false),
        providers,
        sandbox,
    })
}

/// Tool names: [`crate::registry::check_tool_name`].
pub fn valid_name(name: &str) -> bool {
    crate::registry::check_tool_name(name).is_ok()
}

fn valid_provider(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The environment-variable form of a provider name: `open-ai` → `OPEN_AI`.
pub fn provider_env_name(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b == b'-' {
                '_'
            } else {
                char::from(b.to_ascii_uppercase())
            }
        })
        .collect()
}

/// Checks that `schema` is a JSON Schema our validator can compile.
fn check_schema(field: &str, schema: &Value) -> Result<(), FieldError> {
    if !schema.is_object() {
        return Err(field_err(field, "must be a JSON Schema object"));
    }
    crate::registry::check_schema_size(schema).map_err(|e| field_err(field, e))?;
    crate::registry::compile_schema(schema)
        .map(|_| ())
        .map_err(|e| field_err(field, format!("is not a valid JSON Schema: {e}")))
}

/// OpenAI strict mode accepts only schemas whose every object lists all its properties in
/// `required` and sets `additionalProperties: false`; anything else is refused at call time
/// by the model API, so we refuse it here, naming the place.
fn strict_compatible(schema: &Value, path: &str) -> Result<(), (String, String)> {
    let Value::Object(obj) = schema else {
        return Ok(());
    };
    let is_object = match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => obj.contains_key("properties"),
    };
    if is_object {
        if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err((
                path.to_owned(),
                "every object schema needs \"additionalProperties\": false".into(),
            ));
        }
        let props = obj.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for key in props.into_iter().flat_map(|p| p.keys()) {
            if !required.contains(&key.as_str()) {
                return Err((
                    format!("{path}.properties.{key}"),
                    "every property must be listed in \"required\" (make it nullable instead of optional)".into(),
                ));
            }
        }
    }
    for (k, v) in obj {
        match k.as_str() {
            "properties" | "$defs" | "definitions" => {
                for (name, sub) in v.as_object().into_iter().flatten() {
                    strict_compatible(sub, &format!("{path}.{k}.{name}"))?;
                }
            }
            "items" => strict_compatible(v, &format!("{path}.items"))?,
            "anyOf" | "allOf" | "oneOf" => {
                for (i, sub) in v.as_array().into_iter().flatten().enumerate() {
                    strict_compatible(sub, &format!("{path}.{k}[{i}]"))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_v(v: Value) -> Result<Manifest, FieldError> {
        parse(v.to_string().as_bytes())
    }

    fn base() -> Value {
        json!({"name": "t", "description": "- does t", "command": ["./run.sh"]})
    }

    fn with(k: &str, v: Value) -> Value {
        let mut b = base();
        b[k] = v;
        b
    }

    fn field_of(r: Result<Manifest, FieldError>) -> String {
        r.unwrap_err().0.unwrap_or_default()
    }

    #[test]
    fn minimal_manifest_gets_defaults() {
        let m = parse_v(base()).unwrap();
        assert_eq!(m.parameters, json!({"type": "object", "properties": {}}));
        assert_eq!(m.command, ["./run.sh"]);
        assert!(!m.hidden && !m.strict && !m.session_events);
        assert_eq!(m.approval, None);
    }

    #[test]
    fn sandbox_requests_are_parsed_and_checked() {
        let m = parse_v(with(
            "sandbox",
            json!({"network": true, "writable": ["~/.cache/t", "/var/t"]}),
        ))
        .unwrap();
        assert_eq!(
            m.sandbox,
            SandboxRequest {
                network: true,
                writable: vec!["~/.cache/t".into(), "/var/t".into()],
            }
        );
        assert_eq!(
            m.sandbox.writable_paths(Some(Path::new("/home/u"))),
            [PathBuf::from("/home/u/.cache/t"), PathBuf::from("/var/t")]
        );
        assert_eq!(
            field_of(parse_v(with("sandbox", json!({"writable": ["rel"]})))),
            "sandbox.writable[0]"
        );
        assert_eq!(
            field_of(parse_v(with("sandbox", json!({"netwrk": true})))),
            "sandbox.netwrk"
        );
        assert_eq!(field_of(parse_v(with("sandbox", json!(true)))), "sandbox");
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field_of(parse_v(with("name", json!("a b")))), "name");
        assert_eq!(
            field_of(parse_v(with("name", json!("x".repeat(65))))),
            "name"
        );
        assert_eq!(
            field_of(parse_v(with("description", json!("")))),
            "description"
        );
        assert_eq!(field_of(parse_v(with("command", json!([])))), "command");
        assert_eq!(
            field_of(parse_v(with("command", json!(["a", 1])))),
            "command[1]"
        );
        assert_eq!(
            field_of(parse_v(with("approval", json!("maybe")))),
            "approval"
        );
        assert_eq!(
            field_of(parse_v(with("timeout_ms", json!(0)))),
            "timeout_ms"
        );
        assert_eq!(field_of(parse_v(with("hidden", json!("yes")))), "hidden");
        assert_eq!(
            field_of(parse_v(with("providers", json!(["a b"])))),
            "providers[0]"
        );
        assert_eq!(
            field_of(parse_v(with("parameters", json!({"type": "string"})))),
            "parameters"
        );
        assert_eq!(
            field_of(parse_v(with("parameters", json!({"type": 5})))),
            "parameters"
        );
        let e = parse_v(with("timout_ms", json!(5))).unwrap_err();
        assert_eq!(
            e,
            (
                Some("timout_ms".into()),
                "unknown field (did you mean \"timeout_ms\"?)".into()
            )
        );
        assert_eq!(parse(b"{").unwrap_err().0, None);
    }

    #[test]
    fn duplicate_keys_are_refused_as_in_config() {
        let e = parse(br#"{"name": "t", "description": "- x", "command": ["a"], "name": "u"}"#)
            .unwrap_err();
        assert_eq!(
            e,
            (
                Some("name".into()),
                "duplicate key \"name\": an object may name it only once (JSON would \
                 silently keep the last one)"
                    .into()
            )
        );
        let nested = br#"{"name": "t", "description": "- x", "command": ["a"],
            "sandbox": {"network": false, "network": true}}"#;
        assert_eq!(
            parse(nested).unwrap_err().0.as_deref(),
            Some("sandbox.network")
        );
    }

    #[test]
    fn type_errors_say_what_the_field_must_be() {
        let e = parse_v(with("command", json!("run.sh"))).unwrap_err();
        assert_eq!(
            e.1,
            "must be a non-empty array of strings, e.g. [\"./run.sh\"]"
        );
        let e = parse_v(with("hidden", json!("yes"))).unwrap_err();
        assert_eq!(e.1, "invalid type: string \"yes\", expected a boolean");
        let e = parse_v(with("sandbox", json!({"netwrk": true}))).unwrap_err();
        assert_eq!(e.1, "unknown field (did you mean \"network\"?)");
    }

    #[test]
    fn strict_needs_a_closed_fully_required_schema() {
        let open = with("strict", json!(true));
        let mut m = open.clone();
        m["parameters"] = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false});
        assert_eq!(field_of(parse_v(m.clone())), "parameters.properties.a");
        m["parameters"]["required"] = json!(["a"]);
        assert!(parse_v(m).unwrap().strict);
        assert_eq!(field_of(parse_v(open)), "parameters");
    }

    #[test]
    fn approval_template_fills_arguments() {
        let mut m = parse_v(with(
            "approval_details",
            json!("deploy {env} x{n} {missing} {"),
        ))
        .unwrap();
        let args = json!({"env": "prod", "n": 3});
        let text = m.approval_text(args.as_object().unwrap());
        assert_eq!(text.as_deref(), Some("deploy prod x3 {missing} {"));
        m.approval_details = None;
        assert_eq!(m.approval_text(&Map::new()), None);
    }

    #[test]
    fn provider_names_become_env_names() {
        assert_eq!(provider_env_name("open-ai_2"), "OPEN_AI_2");
    }
}
