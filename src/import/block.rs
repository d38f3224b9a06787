//! One frontend's server block as a toolhost `mcp_servers` block: the field names each
//! frontend uses, and secrets taken out of the block as `${NAME}` references.

use serde::Serialize;
use serde_json::{Map, Value};

use super::Frontend;

/// A block ready for config.json, with what it asks of the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    pub server: Map<String, Value>,
    /// Values that looked like secrets: the block references them as `${var}`.
    pub secrets: Vec<Secret>,
    /// Fields toolhost has no use for (shown in the plan, not imported).
    pub ignored: Vec<String>,
}

/// A secret kept out of config.json: the block says `${var}`, the daemon's environment
/// must hold the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Secret {
    pub var: String,
    /// Where the value is in the frontend's block (`env.GITHUB_TOKEN`).
    pub field: String,
    /// The value itself (`None`: the frontend's block only names it — Codex's
    /// `bearer_token_env_var`, VS Code's `${input:id}`):
    /// compared to tell identical blocks from different ones, never printed or written.
    #[serde(skip)]
    pub value: Option<String>,
}

/// Converts `raw` (frontend `f`'s block for server `name`). `Err` says why the block
/// cannot be imported (e.g. the legacy SSE transport).
pub fn convert(f: Frontend, name: &str, raw: &Value) -> Result<Converted, String> {
    let Value::Object(raw) = raw else {
        return Err("the server block is not an object".to_owned());
    };
    let mut out = Converted {
        server: Map::new(),
        secrets: Vec::new(),
        ignored: Vec::new(),
    };
    let kind = raw
        .get("type")
        .or_else(|| raw.get("transport"))
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    // The legacy HTTP+SSE transport: ours says so with `type: sse`.
    if kind.as_deref() == Some("sse") || (f == Frontend::Gemini && gemini_sse(raw)) {
        out.server.insert("type".to_owned(), "sse".into());
    }
    for (key, value) in raw {
        let target = match (f, key.as_str()) {
            (
                _,
                "command" | "args" | "cwd" | "url" | "headers" | "env" | "disabled" | "enabled",
            ) => key.as_str(),
            (_, "type" | "transport") => continue,
            (Frontend::Gemini, "httpUrl") => "url",
            (Frontend::Gemini, "timeout") => "timeout_ms",
            (Frontend::Gemini, "includeTools") | (Frontend::Codex, "enabled_tools") => {
                "include_tools"
            }
            (Frontend::Gemini, "excludeTools") | (Frontend::Codex, "disabled_tools") => {
                "exclude_tools"
            }
            (Frontend::Codex, "http_headers") => "headers",
            (Frontend::Codex, "env_vars") => "env_passthrough",
            (Frontend::Codex, "startup_timeout_ms") => "startup_timeout_ms",
            (Frontend::Codex, "startup_timeout_sec") => {
                seconds_to_ms(&mut out, "startup_timeout_ms", value);
                continue;
            }
            (Frontend::Codex, "tool_timeout_sec") => {
                seconds_to_ms(&mut out, "timeout_ms", value);
                continue;
            }
            (Frontend::Codex, "bearer_token_env_var") => {
                if let Some(var) = value.as_str() {
                    add_header(
                        &mut out.server,
                        "Authorization",
                        format!("Bearer ${{{var}}}"),
                    );
                    out.secrets.push(Secret {
                        var: var.to_owned(),
                        field: key.clone(),
                        value: None,
                    });
                }
                continue;
            }
            (Frontend::Codex, "env_http_headers") => {
                for (h, var) in value.as_object().into_iter().flatten() {
                    if let Some(var) = var.as_str() {
                        add_header(&mut out.server, h, format!("${{{var}}}"));
                        out.secrets.push(Secret {
                            var: var.to_owned(),
                            field: format!("{key}.{h}"),
                            value: None,
                        });
                    }
                }
                continue;
            }
            _ => {
                out.ignored.push(key.clone());
                continue;
            }
        };
        match (target, out.server.get_mut(target), value) {
            // Two source fields for one map (Codex `http_headers` beside the bearer token).
            (_, Some(Value::Object(have)), Value::Object(more)) => {
                have.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                out.server.insert(target.to_owned(), value.clone());
            }
        }
    }
    if f == Frontend::VsCode {
        let (inputs, workspace) = vscode_variables(&mut out.server)?;
        for id in inputs {
            out.secrets.push(Secret {
                var: env_name(&id),
                field: format!("${{input:{id}}}"),
                value: None,
            });
        }
        if workspace {
            per_workspace(&mut out.server)?;
        }
    }
    take_secrets(name, &mut out);
    normalise(&mut out.server);
    Ok(out)
}

