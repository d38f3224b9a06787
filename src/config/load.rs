//! Loading: read → parse → `mcpServers` alias → `${NAME}` expansion → `TOOLHOST_*__*`
//! environment overrides → validation → typed [`Config`].

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::check;
use super::error::{ConfigError, ConfigErrorKind, ContentHash, Problem};
use super::path::{describe, JsonPath, Seg};
use super::{Config, Loaded};

/// What is at a config path, without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Nothing there (and no symlink either): at start, "all defaults"; while running, a
    /// deleted config, so the last good one stays live.
    Missing,
    /// A regular file (possibly behind a symlink).
    Present,
    /// Something that is not a readable file; the text says what, e.g. "is a directory".
    /// [`load`](super::load) refuses it with [`ConfigErrorKind::NotAFile`].
    NotAFile(&'static str),
    /// The path cannot be examined (e.g. a parent directory without permission); reading
    /// it reports the system's error.
    Inaccessible,
}

/// Looks at `path` (following symlinks) to tell a missing config from one that is there,
/// and from a path that names something other than a file.
pub fn file_state(path: &Path) -> FileState {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => FileState::Present,
        Ok(m) if m.is_dir() => FileState::NotAFile("is a directory, not a config file"),
        Ok(_) => FileState::NotAFile("is not a regular file (a FIFO, socket or device)"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    FileState::NotAFile("is a symbolic link to a file that does not exist")
                }
                _ => FileState::Missing,
            }
        }
        Err(_) => FileState::Inaccessible,
    }
}

/// The JSON key `mcpServers` is accepted as an alias of this one.
pub(crate) const SERVERS_KEY: &str = "mcp_servers";
pub(crate) const SERVERS_ALIAS: &str = "mcpServers";
/// VS Code's mcp.json spelling; its servers carry `type`, which the model accepts.
pub(crate) const VSCODE_SERVERS: &str = "servers";

/// Where `${NAME}` values come from: the secrets file beside config.json first, then the
/// process's environment (or a fixed map, in tests).
#[derive(Debug, Clone, Default)]
pub(crate) struct Env {
    vars: Option<HashMap<String, String>>,
    /// The secrets file as read (part of the content hash, so editing it alone reloads).
    secrets: Option<crate::secrets::SecretsFile>,
}

impl Env {
    pub fn process() -> Env {
        Env {
            vars: None,
            secrets: None,
        }
    }

    /// The process's environment with the secrets file that goes with config `path`
    /// ([`crate::secrets::file_for`]); a secrets file that may not be read (another owner,
    /// readable by others) is a config error naming it.
    pub fn for_config(path: &Path) -> Result<Env, ConfigError> {
        let file = crate::secrets::file_for(path);
        let secrets = crate::secrets::read_file(&file)
            .map_err(|e| ConfigError::one(ConfigErrorKind::Invalid, "", e))?;
        Ok(Env {
            vars: None,
            secrets,
        })
    }

    /// The hash of config.json's bytes (`None`: no file) together with this secrets file's.
    pub(crate) fn hash(&self, config: Option<&[u8]>) -> ContentHash {
        match (&self.secrets, config) {
            (None, None) => ContentHash::MISSING,
            (None, Some(bytes)) => ContentHash::of(bytes),
            (Some(s), bytes) => {
                let mut all = bytes.unwrap_or_default().to_vec();
                all.extend_from_slice(b"\0secrets\0");
                all.extend_from_slice(&s.bytes);
                ContentHash::of(&all)
            }
        }
    }

    #[cfg(test)]
    pub fn fixed<const N: usize>(vars: [(&str, &str); N]) -> Env {
        Env {
            vars: Some(
                vars.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            secrets: None,
        }
    }

    /// `Ok(None)` if unset; `Err` if set but not UTF-8.
    pub(crate) fn var(&self, name: &str) -> Result<Option<String>, String> {
        if let Some(v) = self.secrets.as_ref().and_then(|s| s.vars.get(name)) {
            return Ok(Some(v.clone()));
        }
        match &self.vars {
            Some(m) => Ok(m.get(name).cloned()),
            None => match std::env::var(name) {
                Ok(v) => Ok(Some(v)),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    Err(format!("environment variable {name} is not valid UTF-8"))
                }
            },
        }
    }

