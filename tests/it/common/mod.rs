//! Test harness: starts the real `toolhost` binary on a temp socket and talks to it
//! through the library client ([`toolhost::client::Client`]). The raw framing helpers
//! ([`RawLines`], [`http_request`], [`Ws`]) exist to test the framings byte for byte; they
//! are not API clients. Shared with `benches/throughput.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
pub use toolhost::client::{Client, ClientError};

pub mod conformance;
pub mod haproxy;
pub mod http;
pub mod load;
pub mod mcp;
pub mod new_era;
pub mod postgres;
pub mod skills;

pub const BIN: &str = env!("CARGO_BIN_EXE_toolhost");
pub const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");

/// Waits for `cond` to hold, polling; panics with `what` after `secs`.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The `toolhost` binary with nothing of the user's (see [`isolate`]): its user
/// directories are under `root`. Every toolhost a test starts, daemon or CLI, starts here.
pub fn toolhost(root: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    isolate(cmd.as_std_mut(), root);
    cmd
}

/// Gives `cmd` its own user directories under `root` (`root/xdg` is `$XDG_CONFIG_HOME`,
/// `root/runtime` is `$XDG_RUNTIME_DIR`, `root/home` is `$HOME`, each created empty if
/// missing) and none of the variables that would point it elsewhere, so nothing of the
/// user's (tools in `~/.config/toolhost/tools`, a config, a daemon on the default socket,
/// `TOOLHOST_*` overrides) reaches a test. A test that sets one of these sets it after.
/// It starts in `root/home`, the home directory itself, which names no project: a
/// frontend (`toolhost mcp`, `toolhost invoke`) started there works in the daemon's
/// workspace; a test that means a project directory sets `current_dir` after.
pub fn isolate<'a>(
    cmd: &'a mut std::process::Command,
    root: &Path,
) -> &'a mut std::process::Command {
    use std::os::unix::fs::DirBuilderExt;
    for (var, dir) in [
        ("XDG_CONFIG_HOME", "xdg"),
        ("XDG_RUNTIME_DIR", "runtime"),
        ("HOME", "home"),
    ] {
        let dir = root.join(dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .unwrap();
        cmd.env(var, dir);
    }
    cmd.current_dir(root.join("home"));
    for var in [
        "XDG_STATE_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "STATE_DIRECTORY",
        "TOOLHOST_SOCKET",
        "TOOLHOST_CONFIG",
        "TOOLHOST_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    // Config overrides (`TOOLHOST_<SECTION>__<KEY>`) of the shell the tests run in.
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if name.starts_with("TOOLHOST_") && name.contains("__") {
            cmd.env_remove(&var);
        }
    }
    cmd
}

