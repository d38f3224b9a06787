//! Keeping path arguments inside the workspace.
//!
//! A path argument is joined to the workspace when relative, then resolved the way the OS
//! would: the longest existing ancestor is canonicalised (following symlinks), and the part
//! that does not exist yet is appended lexically (`..` there pops a component). The result
//! must lie under the canonical workspace (or one of the extra roots a tool allows), so `..`,
//! absolute paths and symlinks cannot reach outside.
//!
//! Not a defence against a concurrent attacker swapping directories for symlinks between the
//! check and the use; it keeps a model's mistakes (and prompt-injected paths) in the workspace.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::registry::ToolError;

/// The canonical workspace directory of a call.
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

/// Another directory a tool may reach by absolute path (e.g. the spilled-outputs directory).
/// Canonical when it exists; as given otherwise (nothing can be read there then anyway).
pub(crate) fn extra_root(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Resolves `raw` against the canonical workspace `root`; the result lies under `root` or one
/// of `extra_roots`, or the call is refused.
pub(crate) fn resolve(
    root: &Path,
    extra_roots: &[PathBuf],
    raw: &str,
) -> Result<PathBuf, ToolError> {
    if raw.is_empty() {
        return Err(ToolError::invalid("path must not be empty"));
    }
    if raw.contains('\0') {
        return Err(ToolError::invalid(format!(
            "path contains a NUL byte: {raw:?}"
        )));
    }
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

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = workspace_root(dir.path()).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        (dir, root)
    }

    #[test]
    fn relative_absolute_and_new_paths_resolve_inside() {
        let (_d, root) = setup();
        assert_eq!(
            resolve(&root, &[], "src/a.txt").unwrap(),
            root.join("src/a.txt")
        );
        assert_eq!(
            resolve(&root, &[], "./src/../src/a.txt").unwrap(),
            root.join("src/a.txt")
        );
        let abs = root.join("src/a.txt").display().to_string();
        assert_eq!(resolve(&root, &[], &abs).unwrap(), root.join("src/a.txt"));
        assert_eq!(
            resolve(&root, &[], "new/dir/f.txt").unwrap(),
            root.join("new/dir/f.txt")
        );
        assert_eq!(
            resolve(&root, &[], "new/../g.txt").unwrap(),
            root.join("g.txt")
        );
        assert_eq!(resolve(&root, &[], ".").unwrap(), root);
        assert_eq!(shown(&root, &root), ".");
        assert_eq!(shown(&root, &root.join("src/a.txt")), "src/a.txt");
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, root) = setup();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        for raw in [
            "../x",
            "src/../../x",
            "new/../../x",
            "/etc/passwd",
            "etc-link/passwd",
            "etc-link",
        ] {
            let e = resolve(&root, &[], raw).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArguments, "{raw}");
            assert!(
                e.message
                    .starts_with(&format!("path escapes the workspace: {raw} ")),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn dangling_symlinks_are_refused() {
        let (_d, root) = setup();
        std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
        let e = resolve(&root, &[], "dangling/f.txt").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Failed);
        assert!(
            e.message
                .contains("symbolic link to something that does not exist"),
            "{}",
            e.message
        );
    }

    #[test]
    fn extra_roots_are_reachable_by_absolute_path() {
        let (_d, root) = setup();
        let other = tempfile::tempdir().unwrap();
        let extra = extra_root(other.path());
        let f = extra.join("out.txt").display().to_string();
        assert!(resolve(&root, &[], &f).is_err());
        assert_eq!(
            resolve(&root, std::slice::from_ref(&extra), &f).unwrap(),
            extra.join("out.txt")
        );
    }
}
