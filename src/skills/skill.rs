//! One skill folder: its `SKILL.md` read through [`crate::safe_read`], its YAML front
//! matter checked against the Agent Skills rules, and the list of its files.
//!
//! The rules (agentskills.io specification): `name` is 1–64 characters of lowercase
//! letters, digits and hyphens, without a leading, trailing or doubled hyphen, and equal to
//! the folder's name; `description` is 1–1,024 characters; `compatibility`, when given, at
//! most 500. Other keys (`license`, `metadata`, `allowed-tools`, a frontend's own) are kept
//! verbatim in the front matter and not judged.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cap_std::fs::Dir;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::front_matter;
use crate::protocol::{SkillFile, SkillSource};
use crate::safe_read::{self, Node, ReadError};
pub use crate::source::item::{check_name, FileError as SkillError, MAX_DESCRIPTION_CHARS};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// The most of `SKILL.md` read (the spec asks for under 500 lines: this is far above).
pub const MAX_SKILL_MD_BYTES: u64 = 256 * 1024;
/// The most of any other file of a skill read (`read_skill_file`, `resources/read`, the
/// manifest's digests).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// How deep a skill's files are listed, and how many at most: a skill is small, and a
/// folder that is not (a checked-out repository) must not make every scan slow.
const MAX_DEPTH: usize = 6;
const MAX_FILES: usize = 2000;

/// A skill that loaded.
#[derive(Debug)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The skill's folder.
    pub dir: PathBuf,
    pub source: SkillSource,
    /// The whole `SKILL.md`, front matter included.
    pub text: String,
    /// The front matter as written, every field (its YAML as JSON).
    pub frontmatter: Map<String, Value>,
    /// Where the Markdown body starts in `text` (after the closing `---`).
    body_start: usize,
    /// Every regular file beneath the folder, `SKILL.md` included, sorted by path.
    pub files: Vec<SkillFile>,
    /// `sha256:` of `SKILL.md` and the file list (path and size): what a client compares.
    pub etag: String,
    /// The folder's files as last seen (path, size, modification time, inode): a rescan
    /// that sees the same reuses this skill without reading or parsing anything.
    fingerprint: u64,
    /// `files` with their digests, computed on first use (the skills extension's manifest).
    manifest: OnceLock<Vec<SkillFile>>,
    /// For a workspace skill, the digest of its folder the trust gate admitted: its other
    /// files (scripts, references) are served only as part of that folder ([`Skill::read`]).
    approved: Option<String>,
}

/// What the trust gate admitted a workspace skill with ([`crate::trust::folder_digest_keeping`]).
pub struct Approved {
    /// The folder's digest.
    pub digest: String,
    /// The bytes of `SKILL.md` as hashed (`None` when it is no regular file).
    pub skill_md: Option<Vec<u8>>,
}

impl Skill {
    /// The instructions: `SKILL.md` without its front matter.
    pub fn body(&self) -> &str {
        self.text.get(self.body_start..).unwrap_or_default().trim()
    }

    /// One file of the skill, by its path inside the folder: never outside it (the kernel
    /// resolves it beneath the folder), at most [`MAX_FILE_BYTES`]. Blocking. A workspace
    /// skill's file is served from the bytes hashed while its folder still has the digest
    /// that was approved, so a file changed since (before the rescan makes the skill wait
    /// again) is never served.
    pub(crate) fn read(&self, rel: &str) -> Result<Vec<u8>, ReadError> {
        let bytes = safe_read::read_beneath(&self.dir, Path::new(rel), MAX_FILE_BYTES)?;
        let Some(approved) = &self.approved else {
            return Ok(bytes);
        };
        let unapproved = |why: &str| ReadError::Io(std::io::Error::other(why.to_owned()));
        match crate::trust::folder_digest_keeping(&self.dir, Some(Path::new(rel))) {
            Ok((digest, Some(kept))) if digest == *approved => Ok(kept),
            Ok((digest, _)) if digest != *approved => Err(unapproved(
                "the skill changed since it was approved; it waits for approval again",
            )),
            Ok(_) => Err(unapproved(
                "is not a regular file of the approved skill's folder",
            )),
            Err(e) => Err(unapproved(&e)),
        }
    }

    /// Every file with its `sha256:` digest; a file that cannot be read now (over the cap,
    /// gone) is left out. Blocking the first time, then kept with this version of the skill.
    pub fn manifest(&self) -> &[SkillFile] {
        self.manifest.get_or_init(|| {
            self.files
                .iter()
                .filter_map(|f| {
                    let bytes = if f.path == SKILL_FILE {
                        self.text.as_bytes().to_vec()
                    } else {
                        self.read(&f.path).ok()?
                    };
                    Some(SkillFile {
                        digest: Some(sha256(&bytes)),
                        size: bytes.len() as u64,
                        path: f.path.clone(),
                    })
                })
                .collect()
        })
    }

