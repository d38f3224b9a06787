//! Sessions persisted in sled, with stable tool views (issue 5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashSet;

use common::*;
use serde_json::{json, Value};
use toolhost::protocol::{SessionCreateParams, SessionUpdateParams};

fn fixture_server(prefix: &str) -> Value {
    json!({"command": FIXTURE, "env": {"FIXTURE_TOOL_PREFIX": prefix}, "include_tools": [format!("{prefix}echo")]})
}

async fn create(d: &Daemon, params: Value) -> Value {
    let r = d.call("session.create", params).await;
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("session.create failed: {r}"))
}

#[tokio::test]
async fn session_methods_and_errors() {
    let d = Daemon::start().await;
    let s = create(
        &d,
        json!({"id": "s1", "meta": {"model": "m1", "provider": "p"}}),
    )
    .await;
    assert_eq!(s["id"], "s1");
    assert_eq!(s["approval"], "auto");
    assert_eq!(
        s["workspace"],
        d.workspace().canonicalize().unwrap().display().to_string()
    );
    assert_eq!(
        common::own_meta(&s),
        json!({"model": "m1", "provider": "p"})
    );
    assert_eq!(s["tool_names"].as_array().unwrap().len(), 6);
    assert!(s["created_at"].as_u64().unwrap() > 0);
    let tools_etag = d.call("list_tools", json!({})).await["result"]["etag"].clone();
    assert_eq!(s["tools_etag"], tools_etag);

    assert_eq!(
        d.call("session.get", json!({"id": "s1"})).await["result"],
        s
    );
    let dup = d.call("session.create", json!({"id": "s1"})).await;
    assert_eq!(dup["error"]["code"], -32602);

    let u = d.call("session.update", json!({"id": "s1", "meta": {"model": "m2", "provider": null, "temp": 0.5}, "approval": "strict"})).await["result"].clone();
    assert_eq!(common::own_meta(&u), json!({"model": "m2", "temp": 0.5}));
    assert_eq!(u["approval"], "strict");
    assert!(u["updated_at"].as_u64() >= s["updated_at"].as_u64());

    for (method, params) in [
        ("session.get", json!({"id": "nope"})),
        ("session.update", json!({"id": "nope", "meta": {}})),
        ("session.tools", json!({"id": "nope"})),
        ("session.resume", json!({"id": "nope"})),
        ("session.refresh_tools", json!({"id": "nope"})),
        ("list_tools", json!({"session_id": "nope"})),
        ("invoke", json!({"name": "read_file", "session_id": "nope"})),
    ] {
        let r = d.call(method, params).await;
        assert_eq!(r["error"]["code"], -32001, "{method}: {r}");
        assert_eq!(r["error"]["message"], "session not found: nope", "{method}");
    }
    assert_eq!(
        d.call("session.delete", json!({"id": "s1"})).await["result"],
        json!({"deleted": true})
    );
    assert_eq!(
        d.call("session.delete", json!({"id": "s1"})).await["result"],
        json!({"deleted": false})
    );
    assert_eq!(
        d.call("session.get", json!({"id": "s1"})).await["error"]["code"],
        -32001
    );
    assert_eq!(
        d.call("session.create", json!({"workspace": "../../.."}))
            .await["result"]["workspace"],
        "/"
    );
    assert_eq!(
        d.call("session.create", json!({"workspace": "no/such/dir"}))
            .await["error"]["code"],
        -32602
    );
}

