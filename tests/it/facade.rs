//! The MCP facade end to end, driven by rmcp's MCP client: `toolhost mcp` over stdio and
//! `/mcp` over streamable HTTP (TCP with its bearer token), against the real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, deprecated)] // roots: deprecated by SEP-2577, still what clients use

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{alive, eventually, toolhost, write_atomic, write_tool, Daemon, BIN};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ListRootsResult,
    ProgressNotificationParam, ProtocolVersion, Root, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

const TOKEN: &str = "facade-s3cret";

/// What the test client saw from the server.
#[derive(Debug, PartialEq)]
enum Seen {
    Progress(f64, Option<f64>, Option<String>),
    ListChanged,
    Elicited(String),
}

/// An MCP client with optional roots and an optional answer to elicitation; reports what
/// the server sent it.
#[derive(Clone)]
struct TestClient {
    name: &'static str,
    roots: Option<Vec<String>>,
    elicit: Option<ElicitationAction>,
    seen: mpsc::UnboundedSender<Seen>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = json!({});
        if self.roots.is_some() {
            caps["roots"] = json!({"listChanged": true});
        }
        if self.elicit.is_some() {
            caps["elicitation"] = json!({});
        }
        let caps: ClientCapabilities = serde_json::from_value(caps).unwrap();
        let mut cfg = ClientConfig::new(caps, Implementation::new(self.name, "9.9"));
        cfg.protocol_version = ProtocolVersion::V_2025_11_25;
        cfg
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let roots = self.roots.clone().unwrap_or_default();
        Ok(ListRootsResult::new(
            roots.into_iter().map(Root::new).collect(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            let _ = self.seen.send(Seen::Elicited(message));
        }
        let mut r: ElicitResult = serde_json::from_value(json!({"action": "decline"})).unwrap();
        r.action = self.elicit.clone().unwrap_or(ElicitationAction::Decline);
        Ok(r)
    }

    async fn on_progress(&self, p: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self
            .seen
            .send(Seen::Progress(p.progress, p.total, p.message));
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.seen.send(Seen::ListChanged);
    }
}

type Mcp = RunningService<RoleClient, TestClient>;

fn client(name: &'static str) -> (TestClient, mpsc::UnboundedReceiver<Seen>) {
    let (seen, rx) = mpsc::unbounded_channel();
    let c = TestClient {
        name,
        roots: None,
        elicit: None,
        seen,
    };
    (c, rx)
}

/// Writes a shell custom tool into `root/<name>` (program first, manifest last).
fn tools_dir(d: &Daemon) -> PathBuf {
    d.dir.path().join("tools")
}

/// A daemon with TCP (token `TOKEN`), a page size of 3, custom tools `pic` (image,
/// structured output, progress) and `slow` (records its pid, sleeps), and `extra` merged
/// into config.json.
async fn start(extra: Value) -> Daemon {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let tools = dir.join("tools");
    std::fs::create_dir_all(dir.join("xdg")).unwrap();
    write_tool(
        &tools,
        "pic",
        json!({"name": "pic", "label": "Picture", "description": "an image",
               "command": ["./run.sh"], "approval": "read_only",
               "output_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}),
        r#"echo '{"update": {"content": [{"type": "text", "text": "drawing"}], "progress": {"progress": 1, "total": 2}}}'
echo '{"result": {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}, {"type": "text", "text": "a dot"}], "structured": {"n": 1}}}'"#,
    );
    write_tool(
        &tools,
        "slow",
        json!({"name": "slow", "description": "sleeps", "command": ["./run.sh"], "approval": "read_only"}),
        &format!("echo $$ > {}/slow.pid\nexec sleep 30", dir.display()),
    );
    let mut cfg = json!({"custom_tools": {"paths": [tools]}, "listen": {"tcp": "127.0.0.1:0"}});
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let xdg = dir.join("xdg");
    d.spawn(&[
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
        ("TOOLHOST_TOKEN", TOKEN),
        ("TOOLHOST_MCP_PAGE_SIZE", "3"),
    ])
    .await;
    d
}

/// `toolhost mcp` on this daemon's socket, as an MCP client would start it.
async fn stdio(d: &Daemon, c: TestClient, args: &[&str]) -> Mcp {
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("mcp").arg("--socket").arg(d.socket()).args(args);
    cmd.env("TOOLHOST_MCP_PAGE_SIZE", "3");
    let transport = TokioChildProcess::new(cmd).unwrap();
    c.serve(transport).await.unwrap()
}

/// `/mcp` over TCP with the bearer token.
async fn http(d: &Daemon, c: TestClient) -> Mcp {
    let url = format!("http://{}/mcp", d.tcp_addr().await);
    let cfg = StreamableHttpClientTransportConfig::with_uri(url).auth_header(TOKEN);
    c.serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .unwrap()
}

async fn call(mcp: &Mcp, name: &str, args: Value) -> Value {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().unwrap().clone());
    let r = mcp.peer().call_tool(params).await.unwrap();
    serde_json::to_value(r).unwrap()
}

/// Sends `tools/call` of `name` (no arguments) and returns the request's handle, for
/// tests that watch its progress or cancel it.
async fn send_call(mcp: &Mcp, name: &'static str) -> rmcp::service::RequestHandle<RoleClient> {
    let params = CallToolRequestParams::new(name).with_arguments(Default::default());
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    mcp.peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap()
}

/// Every tool name, following `nextCursor`; also returns the number of pages.
async fn all_tools(mcp: &Mcp) -> (Vec<Value>, usize) {
    let (mut tools, mut pages, mut cursor) = (Vec::new(), 0, None);
    loop {
        let params =
            cursor.map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = mcp.peer().list_tools(params).await.unwrap();
        pages += 1;
        tools.extend(page.tools.iter().map(|t| serde_json::to_value(t).unwrap()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return (tools, pages),
        }
    }
}

fn find<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {tools:?}"))
}

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("nothing seen in time")
        .expect("client gone")
}

/// Waits for `list_changed`, passing over progress (every rmcp call asks for progress, and
/// bash reports its output as it comes).
async fn list_changed(rx: &mut mpsc::UnboundedReceiver<Seen>) {
    loop {
        match next_seen(rx).await {
            Seen::ListChanged => return,
            Seen::Progress(..) => {}
            other => panic!("expected list_changed, saw {other:?}"),
        }
    }
}

#[tokio::test]
async fn stdio_lists_with_pages_and_calls_text_image_structured_error_and_unknown() {
    let d = start(json!({})).await;
    let (c, mut seen) = client("stdio-test");
    let mcp = stdio(&d, c, &[]).await;
    let info = mcp.peer().peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "toolhost");

