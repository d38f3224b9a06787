//! `toolhost tool new` and `toolhost tool check`: a user's first tool in a minute, and a
//! manifest check that needs no daemon.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use super::manifest::{self, valid_name, MANIFEST};

/// `toolhost tool …`.
#[derive(clap::Subcommand, Debug)]
pub enum ToolCommand {
    /// Write a working tool folder (manifest + a program that streams one update and
    /// returns a result) into the project's `.toolhost/tools/` (or the user's, `--user`).
    New {
        /// The tool's name (1 to 64 of a-z, A-Z, 0-9, _ and -).
        name: String,
        /// The program's language.
        #[arg(long, value_enum, default_value = "sh")]
        lang: Lang,
        /// Write into `$XDG_CONFIG_HOME/toolhost/tools/` (every project sees it).
        #[arg(long, conflicts_with = "dir")]
        user: bool,
        /// Write into this tools folder instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Validate tool manifests without a daemon: DIR (a tool folder or a folder of them),
    /// else every folder the daemon would search (exit 1 when any is invalid).
    Check {
        dir: Option<PathBuf>,
        /// The workspace whose `.toolhost/tools/` is searched (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
}

/// What `tool new` / `tool check` did, for the caller to say what comes next.
pub struct Done {
    pub code: std::process::ExitCode,
    /// The folders written (`new`) or read (`check`).
    pub folders: Vec<super::Root>,
    /// The tool `new` created.
    pub created: Option<String>,
    /// The tool modules `check` found, for the caller to load through a module host
    /// ([`crate::custom::modules::scaffold::check`]), with the config's `custom_tools` and the
    /// workspace.
    pub modules: Vec<crate::custom::modules::discover::Found>,
    pub settings: crate::config::CustomTools,
    pub workspace: PathBuf,
}

impl Done {
    fn new(
        code: std::process::ExitCode,
        folders: Vec<super::Root>,
        created: Option<String>,
    ) -> Self {
        Done {
            code,
            folders,
            created,
            modules: Vec::new(),
            settings: Default::default(),
            workspace: PathBuf::new(),
        }
    }
}

/// Why the Node that would run a new TypeScript module cannot (none found, or one older than
/// type stripping), said at once rather than when the module first fails to load.
fn typescript_note(config_path: &Path) -> Option<String> {
    use crate::process::node;
    let configured = crate::config::load(config_path)
        .ok()
        .and_then(|l| l.config.custom_tools.node);
    let named = if configured.is_some() {
        "custom_tools.node"
    } else {
        "node on PATH"
    };
    let found = match node::find_node(configured) {
        Ok(found) => found,
        Err(e) => return Some(e),
    };
    let version = node::version(&found)?;
    (!node::strips_types(&version)).then(|| {
        format!(
            "{} ({named}) is Node {version}, which cannot run TypeScript modules (type \
             stripping needs Node 22.6 or newer): set config custom_tools.node to a newer \
             Node, or write the module in JavaScript (--lang node)",
            found.display()
        )
    })
}

/// Runs `toolhost tool …`; `config_path` is the config whose `custom_tools` are searched.
/// Whether a running daemon searches the folders is the CLI's to say (cli/tool.rs).
pub fn cli(command: ToolCommand, config_path: &Path) -> Done {
    use std::process::ExitCode;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    match command {
        ToolCommand::New {
            name,
            lang,
            user,
            dir,
        } => {
            let (dest, workspace) = match (user, dir) {
                (true, _) => (super::user_tools_dir(), false),
                (false, Some(d)) => (d, false),
                (false, None) => (cwd.join(".toolhost").join("tools"), true),
            };
            let folder = super::Root {
                path: dest.clone(),
                workspace,
            };
            let made = if lang == Lang::Ts {
                valid_name(&name)
                    .then_some(())
                    .ok_or_else(|| invalid_name(&name))
                    .and_then(|()| crate::custom::modules::scaffold::new_module(&dest, &name))
            } else {
                new_tool(&dest, &name, lang)
            };
            match made {
                Ok(dir) => {
                    println!("created {}", dir.display());
                    if lang == Lang::Ts {
                        if let Some(note) = typescript_note(config_path) {
                            eprintln!("note: {note}");
                        }
                    }
                    Done::new(ExitCode::SUCCESS, vec![folder], Some(name))
                }
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    Done::new(ExitCode::from(1), Vec::new(), None)
                }
            }
        }
        ToolCommand::Check { dir, workspace } => {
            let cfg = crate::config::load(config_path)
                .map(|l| l.config)
                .unwrap_or_default();
            let workspace = workspace.unwrap_or(cwd);
            // `tool check file.ts`: that module alone.
            let only = dir
                .clone()
                .filter(|d| d.is_file() && crate::custom::modules::discover::is_module_file(d));
            let (roots, module_roots) = match dir {
                Some(d) if only.is_some() => (
                    Vec::new(),
                    vec![module_root(d.parent().unwrap_or(&d).to_path_buf())],
                ),
                Some(d) => (
                    vec![super::Root {
                        path: d.clone(),
                        workspace: false,
                    }],
                    vec![module_root(d)],
                ),
                None => {
                    let roots = super::roots(&cfg, config_path, &workspace);
                    let programs: Vec<_> = roots
                        .iter()
                        .map(|r| crate::custom::modules::discover::Root {
                            workspace: r.workspace,
                            ..module_root(r.path.clone())
                        })
                        .collect();
                    let modules = crate::custom::modules::discover::roots(
                        &cfg.custom_tools,
                        &programs,
                        &workspace,
                        &[],
                    );
                    (roots, modules)
                }
            };
            let (mut modules, module_problems) =
                crate::custom::modules::discover::scan(&module_roots, MANIFEST);
            if let Some(file) = only.as_ref() {
                modules.retain(|m| &m.file == file);
            }
            let mut bad = 0;
            let mut seen = 0;
            let mut read = Vec::new();
            for root in &roots {
                let found = check(&root.path);
                if !found.is_empty() {
                    read.push(root.clone());
                }
                for (d, r) in found {
                    seen += 1;
                    match r {
                        Ok(name) => println!("ok      {name} ({})", d.display()),
                        Err(e) => {
                            bad += 1;
                            println!("invalid {e}");
                        }
                    }
                }
            }
            for p in &module_problems {
                bad += 1;
                println!("invalid {p}");
            }
            if seen == 0 && modules.is_empty() && module_problems.is_empty() {
                let shown: Vec<String> = roots
                    .iter()
                    .map(|r| r.path.display().to_string())
                    .chain(module_roots.iter().map(|r| r.path.display().to_string()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                println!("no tools found in {}", shown.join(", "));
            }
            let mut done = Done::new(
                if bad > 0 {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                },
                read,
                None,
            );
            done.modules = modules;
            done.settings = cfg.custom_tools;
            done.workspace = workspace;
            done
        }
    }
}

/// Languages `tool new` writes a program in (`ts`: a tool module in MusePi's shape,
/// `<name>.ts`, run by the module host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Sh,
    Python,
    Node,
    Ts,
}

/// A folder searched for modules only.
fn module_root(path: PathBuf) -> crate::custom::modules::discover::Root {
    crate::custom::modules::discover::Root {
        path,
        workspace: false,
        scope: None,
        plugins: false,
    }
}

fn invalid_name(name: &str) -> String {
    crate::registry::check_tool_name(name)
        .err()
        .unwrap_or_default()
}

impl Lang {
    fn program(self) -> (&'static str, Vec<&'static str>) {
        match self {
            Lang::Sh => ("run.sh", vec!["./run.sh"]),
            Lang::Python => ("run.py", vec!["python3", "run.py"]),
            Lang::Node | Lang::Ts => ("run.js", vec!["node", "run.js"]),
        }
    }
}

const SH: &str = r#"#!/bin/sh
# A toolhost custom tool. Arguments arrive as one JSON object on stdin; every stdout line
# that is a JSON object {"update": ...}, {"result": ...} or {"error": "..."} is protocol,
# anything else is collected as plain output. See proto-docs/custom-tools.md.
set -eu
args=$(cat)
echo '{"update": {"content": [{"type": "text", "text": "working..."}], "progress": {"progress": 1, "total": 2}}}'
# Crude extraction without jq: fine for a flat string argument.
name=$(printf '%s' "$args" | sed -n 's/.*"name"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
printf '{"result": {"content": [{"type": "text", "text": "Hello, %s!"}], "structured": {"greeting": "Hello, %s!"}}}\n' "${name:-world}" "${name:-world}"
"#;

const PY: &str = r#"#!/usr/bin/env python3
"""A toolhost custom tool: arguments as JSON on stdin, protocol lines on stdout.

See proto-docs/custom-tools.md for the whole contract."""
import json
import os
import sys


def send(obj):
    print(json.dumps(obj), flush=True)


args = json.load(sys.stdin)
if os.environ.get("TOOLHOST_EVENT") == "session":
    sys.exit(0)  # a session event (only sent when "session_events": true)
send({"update": {"content": [{"type": "text", "text": "working..."}],
                 "progress": {"progress": 1, "total": 2}}})
greeting = "Hello, %s!" % args.get("name", "world")
send({"result": {"content": [{"type": "text", "text": greeting}],
                 "structured": {"greeting": greeting}}})
"#;

const JS: &str = r#"#!/usr/bin/env node
// A toolhost custom tool: arguments as JSON on stdin, protocol lines on stdout.
// See proto-docs/custom-tools.md for the whole contract.
let input = "";
process.stdin.on("data", (c) => (input += c));
process.stdin.on("end", () => {
  const args = JSON.parse(input || "{}");
  const send = (o) => process.stdout.write(JSON.stringify(o) + "\n");
  send({ update: { content: [{ type: "text", text: "working..." }], progress: { progress: 1, total: 2 } } });
  const greeting = `Hello, ${args.name ?? "world"}!`;
  send({ result: { content: [{ type: "text", text: greeting }], structured: { greeting } } });
});
"#;

/// Writes `<dest>/<name>/` with a manifest and a program that streams one update and
/// returns a result. Refuses to overwrite an existing folder.
pub fn new_tool(dest: &Path, name: &str, lang: Lang) -> Result<PathBuf, String> {
    if !valid_name(name) {
        return Err(invalid_name(name));
    }
    let dir = dest.join(name);
    if dir.exists() {
        return Err(format!("{} already exists", dir.display()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let (file, command) = lang.program();
    let manifest = json!({
        "name": name,
        "label": name.replace(['_', '-'], " "),
        "description": "- Greets someone (a starting point: edit tool.json and the program).\n- Returns the greeting as text and as structured output.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet."}},
            "additionalProperties": false
        },
        "output_schema": {
            "type": "object",
            "properties": {"greeting": {"type": "string"}},
            "required": ["greeting"]
        },
        "command": command,
        "approval": "read_only",
        "timeout_ms": 30000
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())? + "\n";
    write_new(&dir.join(MANIFEST), text.as_bytes(), 0o644)?;
    let body = match lang {
        Lang::Sh => SH,
        Lang::Python => PY,
        Lang::Node | Lang::Ts => JS,
    };
    write_new(&dir.join(file), body.as_bytes(), 0o755)?;
    Ok(dir)
}

fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(data)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // The umask may have removed the execute bits we asked for.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// One checked tool folder: its name, or the problem.
pub type Checked = (PathBuf, Result<String, String>);

/// Checks `dir`: a tool folder (it holds `tool.json`) or a folder of tool folders.
/// Also reports a `command[0]` that is neither in the tool folder nor on `PATH`.
pub fn check(dir: &Path) -> Vec<Checked> {
    let dirs: Vec<PathBuf> = if dir.join(MANIFEST).exists() {
        vec![dir.to_path_buf()]
    } else {
        let root = super::Root {
            path: dir.to_path_buf(),
            workspace: false,
        };
        super::scan(&[root], &crate::trust::Trust::in_memory())
            .0
            .into_iter()
            .map(|f| f.dir)
            .collect()
    };
    dirs.into_iter()
        .map(|d| {
            let r = match manifest::load(&d) {
                Err(e) => Err(e.to_string()),
                Ok((m, _)) => match program_problem(&m, &d) {
                    Some(p) => Err(format!("{}: command[0]: {p}", d.join(MANIFEST).display())),
                    None => Ok(m.name),
                },
            };
            (d, r)
        })
        .collect()
}

fn program_problem(m: &manifest::Manifest, dir: &Path) -> Option<String> {
    let program = m.program(dir);
    if program.components().count() > 1 || program.is_absolute() {
        let meta = match std::fs::metadata(&program) {
            Ok(meta) => meta,
            Err(_) => return Some(format!("{} does not exist", program.display())),
        };
        if meta.permissions().mode() & 0o111 == 0 {
            return Some(format!(
                "{} is not executable (chmod +x it, or run it through an interpreter)",
                program.display()
            ));
        }
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| d.join(&program).is_file());
    (!found).then(|| format!("{} is not on PATH", program.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_tools_pass_the_check_and_refuse_to_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, lang) in [
            ("a_sh", Lang::Sh),
            ("b_py", Lang::Python),
            ("c_js", Lang::Node),
        ] {
            let dir = new_tool(tmp.path(), name, lang).unwrap();
            assert_eq!(dir, tmp.path().join(name));
        }
        let checked = check(tmp.path());
        let names: Vec<_> = checked.iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(names[0], Ok("a_sh".to_owned()));
        assert_eq!(names[1], Ok("b_py".to_owned()));
        assert!(new_tool(tmp.path(), "a_sh", Lang::Sh).is_err());
        assert!(new_tool(tmp.path(), "bad name", Lang::Sh).is_err());
    }
}
