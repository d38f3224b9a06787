//! One connection: sniff the framing from its first byte, then serve it.
//!
//! Every framing (newline-delimited JSON, HTTP POST, WebSocket) reads whole messages, checks
//! them in `envelope` and runs them through one `Session`, which calls the method tables
//! directly: a plain method answers with its reply; a subscription is given an id, and its
//! stream starts once that reply is queued (see `subscription`). The connection counts the
//! replies it owes and closes once the client has finished sending and every owed reply is
//! written, so neither replies nor connection slots are lost.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{SplitSink, SplitStream};
use futures::{FutureExt, SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;
use tokio_util::task::AbortOnDropHandle;

use super::envelope::{self, Call, Item, Message};
use super::head_timeout::{HeadClock, HeadTimeout};
use super::subscription::{Accepted, Open, Out};
use super::Shared;
use crate::audit::{Caller, CALLER};
use crate::bounded_lines::read_line_or_drop;
use crate::metrics::Framing;
use crate::protocol::codes;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
type WsServer = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Messages of one connection running at once; more wait, so a client that pipelines
/// without reading cannot make the daemon hold unbounded work for it.
const MAX_IN_FLIGHT: usize = 256;

/// The read buffer of a newline connection; lines longer than this grow the line buffer
/// (up to `limits.max_request_bytes`), which is released after the line.
const READ_BUFFER: usize = 8 * 1024;

/// A line buffer above this size is freed after use instead of kept for the next line.
const KEEP_LINE_BUFFER: usize = 64 * 1024;

/// Serves a Unix-socket connection in whichever framing its first byte announces.
pub async fn serve_unix(stream: UnixStream, shared: Arc<Shared>) {
    // Waiting for the first byte holds no buffer, so an idle client may wait as long as it likes.
    match first_byte(&stream).await {
        None => {}
        Some(b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n') => {
            let caller = Caller::of_unix(&stream);
            serve_newline(stream, shared, caller).await
        }
        Some(_) => {
            let caller = Caller::of_unix(&stream);
            serve_http(stream, shared, None, caller).await
        }
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

// ---------------------------------------------------------------------------------------
// Running messages

/// The per-connection state every message of that connection runs against.
struct Session {
    shared: Arc<Shared>,
    /// The connection's writer and its subscriptions; `None` on HTTP POST (calls only).
    streams: Option<Streams>,
    /// The peer (Unix socket), for the audit log.
    caller: Option<Arc<Caller>>,
}

/// What a connection that can carry notifications has.
struct Streams {
    out: mpsc::Sender<Out>,
    open: Open,
}

/// A message's reply (`None`: nothing owed) and the subscriptions it accepted, which start
/// once that reply is queued.
type Handled = (Option<String>, Vec<Accepted>);

impl Session {
    /// Runs one checked message.
    async fn handle(&self, msg: Message) -> Handled {
        match msg {
            Message::Single(item) => {
                let (reply, accepted) = self.item(item).await;
                (
                    Some(reply).filter(|r| !r.is_empty()),
                    accepted.into_iter().collect(),
                )
            }
            Message::Batch(items) => {
                let done = futures::future::join_all(items.into_iter().map(|i| self.item(i)));
                let (replies, accepted): (Vec<String>, Vec<Option<Accepted>>) =
                    done.await.into_iter().unzip();
                (
                    envelope::join_batch(replies),
                    accepted.into_iter().flatten().collect(),
                )
            }
        }
    }

    /// One entry's reply with the client's id (empty for a notification), and the
    /// subscription it accepted.
    async fn item(&self, item: Item) -> (String, Option<Accepted>) {
        let call = match item {
            Item::Reply(r) => return (r, None),
            Item::Ignore => return (String::new(), None),
            Item::Call(call) => call,
        };
        let answer = self.dispatch(&call).await;
        let Some(id) = &call.id else {
            return (String::new(), answer.ok().and_then(Answer::accepted));
        };
        match answer {
            Ok(Answer::Reply(reply)) => (reply, None),
            Ok(Answer::Subscribed(a)) => match super::methods::reply(Some(id.clone()), &a.id) {
                Ok(reply) => (reply, Some(a)),
                Err(e) => (envelope::error_object_reply(id, &e), None),
            },
            Err(e) => (envelope::error_object_reply(id, &e), None),
        }
    }

    /// Runs a call as this connection's peer (for the audit log).
    async fn as_caller<T>(&self, run: impl std::future::Future<Output = T>) -> T {
        match &self.caller {
            Some(c) => CALLER.scope(c.clone(), run).await,
            None => run.await,
        }
    }

    async fn dispatch(&self, call: &Call) -> Result<Answer, ErrorObjectOwned> {
        let shared = &self.shared;
        let name = call.method.as_str();
        if let Some(method) = shared.plain.get(name) {
            // Plain methods run inline in this task, so the caller is visible to them.
            let run = method(&shared.host, call.params(), call.id.clone());
            return self.as_caller(run).await.map(Answer::Reply);
        }
        let subscribe = shared.subscriptions.get_key_value(name);
        let unsubscribe = shared.unsubscribes.get(name);
        if subscribe.is_none() && unsubscribe.is_none() {
            return Err(error(
                codes::METHOD_NOT_FOUND,
                "Method not found".to_owned(),
            ));
        }
        let Some(streams) = &self.streams else {
            return Err(error(
                codes::METHOD_NOT_FOUND,
                format!(
                    "{name} sends notifications, which HTTP POST cannot carry: use newline-delimited JSON or a WebSocket on the same socket"
                ),
            ));
        };
        if let Some(family) = unsubscribe {
            let ended =
                subscription_id(call.params()).is_some_and(|id| streams.open.end(family, id));
            return super::methods::reply(call.id.clone(), &ended).map(Answer::Reply);
        }
        let Some((family, s)) = subscribe else {
            return Err(error(codes::INTERNAL_ERROR, "Internal error".to_owned()));
        };
        let stream = self
            .as_caller((s.subscribe)(&shared.host, call.params()))
            .await?;
        streams
            .open
            .accept(family, s.notification, stream)
            .map(Answer::Subscribed)
    }

    /// Starts the subscriptions a message accepted; call once its reply is queued.
    fn start(&self, accepted: Vec<Accepted>) {
        let Some(streams) = &self.streams else {
            return;
        };
        for a in accepted {
            streams
                .open
                .start(a, streams.out.clone(), self.caller.clone());
        }
    }
}

fn error(code: i32, message: String) -> ErrorObjectOwned {
    ErrorObject::owned(code, message, None::<()>)
}

/// An unsubscribe's one positional param, the subscription id; `None` for anything else
/// (our ids are numbers, so the by-name form or a string ends nothing).
fn subscription_id(params: Option<&str>) -> Option<u64> {
    serde_json::from_str::<[u64; 1]>(params?)
        .ok()
        .map(|[id]| id)
}

/// How a call went, before the client's id is put on its reply.
enum Answer {
    /// A plain method's whole reply (empty for a notification).
    Reply(String),
    /// A subscription, to start once the reply with its id is queued.
    Subscribed(Accepted),
}

impl Answer {
    fn accepted(self) -> Option<Accepted> {
        match self {
            Answer::Subscribed(a) => Some(a),
            Answer::Reply(_) => None,
        }
    }
}

/// The count of replies a connection still owes.
#[derive(Default)]
struct Owed {
    n: AtomicUsize,
    settled: Notify,
}

impl Owed {
    fn add(&self) {
        self.n.fetch_add(1, Ordering::SeqCst);
    }

    fn settle(&self) {
        if self.n.fetch_sub(1, Ordering::SeqCst) <= 1 {
            self.settled.notify_waiters();
        }
    }

    async fn none(&self) {
        loop {
            let notified = self.settled.notified();
            if self.n.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One complete frame read from the client.
enum Frame {
    Text(String),
    /// A frame that cannot run (too big, not UTF-8): this error is owed instead.
    Error(String),
    /// The client finished sending, went away, or left a frame incomplete too long.
    End,
}

/// The read side of a message connection.
enum Source {
    Lines {
        rd: BufReader<OwnedReadHalf>,
        line: Vec<u8>,
        max: usize,
        frame_timeout: Duration,
    },
    Ws(SplitStream<WsServer>),
}

impl Source {
    async fn next(&mut self) -> Frame {
        match self {
            Source::Lines {
                rd,
                line,
                max,
                frame_timeout,
            } => loop {
                // Idle between frames is fine; once a frame starts it must end in time.
                match rd.fill_buf().await {
                    Ok([]) | Err(_) => return Frame::End,
                    Ok(_) => {}
                }
                let read =
                    tokio::time::timeout(*frame_timeout, read_line_or_drop(rd, *max + 1, line))
                        .await;
                let frame = match read {
                    Err(_) => {
                        tracing::debug!("newline client left a line incomplete; closing");
                        return Frame::End;
                    }
                    Ok(Err(_) | Ok(0)) => return Frame::End,
                    Ok(Ok(len)) => line_frame(line, len, *max),
                };
                if line.capacity() > KEEP_LINE_BUFFER {
                    *line = Vec::new();
                } else {
                    line.clear();
                }
                if let Some(frame) = frame {
                    return frame;
                }
            },
            Source::Ws(rx) => loop {
                match rx.next().await {
                    Some(Ok(WsMessage::Text(t))) => return Frame::Text(t.as_str().to_owned()),
                    Some(Ok(WsMessage::Binary(b))) => {
                        return match String::from_utf8(b.to_vec()) {
                            Ok(t) => Frame::Text(t),
                            Err(_) => Frame::Error(not_utf8()),
                        }
                    }
                    Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_))) => {}
                    Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => return Frame::End,
                }
            },
        }
    }
}

fn not_utf8() -> String {
    envelope::error_reply(
        None,
        codes::PARSE_ERROR,
        "Parse error: the message is not valid UTF-8",
    )
}

/// The answer to a message over `limits.max_request_bytes` (a line, a POST body).
fn too_big(max: usize) -> String {
    let msg = format!("Request is too big: the limit is {max} bytes (limits.max_request_bytes)");
    envelope::error_reply(None, codes::TOO_BIG, &msg)
}

/// The frame a complete line makes; `None` for a blank line. `line` holds at most `max + 1`
/// bytes (the request and its newline); `len` is the line's full length.
fn line_frame(line: &[u8], len: usize, max: usize) -> Option<Frame> {
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    if len > line.len() || content.len() > max {
        return Some(Frame::Error(too_big(max)));
    }
    match std::str::from_utf8(line.trim_ascii()) {
        Ok("") => None,
        Ok(s) => Some(Frame::Text(s.to_owned())),
        Err(_) => Some(Frame::Error(not_utf8())),
    }
}

/// The write side of a message connection.
enum Wire {
    Lines(OwnedWriteHalf),
    Ws(SplitSink<WsServer, WsMessage>),
}

impl Wire {
    /// False when the client is gone.
    async fn send(&mut self, mut text: String) -> bool {
        match self {
            Wire::Lines(w) => {
                text.push('\n');
                w.write_all(text.as_bytes()).await.is_ok()
            }
            Wire::Ws(w) => w.send(WsMessage::text(text)).await.is_ok(),
        }
    }

    async fn close(&mut self) {
        match self {
            Wire::Lines(w) => {
                let _ = w.shutdown().await;
            }
            Wire::Ws(w) => {
                let _ = w.close().await;
            }
        }
    }
}

async fn write_loop(mut wire: Wire, mut rx: mpsc::Receiver<Out>, owed: Arc<Owed>) {
    let mut open = true;
    while let Some(out) = rx.recv().await {
        match out {
            Out::Reply(text) => {
                if open && !text.is_empty() {
                    open = wire.send(text).await;
                }
                owed.settle();
            }
            Out::Event(text) => {
                if open {
                    open = wire.send(text).await;
                }
            }
            Out::Close => break,
        }
    }
    wire.close().await;
}

/// Serves a message connection (newline or WebSocket) until the client is done and every
/// owed reply is written.
async fn run_messages(
    shared: Arc<Shared>,
    mut source: Source,
    wire: Wire,
    caller: Option<Arc<Caller>>,
) {
    let owed = Arc::new(Owed::default());
    let (out, out_rx) = mpsc::channel(64);
    let mut writer = AbortOnDropHandle::new(tokio::spawn(write_loop(wire, out_rx, owed.clone())));
    let session = Arc::new(Session {
        shared: shared.clone(),
        streams: Some(Streams {
            out: out.clone(),
            open: Open::default(),
        }),
        caller,
    });
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let stop = shared.stop.clone();
    loop {
        let frame = tokio::select! {
            f = source.next() => f,
            _ = stop.clone().shutdown() => Frame::End,
        };
        let msg = match frame {
            Frame::End => break,
            Frame::Error(reply) => {
                owed.add();
                if out.send(Out::Reply(reply)).await.is_err() {
                    break;
                }
                continue;
            }
            Frame::Text(text) => envelope::parse(&text),
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let owes = msg.owes_reply();
        if owes {
            owed.add();
        }
        let (session, out) = (session.clone(), out.clone());
        tokio::spawn(async move {
            let (reply, accepted) = session.handle(msg).await;
            if owes {
                let _ = out.send(Out::Reply(reply.unwrap_or_default())).await;
            }
            // After the reply: a client learns the subscription id before its first event.
            session.start(accepted);
            drop(permit);
        });
    }
    drop(source);
    // The client is done sending: answer what is owed, then close.
    tokio::select! {
        _ = owed.none() => {}
        _ = &mut writer => return,
    }
    if out.send(Out::Close).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut writer).await;
    }
}

// ---------------------------------------------------------------------------------------
// Framings

/// Newline-delimited JSON-RPC.
async fn serve_newline(stream: UnixStream, shared: Arc<Shared>, caller: Option<Arc<Caller>>) {
    let _open = shared.host.metrics().connection(Framing::newline);
    let (rd, wr) = stream.into_split();
    let source = Source::Lines {
        rd: BufReader::with_capacity(READ_BUFFER, rd),
        line: Vec::new(),
        max: shared.max_request_bytes,
        frame_timeout: shared.frame_timeout,
    };
    run_messages(shared, source, Wire::Lines(wr), caller).await;
}

/// Serves HTTP/1.1 (and WebSocket upgrades) on `io`. `token` demands a bearer token (TCP).
pub async fn serve_http<I>(
    io: I,
    shared: Arc<Shared>,
    token: Option<Arc<str>>,
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
        .half_close(true);
    let clock = Arc::new(HeadClock::default());
    let io = HeadTimeout::new(io, clock.clone(), shared.frame_timeout);
    let conn = builder
        .serve_connection(
            TokioIo::new(io),
            HttpService {
                shared,
                token,
                caller,
                clock,
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
    token: Option<Arc<str>>,
    caller: Option<Arc<Caller>>,
    clock: Arc<HeadClock>,
}

impl hyper::service::Service<HttpRequest<Incoming>> for HttpService {
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Answering;

    fn call(&self, req: HttpRequest<Incoming>) -> Self::Future {
        self.clock.head_read();
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
    /// Answers one request: auth (TCP), `/mcp`, `GET /health`, `GET /metrics`, a WebSocket
    /// upgrade, or a JSON-RPC POST.
    fn route(
        &self,
        req: HttpRequest<Incoming>,
    ) -> BoxFuture<'static, Result<HttpResponse, BoxError>> {
        if let Some(token) = &self.token {
            if !bearer_matches(&req, token) {
                return ready(plain(401, "missing or wrong Authorization: Bearer token\n"));
            }
        }
        if req.uri().path() == "/mcp" {
            let mcp = self.shared.mcp.clone();
            return async move { Ok(mcp.handle(req).await.map(HttpBody::new)) }.boxed();
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
        let caller = self.caller.as_ref().map(|c| c.with_agent(&req));
        if jsonrpsee::server::ws::is_upgrade_request(&req) {
            let response = upgrade(req, self.shared.clone(), caller);
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
            "use POST / for JSON-RPC, GET / with Upgrade: websocket, GET /health or GET /metrics\n",
        ))
    }
}

/// A JSON-RPC request or batch in a POST body (any content type: `curl -d` sends a form
/// type, and on this socket a POST body is JSON-RPC).
async fn post(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    caller: Option<Arc<Caller>>,
) -> HttpResponse {
    let max = shared.max_request_bytes;
    let body = http_body_util::Limited::new(req.into_body(), max);
    let bytes = match tokio::time::timeout(shared.frame_timeout, body.collect()).await {
        Err(_) => {
            let msg = "Invalid request: the request body did not arrive in time";
            return json(
                408,
                envelope::error_reply(None, codes::INVALID_REQUEST, msg),
            );
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return json(413, too_big(max));
        }
        Ok(Err(e)) => {
            let msg = format!("Invalid request: the request body is malformed: {e}");
            return json(
                400,
                envelope::error_reply(None, codes::INVALID_REQUEST, &msg),
            );
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let msg = match std::str::from_utf8(&bytes) {
        Ok(text) => envelope::parse(text),
        Err(_) => return json(200, not_utf8()),
    };
    drop(bytes);
    let session = Session {
        shared,
        streams: None,
        caller,
    };
    match session.handle(msg).await.0 {
        Some(reply) => json(200, reply),
        // Only notifications: nothing to say.
        None => plain(204, ""),
    }
}

/// Accepts a WebSocket upgrade and serves JSON-RPC messages on it.
fn upgrade(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    caller: Option<Arc<Caller>>,
) -> HttpResponse {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    let headers = req.headers();
    let version_ok = headers
        .get(hyper::header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v == "13");
    let Some(key) = headers.get(hyper::header::SEC_WEBSOCKET_KEY) else {
        return plain(400, "a WebSocket upgrade needs Sec-WebSocket-Key\n");
    };
    if req.method() != hyper::Method::GET || !version_ok {
        return plain(
            400,
            "a WebSocket upgrade is a GET with Sec-WebSocket-Version: 13\n",
        );
    }
    let accept = derive_accept_key(key.as_bytes());
    let max = shared.max_request_bytes;
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(%e, "websocket upgrade failed");
                return;
            }
        };
        // Client frames must be masked (RFC 6455 §5.1; tungstenite's default refuses
        // unmasked ones and closes); one message is at most one request's worth.
        let cfg = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
            .accept_unmasked_frames(false);
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(cfg)).await;
        let _open = shared.host.metrics().connection(Framing::websocket);
        let (tx, rx) = ws.split();
        run_messages(shared, Source::Ws(rx), Wire::Ws(tx), caller).await;
    });
    let mut r = HttpResponse::new(HttpBody::default());
    *r.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&accept) {
        h.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
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

/// Constant-time check of `Authorization: Bearer <token>` (the scheme is case-insensitive,
/// RFC 9110 §11.1).
fn bearer_matches<B>(req: &HttpRequest<B>, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some(value) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, given)) = value.split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    given.trim().as_bytes().ct_eq(token.as_bytes()).into()
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
            assert!(bearer_matches(&req(ok), "s3cret"), "{ok}");
        }
        for bad in [
            "Bearer s3cre",
            "Basic s3cret",
            "Bearers3cret",
            "Bearer s3cretX",
            "",
        ] {
            assert!(!bearer_matches(&req(bad), "s3cret"), "{bad}");
        }
    }
}