#[tokio::test]
async fn invoke_with_a_session_uses_its_workspace_approval_and_live_meta() {
    let d = Daemon::start_with(Some(json!({"approval": {"wait_s": 0}}))).await;
    std::fs::create_dir_all(d.workspace().join("sub")).unwrap();
    let s = create(
        &d,
        json!({"workspace": "sub", "approval": "strict", "meta": {"model": "first"}}),
    )
    .await;
    let id = s["id"].clone();
    let call = |args: Value, approved: bool| {
        d.call(
            "invoke",
            json!({"name": "bash", "arguments": args, "session_id": id, "approved": approved}),
        )
    };
    let r = call(json!({"command": "pwd"}), false).await["result"]["result"].clone();
    assert_eq!(r["error_kind"], "approval_required", "{r}");
    assert!(r["approval"].as_str().unwrap().contains("pwd"), "{r}");
    let r = call(
        json!({"command": "pwd; echo \"$TOOLHOST_SESSION_META\""}),
        true,
    )
    .await["result"]["result"]
        .clone();
    let out = r["stdout"].as_str().unwrap();
    assert!(
        out.starts_with(
            &d.workspace()
                .join("sub")
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        ),
        "{r}"
    );
    assert!(out.contains(r#""model":"first""#), "{r}");
    // A frontend switches model: the next call sees it.
    d.call(
        "session.update",
        json!({"id": id, "meta": {"model": "second"}}),
    )
    .await;
    let r = call(json!({"command": "echo \"$TOOLHOST_SESSION_META\""}), true).await["result"]
        ["result"]
        .clone();
    assert!(
        r["stdout"]
            .as_str()
            .unwrap()
            .contains(r#""model":"second""#),
        "{r}"
    );
    // read_only sessions refuse write tools.
    d.call("session.update", json!({"id": id, "approval": "read_only"}))
        .await;
    let r = d.call("invoke", json!({"name": "write_file", "arguments": {"path": "x", "content": ""}, "session_id": id, "approved": true})).await;
    assert_eq!(r["result"]["result"]["error_kind"], "denied");
}

#[tokio::test]
async fn stable_view_resume_and_refresh_across_a_config_change() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {"a": fixture_server("")}}))).await;
    eventually(20, "server a tools", || async {
        d.call("list_tools", json!({})).await["result"]["meta"]
            .get("mcp_a_echo")
            .is_some()
    })
    .await;
    let s = create(&d, json!({"id": "v"})).await;
    let names: Vec<String> = serde_json::from_value(s["tool_names"].clone()).unwrap();
    assert!(names.contains(&"mcp_a_echo".to_owned()));
    let view = d.call("session.tools", json!({"id": "v"})).await["result"].clone();
    assert_eq!(view["unchanged"], false);
    assert_eq!(view["tools"].as_array().unwrap().len(), 7);
    let etag = view["etag"].clone();
    let same = d
        .call("session.tools", json!({"id": "v", "if_etag": etag}))
        .await["result"]
        .clone();
    assert_eq!(same, json!({"etag": etag, "unchanged": true}));

    // Swap server a for server b.
    write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {"b": fixture_server("")}}),
    );
    let r = d.call("config.reload", json!({})).await["result"].clone();
    assert_eq!(r["applied"], true, "{r}");
    let live = d.call("list_tools", json!({})).await["result"].clone();
    assert!(live["meta"].get("mcp_b_echo").is_some() && live["meta"].get("mcp_a_echo").is_none());

    // The stable view does not grow; the vanished tool drops out of it.
    let view = d.call("session.tools", json!({"id": "v"})).await["result"].clone();
    let vnames: Vec<&str> = view["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(vnames.len(), 6);
    assert!(!vnames.contains(&"mcp_b_echo"));
    let listed = d.call("list_tools", json!({"session_id": "v"})).await["result"].clone();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 6);

    // Resume: new tools are not hidden; missing ones are listed.
    let r = d.call("session.resume", json!({"id": "v"})).await["result"].clone();
    assert_eq!(r["added"], json!(["mcp_b_echo"]));
    assert_eq!(r["missing"], json!(["mcp_a_echo"]));
    assert!(r["session"]["tool_names"]
        .as_array()
        .unwrap()
        .contains(&json!("mcp_b_echo")));
    assert_eq!(r["tools"].as_array().unwrap().len(), 7);
    let persisted = d.call("session.get", json!({"id": "v"})).await["result"].clone();
    assert_eq!(persisted["tool_names"], r["session"]["tool_names"]);

    // Refresh moves the view to exactly the live list.
    let r = d.call("session.refresh_tools", json!({"id": "v"})).await["result"].clone();
    assert_eq!(r["added"], json!([]));
    assert_eq!(r["removed"], json!(["mcp_a_echo"]));
    assert_eq!(r["etag"], live["etag"]);
    let view = d
        .call("session.tools", json!({"id": "v", "if_etag": live["etag"]}))
        .await["result"]
        .clone();
    assert_eq!(view["unchanged"], true);
}

