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

/// The secrets file's name, beside config.json: `${NAME}` references in config.json are
/// filled from it before the daemon's environment, and it is watched and reloaded with
/// config.json, so a secret added there needs no restart (proto-docs/config.md, "Secrets").
pub const FILE_NAME: &str = "secrets.env";

/// The largest secrets file read.
const MAX_FILE_BYTES: u64 = 256 * 1024;

/// The environment variable naming a secrets file kept elsewhere (a private mount, a
/// systemd credentials directory) instead of beside config.json.
pub const FILE_ENV: &str = "TOOLHOST_SECRETS_FILE";

/// The secrets file that goes with the config file at `config`: `$TOOLHOST_SECRETS_FILE`
/// when set, else [`FILE_NAME`] beside it. The daemon, its watcher and `import` all ask here.
pub fn file_for(config: &std::path::Path) -> std::path::PathBuf {
    if let Some(p) = std::env::var_os(FILE_ENV).filter(|p| !p.is_empty()) {
        return std::path::PathBuf::from(p);
    }
    match config.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.join(FILE_NAME),
        _ => std::path::PathBuf::from(FILE_NAME),
    }
}

/// A secrets file as read: its bytes (part of the config's content hash, so an edit of it
/// alone reloads) and its variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretsFile {
    pub bytes: Vec<u8>,
    pub vars: std::collections::BTreeMap<String, String>,
}

/// Reads the secrets file at `path`: `Ok(None)` when there is none. It is refused (the
/// error says how to fix it) unless it is a regular file owned by this process's user and
/// readable by nobody else (mode 0600 or stricter), since it holds what config.json must
/// not.
pub fn read_file(path: &std::path::Path) -> Result<Option<SecretsFile>, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("secrets file {}: {e}", path.display())),
    };
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "secrets file {} belongs to uid {}, not to the daemon's user (uid {me}): it is not \
             read",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "secrets file {} can be read by others (mode {:04o}): run `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    let bytes = crate::safe_read::read_path(path, MAX_FILE_BYTES)
        .map_err(|e| format!("secrets file {} {e}", path.display()))?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("secrets file {} is not UTF-8", path.display()))?;
    let vars = parse(text).map_err(|e| format!("secrets file {}: {e}", path.display()))?;
    Ok(Some(SecretsFile { bytes, vars }))
}

/// `NAME=value` lines (an `export ` before the name is allowed); blank lines and lines
/// starting with `#` are skipped. The value is taken as written up to the end of the line,
/// one pair of matching outer quotes removed: no `$` expansion and no escapes, unlike the
/// dotenv crates, which would change a token holding `$` or `\`.
pub fn parse(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut vars = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected NAME=value", i + 1));
        };
        let name = name.trim();
        if !is_var_name(name) {
            return Err(format!(
                "line {}: {name:?} is not a variable name (letters, digits and _)",
                i + 1
            ));
        }
        let value = value.trim_end_matches('\r');
        let value = ['\'', '"']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        vars.insert(name.to_owned(), value.to_owned());
    }
    Ok(vars)
}

/// Whether `name` can be referenced as `${name}` in config.json.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Adds `vars` to the secrets file at `path` (created with mode 0600), keeping its other
/// lines as they are. A variable the file already holds with the same value is left; with
/// another value it is an error naming it, and nothing is written. Returns the names
/// added.
pub fn add_to_file(
    path: &std::path::Path,
    vars: &[(String, String)],
) -> Result<Vec<String>, String> {
    let old = read_file(path)?.unwrap_or_default();
    let mut text = String::from_utf8_lossy(&old.bytes).into_owned();
    let mut added = Vec::new();
    for (name, value) in vars {
        if !is_var_name(name) {
            return Err(format!("{name:?} is not a variable name"));
        }
        if value.contains(['\n', '\r', '\0']) {
            return Err(format!(
                "the value of {name} holds a line break, which a secrets file line cannot"
            ));
        }
        match old.vars.get(name) {
            Some(have) if have == value => continue,
            Some(_) => {
                return Err(format!(
                    "{} already sets {name} to another value: change it there by hand",
                    path.display()
                ))
            }
            None if added.contains(name) => continue,
            None => {}
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        // Quoted when reading it back would otherwise strip quotes or spaces from it.
        let quoted = value.starts_with(['\'', '"', ' ', '\t']) || value.ends_with([' ', '\t']);
        if quoted {
            text.push_str(&format!("{name}='{value}'\n"));
        } else {
            text.push_str(&format!("{name}={value}\n"));
        }
        added.push(name.clone());
    }
    if !added.is_empty() {
        crate::atomic_file::write_atomic(
            path,
            text.as_bytes(),
            crate::atomic_file::Durability::Synced,
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(added)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_taken_as_written() {
        let v = parse("# c\n\nA=1\nexport B = x\nC='$x \\y'\nD=\"q\"\nE='\n").unwrap();
        assert_eq!(v["A"], "1");
        assert_eq!(v["B"], " x");
        assert_eq!(v["C"], "$x \\y");
        assert_eq!(v["D"], "q");
        assert_eq!(v["E"], "'");
        assert!(parse("no equals").is_err());
        assert!(parse("1A=x").is_err());
    }

    #[test]
    fn added_values_read_back_and_the_mode_is_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE_NAME);
        let vars = vec![
            ("K".to_owned(), "'odd' ".to_owned()),
            ("T".to_owned(), "a$b".to_owned()),
        ];
        assert_eq!(add_to_file(&p, &vars).unwrap(), ["K", "T"]);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let f = read_file(&p).unwrap().unwrap();
        assert_eq!(f.vars["K"], "'odd' ");
        assert_eq!(f.vars["T"], "a$b");
        assert!(add_to_file(&p, &vars).unwrap().is_empty());
        assert!(add_to_file(&p, &[("T".to_owned(), "other".to_owned())]).is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_file(&p).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        // Another user's file is not read, whatever its mode (the suite runs as root).
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let e = read_file(&p).unwrap_err();
        assert!(
            e.contains("belongs to uid 65534, not to the daemon's user"),
            "{e}"
        );
    }
}
