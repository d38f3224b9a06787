//! The time limit on an HTTP request's head, counted from the head's first byte.
//!
//! hyper's own `header_read_timeout` starts as soon as hyper waits for the next request, so
//! it also closed keep-alive connections that were merely idle that long (the transport
//! promises that idle time between frames is not limited), and it armed a timer, and woke
//! the event loop, for every request. Here the connection's reads are timed only while a
//! head has begun and is not yet complete, and a timer exists only while a read of such a
//! head is waiting for more bytes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// What the HTTP service tells the connection's reader about the request it is on.
#[derive(Debug, Default)]
pub(crate) struct HeadClock {
    /// Heads read in full so far: a head that began under an older count has completed.
    heads: AtomicU64,
    /// A request is being answered: bytes that arrive now are not a head being waited for.
    answering: AtomicBool,
    /// The connection became a WebSocket: no more HTTP heads.
    upgraded: AtomicBool,
}

impl HeadClock {
    /// A head arrived in full (hyper called the service with it).
    pub(crate) fn head_read(&self) {
        self.heads.fetch_add(1, Ordering::Relaxed);
        self.answering.store(true, Ordering::Relaxed);
    }

    /// The response is ready: what is read next is the next request's head.
    pub(crate) fn answered(&self) {
        self.answering.store(false, Ordering::Relaxed);
    }

    /// The connection is being upgraded to a WebSocket.
    pub(crate) fn upgraded(&self) {
        self.upgraded.store(true, Ordering::Relaxed);
    }

    fn timing(&self) -> bool {
        !self.answering.load(Ordering::Relaxed) && !self.upgraded.load(Ordering::Relaxed)
    }
}

/// `io` whose reads fail with `TimedOut` once a request head has taken longer than `limit`
/// from its first byte.
pub(crate) struct HeadTimeout<I> {
    io: I,
    clock: Arc<HeadClock>,
    limit: Duration,
    /// When the head being read began, and the head count it began under.
    began: Option<(Instant, u64)>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<I> HeadTimeout<I> {
    pub(crate) fn new(io: I, clock: Arc<HeadClock>, limit: Duration) -> Self {
        HeadTimeout {
            io,
            clock,
            limit,
            began: None,
            timer: None,
        }
    }

    /// The head in progress, if any: the one that began under the current head count.
    fn head_in_progress(&mut self) -> Option<Instant> {
        let heads = self.clock.heads.load(Ordering::Relaxed);
        match self.began {
            Some((at, count)) if count == heads => Some(at),
            _ => {
                self.began = None;
                self.timer = None;
                None
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for HeadTimeout<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                // Bytes read while a request is answered are its body (or a pipelined
                // head, which then waits untimed, as an idle connection may).
                let starts_head = buf.filled().len() > before && this.clock.timing();
                if starts_head && this.head_in_progress().is_none() {
                    let heads = this.clock.heads.load(Ordering::Relaxed);
                    this.began = Some((Instant::now(), heads));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let Some(began) = this.head_in_progress().filter(|_| this.clock.timing()) else {
                    return Poll::Pending;
                };
                let deadline = began + this.limit;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the request's head did not arrive in full in time",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            failed => failed,
        }
    }
}

writes_pass_through!(HeadTimeout);
