//! The MCP facade's two eras on one endpoint: 2026-07-28 clients (`server/discover`,
//! per-request `_meta`, no `initialize`, no sessions) beside `initialize`-era ones, as raw
//! JSON over stdio (`toolhost mcp`) and HTTP over the Unix socket (`/mcp`), and the Python
//! MCP SDK pinned to the new era.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::new_era::{self, RawStdio};
use common::{alive, eventually, http_request_with, write_atomic, Daemon, BIN};
use serde_json::{json, Value};

/// The `_meta` every new-era request carries.
fn meta(caps: Value) -> Value {
    new_era::meta("era-test", caps)
}

/// `params` with the new-era `_meta` merged in.
fn with_meta(mut params: Value) -> Value {
    let mut m = meta(json!({}));
    if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
        for (k, v) in extra {
            m[k] = v.clone();
        }
    }
    params["_meta"] = m;
    params
}

fn write_tool(root: &Path, name: &str, script: &str) {
    let manifest = json!({"name": name, "description": format!("the {name} tool"),
                          "command": ["./run.sh"], "approval": "read_only"});
    common::write_tool(root, name, manifest, script);
}

fn tools_dir(d: &Daemon) -> PathBuf {
    d.dir.path().join("tools")
}

/// A daemon with custom tools `zeta` (progress, then "done"), `slow` (records its pid,
/// sleeps) and `alpha` (says "A").
async fn start() -> Daemon {
    let mut d = Daemon::unstarted();
    let tools = d.dir.path().join("tools");
    write_tool(
        &tools,
        "zeta",
        r#"echo '{"update": {"content": [{"type": "text", "text": "half"}], "progress": {"progress": 1, "total": 2}}}'
echo '{"result": {"content": [{"type": "text", "text": "done"}]}}'"#,
    );
    write_tool(
        &tools,
        "slow",
        &format!(
            "echo $$ > {}/slow.pid\nexec sleep 30",
            d.dir.path().display()
        ),
    );
    write_tool(
        &tools,
        "alpha",
        r#"echo '{"result": {"content": [{"type": "text", "text": "A"}]}}'"#,
    );
    let cfg = json!({"custom_tools": {"paths": [tools]}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    d
}

fn tool_names(list: &Value) -> Vec<&str> {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// The tool names the socket's `list_tools` gives, in its order.
async fn socket_order(d: &Daemon) -> Vec<String> {
    let list = d.call("list_tools", json!({"format": "mcp"})).await;
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn stdio_new_era_discovers_lists_and_calls_without_initialize() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    let (discover, _) = mcp
        .request(1, "server/discover", json!({"_meta": meta(json!({}))}))
        .await;
    let r = &discover["result"];
    let versions = r["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!(new_era::NEW)), "{discover}");
    assert!(versions.contains(&json!("2025-11-25")), "{discover}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "toolhost"
    );
    assert!(r["instructions"].as_str().unwrap().contains("toolhost"));
    assert_eq!(r["capabilities"]["tools"]["listChanged"], true);

    let (list, _) = mcp.request(2, "tools/list", with_meta(json!({}))).await;
    let r = &list["result"];
    assert_eq!(r["resultType"], "complete", "{list}");
    assert_eq!(r["ttlMs"], 5000);
    // stdio serves its own host session.
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "toolhost"
    );
    let names = tool_names(&list);
    assert!(names.contains(&"alpha") && names.contains(&"zeta"));
    assert_eq!(names, socket_order(&d).await);

    // Progress goes on the call's own stream; no log message without a logLevel.
    let call = with_meta(json!({"name": "zeta", "arguments": {},
                                "_meta": {"progressToken": "p1"}}));
    let (result, before) = mcp.request(3, "tools/call", call).await;
    assert_eq!(result["result"]["content"][0]["text"], "done", "{result}");
    assert_eq!(result["result"]["resultType"], "complete");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "toolhost"
    );
    let progress: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 1, "{before:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "p1");
    assert_eq!(progress[0]["params"]["total"], 2.0);
    assert!(!before
        .iter()
        .any(|m| m["method"] == "notifications/message"));

    // Removed methods, a version the facade does not know, missing _meta fields; each
    // answer echoes its request's id.
    for (id, method) in [
        (10, "ping"),
        (11, "logging/setLevel"),
        (12, "resources/subscribe"),
    ] {
        let params = with_meta(json!({"level": "info", "uri": "test://x"}));
        let (err, _) = mcp.request(id, method, params).await;
        assert_eq!(err["error"]["code"], -32601, "{method}: {err}");
        assert_eq!(err["id"], id);
    }
    let mut old = with_meta(json!({}));
    old["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (err, _) = mcp.request(20, "tools/list", old).await;
    assert_eq!(err["error"]["code"], -32022, "{err}");
    assert_eq!(err["error"]["data"]["requested"], "2099-01-01");
    assert!(err["error"]["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&json!(new_era::NEW)));
    let (err, _) = mcp
        .request(
            21,
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": new_era::NEW}}),
        )
        .await;
    assert_eq!(err["error"]["code"], -32602, "{err}");
    assert_eq!(err["id"], 21);

    // A resource nobody serves: -32602 in this era (-32002 in the old one).
    let (err, _) = mcp
        .request(
            22,
            "resources/read",
            with_meta(json!({"uri": "test://nothing"})),
        )
        .await;
    assert_eq!(err["error"]["code"], -32602, "{err}");
    assert_eq!(err["error"]["data"]["uri"], "test://nothing");

    // The process made one host session, named after the client.
    let sessions = d.call("session.list", json!({})).await;
    let named: Vec<&Value> = sessions["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["meta"]["mcp_client"]["name"] == "era-test")
        .collect();
    assert_eq!(named.len(), 1, "{sessions}");
    assert_eq!(
        named[0]["meta"]["mcp_client"]["protocol_version"],
        new_era::NEW
    );
}

/// `notifications/cancelled` ends a new-era call and kills its process group.
#[tokio::test]
async fn stdio_new_era_cancels_a_call() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    let call = with_meta(json!({"name": "slow", "arguments": {}}));
    mcp.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call}))
        .await;
    let pid_file = d.dir.path().join("slow.pid");
    let mut pid = 0;
    eventually(10, "the slow tool started", || {
        pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        async move { pid > 0 }
    })
    .await;
    assert!(alive(pid));
    mcp.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 5, "reason": "user"}}),
    )
    .await;
    eventually(10, "the cancelled call's process to die", || async move {
        !alive(pid)
    })
    .await;
}

