//! The transport to a stdio MCP server: newline-delimited JSON-RPC over its pipes.
//!
//! Ours rather than rmcp's `AsyncRwTransport` because the relay's hot path is here. rmcp
//! parses every incoming message through two nested untagged enums (the message kind, then
//! one of eighteen result types), buffering the whole message and trying variant after
//! variant; a `tools/call` answer, the one message a relay sees thousands of times a
//! second, matches late. This transport remembers which of our requests are `tools/call`
//! and parses their answers once, straight into JSON, handed on as rmcp's `CustomResult`
//! (which [`super::tool`] maps to our result); everything else goes through rmcp's own
//! parser as before. Writes keep the order in which rmcp hands messages over, and
//! messages queued while a write is in progress go out together in the next one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    ClientNotification, ClientRequest, CustomResult, JsonRpcMessage, JsonRpcResponse,
    JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::oversized::{OversizedReplies, MAX_MESSAGE};

/// Read buffer for the server's stdout.
const READ_BUFFER: usize = 64 * 1024;

pub struct StdioTransport<R, W> {
    read: BufReader<OversizedReplies<R>>,
    /// The line being read (kept across cancelled `receive`s).
    line: Vec<u8>,
    /// Skipping the rest of a line over [`MAX_MESSAGE`] (its error follows it, see
    /// [`OversizedReplies`]).
    discarding: bool,
    out: Arc<Outbox<W>>,
    /// Ids of our `tools/call` requests not yet answered.
    calls: Arc<Mutex<HashSet<RequestId>>>,
}

/// Messages waiting to be written, and the pipe they go to.
struct Outbox<W> {
    queued: Mutex<Vec<u8>>,
    pipe: tokio::sync::Mutex<Option<W>>,
}

impl<R: AsyncRead + Unpin, W> StdioTransport<R, W> {
    pub fn new(stdout: R, stdin: W) -> Self {
        StdioTransport {
            read: BufReader::with_capacity(READ_BUFFER, OversizedReplies::new(stdout)),
            line: Vec::new(),
            discarding: false,
            out: Arc::new(Outbox {
                queued: Mutex::new(Vec::new()),
                pipe: tokio::sync::Mutex::new(Some(stdin)),
            }),
            calls: Arc::default(),
        }
    }

    /// Reads one line of at most [`MAX_MESSAGE`] bytes into `self.line` (false at the end
    /// of the stream). Cancellation-safe: the partial line stays in `self.line`.
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
            if !self.discarding {
                self.line.extend_from_slice(&available[..taken]);
                if self.line.len() > MAX_MESSAGE + 1 {
                    self.line.clear();
                    self.discarding = true;
                }
            }
            self.read.consume(taken);
            if complete {
                if std::mem::take(&mut self.discarding) {
                    tracing::warn!("dropped an MCP message over {MAX_MESSAGE} bytes");
                    continue;
                }
                return Ok(true);
            }
        }
    }

    /// One message, parsed as cheaply as its kind allows; `None` for a line that is not
    /// JSON-RPC (logged and skipped, as rmcp does).
    fn parse(&self, line: &[u8]) -> Option<ServerJsonRpcMessage> {
        /// A successful answer; `result` is only JSON until we know whose answer it is.
        #[derive(Deserialize)]
        struct Answer {
            id: RequestId,
            result: Value,
        }
        let calls_pending = !lock(&self.calls).is_empty();
        if calls_pending {
            if let Ok(answer) = serde_json::from_slice::<Answer>(line) {
                if lock(&self.calls).remove(&answer.id) {
                    return Some(JsonRpcMessage::Response(JsonRpcResponse {
                        jsonrpc: JsonRpcVersion2_0,
                        id: answer.id,
                        result: ServerResult::CustomResult(CustomResult(answer.result)),
                    }));
                }
            }
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => {
                if let JsonRpcMessage::Error(e) = &message {
                    if let Some(id) = &e.id {
                        lock(&self.calls).remove(id);
                    }
                }
                Some(message)
            }
            Err(e) => {
                let text = String::from_utf8_lossy(&line[..line.len().min(200)]);
                tracing::warn!(
                    "skipped a message the MCP server sent that is not JSON-RPC ({e}): {text}"
                );
                None
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<R, W> Transport<RoleClient> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::CallToolRequest(_)) =>
            {
                lock(&self.calls).insert(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        lock(&self.calls).remove(id);
                    }
                }
            }
            _ => {}
        }
        // Queued now, in the order rmcp hands messages over, whatever order the returned
        // futures run in.
        let encoded = {
            let mut queued = lock(&self.out.queued);
            let start = queued.len();
            let written = serde_json::to_writer(&mut *queued, &item);
            match written {
                Ok(()) => queued.push(b'\n'),
                Err(_) => queued.truncate(start),
            }
            written
        };
        let out = self.out.clone();
        async move {
            encoded.map_err(std::io::Error::other)?;
            let mut pipe = out.pipe.lock().await;
            let Some(pipe) = pipe.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the transport is closed",
                ));
            };
            // Whoever holds the pipe writes everything queued, its own message included.
            loop {
                let batch = std::mem::take(&mut *lock(&out.queued));
                if batch.is_empty() {
                    return Ok(());
                }
                pipe.write_all(&batch).await?;
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read_line().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::warn!("reading from the MCP server failed: {e}");
                    return None;
                }
            }
            let text = self.line.trim_ascii();
            let message = if text.is_empty() {
                None
            } else {
                self.parse(text)
            };
            self.line.clear();
            if message.is_some() {
                return message;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(mut pipe) = self.out.pipe.lock().await.take() {
            pipe.shutdown().await?;
        }
        Ok(())
    }
}
