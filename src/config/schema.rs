//! The config's JSON Schema, derived once from the typed model ([`Config`]), and the small
//! amount of schema reading that validation needs: finding the schema of a JSON path,
//! saying in words what a value there should be, and listing the keys an object knows.

use std::sync::OnceLock;

use serde_json::Value;

use super::path::Seg;
use super::Config;

/// The JSON Schema of config.json (draft 2020-12), generated from the model on first use.
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| schemars::schema_for!(Config).to_value())
}

/// The compiled validator; `Err` only if the generated schema were itself invalid, which
/// the unit tests rule out.
///
/// Compiled as draft 7, the draft tool schemas are read as (the generated schema uses no
/// keyword draft 7 lacks), so the process keeps one draft's meta-schema, not two. Kept for
/// the process's life: about 0.5 MB, and a reload then costs no recompilation.
pub(crate) fn validator() -> Result<&'static jsonschema::Validator, &'static str> {
    static VALIDATOR: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            let mut schema = schema().clone();
            if let Some(o) = schema.as_object_mut() {
                o.remove("$schema");
            }
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .build(&schema)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(String::as_str)
}

/// Follows `$ref` and unwraps `Option<T>` (`anyOf: [T, null]`) to the node that describes
/// the value.
fn resolve(mut node: &'static Value) -> &'static Value {
    for _ in 0..16 {
        if let Some(name) = node
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            match schema().get("$defs").and_then(|d| d.get(name)) {
                Some(n) => {
                    node = n;
                    continue;
                }
                None => return node,
            }
        }
        let alternatives = node
            .get("anyOf")
            .or_else(|| node.get("oneOf"))
            .and_then(Value::as_array);
        if let Some(alts) = alternatives {
            let non_null: Vec<&Value> = alts
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if non_null.len() == 1 && non_null.len() < alts.len() {
                node = non_null[0];
                continue;
            }
        }
        return node;
    }
    node
}