/// The spelling each frontend adds to a block that changes nothing that runs — an empty
/// `env` (`claude mcp add` always writes `"env": {}`), empty `args` or `headers`, a `type`
/// that only repeats what `command` or `url` says, `enabled: true` — taken out, so the same
/// server from two frontends is one block.
pub fn normalise(server: &mut Map<String, Value>) {
    server.retain(|key, value| match (key.as_str(), &*value) {
        ("env" | "headers", Value::Object(m)) => !m.is_empty(),
        ("args" | "env_passthrough" | "include_tools" | "exclude_tools", Value::Array(a)) => {
            !a.is_empty()
        }
        ("enabled", Value::Bool(true)) | ("disabled", Value::Bool(false)) => false,
        ("type", Value::String(t)) => t.eq_ignore_ascii_case("sse"),
        ("cwd", Value::String(c)) => !c.is_empty(),
        (_, Value::Null) => false,
        _ => true,
    });
}

/// A VS Code block that used `${workspaceFolder}`: a `per_workspace` server, one process
/// per session workspace, where `${WORKSPACE}` is that workspace. Only `args` and `env`
/// can name it (and `cwd`, which a scoped server's process has anyway).
fn per_workspace(server: &mut Map<String, Value>) -> Result<(), String> {
    let var = format!("${{{}}}", crate::config::WORKSPACE_VAR);
    if server.get("cwd").and_then(Value::as_str) == Some(var.as_str()) {
        server.remove("cwd");
    }
    let elsewhere: Vec<&String> = server
        .iter()
        .filter(|(k, v)| {
            !crate::config::WORKSPACE_KEYS.contains(&k.as_str()) && v.to_string().contains(&var)
        })
        .map(|(k, _)| k)
        .collect();
    if let Some(k) = elsewhere.first() {
        return Err(format!(
            "its {k} uses the VS Code variable ${{workspaceFolder}}, which only a server's \
             args and env can carry over (as ${{WORKSPACE}})"
        ));
    }
    if !server.contains_key("command") {
        return Err(
            "it uses ${workspaceFolder}, but only a stdio server can run per workspace".to_owned(),
        );
    }
    server.insert("scope".to_owned(), "per_workspace".into());
    Ok(())
}

/// Gemini's `url` (without `type: "http"`) is its SSE field; `httpUrl` is streamable HTTP.
fn gemini_sse(raw: &Map<String, Value>) -> bool {
    raw.contains_key("url") && !raw.contains_key("httpUrl") && !raw.contains_key("type")
}

/// Adds one header to the block (Codex keeps headers in three fields).
fn add_header(server: &mut Map<String, Value>, name: &str, value: String) {
    let mut headers = match server.remove("headers") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    headers.insert(name.to_owned(), Value::String(value));
    server.insert("headers".to_owned(), Value::Object(headers));
}

fn seconds_to_ms(out: &mut Converted, key: &str, value: &Value) {
    if let Some(s) = value.as_f64().filter(|s| *s > 0.0) {
        out.server
            .insert(key.to_owned(), Value::from((s * 1000.0) as u64));
    }
}

