//! The operator's page (issue 31): `GET /ui` and its files, page tokens and login codes,
//! the Origin rule, the event stream, and a real browser (Debian's `chromium` through
//! `chromedriver`, driven over WebDriver by fantoccini) that watches a server and its tools
//! appear, cancels a running call, allows a strict session's waiting command and approves a
//! quarantined tool. Its screenshots are written to `target/ui-screenshots/`
//! (`operator-page.png` at the end, `operator-page-approval.png` with a call waiting).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

pub(crate) const TOKEN: &str = "s3cret-tcp-token";

/// One request through the test client; returns the status, the head (lower case) and
/// the body.
async fn request<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let answer = common::http::exchange(s, method, path, headers, body).await;
    let head = answer.head();
    (answer.status, head, answer.body)
}

async fn unix(
    d: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let s = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    request(s, method, path, headers, body).await
}

async fn tcp(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    request(s, method, path, headers, body).await
}

/// A daemon listening on TCP too (with [`TOKEN`]), and its TCP address.
pub(crate) async fn tcp_daemon(config: Value) -> (Daemon, String) {
    let mut d = Daemon::unstarted();
    let mut config = config;
    config["listen"] = json!({"tcp": "127.0.0.1:0"});
    std::fs::write(d.config_path(), config.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", TOKEN)]).await;
    let addr = d.tcp_addr().await;
    (d, addr)
}

fn page_token_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["page_token"].as_str().unwrap().to_owned()
}

fn rpc_body(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

#[tokio::test]
async fn the_first_load_is_small_and_its_files_carry_a_strict_policy() {
    let d = Daemon::start().await;
    let mut total = 0;
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let (status, head, body) = unix(&d, "GET", path, &[], "").await;
        assert_eq!(status, 200, "{path}: {head}");
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{path}: {head}"
        );
        assert!(
            head.contains("content-security-policy: default-src 'self'"),
            "{head}"
        );
        assert!(head.contains("x-frame-options: deny"), "{head}");
        if path != "/ui" {
            total += body.len();
        }
    }
    assert!(total <= 100 * 1024, "first load {total} bytes");
    assert_eq!(unix(&d, "GET", "/ui/nothing", &[], "").await.0, 404);
}

#[tokio::test]
async fn page_data_needs_a_page_token_and_a_page_on_this_machine() {
    let d = Daemon::start().await;
    let call = rpc_body("host.health", json!({}));
    let (status, _, _) = unix(&d, "POST", "/ui/rpc", &[], &call).await;
    assert_eq!(status, 401);
    let (status, _, _) = unix(
        &d,
        "POST",
        "/ui/rpc",
        &[("X-Toolhost-Page", "made-up")],
        &call,
    )
    .await;
    assert_eq!(status, 401);
    // On the Unix socket a page token is there for the asking.
    let (status, _, body) = unix(&d, "POST", "/ui/login", &[], "").await;
    assert_eq!(status, 200, "{body}");
    let page = page_token_of(&body);
    let (status, _, body) = unix(&d, "POST", "/ui/rpc", &[("X-Toolhost-Page", &page)], &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["result"]["status"],
        "ok"
    );
    let local = [
        ("X-Toolhost-Page", page.as_str()),
        ("Origin", "http://127.0.0.1:8765"),
    ];
    assert_eq!(unix(&d, "POST", "/ui/rpc", &local, &call).await.0, 200);
    // Another origin is refused everywhere a page acts: login, methods, events.
    for origin in [
        "http://evil.example",
        "http://127.0.0.1.evil.example:8765",
        "null",
    ] {
        let from = [("X-Toolhost-Page", page.as_str()), ("Origin", origin)];
        assert_eq!(
            unix(&d, "POST", "/ui/rpc", &from, &call).await.0,
            403,
            "{origin}"
        );
        assert_eq!(
            unix(&d, "POST", "/ui/login", &from, "").await.0,
            403,
            "{origin}"
        );
        assert_eq!(
            unix(&d, "GET", "/ui/events", &from, "").await.0,
            403,
            "{origin}"
        );
    }
}