    /// The `TOOLHOST_<SECTION>__<KEY>` overrides as (dotted lowercase key, value), sorted by
    /// key, read with the `config` crate's environment source. Variables without `__`
    /// (`TOOLHOST_CONFIG`, `TOOLHOST_SOCKET`, `TOOLHOST_TOKEN`, ...) are not config keys and
    /// are skipped; empty values count as unset.
    fn overrides(&self) -> Result<Vec<(String, String)>, Problem> {
        use config::Source;
        let mut source = config::Environment::with_prefix("TOOLHOST")
            .prefix_separator("_")
            .separator("__")
            .ignore_empty(true);
        if let Some(m) = &self.vars {
            source = source.source(Some(m.clone().into_iter().collect()));
        }
        let collected = source
            .collect()
            .map_err(|e| Problem::new("", format!("cannot read the environment: {e}")))?;
        let mut out = Vec::new();
        for (key, value) in collected {
            if !key.contains('.') {
                continue;
            }
            let value = value.into_string().map_err(|e| {
                Problem::new("", format!("cannot read {}: {e}", env_var_name(&key)))
            })?;
            out.push((key, value));
        }
        out.sort();
        Ok(out)
    }
}

/// `limits.max_output_bytes` → `TOOLHOST_LIMITS__MAX_OUTPUT_BYTES` (the case of the original
/// variable is lost; the config crate lowercases keys).
fn env_var_name(key: &str) -> String {
    format!("TOOLHOST_{}", key.replace('.', "__").to_uppercase())
}

/// The largest config.json read; a bigger file is refused (it is read whole into memory).
const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads `path`: `Ok(None)` if nothing is there; a directory, a dangling symlink or a
/// FIFO/socket/device is a [`ConfigErrorKind::NotAFile`] error (never "missing", so a
/// mistyped path cannot silently mean "all defaults"). The file is opened once, without
/// blocking, and checked and read through that one descriptor (see [`crate::safe_read`]), so
/// a FIFO swapped in cannot hang the reader and `/proc/self/pagemap` cannot fill memory.
pub(crate) fn read_file(path: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    use crate::safe_read::{read_path, ReadError};
    let refuse = |kind, what: String| {
        ConfigError::one(kind, "", format!("config path {} {what}", path.display()))
    };
    match read_path(path, MAX_CONFIG_BYTES) {
        Ok(bytes) => Ok(Some(bytes)),
        // Missing, or a symlink to nothing (which must not mean "all defaults").
        Err(ReadError::NotFound) => match file_state(path) {
            FileState::NotAFile(why) => Err(refuse(ConfigErrorKind::NotAFile, why.to_owned())),
            _ => Ok(None),
        },
        Err(ReadError::Dir) => Err(refuse(
            ConfigErrorKind::NotAFile,
            "is a directory, not a config file".to_owned(),
        )),
        Err(e @ ReadError::NotRegular(_)) => Err(refuse(ConfigErrorKind::NotAFile, e.to_string())),
        Err(e @ (ReadError::TooLarge(_) | ReadError::Escapes)) => {
            Err(refuse(ConfigErrorKind::Io, e.to_string()))
        }
        Err(ReadError::Io(e)) => Err(ConfigError::one(
            ConfigErrorKind::Io,
            "",
            format!("cannot read {}: {e}", path.display()),
        )),
    }
}

