//! config.json: the typed model, loading (file + `TOOLHOST_*` environment), and paths.

mod model;

use std::path::{Path, PathBuf};

pub use model::*;

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
    pub warnings: Vec<String>,
}

/// Reads and validates the config at `path`; a missing file means all defaults.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "{}".to_owned(),
        Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    };
    let config: Config = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Json))
        .add_source(
            config::Environment::with_prefix("TOOLHOST")
                .prefix_separator("_")
                .separator("__"),
        )
        .build()?
        .try_deserialize()?;
    Ok(Loaded {
        config,
        warnings: Vec::new(),
    })
}
