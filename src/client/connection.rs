//! One newline-JSON connection shared by many calls: requests are written whole under a
//! lock, and a reader task routes every incoming line — a response to the caller waiting
//! on its id, a notification to its subscription.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::ClientError;
use crate::bounded_lines::read_line_bounded;
use crate::lock;

/// The longest line the client accepts from the daemon (a huge `list_tools` fits easily;
/// anything longer means the stream is not what we think it is).
const MAX_LINE: usize = 512 * 1024 * 1024;

type Notifications = mpsc::UnboundedReceiver<Box<RawValue>>;

/// A caller waiting for the response with its id.
enum Waiter {
    /// The result's JSON text (parsed once, by whoever asked for it).
    Call(oneshot::Sender<Result<String, ClientError>>),
    /// A subscribe call: the reader registers the subscription before it reads the next
    /// line, so no notification can arrive before anyone listens.
    Subscribe(oneshot::Sender<Result<(Box<RawValue>, Notifications), ClientError>>),
}

#[derive(Default)]
struct Routes {
    waiting: HashMap<u64, Waiter>,
    /// Subscriptions by the raw text of their id.
    subscriptions: HashMap<String, mpsc::UnboundedSender<Box<RawValue>>>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

struct Inner {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    routes: Mutex<Routes>,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
    /// Cancelled once the daemon closed the connection.
    gone: tokio_util::sync::CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A cheap-clone handle on one connection.
#[derive(Clone)]
pub struct Connection(Arc<Inner>);

/// Any line the daemon sends: a response (`id` with `result` or `error`) or a notification
/// (`method` with `params.subscription` and `params.result`).
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Value,
    result: Option<Box<RawValue>>,
    error: Option<RpcError>,
    params: Option<NotificationParams>,
}

#[derive(Deserialize)]
struct RpcError {
    code: i64,
    #[serde(default)]
    message: String,
    data: Option<Value>,
}

#[derive(Deserialize)]
struct NotificationParams {
    subscription: Box<RawValue>,
    result: Box<RawValue>,
}

/// How long [`Connection::open`] waits for room in a full listen backlog.
const BACKLOG_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Connection {
    /// Connects to the daemon's socket. While its listen backlog is full (a burst of
    /// clients beyond it: the kernel answers `EAGAIN` at once) it tries again, for at most
    /// [`BACKLOG_WAIT`]: the caller sees a delay, not an error.
    pub async fn open(socket: &Path) -> Result<Connection, ClientError> {
        let deadline = tokio::time::Instant::now() + BACKLOG_WAIT;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => return Ok(Connection::from_stream(stream)),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        && tokio::time::Instant::now() < deadline =>
                {
                    // The kernel tells no one when the backlog has room again.
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(200));
                }
                Err(e) => {
                    return Err(ClientError::NoDaemon {
                        path: socket.to_path_buf(),
                        reason: e.to_string(),
                    })
                }
            }
        }
    }

    /// A connection over an already connected stream (the daemon's in-process MCP facade
    /// uses one end of a socket pair).
    pub fn from_stream(stream: UnixStream) -> Connection {
        let (read, write) = stream.into_split();
        let conn = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            Inner {
                writer: tokio::sync::Mutex::new(write),
                routes: Mutex::new(Routes::default()),
                next_id: AtomicU64::new(1),
                reader: tokio::spawn(read_loop(read, weak)),
                gone: tokio_util::sync::CancellationToken::new(),
            }
        });
        Connection(conn)
    }

    fn next_id(&self) -> u64 {
        self.0.next_id.fetch_add(1, Ordering::Relaxed)
    }

    async fn write_line(&self, line: String) -> Result<(), ClientError> {
        let mut w = self.0.writer.lock().await;
        w.write_all(line.as_bytes())
            .await
            .map_err(|e| ClientError::Io(e.to_string()))
    }

    fn register(&self, id: u64, waiter: Waiter) -> Result<(), ClientError> {
        let mut routes = lock(&self.0.routes);
        if let Some(why) = &routes.closed {
            return Err(ClientError::NotSent(why.clone()));
        }
        routes.waiting.insert(id, waiter);
        Ok(())
    }

    /// Sends `method` and waits at most `timeout` for its result.
    pub async fn request(
        &self,
        method: &str,
        params: &RawValue,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        self.register(id, Waiter::Call(tx))?;
        self.send_and_wait(id, method, params, timeout, rx).await?
    }

    /// Sends a subscribe call; returns the subscription id and its notifications.
    pub async fn subscribe(
        &self,
        method: &str,
        params: &RawValue,
        timeout: Duration,
    ) -> Result<(Box<RawValue>, Notifications), ClientError> {
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        self.register(id, Waiter::Subscribe(tx))?;
        self.send_and_wait(id, method, params, timeout, rx).await?
    }

    async fn send_and_wait<T>(
        &self,
        id: u64,
        method: &str,
        params: &RawValue,
        timeout: Duration,
        rx: oneshot::Receiver<T>,
    ) -> Result<T, ClientError> {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":{},\"params\":{}}}\n",
            Value::from(method),
            params.get()
        );
        if let Err(e) = self.write_line(line).await {
            {
                let mut routes = lock(&self.0.routes);
                routes.waiting.remove(&id);
                // A connection that cannot be written to is gone, whether or not the reader
                // has seen its end yet: nothing more is sent on it.
                if let ClientError::Io(why) = &e {
                    routes.closed.get_or_insert_with(|| why.clone());
                }
            }
            self.0.gone.cancel();
            // A line that could not be written was not read by anyone.
            return Err(match e {
                ClientError::Io(why) => ClientError::NotSent(why),
                other => other,
            });
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(ClientError::Io(self.closed_reason())),
            Err(_) => {
                lock(&self.0.routes).waiting.remove(&id);
                Err(ClientError::Timeout {
                    method: method.to_owned(),
                    after: timeout,
                })
            }
        }
    }

    /// A request without an id: it runs and nothing answers.
    pub async fn notify(&self, method: &str, params: &RawValue) -> Result<(), ClientError> {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{}}}\n",
            Value::from(method),
            params.get()
        );
        self.write_line(line).await
    }

    /// Stops routing a subscription and, with `unsubscribe`, tells the daemon, without
    /// waiting for its answer (for `Drop`, which cannot wait).
    pub fn forget(&self, subscription: &RawValue, unsubscribe: Option<&str>) {
        let was_live = lock(&self.0.routes)
            .subscriptions
            .remove(subscription.get())
            .is_some();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(unsubscribe) = unsubscribe.filter(|_| was_live) else {
            return;
        };
        let conn = self.clone();
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":{},\"params\":[{}]}}\n",
            self.next_id(),
            Value::from(unsubscribe),
            subscription.get()
        );
        runtime.spawn(async move {
            let _ = conn.write_line(line).await;
        });
    }

    /// Whether the daemon closed the connection.
    pub fn is_closed(&self) -> bool {
        self.0.gone.is_cancelled()
    }

    /// Resolves once the daemon closed the connection.
    pub async fn closed(&self) {
        self.0.gone.cancelled().await;
    }

    fn closed_reason(&self) -> String {
        lock(&self.0.routes)
            .closed
            .clone()
            .unwrap_or_else(|| "the daemon closed the connection".into())
    }
}

