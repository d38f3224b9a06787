//! Which call an escaped process belongs to, without trusting its environment.
//!
//! A process can leave its call's process group (`setsid`), its parent (a double fork) and
//! its cookies (`env -i`, `execve` with an empty environment). What it cannot leave is its
//! ancestry: while its parent chain is intact it descends from the group's leader, and once
//! the chain breaks it is reparented to us, the child subreaper. So at every scan (the
//! reaper's: every [`SCAN_EVERY`] while a call's group runs, less and less often while only
//! long-lived groups do, see [`next_interval`]; and every kill of a group) we take one
//! snapshot of /proc and attribute, by pid and start time (so a reused pid is never
//! mistaken for ours):
//! - processes in a live leader's tree but outside its group, to that group;
//! - processes adopted by us, to the group whose pgid they still carry, else to the latest
//!   group started before them (with two calls running, a guess: see `guarantees.md`);
//! - descendants of an attributed process, to the same group.
//!
//! Attributed processes are recorded in their daemon's ledger and watchdog, so they die with
//! their call, with the daemon (SIGTERM or SIGKILL) and in the next start's sweep.
//!
//! Process-wide, like the subreaper flag it relies on: adopted orphans are the process's,
//! whichever daemon in it started their call.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use super::procfs::Stat;
use super::Processes;

/// How often the reaper rescans while a call's group runs, to catch a process that escapes
/// and is orphaned before its group ends (recorded, it also dies if the daemon is SIGKILLed).
/// Also the first interval after any group starts.
pub(super) const SCAN_EVERY: Duration = Duration::from_millis(500);

/// The longest interval between scans while only groups of no call run (MCP servers, the
/// module host): the safety scan of an idle daemon.
pub(super) const SCAN_AT_MOST_EVERY: Duration = Duration::from_secs(30);

/// The interval after a scan that came `previous` after the one before, while no call's
/// group runs: it doubles up to [`SCAN_AT_MOST_EVERY`]. A long-lived group forks and
/// escapes, if ever, mostly as it starts (`npx` starting `node`), and a group's start sets
/// the interval back to [`SCAN_EVERY`]; an idle daemon then wakes for this once in 30 s,
/// not twice a second. What the scans in between would have caught is still caught when
/// the group ends (its kill scans), and its orphans' own exits are SIGCHLDs to us.
pub(super) fn next_interval(previous: Duration) -> Duration {
    (previous * 2).min(SCAN_AT_MOST_EVERY)
}

/// A group (its leader's pid, which is the pgid, and start time) or a process.
pub(super) type Key = (i32, u64);

struct Live {
    group: Key,
    owner: Processes,
    /// The call whose tool started the group (`None`: an MCP server, a session event).
    call: Option<Arc<str>>,
}

#[derive(Default)]
struct Tracker {
    /// Running groups, oldest first.
    groups: Vec<Live>,
    /// Escaped processes by the group they belong to.
    owners: HashMap<Key, Key>,
}

static TRACKER: LazyLock<Mutex<Tracker>> = LazyLock::new(Mutex::default);

/// Woken when a group starts, so an idle reaper (no group running) need not tick.
static STARTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn key(s: &Stat) -> Key {
    (s.pid, s.starttime)
}

/// A group started, for `call` if a call's tool started it.
pub(super) fn begin(group: Key, owner: &Processes, call: Option<Arc<str>>) {
    crate::lock(&TRACKER).groups.push(Live {
        group,
        owner: owner.clone(),
        call,
    });
    STARTED.notify_waiters();
}

/// Resolves at the next group start after this call (see [`any_running`] for the state
/// before it).
pub(super) fn group_started() -> tokio::sync::futures::Notified<'static> {
    STARTED.notified()
}

/// A group ended (after its kill): returns its escapees, for its ledger to forget.
pub(super) fn end(group: Key) -> Vec<Key> {
    let mut t = crate::lock(&TRACKER);
    t.groups.retain(|g| g.group != group);
    let mine: Vec<Key> = t
        .owners
        .iter()
        .filter(|(_, g)| **g == group)
        .map(|(p, _)| *p)
        .collect();
    for p in &mine {
        t.owners.remove(p);
    }
    mine
}

/// Whether any escaped process is attributed to `group`.
pub(super) fn has_members(group: Key) -> bool {
    crate::lock(&TRACKER).owners.values().any(|g| *g == group)
}

/// Whether any group of any daemon in this process is running.
pub(super) fn any_running() -> bool {
    !crate::lock(&TRACKER).groups.is_empty()
}

/// Whether a group a call's tool started is running: a call's program is arbitrary code
/// that may escape at any moment, so the reaper scans every [`SCAN_EVERY`] then.
pub(super) fn call_running() -> bool {
    crate::lock(&TRACKER)
        .groups
        .iter()
        .any(|g| g.call.is_some())
}

