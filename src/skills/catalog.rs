//! Every skill root scanned into one immutable catalog, built once per change and read by
//! every request: the answer of `list_skills` is serialised here, once (with manifests,
//! once more on first use).
//!
//! A [`Scanner`] scans each root once per pass, however many catalogs (the daemon
//! workspace's, each session workspace's) search it, and reuses the skill last loaded from
//! a folder whose files have not changed ([`skill::load_reusing`]).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::skill::{self, Skill, SkillError, SKILL_FILE};
use super::Root;
use crate::protocol::{ListSkillsResult, SkillEntry, SkillSource, TrustItem, TrustKind};
use crate::trust::Trust;

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
    /// The `list_skills` answer with manifests, serialised on first use.
    manifest_json: OnceLock<Box<RawValue>>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::build(Vec::new(), Vec::new(), Vec::new())
    }
}

/// One folder of a root, as scanned.
struct Found {
    /// The folder's device and inode: a folder reached twice (`.claude/skills/x` a symlink
    /// to `.agents/skills/x`, as users keep them) is one skill, not a clash.
    id: (u64, u64),
    result: Result<Arc<Skill>, SkillError>,
    warnings: Vec<SkillError>,
}

/// One pass over the skill roots: each root read once, the skills of unchanged folders
/// taken from the last pass. With a trust gate, a workspace's skill folder is only hashed
/// until the gate admits it: its `SKILL.md` is not parsed, and it is in no catalog.
#[derive(Default)]
pub struct Scanner {
    previous: HashMap<PathBuf, Arc<Skill>>,
    scanned: HashMap<(PathBuf, SkillSource), Vec<Found>>,
    trust: Option<Trust>,
    waiting: Vec<TrustItem>,
}

impl Scanner {
    /// A pass that reuses `previous` (what [`Scanner::loaded`] returned last time), with
    /// the workspaces' skills passing `trust`.
    pub fn gated(previous: HashMap<PathBuf, Arc<Skill>>, trust: Trust) -> Scanner {
        Scanner {
            previous,
            scanned: HashMap::new(),
            trust: Some(trust),
            waiting: Vec::new(),
        }
    }

    /// The workspace skills the gate held back in this pass.
    pub fn waiting(&self) -> Vec<TrustItem> {
        self.waiting.clone()
    }

    /// The skills loaded in this pass, by folder, for the next one.
    pub fn loaded(self) -> HashMap<PathBuf, Arc<Skill>> {
        let mut out = HashMap::new();
        for found in self.scanned.into_values().flatten() {
            if let Ok(s) = found.result {
                out.insert(s.dir.clone(), s);
            }
        }
        out
    }

    fn root(&mut self, root: &Root) -> &[Found] {
        let previous = &self.previous;
        let gate = self.trust.as_ref().filter(|_| root.source.is_workspace());
        let waiting = &mut self.waiting;
        self.scanned
            .entry((root.path.clone(), root.source))
            .or_insert_with(|| {
                skill_dirs(&root.path)
                    .into_iter()
                    .filter_map(|(dir, id)| {
                        // A gated skill is parsed from the SKILL.md bytes its digest covers.
                        let mut approved = None;
                        if let Some(trust) = gate {
                            let workspace = crate::trust::workspace_of(&root.path);
                            let admitted = crate::trust::folder_digest_keeping(
                                &dir,
                                Some(Path::new(skill::SKILL_FILE)),
                            )
                            .and_then(|(d, kept)| {
                                trust
                                    .check(workspace, TrustKind::Skill, &dir, &d)
                                    .map(|()| skill::Approved {
                                        digest: d,
                                        skill_md: kept,
                                    })
                                    .map_err(|w| {
                                        waiting.push(w);
                                        String::new()
                                    })
                            });
                            match admitted {
                                // A SKILL.md that is no regular file (a symlink) is
                                // read as before, and refused there when it leads out.
                                Ok(a) => approved = Some(a),
                                Err(reason) if reason.is_empty() => return None,
                                Err(reason) => {
                                    let result = Err(SkillError {
                                        file: dir,
                                        field: None,
                                        reason,
                                    });
                                    return Some(Found {
                                        id,
                                        result,
                                        warnings: Vec::new(),
                                    });
                                }
                            }
                        }
                        let (result, warnings) = match skill::load_reusing(
                            &dir,
                            root.source,
                            previous.get(&dir),
                            approved,
                        ) {
                            Ok((s, w)) => (Ok(s), w),
                            Err(e) => (Err(e), Vec::new()),
                        };
                        Some(Found {
                            id,
                            result,
                            warnings,
                        })
                    })
                    .collect()
            })
    }

