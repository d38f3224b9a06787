//! Keeping path arguments inside the workspace, atomically.
//!
//! A call opens its workspace once as a directory handle ([`Root`]); every file operation then
//! goes through that handle with a path relative to it (cap-std: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, or a component-at-a-time `O_NOFOLLOW` walk on
//! kernels without it). The kernel refuses any resolution that leaves the directory, so a
//! symlink swapped in between a check and a use cannot redirect a read or a write outside:
//! there is no check-then-open window.
//!
//! Path arguments are first made relative lexically: an absolute path must start with the
//! workspace's path (as given or canonical), and `..` pops a component of the argument itself
//! (`a/../b` is `b`, even if `a` is a symlink). A `..` that would climb above the workspace is
//! refused before anything is opened. Symlinks inside the workspace still work as long as
//! their targets stay inside.
//!
//! Not covered: a hard link inside the workspace to an outside file is the same file, so
//! reading it reads the outside content (writes replace the link, so they never modify the
//! outside file). Hard links can only be made by someone who can already read the file.

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;

use crate::registry::ToolError;

/// A directory every path of a call is resolved beneath: the workspace, or an extra root a
/// tool may reach by absolute path (the spilled-outputs directory).
pub(crate) struct Root {
    /// The canonical path, for showing paths and stripping absolute arguments.
    pub path: PathBuf,
    /// The path as configured, which may differ from `path` (e.g. through a symlinked /tmp).
    given: PathBuf,
    /// The handle all I/O goes through.
    pub dir: Dir,
}

impl Root {
    /// Opens `dir` as a root. The handle, not the path, is what counts from here on: if the
    /// directory is renamed or replaced during the call, the call keeps working in the one
    /// it opened. Its canonical path is read back from the open handle, so path and handle
    /// name the same directory even if `dir` was swapped while being opened.
    pub(crate) fn open(dir: &Path) -> io::Result<Root> {
        let handle = Dir::open_ambient_dir(dir, cap_std::ambient_authority())?;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd()))
            .or_else(|_| std::fs::canonicalize(dir))?;
        Ok(Root {
            path,
            given: dir.to_path_buf(),
            dir: handle,
        })
    }

    /// `abs` relative to this root when it lies (lexically) beneath it.
    fn strip(&self, abs: &Path) -> Option<PathBuf> {
        abs.strip_prefix(&self.path)
            .or_else(|_| abs.strip_prefix(&self.given))
            .ok()
            .map(Path::to_path_buf)
    }
}

/// Opens the workspace of a call.
pub(crate) fn open_workspace(workspace: &Path) -> Result<Root, ToolError> {
    let root = Root::open(workspace).map_err(|e| {
        let why = if e.raw_os_error() == Some(nix::libc::ENOTDIR) {
            "it is not a directory".to_owned()
        } else {
            e.to_string()
        };
        ToolError::failed(format!(
            "the workspace {} is not usable: {why}",
            workspace.display()
        ))
    })?;
    Ok(root)
}

/// A path argument resolved lexically: relative to the workspace, or to an extra root.
#[derive(Debug)]
pub(crate) struct Target {
    /// The argument as given, for error messages.
    pub raw: String,
    /// Relative to its root; empty for the root itself.
    pub rel: PathBuf,
    /// Which extra root it lies under (`None`: the workspace).
    pub extra: Option<usize>,
    /// How the path is shown to the model: relative to the workspace (`.` for the workspace
    /// itself), absolute under an extra root.
    pub shown: String,
}

impl Target {
    /// `rel` as a path cap-std accepts (`.` for the root itself).
    pub(crate) fn rel_path(&self) -> &Path {
        if self.rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.rel
        }
    }

    /// The root this target lies under.
    pub(crate) fn root<'a>(&self, ws: &'a Root, extras: &'a [Root]) -> &'a Root {
        self.extra.and_then(|i| extras.get(i)).unwrap_or(ws)
    }

    /// An I/O error on this target as a tool error. cap-std reports an escape (a symlink
    /// leading outside) as `PermissionDenied` without an OS error code.
    pub(crate) fn error(&self, action: &str, e: &io::Error) -> ToolError {
        let name = &self.shown;
        if is_escape(e) {
            return ToolError::invalid(format!(
                "path escapes the workspace: {} leads outside it through a symbolic link",
                self.raw
            ));
        }
        match e.kind() {
            io::ErrorKind::NotFound => {
                ToolError::failed(format!("cannot {action} {name}: no such file or directory"))
            }
            io::ErrorKind::PermissionDenied => {
                ToolError::failed(format!("cannot {action} {name}: permission denied"))
            }
            _ => ToolError::failed(format!("cannot {action} {name}: {e}")),
        }
    }
}