/// Parses config bytes into a JSON object (a UTF-8 BOM is tolerated).
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, ConfigError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ConfigError::one(
            ConfigErrorKind::Syntax,
            "",
            "the file is empty (write {} for all defaults)",
        ));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ConfigError::one(ConfigErrorKind::Syntax, "", format!("invalid JSON: {e}")))?;
    let duplicates = duplicate_keys(bytes);
    if !duplicates.is_empty() {
        return Err(ConfigError::new(ConfigErrorKind::Invalid, duplicates));
    }
    if !value.is_object() {
        return Err(ConfigError::one(
            ConfigErrorKind::Invalid,
            "",
            format!(
                "expected a JSON object at the top level, found {}",
                describe(&value)
            ),
        ));
    }
    Ok(value)
}

/// Every key that appears twice in one object, named by its JSON path. serde_json keeps
/// the last one silently, so a pasted block that repeats a server name would quietly
/// replace the first; this pass over the text (already known to be valid JSON) finds them.
/// config.json and `tool.json` both refuse them through it.
pub(crate) fn duplicate_keys(bytes: &[u8]) -> Vec<Problem> {
    use serde::de::DeserializeSeed;
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let seed = DupSeed {
        path: &mut JsonPath::default(),
        found: &mut found,
    };
    // A syntax error was already reported by the real parse.
    let _ = seed.deserialize(&mut de);
    found
}

/// Walks a JSON document, recording duplicate keys (see [`duplicate_keys`]).
struct DupSeed<'a> {
    path: &'a mut JsonPath,
    found: &'a mut Vec<Problem>,
}

