//! What an item is made of, as one digest: the key of its approval. Every file the item
//! could run or read from its folder is covered, so any change to one waits again.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The most entries and bytes an item's folder may hold to be pinned (a script and its
/// helpers, or a skill and its references, fit many times over; a vendored environment
/// does not belong there).
const MAX_ENTRIES: usize = 4096;
const MAX_BYTES: u64 = 64 * 1024 * 1024;
/// How deep the folder is walked.
const MAX_DEPTH: usize = 16;

/// SHA-256 over every entry of `dir`, walked without following symlinks, in name order:
/// relative path, kind, and a regular file's bytes or a symlink's target. Any change to a
/// file the program could run or read from its folder changes the digest.
pub fn folder_digest(dir: &Path) -> Result<String, String> {
    folder_digest_keeping(dir, None).map(|(digest, _)| digest)
}

/// [`folder_digest`], with the bytes of `keep` (a path relative to `dir`) exactly as they
/// were hashed (`None` when it is no regular file there): a source parses those bytes, never
/// a second read that a file swapped after the check could change.
pub fn folder_digest_keeping(
    dir: &Path,
    keep: Option<&Path>,
) -> Result<(String, Option<Vec<u8>>), String> {
    let mut walk = Walk::new(keep.map(Path::to_path_buf), None);
    walk.folder(dir, Path::new(""), 0)?;
    let kept = walk.kept.take();
    Ok((hex::encode(&walk.hash.finalize()[..16]), kept))
}

/// [`folder_digest`], writing what it hashes to `into` (a new, private folder) as it goes:
/// the copy holds exactly the bytes of the digest, so a program run from it runs what was
/// approved, whatever is swapped in the original folder after the check. Files keep their
/// owner's permission bits; symlinks are copied as links.
pub fn folder_digest_copying(dir: &Path, into: &Path) -> Result<String, String> {
    let mut walk = Walk::new(None, Some(into.to_path_buf()));
    std::fs::create_dir(into).map_err(|e| format!("{}: {e}", into.display()))?;
    walk.folder(dir, Path::new(""), 0)?;
    Ok(hex::encode(&walk.hash.finalize()[..16]))
}

/// SHA-256 of one regular file (not followed if a symlink, not waited on if a FIFO), as a
/// folder's walk hashes it; [`bytes_digest`] must agree with it (a command is hashed from
/// the bytes it is parsed from).
#[cfg(test)]
fn file_digest(path: &Path) -> Result<String, String> {
    let mut walk = Walk::new(None, None);
    walk.file(path, false, None)?;
    Ok(hex::encode(&walk.hash.finalize()[..16]))
}

/// [`file_digest`] of a file whose content is `bytes`: for a source that reads a file once
/// and both hashes and parses what it read.
pub fn bytes_digest(bytes: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update((bytes.len() as u64).to_le_bytes());
    hash.update(bytes);
    hex::encode(&hash.finalize()[..16])
}

struct Walk {
    hash: Sha256,
    entries: usize,
    bytes: u64,
    /// The file whose hashed bytes are kept, relative to the folder.
    keep: Option<std::path::PathBuf>,
    kept: Option<Vec<u8>>,
    /// Where every entry is copied as it is hashed ([`folder_digest_copying`]).
    copy: Option<std::path::PathBuf>,
}

impl Walk {
    fn new(keep: Option<std::path::PathBuf>, copy: Option<std::path::PathBuf>) -> Walk {
        Walk {
            hash: Sha256::new(),
            entries: 0,
            bytes: 0,
            keep,
            kept: None,
            copy,
        }
    }

