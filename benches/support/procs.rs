//! What the sharing benchmark reads of /proc: process trees, their memory (RSS, PSS and
//! private memory from `smaps_rollup`) and a process's own CPU time.

use std::ops::AddAssign;

/// Memory of one process or a sum, in KiB.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mem {
    pub procs: usize,
    pub rss: u64,
    /// Proportional set size: shared pages divided among their sharers, so sums are honest.
    pub pss: u64,
    /// Private_Clean + Private_Dirty: what the process alone costs.
    pub private: u64,
    /// Anonymous pages (the heap, stacks), without the binary's own pages mapped in as
    /// code runs for the first time.
    pub anon: u64,
}

impl AddAssign for Mem {
    fn add_assign(&mut self, o: Mem) {
        self.procs += o.procs;
        self.rss += o.rss;
        self.pss += o.pss;
        self.private += o.private;
        self.anon += o.anon;
    }
}

impl Mem {
    pub fn mib(kib: u64) -> f64 {
        kib as f64 / 1024.0
    }
}

/// `pid`'s memory from /proc/PID/smaps_rollup (zero for a process that is gone).
pub fn mem(pid: i32) -> Mem {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return Mem::default();
    };
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Mem {
        procs: 1,
        rss: field("Rss:"),
        pss: field("Pss:"),
        private: field("Private_Clean:") + field("Private_Dirty:"),
        anon: field("Anonymous:"),
    }
}

/// The summed memory of `pids`.
pub fn mem_of(pids: &[i32]) -> Mem {
    let mut total = Mem::default();
    for &p in pids {
        total += mem(p);
    }
    total
}

/// Direct children of `pid` (of all its threads).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    out
}

/// Every live descendant of `pid`, not `pid` itself.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for c in children(p) {
            if !found.contains(&c) && !is_zombie(c) {
                found.push(c);
                frontier.push(c);
            }
        }
    }
    found
}

/// `pid` and every live descendant.
pub fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    all.extend(descendants(pid));
    all
}

fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_none_or(|f| f.first().is_some_and(|s| s == "Z" || s == "X"))
}

/// The process's own user + system CPU time in seconds (its threads', not its children's).
pub fn cpu_secs(pid: i32) -> f64 {
    let Some(f) = stat_fields(pid) else {
        return 0.0;
    };
    // After the command name: state is field 3, utime 14 and stime 15 (1-based).
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    ticks as f64 / hz as f64
}