    /// Whether [`Skill::manifest`] would answer without touching the disk.
    pub fn has_manifest(&self) -> bool {
        self.manifest.get().is_some()
    }
}

/// `sha256:` and the lowercase hex digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Loads the skill in `dir`. A file beneath it that cannot be listed safely (a symlink out
/// of the folder) is left out of `files` and returned as a warning beside the skill.
pub fn load(dir: &Path, source: SkillSource) -> Result<(Arc<Skill>, Vec<SkillError>), SkillError> {
    load_reusing(dir, source, None, None)
}

/// [`load`], reusing `previous` (the skill last loaded from `dir`) when the folder's
/// files have the same sizes and modification times: only the folder is walked. With
/// `approved` (what the trust gate hashed) the bytes of `SKILL.md` hashed are the skill,
/// never a second read of the file, which a swap after the check could change.
pub fn load_reusing(
    dir: &Path,
    source: SkillSource,
    previous: Option<&Arc<Skill>>,
    approved: Option<Approved>,
) -> Result<(Arc<Skill>, Vec<SkillError>), SkillError> {
    let (walked, warnings) = list_files(dir);
    let fingerprint = fingerprint(&walked);
    let (digest, skill_md) = match approved {
        Some(a) => (Some(a.digest), a.skill_md),
        None => (None, None),
    };
    if let Some(p) = previous.filter(|p| {
        p.fingerprint == fingerprint
            && p.source == source
            && p.approved == digest
            && skill_md.as_ref().is_none_or(|a| a == p.text.as_bytes())
    }) {
        return Ok((p.clone(), warnings));
    }
    let file = dir.join(SKILL_FILE);
    let err = |field, reason: String| SkillError {
        file: file.clone(),
        field,
        reason,
    };
    let bytes = match skill_md {
        Some(b) if b.len() as u64 > MAX_SKILL_MD_BYTES => {
            return Err(err(
                None,
                format!("{SKILL_FILE} is over {MAX_SKILL_MD_BYTES} bytes"),
            ))
        }
        Some(b) => b,
        None => safe_read::read_in_folder(&file, MAX_SKILL_MD_BYTES)
            .map_err(|e| err(None, format!("{SKILL_FILE} {e}")))?,
    };
    let text = String::from_utf8(bytes).map_err(|_| err(None, "is not UTF-8 text".into()))?;
    let (front, body_start) = front_matter::split(&text).ok_or_else(|| {
        err(
            None,
            "has no YAML front matter (a first line `---`, the fields, then `---`)".into(),
        )
    })?;
    let meta = parse_front_matter(front).map_err(|(field, reason)| err(field, reason))?;
    let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    check_name(&meta.name).map_err(|r| err(Some("name"), r))?;
    if meta.name != folder {
        return Err(err(
            Some("name"),
            format!(
                "'{}' differs from the folder's name '{folder}' (they must be equal)",
                meta.name
            ),
        ));
    }
    let files: Vec<SkillFile> = walked.into_iter().map(|w| w.file).collect();
    let etag = etag(&text, &files);
    let skill = Skill {
        name: meta.name,
        description: meta.description,
        dir: dir.to_path_buf(),
        source,
        frontmatter: meta.all,
        text,
        body_start,
        files,
        etag,
        fingerprint,
        manifest: OnceLock::new(),
        approved: digest,
    };
    Ok((Arc::new(skill), warnings))
}

/// The checked fields of the front matter.
struct FrontMatter {
    name: String,
    description: String,
    /// Every field, verbatim.
    all: Map<String, Value>,
}

/// Parses the YAML ([`crate::front_matter`], bounded) and checks the fields; an error
/// names the field when there is one.
fn parse_front_matter(front: &str) -> Result<FrontMatter, (Option<&'static str>, String)> {
    let Value::Object(all) = front_matter::parse(front).map_err(|e| (None, e))? else {
        return Err((None, "front matter is not a YAML mapping".into()));
    };
    let text_field = |key: &'static str, max: usize, required: bool| match all.get(key) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err((Some(key), "is required".to_owned())),
        Some(Value::String(s)) if s.trim().is_empty() => Err((Some(key), "is empty".to_owned())),
        Some(Value::String(s)) if s.chars().count() > max => Err((
            Some(key),
            format!(
                "is {} characters long; at most {max} are allowed",
                s.chars().count()
            ),
        )),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err((Some(key), "must be a string".to_owned())),
    };
    let name = text_field("name", usize::MAX, true)?.unwrap_or_default();
    let description = text_field("description", MAX_DESCRIPTION_CHARS, true)?.unwrap_or_default();
    text_field("compatibility", MAX_COMPATIBILITY_CHARS, false)?;
    Ok(FrontMatter {
        name,
        description,
        all,
    })
}

/// A file as the walk saw it: what is listed, and what tells a later walk it changed.
struct Walked {
    file: SkillFile,
    mtime: (i64, i64),
    inode: u64,
}

