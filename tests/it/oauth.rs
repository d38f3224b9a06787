//! OAuth end to end against an authorization server and a protected MCP resource that live
//! in this test (rmcp's streamable HTTP server behind a small hyper front that checks
//! bearer tokens): sign-in through `toolhost mcp login`, refresh before expiry and on 401,
//! step-up on `insufficient_scope`, logout, token file permissions, a reload that drops
//! tokens, and that tokens reach no log, status or child environment. The provider has a
//! second authorization server (issuer `<base>/as2`) for a migration, and can send, omit
//! or forge RFC 9207's `iss` on its authorization responses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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
    /// The authorization server the resource names and takes tokens of: `""` (the
    /// provider's origin is its issuer) or `"/as2"`.
    current_as: String,
    /// The authorization server that issued each access token.
    token_as: HashMap<String, String>,
    /// The secret dynamic registration issues (none: a public client).
    registration_secret: Option<String>,
    /// The secret of each registered confidential client: a token request that
    /// authenticates with another is refused (`invalid_client`).
    client_secrets: HashMap<String, String>,
    /// What the metadata says of `iss`, and what the authorization response carries.
    iss_supported: bool,
    iss: Iss,
    /// Every request each authorization server saw, as `<as> <what> <details>` (a token
    /// request's `Basic` credentials decoded), to look for credentials of the other one.
    seen: Vec<String>,
}

/// The `iss` parameter of an authorization response.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Iss {
    #[default]
    Omitted,
    /// The issuer of the authorization server that answers.
    Correct,
    /// Another issuer's (a mix-up attack).
    Wrong,
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
    // The second authorization server's endpoints are the first's under `/as2`.
    let (auth_server, endpoint) = match path.strip_prefix("/as2/") {
        Some(rest) => ("/as2", format!("/{rest}")),
        None => ("", path.clone()),
    };
    let issuer = format!("{base}{auth_server}");
    Ok(match endpoint.as_str() {
        "/.well-known/oauth-protected-resource/mcp" | "/.well-known/oauth-protected-resource"
            if auth_server.is_empty() =>
        {
            let current = format!("{base}{}", state.lock().unwrap().current_as);
            reply(
                200,
                &[],
                json!({"resource": format!("{base}/mcp"), "authorization_servers": [current],
                       "scopes_supported": ["read", "write"]}),
            )
        }
        "/.well-known/oauth-authorization-server"
        | "/.well-known/oauth-authorization-server/as2" => {
            // RFC 8414 path insertion: `<origin>/.well-known/…/as2` describes `<origin>/as2`.
            let prefix = path.strip_prefix("/.well-known/oauth-authorization-server");
            let issuer = format!("{base}{}", prefix.unwrap_or(""));
            let iss_supported = state.lock().unwrap().iss_supported;
            reply(
                200,
                &[],
                json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/authorize"),
                       "token_endpoint": format!("{issuer}/token"),
                       "registration_endpoint": format!("{issuer}/register"),
                       "response_types_supported": ["code"],
                       "grant_types_supported": ["authorization_code", "refresh_token"],
                       "code_challenge_methods_supported": ["S256"],
                       "token_endpoint_auth_methods_supported": ["none"],
                       "authorization_response_iss_parameter_supported": iss_supported}),
            )
        }
        "/register" => {
            let body: Value =
                serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes())
                    .unwrap();
            let mut st = state.lock().unwrap();
            st.next += 1;
            let client_id = format!("client{}-{}", auth_server.replace('/', "-"), st.next);
            st.seen.push(format!("{auth_server} register {body}"));
            let mut registered =
                json!({"client_id": client_id, "redirect_uris": body["redirect_uris"]});
            if let Some(secret) = st.registration_secret.clone() {
                registered["client_secret"] = json!(secret);
                st.client_secrets.insert(client_id, secret);
            }
            reply(201, &[], registered)
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
            st.seen.push(format!(
                "{auth_server} authorize client_id={}",
                query["client_id"]
            ));
            let mut location = reqwest::Url::parse(&query["redirect_uri"]).unwrap();
            location
                .query_pairs_mut()
                .append_pair("code", &code)
                .append_pair("state", &query["state"]);
            match st.iss {
                Iss::Omitted => {}
                Iss::Correct => {
                    location.query_pairs_mut().append_pair("iss", &issuer);
                }
                Iss::Wrong => {
                    location
                        .query_pairs_mut()
                        .append_pair("iss", "https://evil.example.com");
                }
            }
            hyper::Response::builder()
                .status(302)
                .header("location", location.as_str())
                .body(full(Bytes::new()))
                .unwrap()
        }
        "/token" => {
            let basic = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Basic "))
                .and_then(|b| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(b).ok()
                })
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let f = form(&body);
            let mut st = state.lock().unwrap();
            st.seen.push(format!(
                "{auth_server} token basic={basic} {}",
                String::from_utf8_lossy(&body)
            ));
            if let Some((id, secret)) = basic.split_once(':') {
                if st.client_secrets.get(id).is_some_and(|s| s != secret) {
                    return Ok(reply(401, &[], json!({"error": "invalid_client"})));
                }
            }
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
                    st.token_as.insert(access.clone(), auth_server.to_owned());
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
            // Only the current authorization server's tokens count.
            let scopes = token.and_then(|t| {
                let st = state.lock().unwrap();
                (st.token_as.get(&t) == Some(&st.current_as))
                    .then(|| st.access.get(&t).cloned())
                    .flatten()
            });
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

