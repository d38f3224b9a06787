//! config.json: the typed model, loading (file + `TOOLHOST_*` environment), and paths.

mod check;
mod diff;
mod error;
mod file;
mod load;
mod model;
mod path;
mod profile;
mod schema;
mod validate;
mod watch;
mod write;

use std::path::{Path, PathBuf};

pub use diff::{diff, ConfigDiff};
pub use error::{ConfigError, ConfigErrorKind, ContentHash};
pub use file::socket_from_file;
pub use load::{file_state, FileState};
pub use model::*;
pub(crate) use profile::name_glob;
pub use profile::ProfileView;
pub use schema::schema;
pub use validate::env_patterns;
pub(crate) use validate::is_own_listener;
pub use watch::{watch, ConfigWatcher, Watching};
pub use write::{add_mcp_server, mcp_server_blocks, remove_mcp_server};

// What `tool.json` shares with config.json: the JSON-message machinery (paths, "did you
// mean", duplicate keys) and the debounced file watching (the tool folders).
pub(crate) use load::duplicate_keys;
pub(crate) use path::{field_names, from_serde_path, segments, suggest, JsonPath, Seg};
pub(crate) use watch::{signal_on_change, SignalDebouncer};

/// Where config.json lives: `--config`, else `TOOLHOST_CONFIG`, else
/// `$XDG_CONFIG_HOME/toolhost/config.json` (`~/.config/...`).
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLHOST_CONFIG") {
        return PathBuf::from(p);
    }
    xdg_dir("XDG_CONFIG_HOME", ".config")
        .join("toolhost")
        .join("config.json")
}

/// Whether the user named the config file (`--config`, or `TOOLHOST_CONFIG`) rather than
/// relying on the default path: a named file that is missing is a mistake (a typo must not
/// silently mean "all defaults"), a missing default file is just "no config".
pub fn is_named(flag: Option<&Path>) -> bool {
    flag.is_some() || std::env::var_os("TOOLHOST_CONFIG").is_some_and(|v| !v.is_empty())
}

/// The message for a named config file that does not exist.
pub fn missing_named(path: &Path) -> String {
    format!(
        "config file {} does not exist (it was named with --config or TOOLHOST_CONFIG)",
        path.display()
    )
}

/// [`load`] for a file the user named: a missing file is a [`ConfigErrorKind::NotAFile`]
/// error instead of all defaults.
pub fn load_named(path: &Path) -> Result<Loaded, ConfigError> {
    if file_state(path) == FileState::Missing {
        return Err(ConfigError::one(
            ConfigErrorKind::NotAFile,
            "",
            missing_named(path),
        ));
    }
    load(path)
}

/// Where sessions, spilled outputs and the process ledger live: `--data-dir`, else config
/// `data_dir`, else `$STATE_DIRECTORY` (systemd; its first entry, as a unit may list
/// several directories separated by `:`), else `$XDG_STATE_HOME/toolhost`.
pub fn data_dir(explicit: Option<PathBuf>, cfg: Option<&Config>) -> PathBuf {
    explicit
        .or_else(|| cfg.and_then(|c| c.data_dir.clone()))
        .or_else(|| {
            let dirs = std::env::var_os("STATE_DIRECTORY")?;
            std::env::split_paths(&dirs).find(|p| !p.as_os_str().is_empty())
        })
        .unwrap_or_else(|| xdg_dir("XDG_STATE_HOME", ".local/state").join("toolhost"))
}

/// `$VAR`, else `$HOME/<fallback>`, else a per-user directory under /tmp.
pub fn xdg_dir(var: &str, fallback: &str) -> PathBuf {
    if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(v);
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(fallback),
        None => PathBuf::from(format!("/tmp/toolhost-{}", nix::unistd::getuid())),
    }
}

/// A config read from disk, with what the reader noticed.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Non-fatal findings (unknown keys, ignored fields), each naming its JSON path.
    pub warnings: Vec<String>,
    /// SHA-256 of the raw file bytes ([`ContentHash::MISSING`] when there is no file).
    pub content_hash: ContentHash,
}

