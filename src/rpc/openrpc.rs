//! OpenRPC 1.x document built from the params/result types of the registered methods.

use schemars::JsonSchema;
use serde_json::{json, Map, Value};

pub struct MethodDoc {
    value: Value,
    defs: Map<String, Value>,
}

/// Splits a schemars root schema into (schema, `$defs`), pointing refs at `components`.
fn schema_of<T: JsonSchema>() -> (Value, Map<String, Value>) {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    let text = schema
        .to_string()
        .replace("#/$defs/", "#/components/schemas/");
    let mut schema: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let defs = match schema.as_object_mut() {
        Some(o) => {
            o.remove("$schema");
            match o.remove("$defs") {
                Some(Value::Object(d)) => d,
                _ => Map::new(),
            }
        }
        None => Map::new(),
    };
    (schema, defs)
}

/// Content descriptors of a by-name params struct: one per property.
fn params_of(schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, s)| {
                    let mut d = json!({"name": name, "required": required.contains(&name.as_str()), "schema": s});
                    if let Some(desc) = s.get("description") {
                        d["description"] = desc.clone();
                    }
                    d
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn method<P: JsonSchema, R: JsonSchema>(name: &str, summary: &str) -> MethodDoc {
    let (p, mut defs) = schema_of::<P>();
    let (r, rdefs) = schema_of::<R>();
    defs.extend(rdefs);
    MethodDoc {
        value: json!({
            "name": name,
            "summary": summary,
            "paramStructure": "by-name",
            "params": params_of(&p),
            "result": {"name": format!("{name}_result"), "schema": r},
        }),
        defs,
    }
}

/// A subscription: the method returns a subscription id; `x-notification` describes the
/// notifications it sends and `x-unsubscribe` the method that ends it.
pub fn subscription<P: JsonSchema, N: JsonSchema>(
    name: &str,
    notification: &str,
    unsubscribe: &str,
    summary: &str,
) -> MethodDoc {
    let mut doc = method::<P, String>(name, summary);
    let (n, ndefs) = schema_of::<N>();
    doc.defs.extend(ndefs);
    doc.value["result"] =
        json!({"name": "subscription_id", "schema": {"type": ["string", "integer"]}});
    doc.value["x-notification"] =
        json!({"method": notification, "params": {"subscription": "the id", "result": n}});
    doc.value["x-unsubscribe"] = json!(unsubscribe);
    doc
}

/// The method that ends a subscription: its one positional param is the subscription id.
pub fn unsubscribe(name: &str, subscribe: &str) -> MethodDoc {
    MethodDoc {
        value: json!({
            "name": name,
            "summary": format!("Ends a subscription made with `{subscribe}`; false when there was none."),
            "paramStructure": "by-position",
            "params": [{"name": "subscription", "required": true, "schema": {"type": ["string", "integer"]}}],
            "result": {"name": format!("{name}_result"), "schema": {"type": "boolean"}},
        }),
        defs: Map::new(),
    }
}

pub fn document(methods: &[MethodDoc]) -> Value {
    let mut schemas = Map::new();
    for m in methods {
        schemas.extend(m.defs.clone());
    }
    json!({
        "openrpc": "1.3.2",
        "info": {
            "title": "toolhost",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "One shared tool host for AI coding agents. JSON-RPC 2.0 over a Unix socket (newline JSON, HTTP POST, WebSocket). Tool failures are ok:false results; see proto-docs/.",
        },
        "methods": methods.iter().map(|m| m.value.clone()).collect::<Vec<_>>(),
        "components": {"schemas": schemas},
    })
}
