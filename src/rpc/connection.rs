//! One connection: sniff the framing from its first byte, then serve it.
//!
//! HTTP (POST, WebSocket upgrade, `GET /health`) goes straight to jsonrpsee's tower service.
//! Newline-delimited JSON is bridged onto an in-process WebSocket of that same service, so
//! every framing shares one JSON-RPC engine: batches, limits, subscriptions and
//! unsubscribe-on-close behave identically everywhere.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::bounded_lines::read_line_bounded;
use futures::future::BoxFuture;
use futures::{FutureExt, SinkExt, StreamExt};
use hyper::body::Incoming;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use jsonrpsee::server::{ConnectionId, MethodCallback, MethodResponse, Methods};

use super::Shared;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Serves a Unix-socket connection in whichever framing its first byte announces.
pub async fn serve_unix(stream: UnixStream, shared: Arc<Shared>) {
    match first_byte(&stream).await {
        None => {}
        Some(b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n') => serve_newline(stream, shared).await,
        Some(_) => serve_http(stream, shared, None).await,
    }
}

/// Peeks (without consuming) the first byte the client sends; `None` on EOF or error.
async fn first_byte(stream: &UnixStream) -> Option<u8> {
    let mut buf = [0u8; 1];
    loop {
        stream.readable().await.ok()?;
        let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
            nix::sys::socket::recv(
                stream.as_raw_fd(),
                &mut buf,
                nix::sys::socket::MsgFlags::MSG_PEEK,
            )
            .map_err(std::io::Error::from)
        });
        match peeked {
            Ok(0) => return None,
            Ok(_) => return Some(buf[0]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

/// Serves HTTP/1.1 (and WebSocket upgrades) on `io`. `token` demands a bearer token (TCP).
pub async fn serve_http<I>(io: I, shared: Arc<Shared>, token: Option<Arc<str>>)
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let stop = shared.stop.clone();
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(
            hyper_util::rt::TokioIo::new(io),
            HttpService { shared, token },
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

/// Per-connection HTTP service: auth (TCP), `GET /health`, then jsonrpsee.
struct HttpService {
    shared: Arc<Shared>,
    token: Option<Arc<str>>,
}

impl hyper::service::Service<HttpRequest<Incoming>> for HttpService {
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<HttpResponse, BoxError>>;

    fn call(&self, req: HttpRequest<Incoming>) -> Self::Future {
        if let Some(token) = &self.token {
            if !bearer_matches(&req, token) {
                return ready(plain(401, "missing or wrong Authorization: Bearer token\n"));
            }
        }
        if req.method() == hyper::Method::GET && req.uri().path() == "/health" {
            let body = serde_json::to_string(&super::methods::health(&self.shared.host))
                .unwrap_or_default();
            return ready(json(200, body));
        }
        // `curl -d` sends a form content type; on a local socket a POST body is JSON-RPC.
        let mut req = req;
        if req.method() == hyper::Method::POST {
            let is_json = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            if !is_json {
                req.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
            }
        }
        let (methods, stop) = (self.shared.methods.clone(), self.shared.stop.clone());
        if jsonrpsee::server::ws::is_upgrade_request(&req) {
            let mut svc = self.shared.service.clone().build(methods, stop);
            tower::Service::call(&mut svc, req).boxed()
        } else {
            let mut svc = self.shared.post_service.clone().build(methods, stop);
            tower::Service::call(&mut svc, req).boxed()
        }
    }
}

fn ready(r: HttpResponse) -> BoxFuture<'static, Result<HttpResponse, BoxError>> {
    futures::future::ready(Ok(r)).boxed()
}

fn plain(status: u16, body: &'static str) -> HttpResponse {
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

/// Constant-time check of `Authorization: Bearer <token>`.
fn bearer_matches<B>(req: &HttpRequest<B>, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some(value) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(given) = value.strip_prefix("Bearer ") else {
        return false;
    };
    given.as_bytes().ct_eq(token.as_bytes()).into()
}

/// Bridges newline-delimited JSON-RPC onto an in-process WebSocket of the same service.
async fn serve_newline(stream: UnixStream, shared: Arc<Shared>) {
    let max = shared.max_request_bytes;
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve_http(server_io, shared.clone(), None));
    // A small read buffer: tungstenite zero-fills its whole read buffer on every read, and
    // the default 128 KiB made that the largest cost of a call.
    let ws_config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .max_message_size(Some(usize::MAX))
        .max_frame_size(Some(usize::MAX));
    let ws = match tokio_tungstenite::client_async_with_config(
        "ws://localhost/",
        client_io,
        Some(ws_config),
    )
    .await
    {
        Ok((ws, _)) => ws,
        Err(e) => {
            tracing::warn!(%e, "newline bridge handshake failed");
            return;
        }
    };
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (rd, wr) = stream.into_split();
    let mut rd = tokio::io::BufReader::with_capacity(64 * 1024, rd);
    let out = LineWriter::new(wr);
    let methods = shared.methods.clone();

    let reader = {
        let out = out.clone();
        async move {
            let mut line = Vec::new();
            loop {
                let len = match read_line_bounded(&mut rd, max + 1, &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if len > max + 1 || (len > max && line.last() != Some(&b'\n')) {
                    let msg = format!(
                        "Request is too big: the limit is {max} bytes (limits.max_request_bytes)"
                    );
                    out.write(error_line(-32007, &msg), false).await;
                    continue;
                }
                let line = match std::str::from_utf8(line.trim_ascii()) {
                    Ok("") => continue,
                    Ok(s) => s,
                    Err(_) => {
                        out.write(
                            error_line(-32700, "Parse error: the line is not valid UTF-8"),
                            false,
                        )
                        .await;
                        continue;
                    }
                };
                if let Some(call) = direct_call(&methods, line) {
                    out.owe();
                    let out = out.clone();
                    tokio::spawn(async move {
                        let reply = String::from(Box::<str>::from(call.await.into_json()));
                        out.write(reply, true).await;
                    });
                    continue;
                }
                if expects_reply(line) {
                    out.owe();
                }
                if ws_tx.send(Message::text(line.to_owned())).await.is_err() {
                    break;
                }
            }
            ws_tx
        }
    };
    // Forwards the bridge's answers and notifications; ends when the bridge or the client goes.
    let forwarder = {
        let out = out.clone();
        async move {
            while let Some(Ok(m)) = ws_rx.next().await {
                if let Message::Text(t) = m {
                    let reply = !t.as_str().starts_with(r#"{"jsonrpc":"2.0","method""#);
                    if !out.write(t.as_str().to_owned(), reply).await {
                        return;
                    }
                }
            }
        }
    };
    tokio::pin!(reader, forwarder);
    tokio::select! {
        mut ws_tx = &mut reader => {
            // Input closed: keep answering until every reply owed has been written.
            tokio::select! { _ = &mut forwarder => {}, _ = out.all_answered() => {} }
            let _ = ws_tx.close().await;
        }
        _ = &mut forwarder => {}
    }
}

/// The write side of a newline connection, shared by the bridge forwarder and the direct
/// calls. It counts the replies still owed, so a client that half-closes after its last
/// request (`printf … | socat - UNIX:…`) still gets every answer.
#[derive(Clone)]
struct LineWriter(Arc<LineWriterInner>);

struct LineWriterInner {
    /// An async lock: held across the write so lines never interleave.
    wr: tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>,
    owed: AtomicI64,
    answered: tokio::sync::Notify,
}

impl LineWriter {
    fn new(wr: tokio::net::unix::OwnedWriteHalf) -> Self {
        LineWriter(Arc::new(LineWriterInner {
            wr: tokio::sync::Mutex::new(wr),
            owed: AtomicI64::new(0),
            answered: tokio::sync::Notify::new(),
        }))
    }

    /// One more reply is owed to the client.
    fn owe(&self) {
        self.0.owed.fetch_add(1, Ordering::SeqCst);
    }

    /// Writes `text` and a newline in one write; `reply` settles one owed reply.
    /// False when the client is gone.
    async fn write(&self, mut text: String, reply: bool) -> bool {
        text.push('\n');
        let ok = self
            .0
            .wr
            .lock()
            .await
            .write_all(text.as_bytes())
            .await
            .is_ok();
        if reply && self.0.owed.fetch_sub(1, Ordering::SeqCst) <= 1 {
            self.0.answered.notify_waiters();
        }
        ok
    }

    /// Resolves once no reply is owed.
    async fn all_answered(&self) {
        loop {
            let notified = self.0.answered.notified();
            if self.0.owed.load(Ordering::SeqCst) <= 0 {
                return;
            }
            notified.await;
        }
    }
}

/// The fast path of newline framing: a single request (with an id) for a plain method is
/// dispatched straight to its registered handler — the same callback the WebSocket path
/// would run — skipping the in-process WebSocket hop. Everything else (batches,
/// notifications, subscriptions, unknown methods, malformed lines) goes through the bridge,
/// so its answers stay exactly jsonrpsee's.
fn direct_call(methods: &Methods, line: &str) -> Option<BoxFuture<'static, MethodResponse>> {
    if !line.starts_with('{') {
        return None;
    }
    // A notification (no `id`) does not parse as a `Request`, so it takes the bridge.
    let req: jsonrpsee::types::Request = serde_json::from_str(line).ok()?;
    let (_, callback) = methods.method_with_name(&req.method)?;
    let params = jsonrpsee::types::Params::new(req.params.as_ref().map(|p| p.get())).into_owned();
    let id = req.id.into_owned();
    match callback {
        MethodCallback::Async(cb) => Some(cb(
            id,
            params,
            ConnectionId(0),
            usize::MAX,
            Default::default(),
        )),
        MethodCallback::Sync(cb) => {
            Some(futures::future::ready(cb(id, params, usize::MAX, Default::default())).boxed())
        }
        MethodCallback::Subscription(_) | MethodCallback::Unsubscription(_) => None,
    }
}

/// Whether a request line will produce a reply (everything but a well-formed notification).
fn expects_reply(line: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, default)]
        id: Option<&'a serde_json::value::RawValue>,
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Probe>(line) {
        Ok(p) => p.id.is_some() || p.method.is_none(),
        Err(_) => true,
    }
}

fn error_line(code: i32, message: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}})
        .to_string()
}

