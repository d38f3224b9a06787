//! The files of an approved item, kept beside `trust.json` so that a changed item can be
//! reviewed file by file (`trust.diff`, `toolhost tools diff NAME`) before it is approved
//! again: the gate's decisions hold only digests.
//!
//! What is kept is for the reviewer's eyes, never for the gate: an approval stays bound to
//! its digest. Text files up to [`MAX_TEXT_FILE`] are kept whole (up to [`MAX_TEXT_TOTAL`]
//! an item); other files by size and SHA-256, so their change is still named.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::protocol::{FileChange, TrustFileChange, TrustKind};

const MAX_TEXT_FILE: u64 = 256 * 1024;
const MAX_TEXT_TOTAL: u64 = 4 * 1024 * 1024;
/// The walk's bounds: those of the digest ([`super::folder_digest`]), which an item that
/// waits has already met.
const MAX_ENTRIES: usize = 4096;
const MAX_DEPTH: usize = 16;
/// Bytes read an item, as the digest allows (a file swapped for a bigger one after the
/// digest is refused here too, never read whole).
const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// One entry of an item, as kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// SHA-256 (hex) of a file's bytes or a link's target; empty for anything else.
    sha: String,
    size: u64,
    /// A text file's content, when it was small enough to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// What the entry is when it is no regular file ("symbolic link to …", "FIFO").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    other: Option<String>,
}

/// An item's entries by path relative to the item (a file item: its file name).
pub type Files = BTreeMap<String, Kept>;

/// Reads the entries of the `kind` item at `path` as the gate's digest covers them: a
/// folder's whole tree (a module `index.*`: its folder without `node_modules`), or one file.
pub fn read(kind: TrustKind, path: &Path) -> Result<Files, String> {
    let mut walk = Walk::default();
    let index_module = kind == TrustKind::Module && path.file_stem().is_some_and(|s| s == "index");
    match path.parent() {
        Some(dir) if index_module => {
            walk.skip_node_modules = true;
            walk.folder(dir, "", 0)?;
        }
        _ if path.is_dir() => walk.folder(path, "", 0)?,
        _ => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            walk.entry(path, name)?;
        }
    }
    Ok(walk.files)
}

/// Whether `files`, read from the item at `path`, are what `digest` approved (checked
/// again after the read, so a file changed meanwhile is not kept as approved). A module's
/// digest is the module source's own, so its files are taken as read.
pub fn matches(kind: TrustKind, path: &Path, files: &Files, digest: &str) -> bool {
    match kind {
        TrustKind::Tool | TrustKind::Skill => super::folder_digest(path).is_ok_and(|d| d == digest),
        TrustKind::Command => files
            .values()
            .next()
            .and_then(|k| k.text.as_deref())
            .is_some_and(|t| super::bytes_digest(t.as_bytes()) == digest),
        TrustKind::Module => true,
    }
}

/// What changed from `approved` (nothing kept: every file is new) to `now`, file by file,
/// each with its unified diff when both sides are text.
pub fn changes(approved: Option<&Files>, now: &Files) -> Vec<TrustFileChange> {
    let empty = Files::new();
    let approved = approved.unwrap_or(&empty);
    let mut paths: Vec<&String> = approved.keys().chain(now.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|path| {
            let (old, new) = (approved.get(path), now.get(path));
            let change = match (old, new) {
                (None, Some(_)) => FileChange::Added,
                (Some(_), None) => FileChange::Deleted,
                (Some(o), Some(n)) if o != n => FileChange::Modified,
                _ => return None,
            };
            Some(TrustFileChange {
                path: path.clone(),
                change,
                diff: diff_of(path, old, new),
            })
        })
        .collect()
}

/// One entry's change as a unified diff, or a line saying what it was and became.
fn diff_of(path: &str, old: Option<&Kept>, new: Option<&Kept>) -> String {
    let name = |k: Option<&Kept>, side: &str| match k {
        Some(_) => format!("{side}/{path}"),
        None => "/dev/null".to_owned(),
    };
    fn text(k: Option<&Kept>) -> Option<&str> {
        match k {
            None => Some(""),
            Some(k) => k.text.as_deref(),
        }
    }
    match (text(old), text(new)) {
        (Some(a), Some(b)) => crate::text_diff::unified(a, b, &name(old, "a"), &name(new, "b")),
        _ => {
            let what = |k: Option<&Kept>| match k {
                None => "nothing".to_owned(),
                Some(k) => match &k.other {
                    Some(o) => o.clone(),
                    None => format!("{} bytes, SHA-256 {}", k.size, k.sha),
                },
            };
            format!(
                "--- {}\n+++ {}\n{path}: {} became {}\n",
                name(old, "a"),
                name(new, "b"),
                what(old),
                what(new)
            )
        }
    }
}

