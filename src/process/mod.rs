//! Spawning children in their own process group, and making sure none outlives its reason.
//!
//! Architecture Invariant: every process the host starts (bash calls, custom tools, stdio MCP
//! servers) is spawned through [`Processes::spawn_group`]/[`Processes::spawn_with`] (a call's
//! program through [`runner`], which starts it without forking the daemon, see [`launch`])
//! and owned by a [`GroupGuard`]. Dropping the guard sends SIGTERM to the group and to its escapees
//! (processes that left it with `setsid`: those carrying its cookie and those [`escapees`]
//! ties to it by ancestry), and SIGKILL after a grace,
//! so a child — and anything it forked, like the `node` under `npx` — dies with its call, its
//! server or the daemon. If the daemon itself is killed with -9: each direct child gets
//! SIGKILL from `PR_SET_PDEATHSIG` (all forks happen on one long-lived thread, see
//! [`spawner`]), the [`watchdog`] kills the rest of the groups and escapees at once, and
//! should it be killed too, the next daemon on the same data dir sweeps them from the
//! [`ledger`].
//!
//! Cookies: every child carries `TOOLHOST_INSTANCE=<its daemon's id>` and
//! `TOOLHOST_GROUP=<id of its group>` in its environment; they survive `setsid` and double
//! forks. A process can clear its environment, though, so the cookies are only one of two
//! ways we recognise our escaped processes in /proc: the other is their ancestry, recorded
//! by pid and start time while it is still visible ([`escapees`]).
//!
//! What belongs to one daemon — its cookie, its children's environment, its ledger, its
//! watchdog — is a [`Processes`] value its host owns, so several daemons can share one
//! process. What belongs to the process stays process-wide: the spawner thread (PDEATHSIG
//! follows the forking thread), the child-subreaper flag and the set of our direct children
//! the adopted-zombie reaper must leave alone.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use globset::GlobSet;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::lock;

pub mod child_env;
mod escapees;
mod launch;
pub(crate) use launch::find_in;
pub mod ledger;
pub mod node;
use crate::procfs;
mod reaper;
pub mod runner;
pub mod spawner;
pub mod watchdog;

/// How long a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(2000);

/// Environment variables a child inherits from the daemon; everything else is explicit.
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "npm_config_cache",
    "NODE_PATH",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "SSL_CERT_FILE",
];

/// Environment variable naming the daemon instance that started a process.
pub const INSTANCE_VAR: &str = "TOOLHOST_INSTANCE";
/// Environment variable naming the process group (call or server) a process belongs to.
pub const GROUP_VAR: &str = "TOOLHOST_GROUP";

/// Direct children of this process, by (pid, start time): their exit statuses belong to
/// tokio (or, for the watchdogs, to [`watchdog::Watchdog::stop`]), so the adopted-zombie
/// reaper must never wait for them, and they are not escapees.
/// Held across each spawn and its record, and across each /proc scan, so a scan never sees
/// a child we started but have not recorded yet.
///
/// Process-wide on purpose, unlike the rest of a daemon's process state: being a child is
/// an attribute of the process, and with two daemons in one process either one's reaper
/// must leave the other's children alone.
static OURS: Mutex<Option<HashSet<(i32, u64)>>> = Mutex::new(None);

/// Set once this process is the child subreaper ([`Processes::own`]): from then on every
/// orphan of our groups is handed to us, which is what lets [`nothing_left`] answer
/// without a /proc scan.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Whether the group `(pgid, start)` has left nothing behind, known without a /proc scan:
/// no process has its pgid any more (its leader was reaped), no escapee is attributed to it,
/// and no live process we adopted is younger than it. As the child subreaper we adopt
/// whatever outlives its parents, so a process that left the group (a new group or session,
/// a cleared environment) and outlived the leader would be such a child of our main thread
/// ([`procfs::main_thread_children`]), or descend from one. The common end of a call — its program exited and its pipes
/// closed — then costs a signal and a few small reads instead of reading every process.
fn nothing_left(pgid: Pid, start: u64) -> bool {
    if !SUBREAPER.load(Ordering::Relaxed)
        || !matches!(killpg(pgid, None), Err(Errno::ESRCH))
        || escapees::has_members((pgid.as_raw(), start))
    {
        return false;
    }
    // Held so that no spawn is between its fork and its record while we look.
    let ours = lock(&OURS);
    let Some(children) = procfs::main_thread_children() else {
        return false;
    };
    children.into_iter().filter_map(procfs::stat).all(|s| {
        s.is_zombie()
            || s.starttime < start
            || ours
                .as_ref()
                .is_some_and(|o| o.contains(&(s.pid, s.starttime)))
    })
}