    fn folder(&mut self, dir: &Path, rel: &Path, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "the folder is nested deeper than {MAX_DEPTH} levels, too deep to pin"
            ));
        }
        let read = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut names: Vec<_> = read
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        names.sort();
        for name in names {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(format!(
                    "the folder holds more than {MAX_ENTRIES} entries, too many to pin"
                ));
            }
            let path = dir.join(&name);
            let rel = rel.join(&name);
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            self.hash.update(rel.as_os_str().as_encoded_bytes());
            self.hash.update([0]);
            let kind = meta.file_type();
            let copy = self.copy.as_ref().map(|c| c.join(&rel));
            let copy_failed = |e: std::io::Error| format!("cannot copy {}: {e}", path.display());
            if kind.is_dir() {
                self.hash.update(b"d\0");
                if let Some(c) = &copy {
                    std::fs::create_dir(c).map_err(copy_failed)?;
                }
                self.folder(&path, &rel, depth + 1)?;
            } else if kind.is_symlink() {
                let target =
                    std::fs::read_link(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                self.hash.update(b"l\0");
                self.hash.update(target.as_os_str().as_encoded_bytes());
                if let Some(c) = &copy {
                    std::os::unix::fs::symlink(&target, c).map_err(copy_failed)?;
                }
            } else if kind.is_file() {
                self.hash.update(b"f\0");
                let keep = self.keep.as_deref() == Some(rel.as_path());
                self.file(&path, keep, copy.as_deref())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            } else {
                // FIFOs, sockets, devices: their presence is pinned, never their content.
                self.hash.update(b"o\0");
            }
            self.hash.update([0]);
        }
        Ok(())
    }

    /// Hashes one regular file, opened once without following a symlink and without
    /// blocking (a file swapped for a FIFO after the listing is refused, not waited on).
    /// The error does not name the file (the caller does).
    /// `copy`: a new file the bytes hashed are written to, with the file's owner's
    /// permission bits.
    fn file(&mut self, path: &Path, keep: bool, copy: Option<&Path>) -> Result<(), String> {
        let fail = |e: std::io::Error| e.to_string();
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(fail)?;
        let meta = file.metadata().map_err(fail)?;
        if !meta.is_file() {
            return Err("not a regular file".to_owned());
        }
        self.bytes += meta.len();
        if self.bytes > MAX_BYTES {
            return Err(format!(
                "the folder holds more than {} MiB, too much to pin",
                MAX_BYTES / 1024 / 1024
            ));
        }
        self.hash.update(meta.len().to_le_bytes());
        let mut copy = match copy {
            Some(c) => Some(
                File::options()
                    .write(true)
                    .create_new(true)
                    .mode(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o700)
                    .open(c)
                    .map_err(fail)?,
            ),
            None => None,
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = meta.len();
        let mut reader = file.take(meta.len());
        let mut kept = keep.then(Vec::new);
        while left > 0 {
            let n = reader.read(&mut buf).map_err(fail)?;
            if n == 0 {
                break;
            }
            self.hash.update(&buf[..n]);
            if let Some(c) = copy.as_mut() {
                c.write_all(&buf[..n]).map_err(fail)?;
            }
            if let Some(k) = kept.as_mut() {
                k.extend_from_slice(&buf[..n]);
            }
            left = left.saturating_sub(n as u64);
        }
        if kept.is_some() {
            self.kept = kept;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_digest_is_the_digest_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.md");
        std::fs::write(&file, "Ship $ARGUMENTS.\n").unwrap();
        assert_eq!(
            file_digest(&file).unwrap(),
            bytes_digest(b"Ship $ARGUMENTS.\n")
        );
        assert_ne!(file_digest(&file).unwrap(), bytes_digest(b"Ship it.\n"));
    }

    #[test]
    fn any_file_of_the_folder_changes_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tool.json"), "{}").unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/helper.py"), "x = 1").unwrap();
        let first = folder_digest(dir.path()).unwrap();
        assert_eq!(folder_digest(dir.path()).unwrap(), first);
        std::fs::write(dir.path().join("lib/helper.py"), "x = 2").unwrap();
        let second = folder_digest(dir.path()).unwrap();
        assert_ne!(second, first);
        std::os::unix::fs::symlink("/bin/sh", dir.path().join("run")).unwrap();
        assert_ne!(folder_digest(dir.path()).unwrap(), second);
    }
}
