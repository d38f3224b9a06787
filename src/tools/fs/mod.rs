//! File tools: `read_file`, `write_file`, `patch_file`, `list_dir`, `search_files`, one
//! module per tool; this module holds what they share.
//!
//! Each tool parses its arguments on the async side, then does all file work in one blocking
//! closure under [`run_blocking`](super::run_blocking). Writes are atomic (a temporary file in
//! the same directory, renamed over the target) and keep an existing file's permissions.

mod list;
mod patch;
mod read;
mod search;
mod write;

use std::fs::Permissions;
use std::io::{self, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::clip_str;
use crate::registry::ToolError;

pub use list::ListDir;
pub use patch::PatchFile;
pub use read::ReadFile;
pub use search::SearchFiles;
pub use write::WriteFile;

/// Files with a NUL byte in their first this many bytes are binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Turns an I/O error on `path` into a readable tool error.
fn io_error(action: &str, path: &str, e: &io::Error) -> ToolError {
    match e.kind() {
        io::ErrorKind::NotFound => {
            ToolError::failed(format!("cannot {action} {path}: no such file or directory"))
        }
        io::ErrorKind::PermissionDenied => {
            ToolError::failed(format!("cannot {action} {path}: permission denied"))
        }
        _ => ToolError::failed(format!("cannot {action} {path}: {e}")),
    }
}

fn is_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed, then
/// renamed over the target. `keep` is the existing file's permissions (new files get 0666
/// minus the umask, like any editor's).
fn atomic_write(path: &Path, bytes: &[u8], keep: Option<Permissions>) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path has no parent directory",
        )
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{}.", clip_str(&name, 100));
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(
            keep.clone()
                .unwrap_or_else(|| Permissions::from_mode(0o666)),
        )
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if let Some(p) = keep {
        // The umask applied at creation may have narrowed the mode; restore it exactly.
        tmp.as_file().set_permissions(p)?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
pub(super) mod test_support {
    use std::fs;
    use std::path::{Path, PathBuf};

    use serde_json::Value;

    use super::ReadFile;
    use crate::protocol::ErrorKind;
    use crate::registry::{Tool, ToolResult};
    use crate::tools::test_support::{args, ctx};

    pub struct Ws {
        _dir: tempfile::TempDir,
        pub root: PathBuf,
    }

    impl Ws {
        pub fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = fs::canonicalize(dir.path()).unwrap();
            Ws { _dir: dir, root }
        }
        pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
            let p = self.root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        }
        pub fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.root.join(rel)).unwrap()
        }
        pub async fn call(&self, tool: &dyn Tool, a: Value) -> ToolResult {
            tool.call(args(a), ctx(&self.root)).await
        }
    }

    pub fn read_tool() -> ReadFile {
        ReadFile::new(Path::new("/nonexistent/outputs"))
    }

    pub fn assert_escape(r: ToolResult, raw: &str) {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArguments, "{}", e.message);
        assert!(
            e.message
                .starts_with(&format!("path escapes the workspace: {raw} ")),
            "{}",
            e.message
        );
    }
}
