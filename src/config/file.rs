//! Reading `listen.socket` alone, for clients that must find the daemon even when the rest
//! of config.json is broken.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{ConfigError, ConfigErrorKind};
use super::load::{self, Env};
use super::path::describe;

/// The socket path the config at `path` sets (`listen.socket`, `${NAME}`-expanded), or the
/// `TOOLHOST_LISTEN__SOCKET` override; `Ok(None)` when neither sets one (the caller uses
/// its default), including when the file is missing.
///
/// Reads only that one value: a client that needs the socket must not be thrown off by an
/// unset `${VAR}` or a bad value elsewhere (which would make it fall back to the default
/// socket while the daemon listens elsewhere). Errors only when the socket cannot be known:
/// the path is not a file, the file is unreadable or not JSON, or `listen.socket` itself is
/// not a non-empty string or names an unset variable.
pub fn socket_from_file(path: &Path) -> Result<Option<PathBuf>, ConfigError> {
    socket_with(path, &Env::process())
}

pub(crate) fn socket_with(path: &Path, env: &Env) -> Result<Option<PathBuf>, ConfigError> {
    const VAR: &str = "TOOLHOST_LISTEN__SOCKET";
    const AT: &str = "listen.socket";
    let invalid = |msg: String| ConfigError::one(ConfigErrorKind::Invalid, AT, msg);
    // The override wins, as in `load`; an empty value counts as unset.
    match env.var(VAR) {
        Ok(Some(v)) if !v.is_empty() => return Ok(Some(PathBuf::from(v))),
        Ok(_) => {}
        Err(msg) => return Err(invalid(msg)),
    }
    let Some(bytes) = load::read_file(path)? else {
        return Ok(None);
    };
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let root: Value = serde_json::from_slice(bytes)
        .map_err(|e| ConfigError::one(ConfigErrorKind::Syntax, "", format!("invalid JSON: {e}")))?;
    match root.get("listen").and_then(|l| l.get("socket")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => match load::expand(s, env) {
            Ok(s) if !s.is_empty() => Ok(Some(PathBuf::from(s))),
            Ok(_) => Err(invalid(format!("expands to an empty path ({s:?})"))),
            Err(msg) => Err(invalid(msg)),
        },
        Some(v) => Err(invalid(format!(
            "expected a non-empty string, found {}",
            describe(v)
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::{file_state, FileState};

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("config.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn states() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(file_state(&d.join("nope.json")), FileState::Missing);
        assert_eq!(
            file_state(d),
            FileState::NotAFile("is a directory, not a config file")
        );
        let f = write(d, "{}");
        assert_eq!(file_state(&f), FileState::Present);
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(file_state(&link), FileState::Present);
        std::fs::remove_file(&f).unwrap();
        assert_eq!(
            file_state(&link),
            FileState::NotAFile("is a symbolic link to a file that does not exist")
        );
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(
            file_state(&fifo),
            FileState::NotAFile("is not a regular file (a FIFO, socket or device)")
        );
    }

    #[test]
    fn socket_alone_ignores_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::fixed([("RUN", "/run/x")]);
        let p = write(
            dir.path(),
            r#"{"listen": {"socket": "${RUN}/t.sock", "tcp": 5},
                "limits": {"max_output_bytes": "lots"},
                "mcp_servers": {"a": {"url": "https://h/", "headers": {"A": "${UNSET_T9}"}}}}"#,
        );
        assert_eq!(
            socket_with(&p, &env).unwrap(),
            Some(PathBuf::from("/run/x/t.sock"))
        );
        // The override wins over the file.
        let env2 = Env::fixed([("RUN", "/run/x"), ("TOOLHOST_LISTEN__SOCKET", "/o.sock")]);
        assert_eq!(
            socket_with(&p, &env2).unwrap(),
            Some(PathBuf::from("/o.sock"))
        );
        // ... also when there is no file; an empty override counts as unset.
        let missing = dir.path().join("missing.json");
        assert_eq!(
            socket_with(&missing, &env2).unwrap(),
            Some(PathBuf::from("/o.sock"))
        );
        let empty = Env::fixed([("TOOLHOST_LISTEN__SOCKET", "")]);
        assert_eq!(socket_with(&missing, &empty).unwrap(), None);
        let p = write(dir.path(), r#"{"workspace": "${UNSET_T9}"}"#);
        assert_eq!(socket_with(&p, &env).unwrap(), None);
    }

    #[test]
    fn socket_errors_name_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::fixed([]);
        let p = write(dir.path(), r#"{"listen": {"socket": "${UNSET_T9}/s"}}"#);
        assert_eq!(
            socket_with(&p, &env).unwrap_err().to_string(),
            "listen.socket: environment variable UNSET_T9 is not set"
        );
        let p = write(dir.path(), r#"{"listen": {"socket": 3}}"#);
        assert_eq!(
            socket_with(&p, &env).unwrap_err().to_string(),
            "listen.socket: expected a non-empty string, found 3"
        );
        let p = write(dir.path(), r#"{"listen": "#);
        assert_eq!(
            socket_with(&p, &env).unwrap_err().kind,
            ConfigErrorKind::Syntax
        );
        let e = socket_with(dir.path(), &env).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::NotAFile);
    }
}