/// Subscriptions whose names a plain HTTP POST cannot serve (it has no way to deliver
/// notifications); see `CallsOnly`.
const SUBSCRIPTIONS: &[&str] = &["subscribe_invoke", "subscribe_tools_changed"];

/// The rpc middleware of the HTTP POST path: a subscription gets a clear `-32601` naming the
/// framings that carry notifications, instead of jsonrpsee's bare "Internal error".
#[derive(Clone)]
pub(crate) struct CallsOnlyLayer;

impl<S> tower::Layer<S> for CallsOnlyLayer {
    type Service = CallsOnly<S>;
    fn layer(&self, inner: S) -> CallsOnly<S> {
        CallsOnly(inner)
    }
}

#[derive(Clone)]
pub(crate) struct CallsOnly<S>(S);

impl<S> jsonrpsee::server::middleware::rpc::RpcServiceT for CallsOnly<S>
where
    S: jsonrpsee::server::middleware::rpc::RpcServiceT<MethodResponse = MethodResponse>
        + Clone
        + Send
        + Sync
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = S::NotificationResponse;
    type BatchResponse = S::BatchResponse;

    fn call<'a>(
        &self,
        req: jsonrpsee::types::Request<'a>,
    ) -> impl std::future::Future<Output = MethodResponse> + Send + 'a {
        let inner = self.0.clone();
        async move {
            if SUBSCRIPTIONS.contains(&req.method_name()) {
                let msg = format!(
                    "{} sends notifications, which HTTP POST cannot carry: use newline-delimited JSON or a WebSocket on the same socket",
                    req.method_name()
                );
                return MethodResponse::error(
                    req.id,
                    jsonrpsee::types::ErrorObject::owned(
                        crate::protocol::codes::METHOD_NOT_FOUND,
                        msg,
                        None::<()>,
                    ),
                );
            }
            inner.call(req).await
        }
    }

    fn batch<'a>(
        &self,
        batch: jsonrpsee::server::middleware::rpc::Batch<'a>,
    ) -> impl std::future::Future<Output = Self::BatchResponse> + Send + 'a {
        self.0.batch(batch)
    }

    fn notification<'a>(
        &self,
        n: jsonrpsee::server::middleware::rpc::Notification<'a>,
    ) -> impl std::future::Future<Output = Self::NotificationResponse> + Send + 'a {
        self.0.notification(n)
    }
}
