//! No process outlives its reason: against the real binary, children die with their call
//! (also when they escape the group with `setsid`), with the daemon (kill -9 included) and
//! the next daemon on the same data dir sweeps what the previous one could not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use common::{alive, eventually, watchdog_of, Daemon, FIXTURE};
use serde_json::{json, Value};

/// Three ways out of the call's process group, each leaving a `sleep` running.
const ESCAPES: &str = "setsid sleep 301 >/dev/null 2>&1 & setsid -f sleep 302 >/dev/null 2>&1; \
                       (setsid sh -c 'sleep 303 & :' >/dev/null 2>&1 &)";

/// Iterations of the escape scenarios: `TOOLHOST_STRESS=<n>` for a longer reliability run.
fn stress_rounds() -> usize {
    std::env::var("TOOLHOST_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Pids of our live (non-zombie) processes whose environment holds `entry`.
fn holders(entry: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == entry.as_bytes()) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Fields of /proc/<pid>/stat after the command name: (state, ppid, pgrp, starttime).
fn stat(pid: i32) -> Option<(char, i32, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some((
        f[0].chars().next()?,
        f[1].parse().ok()?,
        f[2].parse().ok()?,
        f[19].parse().ok()?,
    ))
}

/// Live members of the process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| stat(p).is_some_and(|(_, _, g, _)| g == pgid) && alive(p))
        .collect()
}

/// Waits for `path` to hold a complete line and returns its whitespace-separated words.
async fn read_words(path: &Path) -> Vec<String> {
    eventually(20, &format!("{} to be written", path.display()), || async {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn pids(words: &[String]) -> Vec<i32> {
    words.iter().map(|w| w.parse().unwrap()).collect()
}

/// Starts a bash call without waiting for it; returns the connection to read its answer.
async fn start_bash(d: &Daemon, call_id: &str, command: &str) -> common::RawLines {
    let mut c = d.raw_lines().await;
    c.send(
        "invoke",
        json!({"name": "bash", "arguments": {"command": command}, "call_id": call_id}),
    )
    .await;
    c
}

async fn wait_dead(pids: &[i32], what: &str) {
    eventually(10, what, || async { pids.iter().all(|p| !alive(*p)) }).await;
}

#[tokio::test]
async fn daemon_sigkill_leaves_no_orphans() {
    let mut d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {"fx": {
            "command": FIXTURE,
            "env": {"FIXTURE_PID_FILE": dir.join("fixture.pids")},
        }}})
    })
    .await;
    let pid_file = d.workspace().join("pids");
    let _c = start_bash(
        &d,
        "k9",
        &format!(
            "{ESCAPES}; sleep 300 & echo $$ $! $TOOLHOST_INSTANCE > {}; sleep 300",
            pid_file.display()
        ),
    )
    .await;
    let words = read_words(&pid_file).await;
    let bash = pids(&words[..2]);
    let instance = format!("TOOLHOST_INSTANCE={}", words[2]);
    // The shell, two sleeps, three escapes and the MCP server.
    eventually(10, "every process to run", || async {
        holders(&instance).len() >= 6
    })
    .await;
    let fixture = pids(&read_words(&d.dir.path().join("fixture.pids")).await);
    assert_eq!((bash.len(), fixture.len()), (2, 1), "{bash:?} {fixture:?}");
    assert!(alive(bash[0]) && alive(bash[1]) && alive(fixture[0]));
    let ledger = std::fs::read_to_string(d.data_dir().join("process-groups")).unwrap();
    assert!(
        ledger
            .lines()
            .any(|l| l.ends_with(&format!(" {} {}", bash[0], stat(bash[0]).unwrap().3))),
        "{ledger}"
    );

    d.kill9().await;
    // The direct children (the shell, the MCP server) get PDEATHSIG; the background sleep,
    // a grandchild, is killed by the watchdog.
    wait_dead(
        &[bash[0], bash[1], fixture[0]],
        "every process to die with the daemon",
    )
    .await;
    assert_eq!(group_members(bash[0]), Vec::<i32>::new());
    // The watchdog also got the escapes (found by the instance cookie), then exited.
    eventually(10, "the escapes to die with the daemon", || async {
        holders(&instance).is_empty()
    })
    .await;
    eventually(10, "the watchdog to exit", || async {
        watchdog_of(&words[2]).is_none()
    })
    .await;
}

