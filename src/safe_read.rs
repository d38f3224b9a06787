//! Reading a file the host did not create: a tool's `tool.json`, config.json, pins.json.
//!
//! Such a file is whatever someone put there, and a repository can commit a symlink: to
//! `/proc/self/pagemap` (gigabytes, reported as 0 bytes long), to a FIFO that never gets a
//! writer, to a device. So the file is opened once, without blocking and without handing
//! us a terminal; what was opened is then checked on the descriptor itself (`fstat`: only a
//! regular file on a real file system is read, not a kernel file of `/proc` or `/sys`) and
//! read from that same descriptor, at most `cap + 1` bytes. There
//! is no check-then-open window for a rename to slip through, and no file can make a read
//! hang or grow without bound.
//!
//! [`read_in_folder`] also keeps the path inside its folder the way the workspace tools do
//! (cap-std: `openat2` with `RESOLVE_BENEATH`, kernel-enforced; see `tools/paths.rs`): a
//! symlink may point elsewhere inside it, never outside. [`read_path`] is for a path the
//! user named (config.json may be a symlink into a dotfiles repository) and follows it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cap_std::fs::{Dir, OpenOptionsExt as _};
use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// Why a file was not read. `Display` completes a sentence that starts with the file's
/// name: `tool.json is not a regular file (fifo)`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("does not exist")]
    NotFound,
    #[error("is a directory, not a file")]
    Dir,
    /// A FIFO, socket or device; the text names which ([`kind_name`]).
    #[error("is not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("is larger than {0} bytes")]
    TooLarge(u64),
    /// A symlink (or `..`) that leads out of the folder it must stay in.
    #[error("leads outside its folder through a symbolic link")]
    Escapes,
    #[error("cannot be read: {0}")]
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound,
            // cap-std refuses an escape with `PermissionDenied` and no OS error code.
            io::ErrorKind::PermissionDenied if e.raw_os_error().is_none() => ReadError::Escapes,
            _ if e.raw_os_error() == Some(nix::libc::ENXIO) => ReadError::NotRegular("socket"),
            _ => ReadError::Io(e),
        }
    }
}

/// What a path turned out to be when opened without blocking.
pub(crate) enum Node {
    /// A regular file, open for reading (blocking mode restored).
    File(File),
    Dir,
    /// Anything else, named by [`kind_name`].
    Special(&'static str),
}

/// The flags every open here adds to a read-only open: never wait in `open()` (a FIFO
/// without a writer would block forever, pinning a blocking-pool thread) and never make a
/// terminal our controlling one. (`O_CLOEXEC` is std's and cap-std's default.)
const NO_WAIT: i32 = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY;

/// Opens `rel` beneath `dir` for reading without ever blocking, and says what it is.
pub(crate) fn open_node(dir: &Dir, rel: &Path) -> io::Result<Node> {
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true).custom_flags(NO_WAIT);
    match dir.open_with(rel, &opts) {
        Ok(f) => classify(f.into_std()),
        // A Unix socket cannot be opened at all.
        Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => Ok(Node::Special("socket")),
        Err(e) => Err(e),
    }
}

/// `fstat`s what was opened; a regular file gets its blocking mode back.
fn classify(file: File) -> io::Result<Node> {
    use std::os::unix::fs::FileTypeExt;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        return Ok(Node::Dir);
    }
    if !kind.is_file() {
        return Ok(Node::Special(kind_name(
            kind.is_fifo(),
            kind.is_socket(),
            kind.is_char_device(),
            kind.is_block_device(),
        )));
    }
    let flags = OFlag::from_bits_truncate(fcntl(&file, FcntlArg::F_GETFL)?);
    fcntl(&file, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    Ok(Node::File(file))
}

/// A short name for a file type that is neither a regular file nor a directory.
pub(crate) fn kind_name(fifo: bool, socket: bool, char_device: bool, block: bool) -> &'static str {
    match (fifo, socket, char_device, block) {
        (true, ..) => "fifo",
        (_, true, ..) => "socket",
        (_, _, true, _) => "character device",
        (.., true) => "block device",
        _ => "special file",
    }
}

/// Reads the regular file at `path`, at most `cap` bytes, without leaving its folder: a
/// symlink there may point to another file of the same folder, never outside it.
pub(crate) fn read_in_folder(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ReadError::Dir);
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let dir = Dir::open_ambient_dir(folder, cap_std::ambient_authority())?;
    read_node(open_node(&dir, Path::new(name))?, cap)
}

/// Reads the regular file at `rel` beneath `folder`, at most `cap` bytes: `rel` and every
/// symlink on its way must stay inside `folder` (a skill's `scripts/run.sh`).
pub(crate) fn read_beneath(folder: &Path, rel: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    if rel.is_absolute() {
        return Err(ReadError::Escapes);
    }
    let dir = Dir::open_ambient_dir(folder, cap_std::ambient_authority())?;
    read_node(open_node(&dir, rel)?, cap)
}

