//! `toolhost skills sync`: each skill made visible where a frontend looks (Claude Code's
//! `.claude/skills`, Codex's `.agents/skills`) as a relative symlink to the one copy, so users stop
//! keeping the links by hand. A folder there that is not our link is never touched, only
//! reported.

use std::path::{Path, PathBuf};

use super::{Catalog, Skill};
use crate::protocol::SkillSource;

/// Which frontends' folders are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    Claude,
    Agents,
    All,
}

/// What sync found (or, without `--check`, did) for one skill in one folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Already the link to the skill (or the skill itself).
    UpToDate,
    /// A link to be made (`--check`) or made.
    Linked,
    /// Something else has the name there: left alone.
    Foreign,
}

/// One line of the plan.
pub struct Step {
    pub skill: String,
    pub at: PathBuf,
    pub outcome: Outcome,
}

/// The frontend folders under `base` (a workspace, or the home directory) for `target`.
pub fn folders(base: &Path, target: Target) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if matches!(target, Target::Claude | Target::All) {
        out.push(base.join(".claude").join("skills"));
    }
    if matches!(target, Target::Agents | Target::All) {
        out.push(base.join(".agents").join("skills"));
    }
    out
}

/// Whether a skill of `source` belongs in the user's folders (`user`) or a workspace's.
pub fn in_scope(source: SkillSource, user: bool) -> bool {
    let workspace = matches!(
        source,
        SkillSource::WorkspaceToolhost
            | SkillSource::WorkspaceAgents
            | SkillSource::WorkspaceClaude
    );
    workspace != user
}

/// Links each skill of `catalog` in scope into each of `folders`; with `check`, only says
/// what would be done.
pub fn sync(
    catalog: &Catalog,
    user: bool,
    folders: &[PathBuf],
    check: bool,
) -> Vec<Result<Step, String>> {
    let skills: Vec<&std::sync::Arc<Skill>> = catalog
        .skills()
        .iter()
        .filter(|s| in_scope(s.source, user))
        .collect();
    let mut out = Vec::new();
    for folder in folders {
        for s in &skills {
            out.push(one(s, folder, check));
        }
    }
    out
}

fn one(s: &Skill, folder: &Path, check: bool) -> Result<Step, String> {
    let at = folder.join(&s.name);
    let step = |outcome| Step {
        skill: s.name.clone(),
        at: at.clone(),
        outcome,
    };
    let target = std::fs::canonicalize(&s.dir).unwrap_or_else(|_| s.dir.clone());
    if at.symlink_metadata().is_ok() {
        let here = std::fs::canonicalize(&at).ok();
        return Ok(step(if here.as_deref() == Some(target.as_path()) {
            Outcome::UpToDate
        } else {
            Outcome::Foreign
        }));
    }
    if !check {
        // Relative (`../../.toolhost/skills/x`): a workspace's links stay right when the
        // project is committed, cloned or moved.
        let fail = |e: std::io::Error| {
            format!("cannot link {} to {}: {e}", at.display(), target.display())
        };
        std::fs::create_dir_all(folder).map_err(fail)?;
        let real = std::fs::canonicalize(folder).map_err(fail)?;
        let link = pathdiff::diff_paths(&target, &real).unwrap_or_else(|| target.clone());
        std::os::unix::fs::symlink(&link, &at).map_err(fail)?;
    }
    Ok(step(Outcome::Linked))
}
