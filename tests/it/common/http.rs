//! The one HTTP/1.1 test client, on hyper (already in the tree), over the daemon's Unix
//! socket or any stream a test opened (TCP, a stream it holds on to). Requests still written
//! by hand in the tests are the bytes no client sends: malformed heads, slow senders,
//! pipelining, and what a sandboxed shell writes through `/dev/tcp`.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;

/// How long a test waits for a whole answer.
const ANSWER: Duration = Duration::from_secs(30);

/// An answer: its status, its headers and its body (de-chunked).
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The head as `name: value` lines, lower case (for `contains` checks).
    pub fn head(&self) -> String {
        head_of(&self.headers)
    }

    pub fn header(&self, name: &str) -> Option<String> {
        let v = self.headers.get(name)?;
        Some(String::from_utf8_lossy(v.as_bytes()).into_owned())
    }
}

fn head_of(headers: &http::HeaderMap) -> String {
    let mut head = String::new();
    for (k, v) in headers {
        let v = String::from_utf8_lossy(v.as_bytes());
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.to_ascii_lowercase()
}

/// The request a test sends: `Host: localhost`, a `Content-Length`, `headers` as given,
/// and `Connection: close` when the exchange is one request (`close`).
fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    close: bool,
) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if close {
        req = req.header("connection", "close");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::new(Bytes::from(body.to_owned())))
        .expect("a well-formed test request")
}

/// One request on `io` (closed after it), read whole within 30 s.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("HTTP handshake");
    let req = request(method, path, headers, body, true);
    let answer = async {
        let res = sender.send_request(req).await.expect("an HTTP answer");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.expect("the answer's body");
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        }
    };
    // The connection is driven beside the answer; its end (the server closing) is no error.
    let both = async {
        let (answer, _) = tokio::join!(answer, conn);
        answer
    };
    tokio::time::timeout(ANSWER, both)
        .await
        .expect("an HTTP answer in time")
}

/// One request over the daemon's Unix socket `sock`.
pub async fn unix(
    sock: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let s = UnixStream::connect(sock).await.expect("connect");
    exchange(s, method, path, headers, body).await
}

/// A request whose answer is read as it comes (an event stream) on a connection kept alive,
/// as real clients do: it runs in its own task until the stream is dropped.
pub struct Stream {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    conn: tokio::task::JoinHandle<()>,
    /// Body text read but not yet taken as events.
    buf: String,
}

impl Stream {
    pub async fn open<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        io: S,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Stream {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("HTTP handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = request(method, path, headers, body, false);
        let res = tokio::time::timeout(ANSWER, sender.send_request(req))
            .await
            .expect("an HTTP answer in time")
            .expect("an HTTP answer");
        Stream {
            status: res.status().as_u16(),
            headers: res.headers().clone(),
            body: res.into_body(),
            conn,
            buf: String::new(),
        }
    }

    pub fn header(&self, name: &str) -> Option<String> {
        let v = self.headers.get(name)?;
        Some(String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// The head as `name: value` lines, lower case (for messages and `contains` checks).
    pub fn head(&self) -> String {
        head_of(&self.headers)
    }

    /// The next piece of the body as it arrived, or `None` at its end (or on an error).
    pub async fn chunk(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            return Some(std::mem::take(&mut self.buf));
        }
        loop {
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                return Some(String::from_utf8_lossy(&data).into_owned());
            }
        }
    }

    /// The rest of the body as text.
    pub async fn rest(mut self) -> String {
        let mut all = String::new();
        while let Some(c) = self.chunk().await {
            all.push_str(&c);
        }
        all
    }

    /// The next SSE event: its `id` and `data` (keep-alive comments are skipped), within
    /// 30 s; `None` when the stream ends.
    pub async fn event(&mut self) -> Option<(Option<String>, String)> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut data) = (None, String::new());
                for line in raw.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if id.is_some() || !data.is_empty() {
                    return Some((id, data));
                }
                continue;
            }
            let frame = tokio::time::timeout(ANSWER, self.body.frame())
                .await
                .expect("an SSE event in time")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

/// The status of `GET path` on `io`, or `None` on any error: for polling a daemon that is
/// starting or dying, where a failed exchange is an answer, not a test failure.
pub async fn try_status<S: AsyncRead + AsyncWrite + Unpin>(io: S, path: &str) -> Option<u16> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .ok()?;
    let req = request("GET", path, &[], "", true);
    let answer = async {
        let res = sender.send_request(req).await.ok()?;
        let status = res.status().as_u16();
        res.into_body().collect().await.ok()?;
        Some(status)
    };
    let both = async { tokio::join!(answer, conn).0 };
    tokio::time::timeout(ANSWER, both).await.ok()?
}

/// A loopback TCP port whose connections go to the daemon's Unix socket, byte for byte
/// (as `socat TCP-LISTEN:… UNIX-CONNECT:…` would), each connection to whichever daemon
/// listens there then. SDKs and the conformance suite need an `http://` URL (that stays
/// the same across restarts): the socket is not TCP, and the daemon's own TCP listener
/// wants a bearer token they cannot send. Anyone who can reach the socket already has
/// `/mcp` without a token, so this forwarder, living only as long as the test, grants
/// nothing the socket does not.
pub async fn forward(socket: std::path::PathBuf) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    addr
}
