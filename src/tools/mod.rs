//! Built-in tools: file tools (`fs`, one module per tool: read, write, patch, list, search)
//! and the shell (`shell`: bash).
//!
//! Every tool builds its [`ToolSpec`](crate::catalog::ToolSpec) once in `new`. Schema
//! defaults and bounds are the same constants the code uses, so what the model reads is what
//! happens. File-tool paths go through [`paths`]: every open, create and rename happens beneath
//! a handle on the call's workspace, so the kernel keeps them inside it even while someone
//! swaps directories for symlinks; files are opened without blocking, and FIFOs and devices
//! are refused.
//!
//! Architecture Invariant: no built-in tool blocks the async runtime for long — file work runs
//! under [`run_blocking`], and bash children are spawned through [`crate::process`].

mod fs;
pub(crate) mod paths;
mod shell;

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use crate::registry::{Tool, ToolError};

pub use fs::{ListDir, PatchFile, ReadFile, SearchFiles, WriteFile};
pub use shell::Bash;

/// The six built-in tools. `outputs_dir` is where spilled outputs live; `read_file` may
/// read there even though it is outside the workspace.
pub fn builtins(outputs_dir: &Path) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile::new(outputs_dir)),
        Arc::new(WriteFile::new()),
        Arc::new(PatchFile::new()),
        Arc::new(ListDir::new()),
        Arc::new(SearchFiles::new()),
        Arc::new(Bash::new()),
    ]
}

/// `{"type":"object","properties":…,"required":…,"additionalProperties":false}`.
fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A required string argument.
fn str_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ToolError::invalid(format!(
            "arguments.{key} must be a string"
        ))),
        None => Err(ToolError::invalid(format!("arguments.{key} is required"))),
    }
}

/// An optional string argument (`null` counts as absent).
fn opt_str_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::invalid(format!(
            "arguments.{key} must be a string"
        ))),
    }
}

/// An optional integer argument within `[min, max]`, `default` when absent.
fn int_arg(
    args: &Map<String, Value>,
    key: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ToolError> {
    let n = match args.get(key) {
        None | Some(Value::Null) => return Ok(default),
        // JSON Schema's "integer" accepts 5.0, so do we.
        Some(Value::Number(n)) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        }),
        Some(_) => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ToolError::invalid(format!(
            "arguments.{key} must be an integer from {min} to {max}"
        ))),
    }
}

/// An optional boolean argument, `default` when absent.
fn bool_arg(args: &Map<String, Value>, key: &str, default: bool) -> Result<bool, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ToolError::invalid(format!(
            "arguments.{key} must be a boolean"
        ))),
    }
}

/// Runs blocking file work on tokio's blocking pool. The closure gets a token that fires when
/// the call is cancelled or its future is dropped (timeout), so long walks stop early instead
/// of running on after nobody waits for them.
async fn run_blocking<T, F>(cancel: &CancellationToken, work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&CancellationToken) -> Result<T, ToolError> + Send + 'static,
{
    let stop = cancel.child_token();
    let _stop_on_drop = stop.clone().drop_guard();
    tokio::task::spawn_blocking(move || work(&stop))
        .await
        .map_err(|e| ToolError::failed(format!("internal error in the tool: {e}")))?
}

/// The error a blocking walk returns when it notices the call was abandoned.
fn stopped() -> ToolError {
    ToolError::new(
        crate::protocol::ErrorKind::Cancelled,
        "the call was cancelled",
    )
}

/// Cuts `s` to at most `max` bytes on a char boundary; returns the kept prefix.
fn clip_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = max;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    &s[..i]
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;

    use serde_json::{Map, Value};

    use crate::registry::CallContext;

    pub fn ctx(workspace: &Path) -> CallContext {
        CallContext::for_test(workspace)
    }

    pub fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("arguments must be an object, got {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_the_protocol_names_and_object_schemas() {
        let tools = builtins(Path::new("/nonexistent/outputs"));
        let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "patch_file",
                "list_dir",
                "search_files",
                "bash"
            ]
        );
        for t in &tools {
            let spec = t.spec();
            let p = &spec.parameters;
            assert_eq!(p["type"], "object", "{}", spec.name);
            assert_eq!(p["additionalProperties"], false, "{}", spec.name);
            assert!(p["required"].is_array(), "{}", spec.name);
            for (prop, schema) in p["properties"].as_object().unwrap() {
                assert!(
                    schema["description"].is_string(),
                    "{}.{prop} lacks a description",
                    spec.name
                );
            }
            assert!(spec.approval.is_some(), "{}", spec.name);
            for line in spec.description.lines() {
                assert!(line.starts_with("- "), "{}: {line:?}", spec.name);
            }
            // The schema must compile as JSON Schema.
            jsonschema::validator_for(p).unwrap();
        }
    }

    #[test]
    fn int_arg_takes_defaults_bounds_and_whole_floats() {
        let a = test_support::args(json!({"n": 5.0, "big": 11, "neg": -1, "s": "3"}));
        assert_eq!(int_arg(&a, "n", 1, 1, 10).unwrap(), 5);
        assert_eq!(int_arg(&a, "missing", 7, 1, 10).unwrap(), 7);
        for key in ["big", "neg", "s"] {
            let e = int_arg(&a, key, 1, 1, 10).unwrap_err();
            assert_eq!(
                e.message,
                format!("arguments.{key} must be an integer from 1 to 10")
            );
        }
    }
}