/// A daemon on its own temp dir: `dir/toolhost.sock`, `dir/config.json`, `dir/data`,
/// `dir/ws` (the workspace), and its own empty user directories ([`isolate`]).
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub stderr_lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Daemon {
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("toolhost.sock")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.json")
    }
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A daemon not started yet, on a fresh temp dir with its workspace created.
    pub fn unstarted() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        Daemon {
            dir,
            child: None,
            stderr_lines: Default::default(),
        }
    }

    /// Starts a daemon whose config.json is `cfg(dir)`; `dir` is the daemon's temp dir, so
    /// servers can be told to write pid or event files there.
    pub async fn start_in(cfg: impl FnOnce(&Path) -> Value) -> Daemon {
        let mut d = Self::unstarted();
        let text = serde_json::to_string_pretty(&cfg(d.dir.path())).unwrap();
        std::fs::write(d.config_path(), text).unwrap();
        d.spawn(&[]).await;
        d
    }

    /// Starts a daemon with no config file.
    pub async fn start() -> Daemon {
        Self::start_with(None).await
    }

    /// Starts a daemon with `config` written to config.json (when given).
    pub async fn start_with(config: Option<Value>) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        if let Some(c) = config {
            std::fs::write(
                dir.path().join("config.json"),
                serde_json::to_string_pretty(&c).unwrap(),
            )
            .unwrap();
        }
        let mut d = Daemon {
            dir,
            child: None,
            stderr_lines: Default::default(),
        };
        d.spawn(&[]).await;
        d
    }

    /// Starts a daemon that also listens on TCP at a free loopback port with the bearer
    /// token `token`; returns it and the address it bound.
    pub async fn start_on_tcp(token: &str) -> (Daemon, String) {
        let mut d = Self::unstarted();
        std::fs::write(
            d.config_path(),
            json!({"listen": {"tcp": "127.0.0.1:0"}}).to_string(),
        )
        .unwrap();
        d.spawn(&[("TOOLHOST_TOKEN", token)]).await;
        let addr = d.tcp_addr().await;
        (d, addr)
    }

    /// Starts the binary on this daemon's dir; waits until the socket answers.
    pub async fn spawn(&mut self, extra_env: &[(&str, &str)]) {
        let child = self.spawn_raw(extra_env);
        self.child = Some(child);
        self.wait_ready().await;
    }

    pub fn command(&self) -> Command {
        let mut cmd = self.command_without_socket();
        cmd.arg("--socket").arg(self.socket());
        cmd
    }

    /// `toolhost serve` on this dir with no `--socket`: the daemon resolves its socket
    /// itself (from config or the environment), as an installed one would.
    pub fn command_without_socket(&self) -> Command {
        // `--config` names the file, and a named file must exist: start from an empty one.
        if !self.config_path().exists() {
            std::fs::write(self.config_path(), "{}").unwrap();
        }
        let mut cmd = toolhost(self.dir.path());
        // The daemon itself runs where the tests run, as it always did.
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        cmd.arg("--config").arg(self.config_path());
        cmd.arg("serve")
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--data-dir")
            .arg(self.data_dir());
        cmd.env("RUST_LOG", "info,rmcp=warn");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// The command line of [`Daemon::command`] as a JSON array, for a script that starts
    /// this daemon again itself.
    pub fn serve_argv(&self) -> String {
        let cmd = self.command();
        let std = cmd.as_std();
        let argv: Vec<String> = std::iter::once(std.get_program())
            .chain(std.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        serde_json::to_string(&argv).unwrap()
    }

    pub fn spawn_raw(&mut self, extra_env: &[(&str, &str)]) -> Child {
        let mut cmd = self.command();
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolhost");
        let stderr = child.stderr.take().unwrap();
        let lines = self.stderr_lines.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if std::env::var_os("TOOLHOST_TEST_LOG").is_some() {
                    eprintln!("[daemon] {l}");
                }
                lines.lock().unwrap().push(l);
            }
        });
        child
    }

    pub async fn wait_ready(&self) {
        let sock = self.socket();
        eventually(20, "daemon socket to answer", || {
            let sock = sock.clone();
            async move {
                match UnixStream::connect(&sock).await {
                    Ok(s) => matches!(http::try_status(s, "/health").await, Some(200 | 503)),
                    Err(_) => false,
                }
            }
        })
        .await;
    }

    pub fn log(&self) -> String {
        self.stderr_lines.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("daemon exits after SIGTERM")
            .unwrap()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id().unwrap() as i32
    }

    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("daemon running");
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }

    /// A library client on a fresh connection (typed calls, subscriptions, several calls in
    /// flight); answers wait at most [`CLIENT_TIMEOUT`] unless a call's own deadline is longer.
    pub async fn client(&self) -> Client {
        Client::connect(&self.socket())
            .await
            .expect("connect the client")
            .with_timeout(CLIENT_TIMEOUT)
    }

    /// Raw newline framing on a fresh connection, for byte-level protocol tests.
    pub async fn raw_lines(&self) -> RawLines {
        RawLines::connect(&self.socket()).await
    }

    /// A newline connection subscribed with `method` (`subscribe_skills_changed`, …).
    pub async fn subscribed(&self, method: &str) -> RawLines {
        let mut c = self.raw_lines().await;
        let r = c.call(method, json!({})).await;
        assert!(r.get("result").is_some(), "{r}");
        c
    }
    /// The address the TCP listener bound (`listen.tcp` of port 0), from the log. The line
    /// naming it can reach the log just after the socket answers, so this waits for it.
    pub async fn tcp_addr(&self) -> String {
        eventually(10, "the tcp address in the log", || async {
            self.log().contains(" + tcp ")
        })
        .await;
        let log = self.log();
        log.split(" + tcp ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no tcp address in log: {log}"))
            .to_owned()
    }

    /// `host.health`'s result.
    pub async fn health(&self) -> Value {
        self.call("host.health", json!({})).await["result"].clone()
    }

    /// A session made by `session.create` with `params`; its id.
    pub async fn session(&self, params: Value) -> String {
        let r = self.call("session.create", params).await;
        r["result"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("session.create: {r}"))
            .to_owned()
    }

    /// A directory under the daemon's temp dir, created, canonical (a session's workspace).
    pub fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    /// `toolhost tools approve NAME`, as the user runs it.
    pub async fn approve_tool(&self, name: &str) {
        let out = toolhost(self.dir.path())
            .arg("--socket")
            .arg(self.socket())
            .args(["tools", "approve", name])
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// The items of `host.health`'s `trust_waiting` (their paths inside their workspace,
    /// `.claude/skills/deploy`), sorted.
    pub async fn trust_waiting(&self) -> Vec<String> {
        let h = self.health().await;
        let mut items: Vec<String> = h["trust_waiting"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|w| w["item"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        items.sort();
        items
    }

    /// Trusts the daemon's workspace as a whole (`toolhost trust WS`): what a test puts
    /// there is the user's own, not a project that waits for approval.
    pub async fn trust_workspace(&self) {
        self.trust(&[self.workspace().as_os_str()]).await;
    }

    /// `toolhost trust ARGS…` (`approve PATH`, `DIR`, `revoke DIR`), as the user runs it.
    pub async fn trust(&self, args: &[&std::ffi::OsStr]) {
        let out = toolhost(self.dir.path())
            .arg("--socket")
            .arg(self.socket())
            .arg("trust")
            .args(args)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// One call on a fresh connection, answered in the JSON-RPC response shape
    /// (`{"result": …}` or `{"error": {code, message[, data]}}`) so tests can assert on
    /// either outcome alike.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        response_shape(call_value(&self.client().await, method, &params).await)
    }

    /// Waits (up to 10 s) until `host.status` lists a call in flight with `call_id`.
    pub async fn wait_for_call(&self, call_id: &str) {
        eventually(10, &format!("call {call_id} to be in flight"), || async {
            let s = self.call("host.status", json!({})).await;
            s["result"]["calls"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["call_id"] == call_id))
        })
        .await;
    }

    /// `invoke` and return the envelope's `result` field (the tool's outcome).
    pub async fn invoke(&self, name: &str, args: Value) -> Value {
        let r = self
            .call("invoke", json!({"name": name, "arguments": args}))
            .await;
        r.get("result")
            .and_then(|r| r.get("result"))
            .cloned()
            .unwrap_or_else(|| panic!("no result in {r}"))
    }

    /// Resident set size of the daemon in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// utime + stime of the daemon process (all threads).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        Duration::from_secs_f64(ticks as f64 / hz)
    }

    pub async fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http_request(&self.socket(), method, path, body).await
    }

    pub async fn ws(&self) -> Ws {
        Ws::connect(&self.socket()).await
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
    }
}