/// One snapshot of /proc with every escaped process attributed to its group (see
/// [`escapees`]), and the adopted processes that no running group can own.
fn scan() -> (Vec<procfs::Stat>, Vec<procfs::Stat>) {
    let mut ours = lock(&OURS);
    let ours = ours.get_or_insert_with(HashSet::new);
    let all = procfs::all();
    let strays = escapees::scan(&all, |k| ours.contains(&k));
    (all, strays)
}

/// One daemon's children: its instance cookie, the environment they start with, its
/// ledger and its watchdog. Cheap to clone; the daemon's host owns it and hands it to
/// everything that starts a program, so two daemons in one process never mix their
/// children, environments or ledgers. A call's tools get it through [`Processes::for_call`],
/// so the groups they start are known as that call's ([`Processes::call_of`]).
#[derive(Clone)]
pub struct Processes {
    state: Arc<State>,
    /// The call whose tools start programs through this handle, if any.
    call: Option<Arc<str>>,
}

struct State {
    /// This daemon's id: random, so a later daemon (or another one in this process) can
    /// tell our processes from its own.
    instance: String,
    /// The number of the next group (its cookie is `<instance>.<n>`).
    next_group: AtomicU64,
    /// The top-level `env` and `env_passthrough` in force; swapped whole by a reload.
    env: ArcSwap<child_env::Policy>,
    ledger: Mutex<ledger::Ledger>,
    /// Running while the daemon owns its children (see [`Processes::own`]).
    watchdog: Mutex<Option<watchdog::Watchdog>>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("instance", &self.state.instance)
            .finish_non_exhaustive()
    }
}

impl Default for Processes {
    /// A fresh instance with no `env`/`env_passthrough`, no ledger and no watchdog (until
    /// [`Processes::own`]).
    fn default() -> Self {
        Processes::new(child_env::Policy::default())
    }
}

impl Processes {
    pub fn new(env: child_env::Policy) -> Processes {
        Processes {
            state: Arc::new(State {
                instance: uuid::Uuid::new_v4().simple().to_string(),
                next_group: AtomicU64::new(1),
                env: ArcSwap::from_pointee(env),
                ledger: Mutex::default(),
                watchdog: Mutex::new(None),
            }),
            call: None,
        }
    }

    /// The same daemon's processes, for the tools of call `call_id`: every group started
    /// through it is that call's.
    pub fn for_call(&self, call_id: &str) -> Processes {
        Processes {
            state: self.state.clone(),
            call: Some(call_id.into()),
        }
    }

    /// The call (its `call_id`) whose process tree `pid` belongs to, among this daemon's
    /// running groups: by its ancestry, by its process group, or as an escapee attributed
    /// to a call's group (see [`escapees`]). `None` for processes of no call (MCP servers,
    /// session events) and for processes not ours.
    pub fn call_of(&self, pid: i32) -> Option<String> {
        let (all, _) = scan();
        escapees::call_of(pid, &all, self.instance()).map(|c| c.to_string())
    }

    /// This daemon's id, the value of every child's [`INSTANCE_VAR`].
    pub fn instance(&self) -> &str {
        &self.state.instance
    }

    /// Sets the top-level `env` and `env_passthrough` for children started from now on.
    pub fn set_env(&self, env: child_env::Policy) {
        self.state.env.store(Arc::new(env));
    }

