//! File tools: `read_file`, `write_file`, `patch_file`, `list_dir`, `search_files`, one
//! module per tool; this module holds what they share.
//!
//! Each tool parses its arguments on the async side, then does all file work in one blocking
//! closure under [`run_blocking`](super::run_blocking). All I/O goes through the workspace's
//! directory handle ([`Root`]) with workspace-relative paths, so nothing can be redirected
//! outside between a check and a use. Files are opened with [`open_node`], which never blocks
//! and refuses FIFOs, sockets and devices. Writes are atomic (a temporary file in the same
//! directory, renamed over the target) and keep an existing file's permissions.

mod list;
mod patch;
mod read;
mod search;
mod write;

use std::fs::Permissions;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptionsExt, PermissionsExt as _};

use super::clip_str;
use super::paths::{is_escape, Root, Target};
use crate::registry::ToolError;
use crate::safe_read::kind_name;
pub(super) use crate::safe_read::{open_node, Node};

pub use list::ListDir;
pub use patch::PatchFile;
pub use read::ReadFile;
pub use search::SearchFiles;
pub use write::WriteFile;

/// Files with a NUL byte in their first this many bytes are binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

fn is_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// The name [`kind_name`] gives a cap-std file type (which has no conversion to std's).
fn cap_special_kind(kind: cap_std::fs::FileType) -> &'static str {
    use cap_std::fs::FileTypeExt;
    kind_name(
        kind.is_fifo(),
        kind.is_socket(),
        kind.is_char_device(),
        kind.is_block_device(),
    )
}

/// The error for a path that is neither a regular file nor a directory.
pub(super) fn not_regular(name: &str, kind: &str) -> ToolError {
    ToolError::failed(format!("{name} is not a regular file ({kind})"))
}

/// Opens a text-tool target as a regular file, or explains what it is instead; `dir_hint`
/// is the message's tail when it is a directory.
pub(super) fn open_regular(
    root: &Root,
    target: &Target,
    action: &str,
    dir_hint: &str,
) -> Result<std::fs::File, ToolError> {
    match open_node(&root.dir, target.rel_path()) {
        Ok(Node::File(f)) => Ok(f),
        Ok(Node::Dir) => Err(ToolError::failed(format!(
            "{} is a directory{dir_hint}",
            target.shown
        ))),
        Ok(Node::Special(kind)) => Err(not_regular(&target.shown, kind)),
        Err(e) => Err(target.error(action, &e)),
    }
}

/// Writes `bytes` to the workspace file `target` atomically: a temporary file in the same
/// directory, flushed, then renamed over the target, all through directory handles beneath
/// the workspace. Creates missing parent directories. Keeps an existing file's permissions
/// (new files get 0666 minus the umask, like any editor's). Returns whether the file is new.
///
/// The rename replaces a hard link rather than writing through it, so a link to a file
/// outside the workspace never changes that file. A symlink inside the workspace is followed
/// (to a target inside it) so that the link stays a link.
pub(super) fn write_atomic(ws: &Root, target: &Target, bytes: &[u8]) -> Result<bool, ToolError> {
    let name = &target.shown;
    let is_dir = || ToolError::failed(format!("{name} is a directory; give the path of a file"));
    let mut rel = target.rel.clone();
    let (dir, file, keep) = loop {
        let (Some(parent_rel), Some(file)) = (rel.parent(), rel.file_name()) else {
            return Err(is_dir());
        };
        let file = file.to_owned();
        let parent = open_parent(ws, target, parent_rel)?;
        match parent.symlink_metadata(&file) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => break (parent, file, None),
            Err(e) => return Err(target.error("write", &e)),
            Ok(m) if m.is_dir() => return Err(is_dir()),
            Ok(m) if m.is_file() => break (parent, file, Some(m.permissions().mode())),
            Ok(m) if m.file_type().is_symlink() && rel == target.rel => {
                rel = symlink_target(ws, target, &rel)?;
            }
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ToolError::failed(format!(
                    "cannot write {name}: its symbolic link changed while writing"
                )))
            }
            Ok(m) => return Err(not_regular(name, cap_special_kind(m.file_type()))),
        }
    };
    let tmp_name = {
        let mut n = std::ffi::OsString::from(".");
        n.push(clip_str(&file.to_string_lossy(), 100));
        n.push(format!(".{:016x}.tmp", fastrand::u64(..)));
        n
    };
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.write(true)
        .create_new(true)
        .mode(keep.unwrap_or(0o666));
    let written = dir.open_with(&tmp_name, &opts).and_then(|f| {
        let mut f = f.into_std();
        f.write_all(bytes)?;
        if let Some(mode) = keep {
            // The umask applied at creation may have narrowed the mode; restore it exactly.
            f.set_permissions(Permissions::from_mode(mode))?;
        }
        f.sync_all()?;
        dir.rename(&tmp_name, &dir, &file)
    });
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp_name);
        return Err(target.error("write", &e));
    }
    Ok(keep.is_none())
}

