//! Starting a call's program without copying the daemon: `clone(CLONE_VM | CLONE_VFORK)`,
//! the way `posix_spawn` starts one, plus the two things `posix_spawn` cannot do in the
//! child — `PR_SET_PDEATHSIG` and the sandbox's confinement.
//!
//! Why not `tokio::process::Command`: std forks whenever a `pre_exec` hook is set, and every
//! child needs one (PDEATHSIG must be asked for by the child itself). A fork copies the page
//! tables of the daemon's whole anonymous memory and write-protects it, so the daemon then
//! takes a copy-on-write fault for every page it writes; measured on a 2-core VM, forking a
//! 20 MB process costs 2.5 ms against 0.5 ms for a vfork, more than `bash -c true` itself.
//! With `CLONE_VM` the child runs on the daemon's memory until it execs, while the forking
//! thread (the spawner thread, see [`super::spawner`]) waits.
//!
//! That sharing is the price: between clone and exec the child may only make plain system
//! calls on data prepared before the clone — no allocation, no locks, no Rust runtime. Every
//! signal is blocked around the clone and the child resets each caught signal to its
//! default before unblocking, so no handler of the daemon ever runs on the child's stack.
//! A failure is reported through memory both share (the `errno`, then `_exit(127)`).
//!
//! The program's leader is then waited for with `waitpid` on its pid each time SIGCHLD
//! arrives, never `waitpid(-1)`: tokio and the adopted-zombie reaper reap their own.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::net::unix::pipe;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Stack of the child between clone and exec: it runs a few plain calls, nothing deep.
const CHILD_STACK: usize = 128 * 1024;

/// What to start: the complete environment (nothing is inherited), arguments after the
/// program, and whether stdin is a pipe (else `/dev/null`). stdout and stderr are pipes.
#[derive(Debug)]
pub(super) struct Program {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub piped_stdin: bool,
    pub confine: Option<crate::sandbox::Confinement>,
}

/// The parent's ends of the program's standard streams.
#[derive(Debug)]
pub struct Pipes {
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// A started program's leader, ours to wait for. Dropped before it was reaped, it is killed
/// and reaped in the background (as `kill_on_drop` children are).
#[derive(Debug)]
pub struct Leader {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
    /// SIGCHLD, listened to from the first wait on.
    sigchld: Option<Signal>,
}

impl Leader {
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Waits for the leader to exit and reaps it. Cancel-safe: nothing is lost when the
    /// future is dropped before it resolves.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            // Listening before looking: an exit after the look still wakes us.
            if self.sigchld.is_none() {
                self.sigchld = Some(signal(SignalKind::child())?);
            }
            if let Some(s) = reap(self.pid, false)? {
                self.status = Some(s);
                continue;
            }
            if let Some(sig) = self.sigchld.as_mut() {
                sig.recv().await;
            }
        }
    }

    /// Sends SIGKILL to the leader unless it was reaped already.
    pub fn start_kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: a plain syscall; the pid is our unreaped child, so it is not reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.start_kill();
        let pid = self.pid;
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(reap_when_gone(pid, self.sigchld.take()));
            }
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("reap".into())
                    .spawn(move || reap(pid, true));
            }
        }
    }
}

/// Reaps our killed child `pid` once it exits.
async fn reap_when_gone(pid: libc::pid_t, sigchld: Option<Signal>) {
    let Some(mut sigchld) = sigchld.or_else(|| signal(SignalKind::child()).ok()) else {
        return;
    };
    while let Ok(None) = reap(pid, false) {
        sigchld.recv().await;
    }
}

impl super::Processes {
    /// Starts a call's program without forking the daemon, with the same guarantees as
    /// [`super::Processes::spawn_with`]; `program.env` goes on top of the scrubbed
    /// environment.
    pub(super) async fn launch(
        &self,
        mut program: Program,
    ) -> io::Result<((Leader, Pipes), super::GroupGuard)> {
        let cookie = self.next_cookie();
        let own = std::mem::take(&mut program.env).into_iter().chain([
            (super::INSTANCE_VAR.into(), self.instance().into()),
            (super::GROUP_VAR.into(), cookie.clone().into()),
        ]);
        program.env = self.state.env.load().environment(own);
        let program = std::sync::Arc::new(program);
        // A refused exec is tried again from here, not on the spawner thread, which every
        // start of the daemon waits for.
        let mut busy_waits = TEXT_BUSY_WAITS.iter();
        loop {
            let p = program.clone();
            let started = self
                .start_owned(cookie.clone(), move || {
                    let (leader, pipes) = start(&p)?;
                    let pid = leader.id();
                    Ok(((leader, pipes), Some(pid)))
                })
                .await;
            match (started, busy_waits.next()) {
                (Err(e), Some(wait)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    tokio::time::sleep(*wait).await;
                }
                (started, _) => return started,
            }
        }
    }
}

