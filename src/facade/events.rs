//! One `/mcp` session's outgoing SSE events, kept so a client that lost its stream can
//! resume it with `Last-Event-ID` and get what it missed — above all a call's result that
//! came while no stream was open (rmcp's own cache drops a request's events the moment its
//! response is sent, delivered or not).
//!
//! rmcp hands every event of the session to this store ([`EventStore`]) before sending it,
//! and uses the id it returns as the SSE `id:`. The store is per session, so an id from
//! another session is simply unknown. It also tracks which client streams are attached to
//! which SSE stream and which requests are still running, for [`super::sessions`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use tokio::sync::{mpsc, watch};

use crate::lock;

/// Events a session keeps at most, and their total JSON size: past either, the oldest go
/// first, delivered ones before undelivered ones.
const MAX_EVENTS: usize = 1024;
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// How long an event handed to a client stream stays replayable: a connection can break
/// with the last events still in its buffers, and the client then resumes from before them.
const KEEP_DELIVERED: Duration = Duration::from_secs(60);

/// A client stream of an SSE stream that sends at most this many events ahead of the client.
const FOLLOW_BUFFER: usize = 16;

/// The events of one session.
pub struct EventLog {
    state: Mutex<State>,
    /// Bumped on every new event and when the session ends, for the streams that follow.
    changed: watch::Sender<u64>,
}

struct State {
    /// From 1: rmcp numbers the `initialize` stream's one event 0 itself.
    next: u64,
    events: VecDeque<Kept>,
    bytes: usize,
    streams: HashMap<Arc<str>, SseStream>,
    /// Requests the server has not answered yet.
    running: HashSet<RequestId>,
    ended: bool,
    /// When delivered events were last aged out.
    swept: Option<Instant>,
}

struct Kept {
    seq: u64,
    stream: Arc<str>,
    event: ServerSseMessage,
    size: usize,
    /// When a client stream took it.
    delivered: Option<Instant>,
}

/// One SSE stream of the session: a request's (its POST) or the standalone one (GET).
#[derive(Default)]
struct SseStream {
    /// The request it answers (request streams only).
    request: Option<RequestId>,
    /// The request's response was sent: nothing follows.
    finished: bool,
    /// Client streams taking its events now.
    attached: usize,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            state: Mutex::new(State {
                next: 1,
                events: VecDeque::new(),
                bytes: 0,
                streams: HashMap::new(),
                running: HashSet::new(),
                ended: false,
                swept: None,
            }),
            changed: watch::Sender::new(0),
        }
    }
}

impl EventLog {
    /// The log of a session taken up after a restart: its ids start at the time in
    /// microseconds, past any the earlier daemon's log handed out (it started at 1 and
    /// numbered events one by one), so an old `Last-Event-ID` names no event here.
    pub fn restored() -> EventLog {
        let log = EventLog::default();
        lock(&log.state).next = crate::now_ms().saturating_mul(1000).max(1);
        log
    }

    /// Marks `request` as running (before it reaches the server).
    pub fn begin(&self, request: RequestId) {
        lock(&self.state).running.insert(request);
    }

    /// Forgets `request` (answered, or cancelled: a cancelled request's answer is dropped).
    /// Whether it was still running.
    pub fn end(&self, request: &RequestId) -> bool {
        lock(&self.state).running.remove(request)
    }

    /// The requests still running.
    pub fn running(&self) -> Vec<RequestId> {
        lock(&self.state).running.iter().cloned().collect()
    }

    pub fn is_busy(&self) -> bool {
        !lock(&self.state).running.is_empty()
    }

    /// The SSE stream a kept event belongs to, and the event's sequence number.
    pub fn locate(&self, event_id: &str) -> Option<(Arc<str>, u64)> {
        let seq: u64 = event_id.parse().ok()?;
        let state = lock(&self.state);
        let i = state.position(seq)?;
        Some((state.events[i].stream.clone(), seq))
    }

