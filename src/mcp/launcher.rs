//! Opening a connection to one MCP server: a stdio child in its own process group (spawned
//! through the process module, so it dies with the daemon), a streamable HTTP endpoint, or
//! a legacy HTTP+SSE one (`sse.rs`; also the fallback of an HTTP server that refuses the
//! streamable POST).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};

use super::era;
use tokio::io::BufReader;

use crate::bounded_lines::read_line_bounded;

use super::auth::OAuth;
use super::client::Client;
use super::stdio::{DirectCalls, StdioTransport};
use crate::config::McpServer;
use crate::process::{GroupGuard, Processes};

/// A live connection; dropping it closes the session and kills a stdio server's group.
pub struct Connection {
    pub service: RunningService<RoleClient, Client>,
    /// The stdio server's process group (none for HTTP).
    pub group: Option<GroupGuard>,
    /// The stdio server itself: killed and reaped when the connection goes.
    pub _child: Option<tokio::process::Child>,
    /// Its process id, for `mcp.status`.
    pub pid: Option<u32>,
    /// A sandboxed stdio server's ruleset and temp dir, kept while it runs.
    pub _sandbox: Option<crate::sandbox::Confinement>,
    /// A stdio server's tool calls, beside rmcp (none for HTTP: calls go through rmcp).
    pub direct: Option<Arc<DirectCalls>>,
}

impl Connection {
    /// A server over HTTP (streamable or legacy SSE): no process of ours, calls through rmcp.
    fn remote(service: RunningService<RoleClient, Client>) -> Connection {
        Connection {
            service,
            group: None,
            _child: None,
            pid: None,
            _sandbox: None,
            direct: None,
        }
    }
}

/// Most stderr lines kept per second from one server; the rest are counted and dropped.
const STDERR_LINES_PER_SEC: u32 = 50;
/// Longest stderr line logged (longer lines are cut).
const STDERR_LINE_MAX: usize = 2048;

/// Connects to the server `name` as one of `runtime`'s (its child, with its tokens).
pub async fn connect(
    name: &str,
    cfg: &McpServer,
    client: Client,
    runtime: &super::Runtime,
) -> anyhow::Result<Connection> {
    let connecting = async {
        match (&cfg.command, &cfg.url) {
            (Some(command), None) => {
                connect_stdio(name, command, cfg, client, &runtime.processes).await
            }
            (None, Some(url)) if cfg.legacy_sse() => connect_sse(url, cfg, client).await,
            (None, Some(url)) => connect_http(name, url, cfg, client, &runtime.oauth).await,
            _ => bail!("a server needs exactly one of command or url"),
        }
    };
    // On timeout the half-made connection is dropped, killing a stdio server's group.
    let conn = tokio::time::timeout(Duration::from_millis(cfg.startup_timeout_ms), connecting)
        .await
        .map_err(|_| {
            anyhow!(
                "did not finish connecting within startup_timeout_ms ({} ms)",
                cfg.startup_timeout_ms
            )
        })??;
    super::era::check(&conn.service)?;
    Ok(conn)
}

async fn connect_stdio(
    name: &str,
    command: &str,
    cfg: &McpServer,
    client: Client,
    processes: &Processes,
) -> anyhow::Result<Connection> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&cfg.args);
    processes.scrub_env(&mut cmd, &crate::config::env_patterns(&cfg.env_passthrough));
    cmd.envs(&cfg.env);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // Forked on the spawner thread with PDEATHSIG and the cookies, like every child.
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let sandbox = crate::sandbox::confine_server(&mut cmd, &cfg.sandbox, cfg.cwd.as_deref())?;
    let (mut child, group) = processes
        .spawn_with(cmd, |mut cmd| {
            let child = cmd.spawn()?;
            let pid = child.id();
            Ok((child, pid))
        })
        .await
        .with_context(|| format!("cannot start `{command}`"))?;
    let group = Some(group);
    let tail = StderrTail::default();
    let stderr_task = child
        .stderr
        .take()
        .map(|stderr| tokio::spawn(log_stderr(name.to_owned(), stderr, tail.clone())));
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        bail!("`{command}` started without its stdio pipes");
    };
    // If initialisation fails, `group` is dropped here and the child's group is killed.
    let startup = Duration::from_millis(cfg.startup_timeout_ms);
    let transport = StdioTransport::new(stdout, stdin).probe_bound(era::probe_bound(startup));
    let direct = transport.direct();
    let service = match era::serve(client, transport).await {
        Ok(s) => s,
        Err(e) => {
            // The real cause (`Cannot find module …`) is usually on stderr: let the reader
            // reach the end of a server that exited, then say what it said.
            if let Some(task) = stderr_task {
                let _ = tokio::time::timeout(STDERR_SETTLE, task).await;
            }
            return Err(match tail.text() {
                Some(said) => {
                    anyhow!("MCP initialisation failed: {e}; the server's stderr ends with: {said}")
                }
                None => anyhow!("MCP initialisation failed: {e} (nothing on stderr)"),
            });
        }
    };
    if let Some(meta) = era::request_meta(&service) {
        direct.set_era_meta(meta);
    }
    Ok(Connection {
        service,
        group,
        pid: child.id(),
        _child: Some(child),
        _sandbox: sandbox,
        direct: Some(direct),
    })
}

