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
    if kind.as_deref() == Some("sse") || (f == Frontend::Gemini && gemini_sse(raw)) {
        return Err(
            "it uses the legacy SSE transport, which toolhost does not speak: add the server's \
             streamable HTTP endpoint with `toolhost mcp add NAME --url URL`"
                .to_owned(),
        );
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
        for id in vscode_variables(&mut out.server)? {
            out.secrets.push(Secret {
                var: env_name(&id),
                field: format!("${{input:{id}}}"),
                value: None,
            });
        }
    }
    take_secrets(name, &mut out);
    Ok(out)
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
/// variable the user sets once; any other `${…}` is VS Code's own and cannot be carried
/// over.
fn vscode_variables(server: &mut Map<String, Value>) -> Result<Vec<String>, String> {
    fn fix(s: &str, inputs: &mut Vec<String>) -> Result<String, String> {
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
                    if !inputs.iter().any(|i| i == id) {
                        inputs.push(id.to_owned());
                    }
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
    fn walk(v: &mut Value, inputs: &mut Vec<String>) -> Result<(), String> {
        match v {
            Value::String(s) if s.contains("${") => *s = fix(s, inputs)?,
            Value::Array(a) => a.iter_mut().try_for_each(|v| walk(v, inputs))?,
            Value::Object(m) => m.values_mut().try_for_each(|v| walk(v, inputs))?,
            _ => {}
        }
        Ok(())
    }
    let mut inputs = Vec::new();
    server.values_mut().try_for_each(|v| walk(v, &mut inputs))?;
    Ok(inputs)
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

/// Replaces every literal `env` and `headers` value that looks like a secret by a
/// `${NAME}` reference: an `env` entry keeps its own name, a header is named after the
/// server (`Authorization: Bearer …` → `Bearer ${GITHUB_TOKEN}`).
fn take_secrets(server_name: &str, out: &mut Converted) {
    if let Some(Value::Object(env)) = out.server.get_mut("env") {
        for (key, value) in env.iter_mut() {
            let Value::String(v) = value else { continue };
            if looks_secret(key, v) {
                out.secrets.push(Secret {
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
            if !looks_secret(key, v) {
                continue;
            }
            let (prefix, secret) = match v.split_once(' ') {
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
                    (format!("{scheme} "), rest.to_owned())
                }
                _ => (String::new(), v.clone()),
            };
            let var = if key.eq_ignore_ascii_case("authorization") {
                format!("{}_TOKEN", env_name(server_name))
            } else {
                format!("{}_{}", env_name(server_name), env_name(key))
            };
            out.secrets.push(Secret {
                var: var.clone(),
                field: format!("headers.{key}"),
                value: Some(secret),
            });
            *v = format!("{prefix}${{{var}}}");
        }
    }
}

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
    const PREFIXES: &[&str] = &[
        "ghp_",
        "gho_",
        "github_pat_",
        "glpat-",
        "sk-",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "Bearer ",
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
        assert!(convert(
            Frontend::VsCode,
            "x",
            &json!({"command": "x", "args": ["${workspaceFolder}"]})
        )
        .is_err());
        assert!(convert(Frontend::Gemini, "old", &json!({"url": "https://h/sse"})).is_err());
        let c = convert(
            Frontend::Gemini,
            "new",
            &json!({"httpUrl": "https://h/mcp", "trust": true}),
        )
        .unwrap();
        assert_eq!(c.server["url"], "https://h/mcp");
        assert_eq!(c.ignored, ["trust"]);
    }
}
