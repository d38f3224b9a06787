//! `list_dir`: a depth-limited, breadth-first listing of a directory tree.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::super::paths::{open_workspace, resolve_target, shown_rel};
use super::super::{int_arg, object_schema, opt_str_arg, run_blocking, stopped};
use crate::catalog::ToolSpec;
use crate::protocol::ApprovalClass;
use crate::protocol::ToolOutput;
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

/// `list_dir`: default and largest `depth`.
pub const LIST_DEFAULT_DEPTH: u64 = 2;
pub const LIST_MAX_DEPTH: u64 = 10;
/// `list_dir`: at most this many entries are listed.
pub const LIST_MAX_ENTRIES: usize = 1000;

/// Lists a directory tree, depth-limited.
pub struct ListDir {
    spec: ToolSpec,
}

impl Default for ListDir {
    fn default() -> Self {
        Self::new()
    }
}

impl ListDir {
    pub fn new() -> Self {
        let description = format!(
            "- Lists files and directories under a directory of the workspace, recursively up to depth levels (depth 1 = direct entries only).\n\
             - Use it to explore a project's layout; use search_files to find text inside files.\n\
             - Returns entries: one path per line, relative to the workspace and sorted; directories end with \"/\", symbolic links show \"-> target\" and are not followed; .git is skipped.\n\
             - Lists at most {LIST_MAX_ENTRIES} entries (truncated: true when more exist; list a subdirectory or lower depth)."
        );
        let parameters = object_schema(
            json!({
                "path": {
                    "type": "string",
                    "description": "Directory to list: relative to the workspace, or absolute inside it.",
                    "default": "."
                },
                "depth": {
                    "type": "integer",
                    "description": "How many levels to descend; 1 lists only the directory's own entries.",
                    "minimum": 1,
                    "maximum": LIST_MAX_DEPTH,
                    "default": LIST_DEFAULT_DEPTH
                }
            }),
            &[],
        );
        ListDir {
            spec: ToolSpec::builtin(
                "list_dir",
                &description,
                parameters,
                ApprovalClass::ReadOnly,
            ),
        }
    }
}

impl Tool for ListDir {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let path = opt_str_arg(&args, "path")?.unwrap_or(".").to_owned();
            let depth = int_arg(&args, "depth", LIST_DEFAULT_DEPTH, 1, LIST_MAX_DEPTH)?;
            run_blocking(&ctx.cancel, move |stop| {
                list_dir(&ctx.workspace, &path, depth, LIST_MAX_ENTRIES, stop)
            })
            .await
        })
    }
}