    let (tools, pages) = all_tools(&mcp).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "bash",
            "list_dir",
            "patch_file",
            "pic",
            "read_file",
            "search_files",
            "slow",
            "write_file"
        ]
    );
    assert_eq!(pages, 3, "8 tools in pages of 3");
    let pic = find(&tools, "pic");
    assert_eq!(pic["title"], "Picture");
    assert_eq!(pic["annotations"], json!({"readOnlyHint": true}));
    assert_eq!(
        pic["outputSchema"],
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    );
    assert_eq!(find(&tools, "bash")["annotations"]["readOnlyHint"], false);
    assert_eq!(
        find(&tools, "read_file")["annotations"]["readOnlyHint"],
        true
    );

    // Text, with the result's other facts as a second block.
    let r = call(&mcp, "bash", json!({"command": "echo hi"})).await;
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["content"][0], json!({"type": "text", "text": "hi\n"}));
    assert_eq!(
        serde_json::from_str::<Value>(r["content"][1]["text"].as_str().unwrap()).unwrap()
            ["exit_code"],
        0
    );

    // A custom tool's content blocks and structured output pass through; its update is
    // progress for a caller that asked for it.
    while seen.try_recv().is_ok() {} // bash's progress
    let handle = send_call(&mcp, "pic").await;
    let ServerResult::CallToolResult(r) = handle.await_response().await.unwrap() else {
        panic!("not a tool result");
    };
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}, {"type": "text", "text": "a dot"}],
               "structuredContent": {"n": 1}, "isError": false})
    );
    assert_eq!(
        next_seen(&mut seen).await,
        Seen::Progress(1.0, Some(2.0), Some("drawing".into()))
    );

    // ok:false is a tool error the model can read.
    let r = call(&mcp, "read_file", json!({"path": "missing.txt"})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("missing.txt"),
        "{r}"
    );

    // An unknown tool is the protocol error the spec names.
    let params = CallToolRequestParams::new("nope").with_arguments(Default::default());
    let e = mcp.peer().call_tool(params).await.unwrap_err();
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("{e:?}");
    };
    assert_eq!(e.code.0, -32602);
    assert_eq!(e.message, "Unknown tool: nope");

    // The session shows which frontend this is.
    let sessions = d.call("session.list", json!({})).await["result"]["sessions"].clone();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    let mut meta = sessions[0]["meta"].clone();
    let frontend = meta.as_object_mut().unwrap().remove("frontend_id");
    assert!(
        frontend.is_some_and(|f| f.as_str().unwrap().starts_with("f_")),
        "{sessions}"
    );
    assert_eq!(
        meta,
        json!({"frontend": "mcp", "mcp_client": {"name": "stdio-test", "version": "9.9", "protocol_version": "2025-11-25"}, "workspace_from": "daemon"})
    );
    mcp.cancel().await.unwrap();
}

