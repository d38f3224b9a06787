//! Profiles (issue 25): a frontend served under a config profile sees only what it selects,
//! over `toolhost mcp --profile`, `/mcp?profile=` and a socket session; a hidden tool
//! called anyway is `Unknown tool`, a hidden prompt or resource is unknown too; profile
//! edits apply on reload. Real daemon, real fixture server, rmcp's MCP client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

const TOKEN: &str = "profile-s3cret";

type Mcp = RunningService<RoleClient, ()>;

/// A daemon on TCP too (for `/mcp`), with the fixture server `fx` and a profile `editor`:
/// `read_file` and the fixture's tools but not its `crash`.
async fn start() -> Daemon {
    let mut d = Daemon::unstarted();
    let cfg = json!({
        "listen": {"tcp": "127.0.0.1:0"},
        "mcp_servers": {"fx": {"command": FIXTURE}},
        "profiles": {
            "editor": {"servers": ["fx"], "tools": ["read_*"], "exclude": ["mcp_fx_crash"]},
            "builtins": {"tools": ["read_*"]},
        },
        "catalog": {"defer": ["mcp_fx_add"]},
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", TOKEN)]).await;
    eventually(20, "fx ready", || async {
        d.call("mcp.status", json!({"server": "fx"})).await["result"]["servers"][0]["state"]
            == "ready"
    })
    .await;
    d
}

async fn mcp_url(d: &Daemon, query: &str) -> String {
    format!("http://{}/mcp{query}", d.tcp_addr().await)
}

async fn http(d: &Daemon, query: &str) -> Result<Mcp, String> {
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(mcp_url(d, query).await).auth_header(TOKEN);
    ().serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .map_err(|e| format!("{e:?}"))
}

async fn stdio(d: &Daemon, profile: &str) -> Mcp {
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("mcp")
        .arg("--socket")
        .arg(d.socket())
        .args(["--profile", profile]);
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn names(mcp: &Mcp) -> Vec<String> {
    let tools = mcp.peer().list_all_tools().await.unwrap();
    tools.iter().map(|t| t.name.to_string()).collect()
}

async fn call(mcp: &Mcp, name: &str, args: Value) -> Result<Value, String> {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().unwrap().clone());
    mcp.peer()
        .call_tool(params)
        .await
        .map(|r| serde_json::to_value(r).unwrap())
        .map_err(|e| e.to_string())
}

/// What `editor` serves: the fixture's tools but `crash`, and `read_file`; never `bash`.
async fn assert_editor_view(mcp: &Mcp) {
    let names = names(mcp).await;
    assert!(names.contains(&"read_file".to_owned()), "{names:?}");
    assert!(names.contains(&"mcp_fx_echo".to_owned()), "{names:?}");
    assert!(!names.contains(&"bash".to_owned()), "{names:?}");
    assert!(!names.contains(&"mcp_fx_crash".to_owned()), "{names:?}");
    let echo = call(mcp, "mcp_fx_echo", json!({"text": "seen"}))
        .await
        .unwrap();
    assert_eq!(echo["content"][0]["text"], "seen", "{echo}");
    let hidden = call(mcp, "bash", json!({"command": "echo no"}))
        .await
        .unwrap_err();
    assert!(hidden.contains("Unknown tool: bash"), "{hidden}");
}

#[tokio::test]
async fn a_profile_limits_what_http_and_stdio_frontends_see_and_call() {
    let d = start().await;
    let all = http(&d, "").await.unwrap();
    assert!(names(&all).await.contains(&"bash".to_owned()));

    let editor = http(&d, "?profile=editor").await.unwrap();
    assert_editor_view(&editor).await;
    let editor = stdio(&d, "editor").await;
    assert_editor_view(&editor).await;
    // The unprofiled connection is untouched by the others.
    let out = call(&all, "bash", json!({"command": "echo yes"}))
        .await
        .unwrap();
    assert_eq!(out["isError"], false, "{out}");
}

#[tokio::test]
async fn an_unknown_profile_is_refused_at_connect() {
    let d = start().await;
    let err = http(&d, "?profile=nope").await.unwrap_err();
    assert!(
        err.contains("unknown profile 'nope'; config.json defines: builtins, editor"),
        "{err}"
    );

    let out = toolhost(d.dir.path())
        .arg("mcp")
        .arg("--socket")
        .arg(d.socket())
        .args(["--profile", "nope"])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown profile 'nope'"), "{stderr}");
}

#[tokio::test]
async fn a_sessions_profile_governs_its_listing_search_and_calls_and_follows_reloads() {
    let d = start().await;
    let bad = d.call("session.create", json!({"profile": "nope"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let s = d.call("session.create", json!({"profile": "editor"})).await["result"].clone();
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(s["profile"], "editor");
    let listed = d.call("list_tools", json!({"session_id": id})).await["result"].clone();
    let listed = tool_names(&listed);
    assert!(
        listed.contains(&"read_file") && !listed.contains(&"bash"),
        "{listed:?}"
    );
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": "true"}, "session_id": id}),
        )
        .await["result"]["result"]
        .clone();
    assert_eq!(r["error_kind"], "unknown_tool", "{r}");
    assert_eq!(r["error"], "Unknown tool: bash");

    // The profile is read from config.json as it is now: an edit applies at once.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    cfg["profiles"]["editor"]["tools"] = json!(["read_*", "bash"]);
    write_atomic(&d.config_path(), &cfg);
    eventually(10, "bash to be served under editor", || async {
        let r = d
            .call(
                "invoke",
                json!({"name": "bash", "arguments": {"command": "echo in"}, "session_id": id}),
            )
            .await["result"]["result"]
            .clone();
        r["ok"] == true
    })
    .await;
    let live = d.call("list_tools", json!({"profile": "editor"})).await["result"].clone();
    assert!(tool_names(&live).contains(&"bash"), "{live}");
    // Removing the profile serves the session nothing rather than everything.
    cfg["profiles"] = json!({});
    write_atomic(&d.config_path(), &cfg);
    eventually(10, "the removed profile to hide everything", || async {
        let r = d.call("list_tools", json!({"session_id": id})).await["result"].clone();
        r["tools"] == json!([])
    })
    .await;
}

#[tokio::test]
async fn tool_search_finds_only_what_the_profile_serves() {
    let d = start().await;
    for (profile, found) in [("editor", json!(["mcp_fx_add"])), ("builtins", json!([]))] {
        let s = d.call("session.create", json!({"profile": profile})).await["result"].clone();
        let id = s["id"].as_str().unwrap();
        let listed = d.call("list_tools", json!({"session_id": id})).await["result"].clone();
        assert!(tool_names(&listed).contains(&"tool_search"), "{listed}");
        let r = d
            .call(
                "tools.search",
                json!({"query": "add two numbers", "session_id": id}),
            )
            .await["result"]
            .clone();
        let names: Vec<&str> = r["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(json!(names), found, "{profile}: {r}");
        let call = d
            .call("invoke", json!({"name": "tool_search", "arguments": {"query": "add two numbers"}, "session_id": id}))
            .await["result"]["result"]
            .clone();
        assert_eq!(call["ok"], true, "{call}");
        assert_eq!(
            call.to_string().contains("mcp_fx_add"),
            profile == "editor",
            "{call}"
        );
    }
}

/// A daemon whose fixture server `fx` offers its prompt and resources, and a profile
/// `reader` that hides the prompt `greet`, the resource `fixture://fx/bytes` and, of the
/// template `fixture://big/{bytes}`, the URIs `fixture://big/1…`.
async fn start_surface() -> Daemon {
    let mut d = Daemon::unstarted();
    let cfg = json!({
        "listen": {"tcp": "127.0.0.1:0"},
        "mcp_servers": {"fx": {"command": FIXTURE, "env": {"FIXTURE_RESOURCES": "fx"}}},
        "profiles": {
            "reader": {"servers": ["fx"], "exclude": ["mcp_fx_greet", "fixture://fx/*", "fixture://big/1*"]},
        },
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", TOKEN)]).await;
    eventually(20, "fx's prompt listed", || async {
        let r = d.call("list_prompts", json!({})).await;
        r["result"]["prompts"].to_string().contains("mcp_fx_greet")
    })
    .await;
    d
}

fn field<'a>(list: &'a Value, key: &str, field: &str) -> Vec<&'a str> {
    let items = list[key].as_array().unwrap_or_else(|| panic!("{list}"));
    items.iter().map(|i| i[field].as_str().unwrap()).collect()
}

/// What the socket serves `view` (`{"profile": …}` or `{"session_id": …}`) of the
/// fixture's surface: only what `reader` selects, and a hidden entry is unknown.
async fn assert_reader_socket_view(d: &Daemon, view: Value) {
    let with = |extra: Value| {
        let mut p = view.clone();
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let prompts = d.call("list_prompts", view.clone()).await["result"].clone();
    assert_eq!(
        field(&prompts, "prompts", "name"),
        Vec::<&str>::new(),
        "{prompts}"
    );
    let resources = d.call("list_resources", view.clone()).await["result"].clone();
    assert_eq!(
        field(&resources, "resources", "uri"),
        ["fixture://shared"],
        "{resources}"
    );
    let templates = d.call("list_resource_templates", view.clone()).await["result"].clone();
    assert_eq!(
        field(&templates, "resourceTemplates", "uriTemplate"),
        ["fixture://big/{bytes}"],
        "{templates}"
    );

    let greet = json!({"name": "mcp_fx_greet", "arguments": {"name": "Ada"}});
    let e = d.call("get_prompt", with(greet)).await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert_eq!(e["error"]["message"], "unknown prompt: mcp_fx_greet", "{e}");
    let complete = json!({"ref": {"type": "ref/prompt", "name": "mcp_fx_greet"},
        "argument": {"name": "name", "value": "A"}});
    let e = d.call("complete", with(complete)).await;
    assert_eq!(e["error"]["message"], "unknown prompt: mcp_fx_greet", "{e}");

    for hidden in ["fixture://fx/bytes", "fixture://big/10"] {
        let e = d.call("read_resource", with(json!({"uri": hidden}))).await;
        assert_eq!(e["error"]["code"], -32002, "{hidden}: {e}");
    }
    let shown = d
        .call("read_resource", with(json!({"uri": "fixture://big/5"})))
        .await;
    assert_eq!(shown["result"]["contents"][0]["text"], "xxxxx", "{shown}");
}

async fn prompt_names(mcp: &Mcp) -> Vec<String> {
    let prompts = mcp.peer().list_all_prompts().await.unwrap();
    prompts.into_iter().map(|p| p.name).collect()
}

async fn resource_uris(mcp: &Mcp) -> Vec<String> {
    let resources = mcp.peer().list_all_resources().await.unwrap();
    resources.into_iter().map(|r| r.uri).collect()
}

fn mcp_code(e: ServiceError) -> i32 {
    match e {
        ServiceError::McpError(e) => e.code.0,
        other => panic!("not an MCP error: {other}"),
    }
}

/// The same through an MCP frontend under `reader`.
async fn assert_reader_mcp_view(mcp: &Mcp) {
    assert_eq!(prompt_names(mcp).await, Vec::<String>::new());
    assert_eq!(resource_uris(mcp).await, ["fixture://shared"]);
    let greet = GetPromptRequestParams::new("mcp_fx_greet");
    let e = mcp.peer().get_prompt(greet).await.unwrap_err();
    assert!(
        e.to_string().contains("unknown prompt: mcp_fx_greet"),
        "{e}"
    );
    let read = ReadResourceRequestParams::new("fixture://fx/bytes");
    let e = mcp.peer().read_resource(read).await.unwrap_err();
    assert_eq!(mcp_code(e), -32002);
    let read = ReadResourceRequestParams::new("fixture://shared");
    let shared = mcp.peer().read_resource(read).await.unwrap();
    assert!(format!("{shared:?}").contains("served by fx"), "{shared:?}");
}

#[tokio::test]
async fn a_profile_hides_prompts_and_resources_on_the_socket_and_through_the_facade() {
    let d = start_surface().await;
    let all = d.call("list_resources", json!({})).await["result"].clone();
    assert_eq!(
        field(&all, "resources", "uri"),
        ["fixture://shared", "fixture://fx/bytes"],
        "{all}"
    );
    assert_reader_socket_view(&d, json!({"profile": "reader"})).await;
    let s = d.call("session.create", json!({"profile": "reader"})).await["result"].clone();
    assert_reader_socket_view(&d, json!({"session_id": s["id"]})).await;
    let e = d.call("list_prompts", json!({"profile": "nope"})).await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let mut c = d.raw_lines().await;
    let sub = |uri: &str| json!({"uri": uri, "profile": "reader"});
    let e = c
        .call("subscribe_resource", sub("fixture://fx/bytes"))
        .await;
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let ok = c.call("subscribe_resource", sub("fixture://shared")).await;
    assert!(ok["result"].is_string() || ok["result"].is_number(), "{ok}");

    let unprofiled = http(&d, "").await.unwrap();
    // The host's built-in commands, then the server's prompt (proto-docs/commands.md).
    assert_eq!(
        prompt_names(&unprofiled).await,
        [
            "mcp_reload",
            "mcp_status",
            "skills",
            "tools",
            "undo",
            "mcp_fx_greet"
        ]
    );
    assert_reader_mcp_view(&http(&d, "?profile=reader").await.unwrap()).await;
    assert_reader_mcp_view(&stdio(&d, "reader").await).await;
}