    /// Records that `stream` answers `request` (from the first event of its POST).
    pub fn bind(&self, stream: &Arc<str>, request: RequestId) {
        lock(&self.state)
            .streams
            .entry(stream.clone())
            .or_default()
            .request = Some(request);
    }

    /// A client stream attaches to `stream`.
    pub fn attach(&self, stream: &Arc<str>) {
        lock(&self.state)
            .streams
            .entry(stream.clone())
            .or_default()
            .attached += 1;
    }

    /// A client stream went away; returns the request of `stream` when no client is left
    /// to take its answer and the request still runs.
    pub fn detach(&self, stream: &Arc<str>) -> Option<RequestId> {
        let mut state = lock(&self.state);
        let s = state.streams.get_mut(stream)?;
        s.attached = s.attached.saturating_sub(1);
        let request = s
            .request
            .clone()
            .filter(|_| s.attached == 0 && !s.finished)?;
        state.running.contains(&request).then_some(request)
    }

    /// `stream`'s request if it is still running with no client attached.
    pub fn abandoned(&self, stream: &Arc<str>) -> Option<RequestId> {
        let state = lock(&self.state);
        let s = state.streams.get(stream)?;
        let request = s
            .request
            .clone()
            .filter(|_| s.attached == 0 && !s.finished)?;
        state.running.contains(&request).then_some(request)
    }

    /// A client stream handed the event with this id to its connection.
    pub fn delivered(&self, event_id: &str) {
        let Ok(seq) = event_id.parse::<u64>() else {
            return;
        };
        let mut state = lock(&self.state);
        if let Some(i) = state.position(seq) {
            state.events[i].delivered.get_or_insert_with(Instant::now);
        }
    }

    /// The events of `stream` that no client took yet (for a new standalone stream).
    pub fn undelivered(&self, stream: &str) -> Vec<ServerSseMessage> {
        let state = lock(&self.state);
        state
            .events
            .iter()
            .filter(|k| &*k.stream == stream && k.delivered.is_none())
            .map(|k| k.event.clone())
            .collect()
    }

    /// Whether a client stream is attached to `stream`.
    pub fn is_attached(&self, stream: &str) -> bool {
        lock(&self.state)
            .streams
            .get(stream)
            .is_some_and(|s| s.attached > 0)
    }

    /// The session ended: every following stream ends, and the events go.
    pub fn close(&self) {
        let mut state = lock(&self.state);
        state.ended = true;
        state.events.clear();
        state.bytes = 0;
        drop(state);
        self.changed.send_modify(|v| *v += 1);
    }

    /// The events of `stream` after `seq`, and whether nothing more can follow.
    fn after(&self, stream: &str, seq: u64) -> (Vec<(u64, ServerSseMessage)>, bool) {
        let state = lock(&self.state);
        let events = state
            .events
            .iter()
            .filter(|k| k.seq > seq && &*k.stream == stream)
            .map(|k| (k.seq, k.event.clone()))
            .collect();
        let finished = state.streams.get(stream).is_some_and(|s| s.finished);
        (events, state.ended || finished)
    }

    fn store(&self, stream: &str, event: &ServerSseMessage) -> String {
        let size = event
            .message
            .as_deref()
            .map_or(0, crate::protocol::json_len);
        let answered = event.message.as_deref().and_then(answered_request);
        let mut state = lock(&self.state);
        let seq = state.next;
        state.next += 1;
        let stream: Arc<str> = match state.streams.get_key_value(stream) {
            Some((k, _)) => k.clone(),
            None => stream.into(),
        };
        let entry = state.streams.entry(stream.clone()).or_default();
        if answered.is_some() && entry.request.is_some() {
            entry.finished = true;
        }
        if let Some(id) = &answered {
            state.running.remove(id);
        }
        let mut event = event.clone();
        event.event_id = Some(seq.to_string());
        if !state.ended {
            state.events.push_back(Kept {
                seq,
                stream,
                event,
                size,
                delivered: None,
            });
            state.bytes += size;
            state.trim();
        }
        drop(state);
        self.changed.send_modify(|v| *v = seq);
        seq.to_string()
    }
}