/// (Without a daemon the bridge still answers: `identity.rs`.)
#[tokio::test]
async fn stdio_uses_a_named_session() {
    let d = start(json!({})).await;
    let (c, _seen) = client("named");
    let mcp = stdio(&d, c, &["--session", "mine"]).await;
    let r = call(&mcp, "bash", json!({"command": "true"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let s = d.call("session.get", json!({"id": "mine"})).await["result"].clone();
    assert_eq!(s["meta"]["mcp_client"]["name"], "named", "{s}");
    mcp.cancel().await.unwrap();
}

/// Node (libuv) starts its children with socketpairs for stdio, not pipes: the facade
/// serves those too, and exits when the client closes its end.
#[tokio::test]
async fn stdio_serves_a_socketpair_and_exits_when_the_client_closes_it() {
    let d = start(json!({})).await;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = toolhost(d.dir.path())
        .arg("mcp")
        .arg("--socket")
        .arg(d.socket())
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs.try_clone().unwrap(),
        )))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .spawn()
        .unwrap();
    ours.set_nonblocking(true).unwrap();
    let (rd, wr) = tokio::io::split(tokio::net::UnixStream::from_std(ours).unwrap());
    let (c, _seen) = client("node-like");
    let mcp = c.serve((rd, wr)).await.unwrap();
    let r = call(&mcp, "bash", json!({"command": "echo over a socket"})).await;
    assert_eq!(r["isError"], false, "{r}");
    assert!(r.to_string().contains("over a socket"), "{r}");
    mcp.cancel().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the facade exits once its socket is closed")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn cancelling_a_call_kills_its_process_group() {
    let d = start(json!({})).await;
    let (c, _seen) = client("canceller");
    let mcp = stdio(&d, c, &[]).await;
    let handle = send_call(&mcp, "slow").await;
    let pid_file = d.dir.path().join("slow.pid");
    let mut pid = 0;
    eventually(10, "the tool started", || {
        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
        pid = text.trim().parse().unwrap_or(0);
        async move { pid > 0 }
    })
    .await;
    assert!(alive(pid));
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    eventually(
        10,
        "the tool's process is gone",
        || async move { !alive(pid) },
    )
    .await;
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn http_needs_the_token_and_a_local_origin() {
    let d = start(json!({})).await;
    let addr = d.tcp_addr().await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let post = |headers: Vec<(&'static str, String)>| {
        let addr = addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let mut h: Vec<(&str, &str)> = vec![
                ("Accept", "application/json, text/event-stream"),
                ("Content-Type", "application/json"),
            ];
            h.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
            common::http_on(&mut s, "POST", "/mcp", init, &h).await
        }
    };
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(post(vec![]).await.0, 401);
    assert_eq!(
        post(vec![("Authorization", "Bearer wrong".into())]).await.0,
        401
    );
    let foreign = vec![
        ("Authorization", bearer.clone()),
        ("Origin", "http://evil.example".into()),
    ];
    assert_eq!(post(foreign).await.0, 403);
    let local = vec![
        ("Authorization", bearer.clone()),
        ("Origin", "http://localhost:6274".into()),
    ];
    let (status, body) = post(local).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""protocolVersion":"2025-06-18""#), "{body}");
}

