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
    /// `-32602`: no MCP server by that name.
    #[error(transparent)]
    UnknownServer(#[from] UnknownServer),
    /// `-32002`: no MCP server lists or matches this resource URI (MCP's own code).
    #[error("resource not found: {0}")]
    ResourceNotFound(String),
    /// `-32009`: a file of an MCP server's skill failed its verification (size, digest,
    /// front matter) and is not served.
    #[error("{0}")]
    SkillRefused(String),
    /// An MCP server answered a relayed request (prompt, resource, completion) with an
    /// error: its code and message, named after the server, and its data where the
    /// caller needs it (`-32021`'s `requiredCapabilities`).
    #[error("{message}")]
    Upstream {
        code: i32,
        message: String,
        data: Option<serde_json::Value>,
    },
}

/// There is no MCP server by this name: among the live servers, or in config.json (for
/// `mcp.remove`, which edits the file).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct UnknownServer {
    pub name: String,
    pub in_config_file: bool,
}

impl UnknownServer {
    /// No live server is called `name`.
    pub fn live(name: &str) -> Self {
        UnknownServer {
            name: name.to_owned(),
            in_config_file: false,
        }
    }
    /// config.json names no server `name`.
    pub fn in_config_file(name: &str) -> Self {
        UnknownServer {
            name: name.to_owned(),
            in_config_file: true,
        }
    }
}

impl std::fmt::Display for UnknownServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no MCP server named '{}'", self.name)?;
        if self.in_config_file {
            f.write_str(" in config.json")?;
        }
        Ok(())
    }
}

impl Error {
    pub fn server(e: impl std::fmt::Display) -> Self {
        Error::Server(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
