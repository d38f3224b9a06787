//! The MCP surface besides tools, over the socket with raw JSON-RPC: prompts, resources,
//! resource templates, completions, resource subscriptions and the list-changed
//! notifications, against server-everything (npm) and our fixture
//! (tests/fixtures/mcp_server.rs, `FIXTURE_RESOURCES`) where server-everything lacks a case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

fn everything() -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        dir.exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) to install server-everything"
    );
    json!({"command": "node", "args": [dir, "stdio"]})
}

/// Our fixture offering resources under `label`.
fn fixture(dir: &Path, label: &str) -> Value {
    json!({"command": FIXTURE, "env": {
        "FIXTURE_RESOURCES": label,
        "FIXTURE_EVENTS_FILE": dir.join(format!("{label}.events")),
    }})
}

async fn wait_ready(d: &Daemon, server: &str) {
    eventually(30, &format!("{server} to be ready"), || async {
        let s = d.call("mcp.status", json!({"server": server})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
}

/// The next notification of `method` on `conn` (other messages are skipped).
async fn next_notification(conn: &mut RawLines, method: &str) -> Value {
    loop {
        let m = conn.recv().await;
        if m["method"] == method {
            return m["params"]["result"].clone();
        }
    }
}

/// The next `prompts_changed` and `resources_changed` on `conn`, which come in either
/// order (two subscriptions, two streams).
async fn both_changed(conn: &mut RawLines) -> (Value, Value) {
    let (mut prompts, mut resources) = (None, None);
    while prompts.is_none() || resources.is_none() {
        let m = conn.recv().await;
        match m["method"].as_str() {
            Some("prompts_changed") => prompts = Some(m["params"]["result"].clone()),
            Some("resources_changed") => resources = Some(m["params"]["result"].clone()),
            _ => {}
        }
    }
    (prompts.unwrap(), resources.unwrap())
}

fn names<'a>(list: &'a Value, key: &str, field: &str) -> Vec<&'a str> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {list}"))
        .iter()
        .filter_map(|e| e[field].as_str())
        .collect()
}

#[tokio::test]
async fn server_everything_prompts_resources_and_completions_over_the_socket() {
    let d = Daemon::start_in(|_| json!({"mcp_servers": {"everything": everything()}})).await;
    wait_ready(&d, "everything").await;
    let mut c = d.raw_lines().await;

    let prompts = c.call("list_prompts", json!({})).await["result"].clone();
    let listed = names(&prompts, "prompts", "name");
    assert!(listed.contains(&"mcp_everything_args-prompt"), "{prompts}");
    let args = prompts["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mcp_everything_args-prompt")
        .unwrap();
    assert_eq!(args["server"], "everything");
    assert_eq!(
        args["arguments"][0],
        json!({"name": "city", "description": "Name of the city", "required": true})
    );

    // A missing argument is named; an unknown prompt is said to be one.
    let e = c
        .call("get_prompt", json!({"name": "mcp_everything_args-prompt"}))
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert_eq!(
        e["error"]["message"],
        "prompt 'mcp_everything_args-prompt' needs the argument 'city'"
    );
    let e = c
        .call("get_prompt", json!({"name": "mcp_nobody_nothing"}))
        .await;
    assert_eq!(
        e["error"]["message"], "unknown prompt: mcp_nobody_nothing",
        "{e}"
    );
    let r = c
        .call("get_prompt", json!({"name": "mcp_everything_args-prompt", "arguments": {"city": "Oslo", "state": "N"}}))
        .await;
    assert_eq!(
        r["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "What's weather in Oslo, N?"}}]),
        "{r}"
    );
    // An embedded resource inside a prompt message passes whole.
    let r = c
        .call(
            "get_prompt",
            json!({"name": "mcp_everything_resource-prompt",
                                    "arguments": {"resourceType": "Text", "resourceId": "4"}}),
        )
        .await;
    let embedded = &r["result"]["messages"][1]["content"];
    assert_eq!(embedded["type"], "resource", "{r}");
    assert_eq!(
        embedded["resource"]["uri"],
        "demo://resource/dynamic/text/4"
    );
    assert_eq!(embedded["resource"]["mimeType"], "text/plain");
    assert!(embedded["resource"]["text"]
        .as_str()
        .unwrap()
        .starts_with("Resource 4: This is a plaintext resource"));

    let resources = c.call("list_resources", json!({})).await["result"].clone();
    let uris = names(&resources, "resources", "uri");
    let doc = *uris
        .iter()
        .find(|u| u.starts_with("demo://resource/static/document/"))
        .unwrap_or_else(|| panic!("{resources}"));
    let templates = c.call("list_resource_templates", json!({})).await["result"].clone();
    let mut listed = names(&templates, "resourceTemplates", "uriTemplate");
    listed.sort();
    assert_eq!(
        listed,
        [
            "demo://resource/dynamic/blob/{resourceId}",
            "demo://resource/dynamic/text/{resourceId}"
        ]
    );

    let r = c.call("read_resource", json!({"uri": doc})).await;
    assert_eq!(r["result"]["contents"][0]["uri"], doc, "{r}");
    assert!(r["result"]["contents"][0]["text"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    // A URI that only a template matches goes to the template's server.
    let r = c
        .call(
            "read_resource",
            json!({"uri": "demo://resource/dynamic/blob/9"}),
        )
        .await;
    let blob = r["result"]["contents"][0]["blob"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        blob.starts_with("UmVzb3VyY2UgOTog"),
        "base64 of 'Resource 9: ': {blob}"
    );
    let e = c
        .call("read_resource", json!({"uri": "nothing://here"}))
        .await;
    assert_eq!(e["error"]["code"], -32002, "{e}");
    assert_eq!(e["error"]["message"], "resource not found: nothing://here");

    let r = c
        .call(
            "complete",
            json!({"ref": {"type": "ref/prompt", "name": "mcp_everything_completable-prompt"},
                                 "argument": {"name": "department", "value": "S"}}),
        )
        .await;
    assert_eq!(
        r["result"]["completion"]["values"],
        json!(["Sales", "Support"]),
        "{r}"
    );
    let r = c
        .call(
            "complete",
            json!({"ref": {"type": "ref/prompt", "name": "mcp_everything_completable-prompt"},
                                 "argument": {"name": "name", "value": ""},
                                 "context": {"arguments": {"department": "Support"}}}),
        )
        .await;
    assert_eq!(
        r["result"]["completion"]["values"],
        json!(["John", "Kim", "Lee"]),
        "{r}"
    );
    let r = c
        .call("complete", json!({"ref": {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
                                 "argument": {"name": "resourceId", "value": "12"}}))
        .await;
    assert_eq!(r["result"]["completion"]["values"], json!(["12"]), "{r}");

    // A resource the server adds (a session resource of gzip-file-as-resource) comes with
    // its resources/list_changed: the host lists again and says so once.
    let mut watch = d.raw_lines().await;
    let sub = watch.call("subscribe_resources_changed", json!({})).await;
    assert!(sub.get("result").is_some(), "{sub}");
    let before = uris.len();
    let gz = json!({"name": "mcp_everything_gzip-file-as-resource",
                    "arguments": {"name": "hi.gz", "data": "data:text/plain;base64,aGk=", "outputType": "resourceLink"}});
    let r = c.call("invoke", gz).await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let changed = next_notification(&mut watch, "resources_changed").await;
    assert_eq!(changed["resources"], before + 1, "{changed}");
    let resources = c.call("list_resources", json!({})).await["result"].clone();
    assert!(
        names(&resources, "resources", "uri")
            .iter()
            .any(|u| u.ends_with("hi.gz")),
        "{resources}"
    );

    // Subscribed, the server's update arrives as `resource_updated`.
    let uri = "demo://resource/dynamic/text/1";
    let sub = c.call("subscribe_resource", json!({"uri": uri})).await;
    assert!(
        sub["result"].is_string() || sub["result"].is_number(),
        "{sub}"
    );
    let tool = c
        .call(
            "invoke",
            json!({"name": "mcp_everything_toggle-subscriber-updates", "arguments": {}}),
        )
        .await;
    assert_eq!(tool["result"]["result"]["ok"], true, "{tool}");
    assert_eq!(
        next_notification(&mut c, "resource_updated").await,
        json!({"uri": uri})
    );
    let done = c.call("unsubscribe_resource", json!([sub["result"]])).await;
    assert_eq!(done["result"], true, "{done}");
}

#[tokio::test]
async fn a_uri_two_servers_list_is_the_first_ones_and_the_clash_is_reported() {
    let d = Daemon::start_in(
        |dir| json!({"mcp_servers": {"one": fixture(dir, "one"), "two": fixture(dir, "two")}}),
    )
    .await;
    wait_ready(&d, "one").await;
    wait_ready(&d, "two").await;
    let mut c = d.raw_lines().await;
    let resources = c.call("list_resources", json!({})).await["result"].clone();
    let shared: Vec<&Value> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["uri"] == "fixture://shared")
        .collect();
    assert_eq!(shared.len(), 1, "{resources}");
    assert_eq!(shared[0]["server"], "one");
    let r = c
        .call("read_resource", json!({"uri": "fixture://shared"}))
        .await;
    assert_eq!(r["result"]["contents"][0]["text"], "served by one", "{r}");
    // Each server's own URI is its own.
    let r = c
        .call("read_resource", json!({"uri": "fixture://two/bytes"}))
        .await;
    let content = &r["result"]["contents"][0];
    assert_eq!(
        content["blob"], ALL_BYTES_BASE64,
        "binary contents byte for byte: {r}"
    );
    assert_eq!(content["mimeType"], "application/octet-stream");
    assert!(content.get("text").is_none());

    // An image inside a prompt message passes whole.
    let r = c
        .call(
            "get_prompt",
            json!({"name": "mcp_two_greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        r["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "Hello, Ada!"}},
               {"role": "user", "content": {"type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"}}]),
        "{r}"
    );
    let e = c
        .call(
            "get_prompt",
            json!({"name": "mcp_two_greet", "arguments": {"name": "Ada", "nick": "A"}}),
        )
        .await;
    assert_eq!(
        e["error"]["message"], "prompt 'mcp_two_greet' has no argument 'nick'",
        "{e}"
    );

    let status = c.call("mcp.status", json!({})).await["result"]["servers"].clone();
    let two = status
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "two")
        .unwrap();
    assert_eq!(
        two["resource_clashes"],
        json!([{"uri": "fixture://shared", "kept": "one"}, {"uri": "fixture://big/{bytes}", "kept": "one"}]),
        "{status}"
    );
    let one = status
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "one")
        .unwrap();
    assert!(one.get("resource_clashes").is_none(), "{one}");
}

