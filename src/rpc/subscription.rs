//! Subscriptions, run by the connection that opened them.
//!
//! A subscription method checks its params and hands back a [`Stream`]; the connection
//! gives it an id, writes the reply with that id, and only then starts the stream, so the
//! reply always comes before the first notification. The stream writes its notifications
//! through a [`Sink`] into the connection's own writer, and [`Open`] holds every running
//! stream of the connection: unsubscribing aborts one, and the connection's end aborts
//! the rest (for `subscribe_invoke` that cancels the call).
//!
//! Why not jsonrpsee's subscriptions: it runs them only on a connection of its own, so each
//! of ours needed an in-process WebSocket to it, with jsonrpsee's HTTP service behind. A
//! streamed call crossed that twice and cost the daemon some 200 µs more CPU than a plain
//! `invoke`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use futures::FutureExt;
use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::audit::{Caller, CALLER};

/// Subscriptions one connection may hold open at once.
const MAX_PER_CONNECTION: usize = 1024;

/// What the writer of a connection is asked to do.
pub(super) enum Out {
    /// An owed reply (empty: nothing to write, but it settles the debt).
    Reply(String),
    /// A subscription notification.
    Event(String),
    /// Everything owed is written: close the write side.
    Close,
}

/// A subscription method: checks its params (`None`: absent) and returns what to run once
/// the client has its subscription id; `Err` is the error reply, and nothing runs.
pub(crate) type Subscribe = Arc<
    dyn Fn(
            &Arc<super::peer::Peer>,
            Option<&str>,
        ) -> BoxFuture<'static, Result<Stream, ErrorObjectOwned>>
        + Send
        + Sync,
>;

/// An accepted subscription's work: sends notifications through its sink until it is done.
pub(crate) type Stream = Box<dyn FnOnce(Sink) -> BoxFuture<'static, ()> + Send>;

/// A subscription method as registered.
pub(crate) struct Subscription {
    /// The method of its notifications.
    pub notification: &'static str,
    pub subscribe: Subscribe,
}

/// Where one subscription's notifications go: the connection's writer, in order.
pub(crate) struct Sink {
    out: mpsc::Sender<Out>,
    /// `{"jsonrpc":"2.0","method":…,"params":{"subscription":<id>,` — each notification
    /// then adds its `"result"` (or `"error"`) and closes.
    head: String,
}