#[tokio::test]
async fn two_http_clients_get_their_own_sessions_and_list_changed() {
    let d = start(json!({})).await;
    let (a, mut seen_a) = client("client-a");
    let (b, mut seen_b) = client("client-b");
    let a = http(&d, a).await;
    let b = http(&d, b).await;
    let r = call(&a, "bash", json!({"command": "echo a"})).await;
    assert_eq!(r["content"][0]["text"], "a\n", "{r}");
    let r = call(&b, "bash", json!({"command": "echo b"})).await;
    assert_eq!(r["content"][0]["text"], "b\n", "{r}");
    let sessions = d.call("session.list", json!({})).await["result"]["sessions"].clone();
    let mut names: Vec<String> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["meta"]["mcp_client"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["client-a", "client-b"]);

    // A new custom tool: each client is told once, and the tool is callable by then.
    write_tool(
        &tools_dir(&d),
        "greet",
        json!({"name": "greet", "description": "hello", "command": ["./run.sh"], "approval": "read_only"}),
        r#"echo '{"result": {"output": "hello"}}'"#,
    );
    list_changed(&mut seen_a).await;
    list_changed(&mut seen_b).await;
    let r = call(&a, "greet", json!({})).await;
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": "hello"}]),
        "{r}"
    );

    // A config edit that changes the list (another tool folder) also reaches both.
    let more = d.dir.path().join("more");
    write_tool(
        &more,
        "extra",
        json!({"name": "extra", "description": "more", "command": ["./run.sh"], "approval": "read_only"}),
        r#"echo '{"result": {"output": "extra"}}'"#,
    );
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    cfg["custom_tools"]["paths"] = json!([tools_dir(&d), more]);
    write_atomic(&d.config_path(), &cfg);
    list_changed(&mut seen_a).await;
    list_changed(&mut seen_b).await;
    let r = call(&b, "extra", json!({})).await;
    assert_eq!(
        r["content"],
        json!([{"type": "text", "text": "extra"}]),
        "{r}"
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

#[tokio::test]
async fn roots_set_the_session_workspace() {
    let d = start(json!({})).await;
    let project = d.dir.path().join("project dir");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("hello.txt"), "from the root\n").unwrap();
    let (mut c, _seen) = client("rooted");
    let uri = format!("file://{}", project.display()).replace(' ', "%20");
    c.roots = Some(vec![uri]);
    let mcp = http(&d, c).await;
    let r = call(&mcp, "bash", json!({"command": "cat hello.txt"})).await;
    assert_eq!(r["content"][0]["text"], "from the root\n", "{r}");
    let sessions = d.call("session.list", json!({})).await["result"]["sessions"].clone();
    assert_eq!(sessions[0]["workspace"], project.display().to_string());
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn strict_sessions_ask_the_user_through_elicitation() {
    let d = start(json!({"approval": {"mode": "strict", "wait_s": 0}})).await;
    let marker = d.workspace().join("ran");
    let command = json!({"command": "touch ran"});

    // Declined: nothing runs.
    let (mut c, mut seen) = client("decliner");
    c.elicit = Some(ElicitationAction::Decline);
    let mcp = stdio(&d, c, &[]).await;
    let r = call(&mcp, "bash", command.clone()).await;
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("declined"),
        "{r}"
    );
    let Seen::Elicited(message) = next_seen(&mut seen).await else {
        panic!("no elicitation")
    };
    assert!(message.contains("command=\"touch ran\""), "{message}");
    assert!(!marker.exists());
    // Read-only tools are not asked about.
    let r = call(&mcp, "list_dir", json!({})).await;
    assert_eq!(r["isError"], false, "{r}");
    mcp.cancel().await.unwrap();

    // Without elicitation: an error that says how to approve.
    let (c, _seen) = client("plain");
    let mcp = stdio(&d, c, &[]).await;
    let r = call(&mcp, "bash", command.clone()).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("needs the user's approval") && text.contains("--approved"),
        "{text}"
    );
    // The summary the daemon typed (the result's `approval`) names what would run.
    assert!(
        text.contains("bash (command) command=\"touch ran\""),
        "{text}"
    );
    assert!(!marker.exists());
    mcp.cancel().await.unwrap();

    // Accepted: it runs.
    let (mut c, _seen) = client("accepter");
    c.elicit = Some(ElicitationAction::Accept);
    let mcp = http(&d, c).await;
    let r = call(&mcp, "bash", command).await;
    assert_eq!(r["isError"], false, "{r}");
    assert!(marker.exists());
    mcp.cancel().await.unwrap();
}

