//! The transport to a stdio MCP server: newline-delimited JSON-RPC over its pipes.
//!
//! Ours rather than rmcp's `AsyncRwTransport` because the relay's hot path is here. rmcp
//! handles the session (initialize, tools/list, notifications, the server's own requests)
//! through this transport as through its own. Tool calls take a shorter way: a
//! [`DirectCalls`] writes `tools/call` straight to the pipe and the reader hands the answer
//! straight back to the waiting call. Through rmcp a call hopped from the caller's task to
//! rmcp's service task and back, and every answer was parsed through two nested untagged
//! enums (the message kind, then eighteen result types tried in turn); here the reader
//! only finds the answer's id and hands the call the line its result is in ([`RawResult`]),
//! which the call reads once, in place. Our call ids are strings (`th-N`) and rmcp's are numbers, so the
//! two never meet.
//!
//! Writes keep the order in which messages are queued; messages queued while a write is in
//! progress go out together in the next one. A writer dropped mid-write (a call given up)
//! leaves the rest of its bytes for the next writer, so a line is never cut.
//!
//! The reader also queues for a direct call its progress (by token) and, while it is the only
//! call, the server's log messages, in read order: all sent before the answer are queued before
//! it. Through rmcp each ran in a task of its own, and the last progress often lost the race.
//!
//! The `server/discover` probe is bounded here: a server of the `initialize` era that never
//! answers a method it does not know would otherwise hold rmcp's fallback for its own fixed
//! ten seconds. Past [`StdioTransport::probe_bound`] the reader hands rmcp a method-not-found
//! error for the probe (so rmcp falls back to `initialize` on the same pipes) and drops the
//! server's late answer to it, if one ever comes.
//!
//! An incoming message over [`MAX_MESSAGE`] is not kept: the reader skips the rest of its
//! line and reads in its place a JSON-RPC error for the same id, so the call it answered
//! fails at once, saying why, instead of waiting out its timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

