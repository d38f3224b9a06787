//! Code mode off (the default, proto-docs/code-mode.md): `run_code` and `code_api` are not
//! registered at all, so no listing, search or session view has them; a reload that turns
//! code mode on for one profile adds them in one tools_changed (served to that profile
//! only), and one that turns it off everywhere removes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{json, Value};
use toolhost::client::Subscription;
use toolhost::protocol::ToolsChanged;

const CODE_TOOLS: [&str; 2] = ["run_code", "code_api"];

/// The tool names of a listing or search answer, in any format.
fn names(r: &Value) -> Vec<String> {
    let tools = r.get("tools").or_else(|| r.get("matches")).unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn has_code_tools(names: &[String]) -> bool {
    names.iter().any(|n| CODE_TOOLS.contains(&n.as_str()))
}

async fn listed(d: &Daemon, params: Value) -> Vec<String> {
    let r = d.call("list_tools", params).await;
    names(r.get("result").unwrap_or_else(|| panic!("list_tools: {r}")))
}

/// The next tools_changed's (added, removed), sorted.
async fn next_change(sub: &mut Subscription<ToolsChanged>) -> (Vec<String>, Vec<String>) {
    let n = tokio::time::timeout(CLIENT_TIMEOUT, sub.next())
        .await
        .expect("a tools_changed in time")
        .expect("the subscription is open")
        .unwrap();
    let n = serde_json::to_value(n).unwrap();
    let sorted = |k: &str| {
        let mut v: Vec<String> = serde_json::from_value(n[k].clone()).unwrap();
        v.sort();
        v
    };
    (sorted("added"), sorted("removed"))
}

async fn reload(d: &Daemon, config: &Value) {
    write_atomic(&d.config_path(), config);
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
}

#[tokio::test]
async fn code_tools_exist_only_while_some_view_serves_them() {
    let d = Daemon::start_in(|_| json!({})).await;
    let mut sub = d.client().await.subscribe_tools_changed().await.unwrap();

    // Off: nowhere, whatever the listing asks for.
    for params in [
        json!({}),
        json!({"format": "mcp"}),
        json!({"format": "openai", "include_hidden": true, "include_deferred": true}),
    ] {
        let l = listed(&d, params.clone()).await;
        assert!(l.iter().any(|n| n == "read_file"), "{params}: {l:?}");
        assert!(!has_code_tools(&l), "{params}: {l:?}");
    }
    let search = d
        .call(
            "tools.search",
            json!({"query": "run code program api", "limit": 50}),
        )
        .await;
    assert!(!has_code_tools(&names(&search["result"])), "{search}");
    let s = d.call("session.create", json!({"id": "s1"})).await;
    let view: Vec<String> = serde_json::from_value(s["result"]["tool_names"].clone()).unwrap();
    assert!(!view.is_empty() && !has_code_tools(&view), "{view:?}");
    let r = d.invoke("run_code", json!({"code": "return 1"})).await;
    assert_eq!(r["error_kind"], "unknown_tool", "{r}");

    // On for one profile: registered in one notification, served to that profile only.
    reload(&d, &json!({"profiles": {"coder": {"code_mode": true}}})).await;
    assert_eq!(
        next_change(&mut sub).await,
        (vec!["code_api".to_owned(), "run_code".to_owned()], vec![])
    );
    assert!(!has_code_tools(&listed(&d, json!({})).await));
    assert!(!has_code_tools(&listed(&d, json!({"format": "mcp"})).await));
    let coder = listed(&d, json!({"profile": "coder"})).await;
    assert!(
        CODE_TOOLS.iter().all(|c| coder.iter().any(|n| n == c)),
        "{coder:?}"
    );

    // On for everyone: nothing to register again, the whole listing has them.
    reload(&d, &json!({"code_mode": {"enabled": true}})).await;
    let all = listed(&d, json!({})).await;
    assert!(
        CODE_TOOLS.iter().all(|c| all.iter().any(|n| n == c)),
        "{all:?}"
    );

    // Off everywhere again: removed in one notification.
    reload(&d, &json!({})).await;
    assert_eq!(
        next_change(&mut sub).await,
        (vec![], vec!["code_api".to_owned(), "run_code".to_owned()])
    );
    let l = listed(
        &d,
        json!({"include_hidden": true, "include_deferred": true}),
    )
    .await;
    assert!(!has_code_tools(&l), "{l:?}");
}