/// Claude Code probes with `server/discover`, then initializes anyway: the connection is
/// then of the old era, with results shaped as before.
#[tokio::test]
async fn stdio_tolerates_initialize_after_discover() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    let (discover, _) = mcp
        .request(1, "server/discover", json!({"_meta": meta(json!({}))}))
        .await;
    assert!(
        discover["result"]["supportedVersions"].is_array(),
        "{discover}"
    );
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "claude-code", "version": "2"}});
    let (init, _) = mcp.request(2, "initialize", init).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let (list, _) = mcp.request(3, "tools/list", json!({})).await;
    let r = &list["result"];
    assert!(r.get("resultType").is_none(), "{list}");
    assert!(r.get("ttlMs").is_none() && r.get("cacheScope").is_none());
    assert!(r.get("_meta").is_none());
    assert_eq!(tool_names(&list), socket_order(&d).await);
    let (ping, _) = mcp.request(4, "ping", json!({})).await;
    assert!(ping["result"].is_object(), "{ping}");
}

/// One POST to `/mcp` over the Unix socket: (status, the JSON-RPC answer, the head's
/// `Mcp-Session-Id` if any).
pub(crate) async fn post(d: &Daemon, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let mut all = vec![("Accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    let (status, text) =
        http_request_with(&d.socket(), "POST", "/mcp", &body.to_string(), &all).await;
    // JSON, or SSE whose last data line is the answer.
    let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    (status, answer)
}

/// The headers a new-era client sends with `method` (and `name`).
pub(crate) fn new_era_headers<'a>(
    method: &'a str,
    name: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("MCP-Protocol-Version", new_era::NEW),
        ("Mcp-Method", method),
    ];
    if let Some(n) = name {
        h.push(("Mcp-Name", n));
    }
    h
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[tokio::test]
async fn http_new_era_refuses_bad_input_with_the_specs_codes() {
    let d = start().await;
    // No _meta at all on a sessionless POST.
    let (status, r) = post(
        &d,
        &new_era_headers("server/discover", None),
        request(101, "server/discover", json!({})),
    )
    .await;
    assert_eq!(
        (status, r["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r}"
    );
    assert_eq!(r["id"], 101);
    // A version the facade does not know.
    let mut m = meta(json!({}));
    m["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (status, r) = post(
        &d,
        &[
            ("MCP-Protocol-Version", "2099-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        request(102, "tools/list", json!({"_meta": m})),
    )
    .await;
    assert_eq!(
        (status, r["error"]["code"].clone()),
        (400, json!(-32022)),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(r["id"], 102);
    // Headers that disagree with the body: the method, the tool's name, the version.
    let call = request(
        103,
        "tools/call",
        with_meta(json!({"name": "alpha", "arguments": {}})),
    );
    for headers in [
        new_era_headers("tools/list", None),
        new_era_headers("tools/call", Some("zeta")),
        vec![
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "alpha"),
        ],
    ] {
        let (status, r) = post(&d, &headers, call.clone()).await;
        assert_eq!(
            (status, r["error"]["code"].clone()),
            (400, json!(-32020)),
            "{headers:?}: {r}"
        );
        assert_eq!(r["id"], 103);
    }
    // Removed methods and an unknown one.
    for (id, method) in [
        (201, "initialize"),
        (202, "ping"),
        (203, "logging/setLevel"),
        (204, "resources/subscribe"),
        (205, "resources/unsubscribe"),
        (206, "unknown/method"),
    ] {
        let params = with_meta(json!({"level": "info", "uri": "test://x"}));
        let name = method.starts_with("resources/").then_some("test://x");
        let (status, r) = post(
            &d,
            &new_era_headers(method, name),
            request(id, method, params),
        )
        .await;
        assert_eq!(
            (status, r["error"]["code"].clone()),
            (404, json!(-32601)),
            "{method}: {r}"
        );
        assert_eq!(r["id"], id, "{method}");
    }
    // A foreign browser page.
    let (status, _) = post(
        &d,
        &[
            ("Origin", "http://evil.example.com"),
            ("MCP-Protocol-Version", new_era::NEW),
            ("Mcp-Method", "server/discover"),
        ],
        request(301, "server/discover", json!({"_meta": meta(json!({}))})),
    )
    .await;
    assert_eq!(status, 403);
}

/// Both eras on the same `/mcp` at once: an `initialize`-era session keeps its session id
/// and old shapes, while sessionless new-era requests list the same tools, identical on
/// every connection, with caching hints, and call them.
#[tokio::test]
async fn http_serves_both_eras_side_by_side() {
    let d = start().await;
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "old", "version": "1"}});
    let (status, text) = http_request_with(
        &d.socket(),
        "POST",
        "/mcp",
        &request(1, "initialize", init).to_string(),
        &[("Accept", "application/json, text/event-stream")],
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("\"protocolVersion\":\"2025-11-25\""),
        "{text}"
    );

    let list = request(2, "tools/list", with_meta(json!({})));
    let (status, first) = post(&d, &new_era_headers("tools/list", None), list.clone()).await;
    assert_eq!(status, 200, "{first}");
    let (_, second) = post(&d, &new_era_headers("tools/list", None), list).await;
    assert_eq!(first, second);
    let r = &first["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["ttlMs"], 5000);
    // No session or profile shapes a sessionless list.
    assert_eq!(r["cacheScope"], "public");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "toolhost"
    );
    let names = tool_names(&first);
    assert!(names.contains(&"alpha"), "{names:?}");

    let call = request(
        3,
        "tools/call",
        with_meta(json!({"name": "alpha", "arguments": {}})),
    );
    let (status, r) = post(&d, &new_era_headers("tools/call", Some("alpha")), call).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "A", "{r}");
    assert_eq!(r["result"]["resultType"], "complete");

    // The shared host session of this client, deleted from outside, is made anew.
    let sessions = d.call("session.list", json!({})).await;
    let shared: Vec<&str> = sessions["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["meta"]["mcp_client"]["name"] == "era-test")
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(shared.len(), 1, "{sessions}");
    let deleted = d.call("session.delete", json!({"id": shared[0]})).await;
    assert!(deleted.get("result").is_some(), "{deleted}");
    let call = request(
        5,
        "tools/call",
        with_meta(json!({"name": "alpha", "arguments": {}})),
    );
    let (_, r) = post(&d, &new_era_headers("tools/call", Some("alpha")), call).await;
    assert_eq!(r["result"]["content"][0]["text"], "A", "{r}");

    // Progress goes on the call's own response stream.
    let call = with_meta(json!({"name": "zeta", "arguments": {}, "_meta": {"progressToken": 9}}));
    let mut headers = vec![("Accept", "application/json, text/event-stream")];
    headers.extend(new_era_headers("tools/call", Some("zeta")));
    let (_, text) = http_request_with(
        &d.socket(),
        "POST",
        "/mcp",
        &request(4, "tools/call", call).to_string(),
        &headers,
    )
    .await;
    let progress = text
        .find("notifications/progress")
        .expect("progress on the stream");
    assert!(progress < text.find("\"done\"").unwrap(), "{text}");

    // The socket lists in the same order.
    assert_eq!(names, socket_order(&d).await);
}

/// `subscriptions/listen`: the acknowledgement first, then only the kinds asked for, each
/// tagged with the subscription's id — here a custom tool added while listening.
#[tokio::test]
async fn listen_hears_a_new_tool_and_only_what_it_asked_for() {
    let d = start().await;
    let mut mcp = RawStdio::open(&d).await;
    let listen = with_meta(json!({"notifications": {"toolsListChanged": true}}));
    let ack = mcp.listen(7, listen).await;
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );

    write_tool(
        &tools_dir(&d),
        "middle",
        r#"echo '{"result": {"content": []}}'"#,
    );
    let changed = mcp.next().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );

    // The new tool is listed, in its place; nothing else came on the subscription.
    let (list, before) = mcp.request(8, "tools/list", with_meta(json!({}))).await;
    assert!(before.is_empty(), "{before:?}");
    let names = tool_names(&list);
    assert!(names.contains(&"middle"), "{names:?}");
    assert_eq!(names, socket_order(&d).await);
}