#[allow(deprecated)] // logging: deprecated by SEP-2577, still sent by servers
use rmcp::model::{
    ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, LoggingMessageNotificationParam,
    NumberOrString, ProgressNotificationParam, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::client::Note;
use crate::lock;

/// The most one incoming message may hold (rmcp's own limit for a line).
pub const MAX_MESSAGE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
/// Read buffer for the server's stdout.
const READ_BUFFER: usize = 64 * 1024;
/// How much of each end of an oversized line is kept to find its `id`.
const KEEP: usize = 1024;
/// The prefix of our own call ids.
const ID_PREFIX: &str = "th-";
/// Bytes waiting for a server that does not read its stdin, beyond which new messages are
/// refused (the calls fail at once instead of piling up behind it).
const MAX_QUEUED: usize = MAX_MESSAGE;

type Pipe = Box<dyn AsyncWrite + Send + Unpin>;

/// The server's answer to a direct call: its `result` as the server wrote it (read once,
/// by the call, into what it needs), or its JSON-RPC error.
pub type DirectAnswer = Result<RawResult, ErrorData>;

/// A result as the server wrote it: the line it came in, handed over rather than copied (a
/// tool's output can be megabytes), and where in it the result lies.
#[derive(Debug)]
pub struct RawResult {
    line: String,
    range: std::ops::Range<usize>,
}

impl RawResult {
    /// A result that is the whole text.
    pub fn whole(text: String) -> RawResult {
        RawResult {
            range: 0..text.len(),
            line: text,
        }
    }

    /// The result's JSON.
    pub fn get(&self) -> &str {
        self.line.get(self.range.clone()).unwrap_or("null")
    }
}

/// What one line from the server is.
#[allow(clippy::large_enum_variant)] // returned once per line and matched at once, never kept
enum Parsed {
    /// A message for rmcp.
    Message(ServerJsonRpcMessage),
    /// Nothing more to do: handed to a direct call, or skipped.
    Done,
    /// The result for direct call `n`, at `range` of the line.
    Result {
        n: u64,
        range: std::ops::Range<usize>,
    },
}

pub struct StdioTransport<R> {
    read: BufReader<R>,
    /// The line being read (kept across cancelled `receive`s).
    line: Vec<u8>,
    /// [`MAX_MESSAGE`], or a small limit in tests.
    limit: usize,
    /// The line being skipped for its size, if any.
    oversized: Option<Oversized>,
    direct: Arc<DirectCalls>,
    /// How long the `server/discover` probe may wait for its answer.
    probe_bound: Duration,
    /// The probe sent and not yet answered, with when it is given up.
    probe: Option<(RequestId, Instant)>,
    /// A probe given up: its late answer is dropped.
    abandoned_probe: Option<RequestId>,
}

/// What is kept of a line over the limit: its length and both ends, where its id is.
#[derive(Default)]
struct Oversized {
    len: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl<R: AsyncRead + Unpin> StdioTransport<R> {
    pub fn new(stdout: R, stdin: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        StdioTransport {
            read: BufReader::with_capacity(READ_BUFFER, stdout),
            line: Vec::new(),
            limit: MAX_MESSAGE,
            oversized: None,
            direct: Arc::new(DirectCalls {
                out: Arc::new(Outbox {
                    unwritten: AtomicUsize::new(0),
                    queued: Mutex::new(Vec::new()),
                    pipe: tokio::sync::Mutex::new(Writing {
                        pipe: Some(Box::new(stdin)),
                        batch: Vec::new(),
                        written: 0,
                    }),
                }),
                pending: Mutex::new(Some(HashMap::new())),
                next: AtomicU64::new(1),
                era_meta: OnceLock::new(),
            }),
            probe_bound: Duration::from_secs(10),
            probe: None,
            abandoned_probe: None,
        }
    }

    /// Bounds the wait for the answer to `server/discover` (see the module doc).
    pub fn probe_bound(mut self, bound: Duration) -> Self {
        self.probe_bound = bound;
        self
    }

    /// The direct way to call this server's tools.
    pub fn direct(&self) -> Arc<DirectCalls> {
        self.direct.clone()
    }

    /// Reads one line of at most `limit` bytes into `self.line` (false at the end of the
    /// stream); a longer line comes back as the error that replaces it (see the module
    /// doc). Cancellation-safe: the partial line stays in `self`.
    async fn read_line(&mut self) -> std::io::Result<bool> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(false);
            }
            let (taken, complete) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            let chunk = &available[..taken];
            match &mut self.oversized {
                Some(skipped) => skipped.see(chunk),
                None => {
                    self.line.extend_from_slice(chunk);
                    if self.line.len() > self.limit + 1 {
                        let mut skipped = Oversized::default();
                        skipped.see(&self.line);
                        self.oversized = Some(skipped);
                        self.line = Vec::new();
                    }
                }
            }
            self.read.consume(taken);
            if !complete {
                continue;
            }
            let Some(skipped) = self.oversized.take() else {
                return Ok(true);
            };
            match skipped.replacement(self.limit) {
                Some(error) => {
                    self.line = error;
                    return Ok(true);
                }
                None => tracing::error!(
                    bytes = skipped.len,
                    "an MCP server sent a message over the size limit without a recognisable id; dropped"
                ),
            }
        }
    }

    /// A message for rmcp, or the result of a direct call (handed over by the caller, with
    /// the line it is in), or done: a direct call's error or notification (handed over
    /// here), or a line that is not JSON-RPC (logged and skipped, as rmcp does).
    fn parse(&self, line: &[u8]) -> Parsed {
        /// An answer or a notification; whose, and whether it is one at all, is decided
        /// after.
        #[derive(Deserialize)]
        struct Incoming<'a> {
            /// Raw: only our own ids (`"th-N"`) are looked at here, and rmcp's id type
            /// would have every answer go through its untagged number-or-string buffering.
            #[serde(default, borrow)]
            id: Option<&'a RawValue>,
            #[serde(default, borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
            #[serde(default)]
            params: Option<Value>,
            /// `null` is kept (a bad answer the call must hear of), only absence is `None`.
            #[serde(default, borrow, deserialize_with = "present")]
            result: Option<&'a RawValue>,
            #[serde(default)]
            error: Option<ErrorData>,
        }
        fn present<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<&'de RawValue>, D::Error> {
            <&RawValue>::deserialize(d).map(Some)
        }
        if self.direct.waiting() {
            if let Ok(incoming) = serde_json::from_slice::<Incoming>(line) {
                let ours = |id: &RawValue| our_number(id.get()).filter(|n| self.direct.waits(*n));
                let taken = match (incoming.id, incoming.method, incoming.params) {
                    (None, Some(method), Some(params)) => self.direct.notify(&method, params),
                    (Some(id), None, _) => match (ours(id), incoming.result, incoming.error) {
                        (Some(n), Some(result), _) => {
                            let start = result.get().as_ptr() as usize - line.as_ptr() as usize;
                            let range = start..start + result.get().len();
                            return Parsed::Result { n, range };
                        }
                        (Some(n), None, Some(error)) => self.direct.answer(n, Err(error)),
                        _ => false,
                    },
                    // A request from the server (it has an id and a method): rmcp's.
                    _ => false,
                };
                if taken {
                    return Parsed::Done;
                }
            }
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => Parsed::Message(message),
            Err(e) => {
                let text = String::from_utf8_lossy(&line[..line.len().min(200)]);
                tracing::warn!(
                    "skipped a message the MCP server sent that is not JSON-RPC ({e}): {text}"
                );
                Parsed::Done
            }
        }
    }
    /// The stand-in answer to a probe past its bound: method not found, which rmcp takes
    /// for a server of the `initialize` era.
    fn give_up_probe(&mut self, id: RequestId) -> ServerJsonRpcMessage {
        self.probe = None;
        self.abandoned_probe = Some(id.clone());
        let message = format!(
            "no answer to server/discover within {} ms",
            self.probe_bound.as_millis()
        );
        tracing::info!("{message}; trying initialize");
        ServerJsonRpcMessage::error(
            ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None),
            Some(id),
        )
    }

    /// Settles the probe when `message` answers it, and returns what rmcp is to see of
    /// it: `None` for the late answer to a probe given up (rmcp has moved on to
    /// `initialize`); method-not-found for an answer that is no discover result (some
    /// servers answer every unknown method with an empty one), which would fail rmcp's
    /// probe instead of falling back.
    fn settle_probe(&mut self, message: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let id = match &message {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        let Some(id) = id else {
            return Some(message);
        };
        if self.abandoned_probe.as_ref() == Some(id) {
            self.abandoned_probe = None;
            return None;
        }
        if self.probe.as_ref().is_none_or(|(probe, _)| probe != id) {
            return Some(message);
        }
        self.probe = None;
        match &message {
            JsonRpcMessage::Response(r) if !matches!(r.result, ServerResult::DiscoverResult(_)) => {
                Some(ServerJsonRpcMessage::error(
                    ErrorData::new(
                        ErrorCode::METHOD_NOT_FOUND,
                        "server/discover answered with no discover result",
                        None,
                    ),
                    Some(r.id.clone()),
                ))
            }
            _ => Some(message),
        }
    }
}