    /// Clears the command's environment and passes only the allow-list, what config
    /// `env`/`env_passthrough` add and the daemon's variables matching `extra_passthrough`
    /// (plus what the caller adds afterwards), so tokens in the daemon's environment do not
    /// leak into children.
    pub fn scrub_env(&self, cmd: &mut Command, extra_passthrough: &GlobSet) {
        self.state.env.load().apply(cmd, extra_passthrough);
    }

    /// Spawns `cmd` as the leader of a new process group.
    pub async fn spawn_group(&self, cmd: Command) -> io::Result<(Child, GroupGuard)> {
        self.spawn_with(cmd, |mut cmd| {
            let child = cmd.spawn()?;
            let pid = child.id();
            Ok((child, pid))
        })
        .await
    }

    /// Spawns through `spawn` (for wrappers such as rmcp's child transport, which take the
    /// command and return their own handle plus the child's pid) with everything every child
    /// gets: its own process group, the cookies, `PR_SET_PDEATHSIG`, a fork from the spawner
    /// thread, and a ledger entry.
    pub async fn spawn_with<T: Send + 'static>(
        &self,
        mut cmd: Command,
        spawn: impl FnOnce(Command) -> io::Result<(T, Option<u32>)> + Send + 'static,
    ) -> io::Result<(T, GroupGuard)> {
        let cookie = self.next_cookie();
        cmd.process_group(0)
            .kill_on_drop(true)
            .env(INSTANCE_VAR, self.instance())
            .env(GROUP_VAR, &cookie);
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs between fork and exec and only makes two syscalls; it
        // allocates nothing (the error is built from a raw errno).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
                // The daemon died before the line above took effect: nobody would kill us.
                if nix::unistd::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        self.start_owned(cookie, move || spawn(cmd)).await
    }

    /// The `TOOLHOST_GROUP` cookie of the next group.
    fn next_cookie(&self) -> String {
        let n = self.state.next_group.fetch_add(1, Ordering::Relaxed);
        format!("{}.{n}", self.instance())
    }

    /// Runs `spawn` on the spawner thread (PDEATHSIG follows it) and makes the child it
    /// started, before anything can look, one of ours: in [`OURS`], the ledger, the
    /// watchdog's list and the escapee tracker, owned by the returned guard.
    async fn start_owned<T: Send + 'static>(
        &self,
        cookie: String,
        spawn: impl FnOnce() -> io::Result<(T, Option<u32>)> + Send + 'static,
    ) -> io::Result<(T, GroupGuard)> {
        let owner = self.clone();
        spawner::on_spawner(move || {
            let mut ours = lock(&OURS);
            let (handle, pid) = spawn()?;
            let pid = pid
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| io::Error::other("child exited before its pid could be read"))?;
            let start = procfs::stat(pid).map_or(0, |s| s.starttime);
            ours.get_or_insert_with(HashSet::new).insert((pid, start));
            owner.record(pid, start);
            drop(ours);
            let guard = GroupGuard {
                owner,
                pgid: Some(Pid::from_raw(pid)),
                start,
                cookie: Some(cookie),
            };
            Ok((handle, guard))
        })
        .await?
    }

    /// Takes over a process group that a child of ours started by itself (the module
    /// host's `pi.exec` children lead groups of their own): from now on it is owned like a
    /// group spawned here — in the ledger, the watchdog's list and the escapee tracker, so a
    /// daemon killed with -9 has it swept — and the guard kills it. `parent` is the child
    /// of ours that started it. `None` when the group is gone already, `pgid` now names
    /// another process, or the group is not `parent`'s: its leader is not `parent`'s child,
    /// or, the leader gone, a live member does not descend from `parent` (a process of
    /// `parent`'s that joined a foreign group with `setpgid` does not make it `parent`'s). A
    /// leader that already ended leaves its group keyed by start time 0 (the sweep then
    /// takes any of our processes still in it).
    pub fn adopt_group(&self, pgid: i32, parent: i32) -> Option<GroupGuard> {
        let refuse = || {
            tracing::warn!(
                pgid,
                parent,
                "refused to adopt a process group that is not the child's"
            );
            None
        };
        // 0, 1 and negative numbers name no group of a child (`killpg` would read them as
        // our own group, init, or a single process).
        if pgid <= 1 {
            return refuse();
        }
        let start = match procfs::stat(pgid) {
            // The leader, running or a zombie its parent has not reaped yet.
            Some(s) if s.pgrp == pgid && s.ppid == parent => s.starttime,
            Some(_) => return refuse(),
            // The leader is gone: the group is `parent`'s only while all of its members
            // descend from `parent`. A pgid merely named in a line (a module host that
            // prints a forged `{"id", "pgid"}`) never makes us signal another group.
            None if group_alive(Pid::from_raw(pgid)) => {
                let all = procfs::all();
                let theirs = procfs::descendants_in(&all, &[parent]);
                let mut members = all.iter().filter(|s| s.pgrp == pgid && !s.is_zombie());
                if !members.all(|m| theirs.iter().any(|d| d.pid == m.pid)) {
                    return refuse();
                }
                0
            }
            None => return None,
        };
        self.record(pgid, start);
        Some(GroupGuard {
            owner: self.clone(),
            pgid: Some(Pid::from_raw(pgid)),
            start,
            cookie: None,
        })
    }

    /// A group started: into the ledger, the watchdog's list and the escapee tracker.
    fn record(&self, pgid: i32, start: u64) {
        lock(&self.state.ledger).record(self.instance(), pgid, start);
        self.tell_watchdog('+', &pgid.to_string());
        escapees::begin((pgid, start), self, self.call.clone());
    }

    /// A process that escaped one of our groups: into the ledger and the watchdog's list.
    /// The watchdog first: it is the one that acts at once if the daemon dies now.
    fn record_escapee(&self, (pid, start): escapees::Key) {
        self.tell_watchdog('+', &format!("{pid}@{start}"));
        lock(&self.state.ledger).record_escapee(self.instance(), pid, start);
    }

    /// A group ended (and its escapees were killed): out of the ledger and the watchdog's
    /// list, with its escapees.
    fn forget(&self, pgid: i32, start: u64) {
        let gone = escapees::end((pgid, start));
        lock(&self.state.ledger).forget_escapees(self.instance(), &gone);
        for (pid, start) in gone {
            self.tell_watchdog('-', &format!("{pid}@{start}"));
        }
        if lock(&self.state.ledger).forget(self.instance(), pgid, start) {
            self.tell_watchdog('-', &pgid.to_string());
        }
    }

    fn tell_watchdog(&self, op: char, item: &str) {
        let mut slot = lock(&self.state.watchdog);
        if slot.as_mut().is_some_and(|w| !w.tell(op, item)) {
            *slot = None;
        }
    }
}

