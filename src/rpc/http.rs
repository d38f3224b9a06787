//! HTTP/1.1 on a connection: the bearer check (TCP), the router (`/ui`, `/mcp`,
//! `GET /health`, `GET /metrics`, a WebSocket upgrade, a JSON-RPC POST) and the POST
//! framing.

use std::sync::Arc;

use subtle::ConstantTimeEq;

use futures::future::BoxFuture;
use futures::FutureExt;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tokio::io::{AsyncRead, AsyncWrite};

use super::admission::{Pending, Ticket};
use super::connection::{no_room, not_utf8, too_big, Session};
use super::envelope;
use super::frame_budget::Share;
use super::head_timeout::{HeadClock, HeadTimeout};
use super::websocket::upgrade;
use super::Shared;
use crate::audit::{Caller, Presented};
use crate::metrics::Framing;
use crate::protocol::codes;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The largest request head (request line and headers) hyper buffers; a longer one is
/// answered 431. hyper's default, about 400 KiB, let every open connection hold that much
/// outside the frame budget (`frame_budget`) while its head arrived.
const MAX_HEAD: usize = 64 * 1024;

/// The TCP listener's bearer tokens, each with its name (`listen.tokens`; `default` for
/// `listen.token_file` and `TOOLHOST_TOKEN`).
pub type Tokens = Arc<[(Arc<str>, Arc<str>)]>;

/// The bearer tokens a TCP connection may present, and its place among the connections
/// that have not yet done so (`admission`).
pub(super) struct Bearer {
    tokens: Tokens,
    /// In fleet mode, the users' tokens too ([`crate::fleet::Fleet::user_of`]).
    fleet: Option<crate::fleet::Fleet>,
    pending: Pending,
}

impl Bearer {
    pub(super) fn new(
        tokens: Tokens,
        fleet: Option<crate::fleet::Fleet>,
        pending: Pending,
    ) -> Bearer {
        Bearer {
            tokens,
            fleet,
            pending,
        }
    }

    /// The token `req` carries; the first request that carries one authenticates the
    /// connection.
    fn admits<B>(&self, req: &HttpRequest<B>) -> Option<Presented> {
        let name = self.token_of(req);
        if name.is_some() {
            self.let_in();
        }
        name
    }

    /// The token `req` carries. Every token is compared (in constant time), so the time
    /// taken says nothing of which one came close; a user's token of the fleet is found
    /// by its SHA-256 and named `user:<user>`, with its roles.
    pub(super) fn token_of<B>(&self, req: &HttpRequest<B>) -> Option<Presented> {
        let given = bearer_of(req)?;
        let mut found = None;
        for (name, token) in self.tokens.iter() {
            if given.as_bytes().ct_eq(token.as_bytes()).into() {
                found = Some(name.clone());
            }
        }
        if let Some(name) = found {
            return Some(Presented {
                name,
                roles: Vec::new(),
            });
        }
        let user = self.fleet.as_ref()?.user_of(given)?;
        Some(Presented {
            name: crate::audit::user_token_name(&user.name).into(),
            roles: user.roles.clone(),
        })
    }

    /// Counts the connection as authenticated: it presented the token or, for the
    /// operator's page, a page token or login code (`rpc/ui.rs`).
    pub(super) fn let_in(&self) {
        self.pending.spoke();
    }
}

/// Serves HTTP/1.1 (and WebSocket upgrades) on `io`. `ticket` is the connection's slot,
/// which a WebSocket keeps after the upgrade; `bearer` demands a token (TCP).
pub(super) async fn serve_http<I>(
    io: I,
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    bearer: Option<Bearer>,
    caller: Option<Arc<Caller>>,
) where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let _open = shared.host.metrics().connection(Framing::http);
    let stop = shared.stop.clone();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        // Slow or partial headers do not hold a connection forever, but idle time between
        // requests is not limited: `HeadTimeout` times a head from its first byte.
        .header_read_timeout(None)
        // A client that half-closes after its last request still gets every response.
        .half_close(true)
        .max_buf_size(MAX_HEAD);
    let clock = Arc::new(HeadClock::default());
    let io = HeadTimeout::new(io, clock.clone(), shared.frame_timeout);
    let conn = builder
        .serve_connection(
            TokioIo::new(io),
            HttpService {
                shared,
                ticket,
                bearer,
                caller,
                clock,
                connection: Arc::new(crate::facade::Connection::new()),
            },
        )
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.shutdown() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%e, "http connection ended with an error");
    }
}