async fn connect_http(
    name: &str,
    url: &str,
    cfg: &McpServer,
    client: Client,
    oauth: &OAuth,
) -> anyhow::Result<Connection> {
    let service = match serve_http(name, url, cfg, client.clone(), oauth).await? {
        Ok(s) => s,
        // A 401/403 is not a failure to retry: the server waits for `toolhost mcp login`.
        Err(e) => match oauth.needs_auth(name, e.auth_challenge()) {
            Some(needed) => return Err(needed.into()),
            // The spec's backwards compatibility: a server that refuses the POST with 400,
            // 404 or 405 may be a legacy HTTP+SSE one at the same URL.
            None if refused_as_legacy(&e) => {
                tracing::info!(server = %name, %url, "POST initialize refused; trying the legacy HTTP+SSE transport");
                return connect_sse(url, cfg, client).await.map_err(|sse| {
                    anyhow::Error::new(e).context(format!(
                        "cannot initialise MCP session with {url} (nor as a legacy SSE server: {sse:#})"
                    ))
                });
            }
            None => {
                let cause = match unreachable(url).await {
                    Some(line) => anyhow!(line),
                    None => anyhow::Error::new(e),
                };
                return Err(cause.context(format!("cannot initialise MCP session with {url}")));
            }
        },
    };
    Ok(Connection::remote(service))
}

/// Why `url`'s address cannot be reached, in one line ("connection refused to
/// 127.0.0.1:3845"), or `None` when it can (the failure is then the server's answer).
/// rmcp's streamable-HTTP error names its transport's types and keeps no source chain to
/// the socket's error, so the cause is found by trying the address once more.
async fn unreachable(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let target = format!("{}:{}", parsed.host_str()?, parsed.port_or_known_default()?);
    let bound = Duration::from_secs(3);
    match tokio::time::timeout(bound, tokio::net::TcpStream::connect(&target)).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Some(format!("connection refused to {target}"))
        }
        Ok(Err(e)) => Some(format!("cannot connect to {target}: {e}")),
        Err(_) => Some(format!(
            "no answer from {target} within {} s",
            bound.as_secs()
        )),
    }
}

/// A session over streamable HTTP: rmcp's probe and fallback, bounded. rmcp's transport
/// sends nothing else until its first POST is answered, so a server that never answers the
/// probe (or answers it with no discover result) gets a fresh transport with the
/// `initialize` handshake alone.
async fn serve_http(
    name: &str,
    url: &str,
    cfg: &McpServer,
    client: Client,
    oauth: &OAuth,
) -> anyhow::Result<Result<RunningService<RoleClient, Client>, ClientInitializeError>> {
    let bound = era::probe_bound(Duration::from_millis(cfg.startup_timeout_ms));
    let transport = http_transport(name, url, cfg, oauth).await?;
    match tokio::time::timeout(bound, era::serve(client.clone(), transport)).await {
        // A server of the `initialize` era that refused that too: the second refusal is
        // the one that says why (and whether it is a legacy SSE server).
        Ok(Err(ClientInitializeError::LegacyFallbackFailed { fallback, .. })) => Ok(Err(*fallback)),
        // A server that answers the probe with something else (some answer every unknown
        // method with an empty result) is no server of the new era either.
        Ok(Err(ClientInitializeError::ExpectedInitResult(_))) => {
            tracing::info!(server = %name, %url, "server/discover answered with no discover result; trying initialize");
            initialize_http(name, url, cfg, client, oauth).await
        }
        Ok(probed) => Ok(probed),
        Err(_) => {
            tracing::info!(server = %name, %url, "no answer to server/discover within {} ms; trying initialize", bound.as_millis());
            initialize_http(name, url, cfg, client, oauth).await
        }
    }
}

