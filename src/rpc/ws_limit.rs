//! The size limit on WebSocket messages, enforced beneath tungstenite.
//!
//! tungstenite refuses a frame over its limit as soon as it has read the frame's header,
//! and tokio-tungstenite then ends the stream: the connection was lost (close 1005) where
//! the transport promises a `-32007` answer and a connection that stays usable. So the
//! client's bytes pass through [`FrameLimit`] first. It reads frame headers itself and
//! passes frames through while their message fits `limits.max_request_bytes`; a message
//! that would not fit is dropped from there to its last fragment, and tungstenite is given
//! an empty frame that ends the message instead. Which messages were cut is recorded in
//! [`Oversized`], where the reader looks each message up in turn and answers `-32007`
//! for those. Nothing beyond the limit is ever buffered. A message larger than
//! `frame_budget::FREE` also takes its size (as its frame headers announce it) from the
//! server's frame budget until its last frame has passed; one that finds no room is cut
//! the same way, at once, and answered saying so. A data message, once begun, must end
//! within the frame timeout (as a line or an HTTP body must), or the connection's reads
//! fail with `TimedOut` and it closes; idle time between messages is not limited.
//!
//! Data frames are also passed on as binary: the reader checks UTF-8 itself (answering
//! `-32700`), so a message cut mid-character, or a text message that is not UTF-8, gets
//! an answer instead of tungstenite closing the connection.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

use super::frame_budget::Share;
use crate::lock;

/// The longest frame header: 2 bytes, an 8-byte length, a 4-byte mask key.
const MAX_HEADER: usize = 14;

/// How much of the client's input is read at once.
const CHUNK: usize = 8 * 1024;

/// Why a data message was cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Cut {
    /// Over `limits.max_request_bytes`.
    TooBig,
    /// No room in the frame budget, of `limit` bytes.
    NoRoom { limit: usize },
}

/// The numbers (counted from 1, in the order they arrive) of the data messages that were
/// cut, and why.
#[derive(Debug, Default)]
pub(super) struct Oversized(Mutex<VecDeque<(u64, Cut)>>);

impl Oversized {
    /// Whether (and why) data message number `n` was cut; ask for every message, in order.
    pub(super) fn was_cut(&self, n: u64) -> Option<Cut> {
        let mut cut = lock(&self.0);
        match cut.front() {
            Some(&(m, why)) if m == n => {
                cut.pop_front();
                Some(why)
            }
            _ => None,
        }
    }

    fn cut(&self, n: u64, why: Cut) {
        lock(&self.0).push_back((n, why));
    }
}

/// Where the filter is in the client's byte stream.
enum At {
    /// Reading a frame header (`have` bytes of it so far).
    Header { have: usize },
    /// Passing on this many more payload bytes.
    Pass(u64),
    /// Dropping this many more payload bytes.
    Drop(u64),
}

