//! `write_file`: create or replace a whole file.

use std::path::Path;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::super::paths::{open_workspace, resolve_target};
use super::super::{object_schema, run_blocking, str_arg};
use super::write_atomic;
use crate::catalog::ToolSpec;
use crate::protocol::ApprovalClass;
use crate::protocol::ToolOutput;
use crate::registry::{CallContext, Tool, ToolResult};

/// Creates or replaces a file with the given content.
pub struct WriteFile {
    spec: ToolSpec,
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteFile {
    pub fn new() -> Self {
        let description = "- Creates a file, or replaces an existing file's whole content, in the workspace.\n\
             - Creates missing parent directories; the write is atomic and keeps an existing file's permissions.\n\
             - Prefer patch_file for changing part of an existing file.\n\
             - Returns path, bytes_written and created (false when an existing file was replaced).";
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "File to write: relative to the workspace, or absolute inside it."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            }),
            &["path", "content"],
        );
        WriteFile {
            spec: ToolSpec::builtin("write_file", description, parameters, ApprovalClass::Write),
        }
    }
}

impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = str_arg(&args, "path")?.to_owned();
            let content = str_arg(&args, "content")?.to_owned();
            run_blocking(&ctx.cancel, move |_| {
                write_file(&ctx.workspace, &path, &content)
            })
            .await
        })
    }
}

fn write_file(workspace: &Path, raw: &str, content: &str) -> ToolResult {
    let root = open_workspace(workspace)?;
    let target = resolve_target(&root, &[], raw)?;
    let name = target.shown.as_str();
    let created = write_atomic(&root, &target, content.as_bytes())?;
    let mut out = Map::new();
    out.insert("path".into(), json!(name));
    out.insert("bytes_written".into(), json!(content.len()));
    out.insert("created".into(), json!(created));
    Ok(ToolOutput::from_fields(out))
}

#[cfg(test)]
mod tests {
    use std::fs::{self, Permissions};
    use std::os::unix::fs::{symlink, PermissionsExt};

    use serde_json::{json, Value};

    use super::*;

    use crate::tools::fs::test_support::{assert_escape, Ws};

    // write_file

    #[tokio::test]
    async fn write_file_creates_parents_then_replaces_keeping_permissions() {
        let ws = Ws::new();
        let r = ws
            .call(
                &WriteFile::new(),
                json!({"path": "a/b/c.sh", "content": "echo 1\n"}),
            )
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "a/b/c.sh", "bytes_written": 7, "created": true})
        );
        assert_eq!(ws.read("a/b/c.sh"), "echo 1\n");
        fs::set_permissions(ws.root.join("a/b/c.sh"), Permissions::from_mode(0o751)).unwrap();
        let r = ws
            .call(
                &WriteFile::new(),
                json!({"path": "a/b/c.sh", "content": "echo 22\n"}),
            )
            .await
            .unwrap();
        assert_eq!(r["created"], false);
        assert_eq!(ws.read("a/b/c.sh"), "echo 22\n");
        let mode = fs::metadata(ws.root.join("a/b/c.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o751);
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(ws.root.join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.sh"]);
    }

    #[tokio::test]
    async fn write_file_new_files_are_not_private() {
        let ws = Ws::new();
        ws.call(&WriteFile::new(), json!({"path": "n.txt", "content": ""}))
            .await
            .unwrap();
        let mode = fs::metadata(ws.root.join("n.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o600, 0o600);
        assert_ne!(
            mode & 0o044,
            0,
            "new files get 0666 minus the umask, not tempfile's 0600"
        );
    }

    #[tokio::test]
    async fn write_file_refuses_escapes_and_directories() {
        let ws = Ws::new();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), ws.root.join("out")).unwrap();
        let abs = outside.path().join("x.txt").display().to_string();
        let w = WriteFile::new();
        assert_escape(
            ws.call(&w, json!({"path": "../x.txt", "content": "x"}))
                .await,
            "../x.txt",
        );
        assert_escape(
            ws.call(&w, json!({"path": "new/../../x.txt", "content": "x"}))
                .await,
            "new/../../x.txt",
        );
        assert_escape(
            ws.call(&w, json!({"path": abs, "content": "x"})).await,
            &abs,
        );
        assert_escape(
            ws.call(&w, json!({"path": "out/x.txt", "content": "x"}))
                .await,
            "out/x.txt",
        );
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
        let e = ws
            .call(&w, json!({"path": ".", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.message, ". is a directory; give the path of a file");
    }

    #[tokio::test]
    async fn write_file_through_an_inside_symlink_keeps_the_link() {
        let ws = Ws::new();
        ws.write("real/t.txt", "old\n");
        symlink("real/t.txt", ws.root.join("l.txt")).unwrap();
        symlink("nowhere.txt", ws.root.join("dangling")).unwrap();
        let w = WriteFile::new();
        let r = ws
            .call(&w, json!({"path": "l.txt", "content": "new\n"}))
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": "l.txt", "bytes_written": 4, "created": false})
        );
        assert_eq!(ws.read("real/t.txt"), "new\n");
        assert!(fs::symlink_metadata(ws.root.join("l.txt"))
            .unwrap()
            .file_type()
            .is_symlink());
        let e = ws
            .call(&w, json!({"path": "dangling", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "cannot write dangling: it is a symbolic link to something that does not exist"
        );
        assert!(!ws.root.join("nowhere.txt").exists());
    }

    #[tokio::test]
    async fn write_file_follows_symlinked_directories_inside_the_workspace() {
        let ws = Ws::new();
        fs::create_dir(ws.root.join("real")).unwrap();
        symlink("real", ws.root.join("via")).unwrap();
        let w = WriteFile::new();
        let r = ws
            .call(&w, json!({"path": "via/new/f.txt", "content": "x"}))
            .await
            .unwrap();
        assert_eq!(r["created"], true);
        assert_eq!(ws.read("real/new/f.txt"), "x");
        // A file where a directory is needed is an ordinary failure, not an escape.
        let e = ws
            .call(&w, json!({"path": "real/new/f.txt/g.txt", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.kind, crate::protocol::ErrorKind::Failed, "{}", e.message);
    }
}