impl Oversized {
    /// Takes the next bytes of the skipped line.
    fn see(&mut self, bytes: &[u8]) {
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        self.len += bytes.len();
        let room = KEEP.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.tail
            .extend_from_slice(&bytes[bytes.len().saturating_sub(2 * KEEP)..]);
        if self.tail.len() > 2 * KEEP {
            self.tail.drain(..self.tail.len() - KEEP);
        }
    }

    /// The error answer standing in for the skipped line, for the same id; `None` when no
    /// id is found (then the line is only dropped).
    fn replacement(&self, limit: usize) -> Option<Vec<u8>> {
        let id = find_id(&self.head).or_else(|| find_last_id(&self.tail))?;
        tracing::warn!(bytes = self.len, %id, "an MCP server's message is over the size limit; answering its id with an error");
        let message = format!(
            "the server's answer was {} bytes, over the limit of {limit} bytes for one MCP message",
            self.len
        );
        let error =
            serde_json::json!({"code": crate::protocol::codes::INTERNAL_ERROR, "message": message});
        Some(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}").into_bytes())
    }
}

/// The id of a message whose `"id"` comes before its result (as most servers write it).
fn find_id(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    // An "id" after the result has begun may be part of the result itself.
    let body = ["\"result\"", "\"error\""]
        .iter()
        .filter_map(|k| text.find(k))
        .min();
    if body.is_some_and(|b| b < at) {
        return None;
    }
    id_value(&text[at + 4..])
}

