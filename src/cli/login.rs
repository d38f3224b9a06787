//! `toolhost mcp login|logout SERVER`: the user-facing half of OAuth sign-in.
//!
//! The CLI, not the daemon, talks to the user: it listens on a random loopback port for
//! the browser's redirect, prints the authorization URL (and opens it), and hands the
//! redirect URL to the daemon, which exchanges the code and keeps the tokens. The CLI
//! never sees a token, and a daemon under systemd needs no browser or terminal.

use super::render::{say, say_err};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::{Client, ClientError};
use crate::protocol::*;

/// How long the user has to finish signing in in the browser.
const LOGIN_WAIT: Duration = Duration::from_secs(300);
/// Largest redirect request we read (the URL carries a code and a state).
const MAX_REQUEST: usize = 16 * 1024;

pub async fn login(client: &Client, name: &str) -> Result<ExitCode, ClientError> {
    let listener = match TcpListener::bind(("127.0.0.1", 0)).await {
        Ok(l) => l,
        Err(e) => {
            say_err!("toolhost: cannot listen on 127.0.0.1 for the sign-in redirect: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let started: McpLoginResult = client
        .call(
            method::MCP_LOGIN,
            &McpLoginParams {
                name: name.to_owned(),
                redirect_uri: Some(redirect_uri),
                callback_url: None,
            },
        )
        .await?;
    let Some(url) = started.authorization_url else {
        say!("'{name}' signs in by itself (client credentials); reconnecting it.");
        return Ok(ExitCode::SUCCESS);
    };
    say!("Open this URL to sign in to '{name}':\n\n  {url}\n");
    open_browser(&url);
    let callback = match tokio::time::timeout(LOGIN_WAIT, wait_for_redirect(&listener, port)).await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            say_err!("toolhost: sign-in failed: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(_) => {
            say_err!(
                "toolhost: no sign-in within {} s; run the command again",
                LOGIN_WAIT.as_secs()
            );
            return Ok(ExitCode::from(1));
        }
    };
    let _: McpLoginResult = client
        .call(
            method::MCP_LOGIN,
            &McpLoginParams {
                name: name.to_owned(),
                redirect_uri: None,
                callback_url: Some(callback),
            },
        )
        .await?;
    say!("Signed in to '{name}'; it is reconnecting.");
    Ok(ExitCode::SUCCESS)
}

pub async fn logout(client: &Client, name: &str) -> Result<ExitCode, ClientError> {
    let r: OkResult = client
        .call(
            method::MCP_LOGOUT,
            &McpRemoveParams {
                name: name.to_owned(),
            },
        )
        .await?;
    if r.ok {
        say!("Signed out of '{name}' (its tokens are deleted).");
    } else {
        say!("'{name}' had no stored tokens.");
    }
    Ok(ExitCode::SUCCESS)
}

/// `$BROWSER` when set (a command, maybe with arguments), else `xdg-open` when there is a
/// display; otherwise the printed URL is all there is.
pub(super) fn open_browser(url: &str) {
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty());
    let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    let command: Vec<String> = match browser {
        Some(b) => b.split_whitespace().map(str::to_owned).collect(),
        None if has_display => vec!["xdg-open".to_owned()],
        None => return,
    };
    let Some((program, args)) = command.split_first() else {
        return;
    };
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        say_err!("toolhost: cannot open a browser with `{program}`: {e}");
    }
}

/// Serves the loopback listener until the browser arrives at `/callback`; returns the
/// full redirect URL (or the authorization server's error).
async fn wait_for_redirect(listener: &TcpListener, port: u16) -> Result<String, String> {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(target) = read_request_target(&mut stream).await else {
            continue;
        };
        if !target.starts_with("/callback") {
            respond(&mut stream, "404 Not Found", "Not the sign-in callback.").await;
            continue;
        }
        let url = format!("http://127.0.0.1:{port}{target}");
        let error = reqwest::Url::parse(&url).ok().and_then(|u| {
            let q: Vec<(String, String)> = u.query_pairs().into_owned().collect();
            let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            get("error").map(|e| match get("error_description") {
                Some(d) => format!("{e}: {d}"),
                None => e,
            })
        });
        if let Some(e) = error {
            respond(&mut stream, "200 OK", "Sign-in failed; see the terminal.").await;
            return Err(format!("the authorization server answered {e}"));
        }
        respond(
            &mut stream,
            "200 OK",
            "Signed in to toolhost. You can close this tab.",
        )
        .await;
        return Ok(url);
    }
}

/// The target of a `GET` request line, read within a size and time bound.
async fn read_request_target(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next()?.split_whitespace();
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_owned)
}

async fn respond(stream: &mut TcpStream, status: &str, text: &str) {
    let body = format!("<!doctype html><title>toolhost</title><p>{text}</p>");
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