/// Routes every line until the daemon closes the connection, then fails whoever still
/// waits and ends every subscription.
async fn read_loop(read: OwnedReadHalf, conn: std::sync::Weak<Inner>) {
    // 64 KiB, not 8: a 1,000-tool list (some 370 KiB) then takes 6 reads instead of 46.
    let mut reader = BufReader::with_capacity(64 * 1024, read);
    let mut line = Vec::new();
    let why = loop {
        match read_line_bounded(&mut reader, MAX_LINE, &mut line).await {
            Ok(0) => break "the daemon closed the connection".to_owned(),
            Ok(n) if n > MAX_LINE => break format!("the daemon sent a line of {n} bytes"),
            Ok(_) => {}
            Err(e) => break format!("reading from the daemon failed: {e}"),
        }
        let Some(inner) = conn.upgrade() else { return };
        // Most lines are plain results: route them without parsing the result twice.
        if let Some((id, result)) = plain_result(&line) {
            let mut routes = lock(&inner.routes);
            // A subscribe call's answer registers its subscription: that takes `route`.
            if !matches!(routes.waiting.get(&id), Some(Waiter::Subscribe(_))) {
                if let Some(Waiter::Call(tx)) = routes.waiting.remove(&id) {
                    let _ = tx.send(Ok(result.to_owned()));
                }
                continue;
            }
        }
        let Ok(msg) = serde_json::from_slice::<Incoming>(&line) else {
            tracing::warn!("ignoring a line from the daemon that is not JSON-RPC");
            continue;
        };
        route(&inner, msg);
    };
    if let Some(inner) = conn.upgrade() {
        // Before the waiters hear of it: whoever fails next can ask whether this is why.
        inner.gone.cancel();
        let mut routes = lock(&inner.routes);
        routes.closed = Some(why.clone());
        for (_, w) in routes.waiting.drain() {
            match w {
                Waiter::Call(tx) => drop(tx.send(Err(ClientError::Io(why.clone())))),
                Waiter::Subscribe(tx) => drop(tx.send(Err(ClientError::Io(why.clone())))),
            }
        }
        routes.subscriptions.clear();
    }
}

