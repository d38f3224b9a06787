//! A raw MCP 2026-07-28 client of `toolhost mcp` for the facade tests: the per-request
//! `_meta` and JSON lines over the process's stdio, nothing of an SDK in between.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::{toolhost, Daemon};

/// The revision without `initialize`.
pub const NEW: &str = "2026-07-28";

/// The `_meta` of a new-era request from client `name` that declares `caps`.
pub fn meta(name: &str, caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": NEW,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
    })
}

/// `toolhost mcp` spoken to as raw JSON lines.
pub struct RawStdio {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl RawStdio {
    pub async fn open(d: &Daemon) -> RawStdio {
        Self::open_with(d, &[]).await
    }

    /// `toolhost mcp` with `env` added to its environment.
    pub async fn open_with(d: &Daemon, env: &[(&str, &str)]) -> RawStdio {
        Self::open_in(d, None, &[], env).await
    }

    /// `toolhost mcp ARGS` started in `cwd` (default: the test user's home), with `env`
    /// added to its environment.
    pub async fn open_in(
        d: &Daemon,
        cwd: Option<&std::path::Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> RawStdio {
        let mut cmd = toolhost(d.dir.path());
        cmd.arg("mcp").arg("--socket").arg(d.socket()).args(args);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        cmd.envs(env.iter().copied());
        Self::spawn(cmd)
    }

    /// `cmd` (a `toolhost mcp` made ready by the caller) spoken to over its stdio.
    pub fn spawn(mut cmd: tokio::process::Command) -> RawStdio {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        RawStdio {
            _child: child,
            stdin,
            stdout,
            next_id: 1_000_000,
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    /// Writes `line` (one JSON-RPC message) exactly as given, key order included, as a
    /// recorded frontend sent it.
    pub async fn send_raw(&mut self, line: &str) {
        let line = format!("{line}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next message, within 20 s.
    pub async fn next(&mut self) -> Value {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(20), self.stdout.read_line(&mut line))
            .await
            .expect("a message in time")
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Sends request `id` and returns its answer, collecting what came before it.
    pub async fn request(&mut self, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let mut before = Vec::new();
        loop {
            let m = self.next().await;
            if m["id"] == id && m.get("method").is_none() {
                return (m, before);
            }
            before.push(m);
        }
    }

    /// Sends `subscriptions/listen` `id` with `params` and returns its acknowledgement
    /// (which must come first).
    pub async fn listen(&mut self, id: u64, params: Value) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params}),
        )
        .await;
        let ack = self.next().await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        ack
    }

    /// Sends a request under an id of its own and returns its answer; nothing but
    /// notifications may come first (a new-era peer is never sent a request).
    pub async fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (answer, before) = self.request(id, method, params).await;
        for m in before {
            assert!(m.get("id").is_none(), "a request to a new-era peer: {m}");
        }
        answer
    }
}
