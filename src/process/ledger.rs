//! The ledger of live process groups, in the data dir, so that a daemon killed with -9 (no
//! chance to clean up) has its leftovers killed by the next daemon on the same data dir.
//!
//! `PR_SET_PDEATHSIG` covers only our direct children; a grandchild that was still running
//! survives. Each line is `boot_id instance pgid starttime`: pids mean nothing across boots,
//! the start time of the group leader tells a reused pgid from ours, and the instance is the
//! `TOOLHOST_INSTANCE` cookie every child of that daemon carried. A process that escaped its
//! group (see [`super::escapees`]) has a line `boot_id instance pid starttime escapee`: it is
//! killed by pid and start time, since it may carry neither our group nor our cookie.
//!
//! Every call starts and ends a group, so the file is a journal: each change is one line
//! appended with one `write` (an ended entry is its line again with `ended` after it), the
//! file is emptied when nothing is left running and rewritten whole (aside, then renamed)
//! once ended lines outnumber the live ones. A line cut short by a crash does not parse, or
//! names a start time no process has, and is skipped; an `ended` line lost that way only
//! makes the sweep look for a process that is gone.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
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
    /// The file, open for appending, while the ledger is kept.
    file: Option<File>,
    boot_id: String,
    groups: Vec<(i32, u64)>,
    /// Escaped processes, by pid and start time.
    escapees: Vec<(i32, u64)>,
    /// Lines in the file (live and ended), to know when to rewrite it.
    lines: usize,
}

/// The last word of an escapee's line.
const ESCAPEE: &str = "escapee";
/// The word after an entry that has ended.
const ENDED: &str = "ended";
/// Ended lines the file may hold beyond its live ones before it is rewritten.
const SLACK_LINES: usize = 256;

impl Ledger {
    /// Rewrites the whole file with the live entries, aside and renamed so that a crash
    /// leaves the old file or the new one; appends go to the new one. `instance` is the
    /// owning daemon's cookie.
    fn rewrite(&mut self, instance: &str) {
        let Some(path) = &self.path else { return };
        let mut text = String::new();
        for &(pgid, start) in &self.groups {
            text.push_str(&self.line(instance, pgid, start, false, false));
        }
        for &(pid, start) in &self.escapees {
            text.push_str(&self.line(instance, pid, start, true, false));
        }
        let written = crate::atomic_file::write_atomic(
            path,
            text.as_bytes(),
            crate::atomic_file::Durability::Atomic,
        )
        .and_then(|()| File::options().append(true).open(path));
        match written {
            Ok(file) => self.file = Some(file),
            Err(e) => {
                self.file = None;
                tracing::warn!(path = %path.display(), "cannot write the process ledger: {e}");
            }
        }
        self.lines = self.groups.len() + self.escapees.len();
    }

    fn line(&self, instance: &str, id: i32, start: u64, escapee: bool, ended: bool) -> String {
        let boot = &self.boot_id;
        let escapee = if escapee { " escapee" } else { "" };
        let ended = if ended { " ended" } else { "" };
        format!("{boot} {instance} {id} {start}{escapee}{ended}\n")
    }

    /// Appends one change; empties the file once nothing runs, rewrites it once it holds
    /// too many ended lines.
    fn append(&mut self, instance: &str, id: i32, start: u64, escapee: bool, ended: bool) {
        let line = self.line(instance, id, start, escapee, ended);
        let Some(file) = self.file.as_mut() else {
            if self.path.is_some() {
                self.rewrite(instance); // an earlier write failed: try again whole
            }
            return;
        };
        let live = self.groups.len() + self.escapees.len();
        let written = if live == 0 {
            self.lines = 0;
            file.set_len(0)
        } else {
            self.lines += 1;
            file.write_all(line.as_bytes())
        };
        if let Err(e) = written {
            tracing::warn!("cannot append to the process ledger: {e}");
            self.file = None;
        } else if self.lines > live + SLACK_LINES {
            self.rewrite(instance);
        }
    }

    pub(super) fn record(&mut self, instance: &str, pgid: i32, starttime: u64) {
        self.groups.push((pgid, starttime));
        self.append(instance, pgid, starttime, false, false);
    }

    /// Whether the group was listed.
    pub(super) fn forget(&mut self, instance: &str, pgid: i32, starttime: u64) -> bool {
        let before = self.groups.len();
        self.groups.retain(|g| *g != (pgid, starttime));
        let listed = self.groups.len() != before;
        if listed {
            self.append(instance, pgid, starttime, false, true);
        }
        listed
    }

