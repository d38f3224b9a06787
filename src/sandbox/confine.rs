//! Building a Landlock ruleset and the seccomp filters before the fork, and applying them
//! in the child.
//!
//! The `landlock` crate builds the ruleset in the parent (it allocates and opens path fds);
//! its `restrict_self` is not used in the child because it consumes and drops Rust objects
//! and builds errors that may allocate. Between fork and exec the child makes only plain
//! syscalls: it gives up its controlling terminal, then `prctl(PR_SET_NO_NEW_PRIVS)`,
//! `landlock_restrict_self(fd)` and `seccomp(SET_MODE_FILTER)` with the compiled programs.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};

use super::seccomp;
use super::{Network, SandboxPolicy, ABI_SCOPES};

/// The newest ABI whose rights we ask for; on older kernels the crate drops what the kernel
/// lacks (best effort), and [`super::plan`] refuses policies that would lose their meaning.
const TARGET: ABI = ABI::V7;

/// Device files every program expects to write (shells redirect to /dev/null constantly).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// A ready ruleset (one fd), the compiled seccomp filters and the run's private temp dir;
/// cloning shares them.
#[derive(Debug, Clone)]
pub struct Confinement {
    ruleset: Arc<OwnedFd>,
    filters: Arc<seccomp::Programs>,
    tmp: Arc<tempfile::TempDir>,
    policy: SandboxPolicy,
    network: Network,
}

impl Confinement {
    /// Read everywhere but `hidden` ([`readable_around`]); write in `writable`, the devices
    /// above and a new temp dir; with
    /// `Network::Deny`, no TCP connect/bind and no abstract Unix sockets outside; never
    /// signals to processes outside the sandbox (where the ABI has scopes); no metadata
    /// changes and no terminal input faking ([`seccomp`]).
    pub(super) fn build(
        policy: SandboxPolicy,
        network: Network,
        writable: &[PathBuf],
        hidden: &[PathBuf],
    ) -> io::Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix(&super::call_dir_prefix())
            .tempdir()?;
        let fd = ruleset(network, writable, hidden, tmp.path())
            .map_err(io::Error::other)?
            .ok_or_else(|| io::Error::other("the kernel refused to create a Landlock ruleset"))?;
        Ok(Confinement {
            ruleset: Arc::new(fd),
            filters: Arc::new(seccomp::compile(policy)?),
            tmp: Arc::new(tmp),
            policy,
            network,
        })
    }

    /// The same confinement, also refusing to create Unix sockets
    /// ([`seccomp::no_unix_sockets`]): no route to the daemon's socket.
    pub fn without_unix_sockets(mut self) -> io::Result<Self> {
        let mut filters = (*self.filters).clone();
        filters.push(seccomp::no_unix_sockets()?);
        self.filters = Arc::new(filters);
        Ok(self)
    }

    pub fn tmpdir(&self) -> &Path {
        self.tmp.path()
    }
    pub fn policy(&self) -> SandboxPolicy {
        self.policy
    }
    pub fn network(&self) -> Network {
        self.network
    }
}

fn ruleset(
    network: Network,
    writable: &[PathBuf],
    hidden: &[PathBuf],
    tmp: &Path,
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let (readable, listable) = readable_around(hidden);
    let mut rs = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    let mut scopes = landlock::BitFlags::<Scope>::empty();
    if super::abi() >= ABI_SCOPES {
        scopes |= Scope::Signal;
    }
    if network == Network::Deny {
        // Handled with no rule: every TCP connect and bind is refused.
        rs = rs.handle_access(AccessNet::from_all(TARGET))?;
        if super::abi() >= ABI_SCOPES {
            scopes |= Scope::AbstractUnixSocket;
        }
    }
    if !scopes.is_empty() {
        rs = rs.scope(scopes)?;
    }
    let created = rs
        .create()?
        .add_rules(path_beneath_rules(readable, AccessFs::from_read(TARGET)))?
        .add_rules(path_beneath_rules(listable, AccessFs::ReadDir))?
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(TARGET)))?
        .add_rules(path_beneath_rules(
            writable.iter().map(PathBuf::as_path).chain([tmp]),
            AccessFs::from_all(TARGET),
        ))?;
    Ok(created.into())
}

