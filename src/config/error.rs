//! The config error type (one or more problems, each naming a JSON path) and the content
//! hash of a config file.

use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// What went wrong, broadly; lets the RPC layer pick an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The file exists but cannot be read or written.
    Io,
    /// Something is at the config path, but not a file that could be read: a directory, a
    /// symlink to nothing, a FIFO/socket/device. Unlike a missing file, never "defaults".
    NotAFile,
    /// The file is not valid JSON.
    Syntax,
    /// The JSON does not describe a valid config (types, values, environment variables).
    Invalid,
    /// A write-back was refused because of the current state (e.g. the server already exists).
    Conflict,
}

/// One problem, located by its JSON path (`mcp_servers.fs.args[1]`); the path is empty for
/// problems with the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A config that cannot be used (or a write-back that was refused). `Display` prints one
/// problem per line, each `path: what is wrong`, then any warnings as `warning: ...` lines.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    /// Never empty.
    pub problems: Vec<Problem>,
    /// The hash of the bytes that were read, when the file could be read (`MISSING` for a
    /// missing file), so a watcher can remember the last file *read* even when it was bad.
    pub content_hash: Option<ContentHash>,
    /// Warnings found on the way (unknown keys, ...); often the explanation of a problem
    /// (`comand: unknown key` next to "needs command or url"), so `Display` shows them too.
    pub warnings: Vec<String>,
}

impl ConfigError {
    pub fn new(kind: ConfigErrorKind, problems: Vec<Problem>) -> ConfigError {
        ConfigError {
            kind,
            problems,
            content_hash: None,
            warnings: Vec::new(),
        }
    }

    pub fn one(kind: ConfigErrorKind, path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::new(kind, vec![Problem::new(path, message)])
    }

    pub(crate) fn with_hash(mut self, hash: ContentHash) -> ConfigError {
        self.content_hash = Some(hash);
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        if self.problems.is_empty() {
            f.write_str("invalid config")?;
        }
        for w in &self.warnings {
            write!(f, "\nwarning: {w}")?;
        }
        Ok(())
    }
}

/// SHA-256 of a config file's raw bytes; [`ContentHash::MISSING`] stands for "no file".
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// The hash used for a missing file (all zeros; no SHA-256 output is expected to be that).
    pub const MISSING: ContentHash = ContentHash([0; 32]);

    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// Hashes the file at `path` (with its secrets file) as [`load`](super::load) reads
    /// it (`MISSING` if neither is there); `Err` when `load` would refuse to read it.
    pub fn of_file(path: &Path) -> Result<ContentHash, ConfigError> {
        let env = super::load::Env::for_config(path)?;
        Ok(env.hash(super::load::read_file(path)?.as_deref()))
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == ContentHash::MISSING {
            f.write_str("missing")
        } else {
            f.write_str(&self.to_hex())
        }
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}