/// The `initialize` handshake alone, on a fresh transport.
async fn initialize_http(
    name: &str,
    url: &str,
    cfg: &McpServer,
    client: Client,
    oauth: &OAuth,
) -> anyhow::Result<Result<RunningService<RoleClient, Client>, ClientInitializeError>> {
    let transport = http_transport(name, url, cfg, oauth).await?;
    Ok(client.serve(transport).await)
}

/// A legacy HTTP+SSE server (`"type": "sse"`, or the fallback of a refused POST).
async fn connect_sse(url: &str, cfg: &McpServer, client: Client) -> anyhow::Result<Connection> {
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;
    let halves = super::sse::connect(http, url, header_map(cfg)?).await?;
    let service = client.serve(halves).await.map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot initialise MCP session with {url}"))
    })?;
    Ok(Connection::remote(service))
}

/// Whether initialising over streamable HTTP failed on a 400, 404 or 405 answer to the
/// POST (rmcp reports those as `unexpected server response: HTTP <status> …`).
fn refused_as_legacy(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(current) = source {
        let text = current.to_string();
        if ["400", "404", "405"]
            .iter()
            .any(|code| text.contains(&format!("unexpected server response: HTTP {code} ")))
        {
            return true;
        }
        source = current.source();
    }
    false
}

/// The config's `headers` in typed form (validation refused the ones that do not fit).
fn header_map(cfg: &McpServer) -> anyhow::Result<http::HeaderMap> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &cfg.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .with_context(|| format!("bad header name {k:?}"))?;
        let value =
            http::HeaderValue::from_str(v).with_context(|| format!("bad value for header {k}"))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

async fn http_transport(
    name: &str,
    url: &str,
    cfg: &McpServer,
    oauth: &OAuth,
) -> anyhow::Result<StreamableHttpClientTransport<AuthClient<reqwest::Client>>> {
    let headers: HashMap<_, _> = header_map(cfg)?
        .into_iter()
        .filter_map(|(k, v)| Some((k?, v)))
        .collect();
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .custom_headers(headers)
        .reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(
        oauth.http_client(name, url, cfg).await?,
        config,
    ))
}

/// How long a failed start waits for the rest of the server's stderr.
const STDERR_SETTLE: Duration = Duration::from_secs(1);
/// Lines of a server's stderr kept for a failed start's error (stack frames skipped).
const STDERR_TAIL_LINES: usize = 10;

/// The last lines a server wrote to stderr, for the error of a failed start.
#[derive(Clone, Default)]
struct StderrTail(std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &str) {
        let line = line.trim();
        // Blank lines and stack frames (`at foo (file:1:2)`) crowd out the cause.
        if line.is_empty() || line.starts_with("at ") {
            return;
        }
        let mut t = crate::lock(&self.0);
        if t.len() == STDERR_TAIL_LINES {
            t.pop_front();
        }
        t.push_back(line.to_owned());
    }

    fn text(&self) -> Option<String> {
        let t = crate::lock(&self.0);
        (!t.is_empty()).then(|| t.iter().map(String::as_str).collect::<Vec<_>>().join(" | "))
    }
}

/// Forwards a server's stderr to our log, rate-limited and line-bounded, so a chatty or
/// hostile server cannot make us buffer without bound; keeps the last lines in `tail`.
async fn log_stderr(name: String, stderr: tokio::process::ChildStderr, tail: StderrTail) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::with_capacity(256);
    let mut window = tokio::time::Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    loop {
        match read_line_bounded(&mut reader, STDERR_LINE_MAX, &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if window.elapsed() >= Duration::from_secs(1) {
            if dropped > 0 {
                tracing::warn!(server = %name, dropped, "MCP server stderr lines dropped (rate limit)");
            }
            window = tokio::time::Instant::now();
            logged = 0;
            dropped = 0;
        }
        let line = String::from_utf8_lossy(&buf);
        tail.push(&line);
        if logged >= STDERR_LINES_PER_SEC {
            dropped += 1;
            continue;
        }
        logged += 1;
        tracing::info!(server = %name, "stderr: {}", line.trim_end());
    }
}
