//! One skill folder: its `SKILL.md` read through [`crate::safe_read`], its YAML front
//! matter checked against the Agent Skills rules, and the list of its files.
//!
//! The rules (agentskills.io specification): `name` is 1–64 characters of lowercase
//! letters, digits and hyphens, without a leading, trailing or doubled hyphen, and equal to
//! the folder's name; `description` is 1–1,024 characters; `compatibility`, when given, at
//! most 500. Other keys (`license`, `metadata`, `allowed-tools`, a frontend's own) are kept
//! verbatim in the front matter and not judged.

use std::fmt;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use yaml_rust2::{Yaml, YamlLoader};

use crate::protocol::{SkillFile, SkillSource};
use crate::safe_read::{self, Node, ReadError};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// The most of `SKILL.md` read (the spec asks for under 500 lines: this is far above).
pub const MAX_SKILL_MD_BYTES: u64 = 256 * 1024;
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// How deep a skill's files are listed, and how many at most: a skill is small, and a
/// folder that is not (a checked-out repository) must not make every scan slow.
const MAX_DEPTH: usize = 6;
const MAX_FILES: usize = 2000;

/// A skill that loaded.
#[derive(Debug, Clone)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The skill's folder.
    pub dir: PathBuf,
    pub source: SkillSource,
    /// The whole `SKILL.md`, front matter included.
    pub text: String,
    /// Where the Markdown body starts in `text` (after the closing `---`).
    body_start: usize,
    /// Every regular file beneath the folder, `SKILL.md` included, sorted by path.
    pub files: Vec<SkillFile>,
    /// `sha256:` of `SKILL.md` and the file list (path and size): what a client compares.
    pub etag: String,
}

impl Skill {
    /// The instructions: `SKILL.md` without its front matter.
    pub fn body(&self) -> &str {
        self.text.get(self.body_start..).unwrap_or_default().trim()
    }
}

/// Why a skill was skipped (or what of it was left out): `<file>: <field>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillError {
    pub file: PathBuf,
    pub field: Option<&'static str>,
    pub reason: String,
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(field) = self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.reason)
    }
}

/// Loads the skill in `dir`. A file beneath it that cannot be listed safely (a symlink out
/// of the folder) is left out of `files` and returned as a warning beside the skill.
pub fn load(dir: &Path, source: SkillSource) -> Result<(Skill, Vec<SkillError>), SkillError> {
    let file = dir.join(SKILL_FILE);
    let err = |field, reason: String| SkillError {
        file: file.clone(),
        field,
        reason,
    };
    let bytes = safe_read::read_in_folder(&file, MAX_SKILL_MD_BYTES)
        .map_err(|e| err(None, format!("{SKILL_FILE} {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| err(None, "is not UTF-8 text".into()))?;
    let (front, body_start) = split_front_matter(&text).ok_or_else(|| {
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
    let (files, warnings) = list_files(dir);
    let etag = etag(&text, &files);
    Ok((
        Skill {
            name: meta.name,
            description: meta.description,
            dir: dir.to_path_buf(),
            source,
            text,
            body_start,
            files,
            etag,
        },
        warnings,
    ))
}

/// The checked fields of the front matter.
struct FrontMatter {
    name: String,
    description: String,
}

/// `(front matter, where the body starts)` when `text` opens with a `---` line and a later
/// `---` line closes it.
pub(crate) fn split_front_matter(text: &str) -> Option<(&str, usize)> {
    let text_start = text.strip_prefix('\u{feff}').map_or(0, |_| 3);
    let rest = &text[text_start..];
    let first = rest.lines().next()?;
    if first.trim_end() != "---" {
        return None;
    }
    let front_start = text_start + first.len() + 1;
    let mut at = front_start;
    for line in text.get(front_start..)?.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&text[front_start..at], at + line.len()));
        }
        at += line.len();
    }
    None
}

/// Parses the YAML and checks the fields; an error names the field when there is one.
fn parse_front_matter(front: &str) -> Result<FrontMatter, (Option<&'static str>, String)> {
    let docs = YamlLoader::load_from_str(front)
        .map_err(|e| (None, format!("front matter is not valid YAML: {e}")))?;
    let Some(Yaml::Hash(map)) = docs.into_iter().next() else {
        return Err((None, "front matter is not a YAML mapping".into()));
    };
    let text_field =
        |key: &'static str, max: usize, required: bool| match map.get(&Yaml::String(key.into())) {
            None | Some(Yaml::Null) if !required => Ok(None),
            None | Some(Yaml::Null) => Err((Some(key), "is required".to_owned())),
            Some(Yaml::String(s)) if s.trim().is_empty() => Err((Some(key), "is empty".to_owned())),
            Some(Yaml::String(s)) if s.chars().count() > max => Err((
                Some(key),
                format!(
                    "is {} characters long; at most {max} are allowed",
                    s.chars().count()
                ),
            )),
            Some(Yaml::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err((Some(key), "must be a string".to_owned())),
        };
    let name = text_field("name", usize::MAX, true)?.unwrap_or_default();
    let description = text_field("description", MAX_DESCRIPTION_CHARS, true)?.unwrap_or_default();
    text_field("compatibility", MAX_COMPATIBILITY_CHARS, false)?;
    Ok(FrontMatter { name, description })
}

/// The name rule, as a sentence about what is wrong.
pub fn check_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    if len == 0 || len > MAX_NAME_CHARS {
        return Err(format!(
            "'{name}' is {len} characters long; 1 to {MAX_NAME_CHARS} are allowed"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "'{name}' may hold only lowercase letters, digits and hyphens"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "'{name}' may not start or end with a hyphen, nor hold two in a row"
        ));
    }
    Ok(())
}

/// Every regular file beneath `dir` (folders are walked, never followed through a
/// symlink). A symlink counts when it leads to a regular file inside the folder, which the
/// kernel checks (`RESOLVE_BENEATH`); one that leads out is a warning.
fn list_files(dir: &Path) -> (Vec<SkillFile>, Vec<SkillError>) {
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let root = Dir::open_ambient_dir(dir, cap_std::ambient_authority()).ok();
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
                let size = entry.metadata().map_or(0, |m| m.len());
                files.push(skill_file(&path, size));
            } else if kind.is_symlink() {
                match root.as_ref().map(|r| safe_read::open_node(r, &path)) {
                    Some(Ok(Node::File(f))) => {
                        let size = f.metadata().map_or(0, |m| m.len());
                        files.push(skill_file(&path, size));
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
    files.sort_by(|a, b| a.path.cmp(&b.path));
    (files, warnings)
}

fn skill_file(rel: &Path, size: u64) -> SkillFile {
    SkillFile {
        path: rel.to_string_lossy().into_owned(),
        size,
    }
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
    fn front_matter_is_split_from_the_body() {
        let text = "---\nname: a\ndescription: b\n---\n# Body\n";
        let (front, start) = split_front_matter(text).unwrap();
        assert_eq!(front, "name: a\ndescription: b\n");
        assert_eq!(&text[start..], "# Body\n");
        assert!(split_front_matter("# no front matter\n").is_none());
        assert!(split_front_matter("---\nname: a\n").is_none());
    }

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
        assert!(parse_front_matter("name: a\ndescription: d\nmetadata: {x: y}\n").is_ok());
    }
}