/// What to grant reading on so that everything but `hidden` can be read: Landlock only
/// adds rights, so rather than `/` it is every entry of each directory on the way from `/`
/// to a hidden path, except the next step on that way (and a symlink that leads to one).
/// The directories on the way are only listable (`listable`; Landlock grants that beneath
/// them too, so names beneath show, never contents). An entry made in one of those
/// directories after this is not readable by the run. A hidden path inside a writable one
/// is readable through it: Landlock cannot take a right back.
fn readable_around(hidden: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let root = PathBuf::from("/");
    if hidden.is_empty() || hidden.contains(&root) {
        return (vec![root], Vec::new());
    }
    let (mut readable, mut listable) = (Vec::new(), Vec::new());
    let mut pending = vec![root];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if hidden.contains(&path) {
                continue;
            }
            if hidden.iter().any(|h| h.starts_with(&path)) {
                pending.push(path);
                continue;
            }
            // A symlink grants what it leads to: not a hidden path, nor the way to one.
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                let leads_in = path.canonicalize().map_or(true, |t| {
                    hidden.iter().any(|h| t.starts_with(h) || h.starts_with(&t))
                });
                if leads_in {
                    continue;
                }
            }
            readable.push(path);
        }
        listable.push(dir);
    }
    (readable, listable)
}

/// Makes a forked child (a stdio server) restrict itself with `c` right before exec.
pub fn install(cmd: &mut tokio::process::Command, c: &Confinement) {
    let c = c.clone();
    // SAFETY: runs between fork and exec; see [`enter`].
    unsafe {
        cmd.pre_exec(move || enter(&c));
    }
}

/// Restricts the calling process with `c`: run by a server between its fork and its exec,
/// and by a call's program between its clone and its exec (see `process::launch`).
/// Async-signal-safe: plain syscalls on what `c` prepared, no allocation, no locks (errors
/// are built from the raw errno).
pub fn enter(c: &Confinement) -> io::Result<()> {
    detach_terminal();
    restrict(c.ruleset.as_raw_fd(), &c.filters)
}

/// `no_new_privs`, the ruleset, then the seccomp filters, on the calling thread.
/// Async-signal-safe: plain syscalls, no allocation.
fn restrict(ruleset: RawFd, filters: &[seccompiler::BpfProgram]) -> io::Result<()> {
    // SAFETY: plain syscalls on integers; they touch no memory of ours.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    seccomp::apply(filters)
}

/// Gives up the controlling terminal a daemon started from a shell passes on, so a confined
/// program cannot open `/dev/tty` to reach the user's terminal. The child leads its own
/// process group already, so `setsid` is not possible; `TIOCNOTTY` from a process that does
/// not lead its session detaches that process only. Without a terminal there is nothing to do.
fn detach_terminal() {
    // SAFETY: open, ioctl and close on a static path and the fd it returned.
    unsafe {
        let fd = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::ioctl(fd, libc::TIOCNOTTY);
            libc::close(fd);
        }
    }
}

/// For the benchmark: the parent-side work of one confined call (temp dir, path fds,
/// ruleset; then its removal) and the child-side restrict, run on a throwaway thread
/// (Landlock and `no_new_privs` bind the calling thread only). Returns both durations.
#[doc(hidden)]
pub fn bench_setup(
    workspace: &Path,
    network: Network,
) -> io::Result<(std::time::Duration, std::time::Duration)> {
    let t = std::time::Instant::now();
    let c = Confinement::build(
        SandboxPolicy::WorkspaceWrite,
        network,
        &[workspace.to_path_buf()],
        &[],
    )?;
    let built = t.elapsed();
    let (fd, filters) = (c.ruleset.clone(), c.filters.clone());
    let thread = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        restrict(fd.as_raw_fd(), &filters).map(|()| t.elapsed())
    });
    let restricted = thread
        .join()
        .map_err(|_| io::Error::other("restrict thread panicked"))??;
    let t = std::time::Instant::now();
    drop(c);
    Ok((built + t.elapsed(), restricted))
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the ABI version,
/// or an error (ENOSYS, EOPNOTSUPP) when Landlock is absent or disabled.
pub(super) fn probe_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: a null attribute pointer with size 0 is the documented version query.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).unwrap_or(0)
}
