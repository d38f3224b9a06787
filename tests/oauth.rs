//! OAuth end to end against an authorization server and a protected MCP resource that live
//! in this test (rmcp's streamable HTTP server behind a small hyper front that checks
//! bearer tokens): sign-in through `toolhost mcp login`, refresh before expiry and on 401,
//! step-up on `insufficient_scope`, logout, token file permissions, a reload that drops
//! tokens, and that tokens reach no log, status or child environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use common::{eventually, Daemon};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// The protected MCP server: `hello` needs scope `read`, `write_note` needs `write`.
#[derive(Clone)]
struct Notes;

impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("notes", "1"))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = Arc::new(JsonObject::from_iter([("type".into(), json!("object"))]));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("hello", "Says hello", schema.clone()),
            Tool::new("write_note", "Needs the write scope", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = format!("{} done", request.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// What the authorization server did and holds.
#[derive(Default)]
struct AuthState {
    /// Live access tokens and their scopes.
    access: HashMap<String, Vec<String>>,
    refresh: HashMap<String, Vec<String>>,
    /// Every token ever issued (to look for leaks).
    issued: Vec<String>,
    codes: HashMap<String, Vec<String>>,
    /// `scope` of each authorization request.
    authorize_scopes: Vec<String>,
    refreshes: usize,
    next: usize,
    /// `expires_in` of new access tokens.
    expires_in: u64,
}

type Shared = Arc<Mutex<AuthState>>;

struct Provider {
    base: String,
    state: Shared,
}

impl Provider {
    async fn start(expires_in: u64) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state: Shared = Arc::new(Mutex::new(AuthState {
            expires_in,
            ..Default::default()
        }));
        let mcp = StreamableHttpService::new(
            || Ok(Notes),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let (b, s) = (base.clone(), state.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (base, state, mcp) = (b.clone(), s.clone(), mcp.clone());
                tokio::spawn(async move {
                    let handler = hyper::service::service_fn(move |req| {
                        route(req, base.clone(), state.clone(), mcp.clone())
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, handler)
                        .await;
                });
            }
        });
        Provider { base, state }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AuthState> {
        self.state.lock().unwrap()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|e| match e {})
        .boxed_unsync()
}

fn reply(status: u16, headers: &[(&str, &str)], body: Value) -> hyper::Response<Body> {
    let mut r = hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(full(body.to_string())).unwrap()
}

/// A form body or query string as a map (parsed as a URL's query).
fn form(body: &[u8]) -> HashMap<String, String> {
    let url = format!("http://x/?{}", String::from_utf8_lossy(body));
    reqwest::Url::parse(&url)
        .map(|u| u.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

async fn route(
    req: hyper::Request<hyper::body::Incoming>,
    base: String,
    state: Shared,
    mcp: StreamableHttpService<Notes, LocalSessionManager>,
) -> Result<hyper::Response<Body>, std::convert::Infallible> {
    let path = req.uri().path().to_owned();
    let query = form(req.uri().query().unwrap_or("").as_bytes());
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    Ok(match path.as_str() {
        "/.well-known/oauth-protected-resource/mcp" | "/.well-known/oauth-protected-resource" => {
            reply(
                200,
                &[],
                json!({"resource": format!("{base}/mcp"), "authorization_servers": [base],
                       "scopes_supported": ["read", "write"]}),
            )
        }
        "/.well-known/oauth-authorization-server" => reply(
            200,
            &[],
            json!({"issuer": base, "authorization_endpoint": format!("{base}/authorize"),
                   "token_endpoint": format!("{base}/token"),
                   "registration_endpoint": format!("{base}/register"),
                   "response_types_supported": ["code"],
                   "grant_types_supported": ["authorization_code", "refresh_token"],
                   "code_challenge_methods_supported": ["S256"],
                   "token_endpoint_auth_methods_supported": ["none"]}),
        ),
        "/register" => {
            let body: Value =
                serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes())
                    .unwrap();
            reply(
                201,
                &[],
                json!({"client_id": "toolhost-client", "redirect_uris": body["redirect_uris"]}),
            )
        }
        "/authorize" => {
            assert_eq!(
                query.get("code_challenge_method").map(String::as_str),
                Some("S256")
            );
            assert_eq!(query.get("resource"), Some(&format!("{base}/mcp")));
            let scope = query.get("scope").cloned().unwrap_or_default();
            let mut st = state.lock().unwrap();
            st.next += 1;
            let code = format!("code-{}", st.next);
            st.codes.insert(
                code.clone(),
                scope.split_whitespace().map(str::to_owned).collect(),
            );
            st.authorize_scopes.push(scope);
            let location = format!(
                "{}?code={code}&state={}",
                query["redirect_uri"], query["state"]
            );
            hyper::Response::builder()
                .status(302)
                .header("location", location)
                .body(full(Bytes::new()))
                .unwrap()
        }
        "/token" => {
            let f = form(&req.into_body().collect().await.unwrap().to_bytes());
            let mut st = state.lock().unwrap();
            let scopes = match f.get("grant_type").map(String::as_str) {
                Some("authorization_code") => {
                    assert!(f.contains_key("code_verifier"));
                    st.codes.remove(&f["code"])
                }
                Some("refresh_token") => {
                    st.refreshes += 1;
                    st.refresh.remove(&f["refresh_token"])
                }
                _ => None,
            };
            match scopes {
                None => reply(400, &[], json!({"error": "invalid_grant"})),
                Some(scopes) => {
                    st.next += 1;
                    let (access, refresh) = (
                        format!("access-secret-{}", st.next),
                        format!("refresh-secret-{}", st.next),
                    );
                    st.access.insert(access.clone(), scopes.clone());
                    st.refresh.insert(refresh.clone(), scopes.clone());
                    st.issued.push(access.clone());
                    st.issued.push(refresh.clone());
                    reply(
                        200,
                        &[],
                        json!({"access_token": access, "token_type": "Bearer",
                               "expires_in": st.expires_in, "refresh_token": refresh,
                               "scope": scopes.join(" ")}),
                    )
                }
            }
        }
        "/mcp" => {
            let token = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned);
            let scopes = token.and_then(|t| state.lock().unwrap().access.get(&t).cloned());
            let Some(scopes) = scopes else {
                let challenge = format!(
                    "Bearer error=\"invalid_token\", resource_metadata=\"{metadata_url}\", scope=\"read\""
                );
                return Ok(reply(401, &[("www-authenticate", &challenge)], json!({})));
            };
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let wants_write = String::from_utf8_lossy(&bytes).contains("\"write_note\"");
            if wants_write && !scopes.iter().any(|s| s == "write") {
                let challenge = format!(
                    "Bearer error=\"insufficient_scope\", scope=\"read write\", resource_metadata=\"{metadata_url}\""
                );
                return Ok(reply(403, &[("www-authenticate", &challenge)], json!({})));
            }
            let req = hyper::Request::from_parts(parts, Full::new(bytes));
            let resp = tower::ServiceExt::oneshot(mcp, req).await.unwrap();
            // Streamed through (the GET stream stays open).
            resp.map(|b| {
                b.map_err(|e| -> BoxError { e.to_string().into() })
                    .boxed_unsync()
            })
        }
        _ => reply(404, &[], json!({})),
    })
}

async fn server_state(d: &Daemon) -> Value {
    d.call("mcp.status", json!({"server": "notes"})).await["result"]["servers"][0].clone()
}

async fn wait_state(d: &Daemon, want: &str) {
    eventually(20, &format!("notes becomes {want}"), || async {
        server_state(d).await["state"] == want
    })
    .await;
}

/// `toolhost mcp login notes`, with a "browser" that just follows the redirects.
async fn login(d: &Daemon) {
    let out = common::toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["mcp", "login", "notes"])
        .env("BROWSER", "curl -s -L -o /dev/null")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "login failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("/authorize?"), "{stdout}");
    assert!(stdout.contains("Signed in to 'notes'"), "{stdout}");
}

fn token_files(d: &Daemon) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(d.data_dir().join("oauth")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn config(url: &str) -> Value {
    json!({"mcp_servers": {"notes": {"url": url, "startup_timeout_ms": 10000}}})
}

#[tokio::test]
async fn sign_in_refresh_logout_and_no_leaks() {
    let p = Provider::start(3600).await;
    let d = Daemon::start_with(Some(config(&p.url()))).await;

    // Not signed in: the server waits for the user, with a hint, and is not retried.
    wait_state(&d, "auth_required").await;
    let s = server_state(&d).await;
    assert_eq!(
        s["last_error"],
        "the server requires sign-in: run `toolhost mcp login notes`"
    );

    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(p.state().authorize_scopes, vec!["read".to_owned()]);
    let r = d.invoke("mcp_notes_hello", json!({})).await;
    assert_eq!(r, json!({"ok": true, "output": "hello done"}));

    // One token file, 0600 in a 0700 directory.
    let files = token_files(&d);
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&d.data_dir().join("oauth")), 0o700);

    // The server revokes the access token: the next call gets a 401, refreshes, retries.
    let before = p.state().refreshes;
    p.state().access.clear();
    let r = d.invoke("mcp_notes_hello", json!({})).await;
    assert_eq!(r, json!({"ok": true, "output": "hello done"}));
    assert_eq!(p.state().refreshes, before + 1);

    // Tokens reach no child, status, config status or log.
    let env = d
        .invoke("bash", json!({"command": "env"}))
        .await
        .to_string();
    let status = d.call("mcp.status", json!({})).await.to_string();
    let config_status = d.call("config.status", json!({})).await.to_string();
    let log = d.log();
    for token in p.state().issued.clone() {
        for (what, text) in [
            ("env", &env),
            ("status", &status),
            ("config", &config_status),
            ("log", &log),
        ] {
            assert!(!text.contains(&token), "{what} leaks a token");
        }
    }

    // Logout: the file goes, and the server asks for sign-in again.
    let out = common::toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["mcp", "logout", "notes"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    assert!(token_files(&d).is_empty());
    wait_state(&d, "auth_required").await;
}

#[tokio::test]
async fn refresh_before_expiry() {
    // Tokens live 2 s; rmcp refreshes within the last half of a token's life.
    let p = Provider::start(2).await;
    let d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(p.state().refreshes, 0);
    eventually(10, "a refresh before expiry", || async {
        let r = d.invoke("mcp_notes_hello", json!({})).await;
        assert_eq!(r, json!({"ok": true, "output": "hello done"}));
        p.state().refreshes > 0
    })
    .await;
}

#[tokio::test]
async fn step_up_on_insufficient_scope() {
    let p = Provider::start(3600).await;
    let d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;

    let r = d.invoke("mcp_notes_write_note", json!({})).await;
    assert_eq!(
        r,
        json!({"ok": false, "error_kind": "unavailable", "error":
            "the server requires more access (scope read write): run `toolhost mcp login notes`"})
    );
    assert_eq!(server_state(&d).await["state"], "auth_required");

    login(&d).await;
    wait_state(&d, "ready").await;
    let scopes = p.state().authorize_scopes.clone();
    assert_eq!(scopes.len(), 2);
    assert!(
        scopes[1].split_whitespace().any(|s| s == "write"),
        "{scopes:?}"
    );
    let r = d.invoke("mcp_notes_write_note", json!({})).await;
    assert_eq!(r, json!({"ok": true, "output": "write_note done"}));
}

#[tokio::test]
async fn reload_with_a_new_url_drops_tokens() {
    let p = Provider::start(3600).await;
    let d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(token_files(&d).len(), 1);

    let moved = format!("{}?v=2", p.url());
    std::fs::write(d.config_path(), config(&moved).to_string()).unwrap();
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    wait_state(&d, "auth_required").await;
    assert!(token_files(&d).is_empty());
}