/// The client's side of an upgraded connection with oversized messages cut (module doc).
pub(super) struct FrameLimit<I> {
    io: I,
    max: u64,
    oversized: Arc<Oversized>,
    at: At,
    header: [u8; MAX_HEADER],
    /// Bytes owed to the reader before anything else (a header, or the frame in place of
    /// a cut message), as `out[sent..len]`.
    out: [u8; MAX_HEADER],
    out_sent: usize,
    out_len: usize,
    /// Input read but not yet handled, as `input[pos..end]`.
    input: Box<[u8; CHUNK]>,
    pos: usize,
    end: usize,
    /// Data messages begun so far, and the payload of the current one.
    messages: u64,
    message_len: u64,
    /// The rest of the current message is being dropped.
    cutting: bool,
    /// The frame being passed or dropped is the current message's last.
    ends_message: bool,
    /// What the current message holds of the server's frame budget.
    share: Share,
    /// How long a begun message may take to arrive, and when the current one must be in.
    frame_timeout: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<I> FrameLimit<I> {
    pub(super) fn new(
        io: I,
        max: usize,
        oversized: Arc<Oversized>,
        share: Share,
        frame_timeout: Duration,
    ) -> Self {
        FrameLimit {
            io,
            max: u64::try_from(max).unwrap_or(u64::MAX),
            oversized,
            at: At::Header { have: 0 },
            header: [0; MAX_HEADER],
            out: [0; MAX_HEADER],
            out_sent: 0,
            out_len: 0,
            input: Box::new([0; CHUNK]),
            pos: 0,
            end: 0,
            messages: 0,
            message_len: 0,
            cutting: false,
            ends_message: false,
            share,
            frame_timeout,
            deadline: None,
        }
    }

    fn owe(&mut self, bytes: &[u8]) {
        self.out[..bytes.len()].copy_from_slice(bytes);
        self.out_sent = 0;
        self.out_len = bytes.len();
    }

    /// Handles buffered input, writing what the reader gets into `buf`, until one of them
    /// runs out.
    fn filter(&mut self, buf: &mut ReadBuf<'_>) {
        loop {
            if self.out_sent < self.out_len {
                let n = (self.out_len - self.out_sent).min(buf.remaining());
                buf.put_slice(&self.out[self.out_sent..self.out_sent + n]);
                self.out_sent += n;
                if self.out_sent < self.out_len {
                    return;
                }
            }
            let available = self.end - self.pos;
            if available == 0 || buf.remaining() == 0 {
                return;
            }
            match self.at {
                At::Header { have } => {
                    let need = header_len(&self.header[..have]);
                    let n = (need - have).min(available);
                    self.header[have..have + n]
                        .copy_from_slice(&self.input[self.pos..self.pos + n]);
                    self.pos += n;
                    let have = have + n;
                    self.at = At::Header { have };
                    // The first two bytes may say that the header is longer.
                    if have == need && header_len(&self.header[..have]) == have {
                        self.frame_begins(have);
                    }
                }
                At::Pass(left) => {
                    let n = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(available)
                        .min(buf.remaining());
                    buf.put_slice(&self.input[self.pos..self.pos + n]);
                    self.pos += n;
                    self.at = payload_left(left, n, At::Pass);
                    self.passed();
                }
                At::Drop(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(available);
                    self.pos += n;
                    self.at = payload_left(left, n, At::Drop);
                    self.passed();
                }
            }
        }
    }

    /// A complete header of `len` bytes is in `self.header`: decide the frame's fate.
    fn frame_begins(&mut self, len: usize) {
        let h = self.header;
        let (fin, opcode, masked) = (h[0] & 0x80 != 0, h[0] & 0x0f, h[1] & 0x80 != 0);
        let payload = payload_len(&h[..len]);
        let data = opcode & 0x08 == 0;
        // Control frames, and frames tungstenite refuses anyway (unmasked, reserved
        // opcodes, a continuation of nothing), pass as they are.
        let refused = !masked || opcode > 2 || (opcode == 0 && self.messages == 0);
        if !data || refused {
            self.owe(&h[..len]);
            self.at = payload_left(payload, 0, At::Pass);
            return;
        }
        if opcode != 0 {
            self.messages += 1;
            self.message_len = 0;
            self.cutting = false;
            self.deadline = Some(Box::pin(tokio::time::sleep(self.frame_timeout)));
        }
        self.ends_message = fin;
        if self.cutting {
            self.cutting = !fin;
            self.at = payload_left(payload, 0, At::Drop);
            self.passed();
            return;
        }
        let total = self.message_len.saturating_add(payload);
        let size = usize::try_from(total).unwrap_or(usize::MAX);
        let cut = if total > self.max {
            Some(Cut::TooBig)
        } else if !self.share.cover(size) {
            Some(Cut::NoRoom {
                limit: self.share.limit(),
            })
        } else {
            None
        };
        if let Some(why) = cut {
            self.oversized.cut(self.messages, why);
            // tungstenite drops what it collected of the message on the empty final frame.
            self.share.release();
            // An empty final frame ends the message in tungstenite: a new binary one, or
            // the continuation that ends one already begun.
            let first = if opcode == 0 { 0x80 } else { 0x82 };
            self.owe(&[first, 0x80, 0, 0, 0, 0]);
            self.cutting = !fin;
            self.at = payload_left(payload, 0, At::Drop);
            self.passed();
            return;
        }
        self.message_len = total;
        let mut header = h;
        if opcode == 1 {
            // Text becomes binary (module doc), keeping FIN and the reserved bits.
            header[0] = (h[0] & 0xf0) | 0x02;
        }
        self.owe(&header[..len]);
        self.at = payload_left(payload, 0, At::Pass);
        self.passed();
    }

    /// After payload was passed or dropped: once the last frame of a message is through,
    /// tungstenite holds the complete message (or the empty end of a cut one), its share of
    /// the budget is given back and its deadline no longer applies.
    fn passed(&mut self) {
        if self.ends_message && matches!(self.at, At::Header { .. }) {
            self.ends_message = false;
            self.share.release();
            self.deadline = None;
        }
    }
}

/// The state after `done` more of `left` payload bytes: the same kind, or the next header.
fn payload_left(left: u64, done: usize, kind: fn(u64) -> At) -> At {
    match left.saturating_sub(u64::try_from(done).unwrap_or(u64::MAX)) {
        0 => At::Header { have: 0 },
        rest => kind(rest),
    }
}

/// The length of the header that begins with `start`, as far as `start` tells (2 until
/// its second byte is known).
fn header_len(start: &[u8]) -> usize {
    let Some(b1) = start.get(1) else {
        return 2;
    };
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

/// The payload length a complete header gives.
fn payload_len(h: &[u8]) -> u64 {
    match h[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
        127 => u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
        n => u64::from(n),
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FrameLimit<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        loop {
            this.filter(buf);
            if buf.filled().len() > before || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            // All input is handled (dropped, or a header still incomplete): read more.
            let mut input = ReadBuf::new(&mut this.input[..]);
            match Pin::new(&mut this.io).poll_read(cx, &mut input) {
                Poll::Ready(Ok(())) => {
                    let n = input.filled().len();
                    if n == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    (this.pos, this.end) = (0, n);
                }
                Poll::Pending => {
                    let late = this
                        .deadline
                        .as_mut()
                        .is_some_and(|d| d.as_mut().poll(cx).is_ready());
                    if late {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "a websocket message did not arrive in time",
                        )));
                    }
                    return Poll::Pending;
                }
                other => return other,
            }
        }
    }
}