/// `waitpid` on our child `pid`; `None` while it runs (only when not `blocking`).
fn reap(pid: libc::pid_t, blocking: bool) -> io::Result<Option<ExitStatus>> {
    let flags = if blocking { 0 } else { libc::WNOHANG };
    loop {
        let mut status = 0;
        // SAFETY: writes one int we own.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r == pid {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Everything the child reads, prepared before the clone: C strings and pointer arrays
/// (null-terminated), file descriptors, and the slot it reports a failure in.
struct ChildArgs {
    program: CString,
    argv: Vec<*const libc::c_char>,
    /// `/bin/sh <program> <args>`, for a script without `#!` (as `execvp` does).
    sh_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    /// stdin, stdout, stderr for the child, each above 2 so `dup2` never clobbers another.
    fds: [RawFd; 3],
    parent: libc::pid_t,
    confine: Option<crate::sandbox::Confinement>,
    /// The errno of the step that failed; 0 when the exec happened.
    error: AtomicI32,
}

/// The waits before each new try of an exec the kernel refused with `ETXTBSY` ("text file
/// busy": the program is open for writing somewhere). A program the host just wrote — a
/// workspace tool's approved copy — is briefly open for writing in another child: a
/// `CLONE_VFORK` parent resumes when its child's exec has replaced the memory, a moment
/// before the kernel closes that child's close-on-exec descriptors, which include the write
/// end of a copy another thread was writing as it cloned. A quarter second in all; a program
/// someone really keeps open for writing still fails, with the kernel's reason.
const TEXT_BUSY_WAITS: [std::time::Duration; 8] = [
    std::time::Duration::from_millis(1),
    std::time::Duration::from_millis(2),
    std::time::Duration::from_millis(4),
    std::time::Duration::from_millis(8),
    std::time::Duration::from_millis(16),
    std::time::Duration::from_millis(32),
    std::time::Duration::from_millis(64),
    std::time::Duration::from_millis(128),
];

/// Starts `p` as the leader of a new process group, child of the calling thread (call it on
/// the spawner thread). Returns once the program was exec'd, or with why it could not be.
pub(super) fn start(p: &Program) -> io::Result<(Leader, Pipes)> {
    let strings = |args: &[&OsStr]| -> io::Result<Vec<CString>> {
        args.iter().map(|a| cstring(a.as_bytes())).collect()
    };
    let program = resolve(&p.program, &p.env)?;
    let program_c = cstring(program.as_os_str().as_bytes())?;
    let mut arg_list: Vec<&OsStr> = vec![p.program.as_os_str()];
    arg_list.extend(p.args.iter().map(OsString::as_os_str));
    let args = strings(&arg_list)?;
    let mut sh_list: Vec<&OsStr> = vec![OsStr::new("/bin/sh"), program.as_os_str()];
    sh_list.extend(p.args.iter().map(OsString::as_os_str));
    let sh_args = strings(&sh_list)?;
    let env: Vec<CString> = p
        .env
        .iter()
        .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<io::Result<_>>()?;

    let stdin = if p.piped_stdin {
        let (r, w) = pipe_pair()?;
        (above_stdio(r)?, Some(w))
    } else {
        (above_stdio(open_null()?)?, None)
    };
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let (out_w, err_w) = (above_stdio(out_w)?, above_stdio(err_w)?);

    let args = ChildArgs {
        program: program_c,
        argv: pointers(&args),
        sh_argv: pointers(&sh_args),
        envp: pointers(&env),
        cwd: cstring(p.cwd.as_os_str().as_bytes())?,
        fds: [stdin.0.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
        // SAFETY: a plain syscall.
        parent: unsafe { libc::getpid() },
        confine: p.confine.clone(),
        error: AtomicI32::new(0),
    };
    let pid = clone_and_exec(&args)?;
    // The child's ends are its own now (or it failed): close ours.
    drop((stdin.0, out_w, err_w));
    let failed = args.error.load(Ordering::SeqCst);
    if failed != 0 {
        let _ = reap(pid, true);
        return Err(io::Error::from_raw_os_error(failed));
    }
    let leader = Leader {
        pid,
        status: None,
        sigchld: None,
    };
    let pipes = Pipes {
        stdin: stdin.1.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: pipe::Receiver::from_owned_fd(out_r)?,
        stderr: pipe::Receiver::from_owned_fd(err_r)?,
    };
    Ok((leader, pipes))
}

/// The clone itself, with every signal blocked around it. Returns the child's pid once it
/// exec'd or exited (`CLONE_VFORK` holds this thread until then).
fn clone_and_exec(args: &ChildArgs) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down from its end, which must be 16-byte aligned.
    let top = stack.as_mut_ptr().wrapping_add(CHILD_STACK);
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: sigset operations on values we own; the clone's child runs `child` on
    // `stack`, which outlives it (this thread is suspended until the child execs or exits),
    // and reads `args`, which outlives it for the same reason.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(args).cast_mut().cast(),
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        Ok(pid)
    }
}

/// The child, between clone and exec, on the parent's memory: plain syscalls only.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the suspended parent keeps alive.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: see the module docs; every call below is a plain syscall on prepared data.
    let errno = unsafe { prepare_and_exec(args) };
    args.error.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: `_exit` runs no atexit handlers, which belong to the parent.
    unsafe { libc::_exit(127) }
}