/// Per-connection HTTP service: auth (TCP), `GET /health`, WebSocket upgrade, POST.
struct HttpService {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    bearer: Option<Bearer>,
    caller: Option<Arc<Caller>>,
    clock: Arc<HeadClock>,
    /// This connection as `/mcp` sessions know it (gone with the service, so with the
    /// connection).
    connection: Arc<crate::facade::Connection>,
}

impl hyper::service::Service<HttpRequest<Incoming>> for HttpService {
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Answering;

    fn call(&self, req: HttpRequest<Incoming>) -> Self::Future {
        self.clock.head_read();
        // A request counts as the connection's first word where no token is asked for;
        // on TCP only one that passes the bearer check does (`Bearer::let_in`).
        if let (Some(ticket), None) = (&self.ticket, &self.bearer) {
            ticket.spoke();
        }
        Answering {
            response: self.route(req),
            clock: self.clock.clone(),
        }
    }
}

/// A response on its way; once it is ready, what the connection reads next is a new head.
struct Answering {
    response: BoxFuture<'static, Result<HttpResponse, BoxError>>,
    clock: Arc<HeadClock>,
}

impl std::future::Future for Answering {
    type Output = Result<HttpResponse, BoxError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let ready = self.response.poll_unpin(cx);
        if ready.is_ready() {
            self.clock.answered();
        }
        ready
    }
}

impl HttpService {
    /// Answers one request: `/ui` (its own checks), auth (TCP), `/mcp`, `GET /health`,
    /// `GET /metrics`, a WebSocket upgrade, or a JSON-RPC POST.
    fn route(
        &self,
        req: HttpRequest<Incoming>,
    ) -> BoxFuture<'static, Result<HttpResponse, BoxError>> {
        if crate::ui::is_ui_path(req.uri().path()) {
            // A browser cannot send the bearer token with a page load: the page's files are
            // open, and its data and actions take a page token (see `rpc/ui.rs`).
            let (shared, caller) = (self.shared.clone(), self.caller.clone());
            return super::ui::serve(req, shared, self.bearer.as_ref(), caller);
        }
        let mut token = None;
        if let Some(bearer) = &self.bearer {
            token = bearer.admits(&req);
            if token.is_none() {
                // RFC 6750: a 401 names its scheme, so clients know a bearer token is wanted.
                let mut refused = plain(401, "missing or wrong Authorization: Bearer token\n");
                refused.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
                return ready(refused);
            }
        }
        if req.uri().path() == "/mcp" {
            // The facade calls the daemon as the daemon itself: closed to host-started peers.
            if super::peer::limits(&self.shared.host, self.caller.as_deref()).is_some() {
                return ready(plain(
                    403,
                    "the MCP facade is not open to processes the host started\n",
                ));
            }
            let mut req = req;
            if let Some(t) = token {
                req.extensions_mut()
                    .insert(crate::audit::TokenName(t.name.to_string()));
            }
            let (mcp, connection) = (self.shared.mcp.clone(), self.connection.clone());
            return async move { Ok(mcp.handle(req, &connection).await.map(HttpBody::new)) }
                .boxed();
        }
        if req.method() == hyper::Method::GET && req.uri().path() == "/health" {
            let health = super::ops::health(&self.shared.host);
            // 503 while degraded, so a HEALTHCHECK or a load balancer sees it.
            let status = match health.status {
                crate::protocol::HealthStatus::Ok => 200,
                crate::protocol::HealthStatus::Degraded => 503,
            };
            let body = serde_json::to_string(&health).unwrap_or_default();
            return ready(json(status, body));
        }
        if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
            return ready(super::ops::metrics_response(&self.shared.host));
        }
        let caller = Caller::of_request(self.caller.as_ref(), &req, token.as_ref());
        if jsonrpsee::server::ws::is_upgrade_request(&req) {
            let response = upgrade(req, self.shared.clone(), caller, self.ticket.clone());
            if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                self.clock.upgraded();
            }
            return ready(response);
        }
        if req.method() == hyper::Method::POST {
            return post(req, self.shared.clone(), caller).map(Ok).boxed();
        }
        ready(plain(
            405,
            "use POST / for JSON-RPC, GET / with Upgrade: websocket, GET /health, GET /metrics or GET /ui\n",
        ))
    }
}