#[tokio::test]
async fn a_resource_over_the_output_cap_is_refused_whole() {
    let d = Daemon::start_in(|dir| {
        json!({"limits": {"max_output_bytes": 4096}, "mcp_servers": {"fx": fixture(dir, "fx")}})
    })
    .await;
    wait_ready(&d, "fx").await;
    let mut c = d.raw_lines().await;
    let r = c
        .call("read_resource", json!({"uri": "fixture://big/4000"}))
        .await;
    assert_eq!(
        r["result"]["contents"][0]["text"].as_str().map(str::len),
        Some(4000),
        "{r}"
    );
    let e = c
        .call("read_resource", json!({"uri": "fixture://big/5000"}))
        .await;
    assert_eq!(
        e["error"]["message"],
        "resource fixture://big/5000 is 5000 bytes, over the output cap of 4096 bytes (limits.max_output_bytes)",
        "{e}"
    );
    // 20 MB is over the 16 MB message limit of the stdio link: refused as it arrives, not held.
    let e = c
        .call("read_resource", json!({"uri": "fixture://big/20971520"}))
        .await;
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("fx")),
        "{e}"
    );
    // The server still serves.
    let r = c
        .call("read_resource", json!({"uri": "fixture://shared"}))
        .await;
    assert_eq!(r["result"]["contents"][0]["text"], "served by fx", "{r}");
}

