//! The legacy HTTP+SSE transport of MCP 2024-11-05, client side (rmcp 3.11 has only
//! streamable HTTP). The client opens `GET <url>` as an event stream; the server's first
//! `endpoint` event names the URL to POST messages to, and every server message arrives as
//! a `message` event on that stream. One connection is one stream: when it ends, the
//! transport ends and the supervisor reconnects.

use anyhow::{anyhow, bail, Context};
use futures::{Sink, Stream, StreamExt};
use http::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::RoleClient;
use sse_stream::SseStream;
use tokio::sync::mpsc;

/// Messages read ahead of rmcp at most; past it the stream is not read (back-pressure).
const QUEUE: usize = 64;

/// The two halves rmcp serves a client over (`IntoTransport` for a sink and a stream).
pub type Halves = (
    std::pin::Pin<Box<dyn Sink<TxJsonRpcMessage<RoleClient>, Error = std::io::Error> + Send>>,
    std::pin::Pin<Box<dyn Stream<Item = RxJsonRpcMessage<RoleClient>> + Send>>,
);

/// Opens the event stream at `url` and waits for its `endpoint` event (the caller bounds
/// the wait with the server's startup timeout). `headers` go with every request.
pub async fn connect(
    http: reqwest::Client,
    url: &str,
    headers: HeaderMap,
) -> anyhow::Result<Halves> {
    let base = url::Url::parse(url).with_context(|| format!("bad url {url:?}"))?;
    let response = http
        .get(base.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("GET {url} answered HTTP {status}, not an SSE stream");
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("text/event-stream") {
        bail!("GET {url} answered {content_type:?}, not text/event-stream");
    }
    let mut events = SseStream::from_bytes_stream(response.bytes_stream());
    let endpoint = loop {
        match events.next().await {
            Some(Ok(e)) if e.event.as_deref() == Some("endpoint") => {
                break endpoint_url(&base, e.data.as_deref().unwrap_or(""))?
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => bail!("the SSE stream of {url} broke before its endpoint event: {e}"),
            None => bail!("the SSE stream of {url} ended before its endpoint event"),
        }
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let server = url.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            () = forward(events, &tx, &server) => {}
            // rmcp dropped the transport: stop reading (the stream closes with the task).
            () = tx.closed() => {}
        }
    });
    let incoming =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let outgoing = futures::sink::unfold(
        (http, endpoint, headers),
        |(http, endpoint, headers), message: TxJsonRpcMessage<RoleClient>| async move {
            post(&http, &endpoint, &headers, &message).await?;
            Ok::<_, std::io::Error>((http, endpoint, headers))
        },
    );
    Ok((Box::pin(outgoing), Box::pin(incoming)))
}

/// The POST URL of an `endpoint` event, resolved against the stream's URL. It must stay on
/// the stream's origin: a server cannot send the host's messages (and headers, which may
/// carry a token) elsewhere.
fn endpoint_url(base: &url::Url, data: &str) -> anyhow::Result<url::Url> {
    let endpoint = base
        .join(data.trim())
        .with_context(|| format!("bad endpoint {data:?}"))?;
    if endpoint.origin() != base.origin() {
        bail!("the endpoint {endpoint} is not on the origin of {base}; refused");
    }
    Ok(endpoint)
}

/// Hands every `message` event to rmcp until the stream ends. A message that is not
/// JSON-RPC is logged and skipped, as the stdio transport does with a bad line.
async fn forward<S, E>(mut events: S, tx: &mpsc::Sender<RxJsonRpcMessage<RoleClient>>, server: &str)
where
    S: Stream<Item = Result<sse_stream::Sse, E>> + Unpin,
    E: std::fmt::Display,
{
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(%server, error = %e, "the SSE stream broke");
                return;
            }
        };
        if !matches!(event.event.as_deref(), None | Some("message")) {
            continue;
        }
        let Some(data) = event.data else { continue };
        match serde_json::from_str(&data) {
            Ok(message) => {
                if tx.send(message).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(%server, error = %e, "an SSE message that is not JSON-RPC was skipped")
            }
        }
    }
}

async fn post(
    http: &reqwest::Client,
    endpoint: &url::Url,
    headers: &HeaderMap,
    message: &TxJsonRpcMessage<RoleClient>,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let response = http
        .post(endpoint.clone())
        .headers(headers.clone())
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| std::io::Error::other(anyhow!("POST {endpoint}: {e}")))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "POST {endpoint} answered HTTP {status}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_resolved_and_kept_on_the_streams_origin() {
        let base = url::Url::parse("http://127.0.0.1:9/sse").unwrap();
        assert_eq!(
            endpoint_url(&base, "/messages?sessionId=a b")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/messages?sessionId=a%20b"
        );
        assert!(endpoint_url(&base, "http://evil.example/messages").is_err());
        assert!(endpoint_url(&base, "http://127.0.0.1:10/m").is_err());
    }
}