#[tokio::test]
async fn the_restart_sweep_kills_a_grandchild_that_ignores_term() {
    let mut d = Daemon::start().await;
    let pid_file = d.workspace().join("pids");
    let _c = start_bash(
        &d,
        "k9",
        &format!(
            "sh -c 'trap \"\" TERM; sleep 300' & echo $$ $! $TOOLHOST_INSTANCE > {}; sleep 300",
            pid_file.display()
        ),
    )
    .await;
    let words = read_words(&pid_file).await;
    let p = pids(&words[..2]);
    // As if everything of ours was killed at once: the watchdog cannot help this time.
    let watchdog = watchdog_of(&words[2]).expect("the daemon has a watchdog");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watchdog),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_dead(&[watchdog], "the watchdog to die").await;
    d.kill9().await;
    wait_dead(&[p[0]], "the shell to die with the daemon").await;
    // Without the sweep this one would live on (PDEATHSIG covers only the direct child).
    assert!(alive(p[1]), "the grandchild should still be running");
    assert!(!group_members(p[0]).is_empty());
    d.spawn(&[]).await;
    eventually(10, "the group to be swept", || async {
        group_members(p[0]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn the_sweep_spares_reused_pgids_other_boots_and_strangers() {
    let d = Daemon::unstarted();
    std::fs::create_dir_all(d.data_dir()).unwrap();
    let spawn = || {
        let mut c = std::process::Command::new("sleep");
        c.arg("300").process_group(0);
        c.spawn().unwrap()
    };
    let (mut ours, mut reused, mut other_boot, mut stranger) = (spawn(), spawn(), spawn(), spawn());
    let start = |c: &std::process::Child| stat(c.id() as i32).unwrap().3;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let boot = boot.trim();
    let ledger = format!(
        "{boot} old {} {}\n{boot} old {} {}\nnot-this-boot old {} {}\ngarbage line\n",
        ours.id(),
        start(&ours),
        reused.id(),
        start(&reused) + 1,
        other_boot.id(),
        start(&other_boot),
    );
    std::fs::write(d.data_dir().join("process-groups"), ledger).unwrap();
    let mut d = d;
    d.spawn(&[]).await;
    // The listed group with the right leader start time is killed (and so exits by signal).
    let status = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(s) = ours.try_wait().unwrap() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .expect("the recorded group was swept");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    for c in [&mut reused, &mut other_boot, &mut stranger] {
        assert!(c.try_wait().unwrap().is_none(), "pid {} was killed", c.id());
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

/// Runs `mode` of ending a call whose command escapes its group; returns the group cookie.
async fn escape_then(d: &Daemon, mode: &str, round: usize) -> String {
    let cookie_file = d.workspace().join(format!("cookie-{round}"));
    let write = format!("echo $TOOLHOST_GROUP $$ > {}", cookie_file.display());
    let go = d.workspace().join(format!("go-{round}"));
    let (command, args) = match mode {
        // Ends once the test has seen the escapes running.
        "exit" => (
            format!(
                "{ESCAPES}; {write}; while [ ! -e {go} ]; do sleep 0.05; done; echo done",
                go = go.display()
            ),
            json!({}),
        ),
        "timeout" => (
            format!("{ESCAPES}; {write}; sleep 30"),
            json!({"timeout_ms": 1500}),
        ),
        _ => (format!("{ESCAPES}; {write}; sleep 30"), json!({})),
    };
    let mut arguments = args;
    arguments["command"] = json!(command);
    let call_id = format!("esc-{round}");
    let mut c = d.raw_lines().await;
    c.send(
        "invoke",
        json!({"name": "bash", "arguments": arguments, "call_id": call_id}),
    )
    .await;
    let words = read_words(&cookie_file).await;
    let (cookie, pgid): (String, i32) = (words[0].clone(), words[1].parse().unwrap());
    // The three escapes are really out of the group and running.
    let entry = format!("TOOLHOST_GROUP={cookie}");
    eventually(10, "the escapes to run outside the group", || async {
        holders(&entry)
            .iter()
            .filter(|p| stat(**p).is_some_and(|(_, _, g, _)| g != pgid))
            .count()
            >= 3
    })
    .await;
    std::fs::write(&go, "").unwrap();
    if mode == "cancel" {
        let r = d.call("cancel", json!({"call_id": call_id})).await;
        assert_eq!(r["result"]["cancelled"], true, "{r}");
    }
    let r: Value = c.recv().await;
    let result = &r["result"]["result"];
    match mode {
        "exit" => assert_eq!(result["exit_code"], 0, "{r}"),
        "timeout" => assert_eq!(result["error_kind"], "timeout", "{r}"),
        _ => assert_eq!(result["error_kind"], "cancelled", "{r}"),
    }
    cookie
}

#[tokio::test]
async fn setsid_escapes_die_when_the_call_ends_and_are_reaped() {
    let d = Daemon::start().await;
    let modes = ["exit", "timeout", "cancel"];
    for (round, mode) in modes.iter().cycle().take(3 * stress_rounds()).enumerate() {
        let cookie = escape_then(&d, mode, round).await;
        let entry = format!("TOOLHOST_GROUP={cookie}");
        eventually(
            10,
            &format!("escapes of the `{mode}` call to die"),
            || async { holders(&entry).is_empty() },
        )
        .await;
    }
    // The daemon is their subreaper: it reaps them, without stealing any status it needs.
    let daemon = d.pid();
    eventually(10, "adopted zombies to be reaped", || async {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .all(|p| stat(p).is_none_or(|(s, ppid, _, _)| ppid != daemon || s != 'Z'))
    })
    .await;
    assert_eq!(
        d.invoke("bash", json!({"command": "echo fine"})).await["stdout"],
        "fine\n"
    );
}

#[tokio::test]
async fn setsid_escapes_die_with_the_daemon_on_sigterm() {
    let mut d = Daemon::start().await;
    let cookie_file = d.workspace().join("cookie");
    let _c = start_bash(
        &d,
        "term",
        &format!(
            "{ESCAPES}; echo $TOOLHOST_INSTANCE > {}; sleep 300",
            cookie_file.display()
        ),
    )
    .await;
    let instance = read_words(&cookie_file).await.remove(0);
    let entry = format!("TOOLHOST_INSTANCE={instance}");
    // The shell (exec'd into its last sleep) and the three escapes.
    eventually(10, "every process of the call to run", || async {
        holders(&entry).len() >= 4
    })
    .await;
    let status = d.stop().await;
    assert!(status.success(), "{status:?}");
    eventually(5, "every process of the daemon to be gone", || async {
        holders(&entry).is_empty()
    })
    .await;
    assert!(!d.data_dir().join("process-groups").exists());
    assert_eq!(watchdog_of(&instance), None);
}

/// Two escapes that leave the group, the parent and the environment behind, each ending in
/// `sleep 1000 <marker>`: `setsid -f env -i`, and a double fork + `setsid` + `execve` with an
/// empty environment. Neither carries a cookie; only their ancestry ties them to the call.
fn envless_escapes(marker: &str) -> String {
    let python = format!(
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
         os.execve('/usr/bin/sleep', ['sleep', '1000', '{marker}'], {{}})\n    os._exit(0)\n\
         os.wait()\n"
    );
    format!(
        "setsid -f env -i sleep 1000 {marker} </dev/null >/dev/null 2>&1; \
         python3 -c \"{python}\" </dev/null >/dev/null 2>&1"
    )
}

/// A marker no other test (nor another run of this one) uses: `sleep` adds it to its 1000 s.
fn unique_marker(n: u32) -> String {
    format!("0.{}{n}", std::process::id())
}

/// Live processes whose command line is exactly `sleep 1000 <marker>`.
fn sleepers(marker: &str) -> Vec<i32> {
    let want = format!("sleep\01000\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want.as_bytes())
                && alive(*p)
        })
        .collect()
}

/// Waits for both envless escapes to run, outside the call's group, with no environment.
async fn both_escaped(marker: &str) -> Vec<i32> {
    eventually(10, "both envless escapes to run", || async {
        sleepers(marker).len() == 2
    })
    .await;
    let found = sleepers(marker);
    for p in &found {
        let env = std::fs::read(format!("/proc/{p}/environ")).unwrap();
        assert!(env.is_empty(), "pid {p} kept an environment");
    }
    found
}

#[tokio::test]
async fn envless_escapes_die_when_the_call_ends_or_times_out() {
    let d = Daemon::start().await;
    for (n, mode) in ["exit", "timeout"].into_iter().enumerate() {
        let marker = unique_marker(n as u32);
        let go = d.workspace().join(format!("go-{mode}"));
        let (command, arguments) = match mode {
            "exit" => (
                format!(
                    "{}; while [ ! -e {go} ]; do sleep 0.05; done; echo done",
                    envless_escapes(&marker),
                    go = go.display()
                ),
                json!({}),
            ),
            _ => (
                format!("{}; sleep 30", envless_escapes(&marker)),
                json!({"timeout_ms": 4000}),
            ),
        };
        let mut arguments = arguments;
        arguments["command"] = json!(command);
        let mut c = d.raw_lines().await;
        c.send(
            "invoke",
            json!({"name": "bash", "arguments": arguments, "call_id": format!("envless-{mode}")}),
        )
        .await;
        let escaped = both_escaped(&marker).await;
        std::fs::write(&go, "").unwrap();
        let r: Value = c.recv().await;
        let result = &r["result"]["result"];
        match mode {
            "exit" => assert_eq!(result["exit_code"], 0, "{r}"),
            _ => assert_eq!(result["error_kind"], "timeout", "{r}"),
        }
        wait_dead(
            &escaped,
            &format!("the envless escapes of the `{mode}` call to die"),
        )
        .await;
    }
}

#[tokio::test]
async fn envless_escapes_die_with_the_daemon_on_sigterm() {
    let mut d = Daemon::start().await;
    let marker = unique_marker(0);
    let _c = start_bash(
        &d,
        "term",
        &format!("{}; sleep 300", envless_escapes(&marker)),
    )
    .await;
    let escaped = both_escaped(&marker).await;
    let status = d.stop().await;
    assert!(status.success(), "{status:?}");
    wait_dead(&escaped, "the envless escapes to die with the daemon").await;
}

/// Waits until the daemon's ledger lists every pid of `escaped` as an escapee.
async fn ledger_lists(d: &Daemon, escaped: &[i32]) {
    let path = d.data_dir().join("process-groups");
    eventually(10, "the escapees to be recorded", || async {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        escaped.iter().all(|p| {
            let start = stat(*p).map(|s| s.3);
            text.lines().any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.len() == 5
                    && f[2] == p.to_string()
                    && Some(f[3].to_owned()) == start.map(|s| s.to_string())
                    && f[4] == "escapee"
            })
        })
    })
    .await;
}

#[tokio::test]
async fn envless_escapes_die_when_the_daemon_is_sigkilled() {
    let mut d = Daemon::start().await;
    let marker = unique_marker(0);
    let _c = start_bash(
        &d,
        "k9",
        &format!("{}; sleep 300", envless_escapes(&marker)),
    )
    .await;
    let escaped = both_escaped(&marker).await;
    ledger_lists(&d, &escaped).await;
    d.kill9().await;
    // The watchdog kills them by pid and start time.
    wait_dead(&escaped, "the envless escapes to die with the daemon").await;
}

#[tokio::test]
async fn the_restart_sweep_kills_envless_escapes() {
    let mut d = Daemon::start().await;
    let marker = unique_marker(0);
    let cookie_file = d.workspace().join("cookie");
    let command = format!(
        "{}; echo $TOOLHOST_INSTANCE > {}; sleep 300",
        envless_escapes(&marker),
        cookie_file.display()
    );
    let _c = start_bash(&d, "k9", &command).await;
    let instance = read_words(&cookie_file).await.remove(0);
    let escaped = both_escaped(&marker).await;
    ledger_lists(&d, &escaped).await;
    // As if everything of ours was killed at once: the watchdog cannot help this time.
    let watchdog = watchdog_of(&instance).expect("the daemon has a watchdog");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watchdog),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_dead(&[watchdog], "the watchdog to die").await;
    d.kill9().await;
    assert!(
        escaped.iter().all(|p| alive(*p)),
        "the escapes should outlive a daemon without its watchdog"
    );
    d.spawn(&[]).await;
    wait_dead(&escaped, "the envless escapes to be swept").await;
}

/// The descriptors `pid` holds above its stdio, as their link targets.
fn held_beyond_stdio(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) > Some(2))
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.display().to_string())
        .collect()
}