/// The id of a message whose `"id"` comes after its result (the last one in the tail).
fn find_last_id(tail: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(tail);
    let at = text.rfind("\"id\"")?;
    id_value(&text[at + 4..])
}

/// The JSON number or string after `:` (a request id of ours is always one of the two).
fn id_value(after_key: &str) -> Option<String> {
    let v = after_key.trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = v.strip_prefix('"') {
        let end = s.find('"')?;
        return Some(format!("\"{}\"", &s[..end]));
    }
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(v.len());
    (end > 0).then(|| v[..end].to_owned())
}

impl<R> Drop for StdioTransport<R> {
    fn drop(&mut self) {
        self.direct.close();
    }
}

impl<R> Transport<RoleClient> for StdioTransport<R>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item {
            if matches!(r.request, ClientRequest::DiscoverRequest(_)) {
                self.probe = Some((r.id.clone(), Instant::now() + self.probe_bound));
            }
        }
        // Queued now, in the order rmcp hands messages over, whatever order the returned
        // futures run in.
        let queued = self.direct.out.queue(&item);
        let out = self.direct.out.clone();
        async move {
            queued.map_err(std::io::Error::other)?;
            out.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let read = match self.probe.clone() {
                Some((id, at)) => tokio::select! {
                    read = self.read_line() => read,
                    _ = tokio::time::sleep_until(at) => return Some(self.give_up_probe(id)),
                },
                None => self.read_line().await,
            };
            match read {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!("reading from the MCP server failed: {e}");
                    break;
                }
            }
            let text = self.line.trim_ascii();
            let lead = text.as_ptr() as usize - self.line.as_ptr() as usize;
            let parsed = if text.is_empty() {
                Parsed::Done
            } else {
                self.parse(text)
            };
            let message = match parsed {
                Parsed::Message(m) => Some(m),
                Parsed::Done => None,
                Parsed::Result { n, range } => {
                    let line = std::mem::take(&mut self.line);
                    let answer = match String::from_utf8(line) {
                        Ok(line) => Ok(RawResult {
                            line,
                            range: range.start + lead..range.end + lead,
                        }),
                        Err(_) => Err(ErrorData::internal_error(
                            "the server's answer is not UTF-8",
                            None,
                        )),
                    };
                    self.direct.answer(n, answer);
                    None
                }
            };
            self.line.clear();
            if let Some(message) = message.and_then(|m| self.settle_probe(m)) {
                return Some(message);
            }
        }
        // The server is gone: direct calls still waiting fail now, not at their timeout.
        self.direct.close();
        None
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.direct.close();
        self.direct.out.close().await
    }
}

/// Messages waiting to be written, and the pipe they go to.
struct Outbox {
    queued: Mutex<Vec<u8>>,
    pipe: tokio::sync::Mutex<Writing>,
    /// Bytes queued or being written, not yet taken by the pipe.
    unwritten: AtomicUsize,
}

/// The pipe and the batch being written to it.
struct Writing {
    pipe: Option<Pipe>,
    batch: Vec<u8>,
    /// Bytes of `batch` already written.
    written: usize,
}

impl Outbox {
    /// Appends one message (a line) to the queue.
    fn queue(&self, message: &impl Serialize) -> Result<(), serde_json::Error> {
        let unwritten = self.unwritten.load(Ordering::Relaxed);
        if unwritten > MAX_QUEUED {
            return Err(serde::ser::Error::custom(format!(
                "the MCP server has not read the last {unwritten} bytes sent to it"
            )));
        }
        let mut queued = lock(&self.queued);
        let start = queued.len();
        let written = serde_json::to_writer(&mut *queued, message);
        match written {
            Ok(()) => {
                queued.push(b'\n');
                self.unwritten
                    .fetch_add(queued.len() - start, Ordering::Relaxed);
            }
            Err(_) => queued.truncate(start),
        }
        written
    }

