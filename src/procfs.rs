//! The little of /proc we need: a process's state, parent, group and start time, its
//! environment (for our cookies), and signalling exactly the process we looked at.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use nix::sys::signal::Signal;

/// Fields of /proc/<pid>/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub state: u8,
    pub ppid: i32,
    pub pgrp: i32,
    /// The session id: a process that called `setsid` has left its starter's session.
    pub sid: i32,
    /// Clock ticks after boot; with the pid it names one process across pid reuse.
    pub starttime: u64,
}

impl Stat {
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, b'Z' | b'X')
    }
}

pub fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// The resident memory of `pid` in KiB (`/proc/<pid>/statm`'s second field, in pages).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page =
        u64::try_from(nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok()??).ok()?;
    Some(pages * page / 1024)
}

/// `pid (comm) state ppid pgrp ... starttime(22nd)`; comm may hold spaces and parentheses,
/// so fields are counted after the last ')'.
fn parse_stat(pid: i32, text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        pid,
        state: *f.first()?.as_bytes().first()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
        starttime: f.get(19)?.parse().ok()?,
    })
}

/// Every pid in /proc.
pub fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether `pid` belongs to our user (others' processes are never ours to kill).
pub fn owned_by_us(pid: i32) -> bool {
    std::fs::metadata(format!("/proc/{pid}"))
        .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// Whether the process's environment holds exactly `entry` (`NAME=value`).
pub fn environ_has(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry))
}

/// Our live processes (not zombies) whose environment carries `entry`, except ourselves.
pub fn holders(entry: &[u8]) -> Vec<Stat> {
    let me = std::process::id() as i32;
    pids()
        .into_iter()
        .filter(|&p| p != me && owned_by_us(p) && environ_has(p, entry))
        .filter_map(stat)
        .filter(|s| !s.is_zombie())
        .collect()
}

/// The children of this process's main thread (zombies included): one small read where
/// [`all`] reads every process. As child subreaper we are handed every orphan of our groups,
/// and the kernel hands an orphan to the reaper's first live thread, the main one, which
/// lives as long as the process. So an adopted process is always here; the children other
/// threads fork are not (the spawner thread's are all known, see `OURS`). `None` when the
/// file cannot be read (a kernel without it).
pub fn main_thread_children() -> Option<Vec<i32>> {
    let me = std::process::id();
    let text = std::fs::read_to_string(format!("/proc/self/task/{me}/children")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect(),
    )
}

/// Every process in /proc (zombies included), read once so a scan sees one moment.
pub fn all() -> Vec<Stat> {
    pids().into_iter().filter_map(stat).collect()
}

/// Live descendants of `roots` (children, their children, ...) within the snapshot `all`,
/// whatever their group or session: a process that left the group with `setsid` and
/// cleared its environment is still found while its parent chain leads back to a root.
pub fn descendants_in(all: &[Stat], roots: &[i32]) -> Vec<Stat> {
    let mut found: Vec<Stat> = Vec::new();
    let mut frontier = roots.to_vec();
    while let Some(parent) = frontier.pop() {
        for s in all.iter().filter(|s| s.ppid == parent && !s.is_zombie()) {
            if !found.iter().any(|f| f.pid == s.pid) {
                found.push(*s);
                frontier.push(s.pid);
            }
        }
    }
    found
}

/// For each pair of ends (its own end, its other end), the owner's uid and the inode of
/// the TCP socket on this host that has them, from the kernel's tables (`/proc/net/tcp`,
/// `/proc/net/tcp6`, each read once for all pairs); `None` where no socket of this network
/// namespace has those ends (the peer is another machine). An IPv4 peer of an IPv6
/// listener shows as `::ffff:a.b.c.d` on one side only, so both sides are compared in
/// their canonical form.
pub fn tcp_sockets(
    ends: &[(std::net::SocketAddr, std::net::SocketAddr)],
) -> Vec<Option<(u32, u64)>> {
    let mut found = vec![None; ends.len()];
    let mut wanted: HashMap<_, Vec<usize>> = HashMap::new();
    for (i, (local, remote)) in ends.iter().enumerate() {
        wanted
            .entry((canonical(*local), canonical(*remote)))
            .or_default()
            .push(i);
    }
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if wanted.is_empty() {
            break;
        }
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().take(10).collect();
            let socket = || -> Option<_> {
                let ends = (parse_tcp_addr(f.get(1)?)?, parse_tcp_addr(f.get(2)?)?);
                Some((ends, f.get(7)?.parse().ok()?, f.get(9)?.parse().ok()?))
            };
            let Some((ends, uid, inode)) = socket() else {
                continue;
            };
            for i in wanted.remove(&ends).unwrap_or_default() {
                found[i] = Some((uid, inode));
            }
        }
    }
    found
}

