//! A reload is a diff applied once (#46): every source configures from the new config and
//! its diff, and their contributions land in one registry swap — a reload that touches MCP
//! servers, custom tool folders and skill folders at once sends exactly one
//! `tools_changed`, both ways.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use crate::common;

use common::mcp::fixture;
use common::skills::{front, write_skill};
use common::*;
use serde_json::{json, Value};
use toolhost::client::Subscription;
use toolhost::protocol::ToolsChanged;

fn manifest(name: &str) -> Value {
    json!({"name": name, "description": "- a custom tool", "command": ["./run.sh"], "approval": "read_only"})
}

/// The config naming `dir`'s folders `tools_<set>` and `skills_<set>`, and the fixture
/// MCP server `fx` when `with_server`.
fn config(dir: &Path, set: &str, with_server: bool) -> Value {
    let mut cfg = json!({
        "custom_tools": {"paths": [dir.join(format!("tools_{set}"))]},
        "skills": {"paths": [dir.join(format!("skills_{set}"))], "discover": false},
    });
    if with_server {
        cfg["mcp_servers"] = json!({"fx": fixture(dir, "fx", json!({}))});
    }
    cfg
}

/// Every tools_changed that arrives within `quiet` of the last one, as (added, removed).
async fn changes(sub: &mut Subscription<ToolsChanged>, first_within: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    let mut wait = first_within;
    while let Ok(n) = tokio::time::timeout(wait, sub.next()).await {
        let n = n.expect("the subscription is open").unwrap();
        out.push(serde_json::to_value(n).unwrap());
        // Anything the same reload sent would follow at once; a server left to join later
        // would come within its start-up.
        wait = Duration::from_secs(3);
    }
    out
}

fn names(n: &Value, key: &str) -> Vec<String> {
    let mut v: Vec<String> = serde_json::from_value(n[key].clone()).unwrap();
    v.sort();
    v
}

#[tokio::test]
async fn a_reload_touching_servers_tool_folders_and_skill_folders_notifies_once() {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    for f in ["tools_a", "skills_a", "tools_b", "skills_b", "xdg"] {
        std::fs::create_dir_all(dir.join(f)).unwrap();
    }
    write_tool(&dir.join("tools_b"), "t", manifest("from_b"), "echo");
    write_skill(
        &dir.join("skills_b"),
        "skill-b",
        &front("skill-b", "A skill."),
        "Body.",
        &[],
    );
    write_atomic(&d.config_path(), &config(&dir, "a", false));
    d.spawn(&[("XDG_CONFIG_HOME", dir.join("xdg").to_str().unwrap())])
        .await;
    let mut sub = d.client().await.subscribe_tools_changed().await.unwrap();

    // On: a server added, the tool folder and the skill folder swapped.
    write_atomic(&d.config_path(), &config(&dir, "b", true));
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    let seen = changes(&mut sub, CLIENT_TIMEOUT).await;
    assert_eq!(seen.len(), 1, "one reload, one tools_changed: {seen:?}");
    let added = names(&seen[0], "added");
    for want in ["from_b", "load_skill", "mcp_fx_echo"] {
        assert!(added.iter().any(|n| n == want), "{want} in {added:?}");
    }
    assert!(names(&seen[0], "removed").is_empty(), "{seen:?}");
    let listed = d.call("list_skills", json!({})).await;
    assert_eq!(
        common::skills::skill_names(&listed["result"]),
        ["skill-b"],
        "{listed}"
    );

    // Off: the server removed, both folders back to empty ones.
    write_atomic(&d.config_path(), &config(&dir, "a", false));
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    let seen = changes(&mut sub, CLIENT_TIMEOUT).await;
    assert_eq!(seen.len(), 1, "one reload, one tools_changed: {seen:?}");
    let removed = names(&seen[0], "removed");
    for want in ["from_b", "load_skill", "mcp_fx_echo"] {
        assert!(removed.iter().any(|n| n == want), "{want} in {removed:?}");
    }
    assert!(names(&seen[0], "added").is_empty(), "{seen:?}");
}
