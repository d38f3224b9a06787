//! The adopted-zombie reaper: as the child subreaper we inherit every orphan of our groups,
//! so someone must wait for those once they exit, and kill the ones no running group owns.
//!
//! It wakes on SIGCHLD, on a group's start, every [`escapees::SCAN_EVERY`] while a zombie is
//! pending or a call's group runs, and less and less often (up to
//! [`escapees::SCAN_AT_MOST_EVERY`]) while only long-lived groups run (MCP servers, the
//! module host), so an idle daemon with servers connected sleeps. A SIGCHLD is mostly one
//! of our own children exiting (every call's program does), which tokio reaps: then a look
//! at our direct children (a few small reads) shows nothing adopted, and the full /proc scan
//! waits for its next turn. It runs at least every [`escapees::SCAN_EVERY`] while a call's
//! groups run, so processes escaping from a live call are still attributed that often
//! however many calls end in between.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::{escapees, procfs, scan, spawner, OURS};
use crate::lock;

/// How long an unknown zombie child must stay unreaped before we reap it: a direct child
/// forked elsewhere (e.g. `std::process::Command::output`) is waited for at once by its
/// owner, while an adopted orphan has nobody else.
const ADOPTED_ZOMBIE_AGE: Duration = Duration::from_secs(1);

/// Unknown zombies by when the reaper first saw them.
type Seen = HashMap<(i32, u64), std::time::Instant>;

/// Reaps adopted zombies, and records and kills escapees (see [`escapees`]). An idle daemon
/// (no group, nothing pending) wakes only for SIGCHLD or a group's start. Never
/// `waitpid(-1)`: that would steal the statuses tokio waits for.
pub(super) async fn reap_adopted_forever() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = signal(SignalKind::child()).ok();
    let mut pending = false;
    let mut seen = Seen::new();
    let mut last_scan = Instant::now();
    // The interval while only long-lived groups run (see `escapees::next_interval`).
    let mut quiet = escapees::SCAN_EVERY;
    loop {
        // A running group's process can escape and be orphaned to us without a SIGCHLD
        // reaching us (its parents get those), so while groups run a tick scans too. Asked
        // for before looking, so a group starting in between is not missed.
        let started = escapees::group_started();
        let busy = pending || escapees::any_running() || sigchld.is_none();
        let every = if pending || escapees::call_running() {
            escapees::SCAN_EVERY
        } else {
            quiet
        };
        let tick = tokio::time::sleep_until(last_scan + every);
        let child_exited = match sigchld.as_mut() {
            Some(s) => tokio::select! {
                _ = s.recv() => true,
                () = tick, if busy => false,
                () = started => {
                    quiet = escapees::SCAN_EVERY;
                    continue;
                }
            },
            None => {
                tick.await;
                false
            }
        };
        if !child_exited && !pending && !escapees::any_running() {
            last_scan = Instant::now();
            continue;
        }
        let scan_due = pending || last_scan.elapsed() >= every;
        // Run on the spawner thread: no spawn can be half-recorded while we look.
        let scan = spawner::on_spawner(move || {
            if !scan_due && nothing_adopted() {
                return (false, seen, false);
            }
            let pending = reap_adopted(&mut seen);
            (pending, seen, true)
        });
        let scanned;
        (pending, seen, scanned) = match scan.await {
            Ok(done) => done,
            Err(_) => (true, Seen::new(), true),
        };
        if scanned {
            last_scan = Instant::now();
            // Something was adopted: look again soon. A quiet tick: later.
            quiet = if scan_due {
                escapees::next_interval(every)
            } else {
                escapees::SCAN_EVERY
            };
        }
    }
}

/// Whether every child handed to our main thread (where adopted orphans go, see
/// [`procfs::main_thread_children`]) is one we started or one the daemon forked for itself
/// (see [`escapees::adopted`]), with no unknown zombie to reap. False when that cannot be
/// read. Our children that are gone are forgotten by the next [`reap_adopted`].
fn nothing_adopted() -> bool {
    let ours = lock(&OURS);
    let known = |k: (i32, u64)| ours.as_ref().is_some_and(|o| o.contains(&k));
    let Some(children) = procfs::main_thread_children() else {
        return false;
    };
    let me = std::process::id() as i32;
    let mut kids: Vec<procfs::Stat> = children.into_iter().filter_map(procfs::stat).collect();
    let unknown_zombie = kids
        .iter()
        .any(|s| s.is_zombie() && !known((s.pid, s.starttime)));
    let Some(mine) = procfs::stat(me) else {
        return false;
    };
    kids.push(mine);
    !unknown_zombie && escapees::adopted(&kids, known).is_empty()
}

/// One scan: kill adopted processes no running group owns (leftovers of ended groups; the
/// rest are recorded by [`scan`]) and wait for zombie children that are not ours and have
/// been zombies long enough. `seen` holds when each unknown zombie was first seen. True
/// while some are left for a later scan.
fn reap_adopted(seen: &mut Seen) -> bool {
    let me = std::process::id() as i32;
    let (all, strays) = scan();
    for s in strays {
        procfs::signal_exact(s.pid, s.starttime, Signal::SIGKILL);
    }
    let zombies: Vec<&procfs::Stat> = all
        .iter()
        .filter(|s| s.ppid == me && s.is_zombie())
        .collect();
    let mut ours = lock(&OURS);
    let ours = ours.get_or_insert_with(HashSet::new);
    // Forget our children that are gone (tokio reaped them) or whose pid was reused.
    ours.retain(|(pid, start)| procfs::stat(*pid).is_some_and(|s| s.starttime == *start));
    let now = std::time::Instant::now();
    let mut still = HashMap::new();
    for z in zombies {
        let key = (z.pid, z.starttime);
        if ours.contains(&key) {
            continue;
        }
        let first = seen.get(&key).copied().unwrap_or(now);
        if now.duration_since(first) >= ADOPTED_ZOMBIE_AGE {
            let _ = waitpid(Pid::from_raw(z.pid), Some(WaitPidFlag::WNOHANG));
        } else {
            still.insert(key, first);
        }
    }
    let pending = !still.is_empty();
    *seen = still;
    pending
}
