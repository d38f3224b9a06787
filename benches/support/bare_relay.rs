//! The floor the relay figures are read against: the least a relay written in Rust on tokio
//! and serde_json does, and nothing more. The same work as the naive Node relay
//! (`naive_relay.mjs`): one stdio MCP server, initialized once; clients on a Unix socket;
//! each request parsed, its id renumbered, written to the server; each answer parsed, its
//! client's id put back, written to that client. No validation, sessions, timeouts,
//! cancellation, audit or metrics.
//!
//! It runs as the benchmark binary itself, re-executed with
//! `--bare-relay SOCKET COMMAND [ARGS...]`, so its CPU is a process's own like the others'.
//! One thread, as the daemon's event loop on 2 cores. Prints `ready` once it listens.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::process::{ChildStdin, Command};

const FLAG: &str = "--bare-relay";

type Client = Arc<tokio::sync::Mutex<OwnedWriteHalf>>;
type Waiting = Arc<Mutex<HashMap<u64, (Client, Value)>>>;

/// Runs the bare relay when the process was started as one (see the module doc); false
/// otherwise, and then nothing has been done.
pub fn run_if_asked() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [flag, socket, command, rest @ ..] = args.as_slice() else {
        return false;
    };
    if flag != FLAG {
        return false;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(serve(socket, command, rest));
    true
}

/// The command line that starts the bare relay in front of `command args`.
pub fn command(socket: &std::path::Path, command: &std::path::Path, args: &[String]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.arg(FLAG).arg(socket).arg(command).args(args);
    c
}

async fn write_line(to: &mut (impl AsyncWriteExt + Unpin), msg: &Value) {
    let mut text = msg.to_string();
    text.push('\n');
    let _ = to.write_all(text.as_bytes()).await;
}

async fn serve(socket: &str, command: &str, args: &[String]) {
    let mut server = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin: Arc<tokio::sync::Mutex<ChildStdin>> =
        Arc::new(tokio::sync::Mutex::new(server.stdin.take().unwrap()));
    let mut answers = BufReader::new(server.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bare-relay", "version": "1"}}});
    write_line(&mut *stdin.lock().await, &init).await;
    answers.next_line().await.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    write_line(&mut *stdin.lock().await, &initialized).await;

    let waiting: Waiting = Arc::default();
    let routes = waiting.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = answers.next_line().await {
            let Ok(mut msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let Some(id) = msg.get("id").and_then(Value::as_u64) else {
                continue;
            };
            let Some((client, their_id)) = routes.lock().unwrap().remove(&id) else {
                continue;
            };
            msg["id"] = their_id;
            write_line(&mut *client.lock().await, &msg).await;
        }
    });

    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    println!("ready");
    let next = Arc::new(AtomicU64::new(1));
    while let Ok((stream, _)) = listener.accept().await {
        let (read, write) = stream.into_split();
        let client: Client = Arc::new(tokio::sync::Mutex::new(write));
        let (waiting, stdin, next) = (waiting.clone(), stdin.clone(), next.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(mut msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let id = next.fetch_add(1, Ordering::Relaxed);
                let their_id = msg["id"].take();
                waiting
                    .lock()
                    .unwrap()
                    .insert(id, (client.clone(), their_id));
                msg["id"] = id.into();
                write_line(&mut *stdin.lock().await, &msg).await;
            }
        });
    }
}
