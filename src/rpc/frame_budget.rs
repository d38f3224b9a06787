//! The memory all connections together may hold for requests still arriving
//! (`limits.max_buffered_request_bytes`, proto-docs/transport.md "Size limit").
//!
//! Each framing buffers a request until it is complete: a line (newline framing), a POST
//! body, a WebSocket message (inside tungstenite). `limits.max_request_bytes` caps one such
//! frame, but not their sum: 40 connections each sending an unterminated 10 MiB line held
//! 423 MB until the frame timeout. So every frame larger than [`FREE`] takes its bytes from
//! one budget shared by every connection of the server, and a frame that finds no room is
//! refused at once (the framing's "too big" answer, saying why) instead of being buffered.
//! Frames up to `FREE` never ask, so a small request always passes, however many large
//! ones are arriving.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes of one frame that need no share of the budget: most requests are smaller, and
/// a newline connection keeps a line buffer this size between lines. Small, because every
/// open connection (up to `listen.max_unix_connections`) may hold this much unbudgeted.
pub(super) const FREE: usize = 16 * 1024;

/// The bytes every connection's frames in progress may hold beyond [`FREE`] each.
#[derive(Debug)]
pub(super) struct FrameBudget {
    limit: usize,
    held: AtomicUsize,
}

impl FrameBudget {
    pub(super) fn new(limit: usize) -> Arc<FrameBudget> {
        Arc::new(FrameBudget {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// The budget's size in bytes, for the refusal's message.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// A share for one connection's frames, holding nothing yet.
    pub(super) fn share(self: &Arc<Self>) -> Share {
        Share {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, bytes: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// What one connection's frame in progress holds of the budget; given back when the frame
/// is complete or dropped ([`Share::release`]), and when the connection ends.
#[derive(Debug)]
pub(super) struct Share {
    budget: Arc<FrameBudget>,
    bytes: usize,
}

impl Share {
    /// Makes the share cover a frame of `size` bytes (so far). False when the budget has no
    /// room: the frame must be refused, and the share then holds what it held before.
    pub(super) fn cover(&mut self, size: usize) -> bool {
        let needed = size.saturating_sub(FREE);
        if needed <= self.bytes {
            return true;
        }
        if !self.budget.take(needed - self.bytes) {
            return false;
        }
        self.bytes = needed;
        true
    }

    /// The frame is complete or dropped: gives its bytes back.
    pub(super) fn release(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
            self.bytes = 0;
        }
    }

    /// The budget's size in bytes, for the refusal's message.
    pub(super) fn limit(&self) -> usize {
        self.budget.limit()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_share_the_budget_and_small_ones_never_ask() {
        let budget = FrameBudget::new(100);
        let (mut a, mut b, mut small) = (budget.share(), budget.share(), budget.share());
        assert!(a.cover(FREE + 60));
        assert!(
            a.cover(FREE + 30),
            "a share never shrinks while its frame lasts"
        );
        assert!(!b.cover(FREE + 41));
        assert!(b.cover(FREE + 40));
        assert!(small.cover(FREE), "up to FREE needs no room");
        a.release();
        assert!(b.cover(FREE + 100));
        drop(b);
        assert!(a.cover(FREE + 100));
    }
}