impl State {
    fn position(&self, seq: u64) -> Option<usize> {
        self.events.binary_search_by_key(&seq, |k| k.seq).ok()
    }

    /// Drops what is no longer needed, then what is over the bounds: delivered events
    /// before undelivered ones, oldest first.
    fn trim(&mut self) {
        let now = Instant::now();
        let before = self.events.len();
        let over = self.events.len() > MAX_EVENTS || self.bytes > MAX_BYTES;
        if !over && self.swept.is_some_and(|t| now - t < Duration::from_secs(1)) {
            return;
        }
        self.swept = Some(now);
        // The newest event of a stream still running stays, so a resume from it finds the
        // stream even when the client saw it long ago.
        let mut newest: HashMap<&str, u64> = HashMap::new();
        for k in &self.events {
            newest.insert(&k.stream, k.seq);
        }
        let keep: HashSet<u64> = newest
            .into_iter()
            .filter(|(id, _)| !self.streams.get(*id).is_some_and(|s| s.finished))
            .map(|(_, seq)| seq)
            .collect();
        self.events.retain(|k| {
            k.delivered.is_none_or(|at| now - at < KEEP_DELIVERED) || keep.contains(&k.seq)
        });
        while self.events.len() > MAX_EVENTS || self.bytes > MAX_BYTES {
            let i = self
                .events
                .iter()
                .position(|k| k.delivered.is_some())
                .unwrap_or(0);
            let Some(k) = self.events.remove(i) else {
                break;
            };
            self.bytes -= k.size;
        }
        if self.events.len() != before {
            self.bytes = self.events.iter().map(|k| k.size).sum();
        }
        // Streams whose events are all gone and that nobody follows are forgotten.
        let live: HashSet<&str> = self.events.iter().map(|k| &*k.stream).collect();
        self.streams.retain(|id, s| {
            s.attached > 0 || live.contains(&**id) || (!s.finished && s.request.is_some())
        });
    }
}

#[async_trait::async_trait]
impl EventStore for EventLog {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        Ok(self.store(stream_id, event))
    }

    /// The events of the stream `last_event_id` belongs to, from after it on (a finite
    /// replay: the session manager resumes with [`EventLog::follow`], which also waits for
    /// what comes next).
    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream, seq) = self
            .locate(last_event_id)
            .ok_or_else(|| format!("event {last_event_id:?} is not (or no longer) kept"))?;
        let (events, _) = self.after(&stream, seq);
        Ok(Box::pin(futures::stream::iter(
            events.into_iter().map(|(_, e)| e),
        )))
    }
}

impl EventLog {
    /// A client stream that takes `stream`'s events after `seq`, then its new ones, until it
    /// is finished or the session ends.
    pub fn follow(self: &Arc<Self>, stream: Arc<str>, mut seq: u64) -> Channel {
        let (tx, rx) = mpsc::channel(FOLLOW_BUFFER);
        let log = self.clone();
        tokio::spawn(async move {
            let mut changed = log.changed.subscribe();
            loop {
                changed.borrow_and_update();
                let (events, done) = log.after(&stream, seq);
                for (n, event) in events {
                    seq = n;
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
                if done {
                    return;
                }
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    _ = tx.closed() => return,
                }
            }
        });
        Channel(rx)
    }
}

/// The receiving end of [`EventLog::follow`] as a stream.
pub struct Channel(mpsc::Receiver<ServerSseMessage>);

impl Stream for Channel {
    type Item = ServerSseMessage;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// The request a message answers (a response or an error with an id).
fn answered_request(message: &ServerJsonRpcMessage) -> Option<RequestId> {
    match message {
        ServerJsonRpcMessage::Response(r) => Some(r.id.clone()),
        ServerJsonRpcMessage::Error(e) => e.id.clone(),
        _ => None,
    }
}