/// Owns a process group: kills it and its escaped members (TERM, then KILL after
/// [`KILL_GRACE`]) when dropped or terminated.
#[derive(Debug)]
pub struct GroupGuard {
    /// The daemon whose ledger lists the group.
    owner: Processes,
    pgid: Option<Pid>,
    /// The leader's start time, the group's key in the ledger.
    start: u64,
    /// The `TOOLHOST_GROUP` value its processes carry.
    cookie: Option<String>,
}

impl GroupGuard {
    #[cfg(test)]
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Forgets the group at once when it left nothing behind ([`nothing_left`]); true then,
    /// and there is nothing to signal.
    fn ended_quietly(&mut self) -> bool {
        let Some(pgid) = self.pgid.filter(|p| nothing_left(*p, self.start)) else {
            return false;
        };
        self.pgid = None;
        self.cookie = None;
        self.owner.forget(pgid.as_raw(), self.start);
        true
    }

    /// Terminates the group and waits (asynchronously) until it is gone or has been killed.
    /// If this future is dropped midway, the blocking task still delivers the KILL.
    pub async fn terminate(mut self, grace: Duration) {
        if self.ended_quietly() {
            return;
        }
        let (owner, pgid, start) = (self.owner.clone(), self.pgid.take(), self.start);
        let cookie = self.cookie.take();
        let _ =
            tokio::task::spawn_blocking(move || finish(&owner, pgid, start, cookie, grace)).await;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.ended_quietly() {
            return;
        }
        let (owner, pgid, start) = (self.owner.clone(), self.pgid.take(), self.start);
        let cookie = self.cookie.take();
        if pgid.is_none() && cookie.is_none() {
            return;
        }
        // Drop cannot wait; a short-lived thread delivers the KILL after the grace so the
        // runtime is never blocked and the kill still happens during runtime shutdown.
        let spawned = std::thread::Builder::new()
            .name("killpg".into())
            .spawn(move || finish(&owner, pgid, start, cookie, KILL_GRACE));
        if spawned.is_err() {
            if let Some(pgid) = pgid {
                signal_group(pgid, Signal::SIGKILL);
            }
        }
    }
}