    pub(super) fn record_escapee(&mut self, instance: &str, pid: i32, starttime: u64) {
        self.escapees.push((pid, starttime));
        self.append(instance, pid, starttime, true, false);
    }

    /// Drops the escapees of an ended group (already killed).
    pub(super) fn forget_escapees(&mut self, instance: &str, gone: &[(i32, u64)]) {
        for &(pid, start) in gone {
            let before = self.escapees.len();
            self.escapees.retain(|p| *p != (pid, start));
            if self.escapees.len() != before {
                self.append(instance, pid, start, true, true);
            }
        }
    }

    /// Starts keeping the ledger in `data_dir` (after sweeping what a previous daemon left).
    pub(super) fn open(&mut self, instance: &str, data_dir: &Path) {
        self.path = Some(data_dir.join(LEDGER_FILE));
        self.boot_id = procfs::boot_id();
        self.rewrite(instance);
    }

    /// Stops keeping the ledger and removes the file (a clean shutdown leaves nothing behind).
    pub(super) fn close(&mut self) {
        self.file = None;
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
        let (b, inst, pgid, start, escapee, ended) = match f[..] {
            [b, inst, pgid, start] => (b, inst, pgid, start, false, false),
            [b, inst, pgid, start, ENDED] => (b, inst, pgid, start, false, true),
            [b, inst, pid, start, ESCAPEE] => (b, inst, pid, start, true, false),
            [b, inst, pid, start, ESCAPEE, ENDED] => (b, inst, pid, start, true, true),
            _ => continue,
        };
        let (Ok(pgid), Ok(start)) = (pgid.parse::<i32>(), start.parse::<u64>()) else {
            continue;
        };
        if b != boot || pgid <= 1 || inst == me {
            continue;
        }
        instances.insert(inst.to_owned());
        let list = if escapee { &mut escapees } else { &mut groups };
        if ended {
            list.retain(|e| *e != (pgid, start));
        } else {
            list.push((pgid, start));
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A call's group starting and ending appends to the file: it is not rewritten (a new
    /// file renamed over it, as it was for every change) while groups come and go.
    #[test]
    fn calls_append_to_the_journal_instead_of_rewriting_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        let mut ledger = Ledger::default();
        ledger.open("me", dir.path());
        ledger.record("me", 100, 1);
        let inode = std::fs::metadata(&path).unwrap().ino();
        for pgid in 200..210 {
            ledger.record("me", pgid, 2);
            assert!(ledger.forget("me", pgid, 2));
        }
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 21, "{text}");
        assert!(
            text.lines().last().unwrap().ends_with(" 209 2 ended"),
            "{text}"
        );
        // Nothing running: the file is emptied.
        assert!(ledger.forget("me", 100, 1));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    /// Ended lines cannot pile up: past the slack the file is rewritten with the live ones.
    #[test]
    fn the_journal_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        let mut ledger = Ledger::default();
        ledger.open("me", dir.path());
        ledger.record("me", 100, 1);
        for pgid in 0..SLACK_LINES as i32 {
            ledger.record("me", 1000 + pgid, 2);
            ledger.forget("me", 1000 + pgid, 2);
        }
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= SLACK_LINES + 1, "{lines} lines");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.lines().any(|l| l.ends_with(" 100 1")), "{text}");
    }

    /// The sweep reads the journal: an ended group is left alone, a live one killed.
    #[test]
    fn the_sweep_kills_only_what_the_journal_left_running() {
        let dir = tempfile::tempdir().unwrap();
        let spawn = || {
            let mut c = std::process::Command::new("sleep");
            c.arg("300").process_group(0);
            c.spawn().unwrap()
        };
        let (mut live, mut ended) = (spawn(), spawn());
        let start = |c: &std::process::Child| procfs::stat(c.id() as i32).unwrap().starttime;
        let mut old = Ledger::default();
        old.open("old", dir.path());
        old.record("old", live.id() as i32, start(&live));
        old.record("old", ended.id() as i32, start(&ended));
        old.forget("old", ended.id() as i32, start(&ended));
        assert_eq!(sweep(dir.path(), "new"), 1);
        let status = live.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(
            ended.try_wait().unwrap().is_none(),
            "the ended group was killed"
        );
        ended.kill().unwrap();
        ended.wait().unwrap();
    }
}
