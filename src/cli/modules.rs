//! `toolhost modules setup`: installs the module host's own pinned zod and TypeBox
//! ([`crate::custom::modules::packages`]) so a MusePi module that uses `pi.zod` loads with nothing
//! installed next to it; a running daemon then tries its failed modules again.

use std::path::PathBuf;
use std::process::ExitCode;

use super::render::{say, say_err};
use super::Globals;
use crate::custom::modules::packages;

#[derive(clap::Subcommand, Debug)]
pub enum ModulesCommand {
    /// Install the module host's pinned zod and TypeBox (`pi.zod`, `pi.typebox`) with
    /// `npm ci`, once: into `$XDG_DATA_HOME/toolhost/modules` (default), `--system` (the
    /// installation's `lib/toolhost/modules`, for every user) or `--dir DIR`.
    Setup {
        /// Install into this folder (its `node_modules`); the daemon looks there only if
        /// it is one of the two above or in config `custom_tools.node_modules`.
        #[arg(long, conflicts_with = "system")]
        dir: Option<PathBuf>,
        /// Install beside the binary (`/usr/lib/toolhost/modules` for `/usr/bin/toolhost`).
        #[arg(long)]
        system: bool,
    },
}

pub async fn run(g: &Globals, command: ModulesCommand) -> ExitCode {
    let ModulesCommand::Setup { dir, system } = command;
    let dir = match (dir, system) {
        (Some(d), _) => d,
        (None, true) => match packages::system_dir() {
            Some(d) => d,
            None => {
                say_err!("error: cannot tell where this binary is installed; use --dir");
                return ExitCode::from(1);
            }
        },
        (None, false) => packages::user_dir(),
    };
    // npm from beside the Node the daemon runs modules on (config `custom_tools.node`).
    let config = g.config.clone().unwrap_or_else(crate::config::default_path);
    let node = crate::config::load(&config).ok().and_then(|l| {
        let base = config.parent().map(PathBuf::from).unwrap_or_default();
        l.config.custom_tools.node.map(|n| base.join(n))
    });
    match packages::install(&dir, node.as_deref()).await {
        Ok(installed) => {
            let at = dir.join("node_modules");
            if g.out.json {
                println!(
                    "{}",
                    serde_json::json!({"installed": installed, "node_modules": at})
                );
            } else {
                say!("installed {} into {}", installed.join(", "), at.display());
            }
        }
        Err(e) => {
            say_err!("error: {e}");
            return ExitCode::from(1);
        }
    }
    super::tool::retry_in_daemon(g, |_| true).await;
    ExitCode::SUCCESS
}