#[tokio::test]
async fn a_reload_that_adds_or_removes_a_server_changes_the_lists_once() {
    let d = Daemon::start_in(|dir| json!({"mcp_servers": {"fx": fixture(dir, "fx")}})).await;
    wait_ready(&d, "fx").await;
    let mut c = d.raw_lines().await;
    let prompts_sub = c.call("subscribe_prompts_changed", json!({})).await;
    assert!(prompts_sub.get("result").is_some(), "{prompts_sub}");
    let resources_sub = c.call("subscribe_resources_changed", json!({})).await;
    assert!(resources_sub.get("result").is_some(), "{resources_sub}");

    let dir = d.dir.path().to_path_buf();
    let added = json!({"mcp_servers": {"fx": fixture(&dir, "fx"), "everything": everything()}});
    write_atomic(&d.config_path(), &added);
    // On another connection: `call` skips the notifications that come before its answer.
    let r = d.call("config.reload", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    let (prompts, resources) = both_changed(&mut c).await;
    // The servers' 5 prompts and the host's 5 built-in commands (proto-docs/commands.md).
    assert_eq!(prompts, json!({"prompts": 5 + 5}));
    assert_eq!(resources["templates"], 3, "{resources}");
    let prompts = d.call("list_prompts", json!({})).await["result"].clone();
    assert_eq!(
        prompts["prompts"].as_array().unwrap().len(),
        5 + 5,
        "{prompts}"
    );

    let removed = json!({"mcp_servers": {"fx": fixture(&dir, "fx")}});
    write_atomic(&d.config_path(), &removed);
    // On another connection: `call` skips the notifications that come before its answer.
    let r = d.call("config.reload", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    let (prompts, resources) = both_changed(&mut c).await;
    assert_eq!(prompts, json!({"prompts": 1 + 5}));
    assert_eq!(resources, json!({"resources": 2, "templates": 1}));
    let e = d
        .call(
            "get_prompt",
            json!({"name": "mcp_everything_simple-prompt"}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
}

/// The fixture's 1x1 red PNG, base64-encoded.
const RED_PIXEL_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

/// The 256 byte values 0..=255, base64-encoded (what `fixture://<label>/bytes` holds).
const ALL_BYTES_BASE64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==";

#[tokio::test]
async fn a_prompt_name_two_servers_share_is_the_first_ones_and_a_health_clash() {
    let unprefixed = |dir: &Path, label: &str| {
        let mut s = fixture(dir, label);
        s["prefix"] = json!(false);
        s
    };
    let d = Daemon::start_in(
        |dir| json!({"mcp_servers": {"one": unprefixed(dir, "one"), "two": unprefixed(dir, "two")}}),
    )
    .await;
    wait_ready(&d, "one").await;
    wait_ready(&d, "two").await;
    eventually(10, "both servers' prompts listed", || async {
        let h = d.call("host.health", json!({})).await["result"].clone();
        h["clashes"].to_string().contains("\"greet\"")
    })
    .await;
    let prompts = d.call("list_prompts", json!({})).await["result"].clone();
    let greet: Vec<&Value> = prompts["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "greet")
        .collect();
    assert_eq!(greet.len(), 1, "{prompts}");
    assert_eq!(greet[0]["server"], "one");
    let health = d.call("host.health", json!({})).await["result"].clone();
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health["clashes"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "greet", "kept": "mcp:one", "dropped": "mcp:two"})),
        "{health}"
    );
}