/// VS Code's `${env:NAME}` is our `${NAME}`; its prompted `${input:id}` becomes `${ID}`, a
/// variable the user sets once; `${workspaceFolder}` becomes `${WORKSPACE}` (the caller
/// makes the server `per_workspace`); any other `${…}` is VS Code's own and cannot be
/// carried over. Returns the inputs used and whether the workspace was.
fn vscode_variables(server: &mut Map<String, Value>) -> Result<(Vec<String>, bool), String> {
    struct Found {
        inputs: Vec<String>,
        workspace: bool,
    }
    fn fix(s: &str, found: &mut Found) -> Result<String, String> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return Ok(out);
            };
            let inner = &after[..end];
            match inner.split_once(':') {
                Some(("env", var)) => out.push_str(&format!("${{{var}}}")),
                Some(("input", id)) => {
                    out.push_str(&format!("${{{}}}", env_name(id)));
                    if !found.inputs.iter().any(|i| i == id) {
                        found.inputs.push(id.to_owned());
                    }
                }
                None if inner == "workspaceFolder" => {
                    out.push_str(&format!("${{{}}}", crate::config::WORKSPACE_VAR));
                    found.workspace = true;
                }
                // `${workspaceFolder}`, `${userHome}`, `${config:…}`, …
                _ => {
                    return Err(format!(
                        "it uses the VS Code variable ${{{inner}}}, which only VS Code can fill in"
                    ))
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
    fn walk(v: &mut Value, found: &mut Found) -> Result<(), String> {
        match v {
            Value::String(s) if s.contains("${") => *s = fix(s, found)?,
            Value::Array(a) => a.iter_mut().try_for_each(|v| walk(v, found))?,
            Value::Object(m) => m.values_mut().try_for_each(|v| walk(v, found))?,
            _ => {}
        }
        Ok(())
    }
    let mut found = Found {
        inputs: Vec::new(),
        workspace: false,
    };
    server.values_mut().try_for_each(|v| walk(v, &mut found))?;
    Ok((found.inputs, found.workspace))
}

/// `text` as an environment variable name: upper case, anything else than A-Z, 0-9 and `_`
/// as `_`.
pub fn env_name(text: &str) -> String {
    let mut s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// Replaces every literal value that looks like a secret by a `${NAME}` reference: an
/// `env` entry keeps its own name; a header, a secret flag in `args` (`--api-key X`,
/// `--token=X`, `Authorization: Bearer X`), a URL's password or token query parameter
/// (in `url`, or a URL in `args`, as `mcp-remote` takes it) are named after the server
/// (`GITHUB_TOKEN`, `CONTEXT7_API_KEY`).
fn take_secrets(server_name: &str, out: &mut Converted) {
    let server = env_name(server_name);
    let mut found = Vec::new();
    if let Some(Value::Object(env)) = out.server.get_mut("env") {
        for (key, value) in env.iter_mut() {
            let Value::String(v) = value else { continue };
            if looks_secret(key, v) {
                found.push(Secret {
                    var: key.clone(),
                    field: format!("env.{key}"),
                    value: Some(std::mem::take(v)),
                });
                *v = format!("${{{key}}}");
            }
        }
    }
    if let Some(Value::Object(headers)) = out.server.get_mut("headers") {
        for (key, value) in headers.iter_mut() {
            let Value::String(v) = value else { continue };
            if let Some(new) = header_secret(&server, key, v, &format!("headers.{key}"), &mut found)
            {
                *v = new;
            }
        }
    }
    if let Some(Value::Array(args)) = out.server.get_mut("args") {
        let mut i = 0;
        while i < args.len() {
            let field = format!("args[{i}]");
            let Some(arg) = args[i].as_str().map(str::to_owned) else {
                i += 1;
                continue;
            };
            if let Some((flag, value)) = arg.split_once('=').filter(|(f, _)| f.starts_with('-')) {
                if secret_flag(flag) && literal(value) {
                    let var = add(&mut found, flag_var(&server, flag), &field, value);
                    args[i] = format!("{flag}=${{{var}}}").into();
                }
            } else if arg.starts_with('-') && secret_flag(&arg) {
                if let Some(value) = args
                    .get(i + 1)
                    .and_then(Value::as_str)
                    .filter(|v| !v.starts_with('-') && literal(v))
                    .map(str::to_owned)
                {
                    let field = format!("args[{}]", i + 1);
                    let var = add(&mut found, flag_var(&server, &arg), &field, &value);
                    args[i + 1] = format!("${{{var}}}").into();
                    i += 1;
                }
            } else if arg.starts_with("http://") || arg.starts_with("https://") {
                args[i] = url_secrets(&server, &arg, &field, &mut found).into();
            } else if let Some((name, value)) = arg.split_once(':') {
                // `--header "Authorization: Bearer X"` (mcp-remote).
                let name = name.trim();
                if !name.is_empty() && !name.contains(' ') {
                    if let Some(new) =
                        header_secret(&server, name, value.trim(), &field, &mut found)
                    {
                        args[i] = format!("{name}: {new}").into();
                    }
                }
            } else if literal(&arg) && PREFIXES.iter().any(|p| arg.starts_with(p)) {
                let var = add(&mut found, format!("{server}_TOKEN"), &field, &arg);
                args[i] = format!("${{{var}}}").into();
            }
            i += 1;
        }
    }
    if let Some(Value::String(url)) = out.server.get_mut("url") {
        *url = url_secrets(&server, url, "url", &mut found);
    }
    out.secrets.extend(found);
}

/// Records a secret under `var` (or `var_2`, … when the block already holds `var` with
/// another value) and returns the name used.
fn add(found: &mut Vec<Secret>, var: String, field: &str, value: &str) -> String {
    let mut name = var.clone();
    for n in 2.. {
        match found.iter().find(|s| s.var == name) {
            Some(s) if s.value.as_deref() == Some(value) => return name,
            Some(_) => name = format!("{var}_{n}"),
            None => break,
        }
    }
    found.push(Secret {
        var: name.clone(),
        field: field.to_owned(),
        value: Some(value.to_owned()),
    });
    name
}

/// A value to take out: not empty and not already a reference.
fn literal(value: &str) -> bool {
    !value.is_empty() && !value.contains("${")
}

/// A header's value as a reference when it looks secret (`Bearer ` kept in front).
fn header_secret(
    server: &str,
    key: &str,
    value: &str,
    field: &str,
    found: &mut Vec<Secret>,
) -> Option<String> {
    if !looks_secret(key, value) {
        return None;
    }
    let (prefix, secret) = match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
            (format!("{scheme} "), rest.to_owned())
        }
        _ => (String::new(), value.to_owned()),
    };
    let var = if key.eq_ignore_ascii_case("authorization") {
        format!("{server}_TOKEN")
    } else {
        format!("{server}_{}", env_name(key))
    };
    let var = add(found, var, field, &secret);
    Some(format!("{prefix}${{{var}}}"))
}

