//! Where the daemon's socket is: one resolution for the daemon and every client.
//!
//! When nothing names the socket, there are up to three places for it, in this order:
//! `$XDG_RUNTIME_DIR/toolhost/toolhost.sock`, `/run/user/<uid>/toolhost/toolhost.sock`
//! (when that directory exists and is ours: the runtime directory systemd-logind makes,
//! which `XDG_RUNTIME_DIR` names when it is set at all), and
//! `/tmp/toolhost-<uid>/toolhost.sock`. The daemon binds the first; a client tries each in
//! turn. The second is for clients started without `XDG_RUNTIME_DIR`: the MCP SDKs' default
//! child environment drops it, so an MCP client's `toolhost mcp` would otherwise look in
//! `/tmp` for a daemon the user's login session put in `/run/user`.
//!
//! Before those, a client tries the socket the user's daemon announced in its
//! [`location_file`] (`~/.local/state/toolhost/socket`, found from `HOME` or, without it,
//! the password database): so a frontend that empties the environment still finds a
//! daemon started with `--socket`, `TOOLHOST_SOCKET` or a runtime directory it cannot
//! see. A file or socket that is not the user's own is refused.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The socket path: `explicit` (`--socket`), else `TOOLHOST_SOCKET`, else `configured`
/// (config `listen.socket`), else the first of [`default_sockets`]. The daemon binds this.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    named_socket(explicit, configured).unwrap_or_else(default_socket)
}

/// Every path a client tries, in order: the one named socket, else the announced one
/// ([`announced_socket`]) and the [`default_sockets`].
pub fn socket_paths(explicit: Option<&Path>, configured: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = named_socket(explicit, configured) {
        return vec![p];
    }
    let mut all = default_sockets();
    match announced_socket() {
        Ok(Some(p)) if !all.contains(&p) => all.insert(0, p),
        Ok(_) => {}
        Err(e) => tracing::warn!("{e}"),
    }
    all
}

/// Where the user's daemon says which socket it listens on (one line, the path).
pub fn location_file() -> Option<PathBuf> {
    Some(home_dir()?.join(".local/state/toolhost/socket"))
}

/// `$HOME`, else the user's home in the password database (frontends that empty the
/// environment drop `HOME` too).
pub fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
}

/// The socket the [`location_file`] names, if there is one; an error when the file, or
/// the socket it names, is not the user's own (another user could otherwise point our
/// frontends at a daemon of theirs), as the daemon refuses a socket directory that is not.
pub fn announced_socket() -> Result<Option<PathBuf>, String> {
    let Some(file) = location_file() else {
        return Ok(None);
    };
    let Ok(meta) = std::fs::symlink_metadata(&file) else {
        return Ok(None);
    };
    let uid = nix::unistd::getuid().as_raw();
    let refuse = |what: &str| {
        Err(format!(
            "refusing the socket location file {}: {what}",
            file.display()
        ))
    };
    if !meta.is_file() || meta.uid() != uid {
        return refuse("it is not a file of ours");
    }
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let socket = PathBuf::from(text.trim_end_matches('\n'));
    if !socket.is_absolute() {
        return refuse("it names no absolute path");
    }
    match std::fs::symlink_metadata(&socket) {
        // Gone (a daemon that was killed): nothing to try there.
        Err(_) => Ok(None),
        Ok(m) if m.uid() != uid => refuse(&format!(
            "the socket {} it names is owned by uid {}, not by us (uid {uid})",
            socket.display(),
            m.uid()
        )),
        Ok(_) => Ok(Some(socket)),
    }
}

fn named_socket(explicit: Option<&Path>, configured: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("TOOLHOST_SOCKET").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    configured.map(Path::to_path_buf)
}

/// Where the daemon puts its socket when nothing names one; its directory must be private
/// to the user.
pub fn default_socket() -> PathBuf {
    default_sockets()
        .into_iter()
        .next()
        .unwrap_or_else(|| tmp_socket(nix::unistd::getuid()))
}

/// The default places of the socket, in the order of the module doc (never empty).
pub fn default_sockets() -> Vec<PathBuf> {
    let uid = nix::unistd::getuid();
    let mut dirs = Vec::with_capacity(3);
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        dirs.push(PathBuf::from(dir));
    }
    let logind = PathBuf::from(format!("/run/user/{uid}"));
    let ours =
        std::fs::symlink_metadata(&logind).is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw());
    if ours && !dirs.contains(&logind) {
        dirs.push(logind);
    }
    let mut all: Vec<PathBuf> = dirs
        .into_iter()
        .map(|d| d.join("toolhost").join("toolhost.sock"))
        .collect();
    all.push(tmp_socket(uid));
    all
}

/// Whether a bridge started with no environment at all (no `XDG_RUNTIME_DIR`, no
/// `TOOLHOST_SOCKET`, no config) and no location file (the daemon removes it when it stops,
/// so a bridge started during a restart has none) still tries `socket`: the logind
/// runtime directory's or the /tmp one. Any other socket must be named with `--socket` in
/// the entries frontends run.
pub fn found_without_environment(socket: &Path) -> bool {
    let uid = nix::unistd::getuid();
    let logind = PathBuf::from(format!("/run/user/{uid}"));
    let ours =
        std::fs::symlink_metadata(&logind).is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw());
    (ours && socket == logind.join("toolhost").join("toolhost.sock")) || socket == tmp_socket(uid)
}

/// The last resort: a directory of ours in /tmp (the daemon checks that it is private).
fn tmp_socket(uid: nix::unistd::Uid) -> PathBuf {
    PathBuf::from(format!("/tmp/toolhost-{uid}")).join("toolhost.sock")
}
