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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The socket path: `explicit` (`--socket`), else `TOOLHOST_SOCKET`, else `configured`
/// (config `listen.socket`), else the first of [`default_sockets`]. The daemon binds this.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    named_socket(explicit, configured).unwrap_or_else(default_socket)
}

/// Every path a client tries, in order: the one named socket, else [`default_sockets`].
pub fn socket_paths(explicit: Option<&Path>, configured: Option<&Path>) -> Vec<PathBuf> {
    match named_socket(explicit, configured) {
        Some(p) => vec![p],
        None => default_sockets(),
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

/// The last resort: a directory of ours in /tmp (the daemon checks that it is private).
fn tmp_socket(uid: nix::unistd::Uid) -> PathBuf {
    PathBuf::from(format!("/tmp/toolhost-{uid}")).join("toolhost.sock")
}