/// How long the harness's client waits for an answer (tool calls with a longer
/// `timeout_ms` wait longer).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// `method(params)` through the library client, raw JSON in and out.
pub async fn call_value(
    client: &Client,
    method: &str,
    params: &Value,
) -> Result<Value, ClientError> {
    let params = serde_json::value::to_raw_value(params).unwrap();
    let raw = client.call_raw(method, &params).await?;
    Ok(serde_json::from_str(&raw).unwrap())
}

/// One call on a fresh connection that must succeed: its `result` (a failure panics,
/// naming the method and the answer).
pub async fn result(d: &Daemon, method: &str, params: Value) -> Value {
    let r = d.call(method, params).await;
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {r}"))
}

/// A call's outcome in the JSON-RPC response shape; a failure that is not an answer of the
/// daemon (no daemon, timeout, broken connection) panics, as no test expects one here.
pub fn response_shape(outcome: Result<Value, ClientError>) -> Value {
    match outcome {
        Ok(result) => json!({ "result": result }),
        Err(ClientError::Rpc {
            code,
            message,
            data,
        }) => {
            let mut error = json!({"code": code, "message": message});
            if let Some(data) = data {
                error["data"] = data;
            }
            json!({ "error": error })
        }
        Err(e) => panic!("no answer from the daemon: {e}"),
    }
}

