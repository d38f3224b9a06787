//! What the idle benchmark and the idle test read of a process's threads in /proc: how
//! often each woke and how much CPU they used.

/// Each thread of `pid` by id: its name and its context switches so far (voluntary and
/// not: a sleeping thread is not preempted, so both count its wake-ups).
pub fn switches(pid: i32) -> std::collections::HashMap<String, (String, u64)> {
    let mut out = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let dir = t.path();
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("status")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let n = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert(
            t.file_name().to_string_lossy().into_owned(),
            (comm.trim().to_owned(), n),
        );
    }
    out
}

/// The wake-ups of each thread of `pid` between two [`switches`] snapshots, as
/// `("name (tid)", count)`, threads that did not wake left out.
pub fn woke(
    before: &std::collections::HashMap<String, (String, u64)>,
    after: &std::collections::HashMap<String, (String, u64)>,
) -> Vec<(String, u64)> {
    let mut woke: Vec<(String, u64)> = after
        .iter()
        .filter_map(|(tid, (name, n))| {
            let was = before.get(tid).map_or(0, |b| b.1);
            (*n > was).then(|| (format!("{name} ({tid})"), n - was))
        })
        .collect();
    woke.sort_by_key(|w| std::cmp::Reverse(w.1));
    woke
}

/// The CPU time of the threads of `pid` alive now, in nanoseconds (each thread's
/// `schedstat`): finer than `/proc/<pid>/stat`'s clock ticks, which read 10 ms at once.
pub fn cpu_ns(pid: i32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
