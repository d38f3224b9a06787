//! A message connection (newline-delimited JSON or WebSocket) and the messages of every
//! framing.
//!
//! Every framing reads whole messages, checks them in `envelope` and runs them through one
//! `Session`, which calls the method tables directly: a plain method answers with its
//! reply; a subscription is given an id, and its stream starts once that reply is queued
//! (see `subscription`). A message connection counts the replies it owes and closes once
//! the client has finished sending and every owed reply is written, so neither replies nor
//! connection slots are lost. Which framing a connection speaks is `framing`'s business;
//! HTTP POST (one message per request) is `http`'s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::task::AbortOnDropHandle;

use super::envelope::{self, Call, Item, Message};
use super::frame_budget::{self, Share};
use super::peer::Peer;
use super::subscription::{Accepted, Open, Out};
use super::websocket::WsServer;
use super::ws_limit::{Cut, Oversized};
use super::Shared;
use crate::audit::{Caller, CALLER};
use crate::bounded_lines::{read_line_or_drop, skip_line, LineRead};
use crate::protocol::codes;

/// Messages of one connection running at once; more wait, so a client that pipelines
/// without reading cannot make the daemon hold unbounded work for it.
const MAX_IN_FLIGHT: usize = 256;

/// The read buffer of a newline connection; lines longer than this grow the line buffer
/// (up to `limits.max_request_bytes`, beyond `frame_budget::FREE` with the budget's
/// leave), which is released after the line.
pub(super) const READ_BUFFER: usize = 8 * 1024;

/// A line buffer above this size is freed after use instead of kept for the next line:
/// what the budget does not count.
const KEEP_LINE_BUFFER: usize = frame_budget::FREE;

/// The per-connection state every message of that connection runs against.
pub(super) struct Session {
    shared: Arc<Shared>,
    /// The connection's writer and its subscriptions; `None` on HTTP POST (calls only).
    streams: Option<Streams>,
    /// Who calls: for the audit log, its rights, the sessions it owns.
    peer: Arc<Peer>,
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
    /// A session for calls only (HTTP POST): it cannot carry notifications.
    pub(super) fn calls_only(shared: Arc<Shared>, caller: Option<Arc<Caller>>) -> Session {
        Session {
            peer: Arc::new(Peer::new(shared.clone(), caller, false)),
            shared,
            streams: None,
        }
    }

    /// Runs one checked message.
    pub(super) async fn handle(&self, msg: Message) -> Handled {
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
        let answer = self.run(&call).await;
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
        match self.peer.caller() {
            Some(c) => CALLER.scope(c.clone(), run).await,
            None => run.await,
        }
    }

    /// Runs a call as this connection's peer; each method checks the peer's rights.
    async fn run(&self, call: &Call) -> Result<Answer, ErrorObjectOwned> {
        let shared = &self.shared;
        let name = call.method.as_str();
        let params = call.params();
        if let Some(method) = shared.plain.get(name) {
            // Plain methods run inline in this task, so the caller is visible to them.
            let run = method(&self.peer, params, call.id.clone());
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
            let ended = subscription_id(params).is_some_and(|id| streams.open.end(family, id));
            return super::methods::reply(call.id.clone(), &ended).map(Answer::Reply);
        }
        let Some((family, s)) = subscribe else {
            return Err(error(codes::INTERNAL_ERROR, "Internal error".to_owned()));
        };
        let stream = self.as_caller((s.subscribe)(&self.peer, params)).await?;
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
                .start(a, streams.out.clone(), self.peer.caller().cloned());
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
pub(super) enum Source {
    Lines {
        rd: BufReader<OwnedReadHalf>,
        line: Vec<u8>,
        max: usize,
        frame_timeout: Duration,
        /// What the line being read holds of the server's frame budget.
        share: Share,
        /// A line was refused for want of budget: its rest is still to be skipped, by the
        /// line's deadline.
        refused: Option<Instant>,
        /// Until the first message: when a connection that has sent nothing but blank
        /// lines is closed (its start plus the frame timeout). Idle time after a message is
        /// a client's right; before one, whitespace would hold a slot forever.
        quiet_until: Option<Instant>,
        /// The connection's slot, told when the first message arrives.
        ticket: Option<super::admission::Ticket>,
    },
    Ws {
        rx: SplitStream<WsServer>,
        /// The messages `FrameLimit` cut for being over `max`, by number.
        oversized: Arc<Oversized>,
        /// Data messages read so far.
        messages: u64,
        max: usize,
    },
}

impl Source {
    async fn next(&mut self) -> Frame {
        match self {
            Source::Lines {
                rd,
                line,
                max,
                frame_timeout,
                share,
                refused,
                quiet_until,
                ticket,
            } => loop {
                if let Some(deadline) = refused.take() {
                    // Its refusal is answered; the rest of the line is read and dropped.
                    match tokio::time::timeout_at(deadline, skip_line(rd)).await {
                        Ok(Ok(1..)) => continue,
                        _ => return Frame::End,
                    }
                }
                // Idle between frames is fine (after the first); once a frame starts it
                // must end in time.
                let filled = match *quiet_until {
                    Some(until) => match tokio::time::timeout_at(until, rd.fill_buf()).await {
                        Ok(r) => r.map(|b| b.is_empty()),
                        Err(_) => {
                            tracing::debug!("newline client sent no message in time; closing");
                            return Frame::End;
                        }
                    },
                    None => rd.fill_buf().await.map(|b| b.is_empty()),
                };
                if !matches!(filled, Ok(false)) {
                    return Frame::End;
                }
                let mut deadline = Instant::now() + *frame_timeout;
                if let Some(until) = *quiet_until {
                    deadline = deadline.min(until);
                }
                let room = |capacity| share.cover(capacity);
                let read =
                    tokio::time::timeout_at(deadline, read_line_or_drop(rd, *max + 1, line, room))
                        .await;
                let frame = match read {
                    Err(_) => {
                        tracing::debug!("newline client left a line incomplete; closing");
                        return Frame::End;
                    }
                    Ok(Err(_) | Ok(LineRead::Read(0))) => return Frame::End,
                    Ok(Ok(LineRead::Refused)) => {
                        *refused = Some(deadline);
                        Some(Frame::Error(no_room(share.limit())))
                    }
                    Ok(Ok(LineRead::Read(len))) => line_frame(line, len, *max),
                };
                if line.capacity() > KEEP_LINE_BUFFER {
                    *line = Vec::new();
                } else {
                    line.clear();
                }
                share.release();
                if let Some(frame) = frame {
                    *quiet_until = None;
                    if let Some(t) = ticket {
                        t.spoke();
                    }
                    return frame;
                }
            },
            Source::Ws {
                rx,
                oversized,
                messages,
                max,
            } => loop {
                let data = match rx.next().await {
                    Some(Ok(WsMessage::Text(t))) => t.as_str().as_bytes().to_vec(),
                    Some(Ok(WsMessage::Binary(b))) => b.to_vec(),
                    Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_))) => {
                        continue
                    }
                    Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => return Frame::End,
                };
                *messages += 1;
                match oversized.was_cut(*messages) {
                    Some(Cut::TooBig) => return Frame::Error(too_big(*max)),
                    Some(Cut::NoRoom { limit }) => return Frame::Error(no_room(limit)),
                    None => {}
                }
                return match String::from_utf8(data) {
                    Ok(t) => Frame::Text(t),
                    Err(_) => Frame::Error(not_utf8()),
                };
            },
        }
    }
}