/// Every regular file beneath `dir` (folders are walked, never followed through a
/// symlink). A symlink counts when it leads to a regular file inside the folder, which the
/// kernel checks (`RESOLVE_BENEATH`); one that leads out is a warning.
fn list_files(dir: &Path) -> (Vec<Walked>, Vec<SkillError>) {
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let mut root: Option<Option<Dir>> = None;
    let mut pending = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            if files.len() >= MAX_FILES {
                break;
            }
            let path = rel.join(entry.file_name());
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if depth + 1 < MAX_DEPTH {
                    pending.push((path, depth + 1));
                }
            } else if kind.is_file() {
                if let Ok(m) = entry.metadata() {
                    files.push(walked(&path, &m));
                }
            } else if kind.is_symlink() {
                // Opened only for a skill that has a symlink.
                let root = root.get_or_insert_with(|| {
                    Dir::open_ambient_dir(dir, cap_std::ambient_authority()).ok()
                });
                match root.as_ref().map(|r| safe_read::open_node(r, &path)) {
                    Some(Ok(Node::File(f))) => {
                        if let Ok(m) = f.metadata() {
                            files.push(walked(&path, &m));
                        }
                    }
                    Some(Err(e)) => {
                        if let ReadError::Escapes = ReadError::from(e) {
                            warnings.push(SkillError {
                                file: dir.join(&path),
                                field: None,
                                reason: format!(
                                    "{}; left out of the skill's files",
                                    ReadError::Escapes
                                ),
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    files.sort_by(|a, b| a.file.path.cmp(&b.file.path));
    (files, warnings)
}

fn walked(rel: &Path, m: &std::fs::Metadata) -> Walked {
    Walked {
        file: SkillFile {
            path: rel.to_string_lossy().into_owned(),
            size: m.len(),
            digest: None,
        },
        mtime: (m.mtime(), m.mtime_nsec()),
        inode: m.ino(),
    }
}

/// One number for the folder's files as walked: equal walks, equal fingerprints.
fn fingerprint(walked: &[Walked]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for w in walked {
        w.file.path.hash(&mut h);
        w.file.size.hash(&mut h);
        w.mtime.hash(&mut h);
        w.inode.hash(&mut h);
    }
    h.finish()
}

fn etag(text: &str, files: &[SkillFile]) -> String {
    let mut h = Sha256::new();
    h.update(text.as_bytes());
    for f in files {
        h.update([0]);
        h.update(f.path.as_bytes());
        h.update(f.size.to_le_bytes());
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        assert!(check_name("pdf-tools2").is_ok());
        for bad in ["", "Pdf", "-a", "a-", "a--b", "a_b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fields_are_checked_with_their_name() {
        let e = parse_front_matter("name: a\n").err().unwrap();
        assert_eq!(e.0, Some("description"));
        let long = format!("name: a\ndescription: {}\n", "x".repeat(1025));
        let e = parse_front_matter(&long).err().unwrap();
        assert_eq!(e.0, Some("description"));
        assert!(e.1.contains("1025"), "{}", e.1);
        let e = parse_front_matter("name: [a]\ndescription: d\n")
            .err()
            .unwrap();
        assert_eq!(e, (Some("name"), "must be a string".into()));
        let meta = parse_front_matter("name: a\ndescription: d\nmetadata: {x: y}\nn: 2\n");
        let all = serde_json::Value::Object(meta.unwrap().all);
        assert_eq!(
            all,
            serde_json::json!({"name": "a", "description": "d", "metadata": {"x": "y"}, "n": 2})
        );
    }

    #[test]
    fn an_unchanged_folder_is_not_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        let md = "---\nname: a\ndescription: d\n---\nbody\n";
        std::fs::write(dir.join(SKILL_FILE), md).unwrap();
        let (first, _) = load(&dir, SkillSource::Config).unwrap();
        let (again, _) = load_reusing(&dir, SkillSource::Config, Some(&first), None).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        std::fs::write(dir.join("scripts/run.sh"), "echo\n").unwrap();
        let (added, _) = load_reusing(&dir, SkillSource::Config, Some(&first), None).unwrap();
        assert!(!Arc::ptr_eq(&first, &added));
        assert_eq!(added.files.len(), 2);
        // SKILL.md edited in place (the folder's listing unchanged) is read again too.
        let edited = "---\nname: a\ndescription: changed\n---\nbody\n";
        std::fs::write(dir.join(SKILL_FILE), edited).unwrap();
        let (changed, _) = load_reusing(&dir, SkillSource::Config, Some(&added), None).unwrap();
        assert_eq!(changed.description, "changed");
        let manifest = changed.manifest();
        assert_eq!(
            manifest[0].digest.as_deref(),
            Some(sha256(edited.as_bytes()).as_str())
        );
        assert_eq!(
            manifest[1].digest.as_deref(),
            Some(sha256(b"echo\n").as_str())
        );
    }
}