/// Runs `tests/facade_py/client.py` (lists paged 3 at a time); `None` when python3 is absent.
async fn python_client(args: &[&str]) -> Value {
    common::python_sdk("client.py", args, &[("TOOLHOST_MCP_PAGE_SIZE", "3")]).await
}

/// What client.py must see, over either transport.
fn python_expected(mode: &str) -> Value {
    json!({
        "server": "toolhost",
        "protocol": "2025-11-25",
        "tools": ["bash", "list_dir", "patch_file", "pic", "read_file", "search_files", "slow", "write_file"],
        "pages": 3,
        "bash": {"is_error": false, "first": "hi\n"},
        "progress": [[1.0, 2.0, "drawing"]],
        "pic": {"is_error": false,
                "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}, {"type": "text", "text": "a dot"}],
                "structured": {"n": 1}},
        "error": true,
        "unknown": -32602,
        "mode": mode,
    })
}

#[tokio::test]
async fn python_sdk_over_stdio_and_http() {
    let d = start(json!({})).await;
    let socket = d.socket();
    let mut stdio = python_client(&["stdio", BIN, socket.to_str().unwrap()]).await;
    stdio["mode"] = json!("stdio");
    assert_eq!(stdio, python_expected("stdio"));
    let url = format!("http://{}/mcp", d.tcp_addr().await);
    let mut http = python_client(&["http", &url, TOKEN]).await;
    http["mode"] = json!("http");
    assert_eq!(http, python_expected("http"));
    // Each client's calls are in the audit log under its clientInfo name; the sessions
    // made for the two connections went with them.
    eventually(10, "both clients' calls in the audit log", || async {
        let audit = std::fs::read_to_string(d.data_dir().join("audit.jsonl")).unwrap_or_default();
        ["python-stdio", "python-http"]
            .iter()
            .all(|name| audit.contains(&format!("\"client\":\"{name}\"")))
    })
    .await;
    eventually(10, "the connections' sessions to go", || async {
        session_clients(&d).await.is_empty()
    })
    .await;
}