/// TERM to the group and to its escapees (holders of its cookie, and the processes
/// [`escapees`] attributes to it), KILL to whatever is left after `grace`, then the group
/// leaves `owner`'s ledger.
fn finish(
    owner: &Processes,
    pgid: Option<Pid>,
    start: u64,
    cookie: Option<String>,
    grace: Duration,
) {
    let entry = cookie.map(|c| format!("{GROUP_VAR}={c}"));
    // The group's live processes that `killpg` does not reach, from a fresh scan. The
    // first scan runs while the leader still lives (timeout, cancel), so its whole tree is
    // attributed before it dies and its children move to us.
    let escaped = || {
        let (all, _) = scan();
        let mut found =
            pgid.map_or_else(Vec::new, |p| escapees::members((p.as_raw(), start), &all));
        if let Some(e) = &entry {
            let holders = procfs::holders(e.as_bytes());
            let roots: Vec<i32> = holders.iter().map(|h| h.pid).collect();
            for p in holders
                .into_iter()
                .chain(procfs::descendants_in(&all, &roots))
            {
                if !found.iter().any(|f| f.pid == p.pid) {
                    found.push(p);
                }
            }
        }
        found
    };
    let first = escaped();
    let group_there = pgid.is_some_and(|p| signal_group(p, Signal::SIGTERM));
    for p in &first {
        procfs::signal_exact(p.pid, p.starttime, Signal::SIGTERM);
    }
    if group_there || !first.is_empty() {
        let deadline = Instant::now() + grace;
        let mut polls = 0u32;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            polls += 1;
            // The /proc scan costs more than killpg(0): do it every 100 ms.
            let group_gone = pgid.is_none_or(|p| !group_alive(p));
            let done = first.is_empty()
                || (polls.is_multiple_of(5) && !first.iter().any(live) && escaped().is_empty());
            if group_gone && done {
                break;
            }
        }
        if let Some(p) = pgid {
            signal_group(p, Signal::SIGKILL);
        }
        for p in escaped().iter().chain(&first) {
            procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL);
        }
        // A process caught mid-exec can read as having no environment: look twice more.
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(50));
            let left = escaped();
            if left.is_empty() {
                break;
            }
            for p in left {
                procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL);
            }
        }
    }
    if let Some(p) = pgid {
        owner.forget(p.as_raw(), start);
    }
}

/// Whether the process is still running (not a zombie, pid not reused).
fn live(p: &procfs::Stat) -> bool {
    procfs::stat(p.pid).is_some_and(|s| s.starttime == p.starttime && !s.is_zombie())
}

/// Sends `sig` to the group; false when the group no longer exists.
fn signal_group(pgid: Pid, sig: Signal) -> bool {
    !matches!(killpg(pgid, sig), Err(Errno::ESRCH))
}

