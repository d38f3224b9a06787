//! The session's tools as TypeScript declarations, for the model writing a program: the
//! compact form (name, one-line description, argument type) in the code tool's
//! description, the full one (with result types where a tool declares `outputSchema`) from
//! `code_api` and `toolhost://code/tools.d.ts`.
//!
//! A small converter of our own (like Cloudflare's), not `json-schema-to-typescript`: it
//! needs no Node at listing time and keeps every declaration bounded. Depth is capped,
//! `$ref`s become `unknown`, and what it cannot express is `unknown`.

use serde_json::{Map, Value};

/// Nesting beyond this is `unknown`.
const MAX_DEPTH: usize = 6;

/// What one tool contributes.
#[derive(Clone)]
pub struct ToolApi<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
    pub output: Option<&'a Value>,
}

impl<'a> ToolApi<'a> {
    /// What `tool` declares.
    pub fn of(tool: &'a dyn crate::registry::Tool) -> Self {
        let spec = tool.spec();
        ToolApi {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
            output: tool.output_schema(),
        }
    }
}

/// `declare const tools: { … }`: one member per tool, each with its first description
/// line as a comment. `full` adds result types and whole descriptions. Stops before
/// `max_bytes`, saying how many tools it left out.
pub fn declarations(tools: &[ToolApi<'_>], full: bool, max_bytes: usize) -> String {
    let mut out = String::from("declare const tools: {\n");
    let mut left = 0usize;
    for (i, t) in tools.iter().enumerate() {
        let member = member(t, full);
        if out.len() + member.len() + 64 > max_bytes {
            left = tools.len() - i;
            break;
        }
        out.push_str(&member);
    }
    out.push_str("};\n");
    if left > 0 {
        out.push_str(&format!(
            "// …and {left} more tools: call code_api with a filter, or read toolhost://code/tools.d.ts\n"
        ));
    }
    out
}

fn member(t: &ToolApi<'_>, full: bool) -> String {
    let description = if full {
        t.description.trim().replace("*/", "* /")
    } else {
        first_line(t.description)
    };
    let mut s = String::new();
    if !description.is_empty() {
        if full {
            s.push_str("  /**\n");
            for line in description.lines() {
                s.push_str("   * ");
                s.push_str(line);
                s.push('\n');
            }
            s.push_str("   */\n");
        } else {
            s.push_str(&format!("  /** {description} */\n"));
        }
    }
    let result = match (full, t.output) {
        (true, Some(o)) => ts_type(o, 1),
        _ => "any".to_owned(),
    };
    s.push_str(&format!(
        "  {}(args: {}): Promise<{result}>;\n",
        key(t.name),
        ts_type(t.parameters, 1)
    ));
    s
}

/// The first sentence-ish line, at most 160 characters, safe inside a comment.
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut line: String = line.replace("*/", "* /");
    if line.len() > 160 {
        let mut cut = 157;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// A property name as a TS key: bare when it is an identifier, else quoted.
fn key(name: &str) -> String {
    let ident = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if ident {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    }
}

/// The TS type of a JSON Schema.
pub fn ts_type(schema: &Value, depth: usize) -> String {
    let Value::Object(s) = schema else {
        return if schema == &Value::Bool(false) {
            "never".into()
        } else {
            "unknown".into()
        };
    };
    if depth > MAX_DEPTH || s.contains_key("$ref") {
        return "unknown".into();
    }
    if let Some(c) = s.get("const") {
        return c.to_string();
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        return union(values.iter().map(Value::to_string));
    }
    for (k, sep) in [("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")] {
        if let Some(Value::Array(parts)) = s.get(k) {
            let parts: Vec<String> = parts.iter().map(|p| ts_type(p, depth + 1)).collect();
            return format!("({})", parts.join(sep));
        }
    }
    match s.get("type") {
        Some(Value::Array(types)) => union(
            types
                .iter()
                .filter_map(Value::as_str)
                .map(|t| of_type(t, s, depth)),
        ),
        Some(Value::String(t)) => of_type(t, s, depth),
        _ if s.contains_key("properties") => object(s, depth),
        _ => "unknown".into(),
    }
}

fn of_type(t: &str, s: &Map<String, Value>, depth: usize) -> String {
    match t {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => match s.get("items") {
            Some(items @ Value::Object(_)) => {
                let inner = ts_type(items, depth + 1);
                if inner.contains(' ') {
                    format!("Array<{inner}>")
                } else {
                    format!("{inner}[]")
                }
            }
            Some(Value::Array(tuple)) => format!(
                "[{}]",
                tuple
                    .iter()
                    .map(|i| ts_type(i, depth + 1))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => "unknown[]".into(),
        },
        "object" => object(s, depth),
        _ => "unknown".into(),
    }
}

fn object(s: &Map<String, Value>, depth: usize) -> String {
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut members: Vec<String> = Vec::new();
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, p) in props {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            members.push(format!(
                "{}{optional}: {}",
                key(name),
                ts_type(p, depth + 1)
            ));
        }
    }
    match s.get("additionalProperties") {
        Some(extra @ Value::Object(_)) => {
            members.push(format!("[key: string]: {}", ts_type(extra, depth + 1)));
        }
        Some(Value::Bool(false)) => {}
        _ if members.is_empty() => return "Record<string, unknown>".into(),
        _ => {}
    }
    if members.is_empty() {
        return "{}".into();
    }
    format!("{{ {} }}", members.join("; "))
}

fn union(parts: impl Iterator<Item = String>) -> String {
    let parts: Vec<String> = parts.collect();
    match parts.len() {
        0 => "never".into(),
        1 => parts.into_iter().next().unwrap_or_default(),
        _ => parts.join(" | "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_become_types() {
        let s = json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "n": {"type": "integer"},
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "odd-name": {"type": ["string", "null"]},
            "deep": {"$ref": "#/x"}
        }, "required": ["path"], "additionalProperties": false});
        assert_eq!(
            ts_type(&s, 1),
            r#"{ path: string; n?: number; mode?: "a" | "b"; tags?: string[]; "odd-name"?: string | null; deep?: unknown }"#
        );
        assert_eq!(
            ts_type(&json!({"type": "object"}), 1),
            "Record<string, unknown>"
        );
    }

    #[test]
    fn the_description_stays_within_its_budget() {
        let params = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let names: Vec<String> = (0..500).map(|i| format!("tool_{i}")).collect();
        let tools: Vec<ToolApi<'_>> = names
            .iter()
            .map(|n| ToolApi {
                name: n,
                description: "Does a thing.\nMore.",
                parameters: &params,
                output: None,
            })
            .collect();
        let d = declarations(&tools, false, 2048);
        assert!(d.len() <= 2048 + 120, "{}", d.len());
        assert!(d.contains("tool_0(args: { q?: string }): Promise<any>;"));
        assert!(d.contains("more tools: call code_api"));
    }
}