/// Raw newline framing: lines in, lines out, nothing interpreted (not an API client; see
/// [`Daemon::client`]).
pub struct RawLines {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    pub writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
    /// Messages that arrived while `call` waited for its answer, in order: a call's
    /// `invoke_event` can come before the answer to a request sent on its connection.
    backlog: std::collections::VecDeque<Value>,
}

impl RawLines {
    pub async fn connect(path: &Path) -> RawLines {
        let s = UnixStream::connect(path).await.expect("connect");
        let (r, w) = s.into_split();
        RawLines {
            lines: BufReader::new(r).lines(),
            writer: w,
            next_id: 1,
            backlog: Default::default(),
        }
    }

    pub async fn send_line(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    /// Next message (one `call` passed over first), or panic after 30 s.
    pub async fn recv(&mut self) -> Value {
        if let Some(m) = self.backlog.pop_front() {
            return m;
        }
        self.read().await
    }

    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("a message within 30 s")
            .unwrap()
            .expect("connection open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line}: {e}"))
    }
    /// The next `invoke_event` of `kind` (`input_request`, `result`) on this caller's
    /// stream: its `result`.
    pub async fn invoke_event(&mut self, kind: &str) -> Value {
        loop {
            let n = self.recv().await;
            if n["method"] == "invoke_event" && n["params"]["result"]["kind"] == kind {
                return n["params"]["result"].clone();
            }
        }
    }

    /// The next message, which must be a `method` notification: its payload.
    pub async fn notification(&mut self, method: &str) -> Value {
        let n = self.recv().await;
        assert_eq!(n["method"], method, "{n}");
        n["params"]["result"].clone()
    }

    /// Asserts that no message arrives for `ms` (a watcher settles in 100 ms).
    pub async fn quiet(&mut self, ms: u64) {
        let r = tokio::time::timeout(Duration::from_millis(ms), self.recv()).await;
        assert!(r.is_err(), "unexpected notification: {r:?}");
    }

    /// Sends a request and returns the whole response object (result or error).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(
            &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string(),
        )
        .await;
        loop {
            let m = self.read().await;
            if m.get("id") == Some(&json!(id)) {
                return m;
            }
            self.backlog.push_back(m);
        }
    }

    /// Sends a request without waiting; returns its id.
    pub async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(
            &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string(),
        )
        .await;
        id
    }
}

/// One HTTP/1.1 request over the Unix socket; returns (status, body).
pub async fn http_request(sock: &Path, method: &str, path: &str, body: &str) -> (u16, String) {
    http_request_with(sock, method, path, body, &[]).await
}

pub async fn http_request_with(
    sock: &Path,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut s = UnixStream::connect(sock).await.expect("connect");
    http_on(&mut s, method, path, body, headers).await
}

/// One HTTP/1.1 request on a stream the test opened (see [`http`]); a JSON `Content-Type`
/// unless `headers` name one.
pub async fn http_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut all = headers.to_vec();
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        all.push(("Content-Type", "application/json"));
    }
    let answer = http::exchange(s, method, path, &all, body).await;
    (answer.status, answer.body)
}

/// WebSocket framing over the Unix socket (raw JSON-RPC messages, for framing tests).
pub struct Ws {
    ws: tokio_tungstenite::WebSocketStream<UnixStream>,
    next_id: u64,
}

impl Ws {
    pub async fn connect(sock: &Path) -> Ws {
        let s = UnixStream::connect(sock).await.expect("connect");
        let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", s)
            .await
            .expect("ws handshake");
        Ws { ws, next_id: 1 }
    }