/// `(id, result text)` of a line shaped exactly like the daemon's plain results,
/// `{"jsonrpc":"2.0","id":N,"result":…}`; anything else takes the full parse. The result
/// text is not validated here: the caller's typed decode parses it (and fails cleanly on
/// anything that is not JSON).
fn plain_result(line: &[u8]) -> Option<(u64, &str)> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let rest = line.strip_prefix(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let result = rest[digits..]
        .strip_prefix(b",\"result\":")?
        .strip_suffix(b"}")?;
    Some((id, std::str::from_utf8(result).ok()?))
}

fn route(inner: &Inner, msg: Incoming) {
    let mut routes = lock(&inner.routes);
    if let Some(p) = msg.params {
        if let Some(tx) = routes.subscriptions.get(p.subscription.get()) {
            let _ = tx.send(p.result);
        }
        return;
    }
    let Some(waiter) = msg.id.as_u64().and_then(|id| routes.waiting.remove(&id)) else {
        return;
    };
    let outcome = match (msg.result, msg.error) {
        (_, Some(e)) => Err(ClientError::Rpc {
            code: e.code,
            message: e.message,
            data: e.data,
        }),
        (Some(r), None) => Ok(r),
        (None, None) => Err(ClientError::Decode(
            "a response with neither result nor error".into(),
        )),
    };
    match waiter {
        Waiter::Call(tx) => {
            let _ = tx.send(outcome.map(|r| String::from(Box::<str>::from(r))));
        }
        Waiter::Subscribe(tx) => {
            let registered = outcome.map(|id| {
                let (ntx, nrx) = mpsc::unbounded_channel();
                routes.subscriptions.insert(id.get().to_owned(), ntx);
                (id, nrx)
            });
            let _ = tx.send(registered);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain_result;

    #[test]
    fn plain_results_are_recognised_and_everything_else_is_not() {
        assert_eq!(
            plain_result(b"{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{\"a\":[1]}}\n"),
            Some((12, "{\"a\":[1]}"))
        );
        for other in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}"[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":1}",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{}}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1",
        ] {
            assert_eq!(plain_result(other), None);
        }
    }
}
