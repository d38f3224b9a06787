//! Errors a method can answer with at the protocol level (not tool failures, which are
//! `ok:false` results). `rpc/` maps each variant to its JSON-RPC code in one place.

/// A method failed in a way the caller must see as a JSON-RPC error.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// `-32001 session not found: <id>`.
    #[error("session not found: {0}")]
    SessionNotFound(String),
    /// `-32602`: the params parsed but make no sense (e.g. a duplicate session id).
    #[error("{0}")]
    InvalidParams(String),
    /// `-32000`: the host could not do it (store I/O, config write).
    #[error("{0}")]
    Server(String),
}

impl Error {
    pub fn server(e: impl std::fmt::Display) -> Self {
        Error::Server(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
