//! `patch_file`: replace an exact string in a text file.

use std::io::Read as _;
use std::path::Path;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::super::paths::{open_workspace, resolve_target};
use super::super::{bool_arg, object_schema, run_blocking, str_arg};
use super::{is_binary, open_regular, write_atomic};
use crate::catalog::ToolSpec;
use crate::protocol::ApprovalClass;
use crate::protocol::ToolOutput;
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

/// Replaces an exact string in a file.
pub struct PatchFile {
    spec: ToolSpec,
}

impl Default for PatchFile {
    fn default() -> Self {
        Self::new()
    }
}

impl PatchFile {
    pub fn new() -> Self {
        let description = "- Edits a text file in the workspace by replacing an exact string: old_string becomes new_string.\n\
             - old_string must match the file exactly (whitespace and indentation included) and exactly once; include enough surrounding lines to make it unique, or set replace_all to change every occurrence.\n\
             - Read the file with read_file first; do not include the line-number prefixes in old_string.\n\
             - The write is atomic and keeps the file's permissions. Returns path, replacements and first_line (the line where the first replacement starts).";
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "File to edit: relative to the workspace, or absolute inside it."
                },
                "old_string": {
                    "type": "string",
                    "description": "The exact text to replace; must not be empty.",
                    "minLength": 1
                },
                "new_string": {
                    "type": "string",
                    "description": "The replacement text; must differ from old_string (may be empty to delete)."
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one.",
                    "default": false
                }
            }),
            &["path", "old_string", "new_string"],
        );
        PatchFile {
            spec: ToolSpec::builtin("patch_file", description, parameters, ApprovalClass::Write),
        }
    }
}

impl Tool for PatchFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = str_arg(&args, "path")?.to_owned();
            let old = str_arg(&args, "old_string")?.to_owned();
            let new = str_arg(&args, "new_string")?.to_owned();
            let replace_all = bool_arg(&args, "replace_all", false)?;
            if old.is_empty() {
                return Err(ToolError::invalid("old_string must not be empty"));
            }
            if old == new {
                return Err(ToolError::invalid(
                    "old_string and new_string are identical; nothing to change",
                ));
            }
            run_blocking(&ctx.cancel, move |_| {
                patch_file(&ctx.workspace, &path, &old, &new, replace_all)
            })
            .await
        })
    }
}

fn patch_file(workspace: &Path, raw: &str, old: &str, new: &str, replace_all: bool) -> ToolResult {
    let root = open_workspace(workspace)?;
    let target = resolve_target(&root, &[], raw)?;
    let name = target.shown.as_str();
    let mut bytes = Vec::new();
    open_regular(&root, &target, "patch", ", not a file")?
        .read_to_end(&mut bytes)
        .map_err(|e| target.error("patch", &e))?;
    if is_binary(&bytes) {
        return Err(ToolError::failed(format!(
            "{name} is a binary file; patch_file only edits text"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        ToolError::failed(format!(
            "{name} is not valid UTF-8; patch_file only edits text"
        ))
    })?;
    let count = text.matches(old).count();
    if count == 0 {
        let hint = if text.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
            " (the file has CRLF line endings; old_string must contain \\r\\n)"
        } else {
            ""
        };
        return Err(ToolError::failed(format!(
            "old_string not found in {name}{hint}"
        )));
    }
    if count > 1 && !replace_all {
        return Err(ToolError::failed(format!(
            "old_string matches {count} times in {name}; add more context or set replace_all"
        ))
        .with_field("matches", count));
    }
    let first_line = text
        .find(old)
        .map_or(1, |i| text[..i].matches('\n').count() + 1);
    let patched = if replace_all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    write_atomic(&root, &target, patched.as_bytes())?;
    let mut out = Map::new();
    out.insert("path".into(), json!(name));
    out.insert("replacements".into(), json!(count));
    out.insert("first_line".into(), json!(first_line));
    Ok(ToolOutput::from_fields(out))
}

#[cfg(test)]
mod tests {

    use serde_json::{json, Value};

    use super::*;
    use crate::protocol::ErrorKind;
    use crate::tools::fs::test_support::{assert_escape, Ws};

    // patch_file

    #[tokio::test]
    async fn patch_file_replaces_one_exact_match() {
        let ws = Ws::new();
        ws.write("m.rs", "fn a() {}\nfn b() {}\n");
        let r = ws
            .call(
                &PatchFile::new(),
                json!({"path": "m.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
            )
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "m.rs", "replacements": 1, "first_line": 2})
        );
        assert_eq!(ws.read("m.rs"), "fn a() {}\nfn c() {}\n");
    }

    #[tokio::test]
    async fn patch_file_zero_and_multiple_matches_fail_clearly() {
        let ws = Ws::new();
        ws.write("m.txt", "x = 1\nx = 1\n");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "y", "new_string": "z"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::Failed, "old_string not found in m.txt")
        );
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "x = 1", "new_string": "x = 2"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "old_string matches 2 times in m.txt; add more context or set replace_all"
        );
        assert_eq!(ws.read("m.txt"), "x = 1\nx = 1\n");
        let r = ws
            .call(&p, json!({"path": "m.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}))
            .await
            .unwrap();
        assert_eq!(r["replacements"], 2);
        assert_eq!(ws.read("m.txt"), "x = 2\nx = 2\n");
    }

    #[tokio::test]
    async fn patch_file_rejects_empty_and_identical_strings() {
        let ws = Ws::new();
        ws.write("m.txt", "abc");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "", "new_string": "z"}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::InvalidArguments, "old_string must not be empty")
        );
        let e = ws
            .call(
                &p,
                json!({"path": "m.txt", "old_string": "a", "new_string": "a"}),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArguments);
    }

    #[tokio::test]
    async fn patch_file_hints_at_crlf_and_refuses_escapes() {
        let ws = Ws::new();
        ws.write("w.txt", "a\r\nb\r\n");
        let p = PatchFile::new();
        let e = ws
            .call(
                &p,
                json!({"path": "w.txt", "old_string": "a\nb", "new_string": "c"}),
            )
            .await
            .unwrap_err();
        assert!(e.message.contains("CRLF"), "{}", e.message);
        assert_escape(
            ws.call(
                &p,
                json!({"path": "/etc/hostname", "old_string": "a", "new_string": "b"}),
            )
            .await,
            "/etc/hostname",
        );
    }
}