/// Prompts, resources, templates, completion and a resource subscription of
/// server-everything through the facade, with the Python SDK, over stdio and HTTP: paged
/// lists, a prompt with a missing argument (-32602), an embedded resource in a prompt, a
/// binary resource, a URI no server owns (-32002), completions with and without context,
/// and `resources/updated` after `resources/subscribe`.
#[tokio::test]
async fn python_sdk_sees_prompts_resources_and_completions() {
    let everything = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let server = json!({"command": "node", "args": [everything, "stdio"]});
    let d = start(json!({"mcp_servers": {"everything": server}})).await;
    eventually(30, "server-everything to be ready", || async {
        let s = d.call("mcp.status", json!({"server": "everything"})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    // Its simulated updates of subscribed resources, every 5 s from now on.
    let on = d
        .invoke("mcp_everything_toggle-subscriber-updates", json!({}))
        .await;
    assert_eq!(on["ok"], true, "{on}");
    let expected = json!({
        "capabilities": {"prompts": true, "resources": true, "completions": true},
        // The server's prompts and the host's built-in commands (proto-docs/commands.md).
        "prompts": ["mcp_everything_args-prompt", "mcp_everything_completable-prompt",
                    "mcp_everything_resource-prompt", "mcp_everything_simple-prompt",
                    "mcp_reload", "mcp_status", "skills", "tools", "undo"],
        "prompt_pages": 3,
        "args_prompt": ["What's weather in Paris?"],
        "missing_argument": -32602,
        "embedded": ["text", "resource"],
        "static_resources": true,
        "templates": ["demo://resource/dynamic/blob/{resourceId}", "demo://resource/dynamic/text/{resourceId}"],
        "blob": "Resource 3",
        "not_found": -32002,
        "completion": ["Engineering"],
        "completion_in_context": ["David", "Eve", "Frank"],
        "updated": "demo://resource/dynamic/text/1",
    });
    let socket = d.socket();
    let args = ["surface", "stdio", BIN, socket.to_str().unwrap()];
    let stdio = python_client(&args).await;
    assert_eq!(stdio, expected);
    let url = format!("http://{}/mcp", d.tcp_addr().await);
    let http = python_client(&["surface", "http", &url, TOKEN]).await;
    assert_eq!(http, expected);
}

/// The names (`clientInfo.name`) of the MCP connections that have a host session.
async fn session_clients(d: &Daemon) -> Vec<String> {
    let sessions = d.call("session.list", json!({})).await["result"]["sessions"].clone();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["meta"]["mcp_client"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// A connection's own session is deleted when the client ends the connection (stdio: closes
/// stdin; HTTP: ends its MCP session), so the store does not keep one per connection ever
/// made; a session named with `--session` stays.
#[tokio::test]
async fn a_connections_own_session_ends_with_it_and_a_named_one_stays() {
    let d = start(json!({})).await;
    let (c, _seen) = client("named");
    let named = stdio(&d, c, &["--session", "keep"]).await;
    assert_eq!(
        call(&named, "bash", json!({"command": "true"})).await["isError"],
        false
    );
    named.cancel().await.unwrap();

    let (c, _seen) = client("short");
    let short = stdio(&d, c, &[]).await;
    assert_eq!(
        call(&short, "bash", json!({"command": "true"})).await["isError"],
        false
    );
    let (c, _seen) = client("web");
    let web = http(&d, c).await;
    assert_eq!(
        call(&web, "bash", json!({"command": "true"})).await["isError"],
        false
    );
    let mut names = session_clients(&d).await;
    names.sort();
    assert_eq!(names, ["named", "short", "web"]);

    short.cancel().await.unwrap();
    web.cancel().await.unwrap();
    eventually(10, "the two connections' own sessions to go", || async {
        session_clients(&d).await == ["named"]
    })
    .await;
    let kept = d.call("session.get", json!({"id": "keep"})).await;
    assert_eq!(kept["result"]["id"], "keep", "{kept}");
}

/// One `/mcp` exchange over the Unix socket, read as it streams (SSE events one by one).
/// The connection stays open (keep-alive, as real clients do): dropping the exchange closes
/// it.
struct Exchange {
    status: u16,
    head: String,
    stream: common::http::Stream,
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

impl Exchange {
    async fn open(
        d: &Daemon,
        method: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Exchange {
        let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
        let mut headers = vec![
            ("Accept", "application/json, text/event-stream"),
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        if let Some(id) = session {
            headers.push(("Mcp-Session-Id", id));
        }
        headers.extend_from_slice(extra);
        let stream = common::http::Stream::open(io, method, "/mcp", &headers, body).await;
        Exchange {
            status: stream.status,
            head: stream.head(),
            stream,
        }
    }

    fn header(&self, name: &str) -> Option<String> {
        self.stream.header(name)
    }

    /// The next SSE event: its `id` and `data` (keep-alive comments are skipped).
    async fn event(&mut self) -> Option<(Option<String>, String)> {
        self.stream.event().await
    }

    /// The rest of the body as text.
    async fn body(self) -> String {
        self.stream.rest().await
    }

    /// Events until the one that answers a request, returned as JSON.
    async fn answer(&mut self) -> Value {
        loop {
            let (_, data) = self
                .event()
                .await
                .expect("the stream ended without an answer");
            if let Ok(v) = serde_json::from_str::<Value>(&data) {
                if v.get("result").is_some() || v.get("error").is_some() {
                    return v;
                }
            }
        }
    }
}

/// A raw MCP session over the Unix socket: `initialize`, then `notifications/initialized`.
async fn raw_session(d: &Daemon) -> String {
    let mut init = Exchange::open(d, "POST", None, &[], INIT).await;
    assert_eq!(init.status, 200, "{}", init.head);
    let id = init.header("mcp-session-id").expect("a session id");
    assert!(init.answer().await["result"]["protocolVersion"].is_string());
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        Exchange::open(d, "POST", Some(&id), &[], note).await.status,
        202
    );
    id
}

fn tool_call(id: u64, name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": args}})
    .to_string()
}

/// The pid the `slow` tool wrote, once it runs.
async fn slow_pid(d: &Daemon) -> i32 {
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
    pid
}

/// A call's SSE stream that goes away (no DELETE, no cancel) cancels the call once the
/// resume grace (3 s) passes: its process is gone long before the tool's 30 s sleep ends.
#[tokio::test]
async fn a_dropped_call_stream_cancels_the_call() {
    let d = start(json!({})).await;
    let session = raw_session(&d).await;
    let mut call = Exchange::open(
        &d,
        "POST",
        Some(&session),
        &[],
        &tool_call(1, "slow", json!({})),
    )
    .await;
    assert_eq!(call.status, 200, "{}", call.head);
    assert!(
        call.event().await.unwrap().0.is_some(),
        "a priming event with an id"
    );
    let pid = slow_pid(&d).await;
    drop(call);
    eventually(10, "the dropped call's process is gone", || async move {
        !alive(pid)
    })
    .await;
    // The session itself lives on.
    let mut list = Exchange::open(
        &d,
        "POST",
        Some(&session),
        &[],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .await;
    assert!(list.answer().await["result"]["tools"].is_array());
}

/// DELETE of a session with a call running kills the call's process at once (rmcp alone
/// let it run on for its 5 s drain).
#[tokio::test]
async fn deleting_a_session_cancels_its_calls_at_once() {
    let d = start(json!({})).await;
    let session = raw_session(&d).await;
    let mut call = Exchange::open(
        &d,
        "POST",
        Some(&session),
        &[],
        &tool_call(1, "slow", json!({})),
    )
    .await;
    assert!(call.event().await.is_some());
    let pid = slow_pid(&d).await;
    let deleted = Exchange::open(&d, "DELETE", Some(&session), &[], "").await;
    assert_eq!(deleted.status, 200, "{}", deleted.head);
    eventually(
        2,
        "the call's process is gone right after DELETE",
        || async move { !alive(pid) },
    )
    .await;
}

/// A call whose stream dropped before its result came is answered on resumption: GET with
/// `Last-Event-ID` after the call has finished replays the result (it used to answer 200
/// with an empty body).
#[tokio::test]
async fn resuming_after_the_call_finished_replays_its_result() {
    let d = start(json!({})).await;
    let session = raw_session(&d).await;
    let args = json!({"command": "echo resumed-result"});
    let mut call =
        Exchange::open(&d, "POST", Some(&session), &[], &tool_call(7, "bash", args)).await;
    let (priming, _) = call.event().await.unwrap();
    let priming = priming.expect("the priming event has an id");
    drop(call);
    eventually(10, "the call finished", || async {
        let s = d.call("host.status", json!({})).await;
        s["result"]["calls"]
            .as_array()
            .is_some_and(|c| c.is_empty())
    })
    .await;
    let mut resumed = Exchange::open(
        &d,
        "GET",
        Some(&session),
        &[("Last-Event-ID", &priming)],
        "",
    )
    .await;
    assert_eq!(resumed.status, 200, "{}", resumed.head);
    let answer = resumed.answer().await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(answer.to_string().contains("resumed-result"), "{answer}");
    // Nothing follows a finished call: the resumed stream ends.
    assert_eq!(resumed.body().await.trim(), "");
}

/// Sessions are bounded: past `facade.max_sessions` the longest idle one is closed and its
/// client's next request says why (404, so it starts over); sessions hold no descriptor of
/// their own, however many are open.
#[tokio::test]
async fn sessions_are_bounded_and_hold_no_descriptors() {
    let d = start(json!({"facade": {"max_sessions": 40}})).await;
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
            .unwrap()
            .count()
    };
    let first = raw_session(&d).await;
    let before = fds();
    let mut open = Vec::new();
    for _ in 0..39 {
        open.push(raw_session(&d).await);
    }
    let after = fds();
    assert!(
        after <= before + 4,
        "39 idle sessions took {} descriptors",
        after - before
    );
    // One more: the longest idle (the first) makes room.
    let newest = raw_session(&d).await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let evicted = Exchange::open(&d, "POST", Some(&first), &[], list).await;
    assert_eq!(evicted.status, 404, "{}", evicted.head);
    let why = evicted.body().await;
    assert!(why.contains("facade.max_sessions"), "{why}");
    for id in [&open[0], &newest] {
        let mut ok = Exchange::open(&d, "POST", Some(id), &[], list).await;
        assert!(ok.answer().await["result"]["tools"].is_array());
    }
}

/// One session that comes and goes: initialize, a list, DELETE.
async fn session_round(d: &Daemon) {
    let id = raw_session(d).await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let mut listed = Exchange::open(d, "POST", Some(&id), &[], list).await;
    assert!(listed.answer().await["result"]["tools"].is_array());
    assert_eq!(
        Exchange::open(d, "DELETE", Some(&id), &[], "").await.status,
        200
    );
}

/// 2,000 sessions that come and go (initialize, a list, DELETE) leave the daemon's memory
/// within 10 MB of where it was.
#[tokio::test]
async fn memory_returns_after_two_thousand_sessions() {
    let d = start(json!({})).await;
    for _ in 0..20 {
        session_round(&d).await;
    }
    let idle = d.rss_kib();
    let mut peak = idle;
    for _ in 0..250 {
        futures::future::join_all((0..8).map(|_| session_round(&d))).await;
        peak = peak.max(d.rss_kib());
    }
    let mut now = d.rss_kib();
    for _ in 0..50 {
        if now <= idle + 10 * 1024 {
            break;
        }
        // The heap is handed back when the last connection leaves (at most once a second).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = d.call("host.health", json!({})).await;
        now = d.rss_kib();
    }
    eprintln!("RSS: idle {idle} KiB, peak {peak} KiB, after 2,000 sessions {now} KiB");
    assert!(now <= idle + 10 * 1024, "idle {idle} KiB, after {now} KiB");
}

/// The TLS recipe of proto-docs/deploy.md, run as written: HAProxy terminates HTTPS with a
/// self-signed certificate in front of `listen.tcp`, and the official Python SDK (trusting
/// that certificate) sees over `https://` what it sees over plain HTTP — its own bearer
/// token passed through unchanged.
#[tokio::test]
async fn python_sdk_over_https_through_the_documented_haproxy_recipe() {
    let d = start(json!({})).await;
    let daemon_addr = d.tcp_addr().await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = tokio::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .await
        .expect("openssl");
    assert!(made.status.success(), "{made:?}");
    let bundle = certs.path().join("bundle.pem");
    let both = [
        std::fs::read_to_string(&cert).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    ]
    .concat();
    std::fs::write(&bundle, both).unwrap();

    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("proto-docs/deploy.md"))
            .unwrap();
    let recipe = doc
        .split("```haproxy\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("deploy.md's haproxy block")
        .to_owned();
    let proxy = common::haproxy::Haproxy::run(|public| {
        recipe
            .replace("PUBLIC", public)
            .replace("CERT.pem", bundle.to_str().unwrap())
            .replace("DAEMON", &daemon_addr)
    })
    .await;
    let port = proxy.addr.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}/mcp");
    let cert_file = cert.to_str().unwrap();
    let mut https = common::python_sdk(
        "client.py",
        &["http", &url, TOKEN],
        &[
            ("TOOLHOST_MCP_PAGE_SIZE", "3"),
            ("SSL_CERT_FILE", cert_file),
        ],
    )
    .await;
    https["mode"] = json!("http");
    assert_eq!(https, python_expected("http"));
}
