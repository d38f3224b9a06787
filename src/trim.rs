//! Giving memory back after a burst (issue #48). glibc's malloc keeps the pages it freed
//! inside its heaps and arenas for the next allocation, so after a burst (many `/mcp`
//! sessions, calls with megabyte outputs) an idle daemon's RSS stayed at 2–3× its idle
//! figure. `malloc_trim(0)` hands every whole free page of every arena back to the kernel.
//!
//! It runs once a burst is over: each call, each connection and each `/mcp` session's state
//! marks the end of a piece of work when it goes ([`Burst`]); the first mark arms a one-shot
//! timer, which trims once nothing was marked for [`QUIET`], and once more [`LATE`] after
//! the last mark: what timers free after the work itself ended (an abandoned `/mcp`
//! session's probe grace and rmcp's drain, blocking threads leaving after their keep-alive)
//! is freed without a mark, and measured with `benches/idle.rs sessions` it was most of
//! what stayed (a manual `malloc_trim` 20 s after 2,000 sessions took RSS from +45 to +15
//! MiB over idle, the one at `QUIET` had run). Between bursts no timer exists, so an idle
//! daemon never wakes for it. Chosen over another allocator, measured by preloading each
//! into the same run: jemalloc left +21 MiB (its decay needs activity or a background
//! thread), mimalloc +11 MiB but 29 MiB more when idle.
//!
//! `malloc_trim` cannot return a page that holds a chunk in use. glibc's per-thread cache
//! (tcache: each thread reuses the last 7 chunks it freed of each size up to 1 KiB, last in
//! first out) puts what a burst's last requests allocate wherever its first requests freed
//! memory, so what stays after a burst is spread over many pages. Measured after 2,000
//! sessions (`benches/idle.rs sessions`): +5.4 MiB over idle with the cache, +1.8 MiB
//! without it, and the daemon's CPU per relayed call no higher without it (`benches/sharing.rs
//! relay`, interleaved). Emptying the caches before a trim (by hand, through gdb) gave
//! nothing back: it is the placement, not the cached chunks. So the daemon runs without it
//! ([`exec_without_thread_cache`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

/// How long the daemon must have been quiet before it trims.
pub const QUIET: Duration = Duration::from_secs(2);
/// When it trims a second time after the last mark: after every grace timer of the work
/// (the longest, an abandoned session's probe grace, is 10 s), and early enough that the
/// blocking thread it runs on has left (10 s keep-alive) within the idle benchmark's
/// settling time (35 s).
pub const LATE: Duration = Duration::from_secs(20);

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

/// A piece of work ended: trim once the daemon has been quiet for [`QUIET`], and again
/// [`LATE`] after the last mark.
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
        let mut pass = QUIET;
        let mut last = LAST.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep_until(*EPOCH + Duration::from_millis(last) + pass).await;
            let now = LAST.load(Ordering::Relaxed);
            if now != last {
                // More work ended meanwhile: quiet again first.
                (last, pass) = (now, QUIET);
                continue;
            }
            let _ = tokio::task::spawn_blocking(release).await;
            if pass == LATE {
                break;
            }
            pass = LATE;
        }
        ARMED.store(false, Ordering::Release);
        // A mark made after the last look found the timer still armed: arm the next one.
        if LAST.load(Ordering::Relaxed) != last {
            worked();
        }
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

/// glibc reads its malloc tunables from this variable, once, as a program starts.
const TUNABLES: &str = "GLIBC_TUNABLES";
/// The tunable that turns the per-thread cache off.
const NO_THREAD_CACHE: &str = "glibc.malloc.tcache_count=0";
/// The launcher's own `GLIBC_TUNABLES` (empty when it had none), kept across the daemon's
/// second start so the programs the daemon runs get the environment it was given.
const LAUNCHERS: &str = "TOOLHOST_LAUNCHER_GLIBC_TUNABLES";

/// Runs the daemon without glibc's per-thread malloc cache (see the module's doc): unless
/// the launcher set that tunable itself (the systemd unit does, sparing a second start),
/// executes the binary again, same process, with it added to `GLIBC_TUNABLES`. Called
/// first thing, before any thread exists and before the environment is touched (secrets
/// are taken out of it afterwards). Where `/proc/self/exe` cannot be executed the daemon
/// goes on with the cache.
pub fn exec_without_thread_cache() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if let Some(theirs) = std::env::var_os(LAUNCHERS) {
            // The second start: the programs the daemon runs inherit what it was given.
            std::env::remove_var(LAUNCHERS);
            keep_process_name();
            if theirs.is_empty() {
                std::env::remove_var(TUNABLES);
            } else {
                std::env::set_var(TUNABLES, theirs);
            }
            return;
        }
        let theirs = std::env::var_os(TUNABLES).unwrap_or_default();
        if theirs
            .to_string_lossy()
            .contains("glibc.malloc.tcache_count")
        {
            return;
        }
        let ours = if theirs.is_empty() {
            NO_THREAD_CACHE.into()
        } else {
            let mut joined = theirs.clone();
            joined.push(":");
            joined.push(NO_THREAD_CACHE);
            joined
        };
        let mut args = std::env::args_os();
        let program = args.next().unwrap_or_default();
        let _not_executed = std::process::Command::new("/proc/self/exe")
            .arg0(program)
            .args(args)
            .env(TUNABLES, ours)
            .env(LAUNCHERS, theirs)
            .exec();
    }
}

/// Names the process after its binary again: executed as `/proc/self/exe`, the kernel
/// named it `exe`, which is what `ps`, `top`, `pgrep toolhost` and `systemctl status` would
/// show.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_process_name() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let exe = exe.to_string_lossy();
    // A binary replaced on disk since (an upgrade) reads "… (deleted)".
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    let name = exe.rsplit('/').next().unwrap_or(exe);
    // The kernel keeps 15 bytes; a name with a NUL in it cannot be set.
    let name: Vec<u8> = name.bytes().take(15).collect();
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which `name` is.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
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