    /// Writes everything queued (other callers' messages too). Cancellation-safe: bytes
    /// not yet written stay for the next flush.
    async fn flush(&self) -> std::io::Result<()> {
        let mut w = self.pipe.lock().await;
        let Writing {
            pipe,
            batch,
            written,
        } = &mut *w;
        let Some(pipe) = pipe.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the MCP server's stdin is closed",
            ));
        };
        loop {
            if *written == batch.len() {
                batch.clear();
                *written = 0;
                std::mem::swap(batch, &mut *lock(&self.queued));
                if batch.is_empty() {
                    return Ok(());
                }
            }
            match pipe.write(&batch[*written..]).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => {
                    *written += n;
                    self.unwritten.fetch_sub(n, Ordering::Relaxed);
                }
            }
        }
    }

    async fn close(&self) -> std::io::Result<()> {
        let pipe = self.pipe.lock().await.pipe.take();
        if let Some(mut pipe) = pipe {
            pipe.shutdown().await?;
        }
        Ok(())
    }
}

/// `tools/call` requests the host sends itself, beside rmcp's session (see the module
/// doc). Shared by the transport (which answers them) and the server's tools.
pub struct DirectCalls {
    out: Arc<Outbox>,
    /// Calls waiting for their answer by number; `None` once the server is gone.
    pending: Mutex<Option<HashMap<u64, Waiter>>>,
    next: AtomicU64,
    /// The per-request `_meta` of a server of the 2026-07-28 era (protocol version, client
    /// info and capabilities), set once it has answered `server/discover`; rmcp adds the
    /// same to the requests it sends itself.
    era_meta: OnceLock<Map<String, Value>>,
}

/// The per-request `_meta` key of the client's capabilities (2026-07-28).
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Where a direct call's answer and notifications go.
struct Waiter {
    answer: oneshot::Sender<DirectAnswer>,
    notes: mpsc::UnboundedSender<Note>,
}

/// A direct call sent: its id (also its progress token), its notifications, its answer.
pub struct DirectCall {
    pub id: Arc<str>,
    pub notes: mpsc::UnboundedReceiver<Note>,
    pub answer: oneshot::Receiver<DirectAnswer>,
}

impl DirectCalls {
    /// Gives every later call the per-request `_meta` of the server's era (the client
    /// capabilities each call names itself).
    pub fn set_era_meta(&self, mut meta: Map<String, Value>) {
        meta.remove(CLIENT_CAPABILITIES);
        let _ = self.era_meta.set(meta);
    }