writes_pass_through!(FrameLimit);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rpc::frame_budget::{FrameBudget, FREE};
    use tokio::io::AsyncReadExt;

    /// A masked client frame (the key is zero; the filter never unmasks).
    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![first];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&[0; 4]);
        f.extend_from_slice(payload);
        f
    }

    async fn filtered(input: Vec<u8>, max: usize) -> (Vec<u8>, Arc<Oversized>) {
        let oversized = Arc::new(Oversized::default());
        let mut out = Vec::new();
        let share = FrameBudget::new(usize::MAX).share();
        FrameLimit::new(
            &input[..],
            max,
            oversized.clone(),
            share,
            Duration::from_secs(30),
        )
        .read_to_end(&mut out)
        .await
        .unwrap();
        (out, oversized)
    }

    #[tokio::test]
    async fn messages_over_the_limit_are_cut_and_the_rest_passes() {
        let ping = frame(0x89, b"hi");
        let mut input = frame(0x81, b"fits");
        input.extend(frame(0x82, &[b'x'; 70_000]));
        // A fragmented message that goes over in its second fragment, a ping in between.
        input.extend(frame(0x01, b"abc"));
        input.extend(frame(0x00, &[b'y'; 20]));
        input.extend(&ping);
        input.extend(frame(0x80, b"z"));
        input.extend(frame(0x81, b"last"));
        let (out, oversized) = filtered(input, 10).await;

        let mut want = frame(0x82, b"fits");
        want.extend([0x82, 0x80, 0, 0, 0, 0]);
        want.extend(frame(0x02, b"abc"));
        want.extend([0x80, 0x80, 0, 0, 0, 0]);
        want.extend(&ping);
        want.extend(frame(0x82, b"last"));
        assert_eq!(out, want);
        let cut: Vec<u64> = (1..=4)
            .filter(|n| oversized.was_cut(*n).is_some())
            .collect();
        assert_eq!(cut, [2, 3]);
    }

    #[tokio::test]
    async fn unmasked_frames_pass_as_they_are_for_tungstenite_to_refuse() {
        let mut unmasked = vec![0x81, 20];
        unmasked.extend([b'x'; 20]);
        let (out, _) = filtered(unmasked.clone(), 10).await;
        assert_eq!(out, unmasked);
    }

    #[tokio::test]
    async fn a_message_without_room_in_the_budget_is_cut_and_the_room_comes_back() {
        let budget = FrameBudget::new(10);
        let mut other = budget.share();
        assert!(
            other.cover(FREE + 5),
            "another connection holds half the budget"
        );
        let big = vec![b'x'; FREE + 8];
        let mut input = frame(0x82, &big);
        input.extend(frame(0x81, b"small"));
        input.extend(frame(0x02, &big[..FREE]));
        input.extend(frame(0x80, &[b'y'; 4]));
        input.extend(frame(0x82, &big));
        let oversized = Arc::new(Oversized::default());
        let mut out = Vec::new();
        let share = budget.share();
        let mut limit = FrameLimit::new(
            &input[..],
            usize::MAX,
            oversized.clone(),
            share,
            Duration::from_secs(30),
        );
        // Read the first three messages' bytes, then let the other connection go.
        let first_three = 6 + frame(0x82, b"small").len() + frame(0x02, &big[..FREE]).len();
        let mut head = vec![0; first_three + frame(0x80, &[b'y'; 4]).len()];
        limit.read_exact(&mut head).await.unwrap();
        drop(other);
        limit.read_to_end(&mut out).await.unwrap();
        assert_eq!(&head[..6], [0x82, 0x80, 0, 0, 0, 0]);
        assert_eq!(
            out,
            frame(0x82, &big),
            "with room again, the same size passes"
        );
        let why: Vec<Option<Cut>> = (1..=4).map(|n| oversized.was_cut(n)).collect();
        assert_eq!(why, [Some(Cut::NoRoom { limit: 10 }), None, None, None]);
        assert!(
            budget.share().cover(FREE + 10),
            "every message gave its share back"
        );
    }
}