/// Whether cap-std refused `e` because the path would leave its root.
pub(crate) fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// The checks every path argument passes before anything else looks at it.
fn check_raw(raw: &str) -> Result<(), ToolError> {
    if raw.is_empty() {
        return Err(ToolError::invalid("path must not be empty"));
    }
    if raw.contains('\0') {
        return Err(ToolError::invalid(format!(
            "path contains a NUL byte: {raw:?}"
        )));
    }
    Ok(())
}

/// Resolves `raw` lexically against the workspace `ws` (or one of `extras`, for absolute
/// paths only). Nothing is opened here; the kernel enforces the root when the target is used.
pub(crate) fn resolve_target(ws: &Root, extras: &[Root], raw: &str) -> Result<Target, ToolError> {
    check_raw(raw)?;
    let given = Path::new(raw);
    let (rel, extra) = if given.is_absolute() {
        let abs = normalize(given).ok_or_else(|| escape(ws, raw))?;
        if let Some(rel) = ws.strip(&abs) {
            (rel, None)
        } else if let Some((i, rel)) = extras
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.strip(&abs).map(|rel| (i, rel)))
        {
            (rel, Some(i))
        } else {
            return Err(escape(ws, raw));
        }
    } else {
        (normalize(given).ok_or_else(|| escape(ws, raw))?, None)
    };
    let shown = match extra.and_then(|i| extras.get(i)) {
        Some(r) => r.path.join(&rel).display().to_string(),
        None if rel.as_os_str().is_empty() => ".".to_owned(),
        None => rel.display().to_string(),
    };
    Ok(Target {
        raw: raw.to_owned(),
        rel,
        extra,
        shown,
    })
}

fn escape(ws: &Root, raw: &str) -> ToolError {
    ToolError::invalid(format!(
        "path escapes the workspace: {raw} is outside the workspace {}",
        ws.path.display()
    ))
}

/// Drops `.` and the root, pops on `..`; `None` when a `..` would climb above the start.
/// Absolute paths come back absolute, relative ones relative.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::Normal(name) => {
                out.push(name);
                depth += 1;
            }
            Component::ParentDir => {
                depth = depth.checked_sub(1)?;
                out.pop();
            }
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// How a workspace-relative path is shown: itself, or `.` when empty.
pub(crate) fn shown_rel(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        rel.display().to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Path-based checks, for bash's `cwd`: a shell can reach anything its user can, so there is no
// handle to keep; this only keeps a model's mistakes in the workspace.

/// The canonical workspace directory of a call, as a path.
pub(crate) fn workspace_root(workspace: &Path) -> Result<PathBuf, ToolError> {
    match std::fs::canonicalize(workspace) {
        Ok(p) if p.is_dir() => Ok(p),
        Ok(p) => Err(ToolError::failed(format!(
            "the workspace {} is not a directory",
            p.display()
        ))),
        Err(e) => Err(ToolError::failed(format!(
            "the workspace {} is not usable: {e}",
            workspace.display()
        ))),
    }
}

/// Resolves `raw` against the canonical workspace `root` by path; the result lies under
/// `root` or one of `extra_roots`, or the call is refused.
pub(crate) fn resolve(
    root: &Path,
    extra_roots: &[PathBuf],
    raw: &str,
) -> Result<PathBuf, ToolError> {
    check_raw(raw)?;
    let given = Path::new(raw);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let resolved = canonicalize_lenient(&joined)
        .map_err(|e| ToolError::failed(format!("cannot resolve path {raw}: {e}")))?;
    if resolved.starts_with(root) || extra_roots.iter().any(|r| resolved.starts_with(r)) {
        Ok(resolved)
    } else {
        Err(ToolError::invalid(format!(
            "path escapes the workspace: {raw} resolves to {}, outside the workspace {}",
            resolved.display(),
            root.display()
        )))
    }
}

/// How a resolved path is shown to the model: relative to the workspace when inside it
/// (`.` for the workspace itself), absolute otherwise.
pub(crate) fn shown(root: &Path, abs: &Path) -> String {
    match abs.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => abs.display().to_string(),
    }
}