impl Sink {
    fn new(out: mpsc::Sender<Out>, notification: &str, id: u64) -> Sink {
        let method = serde_json::Value::from(notification);
        Sink {
            out,
            head: format!(r#"{{"jsonrpc":"2.0","method":{method},"params":{{"subscription":{id},"#),
        }
    }

    fn text(&self, key: &str, value: &impl Serialize) -> Option<String> {
        let mut text = self.head.clone().into_bytes();
        text.extend_from_slice(format!(r#""{key}":"#).as_bytes());
        serde_json::to_writer(&mut text, value).ok()?;
        text.extend_from_slice(b"}}");
        String::from_utf8(text).ok()
    }

    /// Sends a notification, waiting for room; false once the connection is gone.
    pub async fn send(&self, result: &impl Serialize) -> bool {
        match self.text("result", result) {
            Some(t) => self.out.send(Out::Event(t)).await.is_ok(),
            None => true,
        }
    }

    /// Sends a notification unless the connection's queue is full: a slow reader loses it.
    pub fn try_send(&self, result: &impl Serialize) {
        if let Some(t) = self.text("result", result) {
            let _ = self.out.try_send(Out::Event(t));
        }
    }

    /// Ends the subscription with an error notification (`params.error`).
    pub async fn fail(&self, message: &str) {
        if let Some(t) = self.text("error", &message) {
            let _ = self.out.send(Out::Event(t)).await;
        }
    }

    /// Resolves once the connection's writer is gone.
    pub async fn closed(&self) {
        self.out.closed().await
    }
}

/// A subscription accepted but not started yet: its reply is not written.
pub(super) struct Accepted {
    pub id: u64,
    family: &'static str,
    notification: &'static str,
    stream: Stream,
}

/// One connection's subscriptions; dropping it ends every one of them.
#[derive(Default)]
pub(super) struct Open {
    running: Arc<Mutex<HashMap<u64, Entry>>>,
}

struct Entry {
    /// The subscribe method, so only its own unsubscribe ends it.
    family: &'static str,
    /// `None` until started.
    task: Option<AbortOnDropHandle<()>>,
}

impl Open {
    /// Gives an accepted subscription its id, or refuses it past the connection's limit.
    pub fn accept(
        &self,
        family: &'static str,
        notification: &'static str,
        stream: Stream,
    ) -> Result<Accepted, ErrorObjectOwned> {
        let Ok(mut running) = self.running.lock() else {
            return Err(internal());
        };
        if running.len() >= MAX_PER_CONNECTION {
            return Err(jsonrpsee::types::error::reject_too_many_subscriptions(
                MAX_PER_CONNECTION as u32,
            ));
        }
        // Random like jsonrpsee's ids (which clients saw before), and safe in JavaScript.
        let id = loop {
            let id = fastrand::u64(1..1 << 53);
            if !running.contains_key(&id) {
                break id;
            }
        };
        running.insert(id, Entry { family, task: None });
        Ok(Accepted {
            id,
            family,
            notification,
            stream,
        })
    }

    /// Starts an accepted subscription (call it once its reply is queued); it writes into
    /// `out` and runs as `caller`, for the audit log.
    pub fn start(&self, a: Accepted, out: mpsc::Sender<Out>, caller: Option<Arc<Caller>>) {
        let sink = Sink::new(out, a.notification, a.id);
        let run = (a.stream)(sink);
        let ended = Arc::downgrade(&self.running);
        let id = a.id;
        let task = async move {
            match caller {
                Some(c) => CALLER.scope(c, run).await,
                None => run.await,
            }
            forget(&ended, id);
        };
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        // Gone already: unsubscribed before it started, so it never runs.
        if let Some(entry) = running.get_mut(&id).filter(|e| e.family == a.family) {
            entry.task = Some(AbortOnDropHandle::new(tokio::spawn(task)));
        }
    }

    /// Ends subscription `id` of `family`; false when there is none (unknown, another
    /// method's, or already finished).
    pub fn end(&self, family: &str, id: u64) -> bool {
        let Ok(mut running) = self.running.lock() else {
            return false;
        };
        if running.get(&id).is_some_and(|e| e.family == family) {
            // Dropping the handle aborts the stream.
            running.remove(&id);
            return true;
        }
        false
    }
}

/// Removes a finished stream's entry (without aborting itself: it is done).
fn forget(running: &Weak<Mutex<HashMap<u64, Entry>>>, id: u64) {
    let Some(running) = running.upgrade() else {
        return;
    };
    let entry = running.lock().ok().and_then(|mut r| r.remove(&id));
    if let Some(Entry {
        task: Some(handle), ..
    }) = entry
    {
        // The task is this one, finishing: detach rather than abort it.
        handle.detach();
    }
}

fn internal() -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        crate::protocol::codes::INTERNAL_ERROR,
        "Internal error: the connection's subscriptions are unavailable",
        None::<()>,
    )
}

/// A stream from an async closure, for [`Subscribe`] handlers.
pub(crate) fn stream<F, Fut>(f: F) -> Stream
where
    F: FnOnce(Sink) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    Box::new(move |sink| f(sink).boxed())
}

/// Sends what `pick` makes of each message of `rx` to the subscriber, until either side
/// ends. A subscriber that falls behind loses messages (logged as `what`), never the stream.
pub(crate) async fn relay<E: Clone, N: Serialize>(
    rx: &mut tokio::sync::broadcast::Receiver<E>,
    sink: &Sink,
    what: &str,
    pick: impl Fn(E) -> Option<N>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                Ok(message) => if let Some(note) = pick(message) {
                    if !sink.send(&note).await { return }
                },
                Err(RecvError::Lagged(n)) => tracing::warn!(n, "{what} subscriber lagged"),
                Err(RecvError::Closed) => return,
            },
            _ = sink.closed() => return,
        }
    }
}
