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

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
use super::peer::{self, Admitted, Limited};
use super::subscription::{Accepted, Open, Out};
use super::websocket::WsServer;
use super::ws_limit::{Cut, Oversized};
use super::Shared;
use crate::audit::{Caller, CALLER};
use crate::bounded_lines::{read_line_or_drop, skip_line, LineRead};
use crate::lock;
use crate::protocol::{codes, method, SessionIdParams};

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
    /// The peer (Unix socket), for the audit log and its limits.
    caller: Option<Arc<Caller>>,
    /// A host-started peer's limits (`None`: a client of the user), worked out on the
    /// connection's first call.
    limits: OnceLock<Option<Limited>>,
}

/// What a connection that can carry notifications has.
struct Streams {
    out: mpsc::Sender<Out>,
    open: Open,
    owned: Owned,
}

/// A message's reply (`None`: nothing owed) and the subscriptions it accepted, which start
/// once that reply is queued.
type Handled = (Option<String>, Vec<Accepted>);

impl Session {
    /// A session for calls only (HTTP POST): it cannot carry notifications.
    pub(super) fn calls_only(shared: Arc<Shared>, caller: Option<Arc<Caller>>) -> Session {
        Session {
            shared,
            streams: None,
            caller,
            limits: OnceLock::new(),
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

    /// Runs a call within the peer's limits: the one place they are checked.
    async fn dispatch(&self, call: &Call) -> Result<Answer, ErrorObjectOwned> {
        let shared = &self.shared;
        let name = call.method.as_str();
        let limits = self
            .limits
            .get_or_init(|| peer::limits(&shared.host, self.caller.as_deref()));
        let (rewritten, created) = match limits {
            Some(l) if self.is_method(name) => {
                match l.admit(&shared.started_sessions, name, call.params())? {
                    Admitted::AsSent => (None, None),
                    Admitted::Rewritten { params, created } => (Some(params), created),
                }
            }
            _ => (None, None),
        };
        let params = rewritten.as_deref().or(call.params());
        let owned = self.streams.as_ref().map(|s| &s.owned);
        let claim = owned.and_then(|_| Owned::claim(name, params));
        let params = match &claim {
            Some(Claim {
                params: Some(p), ..
            }) => Some(p.as_str()),
            _ => params,
        };
        let answer = self.run(call, params).await;
        if answer.is_ok() {
            if limits.is_some() {
                shared.started_sessions.settle(name, params, created);
            }
            if let Some(owned) = owned {
                owned.settle(name, params, claim.as_ref().map(|c| c.id.as_str()));
            }
        }
        answer
    }

    fn is_method(&self, name: &str) -> bool {
        let shared = &self.shared;
        shared.plain.contains_key(name)
            || shared.subscriptions.contains_key(name)
            || shared.unsubscribes.contains_key(name)
    }

    async fn run(&self, call: &Call, params: Option<&str>) -> Result<Answer, ErrorObjectOwned> {
        let shared = &self.shared;
        let name = call.method.as_str();
        if let Some(method) = shared.plain.get(name) {
            // Plain methods run inline in this task, so the caller is visible to them.
            let run = method(&shared.host, params, call.id.clone());
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
        let stream = self.as_caller((s.subscribe)(&shared.host, params)).await?;
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

/// The ephemeral sessions a message connection made (`session.create` with `ephemeral:
/// true`): the connection owns them, and they end with it however it ends (the client
/// closes it, its process is killed, it is cut off half-way), once its last message has
/// run, so a session made by a message still running is not missed. A stopping daemon
/// leaves them to the next start, which deletes every ephemeral session.
struct Owned {
    shared: Arc<Shared>,
    ids: Mutex<HashSet<String>>,
}

/// A `session.create` of an ephemeral session, as the connection runs it.
struct Claim {
    /// The session's id: made here when the params name none, so the connection knows it
    /// whatever the reply (a notification has none).
    id: String,
    /// The params with that id in, when it was made here.
    params: Option<String>,
}

impl Owned {
    fn new(shared: Arc<Shared>) -> Owned {
        Owned {
            shared,
            ids: Mutex::default(),
        }
    }

    /// The claim of a call of `name` with `params`, when it creates an ephemeral session.
    /// Params it cannot read are left to the method, which answers with its own error.
    fn claim(name: &str, params: Option<&str>) -> Option<Claim> {
        if name != method::SESSION_CREATE {
            return None;
        }
        let serde_json::Value::Object(mut p) = serde_json::from_str(params?).ok()? else {
            return None;
        };
        if p.get("ephemeral") != Some(&serde_json::Value::Bool(true)) {
            return None;
        }
        match p.get("id") {
            Some(serde_json::Value::String(id)) => Some(Claim {
                id: id.clone(),
                params: None,
            }),
            None | Some(serde_json::Value::Null) => {
                let id = crate::session::new_id();
                p.insert("id".into(), id.clone().into());
                let params = Some(serde_json::Value::Object(p).to_string());
                Some(Claim { id, params })
            }
            Some(_) => None,
        }
    }

    /// Records what a successful call did: the claimed session is this connection's; one
    /// it deleted itself is no longer.
    fn settle(&self, name: &str, params: Option<&str>, claimed: Option<&str>) {
        if let Some(id) = claimed {
            lock(&self.ids).insert(id.to_owned());
        } else if name == method::SESSION_DELETE {
            if let Some(p) = params.and_then(|p| serde_json::from_str::<SessionIdParams>(p).ok()) {
                lock(&self.ids).remove(&p.id);
            }
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // The connection's buffers go back to the system once the daemon is quiet.
        crate::trim::worked();
        let ids = std::mem::take(&mut *lock(&self.ids));
        let host = &self.shared.host;
        if ids.is_empty() || host.shutdown_token().is_cancelled() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let host = host.clone();
        let end = async move {
            for id in ids {
                match super::methods::delete_session(&host, &id).await {
                    Ok(deleted) => tracing::debug!(
                        session = %id,
                        deleted,
                        "the connection that made this ephemeral session ended"
                    ),
                    Err(e) => tracing::warn!(%e, session = %id, "cannot end an ephemeral session"),
                }
            }
        };
        self.shared.host.tracker().spawn_on(end, &runtime);
    }
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
        shared: shared.clone(),
        streams: Some(Streams {
            out: out.clone(),
            open: Open::default(),
            owned: Owned::new(shared.clone()),
        }),
        caller,
        limits: OnceLock::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn only_an_ephemeral_create_is_claimed_and_its_id_is_known_before_it_runs() {
        let create = method::SESSION_CREATE;
        assert!(Owned::claim(method::SESSION_UPDATE, Some(r#"{"ephemeral":true}"#)).is_none());
        assert!(Owned::claim(create, Some(r#"{"id":"a"}"#)).is_none());
        assert!(Owned::claim(create, Some(r#"{"ephemeral":false}"#)).is_none());
        assert!(Owned::claim(create, Some("[true]")).is_none());
        assert!(Owned::claim(create, None).is_none());
        let named = Owned::claim(create, Some(r#"{"id":"a","ephemeral":true}"#)).unwrap();
        assert_eq!(named.id, "a");
        assert!(named.params.is_none());
        let made = Owned::claim(create, Some(r#"{"ephemeral":true,"meta":{"k":1}}"#)).unwrap();
        let params: Value = serde_json::from_str(made.params.as_deref().unwrap()).unwrap();
        assert!(made.id.starts_with("s_"), "{}", made.id);
        assert_eq!(params["id"], made.id.as_str());
        assert_eq!(params["meta"]["k"], 1);
        assert_eq!(params["ephemeral"], true);
    }
}