/// Returns only on failure, with its errno.
///
/// # Safety
/// Only in the child of [`clone_and_exec`].
unsafe fn prepare_and_exec(a: &ChildArgs) -> libc::c_int {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // Caught signals back to their default: their handlers are the daemon's. SIGPIPE too,
    // which std ignores in the daemon (an ignored signal would stay ignored across exec).
    let mut dfl: libc::sigaction = std::mem::zeroed();
    dfl.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut cur: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut cur) == 0
            && (cur.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            && cur.sa_sigaction != libc::SIG_DFL
        {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
    // The raw call: glibc's wrappers keep its own internal signals as they were.
    let none: u64 = 0;
    libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK,
        &none as *const u64,
        std::ptr::null_mut::<u64>(),
        std::mem::size_of::<u64>(),
    );
    if libc::setpgid(0, 0) != 0 {
        return errno();
    }
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
        return errno();
    }
    // The daemon died before the line above took effect: nobody would kill us.
    if libc::getppid() != a.parent {
        return libc::ESRCH;
    }
    for (target, &fd) in a.fds.iter().enumerate() {
        // Every source is above 2, so each `dup2` makes a new descriptor without CLOEXEC.
        if libc::dup2(fd, target as libc::c_int) < 0 {
            return errno();
        }
    }
    if libc::chdir(a.cwd.as_ptr()) != 0 {
        return errno();
    }
    if let Some(c) = &a.confine {
        if let Err(e) = crate::sandbox::enter(c) {
            return e.raw_os_error().unwrap_or(libc::EPERM);
        }
    }
    libc::execve(a.program.as_ptr(), a.argv.as_ptr(), a.envp.as_ptr());
    let e = errno();
    if e == libc::ENOEXEC {
        libc::execve(c"/bin/sh".as_ptr(), a.sh_argv.as_ptr(), a.envp.as_ptr());
        return errno();
    }
    e
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program, argument, directory or variable holds a NUL byte",
        )
    })
}

/// The null-terminated pointer array `execve` takes; valid while `strings` lives.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}

