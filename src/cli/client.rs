//! A minimal JSON-RPC client over the Unix socket (newline framing), for the CLI.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Why a CLI call failed; each maps to an exit code scripts can rely on.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no toolhost daemon is answering on {path}: {reason}\nstart one with `toolhost serve` (or pass --socket / set TOOLHOST_SOCKET)")]
    NoDaemon { path: PathBuf, reason: String },
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("connection to the daemon failed: {0}")]
    Io(String),
}

pub struct Client {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
}

impl Client {
    pub async fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| ClientError::NoDaemon {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        let (r, w) = stream.into_split();
        Ok(Client {
            lines: BufReader::new(r).lines(),
            writer: w,
            next_id: 1,
        })
    }

    /// Sends one request and waits for its response (skipping notifications).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&req).await?;
        loop {
            let msg = self.next_message().await?;
            if msg.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            return response_result(msg);
        }
    }

    pub async fn send(&mut self, msg: &Value) -> Result<(), ClientError> {
        let mut line = msg.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| ClientError::Io(e.to_string()))
    }

    pub async fn next_message(&mut self) -> Result<Value, ClientError> {
        let line = self
            .lines
            .next_line()
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?
            .ok_or_else(|| ClientError::Io("the daemon closed the connection".into()))?;
        serde_json::from_str(&line).map_err(|e| ClientError::Io(format!("bad response line: {e}")))
    }
}

pub fn response_result(mut msg: Value) -> Result<Value, ClientError> {
    if let Some(err) = msg.get("error") {
        return Err(ClientError::Rpc {
            code: err["code"].as_i64().unwrap_or(0),
            message: err["message"].as_str().unwrap_or("").to_owned(),
            data: err.get("data").cloned(),
        });
    }
    Ok(msg
        .get_mut("result")
        .map(Value::take)
        .unwrap_or(Value::Null))
}