    /// Sends `tools/call` for `name`; `retry` holds the params of a retry after
    /// `input_required` (`inputResponses`, `requestState`); `capabilities` are the client
    /// capabilities declared to a server of the 2026-07-28 era (those of the call's
    /// frontend). The id doubles as the progress token.
    pub async fn call(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        retry: &Map<String, Value>,
        capabilities: &Value,
    ) -> std::io::Result<DirectCall> {
        #[derive(Serialize)]
        struct Request<'a> {
            jsonrpc: &'static str,
            id: &'a str,
            method: &'static str,
            params: Params<'a>,
        }
        #[derive(Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Map<String, Value>,
            #[serde(flatten)]
            retry: &'a Map<String, Value>,
            #[serde(rename = "_meta")]
            meta: Meta<'a>,
        }
        #[derive(Serialize)]
        struct Meta<'a> {
            #[serde(rename = "progressToken")]
            progress_token: &'a str,
            #[serde(flatten, skip_serializing_if = "Option::is_none")]
            era: Option<&'a Map<String, Value>>,
            #[serde(
                rename = "io.modelcontextprotocol/clientCapabilities",
                skip_serializing_if = "Option::is_none"
            )]
            capabilities: Option<&'a Value>,
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id: Arc<str> = format!("{ID_PREFIX}{n}").into();
        let (answers, answer) = oneshot::channel();
        let (notes_tx, notes) = mpsc::unbounded_channel();
        let waiter = Waiter {
            answer: answers,
            notes: notes_tx,
        };
        match lock(&self.pending).as_mut() {
            Some(pending) => pending.insert(n, waiter),
            None => return Err(closed()),
        };
        let request = Request {
            jsonrpc: "2.0",
            id: &id,
            method: "tools/call",
            params: Params {
                name,
                arguments,
                retry,
                meta: Meta {
                    progress_token: &id,
                    era: self.era_meta.get(),
                    capabilities: self.era_meta.get().map(|_| capabilities),
                },
            },
        };
        if let Err(e) = self.out.queue(&request) {
            self.forget(n);
            return Err(std::io::Error::other(e));
        }
        // From here the request will reach the server whatever happens to this future: if
        // it is dropped before the write is done (the caller gave up while the pipe was
        // full), its cancellation is queued right behind it.
        let mut queued = Queued {
            calls: self,
            id: &id,
            n,
            written: false,
        };
        let flushed = self.out.flush().await;
        queued.written = true;
        drop(queued);
        if let Err(e) = flushed {
            self.forget(n);
            return Err(e);
        }
        Ok(DirectCall { id, notes, answer })
    }

    /// Queues `notifications/cancelled` for call `id`.
    fn queue_cancel(&self, id: &str, reason: &str) -> bool {
        if let Some(n) = number(id) {
            self.forget(n);
        }
        let note = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        });
        self.out.queue(&note).is_ok()
    }

    /// Tells the server to stop working on call `id` (`notifications/cancelled`).
    pub async fn cancel(&self, id: &str, reason: &str) {
        if self.queue_cancel(id, reason) {
            let _ = self.out.flush().await;
        }
    }

    fn forget(&self, n: u64) {
        if let Some(pending) = lock(&self.pending).as_mut() {
            pending.remove(&n);
        }
    }

    /// Whether any direct call waits for its answer.
    fn waiting(&self) -> bool {
        lock(&self.pending).as_ref().is_some_and(|p| !p.is_empty())
    }

    /// Whether direct call `n` waits for its answer.
    fn waits(&self, n: u64) -> bool {
        lock(&self.pending)
            .as_ref()
            .is_some_and(|p| p.contains_key(&n))
    }

    /// Hands `outcome` to direct call `n`; false when it no longer waits.
    fn answer(&self, n: u64, outcome: DirectAnswer) -> bool {
        let waiter = lock(&self.pending).as_mut().and_then(|p| p.remove(&n));
        match waiter {
            Some(w) => {
                let _ = w.answer.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Queues a notification for the direct call it belongs to (progress by token, a log to
    /// the only call: `origin.rs`'s rule); false when it is none's (then it is rmcp's).
    fn notify(&self, method: &str, params: Value) -> bool {
        let pending = lock(&self.pending);
        let Some(pending) = pending.as_ref() else {
            return false;
        };
        #[allow(deprecated)] // logging: deprecated by SEP-2577, still sent by servers
        let routed = match method {
            "notifications/progress" => serde_json::from_value::<ProgressNotificationParam>(params)
                .ok()
                .and_then(|p| {
                    match &p.progress_token.0 {
                        NumberOrString::String(token) => {
                            number(token).and_then(|n| pending.get(&n))
                        }
                        NumberOrString::Number(_) => None,
                    }
                    .map(|w| (w, Note::Progress(p)))
                }),
            "notifications/message" if pending.len() == 1 => pending.values().next().zip(
                serde_json::from_value::<LoggingMessageNotificationParam>(params)
                    .ok()
                    .map(Note::Log),
            ),
            _ => None,
        };
        routed.is_some_and(|(waiter, note)| waiter.notes.send(note).is_ok())
    }

    /// The server is gone: every waiting call fails, and new ones are refused.
    fn close(&self) {
        lock(&self.pending).take();
    }
}

/// A request queued whose write has not finished (see [`DirectCalls::call`]).
struct Queued<'a> {
    calls: &'a DirectCalls,
    id: &'a str,
    n: u64,
    written: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.written {
            self.calls.forget(self.n);
            self.calls
                .queue_cancel(self.id, "abandoned by the caller before it was sent");
        }
    }
}

fn number(id: &str) -> Option<u64> {
    id.strip_prefix(ID_PREFIX)?.parse().ok()
}

/// The number of our call whose id is the JSON `raw_id` (ours are plain strings, never
/// escaped); `None` for any other id.
fn our_number(raw_id: &str) -> Option<u64> {
    number(raw_id.strip_prefix('"')?.strip_suffix('"')?)
}

fn closed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the connection to the MCP server is closed",
    )
}

#[cfg(test)]
mod tests;