/// `toolhost mcp login notes`, with a "browser" that just follows the redirects: whether it
/// succeeded, and what it printed.
async fn try_login(d: &Daemon) -> (bool, String) {
    let out = common::toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["mcp", "login", "notes"])
        .env("BROWSER", "curl -s -L -o /dev/null")
        .output()
        .await
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

async fn login(d: &Daemon) {
    let (ok, printed) = try_login(d).await;
    assert!(ok, "login failed: {printed}");
    assert!(printed.contains("/authorize?"), "{printed}");
    assert!(printed.contains("Signed in to 'notes'"), "{printed}");
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
    // The test polls one call until a refresh happens: the built-in loop breaker, which
    // stops a model repeating itself, is off for it.
    let mut cfg = config(&p.url());
    cfg["guards"] = json!([{"name": "default-loop", "enabled": false}]);
    let d = Daemon::start_with(Some(cfg)).await;
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

/// The stored credentials' issuer (`credentials.issuer` of the one token file).
fn stored_issuer(d: &Daemon) -> Value {
    let files = token_files(d);
    assert_eq!(files.len(), 1, "{files:?}");
    let file: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    file["credentials"]["issuer"].clone()
}

#[tokio::test]
async fn authorization_response_iss_is_checked() {
    let p = Provider::start(3600).await;
    let d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    let token_requests = |p: &Provider| {
        p.state()
            .seen
            .iter()
            .filter(|s| s.contains(" token "))
            .count()
    };

    // RFC 9207: a response naming another issuer is refused before the code is spent,
    // whether or not the metadata advertises `iss` (a mix-up attack).
    for (supported, iss) in [
        (true, Iss::Wrong),
        (false, Iss::Wrong),
        (true, Iss::Omitted),
    ] {
        {
            let mut st = p.state();
            (st.iss_supported, st.iss) = (supported, iss);
        }
        let (ok, printed) = try_login(&d).await;
        assert!(
            !ok,
            "sign-in with {iss:?} (advertised: {supported}) accepted: {printed}"
        );
        assert!(
            printed.contains("not from the expected authorization server"),
            "{printed}"
        );
        assert_eq!(token_requests(&p), 0, "the code went to the token endpoint");
        assert!(token_files(&d).is_empty());
        assert_eq!(server_state(&d).await["state"], "auth_required");
    }

    // The right issuer, advertised and sent: signed in.
    p.state().iss = Iss::Correct;
    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(stored_issuer(&d), json!(p.base));

    // Not advertised and not sent (an older authorization server): accepted too.
    d.call("mcp.logout", json!({"name": "notes"})).await;
    {
        let mut st = p.state();
        (st.iss_supported, st.iss) = (false, Iss::Omitted);
    }
    login(&d).await;
    wait_state(&d, "ready").await;
}

/// The resource moves to another authorization server: the next sign-in registers anew
/// there, and nothing of the first server's client (its ID, the secret its registration
/// issued) is ever sent to the second, at sign-in or at refresh.
#[tokio::test]
async fn authorization_server_migration_reauthorizes() {
    let p = Provider::start(3600).await;
    p.state().registration_secret = Some("as1-registration-secret".to_owned());
    let d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(stored_issuer(&d), json!(p.base));
    let first_client = p
        .state()
        .seen
        .iter()
        .find_map(|s| s.strip_prefix(" authorize client_id=").map(str::to_owned))
        .unwrap();

    // The resource now names `<base>/as2` and takes only its tokens; its clients are public.
    {
        let mut st = p.state();
        st.current_as = "/as2".to_owned();
        st.registration_secret = None;
    }
    let r = d.invoke("mcp_notes_hello", json!({})).await;
    assert_eq!(r["ok"], false, "{r}");
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;
    assert_eq!(stored_issuer(&d), json!(format!("{}/as2", p.base)));

    // A refresh at the new server (the access token revoked).
    let refreshes = p.state().refreshes;
    p.state().access.clear();
    let r = d.invoke("mcp_notes_hello", json!({})).await;
    assert_eq!(r, json!({"ok": true, "output": "hello done"}));
    assert_eq!(p.state().refreshes, refreshes + 1);

    let seen = p.state().seen.clone();
    let at_as2: Vec<&String> = seen.iter().filter(|s| s.starts_with("/as2 ")).collect();
    assert!(
        at_as2.iter().any(|s| s.starts_with("/as2 register ")),
        "{seen:#?}"
    );
    assert!(
        at_as2
            .iter()
            .any(|s| s.contains("grant_type=refresh_token")),
        "{seen:#?}"
    );
    for s in &at_as2 {
        assert!(
            !s.contains(&first_client),
            "the first server's client ID at the second: {s}"
        );
        assert!(
            !s.contains("as1-registration-secret"),
            "the first server's secret at the second: {s}"
        );
    }
    // Dynamic registration says what kind of client this is (a native app: loopback
    // redirects).
    for s in seen.iter().filter(|s| s.contains(" register ")) {
        assert!(s.contains(r#""application_type":"native""#), "{s}");
    }
}

/// A sign-in started and never finished registers a new client, but the tokens stored are
/// still the old client's: refreshing them, after a restart too, keeps using the old
/// client's secret.
#[tokio::test]
async fn an_abandoned_sign_in_keeps_the_working_client() {
    let p = Provider::start(3600).await;
    p.state().registration_secret = Some("first-secret".to_owned());
    let mut d = Daemon::start_with(Some(config(&p.url()))).await;
    wait_state(&d, "auth_required").await;
    login(&d).await;
    wait_state(&d, "ready").await;

    // The first half of a sign-in only: a new client with another secret is registered.
    p.state().registration_secret = Some("second-secret".to_owned());
    let r = d
        .call(
            "mcp.login",
            json!({"name": "notes", "redirect_uri": "http://127.0.0.1:9/callback"}),
        )
        .await;
    assert!(r["result"]["authorization_url"].is_string(), "{r}");

    // A restart reads the client's secret back from the token file.
    d.stop().await;
    d.spawn(&[]).await;
    wait_state(&d, "ready").await;
    let refreshes = p.state().refreshes;
    p.state().access.clear();
    let r = d.invoke("mcp_notes_hello", json!({})).await;
    assert_eq!(r, json!({"ok": true, "output": "hello done"}));
    // The call worked through a refresh with the first client's secret; a request of the
    // server's own session (its listing, its change feed) may refresh beside it.
    assert!(
        p.state().refreshes > refreshes,
        "the call refreshed the token"
    );
}
