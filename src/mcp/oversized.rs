//! A stdio server's stdout, watched for messages too long to accept.
//!
//! rmcp drops an incoming line longer than its limit (16 MiB) and keeps the connection, so
//! the request it answered would wait out its whole timeout and be reported as `timeout`.
//! This reader passes every byte through until a line passes the limit (so rmcp drops it
//! as before), then swallows the rest of that line and puts a JSON-RPC error for the same
//! id in its place: the call fails at once, saying why.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// rmcp's own limit for one incoming message.
pub const MAX_MESSAGE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// How much of each end of a line is kept to find its `id`.
const KEEP: usize = 1024;

pub struct OversizedReplies<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line seen so far.
    line_len: usize,
    /// Its first [`KEEP`] bytes, and (once swallowing) its last ones.
    head: Vec<u8>,
    tail: Vec<u8>,
    swallowing: bool,
    /// Bytes to hand out before reading more.
    out: Vec<u8>,
    out_pos: usize,
    scratch: Box<[u8]>,
}

impl<R> OversizedReplies<R> {
    pub fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_MESSAGE)
    }

    fn with_limit(inner: R, limit: usize) -> Self {
        OversizedReplies {
            inner,
            limit,
            line_len: 0,
            head: Vec::with_capacity(KEEP),
            tail: Vec::new(),
            swallowing: false,
            out: Vec::new(),
            out_pos: 0,
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Sorts `n` fresh bytes of `scratch` into `out`.
    fn take(&mut self, n: usize) {
        let mut rest = &self.scratch[..n];
        while !rest.is_empty() {
            let (seg, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = &rest[seg.len() + usize::from(newline)..];
            if self.head.len() < KEEP {
                let room = KEEP - self.head.len();
                self.head.extend_from_slice(&seg[..seg.len().min(room)]);
            }
            let mut swallowed = seg;
            if !self.swallowing {
                // Pass through up to limit + 1 bytes: rmcp sees an oversized line and drops it.
                let pass = seg
                    .len()
                    .min((self.limit + 1).saturating_sub(self.line_len));
                self.out.extend_from_slice(&seg[..pass]);
                swallowed = &seg[pass..];
                self.swallowing = self.line_len + seg.len() > self.limit;
            }
            self.line_len += seg.len();
            if self.swallowing {
                self.tail.extend_from_slice(swallowed);
                if self.tail.len() > 2 * KEEP {
                    self.tail.drain(..self.tail.len() - KEEP);
                }
            }
            if newline {
                self.out.push(b'\n');
                if self.swallowing {
                    self.out.extend_from_slice(&self.replacement());
                    self.out.push(b'\n');
                }
                self.line_len = 0;
                self.head.clear();
                self.tail.clear();
                self.swallowing = false;
            }
        }
    }

    /// The error response standing in for the swallowed line (empty when no id is found:
    /// then the line is only dropped, as rmcp would).
    fn replacement(&self) -> Vec<u8> {
        let Some(id) = find_id(&self.head).or_else(|| find_last_id(&self.tail)) else {
            tracing::error!(bytes = self.line_len, "an MCP server sent a message over the size limit without a recognisable id; dropped");
            return Vec::new();
        };
        let message = format!(
            "the server's answer was {} bytes, over the limit of {} bytes for one MCP message",
            self.line_len, self.limit
        );
        let error = serde_json::json!({"code": -32603, "message": message});
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}").into_bytes()
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for OversizedReplies<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            let n = read.filled().len();
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            this.take(n);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn run(input: &[u8], limit: usize) -> String {
        let mut r = OversizedReplies::with_limit(input, limit);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn short_lines_pass_unchanged() {
        let input = b"{\"id\":1,\"result\":{}}\n{\"id\":2}\npartial";
        assert_eq!(run(input, 100).await.as_bytes(), input);
    }

    #[tokio::test]
    async fn an_oversized_line_is_replaced_by_an_error_for_its_id() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n{{\"id\":8}}\n",
            "x".repeat(500)
        );
        let out = run(big.as_bytes(), 100).await;
        let lines: Vec<&str> = out.split('\n').collect();
        // Line 1: what rmcp drops (over its limit); then the error; then the next message.
        assert_eq!(lines[0].len(), 101);
        let err: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(err["id"], 7);
        assert!(err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the limit"));
        assert_eq!(lines[2], "{\"id\":8}");
    }

    #[tokio::test]
    async fn an_id_after_the_result_is_found_in_the_tail() {
        let big = format!(
            "{{\"result\":\"{}\",\"jsonrpc\":\"2.0\",\"id\":\"r-9\"}}\n",
            "x".repeat(5000)
        );
        let out = run(big.as_bytes(), 100).await;
        let err: serde_json::Value = serde_json::from_str(out.split('\n').nth(1).unwrap()).unwrap();
        assert_eq!(err["id"], "r-9");
    }
}
