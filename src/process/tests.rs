//! Tests of process groups, guards and the ledger, with real children.

use super::*;

/// The first line a child (started with a piped stdout) writes.
async fn first_line(child: &mut tokio::process::Child) -> String {
    let mut line = String::new();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
        .await
        .unwrap();
    line
}

/// A group whose leader exited and is not reaped yet has nothing left to stop: waiting
/// on it made every MCP server's stop take the whole grace.
#[tokio::test]
async fn a_group_of_an_unreaped_leader_is_gone() {
    let cmd = Command::new("true");
    // Held and never waited on: the leader stays a zombie.
    let (child, guard) = Processes::default().spawn_group(cmd).await.unwrap();
    let pgid = guard.pgid().unwrap();
    for _ in 0..500 {
        if procfs::stat(pgid).is_some_and(|s| s.is_zombie()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(procfs::stat(pgid).is_some_and(|s| s.is_zombie()));
    assert!(!group_exists(pgid));
    let started = std::time::Instant::now();
    guard.terminate(KILL_GRACE).await;
    assert!(started.elapsed() < KILL_GRACE, "{:?}", started.elapsed());
    drop(child);
}

#[tokio::test]
async fn dropping_the_guard_kills_grandchildren() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 30 & sleep 30 & wait"]);
    let (mut child, guard) = Processes::default().spawn_group(cmd).await.unwrap();
    let pgid = guard.pgid().unwrap();
    assert!(group_exists(pgid));
    guard.terminate(Duration::from_secs(2)).await;
    let _ = child.wait().await;
    // Reaped leader; the sleeps were reparented and killed by the group signal.
    for _ in 0..100 {
        if !group_exists(pgid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("process group {pgid} survived");
}

/// Waits until no live process carries `entry`.
async fn wait_no_holders(entry: &str) {
    // Generous: a loaded CI machine may take seconds to schedule the kill and the scan.
    for _ in 0..750 {
        if procfs::holders(entry.as_bytes()).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still running: {:?}", procfs::holders(entry.as_bytes()));
}

#[tokio::test]
async fn children_carry_the_cookies_and_setsid_escapes_die_with_the_group() {
    let mut cmd = Command::new("sh");
    // Three ways out of the group: setsid in the background, setsid -f, double fork.
    cmd.args([
        "-c",
        "setsid sleep 31 & setsid -f sleep 32; (setsid sh -c 'sleep 33 & :' &); \
         echo \"$TOOLHOST_INSTANCE $TOOLHOST_GROUP\"; sleep 30",
    ])
    .stdout(std::process::Stdio::piped());
    let processes = Processes::default();
    let (mut child, guard) = processes.spawn_group(cmd).await.unwrap();
    let line = first_line(&mut child).await;
    let (inst, group) = line.trim().split_once(' ').unwrap();
    assert_eq!(inst, processes.instance());
    assert!(
        group.starts_with(&format!("{}.", processes.instance())),
        "{group}"
    );
    let entry = format!("{GROUP_VAR}={group}");
    let pgid = guard.pgid().unwrap();
    let outside = || {
        procfs::holders(entry.as_bytes())
            .into_iter()
            .filter(|s| s.pgrp != pgid)
            .count()
    };
    // The escapes start in the background: wait for all three to be out and running.
    let mut seen = 0;
    for _ in 0..500 {
        seen = outside();
        if seen == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 3, "{:?}", procfs::holders(entry.as_bytes()));
    drop(guard);
    let _ = child.wait().await;
    wait_no_holders(&entry).await;
}

#[tokio::test]
async fn escapes_without_the_cookie_are_found_through_the_living_leader() {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "env -i setsid sleep 34 >/dev/null 2>&1 & echo $!; sleep 30",
    ])
    .stdout(std::process::Stdio::piped());
    let processes = Processes::default();
    let (mut child, guard) = processes.spawn_group(cmd).await.unwrap();
    let line = first_line(&mut child).await;
    let pid: i32 = line.trim().parse().unwrap();
    let pgid = guard.pgid().unwrap();
    for _ in 0..150 {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline == [&b"sleep\0"[..], b"34\0"].concat() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let escaped = procfs::stat(pid).unwrap();
    assert_ne!(escaped.pgrp, pgid);
    assert!(!procfs::environ_has(
        pid,
        format!("{INSTANCE_VAR}={}", processes.instance()).as_bytes()
    ));
    guard.terminate(Duration::from_secs(2)).await;
    let _ = child.wait().await;
    for _ in 0..150 {
        if !live(&escaped) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the escaped sleep {pid} survived");
}

/// A group whose program exited with nothing left ends without a /proc scan; one whose
/// process left the group and outlived the leader does not, and its guard kills it.
#[tokio::test]
async fn only_a_group_that_left_nothing_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let processes = Processes::default();
    let _owned = processes.own(dir.path()); // the child subreaper, as a daemon is
    let (mut child, guard) = processes.spawn_group(Command::new("true")).await.unwrap();
    child.wait().await.unwrap();
    let pgid = Pid::from_raw(guard.pgid().unwrap());
    assert!(nothing_left(pgid, guard.start));
    drop(guard);

    let mut cmd = Command::new("sh");
    cmd.args(["-c", "setsid sleep 36 & echo $!"])
        .stdout(std::process::Stdio::piped());
    let (mut child, guard) = processes.spawn_group(cmd).await.unwrap();
    let line = first_line(&mut child).await;
    child.wait().await.unwrap();
    let escaped = line.trim().parse::<i32>().unwrap();
    let pgid = Pid::from_raw(guard.pgid().unwrap());
    assert!(
        !nothing_left(pgid, guard.start),
        "sleep {escaped} outlived its leader"
    );
    drop(guard);
    for _ in 0..250 {
        if procfs::stat(escaped).is_none_or(|s| s.is_zombie()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the escaped sleep {escaped} survived its group");
}

#[tokio::test]
async fn each_daemon_keeps_its_own_ledger() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let daemons = [Processes::default(), Processes::default()];
    let _owned: Vec<DaemonProcesses> = daemons
        .iter()
        .zip(&dirs)
        .map(|(p, d)| p.own(d.path()))
        .collect();
    let ledger =
        |i: usize| std::fs::read_to_string(dirs[i].path().join(ledger::LEDGER_FILE)).unwrap();
    let mut running = Vec::new();
    for p in &daemons {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        running.push(p.spawn_group(cmd).await.unwrap());
    }
    for (i, (p, (_, guard))) in daemons.iter().zip(&running).enumerate() {
        let line = ledger(i);
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "one group per ledger: {line}");
        assert_eq!(fields[1], p.instance());
        assert_eq!(fields[2], guard.pgid().unwrap().to_string());
    }
    let (_, first) = running.remove(0);
    first.terminate(Duration::from_secs(2)).await;
    assert_eq!(ledger(0), "", "the ended group left its own ledger");
    assert_eq!(ledger(1).lines().count(), 1, "and only its own");
}

#[test]
fn children_outlive_the_thread_that_asked_for_them() {
    // PDEATHSIG is tied to the forking thread: a child requested from a thread that then
    // exits must live on, because the fork happened on the spawner thread.
    let (child, guard) = std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let spawned = rt.block_on(Processes::default().spawn_group(cmd)).unwrap();
        std::mem::forget(rt); // keep the child's reaper registration valid
        spawned
    })
    .join()
    .unwrap();
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let s = procfs::stat(pid).unwrap();
    assert!(!s.is_zombie(), "{s:?}");
    drop(guard);
    std::mem::forget(child);
}

/// A group named by a child of ours (a module host's `{"id", "pgid"}` line) is adopted, and
/// so signalled later, only when it is that child's: a group whose leader has gone and
/// whose members do not descend from the child is refused.
#[tokio::test]
async fn a_group_that_is_not_the_childs_is_never_adopted() {
    // The "host": a process of ours with no children.
    let mut host = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    // Another group: its leader exits at once, its member lives on (not the host's).
    let mut leader = std::process::Command::new("sh");
    leader.args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"]);
    std::os::unix::process::CommandExt::process_group(&mut leader, 0);
    let out = leader.output().unwrap();
    let member: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let pgid = procfs::stat(member).unwrap().pgrp;
    assert!(group_alive(Pid::from_raw(pgid)));
    let processes = Processes::default();
    let host_pid = i32::try_from(host.id()).unwrap();
    assert!(processes.adopt_group(pgid, host_pid).is_none());
    // Nor is a pid that leads no group of the host's.
    assert!(processes.adopt_group(member, host_pid).is_none());
    let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
    host.kill().unwrap();
    host.wait().unwrap();
}
