//! Where the daemon's socket is: one resolution for the daemon and every client.

use std::path::{Path, PathBuf};

/// The socket path: `explicit` (`--socket`), else `TOOLHOST_SOCKET`, else `configured`
/// (config `listen.socket`), else `$XDG_RUNTIME_DIR/toolhost/toolhost.sock`, else
/// `/tmp/toolhost-<uid>/toolhost.sock`.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("TOOLHOST_SOCKET").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    default_socket()
}

/// Where the socket is when nothing names one; its directory must be private to the user.
pub fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("toolhost").join("toolhost.sock"),
        None => {
            PathBuf::from(format!("/tmp/toolhost-{}", nix::unistd::getuid())).join("toolhost.sock")
        }
    }
}
