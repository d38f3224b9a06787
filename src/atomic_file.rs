//! Replacing a file whole: readers see the old content or the new, never half of it.
//!
//! The one helper for the daemon's own files (config.json write-back, the process ledger,
//! the session store's clean-shutdown record). Files inside a workspace are written by the
//! file tools through a directory handle instead (`tools/fs`), so that they stay confined.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Whether a replacement must survive a power loss once this returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and its directory: for what must not be lost (config, store records).
    Synced,
    /// Only atomic: for state rewritten often and rebuilt at the next start (the ledger).
    Atomic,
}

/// Writes `bytes` to a temporary file beside `target` and renames it over `target`. An
/// existing file's mode (and, where allowed, owner) is kept.
pub fn write_atomic(target: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let old = std::fs::metadata(target).ok().filter(|m| m.is_file());
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}."))
        .suffix(".tmp")
        .tempfile_in(&dir)?;
    tmp.write_all(bytes)?;
    if let Some(meta) = &old {
        use std::os::unix::fs::MetadataExt;
        tmp.as_file().set_permissions(meta.permissions())?;
        // Best effort: only root (or the owner, for the group) may change ownership.
        let _ = nix::unistd::fchown(
            tmp.as_file(),
            Some(nix::unistd::Uid::from_raw(meta.uid())),
            Some(nix::unistd::Gid::from_raw(meta.gid())),
        );
    }
    if durability == Durability::Synced {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(target).map_err(|e| e.error)?;
    if durability == Durability::Synced {
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_whole_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic(&p, b"one", Durability::Synced).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"two", Durability::Atomic).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