pub(super) fn not_utf8() -> String {
    envelope::error_reply(
        None,
        codes::PARSE_ERROR,
        "Parse error: the message is not valid UTF-8",
    )
}

/// The answer to a message over `limits.max_request_bytes` (a line, a POST body, a
/// WebSocket message).
pub(super) fn too_big(max: usize) -> String {
    let msg = format!("Request is too big: the limit is {max} bytes (limits.max_request_bytes)");
    envelope::error_reply(None, codes::TOO_BIG, &msg)
}

/// The answer to a message refused because the requests still arriving on all connections
/// hold the whole `limits.max_buffered_request_bytes` (`frame_budget`): it may pass later.
pub(super) fn no_room(limit: usize) -> String {
    let msg = format!(
        "Request is too big to take now: requests still arriving on other connections hold \
         the {limit} bytes all may buffer at once (limits.max_buffered_request_bytes); retry"
    );
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
pub(super) enum Wire {
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

/// A connection's write side, shared: a call's reply is written by the task that ran the
/// call (no hop to another task), events and refusals by [`write_loop`]; the lock keeps
/// each message whole.
type SharedWire = Arc<tokio::sync::Mutex<Writing>>;

/// The write side, and whether the client still takes what is written.
struct Writing {
    wire: Wire,
    open: bool,
}

impl Writing {
    async fn send(&mut self, text: String) {
        if self.open && !text.is_empty() {
            self.open = self.wire.send(text).await;
        }
    }
}

async fn write_loop(wire: SharedWire, mut rx: mpsc::Receiver<Out>, owed: Arc<Owed>) {
    while let Some(out) = rx.recv().await {
        match out {
            Out::Reply(text) => {
                wire.lock().await.send(text).await;
                owed.settle();
            }
            Out::Event(text) => wire.lock().await.send(text).await,
            Out::Close => break,
        }
    }
    wire.lock().await.wire.close().await;
}

/// Serves a message connection (newline or WebSocket) until the client is done and every
/// owed reply is written.
pub(super) async fn run_messages(
    shared: Arc<Shared>,
    mut source: Source,
    wire: Wire,
    caller: Option<Arc<Caller>>,
) {
    let owed = Arc::new(Owed::default());
    let (out, out_rx) = mpsc::channel(64);
    let wire: SharedWire = Arc::new(tokio::sync::Mutex::new(Writing { wire, open: true }));
    let mut writer =
        AbortOnDropHandle::new(tokio::spawn(write_loop(wire.clone(), out_rx, owed.clone())));
    let session = Arc::new(Session {
        peer: Arc::new(Peer::new(shared.clone(), caller, true)),
        shared: shared.clone(),
        streams: Some(Streams {
            out: out.clone(),
            open: Open::default(),
        }),
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
        let (session, wire, owed) = (session.clone(), wire.clone(), owed.clone());
        tokio::spawn(async move {
            let (reply, accepted) = session.handle(msg).await;
            if owes {
                wire.lock().await.send(reply.unwrap_or_default()).await;
                owed.settle();
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