/// The schema of the value at `key` inside an object described by `node`: a declared
/// property, else the `additionalProperties` of a map; `None` for a key the model does not
/// know.
pub(crate) fn child(node: &'static Value, key: &str) -> Option<&'static Value> {
    let node = resolve(node);
    if let Some(p) = node.get("properties").and_then(|p| p.get(key)) {
        return Some(p);
    }
    // A tagged enum (`store`: `{"kind": …, …}`): the key of whichever variant declares it.
    let variants = node
        .get("oneOf")
        .or_else(|| node.get("anyOf"))
        .and_then(Value::as_array);
    if let Some(p) = variants
        .into_iter()
        .flatten()
        .find_map(|v| resolve(v).get("properties").and_then(|p| p.get(key)))
    {
        return Some(p);
    }
    node.get("additionalProperties").filter(|a| a.is_object())
}

/// The schema of the items of an array described by `node`.
pub(crate) fn item(node: &'static Value) -> Option<&'static Value> {
    resolve(node).get("items").filter(|i| i.is_object())
}

/// The schema at `path` from the root, if the model knows that path.
pub(crate) fn at(path: &[Seg]) -> Option<&'static Value> {
    let mut node = schema();
    for seg in path {
        node = match seg {
            Seg::Key(k) => child(node, k)?,
            Seg::Index(_) => item(node)?,
        };
    }
    Some(node)
}

/// Whether `key` is a declared property (a struct field) of the object at `node`, rather
/// than an entry of a map.
pub(crate) fn is_field(node: &'static Value, key: &str) -> bool {
    resolve(node)
        .get("properties")
        .is_some_and(|p| p.get(key).is_some())
}

/// The declared property names of the object at `node` (empty for maps and scalars).
pub(crate) fn fields(node: &'static Value) -> Vec<&'static str> {
    match resolve(node).get("properties").and_then(Value::as_object) {
        Some(p) => p.keys().map(String::as_str).collect(),
        None => Vec::new(),
    }
}

/// The JSON types the node allows, `null` left out.
pub(crate) fn types(node: &'static Value) -> Vec<&'static str> {
    let node = resolve(node);
    match node.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    }
}

/// The allowed string constants of an enum node, for "did you mean".
pub(crate) fn string_constants(node: &'static Value) -> Vec<&'static str> {
    constants(resolve(node))
        .into_iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The allowed constants of an enum node (`enum`, or `oneOf`/`anyOf` of `const`s).
fn constants(node: &'static Value) -> Vec<&'static Value> {
    if let Some(e) = node.get("enum").and_then(Value::as_array) {
        return e.iter().filter(|v| !v.is_null()).collect();
    }
    let mut out = Vec::new();
    for key in ["oneOf", "anyOf"] {
        for alt in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let alt = resolve(alt);
            if let Some(c) = alt.get("const").filter(|c| !c.is_null()) {
                out.push(c);
            }
            out.extend(constants(alt));
        }
    }
    out
}

/// What a value described by `node` should be, in words: `x-expected` when the model
/// gives it (patterns), else derived from the enum constants or the type and bounds.
pub(crate) fn expected(node: &'static Value) -> String {
    let node = resolve(node);
    if let Some(x) = node.get("x-expected").and_then(Value::as_str) {
        return x.to_owned();
    }
    let consts = constants(node);
    if !consts.is_empty() {
        let list: Vec<String> = consts.iter().map(|c| c.to_string()).collect();
        return format!("one of {}", list.join(", "));
    }
    let min = |k: &str| node.get(k).and_then(Value::as_u64).unwrap_or(0);
    let words: Vec<&str> = types(node)
        .into_iter()
        .map(|t| match t {
            "integer" if min("minimum") >= 1 => "a positive integer",
            "integer" => "an integer",
            "number" => "a number",
            "string" if min("minLength") >= 1 => "a non-empty string",
            "string" => "a string",
            "boolean" => "true or false",
            "array" => "an array",
            "object" => "an object",
            other => other,
        })
        .collect();
    if words.is_empty() {
        "a valid value".to_owned()
    } else {
        words.join(" or ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_schema_compiles() {
        assert!(validator().is_ok(), "{:?}", validator().err());
    }

    #[test]
    fn paths_resolve_through_refs_options_and_maps() {
        let p = |s: &[&str]| -> Vec<Seg> { s.iter().map(|k| Seg::Key((*k).into())).collect() };
        let cmd = at(&p(&["mcp_servers", "any", "command"])).unwrap();
        assert_eq!(expected(cmd), "a non-empty string");
        let mode = at(&p(&["approval", "mode"])).unwrap();
        assert_eq!(expected(mode), "one of \"auto\", \"strict\", \"read_only\"");
        let class = at(&p(&["mcp_servers", "x", "approval", "tool"])).unwrap();
        assert_eq!(
            expected(class),
            "one of \"read_only\", \"write\", \"command\""
        );
        let mut args = p(&["mcp_servers", "x", "args"]);
        args.push(Seg::Index(3));
        assert_eq!(expected(at(&args).unwrap()), "a string");
        assert_eq!(
            expected(at(&p(&["limits", "max_output_bytes"])).unwrap()),
            "a positive integer"
        );
        assert_eq!(
            expected(at(&p(&["listen", "socket_mode"])).unwrap()),
            "an octal mode string such as \"0660\""
        );
        assert!(at(&p(&["limits", "nope"])).is_none());
        assert!(fields(schema()).contains(&"mcp_servers"));
    }

    /// proto-docs/config.md documents every key of the model: each property name the
    /// schema declares appears there as `` `name` ``.
    #[test]
    fn the_reference_names_every_key() {
        fn walk(node: &'static Value, out: &mut Vec<&'static str>, depth: usize) {
            if depth > 8 {
                return;
            }
            for name in fields(node) {
                out.push(name);
                if let Some(c) = child(node, name) {
                    walk(c, out, depth + 1);
                }
            }
            if let Some(map) = resolve(node).get("additionalProperties") {
                if map.is_object() {
                    walk(map, out, depth + 1);
                }
            }
        }
        let mut names = Vec::new();
        walk(schema(), &mut names, 0);
        assert!(names.len() > 30, "{names:?}");
        let doc = include_str!("../../proto-docs/config.md");
        let missing: Vec<&str> = names
            .into_iter()
            .filter(|n| !doc.contains(&format!("`{n}`")))
            .collect();
        assert_eq!(missing, Vec::<&str>::new());
    }
}