fn list_dir(
    workspace: &Path,
    raw: &str,
    depth: u64,
    max_entries: usize,
    stop: &CancellationToken,
) -> ToolResult {
    let root = open_workspace(workspace)?;
    let target = resolve_target(&root, &[], raw)?;
    let name = target.shown.as_str();
    let not_dir = || {
        ToolError::failed(format!(
            "{name} is not a directory; use read_file to read a file"
        ))
    };
    // Every directory is opened beneath the workspace handle: a subdirectory swapped for a
    // symlink mid-walk can only lead elsewhere inside the workspace. Directories are opened
    // as they are reached (not kept open in the queue), so a wide tree cannot run out of fds.
    match root.dir.open_dir(target.rel_path()) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => return Err(not_dir()),
        Err(e) => return Err(target.error("list", &e)),
    }
    // Breadth first, so a truncated listing still shows the upper levels completely; sorted
    // by path components afterwards, which gives tree order.
    let mut entries: Vec<(PathBuf, String)> = Vec::new();
    let mut queue = VecDeque::from([(target.rel.clone(), 1u64)]);
    let mut truncated = false;
    let mut unreadable = 0u64;
    'walk: while let Some((rel_dir, level)) = queue.pop_front() {
        if stop.is_cancelled() {
            return Err(stopped());
        }
        let opened = root.dir.open_dir(if rel_dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &rel_dir
        });
        let read = match opened.and_then(|d| d.entries().map(|r| (d, r))) {
            Ok(r) => r,
            Err(e) if rel_dir == target.rel => return Err(target.error("list", &e)),
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        let (dir, read) = read;
        let mut children: Vec<(std::ffi::OsString, cap_std::fs::FileType)> = read
            .filter_map(Result::ok)
            .filter_map(|e| e.file_type().ok().map(|t| (e.file_name(), t)))
            .filter(|(n, _)| n != ".git")
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (child, kind) in children {
            if entries.len() >= max_entries {
                truncated = true;
                break 'walk;
            }
            let path = rel_dir.join(&child);
            let rel = shown_rel(&path);
            let line = if kind.is_dir() {
                format!("{rel}/")
            } else if kind.is_symlink() {
                match dir.read_link_contents(&child) {
                    Ok(target) => format!("{rel} -> {}", target.display()),
                    Err(_) => rel,
                }
            } else {
                rel
            };
            if kind.is_dir() && level < depth {
                queue.push_back((path.clone(), level + 1));
            }
            entries.push((path, line));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let listing: Vec<String> = entries.into_iter().map(|(_, l)| l).collect();
    let mut out = Map::new();
    out.insert("path".into(), json!(name));
    out.insert("depth".into(), json!(depth));
    out.insert("count".into(), json!(listing.len()));
    out.insert("entries".into(), json!(listing.join("\n")));
    out.insert("truncated".into(), json!(truncated));
    let mut notes = Vec::new();
    if listing.is_empty() {
        notes.push("the directory is empty".to_owned());
    }
    if truncated {
        notes.push(format!(
            "stopped at {max_entries} entries; list a subdirectory or use a smaller depth"
        ));
    }
    if unreadable > 0 {
        notes.push(format!("{unreadable} subdirectories could not be read"));
    }
    if !notes.is_empty() {
        out.insert("note".into(), json!(notes.join("; ")));
    }
    Ok(ToolOutput::from_fields(out))
}

#[cfg(test)]
mod tests {

    use std::os::unix::fs::symlink;

    use serde_json::{json, Value};

    use super::*;

    use crate::tools::fs::test_support::{assert_escape, Ws};

    // list_dir

    #[tokio::test]
    async fn list_dir_sorts_marks_dirs_skips_git_and_limits_depth() {
        let ws = Ws::new();
        ws.write("b.txt", "");
        ws.write("a/z.txt", "");
        ws.write("a/deep/x.txt", "");
        ws.write("a-b.txt", "");
        ws.write(".git/HEAD", "");
        ws.write(".env", "");
        symlink("b.txt", ws.root.join("l")).unwrap();
        let r = ws.call(&ListDir::new(), json!({})).await.unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"path": ".", "depth": 2, "count": 7, "truncated": false,
                   "entries": ".env\na/\na/deep/\na/z.txt\na-b.txt\nb.txt\nl -> b.txt"})
        );
        let r = ws
            .call(&ListDir::new(), json!({"path": "a", "depth": 1}))
            .await
            .unwrap();
        assert_eq!(r["entries"], "a/deep/\na/z.txt");
    }

    #[tokio::test]
    async fn list_dir_truncates_breadth_first() {
        let ws = Ws::new();
        ws.write("sub/inner.txt", "");
        for i in 0..5 {
            ws.write(&format!("f{i}.txt"), "");
        }
        let r = list_dir(&ws.root, ".", 2, 4, &CancellationToken::new())
            .unwrap()
            .fields;
        assert_eq!(r["entries"], "f0.txt\nf1.txt\nf2.txt\nf3.txt");
        assert_eq!(r["truncated"], true);
        assert!(r["note"]
            .as_str()
            .unwrap()
            .starts_with("stopped at 4 entries"));
    }

    #[tokio::test]
    async fn list_dir_refuses_files_and_escapes() {
        let ws = Ws::new();
        ws.write("f.txt", "");
        let e = ws
            .call(&ListDir::new(), json!({"path": "f.txt"}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "f.txt is not a directory; use read_file to read a file"
        );
        assert_escape(ws.call(&ListDir::new(), json!({"path": ".."})).await, "..");
    }
}