/// Processes we adopted as child subreaper: our children that we did not start through
/// `process/` (`ours`) and that cannot be children the daemon forked elsewhere (those stay
/// in our session and either in our group or leading their own, like the watchdog).
pub(super) fn adopted<'a>(all: &'a [Stat], ours: impl Fn(Key) -> bool + 'a) -> Vec<&'a Stat> {
    let me = std::process::id() as i32;
    let Some(mine) = all.iter().find(|s| s.pid == me).copied() else {
        return Vec::new();
    };
    all.iter()
        .filter(|s| s.ppid == me && !s.is_zombie() && !ours(key(s)))
        .filter(|s| s.sid != mine.sid || (s.pgrp != mine.pgrp && s.pgrp != s.pid))
        .collect()
}

/// Attributes every escaped process in the snapshot `all` to its group (see the module
/// docs) and records new ones in their daemon's ledger. Returns the adopted processes no
/// running group can own: leftovers of ended groups.
pub(super) fn scan(all: &[Stat], ours: impl Fn(Key) -> bool) -> Vec<Stat> {
    let mut fresh: Vec<(Processes, Key)> = Vec::new();
    let mut stray = Vec::new();
    {
        let mut t = crate::lock(&TRACKER);
        let Tracker { groups, owners } = &mut *t;
        // Gone or reused: forget.
        owners.retain(|p, _| all.iter().any(|s| key(s) == *p && !s.is_zombie()));
        let mut attribute = |owners: &mut HashMap<Key, Key>, p: Key, g: &Live| {
            if let std::collections::hash_map::Entry::Vacant(e) = owners.entry(p) {
                e.insert(g.group);
                fresh.push((g.owner.clone(), p));
            }
        };
        for g in groups.iter() {
            let (pgid, start) = g.group;
            if !all
                .iter()
                .any(|s| key(s) == (pgid, start) && !s.is_zombie())
            {
                continue;
            }
            for d in super::procfs::descendants_in(all, &[pgid]) {
                if d.pgrp != pgid {
                    attribute(owners, key(&d), g);
                }
            }
        }
        for o in adopted(all, &ours) {
            if owners.contains_key(&key(o)) {
                continue;
            }
            let by_group = groups.iter().find(|g| g.group.0 == o.pgrp);
            let by_time = || {
                groups
                    .iter()
                    .filter(|g| g.group.1 <= o.starttime)
                    .max_by_key(|g| g.group.1)
            };
            match by_group.or_else(by_time) {
                Some(g) => attribute(owners, key(o), g),
                None => stray.push(*o),
            }
        }
        // What an attributed process forked belongs to the same group.
        let roots: Vec<(Key, Key)> = owners.iter().map(|(p, g)| (*p, *g)).collect();
        for (p, g) in roots {
            let Some(live) = groups.iter().find(|l| l.group == g) else {
                continue;
            };
            for d in super::procfs::descendants_in(all, &[p.0]) {
                attribute(owners, key(&d), live);
            }
        }
        for s in stray.clone() {
            stray.extend(super::procfs::descendants_in(all, &[s.pid]));
        }
    }
    for (owner, p) in fresh {
        owner.record_escapee(p);
    }
    stray
}

/// The live processes attributed to `group` in the snapshot `all`.
pub(super) fn members(group: Key, all: &[Stat]) -> Vec<Stat> {
    let t = crate::lock(&TRACKER);
    all.iter()
        .filter(|s| !s.is_zombie() && t.owners.get(&key(s)) == Some(&group))
        .copied()
        .collect()
}

/// The live processes attributed to any group of the daemon whose cookie is `instance`.
pub(super) fn of_daemon(instance: &str, all: &[Stat]) -> Vec<Stat> {
    let t = crate::lock(&TRACKER);
    let groups: Vec<Key> = t
        .groups
        .iter()
        .filter(|g| g.owner.instance() == instance)
        .map(|g| g.group)
        .collect();
    all.iter()
        .filter(|s| !s.is_zombie())
        .filter(|s| t.owners.get(&key(s)).is_some_and(|g| groups.contains(g)))
        .copied()
        .collect()
}

/// The call of the running group of daemon `instance` that `pid` (in the snapshot `all`)
/// belongs to: the first process up its parent chain that leads a group, is in one's
/// process group (and started after it), or was attributed to one as an escapee. Run after
/// a [`scan`], so an orphan adopted since the last scan is attributed too.
pub(super) fn call_of(pid: i32, all: &[Stat], instance: &str) -> Option<Arc<str>> {
    let t = crate::lock(&TRACKER);
    let ours = |g: &&Live| g.owner.instance() == instance;
    let mut cur = pid;
    // Bounded: a chain can be no longer than the snapshot.
    for _ in 0..=all.len() {
        let s = all.iter().find(|s| s.pid == cur)?;
        let group = t.groups.iter().filter(ours).find(|g| {
            g.group == key(s)
                || (g.group.0 == s.pgrp && g.group.1 <= s.starttime)
                || t.owners.get(&key(s)) == Some(&g.group)
        });
        if let Some(g) = group {
            return g.call.clone();
        }
        if s.ppid <= 1 {
            return None;
        }
        cur = s.ppid;
    }
    None
}