    pub async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::text(msg))
            .await
            .unwrap();
        id
    }

    pub async fn recv(&mut self) -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("ws message within 30 s")
                .expect("ws open")
                .unwrap();
            if let tokio_tungstenite::tungstenite::Message::Text(t) = m {
                return serde_json::from_str(t.as_str()).unwrap();
            }
        }
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        loop {
            let m = self.recv().await;
            if m.get("id") == Some(&json!(id)) {
                return m;
            }
        }
    }
}

/// Tool arguments from a `json!` object (typed `InvokeParams` take a map).
pub fn args(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("tool arguments must be an object, got {other}"),
    }
}

/// A session's meta as its maker gave it: without the `frontend_id` the daemon adds to
/// every session (which must be there).
pub fn own_meta(session: &Value) -> Value {
    let mut meta = session["meta"].clone();
    let id = meta
        .as_object_mut()
        .and_then(|m| m.remove("frontend_id"))
        .unwrap_or_else(|| panic!("no frontend_id in {session}"));
    assert!(
        id.as_str().is_some_and(|i| i.starts_with("f_")),
        "{session}"
    );
    meta
}

/// The tool names of a `list_tools` result in `openai` format, in order.
pub fn tool_names(list: &Value) -> Vec<&str> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect()
}

/// Whether `pid` is a live process (a zombie awaiting its reaper counts as gone).
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

/// The pid of daemon `instance`'s live watchdog (`sh -c <script> toolhost-watchdog
/// <instance>`).
pub fn watchdog_of(instance: &str) -> Option<i32> {
    let needle = format!("toolhost-watchdog\0{instance}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
                && alive(*p)
        })
}

/// Writes `value` to `path` atomically (temp + rename), the way editors save.
/// The kernel's Landlock ABI (the version query of `landlock_create_ruleset`; 0 without
/// Landlock).
pub fn landlock_abi() -> u32 {
    // SAFETY: the version query reads and writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(r).unwrap_or(0)
}

/// A program tool in `root/<dir>`: `run.sh` (`#!/bin/sh` then `script`, executable) and
/// `manifest` as its `tool.json`; returns the tool's folder.
pub fn write_tool(root: &Path, dir: &str, manifest: Value, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = root.join(dir);
    std::fs::create_dir_all(&to).unwrap();
    let prog = to.join("run.sh");
    std::fs::write(&prog, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_atomic(&to.join("tool.json"), &manifest);
    to
}

pub fn write_atomic(path: &Path, value: &Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(value).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Fails the test, naming the fix, when `program` cannot be run: a missing prerequisite is a
/// failure, never a silent pass (`tests/run.sh` installs every one on a fresh machine).
pub fn require_program(program: &str) {
    let found = std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "this test needs `{program}`, which is not installed: run tests/run.sh (it installs it)"
    );
}

/// Fails the test when it does not run as root (CI does); `why` says what needs root.
pub fn require_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root ({why}); CI runs as root, run it as root too"
    );
}

/// Fails the test when the kernel's Landlock ABI is below `abi` (CI's kernel has it).
pub fn require_landlock(abi: u32) {
    let have = landlock_abi();
    assert!(
        have >= abi,
        "this test needs Landlock ABI {abi} and this kernel has {have}"
    );
}

/// The Python of `tests/.venv` with the pinned MCP SDK, installed there when missing.
pub async fn python_sdk_interpreter() -> PathBuf {
    require_program("python3");
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let install = Command::new(tests.join("facade_py/install.sh"))
        .status()
        .await
        .unwrap();
    assert!(install.success(), "installing the Python MCP SDK failed");
    tests.join(".venv/bin/python")
}

/// Runs `tests/facade_py/<script>` with the pinned Python MCP SDK (installed into
/// `tests/.venv` when missing) and parses what it prints as JSON. `env` is added to the
/// script's isolated environment.
pub async fn python_sdk(script: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let python = python_sdk_interpreter().await;
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let home = tempfile::tempdir().unwrap();
    let mut client = Command::new(python);
    isolate(client.as_std_mut(), home.path());
    let out = client
        .arg(tests.join("facade_py").join(script))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
