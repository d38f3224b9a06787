//! Opening a connection to one MCP server: a stdio child in its own process group (spawned
//! through the process module, so it dies with the daemon), or a streamable HTTP endpoint.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rmcp::model::ProtocolVersion;
use rmcp::service::RunningService;
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tokio::io::BufReader;

use crate::bounded_lines::read_line_bounded;

use super::auth;
use super::client::Client;
use super::oversized::OversizedReplies;
use crate::config::McpServer;
use crate::process::{self, GroupGuard};

/// A live connection; dropping it closes the session and kills a stdio server's group.
pub struct Connection {
    pub service: RunningService<RoleClient, Client>,
    /// The stdio server's process group (none for HTTP).
    pub group: Option<GroupGuard>,
    /// The stdio server itself: killed and reaped when the connection goes.
    pub _child: Option<tokio::process::Child>,
}

/// Most stderr lines kept per second from one server; the rest are counted and dropped.
const STDERR_LINES_PER_SEC: u32 = 50;
/// Longest stderr line logged (longer lines are cut).
const STDERR_LINE_MAX: usize = 2048;

pub async fn connect(name: &str, cfg: &McpServer, client: Client) -> anyhow::Result<Connection> {
    let connecting = async {
        match (&cfg.command, &cfg.url) {
            (Some(command), None) => connect_stdio(name, command, cfg, client).await,
            (None, Some(url)) => connect_http(name, url, cfg, client).await,
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
    check_version(&conn.service)?;
    Ok(conn)
}

/// Version negotiation, client side: we offer the newest `initialize`-based revision and
/// the server may answer with an older one; we accept any revision we know that still has
/// `initialize`, and refuse anything else rather than talk a protocol we cannot follow.
fn check_version(service: &RunningService<RoleClient, Client>) -> anyhow::Result<()> {
    let Some(info) = service.peer_info() else {
        bail!("the server sent no initialize result");
    };
    let version = &info.protocol_version;
    if ProtocolVersion::KNOWN_VERSIONS.contains(version) && version.has_initialize() {
        Ok(())
    } else {
        bail!("the server chose protocol version {version}, which toolhost does not support")
    }
}

async fn connect_stdio(
    name: &str,
    command: &str,
    cfg: &McpServer,
    client: Client,
) -> anyhow::Result<Connection> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&cfg.args);
    process::scrub_env(&mut cmd);
    cmd.envs(&cfg.env);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // Forked on the spawner thread with PDEATHSIG and the cookies, like every child.
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, group) = process::spawn_with(cmd, |mut cmd| {
        let child = cmd.spawn()?;
        let pid = child.id();
        Ok((child, pid))
    })
    .await
    .with_context(|| format!("cannot start `{command}`"))?;
    let group = Some(group);
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_stderr(name.to_owned(), stderr));
    }
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        bail!("`{command}` started without its stdio pipes");
    };
    // If initialisation fails, `group` is dropped here and the child's group is killed.
    let service = client
        .serve((OversizedReplies::new(stdout), stdin))
        .await
        .context("MCP initialisation failed")?;
    Ok(Connection {
        service,
        group,
        _child: Some(child),
    })
}

async fn connect_http(
    name: &str,
    url: &str,
    cfg: &McpServer,
    client: Client,
) -> anyhow::Result<Connection> {
    let service = match client.serve(http_transport(name, url, cfg).await?).await {
        Ok(s) => s,
        // A 401/403 is not a failure to retry: the server waits for `toolhost mcp login`.
        Err(e) => match auth::needs_auth(name, e.auth_challenge()) {
            Some(needed) => return Err(needed.into()),
            None => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot initialise MCP session with {url}")))
            }
        },
    };
    Ok(Connection {
        service,
        group: None,
        _child: None,
    })
}

async fn http_transport(
    name: &str,
    url: &str,
    cfg: &McpServer,
) -> anyhow::Result<StreamableHttpClientTransport<AuthClient<reqwest::Client>>> {
    let mut headers = HashMap::new();
    for (k, v) in &cfg.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .with_context(|| format!("bad header name {k:?}"))?;
        let value =
            http::HeaderValue::from_str(v).with_context(|| format!("bad value for header {k}"))?;
        headers.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .custom_headers(headers)
        .reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(
        auth::http_client(name, url, cfg).await?,
        config,
    ))
}

/// Forwards a server's stderr to our log, rate-limited and line-bounded, so a chatty or
/// hostile server cannot make us buffer without bound.
async fn log_stderr(name: String, stderr: tokio::process::ChildStderr) {
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
        if logged >= STDERR_LINES_PER_SEC {
            dropped += 1;
            continue;
        }
        logged += 1;
        let line = String::from_utf8_lossy(&buf);
        tracing::info!(server = %name, "stderr: {}", line.trim_end());
    }
}