/// Issue 49 item 9: a restart after kill -9 is never refused because of a process the
/// daemon started. Two escapes (setsid from a subshell, one also with `env -i`) stop
/// themselves and outlive the daemon and its watchdog, killed at once. They hold nothing
/// but their stdio: not the daemon's socket, its lock or its store, nor the listening
/// socket the daemon's launcher left open in it, which stops answering once the launcher
/// and the daemon are gone; and the next daemon serves while they are still there.
#[tokio::test]
async fn stopped_escapes_hold_nothing_of_the_daemon_and_a_restart_after_kill_9_serves() {
    use std::os::fd::AsRawFd;
    let mut d = Daemon::unstarted();
    let planted_path = d.dir.path().join("launcher.sock");
    let planted = std::os::unix::net::UnixListener::bind(&planted_path).unwrap();
    let planted_fd = planted.as_raw_fd();
    let mut cmd = d.command();
    cmd.stderr(std::process::Stdio::null());
    // SAFETY: dup2 between fork and exec; the copy at 77 is not close-on-exec, as a
    // launcher's descriptor would be.
    unsafe {
        cmd.pre_exec(move || match nix::libc::dup2(planted_fd, 77) {
            77 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    d.child = Some(cmd.spawn().unwrap());
    d.wait_ready().await;
    let inode = std::fs::read_link(format!("/proc/{}/fd/77", d.pid())).unwrap();
    assert!(
        inode.display().to_string().starts_with("socket:["),
        "{inode:?}"
    );

    let ws = d.workspace();
    let command = "(setsid sh -c 'echo $$ > a.pid; kill -STOP $$; exec sleep 1001' </dev/null >/dev/null 2>&1 &); \
                   (env -i setsid sh -c 'echo $$ > b.pid; kill -STOP $$; exec sleep 1002' </dev/null >/dev/null 2>&1 &); \
                   echo $TOOLHOST_INSTANCE > instance; sleep 300";
    let _c = start_bash(&d, "stopper", command).await;
    let instance = read_words(&ws.join("instance")).await.remove(0);
    let mut stopped = Vec::new();
    for file in ["a.pid", "b.pid"] {
        stopped.extend(pids(&read_words(&ws.join(file)).await));
    }
    eventually(10, "both escapes to stop themselves", || async {
        stopped.iter().all(|&p| stat(p).is_some_and(|s| s.0 == 'T'))
    })
    .await;
    for &p in &stopped {
        assert_eq!(held_beyond_stdio(p), Vec::<String>::new(), "process {p}");
    }

    // Everything of ours killed at once: the watchdog cannot end them this time.
    let watchdog = watchdog_of(&instance).expect("the daemon has a watchdog");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watchdog),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_dead(&[watchdog], "the watchdog to die").await;
    d.kill9().await;
    assert!(
        stopped.iter().all(|&p| alive(p)),
        "the escapes should outlive it"
    );
    // With the launcher's copy closed too, nobody listens on its socket any more.
    drop(planted);
    let refused = std::os::unix::net::UnixStream::connect(&planted_path).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    // The next daemon binds the socket and the store, and serves.
    d.spawn(&[]).await;
    let r = d.invoke("bash", json!({"command": "echo back"})).await;
    assert_eq!(r["stdout"], "back\n", "{r}");
    for &p in &stopped {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