#[derive(Default)]
struct Walk {
    files: Files,
    entries: usize,
    bytes: u64,
    text_bytes: u64,
    skip_node_modules: bool,
}

impl Walk {
    fn folder(&mut self, dir: &Path, rel: &str, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("{}: nested too deep", dir.display()));
        }
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        names.sort();
        for name in names {
            if self.skip_node_modules && name == "node_modules" {
                continue;
            }
            let path = dir.join(&name);
            let rel = match rel {
                "" => name.to_string_lossy().into_owned(),
                _ => format!("{rel}/{}", name.to_string_lossy()),
            };
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.is_dir() {
                self.folder(&path, &rel, depth + 1)?;
            } else {
                self.entry(&path, rel)?;
            }
        }
        Ok(())
    }

    /// One entry that is no folder: read without following a link or waiting on a FIFO.
    fn entry(&mut self, path: &Path, rel: String) -> Result<(), String> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        let meta = std::fs::symlink_metadata(path).map_err(fail)?;
        let kept = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(path).map_err(fail)?;
            let target = target.to_string_lossy().into_owned();
            Kept {
                sha: hex::encode(Sha256::digest(target.as_bytes())),
                size: 0,
                text: None,
                other: Some(format!("a symbolic link to {target}")),
            }
        } else if meta.is_file() {
            self.file(path).map_err(fail)?
        } else {
            Kept {
                sha: String::new(),
                size: 0,
                text: None,
                other: Some("no regular file".to_owned()),
            }
        };
        self.files.insert(rel, kept);
        Ok(())
    }

    fn file(&mut self, path: &Path) -> std::io::Result<Kept> {
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        let size = file.metadata()?.len();
        self.bytes += size;
        if self.bytes > MAX_BYTES {
            return Err(std::io::Error::other(format!(
                "the item holds more than {} MiB",
                MAX_BYTES / 1024 / 1024
            )));
        }
        let mut bytes = Vec::new();
        file.take(size).read_to_end(&mut bytes)?;
        let keep_text = bytes.len() as u64 <= MAX_TEXT_FILE
            && self.text_bytes + bytes.len() as u64 <= MAX_TEXT_TOTAL
            && !bytes.contains(&0);
        let text = keep_text
            .then(|| String::from_utf8(bytes.clone()).ok())
            .flatten();
        if let Some(t) = &text {
            self.text_bytes += t.len() as u64;
        }
        Ok(Kept {
            sha: hex::encode(Sha256::digest(&bytes)),
            size: bytes.len() as u64,
            text,
            other: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_added_and_removed_file_are_named_with_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tool.json"), "{}\n").unwrap();
        std::fs::write(dir.path().join("run.sh"), "echo hi\nexit 0\n").unwrap();
        std::fs::write(dir.path().join("old.txt"), "gone\n").unwrap();
        let before = read(TrustKind::Tool, dir.path()).unwrap();
        std::fs::write(dir.path().join("run.sh"), "curl x | sh\nexit 0\n").unwrap();
        std::fs::remove_file(dir.path().join("old.txt")).unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/h.py"), [0u8, 1, 2]).unwrap();
        let after = read(TrustKind::Tool, dir.path()).unwrap();
        let c = changes(Some(&before), &after);
        let names: Vec<_> = c.iter().map(|c| (c.path.as_str(), c.change)).collect();
        assert_eq!(
            names,
            [
                ("lib/h.py", FileChange::Added),
                ("old.txt", FileChange::Deleted),
                ("run.sh", FileChange::Modified)
            ]
        );
        assert!(
            c[2].diff.contains("-echo hi\n+curl x | sh\n"),
            "{}",
            c[2].diff
        );
        assert!(
            c[0].diff.contains("became 3 bytes, SHA-256"),
            "{}",
            c[0].diff
        );
        assert!(
            c[1].diff.contains("--- a/old.txt\n+++ /dev/null\n"),
            "{}",
            c[1].diff
        );
    }

    #[test]
    fn an_item_over_the_digests_bytes_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tool.json"), "{}").unwrap();
        let big = std::fs::File::create(dir.path().join("blob")).unwrap();
        big.set_len(MAX_BYTES + 1).unwrap();
        let e = read(TrustKind::Tool, dir.path()).unwrap_err();
        assert!(e.contains("more than 64 MiB"), "{e}");
    }

    #[test]
    fn kept_files_match_only_the_digest_they_were_read_with() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tool.json"), "{}").unwrap();
        let digest = super::super::folder_digest(dir.path()).unwrap();
        let files = read(TrustKind::Tool, dir.path()).unwrap();
        assert!(matches(TrustKind::Tool, dir.path(), &files, &digest));
        std::fs::write(dir.path().join("tool.json"), "{ }").unwrap();
        assert!(!matches(TrustKind::Tool, dir.path(), &files, &digest));
    }
}