/// `--api-key` of server `CONTEXT7` → `CONTEXT7_API_KEY`.
fn flag_var(server: &str, flag: &str) -> String {
    format!("{server}_{}", env_name(flag.trim_start_matches('-')))
}

/// Whether a command-line flag (`--api-key`, `--token`) takes a secret.
fn secret_flag(flag: &str) -> bool {
    let name = flag
        .trim_start_matches('-')
        .to_ascii_uppercase()
        .replace('-', "_");
    secret_name(&name)
}

/// Names of secrets, in flags and query parameters (upper case, words joined with `_`).
fn secret_name(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "ACCESS_KEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ];
    NAMES.iter().any(|n| name.contains(n)) || name.ends_with("_KEY") || name == "KEY"
}

/// `url` with its password (or a user name alone, which is then a token) and its secret
/// query parameters (`?token=`, `?api_key=`) as references.
fn url_secrets(server: &str, url: &str, field: &str, found: &mut Vec<Secret>) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = match user.split_once(':') {
                Some((name, pass)) if literal(pass) => {
                    let var = add(found, format!("{server}_PASSWORD"), field, pass);
                    format!("{name}:${{{var}}}")
                }
                None if literal(user) => {
                    let var = add(found, format!("{server}_TOKEN"), field, user);
                    format!("${{{var}}}")
                }
                _ => user.to_owned(),
            };
            format!("{user}@{host}")
        }
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, format!("#{f}")),
                None => (query, String::new()),
            };
            let params: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, v))
                        if literal(v)
                            && (secret_name(&k.to_ascii_uppercase().replace('-', "_"))
                                || k.eq_ignore_ascii_case("auth")) =>
                    {
                        let var = add(found, format!("{server}_{}", env_name(k)), field, v);
                        format!("{k}=${{{var}}}")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}{fragment}", params.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Well-known token prefixes: a value that starts so is a secret whatever its name.
const PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "github_pat_",
    "glpat-",
    "sk-",
    "ctx7sk-",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "Bearer ",
];

/// Whether an `env` or header value should stay out of config.json: by its name (token,
/// key, secret, password, auth…) or by a well-known token prefix. References stay as they
/// are.
fn looks_secret(key: &str, value: &str) -> bool {
    if value.is_empty() || value.contains("${") {
        return false;
    }
    // Header names spell words with `-` (`X-Api-Key`), variables with `_`.
    let key = key.to_ascii_uppercase().replace('-', "_");
    const NAMES: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "ACCESS_KEY",
        "PRIVATE_KEY",
        "AUTH",
        "CREDENTIAL",
        "COOKIE",
        "_PAT",
    ];
    NAMES.iter().any(|n| key.contains(n))
        || key.ends_with("_KEY")
        || key == "KEY"
        || PREFIXES.iter().any(|p| value.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_become_references_and_fields_are_renamed() {
        let c = convert(
            Frontend::Codex,
            "gh",
            &json!({"url": "https://h/mcp", "bearer_token_env_var": "GH_PAT",
                    "http_headers": {"X-Api-Key": "abc123", "X-Region": "eu"},
                    "tool_timeout_sec": 2.5, "startup_timeout_sec": 10}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(c.server),
            json!({"url": "https://h/mcp",
                   "headers": {"Authorization": "Bearer ${GH_PAT}", "X-Api-Key": "${GH_X_API_KEY}", "X-Region": "eu"},
                   "timeout_ms": 2500, "startup_timeout_ms": 10000})
        );
        let vars: Vec<(&str, Option<&str>)> = c
            .secrets
            .iter()
            .map(|s| (s.var.as_str(), s.value.as_deref()))
            .collect();
        assert_eq!(vars, [("GH_PAT", None), ("GH_X_API_KEY", Some("abc123"))]);

        let c = convert(
            Frontend::VsCode,
            "db",
            &json!({"type": "stdio", "command": "db-mcp", "env": {"DB_PASSWORD": "${input:db-pass}", "HOME_DIR": "${env:HOME}"}}),
        )
        .unwrap();
        assert_eq!(
            c.server["env"],
            json!({"DB_PASSWORD": "${DB_PASS}", "HOME_DIR": "${HOME}"})
        );
        assert_eq!(c.secrets[0].var, "DB_PASS");
        assert_eq!(c.secrets[0].field, "${input:db-pass}");
        let c = convert(
            Frontend::VsCode,
            "x",
            &json!({"command": "x", "args": ["${workspaceFolder}/src"], "cwd": "${workspaceFolder}"}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(c.server),
            json!({"command": "x", "args": ["${WORKSPACE}/src"], "scope": "per_workspace"})
        );
        assert!(convert(
            Frontend::VsCode,
            "x",
            &json!({"command": "${workspaceFolder}/bin/x"})
        )
        .is_err());
        assert!(convert(
            Frontend::VsCode,
            "x",
            &json!({"command": "x", "args": ["${workspaceFolderBasename}"]})
        )
        .is_err());
        let c = convert(Frontend::Gemini, "old", &json!({"url": "https://h/sse"})).unwrap();
        assert_eq!(
            Value::Object(c.server),
            json!({"url": "https://h/sse", "type": "sse"})
        );
        let c = convert(
            Frontend::Gemini,
            "new",
            &json!({"httpUrl": "https://h/mcp", "trust": true}),
        )
        .unwrap();
        assert_eq!(c.server["url"], "https://h/mcp");
        assert_eq!(c.ignored, ["trust"]);
    }

    #[test]
    fn secrets_in_args_and_urls_become_references() {
        let c = convert(
            Frontend::ClaudeCode,
            "context7",
            &json!({"type": "stdio", "command": "npx", "env": {},
                    "args": ["-y", "@upstash/context7-mcp", "--api-key", "ctx7sk-abc", "--token=t0k",
                             "--verbose", "--header", "Authorization: Bearer b3arer",
                             "https://u:p4ss@h.example/mcp?x=1&api_key=k3y#f", "ghp_literal"]}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(c.server.clone()),
            json!({"command": "npx",
                   "args": ["-y", "@upstash/context7-mcp", "--api-key", "${CONTEXT7_API_KEY}",
                            "--token=${CONTEXT7_TOKEN}", "--verbose", "--header",
                            "Authorization: Bearer ${CONTEXT7_TOKEN_2}",
                            "https://u:${CONTEXT7_PASSWORD}@h.example/mcp?x=1&api_key=${CONTEXT7_API_KEY_2}#f",
                            "${CONTEXT7_TOKEN_3}"]})
        );
        let values: Vec<&str> = c
            .secrets
            .iter()
            .filter_map(|s| s.value.as_deref())
            .collect();
        assert_eq!(
            values,
            ["ctx7sk-abc", "t0k", "b3arer", "p4ss", "k3y", "ghp_literal"]
        );
        let c = convert(
            Frontend::Cursor,
            "remote",
            &json!({"url": "https://tok3n@h.example/mcp?token=abc",
                    "env": {"DB_PASSWORD_FILE_X": "pw", "LOG_LEVEL": "warn"}}),
        )
        .unwrap();
        assert_eq!(
            c.server["url"],
            "https://${REMOTE_TOKEN}@h.example/mcp?token=${REMOTE_TOKEN_2}"
        );
        assert_eq!(
            c.server["env"]["DB_PASSWORD_FILE_X"],
            "${DB_PASSWORD_FILE_X}"
        );
        assert_eq!(c.server["env"]["LOG_LEVEL"], "warn");
        // A bearer header, and env values by their names' shape (`*_SECRET`, `*_KEY`).
        let c = convert(
            Frontend::Cursor,
            "api",
            &json!({"url": "https://h.example/mcp",
                    "headers": {"Authorization": "Bearer b3arer-h", "X-Trace": "on"},
                    "env": {"MY_SECRET": "s3cret", "OPENAI_KEY": "sk-k3y"}}),
        )
        .unwrap();
        let auth = c.server["headers"]["Authorization"].as_str().unwrap();
        assert!(
            auth.starts_with("Bearer ${") && !auth.contains("b3arer-h"),
            "{auth}"
        );
        assert_eq!(c.server["headers"]["X-Trace"], "on");
        assert_eq!(c.server["env"]["MY_SECRET"], "${MY_SECRET}");
        assert_eq!(c.server["env"]["OPENAI_KEY"], "${OPENAI_KEY}");
        let mut values: Vec<&str> = c
            .secrets
            .iter()
            .filter_map(|s| s.value.as_deref())
            .collect();
        values.sort_unstable();
        assert_eq!(values, ["b3arer-h", "s3cret", "sk-k3y"]);
    }

    #[test]
    fn each_frontends_spelling_of_one_server_is_the_same_block() {
        let a = convert(
            Frontend::ClaudeCode,
            "m",
            &json!({"type": "stdio", "command": "npx", "args": ["-y", "mem"], "env": {}}),
        )
        .unwrap();
        let b = convert(
            Frontend::Gemini,
            "m",
            &json!({"command": "npx", "args": ["-y", "mem"]}),
        )
        .unwrap();
        let c = convert(
            Frontend::Cursor,
            "m",
            &json!({"command": "npx", "args": ["mem@latest"], "enabled": true}),
        )
        .unwrap();
        assert_eq!(a.server, b.server);
        assert_ne!(a.server, c.server);
        // What runs differs: another working directory, or one header more.
        let d = convert(
            Frontend::Gemini,
            "m",
            &json!({"command": "npx", "args": ["-y", "mem"], "cwd": "/srv"}),
        )
        .unwrap();
        assert_ne!(a.server, d.server);
        let remote = |headers: Value| {
            convert(
                Frontend::Cursor,
                "r",
                &json!({"url": "https://h.example/mcp", "headers": headers}),
            )
            .unwrap()
            .server
        };
        assert_eq!(remote(json!({"X-A": "1"})), remote(json!({"X-A": "1"})));
        assert_ne!(remote(json!({"X-A": "1"})), remote(json!({"X-A": "2"})));
        assert_ne!(remote(json!({})), remote(json!({"X-A": "1"})));
    }
}