/// Reads the regular file at `path` (symlinks followed), at most `cap` bytes.
pub(crate) fn read_path(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(NO_WAIT)
        .open(path)?;
    read_node(classify(file)?, cap)
}

fn read_node(node: Node, cap: u64) -> Result<Vec<u8>, ReadError> {
    let file = match node {
        Node::File(f) => f,
        Node::Dir => return Err(ReadError::Dir),
        Node::Special(kind) => return Err(ReadError::NotRegular(kind)),
    };
    if let Some(fs) = kernel_file_system(&file) {
        return Err(ReadError::NotRegular(fs));
    }
    // The size is only a hint (a FUSE file may say 0), so the read itself is bounded too.
    if file.metadata()?.len() > cap {
        return Err(ReadError::TooLarge(cap));
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge(cap));
    }
    Ok(bytes)
}

/// The kernel file system `file` is on, when it is one whose files are the kernel's views
/// (`/proc`, `/sys`, …), named as [`ReadError::NotRegular`] shows it. Such a file is never
/// a configuration: it claims 0 bytes and may stream without end (`/proc/self/pagemap`,
/// gigabytes) or block forever (`/proc/kmsg` once drained), so it is refused before a read.
fn kernel_file_system(file: &File) -> Option<&'static str> {
    use nix::sys::statfs::*;
    let kind = fstatfs(file).ok()?.filesystem_type();
    [
        (PROC_SUPER_MAGIC, "a kernel file of /proc"),
        (SYSFS_MAGIC, "a kernel file of /sys"),
        (DEBUGFS_MAGIC, "a kernel file of debugfs"),
        (TRACEFS_MAGIC, "a kernel file of tracefs"),
        (SECURITYFS_MAGIC, "a kernel file of securityfs"),
        (CGROUP_SUPER_MAGIC, "a kernel file of cgroupfs"),
        (CGROUP2_SUPER_MAGIC, "a kernel file of cgroupfs"),
        (BPF_FS_MAGIC, "a kernel file of bpffs"),
    ]
    .into_iter()
    .find(|(magic, _)| *magic == kind)
    .map(|(_, name)| name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_up_to_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_in_folder(&f, 5).unwrap(), b"12345");
        assert!(matches!(read_in_folder(&f, 4), Err(ReadError::TooLarge(4))));
        assert!(matches!(
            read_in_folder(&tmp.path().join("nope"), 4),
            Err(ReadError::NotFound)
        ));
        assert_eq!(read_path(&f, 9).unwrap(), b"12345");
    }

    #[test]
    fn kernel_files_are_refused_before_a_read() {
        // smaps (far more than its claimed 0 bytes) and pagemap (8 bytes per page of the
        // address space) would fill any cap; a small one is refused all the same.
        for kernel in [
            "/proc/self/smaps",
            "/proc/self/pagemap",
            "/proc/self/stat",
            "/sys/kernel/uevent_seqnum",
        ] {
            let e = read_path(Path::new(kernel), 1 << 30).unwrap_err();
            assert!(
                matches!(e, ReadError::NotRegular(n) if n.starts_with("a kernel file")),
                "{kernel}: {e}"
            );
        }
    }

    #[test]
    fn fifos_directories_and_escapes_are_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        nix::unistd::mkfifo(&t.join("p"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::create_dir(t.join("sub")).unwrap();
        std::os::unix::fs::symlink("/proc/self/pagemap", t.join("out")).unwrap();
        std::os::unix::fs::symlink("../x", t.join("up")).unwrap();
        std::os::unix::fs::symlink("p", t.join("in")).unwrap();
        let refused = |name: &str| read_in_folder(&t.join(name), 1 << 20).unwrap_err();
        assert_eq!(refused("p").to_string(), "is not a regular file (fifo)");
        assert_eq!(refused("in").to_string(), "is not a regular file (fifo)");
        assert_eq!(refused("sub").to_string(), "is a directory, not a file");
        assert!(matches!(refused("out"), ReadError::Escapes));
        assert!(matches!(refused("up"), ReadError::Escapes));
        std::fs::write(t.join("sub").join("f"), b"in").unwrap();
        std::os::unix::fs::symlink("../p", t.join("sub").join("back")).unwrap();
        let beneath = |rel: &str| read_beneath(t, Path::new(rel), 1 << 20);
        assert_eq!(beneath("sub/f").unwrap(), b"in");
        assert!(matches!(
            beneath("sub/back"),
            Err(ReadError::NotRegular("fifo"))
        ));
        assert!(matches!(beneath("../x"), Err(ReadError::Escapes)));
        assert!(matches!(beneath("/etc/passwd"), Err(ReadError::Escapes)));
        assert!(matches!(
            read_beneath(&t.join("sub"), Path::new("back"), 9),
            Err(ReadError::Escapes)
        ));
        assert!(matches!(
            read_path(&t.join("p"), 10),
            Err(ReadError::NotRegular("fifo"))
        ));
    }
}
