//! The built-in `load_skill`: how a model in any frontend uses a skill. Its description
//! is the catalog of skills (name and description each, names only past
//! [`LISTING_TOKENS`], as the tool catalog lists deferred tools), and a call returns the
//! skill's instructions. A tool object is built per set of catalogs, so what it lists and
//! what it loads always agree; the registry notifies only when the description changed.
//!
//! One tool serves every session: a call loads from the catalog of the call's workspace
//! (a session workspace's own skills included); the description lists the daemon
//! workspace's skills, since a tool has one description for every session.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::{Skill, Views};
use crate::catalog::{estimate_tokens, ToolSpec};
use crate::protocol::{ApprovalClass, ToolOutput};
use crate::registry::{CallContext, Tool, ToolError, ToolResult};

pub const LOAD_SKILL: &str = "load_skill";
/// The most tokens the skills' descriptions take in the tool's description; the skills
/// past it are listed by name only.
pub const LISTING_TOKENS: usize = 2000;

pub struct LoadSkill {
    spec: ToolSpec,
    views: Arc<Views>,
}

impl LoadSkill {
    /// The tool for `views`, or none while no session has a skill to load.
    pub fn for_views(views: Arc<Views>) -> Option<LoadSkill> {
        if views.all().all(|c| c.is_empty()) {
            return None;
        }
        let spec = ToolSpec::builtin(
            LOAD_SKILL,
            &description(views.base.skills()),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "description": "The skill's name, as listed."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            ApprovalClass::ReadOnly,
        );
        Some(LoadSkill { spec, views })
    }
}

/// What the model reads: what the tool does, then one line per skill within the budget,
/// then the names of the rest.
fn description(skills: &[Arc<Skill>]) -> String {
    let mut text = String::from(
        "- Loads a skill: instructions for a task, written by the user. Load one when the task matches its description, then follow it.\n- Skills:\n",
    );
    if skills.is_empty() {
        text.push_str("  - (only those of this session's project: see its skill:// resources)\n");
    }
    let mut budget = LISTING_TOKENS;
    let mut rest: Vec<&str> = Vec::new();
    for s in skills {
        let line = format!("  - {}: {}\n", s.name, s.description.replace('\n', " "));
        let tokens = estimate_tokens(line.len());
        if rest.is_empty() && tokens <= budget {
            budget -= tokens;
            text.push_str(&line);
        } else {
            rest.push(&s.name);
        }
    }
    if !rest.is_empty() {
        text.push_str(&format!("  - also (by name): {}\n", rest.join(", ")));
    }
    text.truncate(text.trim_end().len());
    text
}

impl Tool for LoadSkill {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        let catalog = self.views.of(&ctx.workspace);
        let result = match args.get("name").and_then(Value::as_str) {
            None => Err(ToolError::invalid("arguments.name is required")),
            Some(name) => match catalog.get(name) {
                None => Err(ToolError::invalid(format!(
                    "no skill named '{name}'; the skills are listed in this tool's description"
                ))),
                Some(s) => Ok(output(s)),
            },
        };
        Box::pin(async move { result })
    }
}

/// The instructions, then where the skill's other files are (read on demand).
fn output(s: &Skill) -> ToolOutput {
    let others: Vec<&str> = s
        .files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| *p != super::skill::SKILL_FILE)
        .collect();
    let mut text = format!("# Skill: {}\n\n{}\n", s.name, s.body());
    if !others.is_empty() {
        text.push_str(&format!(
            "\nThe skill's folder is {}; its other files: {}\n",
            s.dir.display(),
            others.join(", ")
        ));
    }
    let mut out = ToolOutput::default();
    out.insert("text", text);
    out.insert("name", s.name.clone());
    out.insert("path", s.dir.display().to_string());
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::protocol::SkillSource;

    fn catalog(n: usize) -> Arc<Views> {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..n {
            let dir = tmp.path().join(format!("s{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let text = format!(
                "---\nname: s{i}\ndescription: {}\n---\nbody\n",
                "word ".repeat(20)
            );
            std::fs::write(dir.join("SKILL.md"), text).unwrap();
        }
        let roots = [super::super::Root {
            path: tmp.path().to_path_buf(),
            source: SkillSource::Config,
        }];
        Arc::new(Views {
            base: Arc::new(super::super::Catalog::scan(&roots)),
            sessions: Vec::new(),
        })
    }

    #[test]
    fn descriptions_are_listed_within_the_budget_then_names_only() {
        assert!(LoadSkill::for_views(catalog(0)).is_none());
        let few = LoadSkill::for_views(catalog(3)).unwrap();
        assert!(few.spec.description.contains("  - s2: word"));
        assert!(!few.spec.description.contains("also"));
        let many = LoadSkill::for_views(catalog(200)).unwrap();
        let d = &many.spec.description;
        let listed = d.lines().filter(|l| l.contains(": word")).count();
        assert!(listed > 10 && listed < 200, "{listed}");
        assert!(d.contains("also (by name): "), "{d}");
        assert!(d.ends_with("s99"), "{}", &d[d.len() - 40..]);
        // What is listed with its description stays within the budget.
        let described: usize = d
            .lines()
            .filter(|l| l.contains(": word"))
            .map(|l| l.len() + 1)
            .sum();
        assert!(estimate_tokens(described) <= LISTING_TOKENS + listed);
    }
}