#[tokio::test]
async fn sessions_survive_restart_and_kill_9() {
    let mut d = Daemon::start().await;
    for round in 0..5 {
        let id = format!("k{round}");
        create(&d, json!({"id": id, "meta": {"round": round}})).await;
        let u = d
            .call("session.update", json!({"id": id, "meta": {"after": true}}))
            .await;
        assert!(u.get("result").is_some(), "{u}");
        d.kill9().await;
        d.spawn(&[]).await;
        for r in 0..=round {
            let s = d.call("session.get", json!({"id": format!("k{r}")})).await;
            assert_eq!(
                common::own_meta(&s["result"]),
                json!({"round": r, "after": true}),
                "round {round}: k{r} lost: {s}"
            );
        }
    }
    assert!(d.stop().await.success());
    d.spawn(&[]).await;
    let list = d.call("session.list", json!({"limit": 100})).await["result"].clone();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn concurrent_updates_from_16_clients_lose_nothing() {
    let d = Daemon::start().await;
    create(&d, json!({"id": "shared"})).await;
    let mut tasks = Vec::new();
    for c in 0..16 {
        let sock = d.socket();
        tasks.push(tokio::spawn(async move {
            let client = Client::connect(&sock).await.unwrap();
            for i in 0..10 {
                let mut meta = serde_json::Map::new();
                meta.insert(format!("c{c}_{i}"), json!(i));
                meta.insert("last".into(), json!(c));
                let params = SessionUpdateParams {
                    id: "shared".into(),
                    meta: Some(meta),
                    ..Default::default()
                };
                client.session_update(&params).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let meta = common::own_meta(&d.call("session.get", json!({"id": "shared"})).await["result"]);
    assert_eq!(meta.as_object().unwrap().len(), 161, "lost keys: {meta}");
}

#[tokio::test]
async fn list_pages_across_1000_sessions_newest_first() {
    let d = Daemon::start().await;
    let mut tasks = Vec::new();
    for c in 0..8 {
        let sock = d.socket();
        tasks.push(tokio::spawn(async move {
            let client = Client::connect(&sock).await.unwrap();
            for i in 0..125 {
                let params = SessionCreateParams {
                    id: Some(format!("p{c}-{i}")),
                    ..Default::default()
                };
                let s = client.session_create(&params).await.unwrap();
                assert_eq!(s.id, format!("p{c}-{i}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut seen = HashSet::new();
    let mut after: Option<String> = None;
    let mut last_created = u64::MAX;
    let mut pages = 0;
    loop {
        let mut params = json!({"limit": 100});
        if let Some(a) = &after {
            params["after"] = json!(a);
        }
        let page = d.call("session.list", params).await["result"].clone();
        pages += 1;
        for s in page["sessions"].as_array().unwrap() {
            let created = s["created_at"].as_u64().unwrap();
            assert!(created <= last_created, "not newest first");
            last_created = created;
            assert!(
                seen.insert(s["id"].as_str().unwrap().to_owned()),
                "duplicate {}",
                s["id"]
            );
        }
        // A session created between pages appears before the cursor, never in later pages.
        if pages == 3 {
            create(&d, json!({"id": "late"})).await;
        }
        match page.get("next").and_then(Value::as_str) {
            Some(n) => after = Some(n.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 1000);
    assert!(!seen.contains("late"));
    assert_eq!(pages, 10);
}

#[tokio::test]
async fn cli_session_commands() {
    let d = Daemon::start().await;
    let cli = |args: &[&str]| {
        let mut c = toolhost(d.dir.path());
        c.arg("--socket").arg(d.socket()).args(args);
        c.output()
    };
    let out = cli(&["session", "create", "--meta", r#"{"model":"x"}"#, "--json"])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = s["id"].as_str().unwrap();
    let out = cli(&["session", "list"]).await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(id));
    let out = cli(&["session", "show", id, "--json"]).await.unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["meta"]["model"], "x");
    assert!(cli(&["session", "delete", id])
        .await
        .unwrap()
        .status
        .success());
    let out = cli(&["session", "show", id]).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("session not found"));
}

#[tokio::test]
async fn session_meta_is_bounded_and_an_oversized_update_changes_nothing() {
    let d = Daemon::start().await;
    let big = "x".repeat(40 * 1024);
    let r = d
        .call("session.create", json!({"meta": {"a": big, "b": big}}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    create(&d, json!({"id": "m", "meta": {"a": big}})).await;
    // Each update is small enough; the merged meta would not be.
    let r = d
        .call(
            "session.update",
            json!({"id": "m", "meta": {"b": big}, "approval": "strict"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing was changed"));
    let s = d.call("session.get", json!({"id": "m"})).await["result"].clone();
    assert_eq!(common::own_meta(&s).as_object().unwrap().len(), 1);
    assert_eq!(s["approval"], "auto");
    // Replacing the big key stays within the limit.
    let r = d
        .call(
            "session.update",
            json!({"id": "m", "meta": {"a": null, "b": big}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
}