/// Opens the directory `parent_rel` beneath the workspace, creating it (and its parents)
/// when missing. Symlinked directories inside the workspace are followed.
fn open_parent(ws: &Root, target: &Target, parent_rel: &Path) -> Result<Dir, ToolError> {
    let parent_rel = if parent_rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent_rel
    };
    match ws.dir.open_dir(parent_rel) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r.map_err(|e| target.error("write", &e)),
    }
    ws.dir.create_dir_all(parent_rel).map_err(|e| {
        // A dangling symlink or one leading outside shows up as "exists"; opening it again
        // tells an escape apart from an ordinary failure.
        match ws.dir.open_dir(parent_rel) {
            Err(open) if is_escape(&open) => target.error("write", &open),
            _ => ToolError::failed(format!(
                "cannot create the parent directories of {}: {e}",
                target.shown
            )),
        }
    })?;
    ws.dir
        .open_dir(parent_rel)
        .map_err(|e| target.error("write", &e))
}

/// Where the symlink `rel` points, as a workspace-relative path, found by opening it beneath
/// the workspace (so its target must be inside) and asking the kernel which file that is.
fn symlink_target(ws: &Root, target: &Target, rel: &Path) -> Result<PathBuf, ToolError> {
    let name = &target.shown;
    let file = match open_node(&ws.dir, rel) {
        Ok(Node::File(f)) => f,
        Ok(Node::Dir) => {
            return Err(ToolError::failed(format!(
                "{name} is a directory; give the path of a file"
            )))
        }
        Ok(Node::Special(kind)) => return Err(not_regular(name, kind)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ToolError::failed(format!(
                "cannot write {name}: it is a symbolic link to something that does not exist"
            )))
        }
        Err(e) => return Err(target.error("write", &e)),
    };
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| target.error("write", &e))?;
    real.strip_prefix(&ws.path)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            ToolError::failed(format!(
                "cannot write {name}: cannot tell where its symbolic link leads"
            ))
        })
}

#[cfg(test)]
pub(super) mod test_support {
    use std::fs;
    use std::path::{Path, PathBuf};

    use serde_json::{Map, Value};

    use super::ReadFile;
    use crate::protocol::ErrorKind;
    use crate::registry::{Tool, ToolError};
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
        /// A call's fields (or its error).
        pub async fn call(
            &self,
            tool: &dyn Tool,
            a: Value,
        ) -> Result<Map<String, Value>, ToolError> {
            tool.call(args(a), ctx(&self.root)).await.map(|o| o.fields)
        }
    }

    pub fn read_tool() -> ReadFile {
        ReadFile::new(Path::new("/nonexistent/outputs"))
    }

    pub fn assert_escape<T: std::fmt::Debug>(r: Result<T, ToolError>, raw: &str) {
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
