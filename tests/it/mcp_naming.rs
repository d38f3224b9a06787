//! Public names of MCP tools (issue 25): `"prefix": false`, the doubled server name, name
//! clashes in config order with both owners in `host.health`, and pins keyed by the name.
//! Against the real fixture server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

/// A stdio block running the fixture with `env` and the block's other keys from `extra`.
fn fixture(dir: &Path, extra: Value) -> Value {
    let mut block =
        json!({"command": FIXTURE, "env": {"FIXTURE_PID_FILE": dir.join("fixture.pids")}});
    for (k, v) in extra.as_object().unwrap() {
        if k == "env" {
            for (name, value) in v.as_object().unwrap() {
                block["env"][name] = value.clone();
            }
        } else {
            block[k] = v.clone();
        }
    }
    block
}

async fn wait_ready(d: &Daemon, servers: &[&str]) {
    for server in servers {
        eventually(20, &format!("server {server} ready"), || async {
            let r = d.call("mcp.status", json!({"server": server})).await;
            r["result"]["servers"][0]["state"] == "ready"
        })
        .await;
    }
}

async fn list(d: &Daemon) -> Value {
    d.call("list_tools", json!({})).await["result"].clone()
}

#[tokio::test]
async fn an_unprefixed_server_lists_and_serves_its_tools_under_their_own_names() {
    let d = Daemon::start_in(
        |dir| json!({"mcp_servers": {"plain": fixture(dir, json!({"prefix": false}))}}),
    )
    .await;
    wait_ready(&d, &["plain"]).await;
    let r = list(&d).await;
    let names = tool_names(&r);
    assert!(
        names.contains(&"echo") && names.contains(&"add"),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp_plain")),
        "{names:?}"
    );
    assert_eq!(r["meta"]["echo"]["server"], "plain");
    let out = d.invoke("echo", json!({"text": "own name"})).await;
    assert_eq!(out["output"], "own name", "{out}");
    // The 64-character rule holds for own names too.
    assert!(names.iter().all(|n| n.len() <= 64), "{names:?}");
}

#[tokio::test]
async fn a_tool_named_after_its_server_does_not_repeat_the_name() {
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {"git": fixture(dir, json!({"env": {"FIXTURE_TOOL_PREFIX": "git_"}}))}})
    })
    .await;
    wait_ready(&d, &["git"]).await;
    let names: Vec<String> = tool_names(&list(&d).await)
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(names.contains(&"mcp_git_echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("mcp_git_git")),
        "{names:?}"
    );
    // The call reaches the server's own name, git_echo.
    let out = d.invoke("mcp_git_echo", json!({"text": "once"})).await;
    assert_eq!(out["output"], "once", "{out}");
}

#[tokio::test]
async fn clashes_go_to_the_first_source_in_config_order_and_name_both_owners() {
    // "zeta" comes first in the file, so it keeps `echo` although "alpha" sorts first.
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {
            "zeta": fixture(dir, json!({"prefix": false, "include_tools": ["echo", "add_tool", "bash"]})),
            "alpha": fixture(dir, json!({"prefix": false, "include_tools": ["echo", "add"]})),
        }})
    })
    .await;
    wait_ready(&d, &["zeta", "alpha"]).await;
    let r = list(&d).await;
    assert_eq!(r["meta"]["echo"]["server"], "zeta");
    assert_eq!(r["meta"]["add"]["server"], "alpha");
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(h["status"], "degraded");
    assert_eq!(
        h["clashes"],
        json!([{"name": "echo", "kept": "mcp:zeta", "dropped": "mcp:alpha"}])
    );
    let st = d.call("mcp.status", json!({"server": "alpha"})).await["result"]["servers"][0].clone();
    assert_eq!(st["collisions"], json!(["echo"]));

    // A built-in keeps its name against any server.
    let added = d.invoke("add_tool", json!({"name": "bash"})).await;
    assert!(added["ok"] == true, "{added}");
    eventually(10, "the bash clash to be reported", || async {
        let h = d.call("host.health", json!({})).await["result"].clone();
        h["clashes"].as_array().is_some_and(|c| {
            c.contains(&json!({"name": "bash", "kept": "builtin", "dropped": "mcp:zeta"}))
        })
    })
    .await;
    assert_eq!(list(&d).await["meta"]["bash"]["source"], "builtin");
}

#[tokio::test]
async fn prefix_follows_a_reload_without_reconnecting_and_pins_follow_the_name() {
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {"fx": fixture(dir, json!({"include_tools": ["echo"], "trust": "quarantine_new"}))}})
    })
    .await;
    wait_ready(&d, &["fx"]).await;
    // A new tool waits for approval under its public name.
    let h = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(h["quarantined"], json!(["mcp_fx_echo"]), "{h}");
    let pids = std::fs::read_to_string(d.dir.path().join("fixture.pids")).unwrap();

    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    cfg["mcp_servers"]["fx"]["prefix"] = json!(false);
    write_atomic(&d.config_path(), &cfg);
    eventually(10, "echo to be quarantined under its own name", || async {
        let h = d.call("host.health", json!({})).await["result"].clone();
        h["quarantined"] == json!(["echo"])
    })
    .await;
    let hidden = d.invoke("echo", json!({"text": "x"})).await;
    assert_eq!(hidden["ok"], false, "{hidden}");
    let approved = d.call("tools.approve", json!({"name": "echo"})).await;
    assert!(approved["result"].is_object(), "{approved}");
    let out = d.invoke("echo", json!({"text": "approved"})).await;
    assert_eq!(out["output"], "approved", "{out}");
    // Renaming needed no new connection.
    assert_eq!(
        std::fs::read_to_string(d.dir.path().join("fixture.pids")).unwrap(),
        pids
    );
}
