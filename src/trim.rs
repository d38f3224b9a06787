//! Giving memory back after a burst (issue #48). glibc's malloc keeps the pages it freed
//! inside its heaps and arenas for the next allocation, so after a burst (many `/mcp`
//! sessions, calls with megabyte outputs) an idle daemon's RSS stayed at 2–3× its idle
//! figure. `malloc_trim(0)` hands every whole free page of every arena back to the kernel.
//!
//! It runs once a burst is over: each call and each connection marks the end of a piece of
//! work ([`Burst`]); the first mark arms a one-shot timer, which trims once nothing was
//! marked for [`QUIET`]. Between bursts no timer exists, so an idle daemon never wakes for
//! it. Tried first because it costs no dependency, no thread and no change of allocator
//! for the rest of the daemon's work; jemalloc and mimalloc return memory by decay, and an
//! idle process only with background threads of theirs (`benches/idle.rs memory` is where
//! to compare them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

/// How long the daemon must have been quiet before it trims.
pub const QUIET: Duration = Duration::from_secs(2);

/// Set while a trim is pending (its timer task exists).
static ARMED: AtomicBool = AtomicBool::new(false);
/// When the last piece of work ended, in milliseconds after [`EPOCH`].
static LAST: AtomicU64 = AtomicU64::new(0);
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Marks the end of a piece of work when dropped (a call, a connection).
pub struct Burst;

impl Drop for Burst {
    fn drop(&mut self) {
        worked();
    }
}

/// A piece of work ended: trim once the daemon has been quiet for [`QUIET`].
pub fn worked() {
    LAST.store(now_ms(), Ordering::Relaxed);
    if ARMED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        ARMED.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(async {
        loop {
            let last = LAST.load(Ordering::Relaxed);
            tokio::time::sleep_until(*EPOCH + Duration::from_millis(last) + QUIET).await;
            if LAST.load(Ordering::Relaxed) == last {
                break;
            }
        }
        // Disarmed first: work ending during the trim arms the next one.
        ARMED.store(false, Ordering::Release);
        let _ = tokio::task::spawn_blocking(release).await;
    });
}

/// Trims now (off the runtime's threads), at most once a second: the last client left.
pub fn now() {
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    let second = now_ms() / 1000;
    if LAST.swap(second, Ordering::Relaxed) == second {
        return;
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn_blocking(release);
    }
}

/// Returns the free pages of every malloc arena to the kernel.
fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and shrinks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
