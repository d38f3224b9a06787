//! `toolhost skills …` without a daemon: the skills a daemon in this workspace would find
//! (`list`), their validation (`check`), and a valid first skill (`new`). All three read
//! the folders exactly as the daemon does ([`super::roots`], [`Catalog::scan`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::skill::{check_name, SKILL_FILE};
use super::{roots, Catalog};
use crate::protocol::SkillSource;

/// `toolhost skills …`.
#[derive(clap::Subcommand, Debug)]
pub enum SkillsCommand {
    /// The skills found, in search order (the default).
    List {
        /// The workspace whose `.toolhost/`, `.agents/` and `.claude/skills` are searched
        /// (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Validate every skill without a daemon (exit 1 when any is invalid or a name clashes).
    Check {
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Link each skill into the frontends' folders (`.claude/skills`, `.agents/skills`) of
    /// the workspace, or the user's (`--user`); a folder there that is not ours is left
    /// alone and reported.
    Sync {
        #[arg(long, value_enum, default_value = "all")]
        target: super::sync::Target,
        /// The workspace whose skills are linked into its own folders (default: the
        /// current directory).
        #[arg(long, conflicts_with = "user")]
        workspace: Option<PathBuf>,
        /// Link the user's skills (config paths, `$XDG_CONFIG_HOME/toolhost/skills`, …)
        /// into `~/.claude/skills` and `~/.agents/skills`.
        #[arg(long)]
        user: bool,
        /// Only list what is out of date (exit 1 when anything is).
        #[arg(long)]
        check: bool,
    },
    /// Write a valid skill folder into the project's `.toolhost/skills/` (or the user's,
    /// `--user`).
    New {
        /// The skill's name (1 to 64 of a-z, 0-9 and single inner hyphens).
        name: String,
        /// Write into `$XDG_CONFIG_HOME/toolhost/skills/` (every project sees it).
        #[arg(long, conflicts_with = "dir")]
        user: bool,
        /// Write into this skills folder instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Runs `toolhost skills …`; `config_path` is the config whose `skills` are searched;
/// `json` prints `list` as `list_skills` would answer.
pub fn cli(command: Option<SkillsCommand>, config_path: &Path, json: bool) -> ExitCode {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let searched = |workspace: Option<PathBuf>| {
        let cfg = crate::config::load(config_path)
            .map(|l| l.config)
            .unwrap_or_default();
        roots(&cfg, config_path, &workspace.unwrap_or_else(|| cwd.clone()))
    };
    match command.unwrap_or(SkillsCommand::List { workspace: None }) {
        SkillsCommand::List { workspace } => {
            let catalog = Catalog::scan(&searched(workspace));
            if json {
                println!("{}", catalog.list_json());
            } else if catalog.is_empty() {
                println!("no skills found");
            }
            for s in catalog.skills().iter().filter(|_| !json) {
                println!(
                    "{:<24} {}  ({})",
                    s.name,
                    s.description.lines().next().unwrap_or_default(),
                    s.dir.display()
                );
            }
            ExitCode::SUCCESS
        }
        SkillsCommand::Check { workspace } => {
            let roots = searched(workspace);
            let catalog = Catalog::scan(&roots);
            for s in catalog.skills() {
                println!("ok      {} ({})", s.name, s.dir.display());
            }
            let problems: Vec<String> = catalog.problems().collect();
            for p in &problems {
                println!("invalid {p}");
            }
            if catalog.is_empty() && problems.is_empty() {
                let shown: Vec<String> =
                    roots.iter().map(|r| r.path.display().to_string()).collect();
                println!("no skills found in {}", shown.join(", "));
            }
            if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        SkillsCommand::Sync {
            target,
            workspace,
            user,
            check,
        } => {
            let ws = workspace.unwrap_or_else(|| cwd.clone());
            let catalog = Catalog::scan(&searched(Some(ws.clone())));
            let base = if user {
                crate::config::xdg_dir("HOME", "")
            } else {
                ws
            };
            let mut ok = true;
            for step in
                super::sync::sync(&catalog, user, &super::sync::folders(&base, target), check)
            {
                use super::sync::Outcome;
                match step {
                    Ok(s) => {
                        let what = match (&s.outcome, check) {
                            (Outcome::UpToDate, _) => "ok       ",
                            (Outcome::Linked, true) => "outdated ",
                            (Outcome::Linked, false) => "linked   ",
                            (Outcome::Foreign, _) => "foreign  ",
                        };
                        ok &= !(check && s.outcome == Outcome::Linked);
                        let note = if s.outcome == Outcome::Foreign {
                            " (not ours: left alone)"
                        } else {
                            ""
                        };
                        println!("{what}{} {}{note}", s.skill, s.at.display());
                    }
                    Err(e) => {
                        ok = false;
                        eprintln!("toolhost: {e}");
                    }
                }
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        SkillsCommand::New { name, user, dir } => {
            let dest = match (user, dir) {
                (true, _) => crate::config::xdg_dir("XDG_CONFIG_HOME", ".config")
                    .join("toolhost")
                    .join("skills"),
                (false, Some(d)) => d,
                (false, None) => cwd.join(".toolhost").join("skills"),
            };
            match new_skill(&dest, &name) {
                Ok(dir) => {
                    println!("created {}", dir.join(SKILL_FILE).display());
                    println!("edit its description (when to use it) and instructions; then: toolhost skills check");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// Writes `dest/<name>/SKILL.md`, never over an existing folder; the result passes
/// `check` as written.
pub fn new_skill(dest: &Path, name: &str) -> Result<PathBuf, String> {
    check_name(name).map_err(|e| format!("invalid skill name: {e}"))?;
    let dir = dest.join(name);
    if dir.exists() {
        return Err(format!("{} already exists", dir.display()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let text = format!(
        "---\nname: {name}\ndescription: What this skill does and when to use it (replace this line).\n---\n\n# {name}\n\n## When to use\n\n- …\n\n## Steps\n\n1. …\n"
    );
    let path = dir.join(SKILL_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // The same check the daemon makes: what `new` writes is a valid skill.
    super::skill::load(&dir, SkillSource::Config).map_err(|e| e.to_string())?;
    Ok(dir)
}
