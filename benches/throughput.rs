//! Throughput and latency of the real `toolhost` binary, driven over its Unix socket the
//! way clients drive it. Prints a table; it never fails on a figure (targets are printed
//! beside the figures for the reader).
//!
//! Run all sections: `cargo bench --bench throughput`
//! Run some: `cargo bench --bench throughput -- mcp sessions` (a section runs when its name
//! contains one of the arguments; sections: `core`, `mcp`, `sessions`, `config`, `catalog`,
//! `facade`).
//!
//! Each section starts its own daemon with the integration tests' launcher
//! (`tests/it/common`: `--socket`, `--config`, `serve --workspace --data-dir` on a temp dir,
//! the daemon's default log level) and stops it with SIGTERM. Newline calls go through the
//! library client (`toolhost::client`), as every Rust caller's do; HTTP keep-alive and
//! WebSocket have small raw drivers here, which exist only to load those framings. The
//! load generator runs in this process on the same machine, so on a small machine client
//! and daemon share the CPUs: the figures are a floor, not a ceiling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/sections.rs"]
mod sections;

use std::borrow::Cow;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{call_value, response_shape, Client, Daemon, BIN, FIXTURE};
use futures::{SinkExt, StreamExt};
use sections::Selection;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::process::Command;
use tokio_tungstenite::tungstenite::Message;
use toolhost::protocol::{McpServerState, McpServerStatus, Session, SessionListResult};

const SECTIONS: &[&str] = &["core", "mcp", "sessions", "config", "catalog", "facade"];