/// A JSON-RPC request or batch in a POST body (any content type: `curl -d` sends a form
/// type, and on this socket a POST body is JSON-RPC).
pub(super) async fn post(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    caller: Option<Arc<Caller>>,
) -> HttpResponse {
    let max = shared.max_request_bytes;
    let mut body = req.into_body();
    let deadline = tokio::time::Instant::now() + shared.frame_timeout;
    let read = read_body(&mut body, max, shared.frame_budget.share());
    let bytes = match tokio::time::timeout_at(deadline, read).await {
        Err(_) => {
            let msg = "Invalid request: the request body did not arrive in time";
            return json(
                408,
                envelope::error_reply(None, codes::INVALID_REQUEST, msg),
            );
        }
        Ok(Err(Unread::TooBig)) => return json(413, too_big(max)),
        Ok(Err(Unread::NoRoom { limit })) => {
            // The rest is read and dropped meanwhile, so the client reads this answer
            // rather than a reset. The body may well fit later, when others have arrived.
            tokio::spawn(tokio::time::timeout_at(deadline, drain(body)));
            let mut r = json(503, no_room(limit));
            r.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            return r;
        }
        Ok(Err(Unread::Malformed(e))) => {
            let msg = format!("Invalid request: the request body is malformed: {e}");
            return json(
                400,
                envelope::error_reply(None, codes::INVALID_REQUEST, &msg),
            );
        }
        Ok(Ok(bytes)) => bytes,
    };
    let msg = match std::str::from_utf8(&bytes) {
        Ok(text) => envelope::parse(text),
        Err(_) => return json(200, not_utf8()),
    };
    drop(bytes);
    match Session::calls_only(shared, caller).handle(msg).await.0 {
        Some(reply) => json(200, reply),
        // Only notifications: nothing to say.
        None => plain(204, ""),
    }
}

/// Why a POST body was not read whole.
enum Unread {
    /// Over `limits.max_request_bytes`.
    TooBig,
    /// No room in the frame budget, of `limit` bytes.
    NoRoom {
        limit: usize,
    },
    Malformed(hyper::Error),
}

/// Reads a POST body whole, at most `max` bytes; what it holds beyond `frame_budget::FREE`
/// comes from `share`, which is given back once the body is read (or refused).
async fn read_body(body: &mut Incoming, max: usize, mut share: Share) -> Result<Vec<u8>, Unread> {
    if body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Err(Unread::TooBig);
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Unread::Malformed)?.into_data() else {
            continue; // trailers
        };
        let size = bytes.len().saturating_add(data.len());
        if size > max {
            return Err(Unread::TooBig);
        }
        if size > bytes.capacity() {
            // Grow as a Vec would, with the budget's leave for what it then holds.
            let capacity = size.max(bytes.capacity().saturating_mul(2)).min(max);
            if !share.cover(capacity) {
                return Err(Unread::NoRoom {
                    limit: share.limit(),
                });
            }
            bytes.reserve_exact(capacity - bytes.len());
        }
        bytes.extend_from_slice(&data);
    }
    Ok(bytes)
}

/// Reads the rest of a body, keeping none of it.
async fn drain(mut body: Incoming) {
    while let Some(Ok(_)) = body.frame().await {}
}

fn ready(r: HttpResponse) -> BoxFuture<'static, Result<HttpResponse, BoxError>> {
    futures::future::ready(Ok(r)).boxed()
}

pub(super) fn plain(status: u16, body: &'static str) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(body));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r
}

fn json(status: u16, body: String) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(body));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Constant-time check of `Authorization: Bearer <token>` (the scheme is case-insensitive,
/// RFC 9110 §11.1).
/// The bearer token `req` carries (`Authorization: Bearer …`).
fn bearer_of<B>(req: &HttpRequest<B>) -> Option<&str> {
    let value = req
        .headers()
        .get(hyper::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, given) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(given.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(auth: &str) -> HttpRequest<()> {
        HttpRequest::builder()
            .header("Authorization", auth)
            .body(())
            .unwrap()
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_the_token_exact() {
        for ok in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "Bearer  s3cret",
        ] {
            assert_eq!(bearer_of(&req(ok)), Some("s3cret"), "{ok}");
        }
        for bad in [
            "Bearer s3cre",
            "Basic s3cret",
            "Bearers3cret",
            "Bearer s3cretX",
            "",
        ] {
            assert_ne!(bearer_of(&req(bad)), Some("s3cret"), "{bad}");
        }
    }
}
