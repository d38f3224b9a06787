//! The ledger of live process groups, in the data dir, so that a daemon killed with -9 (no
//! chance to clean up) has its leftovers killed by the next daemon on the same data dir.
//!
//! `PR_SET_PDEATHSIG` covers only our direct children; a grandchild that was still running
//! survives. Each line is `boot_id instance pgid starttime`: pids mean nothing across boots,
//! the start time of the group leader tells a reused pgid from ours, and the instance is the
//! `TOOLHOST_INSTANCE` cookie every child of that daemon carried. A process that escaped its
//! group (see [`super::escapees`]) has a line `boot_id instance pid starttime escapee`: it is
//! killed by pid and start time, since it may carry neither our group nor our cookie.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use super::procfs;

/// File name of the ledger inside the data dir.
pub const LEDGER_FILE: &str = "process-groups";

/// One daemon's ledger: the groups it has running, kept in its data dir.
#[derive(Default)]
pub(super) struct Ledger {
    /// Unset until the daemon opens it (library users and unit tests keep no ledger).
    path: Option<PathBuf>,
    boot_id: String,
    groups: Vec<(i32, u64)>,
    /// Escaped processes, by pid and start time.
    escapees: Vec<(i32, u64)>,
}

/// The last word of an escapee's line.
const ESCAPEE: &str = "escapee";

impl Ledger {
    /// Rewrites the whole file (it holds one line per live group, so it stays tiny);
    /// written aside and renamed so a crash never leaves half a line. `instance` is the
    /// owning daemon's cookie.
    fn save(&self, instance: &str) {
        let Some(path) = &self.path else { return };
        let mut text = String::new();
        for (pgid, start) in &self.groups {
            text.push_str(&format!("{} {instance} {pgid} {start}\n", self.boot_id));
        }
        for (pid, start) in &self.escapees {
            let boot = &self.boot_id;
            text.push_str(&format!("{boot} {instance} {pid} {start} {ESCAPEE}\n"));
        }
        let written = crate::atomic_file::write_atomic(
            path,
            text.as_bytes(),
            crate::atomic_file::Durability::Atomic,
        );
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), "cannot write the process ledger: {e}");
        }
    }

    pub(super) fn record(&mut self, instance: &str, pgid: i32, starttime: u64) {
        self.groups.push((pgid, starttime));
        self.save(instance);
    }

    /// Whether the group was listed.
    pub(super) fn forget(&mut self, instance: &str, pgid: i32, starttime: u64) -> bool {
        let before = self.groups.len();
        self.groups.retain(|g| *g != (pgid, starttime));
        let listed = self.groups.len() != before;
        if listed {
            self.save(instance);
        }
        listed
    }

    pub(super) fn record_escapee(&mut self, instance: &str, pid: i32, starttime: u64) {
        self.escapees.push((pid, starttime));
        self.save(instance);
    }

    /// Drops the escapees of an ended group (already killed).
    pub(super) fn forget_escapees(&mut self, instance: &str, gone: &[(i32, u64)]) {
        let before = self.escapees.len();
        self.escapees.retain(|p| !gone.contains(p));
        if self.escapees.len() != before {
            self.save(instance);
        }
    }

    /// Starts keeping the ledger in `data_dir` (after sweeping what a previous daemon left).
    pub(super) fn open(&mut self, instance: &str, data_dir: &Path) {
        self.path = Some(data_dir.join(LEDGER_FILE));
        self.boot_id = procfs::boot_id();
        self.save(instance);
    }

    /// Stops keeping the ledger and removes the file (a clean shutdown leaves nothing behind).
    pub(super) fn close(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Kills what a previous daemon on this data dir left running, and returns how many
/// processes were signalled (`me` is the sweeping daemon's own cookie). Only this boot's entries count; a group whose leader pid now
/// belongs to a newer process was reused and is left alone; members must be ours (uid),
/// in the group and no older than its leader. Processes still carrying an old instance's
/// cookie (escaped from their group with `setsid`) are killed as well, and so are the
/// recorded escapees still running with their recorded start time, with their descendants.
pub(super) fn sweep(data_dir: &Path, me: &str) -> usize {
    let path = data_dir.join(LEDGER_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return 0;
    };
    let boot = procfs::boot_id();
    let mut groups = Vec::new();
    let mut escapees = Vec::new();
    let mut instances = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (b, inst, pgid, start, escapee) = match f[..] {
            [b, inst, pgid, start] => (b, inst, pgid, start, false),
            [b, inst, pid, start, ESCAPEE] => (b, inst, pid, start, true),
            _ => continue,
        };
        let (Ok(pgid), Ok(start)) = (pgid.parse::<i32>(), start.parse::<u64>()) else {
            continue;
        };
        if b != boot || pgid <= 1 || inst == me {
            continue;
        }
        instances.insert(inst.to_owned());
        if escapee {
            escapees.push((pgid, start));
        } else {
            groups.push((pgid, start));
        }
    }
    let mut killed = 0;
    let procs: Vec<procfs::Stat> = procfs::pids()
        .into_iter()
        .filter(|&p| procfs::owned_by_us(p))
        .filter_map(procfs::stat)
        .filter(|s| !s.is_zombie())
        .collect();
    for (pgid, start) in groups {
        if procfs::stat(pgid).is_some_and(|s| s.starttime != start) {
            continue; // the pgid now names somebody else's group
        }
        for p in procs
            .iter()
            .filter(|s| s.pgrp == pgid && s.starttime >= start)
        {
            killed += usize::from(procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL));
        }
    }
    let all = procfs::all();
    let listed: Vec<i32> = escapees
        .iter()
        .filter(|(pid, start)| procs.iter().any(|s| s.pid == *pid && s.starttime == *start))
        .map(|(pid, _)| *pid)
        .collect();
    let mut doomed: Vec<procfs::Stat> = procs
        .iter()
        .filter(|s| listed.contains(&s.pid))
        .copied()
        .collect();
    doomed.extend(procfs::descendants_in(&all, &listed));
    for p in doomed {
        if procfs::owned_by_us(p.pid) {
            killed += usize::from(procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL));
        }
    }
    for inst in instances {
        let entry = format!("{}={inst}", super::INSTANCE_VAR);
        for p in procfs::holders(entry.as_bytes()) {
            killed += usize::from(procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL));
        }
    }
    let _ = std::fs::remove_file(&path);
    killed
}
