//! The daemon's file descriptors: as many as the system grants, and a reserve kept for the
//! daemon's own work (store writes, spawning a call's pipes, accepting the local CLI).
//!
//! A client can make the daemon open descriptors (connections, sessions); when the table is
//! full every later `open`, `pipe` or `fsync`-then-rename fails, for every client. So work
//! that a client starts at will (a new `/mcp` session) is refused while fewer than
//! [`RESERVE`] descriptors are free, and the soft limit is raised to the hard one at start.

use nix::libc;

/// Descriptors kept free for the daemon's own work: enough for a burst of calls (three
/// pipes and a pidfd each), store writes and a few accepted connections.
pub const RESERVE: u64 = 128;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (the usual soft default of 1,024 is
/// low for a daemon that many clients share). Failure leaves the limit as it was.
pub fn raise_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Descriptors this process may still open, or `None` when that cannot be told.
pub fn free() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    // Counting /proc/self/fd takes one descriptor itself, so this fails when none is left.
    match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => Some(lim.rlim_cur.saturating_sub(dir.count() as u64)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => Some(0),
        Err(_) => None,
    }
}

/// Why new client work is refused now, or `None` while the reserve is intact (or the
/// count cannot be told).
pub fn short() -> Option<String> {
    free().filter(|&n| n < RESERVE).map(|n| {
        format!(
            "the daemon has only {n} file descriptors left and keeps {RESERVE} for its own work"
        )
    })
}