/// Reads and validates the config at `path`; a missing file means all defaults (a
/// directory or a dangling symlink there is a [`ConfigErrorKind::NotAFile`] error).
///
/// Steps: read (unreadable → error) → parse JSON (errors carry line/column; a key twice in
/// one object → error naming its path) → accept
/// `mcpServers` as an alias of `mcp_servers` (both → error) → expand `${NAME}` in every
/// string of the file (unset → error naming the variable and the path; `$${` is a literal
/// `${`) → layer `TOOLHOST_<SECTION>__<KEY>` environment overrides (only variables with `__`;
/// keys are lowercased by the `config` crate, values are strings converted to the expected
/// number/boolean, not `${}`-expanded; empty values count as unset; lists cannot be set) →
/// validate against the schema derived from the model plus the server-block rules,
/// reporting every problem at once. Unknown keys (what the model ignores) are warnings.
///
/// Blocking (reads a small file); fine to call from async code at reload frequency.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    load::load_with(path, &load::Env::for_config(path)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("config.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn missing_file_means_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&dir.path().join("config.json")).unwrap();
        assert_eq!(loaded.content_hash, ContentHash::MISSING);
        assert!(loaded.config.mcp_servers.is_empty());
        assert_eq!(loaded.config.limits, Limits::default());
    }

    #[test]
    fn a_directory_or_dangling_link_is_not_missing() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path()).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::NotAFile);
        assert_eq!(
            e.to_string(),
            format!(
                "config path {} is a directory, not a config file",
                dir.path().display()
            )
        );
        assert_eq!(e.content_hash, None);
        let link = dir.path().join("config.json");
        std::os::unix::fs::symlink(dir.path().join("gone.json"), &link).unwrap();
        let e = load(&link).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::NotAFile);
        assert!(e
            .to_string()
            .ends_with("is a symbolic link to a file that does not exist"));
    }

    #[test]
    fn errors_carry_the_hash_of_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let bad = "{\"limits\": {\"max_output_bytes\": \"x\"}}";
        let p = write(dir.path(), bad);
        let e = load(&p).unwrap_err();
        assert_eq!(e.content_hash, Some(ContentHash::of(bad.as_bytes())));
        assert_eq!(
            e.to_string(),
            "limits.max_output_bytes: expected a positive integer, found \"x\""
        );
        let p = write(dir.path(), "{\"a\": }");
        let e = load(&p).unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Syntax);
        assert!(e.to_string().contains("line 1 column 7"), "{e}");
        assert!(e.content_hash.is_some());
        let good = write(dir.path(), "{}");
        let l = load(&good).unwrap();
        assert_eq!(l.content_hash, ContentHash::of(b"{}"));
        assert_eq!(ContentHash::of_file(&good).unwrap(), l.content_hash);
    }

    /// The only test that touches the real process environment; its names are unique so
    /// parallel tests are not affected.
    #[test]
    fn process_environment_is_used() {
        // SAFETY-free on edition 2021; the names are used by no other test.
        std::env::set_var("TOOLHOST_T_CFG_SECRET_71", "s3cret");
        std::env::set_var(
            "TOOLHOST_PROVIDERS__ZZ_ENVTEST_71__BASE_URL",
            "https://env/v1",
        );
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            r#"{"providers": {"zz_envtest_71": {"base_url": "https://file/v1", "api_key": "${TOOLHOST_T_CFG_SECRET_71}"}}}"#,
        );
        let l = load(&p).unwrap();
        let prov = &l.config.providers["zz_envtest_71"];
        assert_eq!(prov.api_key.as_deref(), Some("s3cret"));
        assert_eq!(prov.base_url.as_deref(), Some("https://env/v1"));
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        std::env::remove_var("TOOLHOST_PROVIDERS__ZZ_ENVTEST_71__BASE_URL");
        std::env::remove_var("TOOLHOST_T_CFG_SECRET_71");
        let e = load(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "providers.zz_envtest_71.api_key: environment variable TOOLHOST_T_CFG_SECRET_71 is not set"
        );
    }

    #[test]
    fn the_contract_example_loads() {
        let env = load::Env::fixed([("OPENAI_API_KEY", "k"), ("REMOTE_TOKEN", "t")]);
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            r#"{
  "workspace": "/srv/project",
  "data_dir": "/var/lib/toolhost",
  "listen": {"socket": "/run/toolhost/toolhost.sock", "socket_mode": "0660",
             "tcp": "127.0.0.1:7311", "token_file": "/etc/toolhost/token"},
  "approval": {"mode": "strict", "tools": {"mcp_github_search_issues": "read_only"}},
  "limits": {"max_request_bytes": 10485760, "max_output_bytes": 1048576, "default_timeout_ms": 120000},
  "providers": {"openai": {"base_url": "https://api.example.com/v1", "api_key": "${OPENAI_API_KEY}"}},
  "mcp_servers": {
    "everything": {
      "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
      "env": {"LOG_LEVEL": "warn"}, "cwd": "/srv/project", "enabled": true,
      "startup_timeout_ms": 30000, "timeout_ms": 60000, "include_tools": [],
      "exclude_tools": ["longRunningOperation"], "trust_annotations": false,
      "max_concurrency": 8, "approval": {"echo": "read_only"}
    },
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}
  },
  "custom_tools": {"paths": ["/srv/project/tools"], "discover": true}
}"#,
        );
        let l = load::load_with(&p, &env).unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        let c = &l.config;
        assert_eq!(c.approval.mode, crate::protocol::ApprovalMode::Strict);
        let names: Vec<&String> = c.mcp_servers.keys().collect();
        assert_eq!(names, ["everything", "remote"]);
        assert_eq!(c.mcp_servers["remote"].headers["Authorization"], "Bearer t");
        assert_eq!(c.mcp_servers["remote"].transport(), "http");
        assert_eq!(
            c.mcp_servers["everything"].exclude_tools,
            ["longRunningOperation"]
        );
        assert_eq!(c.providers["openai"].api_key.as_deref(), Some("k"));
    }
}