impl<'de> serde::de::DeserializeSeed<'de> for DupSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for DupSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            self.path.0.push(Seg::Key(key.clone()));
            if !seen.insert(key.clone()) {
                self.found.push(Problem::new(
                    self.path.to_string(),
                    format!(
                        "duplicate key {}: an object may name it only once (JSON would \
                         silently keep the last one)",
                        Value::String(key)
                    ),
                ));
            }
            map.next_value_seed(DupSeed {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.0.pop();
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            self.path.0.push(Seg::Index(i));
            let more = seq.next_element_seed(DupSeed {
                path: &mut *self.path,
                found: &mut *self.found,
            })?;
            self.path.0.pop();
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Which key holds the servers: `mcp_servers`, `mcpServers` (Claude Desktop, Cursor,
/// Cline), `servers` (VS Code's mcp.json), or `None`; more than one is an error.
pub(crate) fn servers_key(root: &Map<String, Value>) -> Result<Option<&'static str>, Problem> {
    let present: Vec<&'static str> = [SERVERS_KEY, SERVERS_ALIAS, VSCODE_SERVERS]
        .into_iter()
        .filter(|k| root.contains_key(*k))
        .collect();
    match present.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        several => Err(Problem::new(
            "",
            format!(
                "{} are all present; use one of them (mcpServers and servers are aliases of \
                 mcp_servers)",
                several
                    .iter()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        )),
    }
}

/// Reads, parses and evaluates the file at `path` with the given environment.
pub(crate) fn load_with(path: &Path, env: &Env) -> Result<Loaded, ConfigError> {
    let bytes = read_file(path)?;
    let hash = env.hash(bytes.as_deref());
    let root = match bytes {
        None => Value::Object(Map::new()),
        Some(bytes) => parse(&bytes).map_err(|e| e.with_hash(hash))?,
    };
    let (config, warnings) = evaluate(root, env).map_err(|e| e.with_hash(hash))?;
    Ok(Loaded {
        config,
        warnings,
        content_hash: hash,
    })
}

/// Everything after parsing: alias, expansion, environment overrides, validation.
/// All problems found are reported together.
pub(crate) fn evaluate(root: Value, env: &Env) -> Result<(Config, Vec<String>), ConfigError> {
    let Value::Object(mut root) = root else {
        return Err(ConfigError::one(
            ConfigErrorKind::Invalid,
            "",
            "expected a JSON object at the top level",
        ));
    };
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    // 1. mcpServers → mcp_servers, in place (key order kept). Messages use the file's key.
    let aliased = match servers_key(&root) {
        Err(p) => return Err(ConfigError::new(ConfigErrorKind::Invalid, vec![p])),
        Ok(Some(alias)) if alias != SERVERS_KEY => {
            rename_key(&mut root, alias, SERVERS_KEY);
            Some(alias)
        }
        Ok(_) => None,
    };
    let mut root = Value::Object(root);

    // 2. ${NAME} in every string of the file (not in environment overrides), but
    //    `${WORKSPACE}` where a scoped server's instances expand it.
    let mut path = JsonPath::default();
    expand_all(&mut root, &mut path, env, None, &mut problems);

    // 3. TOOLHOST_<SECTION>__<KEY> overrides.
    let mut origin = HashMap::new();
    match env.overrides() {
        Ok(list) => {
            for (key, value) in list {
                apply_override(
                    &mut root,
                    &key,
                    value,
                    &mut origin,
                    &mut problems,
                    &mut warnings,
                );
            }
        }
        Err(p) => problems.push(p),
    }

    // 4. Types and values.
    let checked = check::check_root(&root, &origin);
    problems.extend(checked.problems);
    warnings.extend(checked.warnings);
    if let Some(alias) = aliased {
        for p in &mut problems {
            p.path = unalias(&p.path, alias);
        }
        for w in &mut warnings {
            *w = unalias(w, alias);
        }
    }
    match checked.config {
        Some(config) if problems.is_empty() => Ok((config, warnings)),
        _ => {
            if problems.is_empty() {
                problems.push(Problem::new("", "invalid config"));
            }
            let mut e = ConfigError::new(ConfigErrorKind::Invalid, problems);
            e.warnings = warnings;
            Err(e)
        }
    }
}

/// `mcp_servers.x...` → `mcpServers.x...` (for files that use an alias).
fn unalias(s: &str, alias: &str) -> String {
    match s.strip_prefix(SERVERS_KEY) {
        Some(rest) if rest.is_empty() || rest.starts_with(['.', '[', ':']) => {
            format!("{alias}{rest}")
        }
        _ => s.to_owned(),
    }
}

fn rename_key(m: &mut Map<String, Value>, from: &str, to: &str) {
    let old = std::mem::take(m);
    for (k, v) in old {
        if k == from {
            m.insert(to.to_owned(), v);
        } else {
            m.insert(k, v);
        }
    }
}

/// `kept`: a variable left as written (`${WORKSPACE}` in a scoped server's
/// [`WORKSPACE_KEYS`](super::model::WORKSPACE_KEYS)).
fn expand_all(
    v: &mut Value,
    path: &mut JsonPath,
    env: &Env,
    kept: Option<&str>,
    problems: &mut Vec<Problem>,
) {
    match v {
        Value::String(s) if s.contains('$') => match expand_keeping(s, env, kept) {
            Ok(e) => *s = e,
            Err(msg) => problems.push(Problem::new(path.to_string(), msg)),
        },
        Value::Array(items) => {
            for (i, x) in items.iter_mut().enumerate() {
                path.0.push(Seg::Index(i));
                expand_all(x, path, env, kept, problems);
                path.0.pop();
            }
        }
        Value::Object(m) => {
            let scoped = path.0.len() == 2
                && path.0[0] == Seg::Key(SERVERS_KEY.into())
                && super::model::names_scoped(m.get("scope"));
            for (k, x) in m.iter_mut() {
                let kept = match scoped && super::model::WORKSPACE_KEYS.contains(&k.as_str()) {
                    true => Some(super::model::WORKSPACE_VAR),
                    false => kept,
                };
                path.0.push(Seg::Key(k.clone()));
                expand_all(x, path, env, kept, problems);
                path.0.pop();
            }
        }
        _ => {}
    }
}

/// Expands `${NAME}` (NAME = `[A-Za-z_][A-Za-z0-9_]*`); `$${` is a literal `${`; any other
/// `$` is kept as is. An unset variable is an error naming it (all unset ones are listed).
pub(crate) fn expand(s: &str, env: &Env) -> Result<String, String> {
    expand_keeping(s, env, None)
}

/// [`expand`], leaving `${kept}` as written.
fn expand_keeping(s: &str, env: &Env, kept: Option<&str>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut unset = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let Some(end) = tail.find('}') else {
                return Err("unterminated ${...} (write $${ for a literal ${)".to_owned());
            };
            let name = &tail[..end];
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "invalid variable reference ${{{name}}}: names are letters, digits and _ \
                     (write $${{ for a literal ${{)"
                ));
            }
            if kept == Some(name) {
                out.push('$');
                out.push_str(&after[..end + 2]);
            } else {
                match env.var(name)? {
                    Some(value) => out.push_str(&value),
                    None => unset.push(name.to_owned()),
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    match unset.len() {
        0 => Ok(out),
        1 => Err(format!("environment variable {} is not set", unset[0])),
        _ => Err(format!(
            "environment variables {} are not set",
            unset.join(", ")
        )),
    }
}

/// Sets `key` (dotted, lowercase) to the string `value`, creating objects on the way.
fn apply_override(
    root: &mut Value,
    key: &str,
    value: String,
    origin: &mut HashMap<String, String>,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<String>,
) {
    let var = env_var_name(key);
    let segs: Vec<&str> = key.split('.').collect();
    if segs.iter().any(|s| s.is_empty()) {
        warnings.push(format!("{var}: ignored (empty key segment)"));
        return;
    }
    let mut path = JsonPath::default();
    let mut cur = root;
    for (i, seg) in segs.iter().enumerate() {
        let Value::Object(m) = cur else {
            problems.push(Problem::new(
                path.to_string(),
                format!("{var} cannot be applied: {path} is not an object"),
            ));
            return;
        };
        if !m.contains_key(*seg) {
            if let Some(existing) = m.keys().find(|k| k.eq_ignore_ascii_case(seg)) {
                warnings.push(format!(
                    "{var}: environment keys are lowercased, so this sets {:?}, not {existing:?}",
                    seg
                ));
            }
        }
        path.0.push(Seg::Key((*seg).to_owned()));
        let last = i + 1 == segs.len();
        let slot = m
            .entry((*seg).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if slot.is_null() {
            *slot = Value::Object(Map::new());
        }
        if last {
            *slot = Value::String(value);
            origin.insert(path.to_string(), var);
            return;
        }
        cur = slot;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(v: Value, env: &Env) -> Result<(Config, Vec<String>), ConfigError> {
        evaluate(v, env)
    }

    #[test]
    fn expansion() {
        let env = Env::fixed([("A", "x"), ("B_2", "y")]);
        assert_eq!(expand("${A}-${B_2}", &env).as_deref(), Ok("x-y"));
        assert_eq!(expand("$A $ $$ $${A}", &env).as_deref(), Ok("$A $ $$ ${A}"));
        assert_eq!(
            expand("${NOPE}", &env),
            Err("environment variable NOPE is not set".to_owned())
        );
        assert_eq!(
            expand("${X1} ${A} ${X2}", &env),
            Err("environment variables X1, X2 are not set".to_owned())
        );
        assert!(expand("${A", &env).is_err());
        assert!(expand("${1A}", &env).is_err());
    }

    #[test]
    fn workspace_is_left_for_the_instances_of_scoped_servers() {
        let env = Env::fixed([("A", "x")]);
        let block = |scope: &str| {
            json!({"command": "s", "scope": scope, "args": ["${WORKSPACE}/${A}"],
                   "env": {"W": "${WORKSPACE}"}, "roots": ["${WORKSPACE}"]})
        };
        let (c, _) = eval(json!({"mcp_servers": {"w": block("per_workspace")}}), &env).unwrap();
        let w = &c.mcp_servers["w"];
        assert_eq!(w.args, ["${WORKSPACE}/x"]);
        assert_eq!(w.env["W"], "${WORKSPACE}");
        assert_eq!(w.roots, ["${WORKSPACE}"]);
        // A shared server has no instances: WORKSPACE is an ordinary variable there.
        let e = eval(json!({"mcp_servers": {"w": block("shared")}}), &env).unwrap_err();
        assert!(
            e.to_string()
                .contains("environment variable WORKSPACE is not set"),
            "{e}"
        );
    }

    #[test]
    fn unset_variable_names_variable_and_path() {
        let env = Env::fixed([]);
        let v = json!({"mcp_servers": {"remote": {
            "url": "https://h/mcp",
            "headers": {"Authorization": "Bearer ${REMOTE_TOKEN_T1}"}
        }}});
        let e = eval(v, &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mcp_servers.remote.headers.Authorization: environment variable REMOTE_TOKEN_T1 is not set"
        );
    }

    #[test]
    fn expansion_fills_values() {
        let env = Env::fixed([("TOK", "s3cret")]);
        let v = json!({"providers": {"openai": {"api_key": "${TOK}"}}});
        let (c, _) = eval(v, &env).unwrap();
        assert_eq!(c.providers["openai"].api_key.as_deref(), Some("s3cret"));
    }

    #[test]
    fn alias_and_both_keys() {
        let env = Env::fixed([]);
        let (c, w) = eval(
            json!({"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"]}}}),
            &env,
        )
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.mcp_servers["fs"].command.as_deref(), Some("npx"));
        let e = eval(
            json!({"mcpServers": {"fs": {"comand": "x", "args": [1]}}}),
            &env,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "mcpServers.fs.args[0]: expected a string, found 1\n\
             mcpServers.fs: needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)\n\
             warning: mcpServers.fs.comand: unknown key (did you mean \"command\"?)"
        );
        let e = eval(json!({"mcpServers": {}, "mcp_servers": {}}), &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"mcp_servers\" and \"mcpServers\" are all present; use one of them \
             (mcpServers and servers are aliases of mcp_servers)"
        );
        // VS Code's mcp.json: `servers`, each with its `type`.
        let (c, w) = eval(
            json!({"servers": {"fs": {"type": "stdio", "command": "npx"},
                               "web": {"type": "http", "url": "https://h/mcp"}}}),
            &env,
        )
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.mcp_servers["web"].transport(), "http");
        // The legacy HTTP+SSE transport is accepted (issue 25); a command is not its kind.
        let (c, _) = eval(
            json!({"servers": {"old": {"type": "sse", "url": "https://h/sse"}}}),
            &env,
        )
        .unwrap();
        assert_eq!(c.mcp_servers["old"].transport(), "sse");
        let e = eval(
            json!({"servers": {"old": {"type": "sse", "command": "x"}}}),
            &env,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "servers.old.type: is \"sse\" but the server has a \"command\""
        );
    }

    #[test]
    fn env_overrides_layer_on_top() {
        let env = Env::fixed([
            ("TOOLHOST_LIMITS__MAX_OUTPUT_BYTES", "123"),
            ("TOOLHOST_MCP_SERVERS__FS__TIMEOUT_MS", "5000"),
            ("TOOLHOST_MCP_SERVERS__FS__ENABLED", "false"),
            ("TOOLHOST_LISTEN__SOCKET_MODE", "0660"),
            // Not config keys: no "__".
            ("TOOLHOST_CONFIG", "/x.json"),
            ("TOOLHOST_SOCKET", "/x.sock"),
            ("TOOLHOST_TOKEN", "007"),
            ("OTHER__X", "1"),
        ]);
        let v = json!({
            "limits": {"max_output_bytes": 9},
            "mcp_servers": {"fs": {"command": "x"}}
        });
        let (c, w) = eval(v, &env).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.limits.max_output_bytes, 123);
        assert_eq!(c.mcp_servers["fs"].timeout_ms, 5000);
        assert!(!c.mcp_servers["fs"].enabled);
        assert_eq!(c.listen.socket_mode.as_deref(), Some("0660"));
    }

    #[test]
    fn env_override_can_add_a_lowercase_server() {
        let env = Env::fixed([("TOOLHOST_MCP_SERVERS__REMOTE__URL", "https://h/mcp")]);
        let (c, _) = eval(json!({}), &env).unwrap();
        assert_eq!(
            c.mcp_servers["remote"].url.as_deref(),
            Some("https://h/mcp")
        );
        // Upper-case names in the file cannot be reached: the key is lowercased.
        let env = Env::fixed([("TOOLHOST_MCP_SERVERS__GITHUB__TIMEOUT_MS", "5")]);
        let e = eval(json!({"mcp_servers": {"GitHub": {"command": "x"}}}), &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mcp_servers.github: needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)\n\
             warning: TOOLHOST_MCP_SERVERS__GITHUB__TIMEOUT_MS: environment keys are lowercased, so this sets \"github\", not \"GitHub\""
        );
    }

    #[test]
    fn env_override_errors_name_the_variable() {
        let env = Env::fixed([
            ("TOOLHOST_LIMITS__MAX_OUTPUT_BYTES", "lots"),
            ("TOOLHOST_NOPE__X", "1"),
            ("TOOLHOST_WORKSPACE__X", "1"),
        ]);
        let e = eval(json!({"workspace": "/w"}), &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "workspace: TOOLHOST_WORKSPACE__X cannot be applied: workspace is not an object\n\
             limits.max_output_bytes: expected a positive integer, found \"lots\" (from TOOLHOST_LIMITS__MAX_OUTPUT_BYTES)\n\
             nope: unknown key; a misspelt key at the top level or in \"listen\", \"approval\" or a \"sandbox\" section \
             would silently run with weaker defaults (from TOOLHOST_NOPE__X)"
        );
        let env = Env::fixed([("TOOLHOST_LIMITS__NOPE", "1")]);
        let (_, w) = eval(json!({}), &env).unwrap();
        assert_eq!(
            w,
            vec!["limits.nope: unknown key (from TOOLHOST_LIMITS__NOPE)"]
        );
    }

    #[test]
    fn env_values_are_not_expanded_and_stay_strings() {
        let env = Env::fixed([("TOOLHOST_PROVIDERS__P__API_KEY", "007${X}")]);
        let (c, _) = eval(json!({}), &env).unwrap();
        assert_eq!(c.providers["p"].api_key.as_deref(), Some("007${X}"));
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_path() {
        let text = br#"{"mcpServers": {"fx": {"command": "a"}, "fx": {"command": "b",
            "args": [{"k": 1, "k": 2}]}}, "limits": {}, "limits": {}}"#;
        let e = parse(text).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "mcpServers.fx: duplicate key \"fx\": an object may name it only once (JSON would silently keep the last one)\n\
             mcpServers.fx.args[0].k: duplicate key \"k\": an object may name it only once (JSON would silently keep the last one)\n\
             limits: duplicate key \"limits\": an object may name it only once (JSON would silently keep the last one)"
        );
        // The same key in different objects is fine.
        assert!(parse(br#"{"a": {"x": 1}, "b": {"x": [{"x": 1}, {"x": 2}]}}"#).is_ok());
    }

    #[test]
    fn parse_errors() {
        let e = parse(b"{\n  \"a\": 1,\n}").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Syntax);
        assert!(e.to_string().contains("line 3 column 1"), "{e}");
        assert!(parse(b"  \n").unwrap_err().to_string().contains("empty"));
        assert!(parse(b"[]").unwrap_err().to_string().contains("top level"));
        assert!(parse(b"\xEF\xBB\xBF{}").is_ok());
    }
}