/// `program` as `execvp` would find it: as given when it names a path (relative ones from
/// the program's working directory, since the child changes there first), else the first
/// executable file of that name on the child's `PATH`.
fn resolve(program: &Path, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or_else(|| OsString::from("/bin:/usr/bin"), |(_, v)| v.clone());
    find_in(&path, program).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// The first executable file named `program` in the directories of `path` (a `PATH` value).
pub(crate) fn find_in(path: &std::ffi::OsStr, program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A pipe, both ends close-on-exec: (read end, write end).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: writes two ints we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn open_null() -> io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

/// `fd` moved above the standard descriptors (a daemon started with one of them closed
/// gets it back from `pipe2`), so the child's `dup2`s cannot overwrite one another.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicates a descriptor we own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn program(program: &str, args: &[&str]) -> Program {
        Program {
            program: program.into(),
            args: args.iter().map(OsString::from).collect(),
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            piped_stdin: false,
            confine: None,
        }
    }

    async fn stdout_of(p: &Program) -> (String, ExitStatus) {
        let (mut leader, mut pipes) = start(p).unwrap();
        let mut out = String::new();
        pipes.stdout.read_to_string(&mut out).await.unwrap();
        (out, leader.wait().await.unwrap())
    }

    /// The child leads its own group and blocks no signal: neither the daemon's ignored
    /// SIGPIPE (std's) nor the mask blocked around the clone reach it.
    #[tokio::test]
    async fn the_child_leads_its_group_with_default_signals() {
        let (status, exit) = stdout_of(&program("cat", &["/proc/self/status"])).await;
        assert!(exit.success());
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(field("NSpid:"), field("NSpgid:"), "{status}");
        assert_eq!(field("SigBlk:"), "0000000000000000", "{status}");
        // What the daemon ignores stays ignored (as across any exec) but SIGPIPE.
        let ignored = |status: &str| {
            let hex = status
                .lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .unwrap();
            u64::from_str_radix(hex.trim(), 16).unwrap()
        };
        let ours = ignored(&std::fs::read_to_string("/proc/self/status").unwrap());
        assert_ne!(ours & SIGPIPE_BIT, 0, "std ignores SIGPIPE in the daemon");
        assert_eq!(ignored(&status), ours & !SIGPIPE_BIT, "{status}");
    }

    const SIGPIPE_BIT: u64 = 1 << (libc::SIGPIPE - 1);

    /// `PR_SET_PDEATHSIG` is set in the child: when the thread that started it ends, the
    /// child is killed (which is why every start runs on the spawner thread).
    #[test]
    fn the_child_dies_with_the_thread_that_started_it() {
        let pid = std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _entered = rt.enter(); // the pipes register with its reactor
            let (leader, _pipes) = start(&program("sleep", &["30"])).unwrap();
            let pid = leader.pid;
            std::mem::forget(leader); // reaped below, by pid
            pid
        })
        .join()
        .unwrap();
        let status = reap(pid, true).unwrap().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }

    #[tokio::test]
    async fn start_failures_carry_their_errno() {
        let missing = start(&program("toolhost-no-such-program", &[])).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let missing = start(&program("/nonexistent/program", &[])).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let mut p = program("true", &[]);
        p.cwd = "/nonexistent-dir".into();
        assert_eq!(start(&p).unwrap_err().kind(), io::ErrorKind::NotFound);
        let mut p = program("true", &[]);
        p.args = vec!["a\0b".into()];
        assert_eq!(start(&p).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    /// Writes an executable file `name` in `dir` holding `text`.
    fn executable(dir: &Path, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A script without `#!` runs with `/bin/sh`, as `execvp` (and so std) runs it; its
    /// arguments and the environment given (and only that) reach it.
    #[tokio::test]
    async fn a_script_without_an_interpreter_line_runs_with_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = executable(dir.path(), "plain", "echo \"$1 $GIVEN ${HOME:-none}\"\n");
        let mut p = program(script.to_str().unwrap(), &["arg"]);
        p.env.push(("GIVEN".into(), "yes".into()));
        let (out, exit) = stdout_of(&p).await;
        assert!(exit.success());
        assert_eq!(out, "arg yes none\n");
    }

    /// A program open for writing elsewhere for a moment (as a copy the host just wrote can
    /// be, in another child between its exec and the close of its descriptors) starts once
    /// it is closed; one kept open fails with the kernel's reason.
    #[tokio::test]
    async fn a_program_briefly_open_for_writing_starts_once_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let script = executable(dir.path(), "fresh.sh", "#!/bin/sh\necho started\n");
        let processes = super::super::Processes::default();
        let p = || program(script.to_str().unwrap(), &[]);

        let writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&script)
            .unwrap();
        let (held, released) = std::sync::mpsc::channel();
        let closer = std::thread::spawn(move || {
            held.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
            drop(writer);
        });
        released.recv().unwrap();
        let ((mut leader, mut pipes), _group) = processes.launch(p()).await.unwrap();
        closer.join().unwrap();
        let mut out = String::new();
        pipes.stdout.read_to_string(&mut out).await.unwrap();
        assert!(leader.wait().await.unwrap().success());
        assert_eq!(out, "started\n");

        let _kept = std::fs::OpenOptions::new()
            .append(true)
            .open(&script)
            .unwrap();
        let busy = processes.launch(p()).await.map(|_| ()).unwrap_err();
        assert_eq!(busy.raw_os_error(), Some(libc::ETXTBSY), "{busy}");
    }
}
