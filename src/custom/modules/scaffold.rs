//! `toolhost tool new NAME --lang ts` (a module in the MusePi seed's shape) and the module
//! half of `toolhost tool check`, which loads each module through a one-shot module host:
//! what passes the check is what the daemon loads.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::discover::Found;
use super::Modules;

/// The module `tool new --lang ts` writes; `__NAME__` is the tool's name.
const SEED_TS: &str = r#"// A toolhost tool module in MusePi's shape: the default export is a factory that takes
// the host API (`pi`) and returns a tool (or a list of tools). See proto-docs/modules.md.
import type { CustomToolFactory } from "@musepi/pi-coding-agent";

const factory: CustomToolFactory = (pi) => ({
  name: "__NAME__",
  label: "__LABEL__",
  description: "- Greets someone (a starting point: edit this file).\n- Returns the greeting as text and as details.",
  approval: "read_only",
  parameters: pi.zod.object({
    name: pi.zod.string().describe("Who to greet.").optional(),
  }),

  async execute(toolCallId, params, onUpdate, ctx, signal) {
    onUpdate?.({ content: [{ type: "text", text: "working..." }], details: { phase: "greet" } });
    const greeting = `Hello, ${params.name ?? "world"}!`;
    return {
      content: [{ type: "text", text: greeting }],
      details: { greeting },
    };
  },
});

export default factory;
"#;

/// Writes `<dest>/<name>.ts`; refuses to overwrite.
pub fn new_module(dest: &Path, name: &str) -> Result<PathBuf, String> {
    let file = dest.join(format!("{name}.ts"));
    std::fs::create_dir_all(dest).map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
    let text = SEED_TS
        .replace("__NAME__", name)
        .replace("__LABEL__", &name.replace(['_', '-'], " "));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&file)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

/// One line of the check: a tool that loaded (`Ok(name, file)`), or a problem.
pub type Checked = Result<(String, PathBuf), String>;

/// Loads `found` through a module host of its own (config `node`, `node_modules` from
/// `settings`), stopped when done.
pub async fn check(
    found: Vec<Found>,
    settings: &crate::config::CustomTools,
    config_path: &Path,
    workspace: &Path,
) -> Vec<Checked> {
    if found.is_empty() {
        return Vec::new();
    }
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    let dir = match tempfile::Builder::new().prefix("toolhost-check-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            return vec![Err(format!(
                "cannot make a folder for the module host: {e}"
            ))]
        }
    };
    let modules = Modules::new(
        crate::process::Processes::default(),
        tracker.clone(),
        stop.clone(),
        dir.path().to_path_buf(),
        crate::session::History::default(),
    );
    modules.configure(settings, config_path, workspace);
    let tools = modules.tools(found, &HashSet::new()).await;
    let mut out: Vec<Checked> = tools
        .iter()
        .map(|t| match &t.spec().source {
            crate::catalog::ToolSource::Custom { dir, .. } => {
                Ok((t.spec().name.clone(), dir.clone()))
            }
            _ => Ok((t.spec().name.clone(), PathBuf::new())),
        })
        .collect();
    let health = modules.health();
    out.extend(health.problems.into_iter().map(Err));
    if let Some(e) = health.host.start_error {
        out.push(Err(e));
    }
    drop(tools);
    modules.release();
    drop(modules);
    stop.cancel();
    tracker.close();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), tracker.wait()).await;
    out
}