#[tokio::main]
async fn main() {
    let selection = Selection::from_args(SECTIONS);
    let (cpus, load) = sections::machine();
    println!(
        "toolhost throughput benchmark ({cpus} CPUs, shared by client and daemon; \
         load average {})\nbinary: {BIN}",
        load
    );
    let started = Instant::now();
    if selection.has("core") {
        core().await;
    }
    if selection.has("mcp") {
        mcp().await;
        mcp_surface().await;
    }
    if selection.has("sessions") {
        sessions().await;
    }
    if selection.has("config") {
        config().await;
    }
    if selection.has("catalog") {
        catalog().await;
    }
    if selection.has("facade") {
        facade().await;
        facade_new_era().await;
    }
    println!("\ntotal time: {:.1} s", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// Output

fn header(title: &str) {
    println!("\n== {title} ");
    println!("  {:<58} {:>22}   target", "", "");
}

/// One table row: name, figure, and the target (with whether it is met) when there is one.
fn row(name: &str, value: impl std::fmt::Display, target: Option<(&str, bool)>) {
    match target {
        Some((t, met)) => println!(
            "  {name:<58} {value:>22}   {t} {}",
            if met { "(met)" } else { "(MISSED)" }
        ),
        None => println!("  {name:<58} {value:>22}"),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn fmt_dur(d: Duration) -> String {
    let u = us(d);
    if u < 1000.0 {
        format!("{u:.0} µs")
    } else {
        format!("{:.2} ms", u / 1000.0)
    }
}

/// Latencies of a run: sorted on demand.
#[derive(Default)]
struct Lat(Vec<Duration>);

impl Lat {
    fn extend(&mut self, other: Lat) {
        self.0.extend(other.0);
    }
    fn pct(&mut self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort_unstable();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0[i]
    }
    fn p50(&mut self) -> Duration {
        self.pct(0.50)
    }
    fn p99(&mut self) -> Duration {
        self.pct(0.99)
    }
    fn p50_p99(&mut self) -> String {
        format!("{} / {}", fmt_dur(self.p50()), fmt_dur(self.p99()))
    }
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn fmt_rate(r: f64) -> String {
    format!("{r:.0} /s")
}

// ---------------------------------------------------------------------------------------
// The daemon under test

/// Starts the daemon on a fresh temp dir. `setup` may write files (config.json, the
/// workspace) before it starts.
async fn start(setup: impl FnOnce(&Path)) -> Daemon {
    let mut d = Daemon::unstarted();
    setup(d.dir.path());
    d.spawn(&[]).await;
    d
}

/// Waits until `cond` holds for the `mcp.status` entry of `server`; panics after `secs`.
async fn wait_server(
    d: &Daemon,
    server: &str,
    secs: u64,
    cond: impl Fn(&McpServerStatus) -> bool,
) -> McpServerStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let c = d.client().await;
    loop {
        let st = server_status(&c, server).await;
        if cond(&st) {
            return st;
        }
        if Instant::now() > deadline {
            panic!("server {server} not ready after {secs} s: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn server_status(c: &Client, server: &str) -> McpServerStatus {
    // Servers are registered just after the socket starts serving: retry that window.
    for _ in 0..100 {
        if let Ok(mut r) = c.mcp_status(Some(server)).await {
            assert_eq!(r.servers.len(), 1, "mcp.status of {server}: {r:?}");
            return r.servers.remove(0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("mcp.status never listed {server}");
}

fn ready(s: &McpServerStatus) -> bool {
    s.state == McpServerState::Ready
}

fn raw(text: String) -> Box<RawValue> {
    RawValue::from_string(text).expect("valid JSON params")
}

/// A stdio server block running our fixture.
fn fixture_block(env: Value, extra: Value) -> Value {
    let mut block = json!({"command": FIXTURE, "env": env});
    for (k, v) in extra.as_object().unwrap() {
        block[k] = v.clone();
    }
    block
}

// ---------------------------------------------------------------------------------------
// Clients

/// HTTP/1.1 keep-alive framing load (`POST /`) on its own connection: a raw driver that
/// exists to measure the framing, not an API client.
struct HttpLoad {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
    id: u64,
    out: Vec<u8>,
    line: String,
    body: Vec<u8>,
}

impl HttpLoad {
    async fn connect(path: &Path) -> HttpLoad {
        let s = UnixStream::connect(path).await.expect("connect");
        let (r, w) = s.into_split();
        HttpLoad {
            r: BufReader::with_capacity(64 * 1024, r),
            w,
            id: 0,
            out: Vec::with_capacity(1024),
            line: String::new(),
            body: Vec::with_capacity(4096),
        }
    }

    /// Returns the response body.
    async fn call_raw(&mut self, method: &str, params: &str) -> &[u8] {
        self.id += 1;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#,
            self.id
        );
        self.out.clear();
        use std::io::Write;
        write!(
            self.out,
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        self.w.write_all(&self.out).await.expect("write request");
        tokio::time::timeout(Duration::from_secs(60), self.read_response())
            .await
            .expect("an HTTP response within 60 s");
        &self.body
    }

    async fn read_response(&mut self) {
        let mut content_length = None;
        let mut chunked = false;
        let mut first = true;
        loop {
            self.line.clear();
            let n = self.r.read_line(&mut self.line).await.expect("read header");
            assert!(n > 0, "connection closed by the daemon");
            if first {
                assert!(
                    self.line.starts_with("HTTP/1.1 200"),
                    "HTTP status: {}",
                    self.line.trim()
                );
                first = false;
                continue;
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            if k.eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse::<usize>().ok();
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
        self.body.clear();
        if chunked {
            loop {
                self.line.clear();
                self.r.read_line(&mut self.line).await.expect("chunk size");
                let size =
                    usize::from_str_radix(self.line.trim().split(';').next().unwrap_or("0"), 16)
                        .expect("chunk size");
                let start = self.body.len();
                self.body.resize(start + size, 0);
                self.r
                    .read_exact(&mut self.body[start..])
                    .await
                    .expect("chunk");
                self.line.clear();
                self.r.read_line(&mut self.line).await.expect("chunk end");
                if size == 0 {
                    break;
                }
            }
        } else {
            let n = content_length.expect("Content-Length or chunked response");
            self.body.resize(n, 0);
            self.r.read_exact(&mut self.body).await.expect("body");
        }
    }
}

/// WebSocket framing load on its own connection: a raw driver that exists to measure the
/// framing, not an API client.
struct WsLoad {
    ws: tokio_tungstenite::WebSocketStream<UnixStream>,
    id: u64,
    body: String,
}

impl WsLoad {
    async fn connect(path: &Path) -> WsLoad {
        let s = UnixStream::connect(path).await.expect("connect");
        let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", s)
            .await
            .expect("ws handshake");
        WsLoad {
            ws,
            id: 0,
            body: String::new(),
        }
    }

    /// Returns the response message.
    async fn call_raw(&mut self, method: &str, params: &str) -> &str {
        self.id += 1;
        let msg = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#,
            self.id
        );
        self.ws.send(Message::text(msg)).await.expect("ws send");
        loop {
            let m = tokio::time::timeout(Duration::from_secs(60), self.ws.next())
                .await
                .expect("a WebSocket response within 60 s")
                .expect("ws open")
                .expect("ws message");
            if let Message::Text(t) = m {
                self.body = t.as_str().to_owned();
                return &self.body;
            }
        }
    }
}

/// The framings under load, so the core benchmark runs the same loop over each.
#[derive(Clone, Copy, PartialEq)]
enum Framing {
    /// Newline JSON through the library client.
    Newline,
    Http,
    WebSocket,
}

enum Conn {
    Client(Client),
    Http(HttpLoad),
    Ws(WsLoad),
}

impl Conn {
    async fn connect(framing: Framing, path: &Path) -> Conn {
        match framing {
            Framing::Newline => Conn::Client(Client::connect(path).await.expect("connect")),
            Framing::Http => Conn::Http(HttpLoad::connect(path).await),
            Framing::WebSocket => Conn::Ws(WsLoad::connect(path).await),
        }
    }

    /// Calls and checks the result holds `needle`; returns whether it did.
    async fn call_check(&mut self, method: &str, params: &RawValue, needle: &str) -> bool {
        match self {
            Conn::Client(c) => c
                .call_raw(method, params)
                .await
                .is_ok_and(|r| memfind(r.as_bytes(), needle.as_bytes())),
            Conn::Http(c) => memfind(c.call_raw(method, params.get()).await, needle.as_bytes()),
            Conn::Ws(c) => memfind(
                c.call_raw(method, params.get()).await.as_bytes(),
                needle.as_bytes(),
            ),
        }
    }

    /// The response, in the JSON-RPC response shape.
    async fn call_value(&mut self, method: &str, params: &RawValue) -> Value {
        match self {
            Conn::Client(c) => {
                let params: Value = serde_json::from_str(params.get()).unwrap();
                response_shape(call_value(c, method, &params).await)
            }
            Conn::Http(c) => {
                serde_json::from_slice(c.call_raw(method, params.get()).await).expect("JSON")
            }
            Conn::Ws(c) => {
                serde_json::from_str(c.call_raw(method, params.get()).await).expect("JSON")
            }
        }
    }
}

/// 500 `list_tools` calls after 20 warm-up ones, timed one by one.
async fn timed_list_tools(conn: &mut Conn, params: &RawValue) -> Lat {
    let mut lat = Lat::default();
    for i in 0..520 {
        let t = Instant::now();
        conn.call_check("list_tools", params, r#""etag""#).await;
        if i >= 20 {
            lat.0.push(t.elapsed());
        }
    }
    lat
}

/// Whether `needle` is in `hay` (SIMD search: a 366 KiB tool list is checked in
/// microseconds, so the check does not inflate the latency it sits in).
fn memfind(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Result of a load run.
struct Run {
    calls: usize,
    failed: usize,
    elapsed: Duration,
    lat: Lat,
}

/// `clients` connections, each making `warmup` unmeasured calls and then `calls`
/// measured ones (all clients start the measured part together).
#[allow(clippy::too_many_arguments)]
async fn load(
    sock: &Path,
    framing: Framing,
    clients: usize,
    warmup: usize,
    calls: usize,
    method: &'static str,
    params: Arc<Box<RawValue>>,
    needle: &'static str,
) -> Run {
    let barrier = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let sock = sock.to_owned();
        let barrier = barrier.clone();
        let params = params.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::connect(framing, &sock).await;
            for _ in 0..warmup {
                c.call_check(method, &params, needle).await;
            }
            barrier.wait().await;
            let mut lat = Vec::with_capacity(calls);
            let mut failed = 0;
            for _ in 0..calls {
                let t = Instant::now();
                if !c.call_check(method, &params, needle).await {
                    failed += 1;
                }
                lat.push(t.elapsed());
            }
            (lat, failed)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut run = Run {
        calls: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        lat: Lat::default(),
    };
    for t in tasks {
        let (lat, failed) = t.await.unwrap();
        run.calls += lat.len();
        run.failed += failed;
        run.lat.extend(Lat(lat));
    }
    run.elapsed = start.elapsed();
    run
}

fn failures_note(run: &Run) {
    if run.failed > 0 {
        row(
            "    !! calls that did not return the expected result",
            run.failed,
            None,
        );
    }
}

// ---------------------------------------------------------------------------------------
// 1. Core

async fn core() {
    header("core: built-in invoke, framing, list_tools, memory");
    let mut d = start(|dir| {
        let text: String = (0..1024u32)
            .map(|i| {
                if i % 64 == 63 {
                    '\n'
                } else {
                    (b'a' + (i % 26) as u8) as char
                }
            })
            .collect();
        std::fs::write(dir.join("ws/one_k.txt"), text).unwrap();
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = d.rss_kib();
    row(
        "idle RSS, no config",
        format!("{:.1} MB", idle as f64 / 1024.0),
        Some(("≤ 15 MB", idle <= 15 * 1024)),
    );

    let params = Arc::new(raw(
        json!({"name": "read_file", "arguments": {"path": "one_k.txt"}}).to_string(),
    ));
    let sample = Conn::connect(Framing::Newline, &d.socket())
        .await
        .call_value("invoke", &params)
        .await;
    if sample["result"]["result"]["ok"] != true {
        println!("  !! invoke read_file did not succeed: {sample}");
    }
    // `"ok":true` appears in every successful envelope's result.
    let needle = r#""ok":true"#;
    let mut newline_p50 = Duration::ZERO;
    for (framing, label) in [
        (Framing::Newline, "newline"),
        (Framing::Http, "HTTP keep-alive"),
        (Framing::WebSocket, "WebSocket"),
    ] {
        let newline = framing == Framing::Newline;
        let mut one = load(
            &d.socket(),
            framing,
            1,
            300,
            3000,
            "invoke",
            params.clone(),
            needle,
        )
        .await;
        let p50 = one.lat.p50();
        let target = if newline {
            newline_p50 = p50;
            Some(("p50 ≤ 100 µs", p50 <= Duration::from_micros(100)))
        } else {
            let limit = newline_p50.mul_f64(1.1);
            Some(("p50 within 10 % of newline", p50 <= limit))
        };
        row(
            &format!("invoke read_file, 1 client, {label}: p50 / p99"),
            one.lat.p50_p99(),
            target,
        );
        row(
            &format!("invoke read_file, 1 client, {label}: calls/s"),
            fmt_rate(rate(one.calls, one.elapsed)),
            None,
        );
        failures_note(&one);
        let cpu0 = d.cpu_time();
        let mut many = load(
            &d.socket(),
            framing,
            16,
            50,
            1000,
            "invoke",
            params.clone(),
            needle,
        )
        .await;
        let cpu = (d.cpu_time() - cpu0).as_secs_f64() * 1e6 / (many.calls + 16 * 50) as f64;
        let r = rate(many.calls, many.elapsed);
        let target = newline.then_some(("≥ 20,000 /s", r >= 20_000.0));
        row(
            &format!("invoke read_file, 16 clients, {label}: calls/s"),
            fmt_rate(r),
            target,
        );
        row(
            &format!("invoke read_file, 16 clients, {label}: p50 / p99"),
            many.lat.p50_p99(),
            None,
        );
        row(
            &format!("invoke read_file, 16 clients, {label}: daemon CPU/call"),
            format!("{cpu:.1} µs"),
            None,
        );
        failures_note(&many);
    }
    let after_load = d.rss_kib();
    row(
        "RSS after the invoke runs",
        format!("{:.1} MB", after_load as f64 / 1024.0),
        None,
    );
    d.stop().await;

    // list_tools with ~1,000 tools from the fixture.
    let mut d = start(|dir| {
        let cfg = json!({"mcp_servers": {"many": fixture_block(
            json!({"FIXTURE_TOOL_COUNT": "1000"}), json!({}))}});
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let c = d.client().await;
    let tools = loop {
        let h = c.health().await.unwrap();
        if h.tools >= 1000 {
            break h.tools;
        }
        if Instant::now() > deadline {
            panic!("the 1,000 fixture tools never showed in host.health: {h:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let mut conn = Conn::Client(c);
    let empty = raw("{}".to_owned());
    let first = conn.call_value("list_tools", &empty).await;
    let bytes = first.to_string().len();
    let listed = first["result"]["tools"].as_array().map_or(0, Vec::len);
    let cpu0 = d.cpu_time();
    let mut lat = timed_list_tools(&mut conn, &empty).await;
    let daemon_cpu = d.cpu_time().saturating_sub(cpu0) / lat.0.len() as u32;
    let p99 = lat.p99();
    row(
        &format!(
            "list_tools, {listed} tools ({} KiB): p50 / p99",
            bytes / 1024
        ),
        lat.p50_p99(),
        Some(("p99 ≤ 1 ms", p99 <= Duration::from_millis(1))),
    );
    // What of that is the daemon's (the rest: the transfer and the client reading it).
    row(
        "list_tools: daemon CPU per call",
        format!("{:.0} µs", us(daemon_cpu)),
        None,
    );
    row("  (host.health tools)", tools, None);
    let rss = d.rss_kib();
    row(
        "RSS after the 1,000-tool run",
        format!("{:.1} MB", rss as f64 / 1024.0),
        None,
    );
    d.stop().await;
}

// ---------------------------------------------------------------------------------------
// 2. MCP relay

async fn mcp() {
    header("mcp: relay through the host vs the fixture called directly (rmcp)");
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;

    let mut d = start(|dir| {
        // The default `max_concurrency`: the slow-call run below measures it.
        let cfg = json!({"mcp_servers": {"fx": fixture_block(json!({}), json!({}))}});
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    })
    .await;
    wait_server(&d, "fx", 60, ready).await;

    let mut cmd = Command::new(FIXTURE);
    cmd.stderr(Stdio::null()).kill_on_drop(true);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the fixture");
    let direct = ().serve(transport).await.expect("MCP initialise");
    let peer = direct.peer().clone();
    let args = json!({"text": "hi"}).as_object().unwrap().clone();
    let direct_call = {
        let peer = peer.clone();
        let args = args.clone();
        move || {
            let peer = peer.clone();
            let req =
                CallToolRequestParams::new(Cow::Borrowed("echo")).with_arguments(args.clone());
            async move {
                match peer.call_tool(req).await {
                    Ok(r) => r.is_error != Some(true),
                    Err(_) => false,
                }
            }
        }
    };
    let params = Arc::new(raw(
        json!({"name": "mcp_fx_echo", "arguments": {"text": "hi"}}).to_string(),
    ));
    let needle = r#""ok":true"#;
    let sample = d
        .call(
            "invoke",
            json!({"name": "mcp_fx_echo", "arguments": {"text": "hi"}}),
        )
        .await;
    if sample["result"]["result"]["ok"] != true {
        println!("  !! invoke mcp_fx_echo did not succeed: {sample}");
    }

    // The direct floor for 8 concurrent clients, measured once.
    let clients = 8;
    let direct_rate = {
        let per = 1500;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let call = direct_call.clone();
            tasks.push(tokio::spawn(async move {
                let mut failed = 0;
                for _ in 0..per {
                    if !call().await {
                        failed += 1;
                    }
                }
                failed
            }));
        }
        let mut failed = 0;
        for t in tasks {
            failed += t.await.unwrap();
        }
        if failed > 0 {
            row("    !! failed direct calls", failed, None);
        }
        rate(clients * per, start.elapsed())
    };
    row(
        &format!("{clients} clients, direct rmcp (one peer): calls/s"),
        fmt_rate(direct_rate),
        None,
    );

    for (framing, label) in [
        (Framing::Newline, "newline"),
        (Framing::Http, "HTTP keep-alive"),
        (Framing::WebSocket, "WebSocket"),
    ] {
        // Sequential: alternate blocks so both paths see the same machine conditions.
        let mut host_conn = Conn::connect(framing, &d.socket()).await;
        for _ in 0..200 {
            host_conn.call_check("invoke", &params, needle).await;
            direct_call().await;
        }
        let (mut host_lat, mut direct_lat) = (Lat::default(), Lat::default());
        let mut failed = 0;
        let mut cpu_seq = Duration::ZERO;
        let mut host_calls = 0;
        for _ in 0..4 {
            let cpu0 = d.cpu_time();
            for _ in 0..400 {
                let t = Instant::now();
                if !host_conn.call_check("invoke", &params, needle).await {
                    failed += 1;
                }
                host_lat.0.push(t.elapsed());
                host_calls += 1;
            }
            cpu_seq += d.cpu_time() - cpu0;
            for _ in 0..400 {
                let t = Instant::now();
                if !direct_call().await {
                    failed += 1;
                }
                direct_lat.0.push(t.elapsed());
            }
        }
        drop(host_conn);
        let (hp, dp) = (host_lat.p50(), direct_lat.p50());
        let added = hp.saturating_sub(dp);
        let ratio = hp.as_secs_f64() / dp.as_secs_f64().max(1e-9);
        row(
            &format!("{label}: sequential p50 direct / host / added"),
            format!(
                "{} / {} / {:.3} ms",
                fmt_dur(dp),
                fmt_dur(hp),
                us(added) / 1000.0
            ),
            None,
        );
        row(
            &format!("{label}: host / direct p50"),
            format!("{ratio:.2}×"),
            Some(("≤ 1.5×", ratio <= 1.5)),
        );
        if failed > 0 {
            row("    !! failed calls (sequential)", failed, None);
        }

        // 8 concurrent clients sharing one upstream server.
        let cpu1 = d.cpu_time();
        let host = load(
            &d.socket(),
            framing,
            clients,
            50,
            1500,
            "invoke",
            params.clone(),
            needle,
        )
        .await;
        let cpu_conc = d.cpu_time() - cpu1;
        let host_rate = rate(host.calls, host.elapsed);
        let tr = host_rate / direct_rate.max(1e-9);
        row(
            &format!("{label}: {clients} clients through host: calls/s (÷ direct)"),
            format!("{} ({tr:.2}×)", fmt_rate(host_rate)),
            Some(("≥ 0.5×", tr >= 0.5)),
        );
        failures_note(&host);
        // Warm-up calls of the load run count too: they used daemon CPU in the window.
        let conc_calls = host.calls + clients * 50;
        let total_calls = host_calls + conc_calls;
        let cpu_per = (cpu_seq + cpu_conc).as_secs_f64() * 1e6 / total_calls as f64;
        row(
            &format!("{label}: daemon CPU per relayed call (seq / 8 clients)"),
            format!(
                "{cpu_per:.1} µs ({:.1} / {:.1})",
                cpu_seq.as_secs_f64() * 1e6 / host_calls as f64,
                cpu_conc.as_secs_f64() * 1e6 / conc_calls as f64
            ),
            Some(("≤ 30 µs", cpu_per <= 30.0)),
        );
    }
    drop(peer);
    let _ = direct.cancel().await;

    // Slow calls: 16 callers × sleep 50 ms for ~2 s with the default max_concurrency.
    let callers = 16;
    let window = Duration::from_secs(2);
    let sleep_params = Arc::new(raw(
        json!({"name": "mcp_fx_sleep", "arguments": {"ms": 50}}).to_string(),
    ));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let sock = d.socket();
        let p = sleep_params.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::connect(Framing::Newline, &sock).await;
            let (mut n, mut failed) = (0usize, 0usize);
            while start.elapsed() < window {
                if !c.call_check("invoke", &p, needle).await {
                    failed += 1;
                }
                n += 1;
            }
            (n, failed)
        }));
    }
    let (mut n, mut failed) = (0, 0);
    for t in tasks {
        let (a, b) = t.await.unwrap();
        n += a;
        failed += b;
    }
    let r = rate(n, start.elapsed());
    row(
        "16 callers × sleep 50 ms (default max_concurrency): calls/s",
        fmt_rate(r),
        Some(("≥ 300 /s", r >= 300.0)),
    );
    row("  (ideal: 16 callers / 50 ms)", "320 /s", None);
    if failed > 0 {
        row("    !! failed sleep calls", failed, None);
    }
    d.stop().await;
}

/// `prompts/get` and `resources/read` through the stdio facade (`toolhost mcp` → host →
/// fixture) against the fixture called directly, sequentially, in alternating blocks.
async fn mcp_surface() {
    header("mcp: prompts/get and resources/read through the facade vs the server directly");
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;

    let resources = json!({"FIXTURE_RESOURCES": "fx"});
    let mut d = start(|dir| {
        let cfg = json!({"mcp_servers": {"fx": fixture_block(resources.clone(), json!({}))}});
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    })
    .await;
    wait_server(&d, "fx", 60, ready).await;
    let spawn = |mut cmd: Command| async move {
        cmd.stderr(Stdio::null()).kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn an MCP server");
        ().serve(transport).await.expect("MCP initialise")
    };
    let mut fixture = Command::new(FIXTURE);
    fixture.env("FIXTURE_RESOURCES", "fx");
    let direct = spawn(fixture).await;
    let mut facade = Command::new(BIN);
    facade.arg("mcp").arg("--socket").arg(d.socket());
    let facade = spawn(facade).await;
    let name = json!({"name": "Ada"}).as_object().unwrap().clone();

    for (what, through, plain) in [
        ("prompts/get", "mcp_fx_greet", "greet"),
        ("resources/read", "fixture://shared", "fixture://shared"),
    ] {
        let ask = |peer: rmcp::Peer<rmcp::RoleClient>, target: &'static str| {
            let name = name.clone();
            async move {
                if what == "prompts/get" {
                    let req = GetPromptRequestParams::new(target).with_arguments(name);
                    peer.get_prompt(req).await.is_ok()
                } else {
                    peer.read_resource(ReadResourceRequestParams::new(target))
                        .await
                        .is_ok()
                }
            }
        };
        let (mut host_lat, mut direct_lat) = (Lat::default(), Lat::default());
        let mut failed = 0;
        for round in 0..5 {
            let n = if round == 0 { 100 } else { 400 }; // the first round warms up
            let (mut a, mut b) = (Lat::default(), Lat::default());
            for _ in 0..n {
                let t = Instant::now();
                if !ask(direct.peer().clone(), plain).await {
                    failed += 1;
                }
                a.0.push(t.elapsed());
                let t = Instant::now();
                if !ask(facade.peer().clone(), through).await {
                    failed += 1;
                }
                b.0.push(t.elapsed());
            }
            if round > 0 {
                direct_lat.extend(a);
                host_lat.extend(b);
            }
        }
        let (hp, dp) = (host_lat.p50(), direct_lat.p50());
        let ratio = hp.as_secs_f64() / dp.as_secs_f64().max(1e-9);
        row(
            &format!("{what}: p50 direct / through the facade"),
            format!("{} / {}", fmt_dur(dp), fmt_dur(hp)),
            None,
        );
        row(
            &format!("{what}: facade / direct p50"),
            format!("{ratio:.2}×"),
            Some(("≤ 1.5×", ratio <= 1.5)),
        );
        if failed > 0 {
            row("    !! failed requests", failed, None);
        }
    }
    let _ = direct.cancel().await;
    let _ = facade.cancel().await;
    d.stop().await;
}

// ---------------------------------------------------------------------------------------
// 3. Sessions

async fn sessions() {
    header("sessions: create, get, update, list (persisted), restart");
    let mut d = start(|_| {}).await;
    let sample = d.call("session.create", json!({})).await;
    if sample.get("result").and_then(|r| r.get("id")).is_none() {
        println!("  !! session.create failed: {sample}");
        d.stop().await;
        return;
    }
    let total = 100_000usize;
    let clients = 16;
    let cap = Duration::from_secs(60);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let sock = d.socket();
        tasks.push(tokio::spawn(async move {
            let c = Client::connect(&sock).await.unwrap();
            let empty = raw("{}".to_owned());
            let mut ids = Vec::new();
            let mut failed = 0;
            let mut n = 0;
            while n < total / clients && start.elapsed() < cap {
                let r = c.call_raw("session.create", &empty).await;
                n += 1;
                // Keep a few ids for the get/update runs.
                match r {
                    Ok(r) if ids.len() < 200 => {
                        ids.push(serde_json::from_str::<Session>(&r).unwrap().id)
                    }
                    Ok(_) => {}
                    Err(_) => failed += 1,
                }
            }
            (n, ids, failed)
        }));
    }
    let (mut created, mut ids, mut failed) = (0, Vec::new(), 0);
    for t in tasks {
        let (n, i, f) = t.await.unwrap();
        created += n;
        ids.extend(i);
        failed += f;
    }
    let elapsed = start.elapsed();
    let capped = if created < total {
        format!(" (stopped at the {} s cap)", cap.as_secs())
    } else {
        String::new()
    };
    row(
        &format!("session.create × {created}, {clients} clients: creates/s{capped}"),
        fmt_rate(rate(created, elapsed)),
        None,
    );
    if failed > 0 {
        row("    !! failed creates", failed, None);
    }

    // get, 1 client.
    let c = d.client().await;
    let mut lat = Lat::default();
    let mut failed = 0;
    for i in 0..2200 {
        let p = raw(format!(r#"{{"id":"{}"}}"#, ids[i % ids.len()]));
        let t = Instant::now();
        if c.call_raw("session.get", &p).await.is_err() {
            failed += 1;
        }
        if i >= 200 {
            lat.0.push(t.elapsed());
        }
    }
    let p50 = lat.p50();
    row(
        "session.get, 1 client: p50 / p99",
        lat.p50_p99(),
        Some(("p50 ≤ 200 µs", p50 <= Duration::from_micros(200))),
    );
    if failed > 0 {
        row("    !! failed gets", failed, None);
    }

    // update, 1 client.
    let mut lat = Lat::default();
    let mut failed = 0;
    for i in 0..1000 {
        let p = raw(format!(
            r#"{{"id":"{}","meta":{{"k":{i}}}}}"#,
            ids[i % ids.len()]
        ));
        let t = Instant::now();
        if c.call_raw("session.update", &p).await.is_err() {
            failed += 1;
        }
        lat.0.push(t.elapsed());
    }
    row("session.update, 1 client: p50 / p99", lat.p50_p99(), None);
    if failed > 0 {
        row("    !! failed updates", failed, None);
    }

    // update, 16 clients, each on its own sessions.
    let ids = Arc::new(ids);
    let per = 300;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..clients {
        let sock = d.socket();
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let c = Client::connect(&sock).await.unwrap();
            let mut lat = Vec::with_capacity(per);
            let mut failed = 0;
            for i in 0..per {
                let id = &ids[(k + i * clients) % ids.len()];
                let p = raw(format!(r#"{{"id":"{id}","meta":{{"k":{i}}}}}"#));
                let t = Instant::now();
                if c.call_raw("session.update", &p).await.is_err() {
                    failed += 1;
                }
                lat.push(t.elapsed());
            }
            (lat, failed)
        }));
    }
    let mut lat = Lat::default();
    let mut failed = 0;
    for t in tasks {
        let (l, f) = t.await.unwrap();
        lat.extend(Lat(l));
        failed += f;
    }
    let r = rate(lat.0.len(), start.elapsed());
    row(
        &format!("session.update, {clients} clients: updates/s"),
        fmt_rate(r),
        Some(("≥ 2,000 /s", r >= 2000.0)),
    );
    row(
        &format!("session.update, {clients} clients: p50 / p99"),
        lat.p50_p99(),
        None,
    );
    if failed > 0 {
        row("    !! failed updates", failed, None);
    }
    let rss = d.rss_kib();
    row(
        &format!("RSS with {created} sessions"),
        format!("{:.1} MB", rss as f64 / 1024.0),
        None,
    );

    // list, 1 client: pages of 100, newest first, following the cursor.
    let mut lat = Lat::default();
    let mut failed = 0;
    let mut after: Option<String> = None;
    for _ in 0..200 {
        let p = raw(json!({"limit": 100, "after": after}).to_string());
        let t = Instant::now();
        let r = c.call_raw("session.list", &p).await;
        lat.0.push(t.elapsed());
        match r {
            Ok(r) => after = serde_json::from_str::<SessionListResult>(&r).unwrap().next,
            Err(_) => failed += 1,
        }
    }
    row("session.list, pages of 100: p50 / p99", lat.p50_p99(), None);
    if failed > 0 {
        row("    !! failed lists", failed, None);
    }
    drop(c);

    // The store across a restart: SIGTERM flushes and closes it, the next start opens it.
    let t = Instant::now();
    d.stop().await;
    let stopped = t.elapsed();
    let t = Instant::now();
    d.spawn(&[]).await;
    let started = t.elapsed();
    let kept = d.client().await.health().await.map_or(0, |h| h.sessions);
    row(
        &format!("stop / start to serving, {kept} sessions kept"),
        format!("{} / {}", fmt_dur(stopped), fmt_dur(started)),
        None,
    );
    row(
        "session store on disk",
        format!(
            "{:.1} MB",
            dir_bytes(&d.data_dir().join("sessions")) as f64 / 1e6
        ),
        None,
    );
    d.stop().await;
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------
// 4. Config reload on file change

async fn config() {
    header("config: file change → tools_changed");
    let server = |name: &str| {
        fixture_block(
            json!({"FIXTURE_TOOL_PREFIX": format!("{name}_")}),
            json!({}),
        )
    };
    let mut servers = serde_json::Map::new();
    servers.insert("a".into(), server("a"));
    let initial = json!({"mcp_servers": servers.clone()});
    let mut d = start(|dir| {
        std::fs::write(dir.join("config.json"), initial.to_string()).unwrap();
    })
    .await;
    wait_server(&d, "a", 60, ready).await;
    let c = d.client().await;
    let mut sub = c.subscribe_tools_changed().await.unwrap();
    // Let the watcher settle before the first change.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let rounds = 5;
    let timeout = Duration::from_secs(3);
    let mut lat = Lat::default();
    let mut timed_out = false;
    // Time to the first tools_changed after a rename, and how many notifications came.
    let mut first = Lat::default();
    let mut notes: usize;
    let mut multi = false;
    let mut baseline: Vec<(String, Option<u64>)> = Vec::new();
    let st = server_status(&c, "a").await;
    baseline.push(("a".into(), st.connected_since));
    for i in 0..rounds {
        let name = format!("b{i}");
        servers.insert(name.clone(), server(&name));
        let tmp = d.config_path().with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_string_pretty(&json!({"mcp_servers": servers.clone()})).unwrap(),
        )
        .unwrap();
        let want = format!("mcp_{name}_");
        let t = Instant::now();
        std::fs::rename(&tmp, d.config_path()).unwrap();
        let mut seen = false;
        notes = 0;
        while t.elapsed() < timeout {
            let wait = timeout.saturating_sub(t.elapsed());
            let Ok(Some(n)) = tokio::time::timeout(wait, sub.next()).await else {
                break;
            };
            let n = n.expect("a tools_changed notification");
            notes += 1;
            if notes == 1 {
                first.0.push(t.elapsed());
            }
            if n.added.iter().any(|s| s.starts_with(&want)) {
                seen = true;
                break;
            }
        }
        if !seen {
            timed_out = true;
            break;
        }
        lat.0.push(t.elapsed());
        if notes > 1 {
            multi = true;
            println!("    change {i}: {notes} tools_changed notifications before b{i}'s tools");
        }
        let st = wait_server(&d, &name, 30, ready).await;
        if i + 1 < rounds {
            // Servers added before the last change are "unchanged" by the later ones.
            baseline.push((name, st.connected_since));
        }
    }
    if timed_out {
        row(
            &format!("rename → tools_changed (after {} changes)", lat.0.len()),
            "n/a",
            Some(("≤ 500 ms", false)),
        );
        println!(
            "    (no tools_changed within {} s of the rename; is reload-on-file-change in?)",
            timeout.as_secs()
        );
    } else {
        let mut all = lat.0.clone();
        all.sort();
        let max = *all.last().unwrap();
        let p50 = lat.p50();
        row(
            &format!("rename → tools_changed, {rounds} changes: p50 / max"),
            format!("{} / {}", fmt_dur(p50), fmt_dur(max)),
            Some(("max ≤ 500 ms", max <= Duration::from_millis(500))),
        );
        if multi {
            row(
                "rename → first tools_changed: p50",
                fmt_dur(first.p50()),
                None,
            );
        }
    }
    let mut restarted = 0;
    for (name, since) in &baseline {
        let st = server_status(&c, name).await;
        if st.restarts != 0 || st.connected_since != *since {
            restarted += 1;
            println!("    restarted: {name}: {st:?}");
        }
    }
    row(
        &format!("unchanged servers restarted (of {})", baseline.len()),
        restarted,
        Some(("0", restarted == 0)),
    );
    d.stop().await;
}

// ---------------------------------------------------------------------------------------
// 5. Catalog: deferred tools and tool search

/// 10,000 varied tool definitions (10 services × 40 actions × 25 objects) for the fixture's
/// catalog file.
fn generated_catalog() -> Value {
    const SERVICES: [&str; 10] = [
        "github", "postgres", "slack", "jira", "aws", "stripe", "notion", "linear", "sentry",
        "calendar",
    ];
    const ACTIONS: [&str; 40] = [
        "create", "list", "get", "update", "delete", "archive", "search", "export", "restore",
        "watch", "merge", "close", "reopen", "assign", "label", "comment", "approve", "reject",
        "publish", "draft", "copy", "move", "rename", "share", "lock", "unlock", "pin", "star",
        "import", "sync", "backup", "rollback", "deploy", "scale", "pause", "resume", "retry",
        "cancel", "schedule", "notify",
    ];
    const OBJECTS: [&str; 25] = [
        "issue",
        "pull_request",
        "branch",
        "table",
        "row",
        "channel",
        "message",
        "ticket",
        "sprint",
        "bucket",
        "instance",
        "invoice",
        "customer",
        "page",
        "database",
        "project",
        "cycle",
        "error",
        "alert",
        "event",
        "meeting",
        "user",
        "team",
        "file",
        "report",
    ];
    let mut tools = Vec::with_capacity(10_000);
    for service in SERVICES {
        for action in ACTIONS {
            for object in OBJECTS {
                let words = object.replace('_', " ");
                tools.push(json!({
                    "name": format!("{service}_{action}_{object}"),
                    "description": format!("{action} a {words} in {service}. Returns the {words} with its id and fields."),
                    "params": [format!("{object}_id"), "fields"],
                }));
            }
        }
    }
    Value::Array(tools)
}

async fn catalog() {
    header("catalog: 10,000 tools, most deferred (catalog.max_tokens 8000)");
    let d = start(|dir| {
        let file = dir.join("catalog.json");
        std::fs::write(&file, generated_catalog().to_string()).unwrap();
        let cfg = json!({
            "catalog": {"max_tokens": 8000},
            "mcp_servers": {"big": fixture_block(json!({"FIXTURE_CATALOG_FILE": file}), json!({}))}
        });
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    })
    .await;
    let started = Instant::now();
    let c = d.client().await;
    let tools = loop {
        let h = c.health().await.unwrap();
        if h.tools >= 10_000 {
            break h.tools;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "tools never showed: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    row(
        "time to list, pin and screen 10,000 tools",
        fmt_dur(started.elapsed()),
        None,
    );
    let mut conn = Conn::Client(c);
    let empty = raw("{}".to_owned());
    let first = conn.call_value("list_tools", &empty).await;
    let listed = first["result"]["tools"].as_array().map_or(0, Vec::len);
    let mut lat = timed_list_tools(&mut conn, &empty).await;
    let p50 = lat.p50();
    row(
        &format!("list_tools, {listed} listed of {tools}: p50 / p99"),
        lat.p50_p99(),
        Some(("p50 ≤ 0.5 ms", p50 <= Duration::from_micros(500))),
    );
    let queries = [
        "merge a github pull request",
        "create a stripe invoice for a customer",
        "pause sentry alerts",
        "schedule a calendar meeting with the team",
        "^jira_close_",
        "export postgres table rows",
    ];
    let mut lat = Lat::default();
    let mut found = 0;
    for i in 0..1020 {
        let q = queries[i % queries.len()];
        let params = raw(json!({"query": q, "limit": 5}).to_string());
        let t = Instant::now();
        if conn
            .call_check("tools.search", &params, r#""matches""#)
            .await
        {
            found += 1;
        }
        if i >= 20 {
            lat.0.push(t.elapsed());
        }
    }
    let p50 = lat.p50();
    row(
        &format!("tools.search over {tools} tools ({found} answered): p50 / p99"),
        lat.p50_p99(),
        Some(("p50 ≤ 1 ms", p50 <= Duration::from_millis(1))),
    );
    let rss = d.rss_kib();
    row(
        "RSS with 10,000 tools",
        format!("{:.1} MB", rss as f64 / 1024.0),
        None,
    );
}

// ---------------------------------------------------------------------------------------
// 5. MCP facade

/// The MCP facade's added latency: the same small `read_file` through `invoke` on the
/// socket (the library client), through `/mcp` (rmcp's streamable HTTP client over TCP)
/// and through `toolhost mcp` (rmcp's stdio client), sequentially, in alternating blocks.
async fn facade() {
    header("facade: a tools/call through the MCP facade vs invoke on the socket");
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
    use rmcp::ServiceExt;
    use toolhost::protocol::InvokeParams;

    const TOKEN: &str = "bench-token";
    let mut d = Daemon::unstarted();
    let cfg = json!({"listen": {"tcp": "127.0.0.1:0"}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    std::fs::write(d.workspace().join("small.txt"), "one\ntwo\n").unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", TOKEN)]).await;
    let log = d.log();
    let addr = log
        .split("tcp ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_owned();

    let client = d.client().await;
    let args = json!({"path": "small.txt"}).as_object().unwrap().clone();
    let invoke = InvokeParams::new("read_file", args.clone());
    let http_cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(TOKEN);
    let http =
        ().serve(StreamableHttpClientTransport::from_config(http_cfg))
            .await
            .expect("MCP initialise over HTTP");
    let mut cmd = Command::new(BIN);
    cmd.arg("mcp").arg("--socket").arg(d.socket());
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn toolhost mcp");
    let stdio = ().serve(transport).await.expect("MCP initialise over stdio");
    let call = |peer: rmcp::Peer<rmcp::RoleClient>| {
        let req =
            CallToolRequestParams::new(Cow::Borrowed("read_file")).with_arguments(args.clone());
        async move { matches!(peer.call_tool(req).await, Ok(r) if r.is_error != Some(true)) }
    };

    let (mut direct, mut over_http, mut over_stdio) =
        (Lat::default(), Lat::default(), Lat::default());
    let mut failed = 0;
    for round in 0..5 {
        let n = if round == 0 { 100 } else { 400 }; // the first round warms up
        let (mut a, mut b, mut c) = (Lat::default(), Lat::default(), Lat::default());
        for _ in 0..n {
            let t = Instant::now();
            if !client.invoke(&invoke).await.is_ok_and(|r| r.result.ok) {
                failed += 1;
            }
            a.0.push(t.elapsed());
            let t = Instant::now();
            if !call(http.peer().clone()).await {
                failed += 1;
            }
            b.0.push(t.elapsed());
            let t = Instant::now();
            if !call(stdio.peer().clone()).await {
                failed += 1;
            }
            c.0.push(t.elapsed());
        }
        if round > 0 {
            direct.extend(a);
            over_http.extend(b);
            over_stdio.extend(c);
        }
    }
    let base = direct.p50();
    let added = |l: &mut Lat| l.p50().saturating_sub(base);
    row(
        "invoke read_file on the socket, p50 / p99",
        direct.p50_p99(),
        None,
    );
    row(
        "tools/call over /mcp (HTTP, TCP), p50 / p99",
        over_http.p50_p99(),
        None,
    );
    let h = added(&mut over_http);
    row(
        "  added by the HTTP facade, p50",
        fmt_dur(h),
        Some(("≤ 0.1 ms", h <= Duration::from_micros(100))),
    );
    row(
        "tools/call over toolhost mcp (stdio), p50 / p99",
        over_stdio.p50_p99(),
        None,
    );
    let s = added(&mut over_stdio);
    row(
        "  added by the stdio facade, p50",
        fmt_dur(s),
        Some(("≤ 0.15 ms", s <= Duration::from_micros(150))),
    );
    if failed > 0 {
        row("  !! failed calls", failed, None);
    }
    let _ = http.cancel().await;
    let _ = stdio.cancel().await;
    d.stop().await;
}

/// A 2026-07-28 client spoken to as raw JSON lines over stdio: no `initialize`, every
/// request carries its `_meta` (what the Python and TypeScript v2 SDKs send).
struct NewEraStdio {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
    id: u64,
    line: String,
}

impl NewEraStdio {
    fn spawn(mut cmd: Command) -> NewEraStdio {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn an MCP server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        NewEraStdio {
            _child: child,
            stdin,
            stdout,
            id: 0,
            line: String::new(),
        }
    }

    /// One `tools/call` of `name`; whether it answered a result that is not an error.
    async fn call(&mut self, name: &str, args: &Value) -> bool {
        self.id += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/call",
            "params": {"name": name, "arguments": args, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}}});
        let mut out = request.to_string();
        out.push('\n');
        if self.stdin.write_all(out.as_bytes()).await.is_err() {
            return false;
        }
        loop {
            self.line.clear();
            match self.stdout.read_line(&mut self.line).await {
                Ok(n) if n > 0 => {}
                _ => return false,
            }
            let Ok(v) = serde_json::from_str::<Value>(&self.line) else {
                continue;
            };
            if v["id"] == self.id {
                return v["result"]["resultType"] == "complete" && v["result"]["isError"] != true;
            }
        }
    }
}

/// A new-era client (no session, per-request `_meta`) calling the fixture's `echo` through
/// `toolhost mcp` vs calling the same fixture directly.
async fn facade_new_era() {
    header("facade: a 2026-07-28 client through toolhost mcp vs the fixture directly");
    let mut d = start(|dir| {
        let cfg = json!({"mcp_servers": {"fx": fixture_block(json!({}), json!({}))}});
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    })
    .await;
    wait_server(&d, "fx", 60, ready).await;
    let mut direct = NewEraStdio::spawn(Command::new(FIXTURE));
    let mut cmd = Command::new(BIN);
    cmd.arg("mcp").arg("--socket").arg(d.socket());
    let mut facade = NewEraStdio::spawn(cmd);
    let args = json!({"text": "hi"});
    let (mut floor, mut relayed) = (Lat::default(), Lat::default());
    let mut failed = 0;
    for round in 0..5 {
        let n = if round == 0 { 100 } else { 400 }; // the first round warms up
        let (mut a, mut b) = (Lat::default(), Lat::default());
        for _ in 0..n {
            let t = Instant::now();
            if !direct.call("echo", &args).await {
                failed += 1;
            }
            a.0.push(t.elapsed());
            let t = Instant::now();
            if !facade.call("mcp_fx_echo", &args).await {
                failed += 1;
            }
            b.0.push(t.elapsed());
        }
        if round > 0 {
            floor.extend(a);
            relayed.extend(b);
        }
    }
    let ratio = relayed.p50().as_secs_f64() / floor.p50().as_secs_f64().max(1e-9);
    row(
        "tools/call echo on the fixture directly, p50 / p99",
        floor.p50_p99(),
        None,
    );
    row(
        "tools/call mcp_fx_echo through toolhost mcp, p50 / p99",
        relayed.p50_p99(),
        None,
    );
    row(
        "  through the facade / direct, p50",
        format!("{ratio:.2}×"),
        Some(("≤ 1.5×", ratio <= 1.5)),
    );
    if failed > 0 {
        row("  !! failed calls", failed, None);
    }
    d.stop().await;
}
