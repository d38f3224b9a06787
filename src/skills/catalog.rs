//! Every skill root scanned into one immutable catalog, built once per change and read by
//! every request: the answer of `list_skills` is serialised here, once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::skill::{self, Skill, SkillError, SKILL_FILE};
use super::Root;
use crate::protocol::{ListSkillsResult, SkillEntry};

/// The skills found, in search order, and what was wrong on the way.
pub struct Catalog {
    skills: Vec<Arc<Skill>>,
    by_name: HashMap<String, usize>,
    /// Skipped skills, and files left out of skills.
    errors: Vec<SkillError>,
    /// Later definitions of a name, each with the path that keeps it.
    clashes: Vec<String>,
    etag: String,
    /// The `list_skills` answer, serialised when built.
    list_json: Box<RawValue>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::build(Vec::new(), Vec::new(), Vec::new())
    }
}

impl Catalog {
    /// Scans `roots` in order: a root that does not exist is skipped; inside one, the
    /// skill folders are taken by name order, so the result is stable.
    pub fn scan(roots: &[Root]) -> Catalog {
        let mut skills: Vec<Arc<Skill>> = Vec::new();
        let mut errors = Vec::new();
        let mut clashes = Vec::new();
        // Canonical folders already taken: a folder reached twice (`.claude/skills/x` a
        // symlink to `.agents/skills/x`, as users keep them) is one skill, not a clash.
        let mut seen_dirs: Vec<PathBuf> = Vec::new();
        for root in roots {
            for dir in skill_dirs(&root.path) {
                let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
                if seen_dirs.contains(&canonical) {
                    continue;
                }
                match skill::load(&dir, root.source) {
                    Ok((s, warnings)) => {
                        errors.extend(warnings);
                        if let Some(first) = skills.iter().find(|k| k.name == s.name) {
                            clashes.push(format!(
                                "skill '{}' is defined twice: {} is used, {} is ignored",
                                s.name,
                                first.dir.display(),
                                s.dir.display()
                            ));
                        } else {
                            seen_dirs.push(canonical);
                            skills.push(Arc::new(s));
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        Catalog::build(skills, errors, clashes)
    }

    fn build(skills: Vec<Arc<Skill>>, errors: Vec<SkillError>, clashes: Vec<String>) -> Catalog {
        let by_name = skills
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let mut h = Sha256::new();
        for s in &skills {
            h.update(s.dir.as_os_str().as_encoded_bytes());
            h.update([0]);
            h.update(s.etag.as_bytes());
        }
        let etag = format!("sha256:{}", hex::encode(h.finalize()));
        let list = ListSkillsResult {
            skills: skills.iter().map(|s| entry(s)).collect(),
            etag: etag.clone(),
        };
        // Strings and numbers always serialise; the fallback (`null`) is never taken.
        let list_json = serde_json::value::to_raw_value(&list).unwrap_or_default();
        Catalog {
            skills,
            by_name,
            errors,
            clashes,
            etag,
            list_json,
        }
    }

    /// The `list_skills` answer, as serialised once.
    pub fn list_json(&self) -> &RawValue {
        &self.list_json
    }

    pub fn skills(&self) -> &[Arc<Skill>] {
        &self.skills
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        self.by_name.get(name).map(|&i| &self.skills[i])
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// What `host.health` shows: each skipped skill or left-out file as
    /// `<file>: <field>: <reason>`.
    pub fn errors(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }

    /// Each later definition of a name, with both paths.
    pub fn clashes(&self) -> &[String] {
        &self.clashes
    }

    /// Errors and clashes together, for the log.
    pub fn problems(&self) -> impl Iterator<Item = String> + '_ {
        self.errors()
            .into_iter()
            .chain(self.clashes.iter().cloned())
    }
}

/// One skill as listed.
pub fn entry(s: &Skill) -> SkillEntry {
    SkillEntry {
        name: s.name.clone(),
        description: s.description.clone(),
        path: s.dir.display().to_string(),
        source: s.source,
        etag: s.etag.clone(),
    }
}

/// The sub-folders of `root` that hold a `SKILL.md` (a file or a symlink: whether it
/// stays inside is [`skill::load`]'s check), sorted by name.
fn skill_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join(SKILL_FILE).symlink_metadata().is_ok())
        .collect();
    dirs.sort();
    dirs
}