#[tokio::test]
async fn on_tcp_a_page_token_takes_the_token_or_a_one_time_code() {
    let (d, addr) = tcp_daemon(json!({})).await;
    // The page's files load without the token: a browser cannot send it with a page load.
    assert_eq!(tcp(&addr, "GET", "/ui/", &[], "").await.0, 200);
    // Everything else still wants it.
    assert_eq!(tcp(&addr, "GET", "/health", &[], "").await.0, 401);
    assert_eq!(tcp(&addr, "POST", "/ui/login", &[], "").await.0, 401);
    let wrong = [("Authorization", "Bearer nope")];
    assert_eq!(tcp(&addr, "POST", "/ui/login", &wrong, "").await.0, 401);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = tcp(
        &addr,
        "POST",
        "/ui/login",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page = page_token_of(&body);
    let call = rpc_body("session.list", json!({}));
    let (status, _, body) = tcp(
        &addr,
        "POST",
        "/ui/rpc",
        &[("X-Toolhost-Page", &page)],
        &call,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A page token is not the TCP token.
    let as_bearer = format!("Bearer {page}");
    assert_eq!(
        tcp(&addr, "POST", "/", &[("Authorization", &as_bearer)], &call)
            .await
            .0,
        401
    );

    // `toolhost ui` prints a link with a code, good once; the token is not in it.
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["ui"])
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{printed}");
    assert!(!printed.contains(TOKEN), "{printed}");
    let url = printed
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no link in {printed}"));
    assert!(
        url.starts_with(&format!("http://{addr}/ui/#code=")),
        "{url}"
    );
    let code = url.split("#code=").nth(1).unwrap();
    let with_code = [("X-Toolhost-Login", code)];
    let (status, _, body) = tcp(&addr, "POST", "/ui/login", &with_code, "").await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(page_token_of(&body), page);
    assert_eq!(
        tcp(&addr, "POST", "/ui/login", &with_code, "").await.0,
        401,
        "a code works once"
    );
}

/// Reads the event stream on `s` until its text contains `what`; returns all read so far.
async fn read_until(s: &mut common::http::Stream, seen: &mut String, what: &str) {
    while !seen.contains(what) {
        let piece = tokio::time::timeout(Duration::from_secs(30), s.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {what:?} in the stream: {seen}"));
        let Some(piece) = piece else {
            panic!("the stream ended before {what:?}: {seen}");
        };
        seen.push_str(&piece);
    }
}

#[tokio::test]
async fn the_event_stream_carries_tools_servers_calls_approvals_config_and_metrics() {
    let d = Daemon::start().await;
    let (_, _, body) = unix(&d, "POST", "/ui/login", &[], "").await;
    let page = page_token_of(&body);
    let io = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let headers = [("X-Toolhost-Page", page.as_str())];
    let mut s = common::http::Stream::open(io, "GET", "/ui/events", &headers, "").await;
    assert_eq!(s.status, 200);
    let kind = s.header("content-type").unwrap_or_default();
    assert!(kind.contains("text/event-stream"), "{kind}");
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "event: servers").await;
    read_until(&mut s, &mut seen, "event: metrics").await;

    let dir = d.dir.path();
    let added = d
        .call(
            "mcp.add",
            json!({"name": "fx", "server": {"command": FIXTURE, "env": {"FIXTURE_PID_FILE": dir.join("pids")}}}),
        )
        .await;
    assert_eq!(added["result"]["ok"], true, "{added}");
    read_until(&mut s, &mut seen, "event: tools_changed").await;
    read_until(&mut s, &mut seen, "\"added\":[\"mcp_fx_").await;
    read_until(&mut s, &mut seen, "\"name\":\"fx\"").await;
    // A stdio server's process and memory, as mcp.status tells them.
    read_until(&mut s, &mut seen, "\"rss_kib\":").await;
    let status = d.call("mcp.status", json!({"server": "fx"})).await;
    let pid = status["result"]["servers"][0]["pid"].as_u64().unwrap();
    let recorded = std::fs::read_to_string(dir.join("pids")).unwrap();
    assert!(
        recorded.split_whitespace().any(|p| p == pid.to_string()),
        "{pid} in {recorded}"
    );
    assert!(
        status["result"]["servers"][0]["rss_kib"].as_u64().unwrap() > 0,
        "{status}"
    );
    assert_eq!(d.invoke("list_dir", json!({"path": "."})).await["ok"], true);
    read_until(&mut s, &mut seen, "event: calls").await;
    // A call waiting for approval is told, and so is its end.
    let session = d
        .call("session.create", json!({"approval": "strict"}))
        .await;
    let session = session["result"]["id"].as_str().unwrap().to_owned();
    let client = d.client().await;
    let waiting = tokio::spawn(async move {
        let params = toolhost::protocol::InvokeParams {
            session_id: Some(session),
            ..toolhost::protocol::InvokeParams::new(
                "bash",
                args(json!({"command": "echo allowed"})),
            )
        };
        client.invoke(&params).await.unwrap()
    });
    read_until(&mut s, &mut seen, "\"kind\":\"approval_pending\"").await;
    let pending = d.call("approvals.list", json!({})).await;
    let id = pending["result"]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decided = d
        .call(
            "approvals.decide",
            json!({"id": id, "decision": "allow_once"}),
        )
        .await;
    assert!(decided["result"].is_object(), "{decided}");
    read_until(&mut s, &mut seen, "\"kind\":\"approval_decided\"").await;
    assert!(waiting.await.unwrap().result.ok);
    // A config that is refused is told with its error (and the live one stays).
    std::fs::write(d.config_path(), "{\"mcp_servers\": 3}").unwrap();
    read_until(&mut s, &mut seen, "event: config").await;
    read_until(&mut s, &mut seen, "\"last_error\":\"").await;
}

/// Runs `python` from a `bash` call of the daemon (a process the host started) and returns
/// what it wrote to `out.txt`.
async fn from_a_started_process(d: &Daemon, python: &str) -> String {
    let ws = d.workspace();
    std::fs::write(ws.join("peer.py"), python).unwrap();
    let out = ws.join("out.txt");
    let command = format!(
        "python3 '{}' '{}' '{}'",
        ws.join("peer.py").display(),
        d.socket().display(),
        out.display()
    );
    let r = d.invoke("bash", json!({"command": command})).await;
    assert_eq!(r["ok"], true, "{r}");
    std::fs::read_to_string(out).unwrap()
}

#[tokio::test]
async fn a_process_the_host_started_gets_no_page() {
    let d = Daemon::start().await;
    let python = r#"
import socket, sys
lines = []
for req in ["GET /ui/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "POST /ui/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"]:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(req.encode())
    lines.append(s.recv(200).decode().split("\r\n")[0])
open(sys.argv[2], "w").write("\n".join(lines))
"#;
    let out = from_a_started_process(&d, python).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    for l in lines {
        assert!(l.contains(" 403 "), "{out}");
    }
    // The user's own client is not affected.
    assert_eq!(unix(&d, "GET", "/ui/", &[], "").await.0, 200);
}

// --- the browser -------------------------------------------------------------------------

/// Where the browser test leaves its screenshot.
pub(crate) fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots")
}

/// chromedriver on a free port, ended with the test.
pub(crate) struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Driver {
    pub(crate) async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (apt-get install chromium chromium-driver; tests/run.sh does)");
        let url = format!("http://127.0.0.1:{port}");
        eventually(20, "chromedriver to listen", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Driver { child, url }
    }

    pub(crate) async fn browser(&self) -> fantoccini::Client {
        let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,2200", "--no-first-run"]
            }
        }))
        .unwrap();
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