/// `canonicalize` that also accepts paths whose last components do not exist yet.
fn canonicalize_lenient(path: &Path) -> io::Result<PathBuf> {
    let comps: Vec<Component<'_>> = path.components().collect();
    // The longest prefix that exists (without following a final symlink, so a dangling link
    // is found here and refused by canonicalize below rather than written through).
    let mut split = comps.len();
    while split > 0 {
        let prefix: PathBuf = comps[..split].iter().collect();
        match std::fs::symlink_metadata(&prefix) {
            Ok(_) => break,
            // ENOTDIR: a file used as a directory; the tool's own I/O reports it.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
            {
                split -= 1;
            }
            Err(e) => return Err(e),
        }
    }
    if split == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no part of the path exists",
        ));
    }
    let prefix: PathBuf = comps[..split].iter().collect();
    let mut out = std::fs::canonicalize(&prefix).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is a symbolic link to something that does not exist",
                    prefix.display()
                ),
            )
        } else {
            e
        }
    })?;
    for c in &comps[split..] {
        match c {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorKind;

    fn setup() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = open_workspace(dir.path()).unwrap();
        std::fs::create_dir(root.path.join("src")).unwrap();
        std::fs::write(root.path.join("src/a.txt"), "a").unwrap();
        (dir, root)
    }

    fn rel(root: &Root, raw: &str) -> PathBuf {
        let t = resolve_target(root, &[], raw).unwrap();
        assert_eq!(t.extra, None);
        t.rel
    }

    #[test]
    fn relative_absolute_and_new_paths_resolve_inside() {
        let (_d, root) = setup();
        assert_eq!(rel(&root, "src/a.txt"), Path::new("src/a.txt"));
        assert_eq!(rel(&root, "./src/../src/a.txt"), Path::new("src/a.txt"));
        let abs = root.path.join("src/a.txt").display().to_string();
        assert_eq!(rel(&root, &abs), Path::new("src/a.txt"));
        assert_eq!(rel(&root, "new/dir/f.txt"), Path::new("new/dir/f.txt"));
        assert_eq!(rel(&root, "new/../g.txt"), Path::new("g.txt"));
        assert_eq!(rel(&root, "."), Path::new(""));
        assert_eq!(resolve_target(&root, &[], ".").unwrap().shown, ".");
        assert_eq!(
            resolve_target(&root, &[], "src//a.txt").unwrap().shown,
            "src/a.txt"
        );
        assert_eq!(
            resolve_target(&root, &[], ".").unwrap().rel_path(),
            Path::new(".")
        );
    }

    #[test]
    fn lexical_escapes_are_refused() {
        let (_d, root) = setup();
        for raw in ["../x", "src/../../x", "new/../../x", "/etc/passwd", "/"] {
            let e = resolve_target(&root, &[], raw).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArguments, "{raw}");
            assert_eq!(
                e.message,
                format!(
                    "path escapes the workspace: {raw} is outside the workspace {}",
                    root.path.display()
                )
            );
        }
        // Climbing out and back in by name is still climbing out.
        let name = root.path.file_name().unwrap().to_string_lossy();
        assert!(resolve_target(&root, &[], &format!("../{name}/src/a.txt")).is_err());
    }

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        let (_d, root) = setup();
        assert_eq!(
            resolve_target(&root, &[], "").unwrap_err().message,
            "path must not be empty"
        );
        assert_eq!(
            resolve_target(&root, &[], "a\0b").unwrap_err().message,
            "path contains a NUL byte: \"a\\0b\""
        );
    }

    #[test]
    fn symlink_escapes_are_refused_when_opened() {
        let (_d, root) = setup();
        std::os::unix::fs::symlink("/etc", root.path.join("etc-link")).unwrap();
        std::os::unix::fs::symlink("src/a.txt", root.path.join("inside")).unwrap();
        let t = resolve_target(&root, &[], "etc-link/passwd").unwrap();
        let e = root.dir.open(t.rel_path()).unwrap_err();
        assert!(is_escape(&e), "{e}");
        assert_eq!(
            t.error("read", &e).message,
            "path escapes the workspace: etc-link/passwd leads outside it through a symbolic link"
        );
        let t = resolve_target(&root, &[], "inside").unwrap();
        assert_eq!(
            std::io::read_to_string(root.dir.open(t.rel_path()).unwrap()).unwrap(),
            "a"
        );
    }

    #[test]
    fn extra_roots_are_reachable_by_absolute_path() {
        let (_d, root) = setup();
        let other = tempfile::tempdir().unwrap();
        let extra = Root::open(other.path()).unwrap();
        let f = extra.path.join("out.txt").display().to_string();
        assert!(resolve_target(&root, &[], &f).is_err());
        let t = resolve_target(&root, std::slice::from_ref(&extra), &f).unwrap();
        assert_eq!(
            (t.extra, t.rel.as_path(), t.shown.as_str()),
            (Some(0), Path::new("out.txt"), f.as_str())
        );
        // Relative paths never reach an extra root.
        assert_eq!(
            resolve_target(&root, std::slice::from_ref(&extra), "out.txt")
                .unwrap()
                .extra,
            None
        );
    }
}