/// `subscriptions/listen` over sessionless HTTP: the acknowledgement, then a tool added by
/// a config reload, on the listen request's own stream.
#[tokio::test]
async fn http_listen_hears_a_reload() {
    let d = start().await;
    let body = request(
        40,
        "subscriptions/listen",
        with_meta(json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}})),
    )
    .to_string();
    let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let mut headers = vec![
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
    ];
    headers.extend(new_era_headers("subscriptions/listen", None));
    let mut stream = common::http::Stream::open(io, "POST", "/mcp", &headers, &body).await;
    // Within 20 s of asking (SSE keep-alive comments do not count as an event).
    let mut next_data = async || {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, data) = tokio::time::timeout_at(deadline, stream.event())
                .await
                .expect("an event in time")
                .expect("the stream ended");
            if let Ok(v) = serde_json::from_str::<Value>(&data) {
                return v;
            }
        }
    };
    let ack = next_data().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        40
    );

    let more = d.dir.path().join("more");
    write_tool(&more, "beta", r#"echo '{"result": {"content": []}}'"#);
    let cfg = json!({"custom_tools": {"paths": [tools_dir(&d), more]}});
    write_atomic(&d.config_path(), &cfg);
    let changed = next_data().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        40
    );
}

/// The Python MCP SDK pinned to 2026-07-28 (no probe, no initialize) over stdio and HTTP
/// lists and calls a tool; `mode="legacy"` on the same daemon still works.
#[tokio::test]
async fn python_sdk_in_new_era_mode() {
    let d = start().await;
    let socket = d.socket();
    let sock = socket.to_str().unwrap();
    for mode in [new_era::NEW, "legacy"] {
        let seen = common::python_sdk("modern.py", &[mode, BIN, sock], &[]).await;
        assert_eq!(
            seen["tools"]
                .as_array()
                .map(|t| t.contains(&json!("alpha"))),
            Some(true),
            "{seen}"
        );
        assert_eq!(seen["alpha"], "A", "{mode}: {seen}");
        assert_eq!(seen["http_alpha"], "A", "{mode}: {seen}");
        let tools: Vec<String> = serde_json::from_value(seen["tools"].clone()).unwrap();
        assert_eq!(tools, socket_order(&d).await);
    }
}