fn canonical(a: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit word is the
/// address's bytes in network order, printed as a number in this host's byte order.
fn parse_tcp_addr(field: &str) -> Option<std::net::SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for word in addr.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(canonical(std::net::SocketAddr::new(ip, port)))
}

/// For each TCP socket (its owner's uid and its inode, as [`tcp_sockets`] gives them), a
/// process of that user that has it open, ourselves excepted; a socket whose holder is not
/// found (or whose descriptors cannot be read) is absent. One pass over the descriptor
/// tables of those users' processes serves every socket, and it ends once all are found.
pub fn socket_holders(sockets: impl IntoIterator<Item = (u32, u64)>) -> HashMap<u64, i32> {
    let wanted: HashMap<u64, u32> = sockets
        .into_iter()
        .map(|(uid, inode)| (inode, uid))
        .collect();
    let uids: std::collections::HashSet<u32> = wanted.values().copied().collect();
    let mut holders = HashMap::new();
    let me = std::process::id() as i32;
    for pid in pids() {
        if holders.len() == wanted.len() {
            break;
        }
        let Ok(uid) = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid()) else {
            continue;
        };
        if pid == me || !uids.contains(&uid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok());
            if let Some(inode) = inode.filter(|i| wanted.get(i) == Some(&uid)) {
                holders.entry(inode).or_insert(pid);
            }
        }
    }
    holders
}

/// This boot's id: pids and start times only mean something within one boot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Sends `sig` to `pid` only while it is still the process that started at `starttime`:
/// a pidfd pins the process, then the start time is checked again, so a reused pid is never
/// hit. Without pidfds (Linux < 5.3) the window between check and kill is tiny.
pub fn signal_exact(pid: i32, starttime: u64, sig: Signal) -> bool {
    let same = || stat(pid).is_some_and(|s| s.starttime == starttime);
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOSYS) && same() {
            return nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).is_ok();
        }
        return false;
    }
    let Ok(raw) = i32::try_from(fd) else {
        return false;
    };
    // SAFETY: the fd was just returned by pidfd_open and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if !same() {
        return false;
    }
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig as i32,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parses_odd_command_names() {
        let line = "42 (a) b (c) S 1 40 40 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(
            parse_stat(42, line),
            Some(Stat {
                pid: 42,
                state: b'S',
                ppid: 1,
                pgrp: 40,
                sid: 40,
                starttime: 12345
            })
        );
        assert_eq!(parse_stat(1, "1 (x) S"), None);
    }

    #[test]
    fn one_read_of_the_tables_finds_every_wanted_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let b = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let ends = |s: &std::net::TcpStream| (s.local_addr().unwrap(), s.peer_addr().unwrap());
        let elsewhere = (ends(&a).0, "192.0.2.1:9".parse().unwrap());
        let found = tcp_sockets(&[ends(&a), elsewhere, ends(&b), ends(&a)]);
        let uid = nix::unistd::geteuid().as_raw();
        assert!(
            matches!(found[0], Some((u, inode)) if u == uid && inode > 0),
            "{found:?}"
        );
        assert_eq!(found[1], None);
        assert!(found[2].is_some() && found[2] != found[0], "{found:?}");
        assert_eq!(found[3], found[0]);
        // Our own sockets are never ours to be the peer of.
        assert!(socket_holders(found.into_iter().flatten()).is_empty());
    }

    #[test]
    fn our_own_stat_and_environ_are_readable() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert!(s.starttime > 0);
        assert!(owned_by_us(me));
        assert!(!environ_has(me, b"TOOLHOST_NO_SUCH=1"));
        assert!(!boot_id().is_empty());
    }
}