    /// The catalog of `roots`, in order: a root that does not exist is skipped; inside
    /// one, the skill folders are taken by name order, so the result is stable.
    pub fn catalog(&mut self, roots: &[Root]) -> Catalog {
        let mut skills: Vec<Arc<Skill>> = Vec::new();
        let mut errors = Vec::new();
        let mut clashes = Vec::new();
        let mut seen_dirs: Vec<(u64, u64)> = Vec::new();
        for root in roots {
            for found in self.root(root) {
                if seen_dirs.contains(&found.id) {
                    continue;
                }
                match &found.result {
                    Ok(s) => {
                        errors.extend(found.warnings.iter().cloned());
                        if let Some(first) = skills.iter().find(|k| k.name == s.name) {
                            clashes.push(format!(
                                "skill '{}' is defined twice: {} is used, {} is ignored",
                                s.name,
                                first.dir.display(),
                                s.dir.display()
                            ));
                        } else {
                            seen_dirs.push(found.id);
                            skills.push(s.clone());
                        }
                    }
                    Err(e) => errors.push(e.clone()),
                }
            }
        }
        Catalog::build(skills, errors, clashes)
    }
}

impl Catalog {
    /// The catalog of `roots`, read afresh (the CLI's, without a daemon).
    pub fn scan(roots: &[Root]) -> Catalog {
        Scanner::default().catalog(roots)
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
        Catalog {
            list_json: raw(&list),
            skills,
            by_name,
            errors,
            clashes,
            etag,
            manifest_json: OnceLock::new(),
        }
    }

    /// The `list_skills` answer, as serialised once.
    pub fn list_json(&self) -> &RawValue {
        &self.list_json
    }

    /// The `list_skills` answer with each skill's front matter and manifest, serialised
    /// on first use. Blocking until then (the digests read every file once).
    pub fn manifest_json(&self) -> &RawValue {
        self.manifest_json.get_or_init(|| {
            let list = ListSkillsResult {
                skills: self.skills.iter().map(|s| described(s)).collect(),
                etag: self.etag.clone(),
            };
            raw(&list)
        })
    }

    /// Whether [`Catalog::manifest_json`] would answer without touching the disk.
    pub fn has_manifest_json(&self) -> bool {
        self.manifest_json.get().is_some()
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

/// Our own types always serialise; the fallback (`null`) is never taken.
fn raw(value: &impl serde::Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_default()
}

/// One skill as listed.
pub fn entry(s: &Skill) -> SkillEntry {
    SkillEntry {
        name: s.name.clone(),
        description: s.description.clone(),
        path: s.dir.display().to_string(),
        source: s.source,
        server: None,
        etag: s.etag.clone(),
        frontmatter: None,
        manifest: None,
    }
}

/// One skill with its front matter and manifest (blocking: see [`Skill::manifest`]).
pub fn described(s: &Skill) -> SkillEntry {
    SkillEntry {
        frontmatter: Some(s.frontmatter.clone()),
        manifest: Some(s.manifest().to_vec()),
        ..entry(s)
    }
}

/// The sub-folders of `root` that hold a `SKILL.md` (a file or a symlink: whether it
/// stays inside is [`skill::load`]'s check), sorted by name, each with its device and
/// inode.
fn skill_dirs(root: &Path) -> Vec<(PathBuf, (u64, u64))> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<(PathBuf, (u64, u64))> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok().filter(|m| m.is_dir())?;
            p.join(SKILL_FILE).symlink_metadata().ok()?;
            Some((p, (m.dev(), m.ino())))
        })
        .collect();
    dirs.sort();
    dirs
}
