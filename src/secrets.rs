//! Secrets the daemon reads from its own environment, taken out of it at start.
//!
//! `/proc/<pid>/environ` shows the environment block the process started with, to anyone
//! allowed to ptrace-read it — e.g. a `bash` call of the same user. The daemon makes
//! itself non-dumpable (which blocks same-user readers), and additionally wipes the secrets
//! it reads once (the TCP token) from that block, which also hides them from root and from
//! core dumps. Variables that config.json references as `${NAME}` stay: each reload
//! expands them again.

use std::ffi::CString;
use std::sync::OnceLock;

/// Variables read once at start and then wiped from the environment.
const TAKEN: &[&str] = &["TOOLHOST_TOKEN"];

/// Process-wide: the environment is one per process, so what is taken out of it is too
/// (every daemon in the process reads the same secrets).
static VALUES: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();

/// Takes [`TAKEN`] out of the environment. Call before any thread starts: the C
/// environment is not thread-safe.
pub fn take_from_env() {
    let mut values = Vec::new();
    for name in TAKEN {
        let Ok(c_name) = CString::new(*name) else {
            continue;
        };
        // SAFETY: single-threaded (called first thing in `main`); the pointer returned by
        // getenv points into the environment block, valid until the variable is changed,
        // and we overwrite exactly strlen bytes of it before unsetting it.
        unsafe {
            let p = nix::libc::getenv(c_name.as_ptr());
            if p.is_null() {
                continue;
            }
            let value = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
            std::ptr::write_bytes(p, 0, nix::libc::strlen(p));
            nix::libc::unsetenv(c_name.as_ptr());
            values.push((*name, value));
        }
    }
    let _ = VALUES.set(values);
}

/// A secret taken at start, or (when [`take_from_env`] was not called, e.g. in unit
/// tests) the environment variable itself.
pub fn get(name: &str) -> Option<String> {
    match VALUES.get() {
        Some(values) => values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone()),
        None => std::env::var(name).ok(),
    }
}