use fantoccini::Locator;

/// Waits for the element `css` to be on the page.
pub(crate) async fn shown(b: &fantoccini::Client, css: &str) -> fantoccini::elements::Element {
    let found = b
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await;
    match found {
        Ok(el) => el,
        Err(e) => {
            let page = match b.find(Locator::Css("body")).await {
                Ok(body) => body.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            panic!("{css} never showed ({e}); the page says:\n{page}")
        }
    }
}

/// Opens the page on the TCP listener at `addr`, gives the token once (over TCP the page
/// asks for it) and waits for the event stream to be live.
pub(crate) async fn log_in(b: &fantoccini::Client, addr: &str) {
    b.goto(&format!("http://{addr}/ui/")).await.unwrap();
    shown(b, "#login:not([hidden]) #token")
        .await
        .send_keys(TOKEN)
        .await
        .unwrap();
    click(b, "#login button").await;
    shown(b, "#live.ok").await;
}

/// The text of the element `css`, found afresh until it reads: the page redraws its tables
/// as events come, so an element found a moment ago may be gone (a stale reference).
pub(crate) async fn text_of(b: &fantoccini::Client, css: &str) -> String {
    for _ in 0..20 {
        if let Ok(text) = shown(b, css).await.text().await {
            return text;
        }
    }
    panic!("could not read {css}");
}

/// Clicks the element `css` (found afresh: the page redraws its tables as events come).
pub(crate) async fn click(b: &fantoccini::Client, css: &str) {
    for _ in 0..20 {
        if shown(b, css).await.click().await.is_ok() {
            return;
        }
    }
    panic!("could not click {css}");
}

pub(crate) async fn gone(b: &fantoccini::Client, css: &str) {
    eventually(30, &format!("{css} to go"), || async {
        b.find_all(Locator::Css(css))
            .await
            .is_ok_and(|found| found.is_empty())
    })
    .await;
}

fn catalog(dir: &Path, server: &str, tools: Value) -> PathBuf {
    let path = dir.join(format!("{server}.catalog.json"));
    std::fs::write(&path, tools.to_string()).unwrap();
    path
}

#[tokio::test]
async fn an_operator_watches_cancels_and_approves_in_a_browser() {
    let (d, addr) = tcp_daemon(json!({})).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;

    log_in(&b, &addr).await;

    // A server (and its tools) appear when config.json changes; one trusts no new tool.
    let dir = d.dir.path();
    let fx = catalog(
        dir,
        "fx",
        json!([{"name": "weather", "description": "Get the weather."}]),
    );
    let nu = catalog(dir, "nu", json!([{"name": "w", "description": "Weather."}]));
    let config = json!({
        "listen": {"tcp": "127.0.0.1:0"},
        "mcp_servers": {
            "fx": {"command": FIXTURE, "env": {"FIXTURE_CATALOG_FILE": fx}, "include_tools": ["weather"]},
            "nu": {"command": FIXTURE, "env": {"FIXTURE_CATALOG_FILE": nu}, "include_tools": ["w"], "trust": "quarantine_new"},
        }
    });
    write_atomic(&d.config_path(), &config);
    shown(&b, r#"tr[data-server="fx"] td.state-ready"#).await;
    // The servers' table is redrawn as their state arrives: read the cell afresh each time.
    eventually(30, "the server's process", || async {
        let cell = shown(&b, r#"tr[data-server="fx"] td:nth-child(4)"#).await;
        cell.text().await.is_ok_and(|t| t.starts_with("pid "))
    })
    .await;
    shown(&b, r#"tr[data-tool="mcp_fx_weather"]"#).await;
    shown(&b, r#"[data-quarantined="mcp_nu_w"]"#).await;

    // A running command, cancelled with its button: its process is gone.
    let pid_file = d.workspace().join("sleep.pid");
    let command = format!("sleep 300 & echo $! > '{}'; wait", pid_file.display());
    let client = d.client().await;
    let call = tokio::spawn(async move {
        let params = toolhost::protocol::InvokeParams {
            name: "bash".into(),
            arguments: Some(args(json!({"command": command}))),
            call_id: Some("ui-sleep".into()),
            ..Default::default()
        };
        client.invoke(&params).await.unwrap()
    });
    eventually(20, "the sleep to start", || {
        let f = pid_file.clone();
        async move { std::fs::read_to_string(f).is_ok_and(|t| t.ends_with('\n')) }
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    click(&b, r#"tr[data-call="ui-sleep"] button"#).await;
    let ended = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ended.result.error_kind,
        Some(toolhost::protocol::ErrorKind::Cancelled),
        "{ended:?}"
    );
    eventually(20, "the sleep to be gone", || async move { !alive(pid) }).await;
    gone(&b, r#"tr[data-call="ui-sleep"]"#).await;

    // A strict session's command waits in the queue; allowed once from the page, it runs
    // for its caller.
    let session = d
        .call("session.create", json!({"approval": "strict"}))
        .await;
    let session = session["result"]["id"].as_str().unwrap().to_owned();
    let client = d.client().await;
    let waiting = tokio::spawn(async move {
        let params = toolhost::protocol::InvokeParams {
            session_id: Some(session),
            call_id: Some("ui-held".into()),
            ..toolhost::protocol::InvokeParams::new(
                "bash",
                args(json!({"command": "echo allowed from the page"})),
            )
        };
        client.invoke(&params).await.unwrap()
    });
    shown(&b, r#"[data-approval][data-call="ui-held"] pre"#).await;
    let shot = b.screenshot().await.unwrap();
    std::fs::create_dir_all(screenshot_dir()).unwrap();
    std::fs::write(screenshot_dir().join("operator-page-approval.png"), shot).unwrap();
    click(
        &b,
        r#"[data-approval][data-call="ui-held"] button.allow-once"#,
    )
    .await;
    let done = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(done.result.ok, "{done:?}");
    assert!(
        format!("{:?}", done.result.output).contains("allowed from the page"),
        "{done:?}"
    );
    gone(&b, r#"[data-approval][data-call="ui-held"]"#).await;
    // The audit log says who decided, and from where.
    click(&b, r#"tr[data-audit="ui-held"]"#).await;
    let said = text_of(&b, r#"tr[data-audit="ui-held"] + tr.detail"#).await;
    assert!(
        said.contains("allow once by") && said.contains("via ui"),
        "{said}"
    );

    // The quarantined tool, approved from its card: listed and callable.
    click(&b, r#"[data-quarantined="mcp_nu_w"] button"#).await;
    gone(&b, r#"[data-quarantined="mcp_nu_w"]"#).await;
    shown(&b, r#"tr[data-tool="mcp_nu_w"]"#).await;
    assert_eq!(d.invoke("mcp_nu_w", json!({})).await["ok"], true);
    // The cancelled call is in the audit log's table.
    shown(&b, r#"tr[data-audit="ui-sleep"]"#).await;

    std::fs::create_dir_all(screenshot_dir()).unwrap();
    let png = b.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join("operator-page.png"), png).unwrap();
    b.close().await.unwrap();
}

/// At 1400 px (the driver's window) no table clips a column: a failed server's long error,
/// a deep workspace and a long session id wrap inside their cells, and a card with nothing
/// in it (no trust decision waiting, no quarantined tool) takes no column.
#[tokio::test]
async fn at_1400_px_no_table_is_clipped_and_empty_cards_take_no_column() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let long_path = "a-rather-long-mcp-endpoint-path-segment".repeat(4);
    let (d, addr) = tcp_daemon(json!({"mcp_servers": {
        "an-http-server-with-a-long-name": {"url": format!("http://127.0.0.1:{port}/{long_path}")},
    }}))
    .await;
    let deep = d
        .dir
        .path()
        .join("projects/a-client-with-a-long-name/services/the-payments-service-monorepo");
    std::fs::create_dir_all(&deep).unwrap();
    d.session(json!({"workspace": deep})).await;
    let driver = Driver::start().await;
    let b = driver.browser().await;
    log_in(&b, &addr).await;
    shown(
        &b,
        r#"tr[data-server="an-http-server-with-a-long-name"] + tr.detail td.error"#,
    )
    .await;
    shown(&b, "#sessions-rows tr td.mono").await;

    let width = b.execute("return window.innerWidth", vec![]).await.unwrap();
    assert_eq!(width, 1400, "the driver's window");
    // Every shown section's content fits its box; which sections are shown, and where.
    let layout = b
        .execute(
            r#"return [...document.querySelectorAll("main > section")].map((s) => ({
                id: s.id,
                shown: s.offsetParent !== null,
                clipped: s.scrollWidth > s.clientWidth + 1,
                width: s.clientWidth,
            }));"#,
            vec![],
        )
        .await
        .unwrap();
    let sections = layout.as_array().unwrap();
    for s in sections.iter().filter(|s| s["shown"] == true) {
        assert_eq!(s["clipped"], false, "{s} in {layout}");
    }
    let shown_ids: Vec<&str> = sections
        .iter()
        .filter(|s| s["shown"] == true)
        .filter_map(|s| s["id"].as_str())
        .collect();
    for empty in ["trust", "quarantine"] {
        assert!(!shown_ids.contains(&empty), "{empty} is empty: {layout}");
    }
    for wanted in ["servers", "sessions", "tools", "config", "audit"] {
        assert!(shown_ids.contains(&wanted), "{wanted}: {layout}");
    }
    std::fs::create_dir_all(screenshot_dir()).unwrap();
    let png = b.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join("operator-page-1400.png"), png).unwrap();
    b.close().await.unwrap();
}

/// The page hides ephemeral sessions (a probe's, a bridge's own) until the operator asks
/// with the "show ephemeral (N)" toggle.
#[tokio::test]
async fn the_page_hides_ephemeral_sessions_until_asked() {
    let (d, addr) = tcp_daemon(json!({})).await;
    let kept = d.session(json!({})).await;
    // An ephemeral session lives as long as its caller's connection: this one stays open.
    let mut caller = common::RawLines::connect(&d.socket()).await;
    let r = caller
        .call("session.create", json!({"ephemeral": true}))
        .await;
    let ephemeral = r["result"]["id"].as_str().unwrap().to_owned();
    let listed = d.call("session.list", json!({})).await;
    let sessions = listed["result"]["sessions"].as_array().unwrap();
    let of = |id: &str| {
        sessions
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {listed}"))
            .clone()
    };
    assert_eq!(of(&ephemeral)["ephemeral"], true, "{listed}");

    let driver = Driver::start().await;
    let b = driver.browser().await;
    log_in(&b, &addr).await;
    let row = format!(r#"#sessions-rows tr[data-session="{kept}"]"#);
    shown(&b, &row).await;
    assert_eq!(
        text_of(&b, "#sessions-ephemeral").await,
        "show ephemeral (1)"
    );
    let hidden = format!(r#"#sessions-rows tr[data-session="{ephemeral}"]"#);
    assert!(b.find_all(Locator::Css(&hidden)).await.unwrap().is_empty());
    click(&b, "#sessions-ephemeral").await;
    assert!(text_of(&b, &hidden).await.contains("ephemeral"));
    assert_eq!(
        text_of(&b, "#sessions-ephemeral").await,
        "hide ephemeral (1)"
    );
    b.close().await.unwrap();
}

/// A session a program made on the socket shows its frontend on the page: its client name
/// and the frontend's id.
#[tokio::test]
async fn the_page_names_a_socket_sessions_frontend() {
    let (d, addr) = tcp_daemon(json!({})).await;
    let r = d
        .call("session.create", json!({"meta": {"client": "my-agent"}}))
        .await;
    let session = r["result"]["id"].as_str().unwrap().to_owned();
    let frontend = r["result"]["meta"]["frontend_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let driver = Driver::start().await;
    let b = driver.browser().await;
    log_in(&b, &addr).await;
    let row = format!(r#"#sessions-rows tr[data-session="{session}"]"#);
    let text = text_of(&b, &row).await;
    assert!(text.contains("my-agent"), "{text}");
    let id = text_of(&b, &format!("{row} .frontend-id")).await;
    assert_eq!(id, format!("frontend {frontend}"));
    b.close().await.unwrap();
}

/// The trust card's buttons, at the driver's 1400 px: "Approve" admits one waiting item (its
/// tool is listed, its card goes), "Trust this folder" admits a whole workspace (the folder
/// is trusted, the emptied card takes no column).
#[tokio::test]
async fn the_trust_cards_buttons_approve_an_item_and_trust_a_folder() {
    let (d, addr) = tcp_daemon(json!({})).await;
    let tool = d.workspace().join(".toolhost/tools/greeter");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::write(tool.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        tool.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    write_atomic(
        &tool.join("tool.json"),
        &json!({"name": "greeter", "description": "- greets", "command": ["./run.sh"], "approval": "read_only"}),
    );
    let other = d.subdir("cloned");
    let skill = other.join(".toolhost/skills/demo");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: demo\ndescription: A demo.\n---\nDo it.\n",
    )
    .unwrap();
    d.session(json!({"workspace": other})).await;
    eventually(20, "both items waiting", || async {
        d.trust_waiting().await == [".toolhost/skills/demo", ".toolhost/tools/greeter"]
    })
    .await;

    let driver = Driver::start().await;
    let b = driver.browser().await;
    log_in(&b, &addr).await;
    let card = |path: &Path| format!(r#"#trust-list [data-trust="{}"]"#, path.display());
    click(&b, &format!("{} button.primary", card(&tool))).await;
    eventually(20, "the tool approved and listed", || async {
        let listed = d.call("list_tools", json!({})).await;
        d.trust_waiting().await == [".toolhost/skills/demo"]
            && listed["result"]["meta"].get("greeter").is_some()
    })
    .await;
    let gone = |css: String| {
        let b = b.clone();
        async move { b.find(Locator::Css(&css)).await.is_err() }
    };
    eventually(20, "the approved item's card gone", || gone(card(&tool))).await;

    click(&b, &format!("{} button:not(.primary)", card(&skill))).await;
    eventually(20, "the folder trusted", || async {
        let t = d.call("trust.list", json!({})).await;
        let folder = other.canonicalize().unwrap().display().to_string();
        d.trust_waiting().await.is_empty()
            && t["result"]["folders"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| *f == folder.as_str()))
    })
    .await;
    eventually(20, "the emptied trust card hidden", || async {
        b.execute("return document.getElementById('trust').hidden", vec![])
            .await
            .unwrap()
            == json!(true)
    })
    .await;
    b.close().await.unwrap();
}
