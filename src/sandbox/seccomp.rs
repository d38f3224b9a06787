//! The seccomp half of the sandbox: the system calls Landlock has no right for.
//!
//! Landlock decides who may write a file's *contents* and names; changing its mode, owner,
//! times, extended attributes or inode flags is not covered by any Landlock right, nor is
//! faking keyboard input into a terminal (`TIOCSTI`). A seccomp filter refuses those with
//! `EPERM`. Seccomp sees only a call's number and integer arguments, never the path, so
//! the rules go by policy (proto-docs/sandbox.md lists what stays possible):
//!
//! - always: owner changes, extended-attribute writes (capabilities, ACLs), inode-flag
//!   ioctls (`chattr`), `TIOCSTI`/`TIOCLINUX`, io_uring (its operations bypass seccomp);
//! - `read-only`: every mode change, and setting explicit times (`touch -d`);
//! - `workspace-write`: mode changes that add set-user-ID or set-group-ID.
//!
//! The programs are compiled before the fork; the child only hands them to the kernel.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::SandboxPolicy;
use SeccompCmpArgLen::{Dword, Qword};

/// Syscall numbers `libc` does not name on every architecture (one table since Linux 5.1).
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// `ioctl` requests that change something outside the file's contents (the request is an
/// `unsigned int` in the kernel, so only its low 32 bits are compared). The numbers are
/// the same on x86_64 and aarch64; `libc` types them differently per C library.
const DENIED_IOCTLS: &[u64] = &[
    0x5412, // TIOCSTI
    0x541c, // TIOCLINUX
    // FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS (`chattr +i/-i/+a`), FS_IOC_FSSETXATTR.
    0x4008_6602,
    0x4004_6602,
    0x401c_5820,
];

/// Set-user-ID and set-group-ID bits of a mode argument.
const SET_ID_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// The compiled filters of one policy, applied in order (a process may stack several).
pub(super) type Programs = Vec<BpfProgram>;

/// Compiles the filters for `policy` (not `off`).
pub(super) fn compile(policy: SandboxPolicy) -> io::Result<Programs> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let filter = SeccompFilter::new(
        rules(policy)?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(io::Error::other)?;
    let main = BpfProgram::try_from(filter).map_err(io::Error::other)?;
    Ok(std::iter::once(main).chain(x32_guard()).collect())
}

/// A filter refusing `socket(AF_UNIX, …)` with `EPERM`: Landlock (below ABI 9) cannot
/// keep a confined process from connecting to a pathname Unix socket such as the
/// daemon's own, so a process that must reach no local daemon gets this on top (the code
/// runner; `socketpair` and inherited sockets are untouched).
pub(super) fn no_unix_sockets() -> io::Result<BpfProgram> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let rules = BTreeMap::from([(
        libc::SYS_socket,
        vec![when(0, Dword, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?],
    )]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(io::Error::other)?;
    BpfProgram::try_from(filter).map_err(io::Error::other)
}

/// Installs `programs` on the calling thread. Async-signal-safe (one syscall per program,
/// no allocation), for the child between fork and exec; `no_new_privs` must be set.
pub(super) fn apply(programs: &[BpfProgram]) -> io::Result<()> {
    for program in programs {
        let len =
            u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
        let prog = libc::sock_fprog {
            len,
            // Same layout: both are the kernel's `struct sock_filter`.
            filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        // SAFETY: the kernel copies the program from `prog`, which outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                &prog as *const libc::sock_fprog,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether the kernel runs seccomp filters that return an errno (`SECCOMP_GET_ACTION_AVAIL`).
pub(super) fn available() -> bool {
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the kernel reads one u32 from the pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    r == 0
}

fn rules(policy: SandboxPolicy) -> io::Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always = [
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    for nr in always.into_iter().chain(legacy::CHOWN) {
        rules.insert(nr, Vec::new());
    }
    let ioctl = DENIED_IOCTLS
        .iter()
        .map(|&cmd| when(1, Dword, SeccompCmpOp::Eq, cmd))
        .collect::<io::Result<_>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);

    // (syscall, index of its mode argument)
    let chmod = [
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
    ]
    .into_iter()
    .chain(legacy::CHMOD);
    // (syscall, index of its times pointer; null means "now")
    let times = [(libc::SYS_utimensat, 2)].into_iter().chain(legacy::TIMES);
    match policy {
        SandboxPolicy::ReadOnly => {
            for (nr, _) in chmod {
                rules.insert(nr, Vec::new());
            }
            for (nr, arg) in times {
                rules.insert(nr, vec![when(arg, Qword, SeccompCmpOp::Ne, 0)?]);
            }
        }
        // workspace-write (`off` gets no filter at all)
        SandboxPolicy::WorkspaceWrite | SandboxPolicy::Off => {
            for (nr, arg) in chmod {
                let set_id = SET_ID_BITS
                    .iter()
                    .map(|&bit| when(arg, Dword, SeccompCmpOp::MaskedEq(bit), bit))
                    .collect::<io::Result<_>>()?;
                rules.insert(nr, set_id);
            }
        }
    }
    Ok(rules)
}

/// A rule matching when argument `arg` compares to `value`: modes and ioctl requests are
/// 32-bit in the kernel (`Dword`, the low half), pointers are whole (`Qword`).
fn when(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> io::Result<SeccompRule> {
    let condition = SeccompCondition::new(arg, len, op, value).map_err(io::Error::other)?;
    SeccompRule::new(vec![condition]).map_err(io::Error::other)
}

/// The path-based calls only x86_64 still has (newer architectures have just the `*at`
/// forms).
#[cfg(target_arch = "x86_64")]
mod legacy {
    pub const CHOWN: [i64; 2] = [libc::SYS_chown, libc::SYS_lchown];
    pub const CHMOD: [(i64, u8); 1] = [(libc::SYS_chmod, 1)];
    pub const TIMES: [(i64, u8); 3] = [
        (libc::SYS_utime, 1),
        (libc::SYS_utimes, 1),
        (libc::SYS_futimesat, 2),
    ];
}
#[cfg(not(target_arch = "x86_64"))]
mod legacy {
    pub const CHOWN: [i64; 0] = [];
    pub const CHMOD: [(i64, u8); 0] = [];
    pub const TIMES: [(i64, u8); 0] = [];
}

/// On x86_64 the same architecture also carries the x32 ABI: its calls are the 64-bit
/// numbers with bit 30 set, which the main filter would not recognise. A second filter
/// refuses them all (`ENOSYS`, as on kernels built without x32).
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Option<BpfProgram> {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    Some(vec![
        // seccomp_data.nr is at offset 0.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ])
}
#[cfg(not(target_arch = "x86_64"))]
fn x32_guard() -> Option<BpfProgram> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_policies_compile_within_the_kernels_limit() {
        for policy in [SandboxPolicy::ReadOnly, SandboxPolicy::WorkspaceWrite] {
            let programs = compile(policy).unwrap_or_default();
            assert!(!programs.is_empty());
            assert!(programs.iter().all(|p| !p.is_empty() && p.len() < 4096));
        }
    }
}