/// Whether anything of the group can still run. Signal 0 checks existence, but a group of
/// zombies exists too: a leader that exited at once on TERM (an MCP server whose stdin was
/// closed) stays a zombie until its waiter reaps it, and counting it made every stop wait
/// out the whole grace. So once the leader is a zombie, the group is alive only while a
/// member that is not one is left (the /proc scan runs only then, at the group's end).
fn group_alive(pgid: Pid) -> bool {
    if matches!(killpg(pgid, None), Err(Errno::ESRCH)) {
        return false;
    }
    let leader_gone = procfs::stat(pgid.as_raw()).is_none_or(|s| s.is_zombie());
    !leader_gone
        || procfs::all()
            .iter()
            .any(|p| p.pgrp == pgid.as_raw() && !p.is_zombie())
}

/// Whether any process of the group `pgid` is alive (for tests).
#[cfg(test)]
pub fn group_exists(pgid: i32) -> bool {
    group_alive(Pid::from_raw(pgid))
}

impl Processes {
    /// Sets the daemon up to own everything it starts; call once at startup, inside the
    /// runtime, and keep the returned guard for the daemon's life. It kills what a previous
    /// daemon on `data_dir` left behind (the ledger), starts the watchdog, makes the process
    /// the child subreaper so processes that escape their group with `setsid` or a double
    /// fork become our children instead of PID 1's, starts reaping those once they exit,
    /// and on drop kills every process still carrying this daemon's instance cookie.
    pub fn own(&self, data_dir: &Path) -> DaemonProcesses {
        let swept = ledger::sweep(data_dir, self.instance());
        if swept > 0 {
            tracing::warn!(
                processes = swept,
                "killed processes left running by a previous daemon"
            );
        }
        lock(&self.state.ledger).open(self.instance(), data_dir);
        {
            let mut slot = lock(&self.state.watchdog);
            if slot.is_none() {
                *slot = watchdog::Watchdog::start(self.instance());
                // Known, so that [`nothing_left`] never takes it for an escaped process.
                if let Some(pid) = slot.as_ref().and_then(|w| i32::try_from(w.pid()).ok()) {
                    let start = procfs::stat(pid).map_or(0, |s| s.starttime);
                    lock(&OURS)
                        .get_or_insert_with(HashSet::new)
                        .insert((pid, start));
                }
            }
        }
        // A process attribute, not a daemon's: set by every daemon in the process, harmlessly.
        match nix::sys::prctl::set_child_subreaper(true) {
            Ok(()) => SUBREAPER.store(true, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!("cannot become child subreaper; escaped processes go to PID 1: {e}")
            }
        }
        let reaper = tokio::spawn(reaper::reap_adopted_forever());
        DaemonProcesses {
            processes: self.clone(),
            reaper,
        }
    }
}

/// Held by the daemon; dropping it (at shutdown) kills what is left of its processes.
pub struct DaemonProcesses {
    processes: Processes,
    reaper: tokio::task::JoinHandle<()>,
}

impl Drop for DaemonProcesses {
    fn drop(&mut self) {
        self.reaper.abort();
        let entry = format!("{INSTANCE_VAR}={}", self.processes.instance());
        let mut left = procfs::holders(entry.as_bytes());
        // Escapees that cleared their environment: those attributed to our groups, and
        // adopted processes no running group owns (leftovers of our ended calls).
        let (all, strays) = scan();
        let mut without_cookie = escapees::of_daemon(self.processes.instance(), &all);
        without_cookie.extend(strays);
        for p in without_cookie {
            if !left.iter().any(|l| l.pid == p.pid) {
                left.push(p);
            }
        }
        for p in &left {
            procfs::signal_exact(p.pid, p.starttime, Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut rest = left;
        while !rest.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            rest.retain(|p| procfs::stat(p.pid).is_some_and(|s| !s.is_zombie()));
        }
        for p in rest {
            procfs::signal_exact(p.pid, p.starttime, Signal::SIGKILL);
        }
        lock(&self.processes.state.ledger).close();
        let watchdog = lock(&self.processes.state.watchdog).take();
        if let Some(w) = watchdog {
            w.stop();
        }
    }
}

#[cfg(test)]
mod tests;
