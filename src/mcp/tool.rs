//! One MCP server tool as a host [`Tool`]: forwards calls to the server's live connection
//! and maps MCP results onto our result shape.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, NumberOrString, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use rmcp::RoleClient;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::server::{Link, Server};
use super::stdio::DirectCalls;
use crate::catalog::ToolSpec;
use crate::protocol::{ContentBlock, ErrorKind, Progress};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolUpdate};

pub struct McpTool {
    pub spec: ToolSpec,
    pub remote_name: String,
    pub server: Arc<Server>,
    /// The server's `title` (else its `annotations.title`), kept for the `mcp` list format.
    pub title: Option<String>,
    /// The server's `outputSchema`, kept for the `mcp` list format.
    pub output_schema: Option<Value>,
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(call_upstream(self, args, ctx))
    }

    fn keeps_deadline(&self) -> bool {
        true
    }
}

/// A `tools/call` sent, by whichever way the connection offers.
enum Sent {
    /// Straight to a stdio server's pipe (see `stdio.rs`).
    Direct {
        calls: Arc<DirectCalls>,
        id: Arc<str>,
    },
    /// Through rmcp (HTTP servers).
    Peer {
        peer: Peer<RoleClient>,
        id: RequestId,
    },
}

impl Sent {
    /// Tells the server to stop working on the call (`notifications/cancelled`).
    async fn cancel(&self, reason: &str) {
        match self {
            Sent::Direct { calls, id } => calls.cancel(id, reason).await,
            Sent::Peer { peer, id } => {
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id.clone()),
                    Some(reason.to_owned()),
                ));
                let _ = peer.send_notification(note.into()).await;
            }
        }
    }
}

/// A request sent and not yet answered: if the call's future is dropped while it waits
/// (the pipeline gave up on it), the server is told to stop from a task of its own. So a
/// sent request is always either answered or cancelled upstream, without running every
/// call in a task of its own (a spawn and a wake-up more per call).
struct Unanswered {
    sent: Option<Sent>,
}

impl Unanswered {
    /// The request was answered.
    fn settle(&mut self) {
        self.sent = None;
    }

    /// Settles it by telling the server to stop, from a task of its own: a server that no
    /// longer reads its input must not hold up the end of the call.
    fn cancel(&mut self, reason: &'static str) {
        let Some(sent) = self.sent.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { sent.cancel(reason).await });
        }
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.cancel("abandoned by the caller");
    }
}

/// A call on its way: what was sent, the token its progress comes under, and its answer
/// (the result as JSON).
struct Outgoing {
    sent: Sent,
    progress: ProgressToken,
    answer: BoxFuture<'static, Result<Value, ServiceError>>,
}

/// Sends the call, by the direct way when the connection has one.
async fn send_call(
    server: &Server,
    link: Link,
    remote_name: String,
    args: Map<String, Value>,
) -> Result<Outgoing, ToolError> {
    if let Some(calls) = link.direct {
        let call = calls.call(&remote_name, &args).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                server.call_error(ServiceError::TransportClosed)
            } else {
                ToolError::new(
                    ErrorKind::Unavailable,
                    format!("MCP server '{}' cannot take the call: {e}", server.name()),
                )
            }
        })?;
        let progress = ProgressToken(NumberOrString::String(call.id.clone()));
        let answer = async move {
            match call.answer.await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => Err(ServiceError::McpError(e)),
                Err(_) => Err(ServiceError::TransportClosed),
            }
        };
        return Ok(Outgoing {
            sent: Sent::Direct { calls, id: call.id },
            progress,
            answer: answer.boxed(),
        });
    }
    let params = CallToolRequestParams::new(remote_name).with_arguments(args);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = link
        .peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| server.call_error(e))?;
    let sent = Sent::Peer {
        peer: link.peer,
        id: handle.id.clone(),
    };
    let progress = handle.progress_token.clone();
    let answer = async move {
        match handle.await_response().await? {
            ServerResult::CallToolResult(r) => {
                serde_json::to_value(r).map_err(|_| ServiceError::UnexpectedResponse)
            }
            ServerResult::CustomResult(r) => Ok(r.0),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    };
    Ok(Outgoing {
        sent,
        progress,
        answer: answer.boxed(),
    })
}

async fn call_upstream(tool: &McpTool, args: Map<String, Value>, ctx: CallContext) -> ToolResult {
    let server = &tool.server;
    let name = tool.spec.name.as_str();
    // The call's deadline and the server's idle timeout share one timer (see
    // `Tool::keeps_deadline`).
    let deadline = ctx
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let timed_out = || ToolError::timed_out(name, ctx.timeout_ms.unwrap_or_default());
    // Not connected: say so at once rather than after waiting for a slot.
    server.link_for_call()?;
    let sending = async {
        let slot = server.acquire_slot().await?;
        // The connection now (the wait for a slot may have outlived the one seen above).
        let link = server.link_for_call()?;
        let outgoing = send_call(server, link, tool.remote_name.clone(), args).await?;
        Ok::<_, ToolError>((slot, outgoing))
    };
    let (
        _slot,
        Outgoing {
            sent,
            progress,
            answer: response,
        },
    ) = tokio::select! {
        // A free slot and a pipe with room do not wait: then the deadline's timer is not
        // armed here.
        biased;
        sending = sending => sending?,
        _ = ctx.cancel.cancelled() => return Err(ToolError::cancelled(name)),
        _ = sleep_until(deadline) => return Err(timed_out()),
    };
    // The idle timeout (reset by progress) is kept here rather than in rmcp's request
    // options: one timer in the loop below costs less than rmcp's per-request watchers.
    let idle = Duration::from_millis(server.config().timeout_ms);
    let wake_at = |now: Instant| deadline.map_or(now + idle, |d| d.min(now + idle));
    let mut unanswered = Unanswered { sent: Some(sent) };
    let mut progress = server.progress().subscribe(progress).await;
    let timer = tokio::time::sleep_until(wake_at(Instant::now()));
    tokio::pin!(response, timer);
    let outcome = loop {
        tokio::select! {
            r = &mut response => break r,
            Some(p) = progress.next() => {
                timer.as_mut().reset(wake_at(Instant::now()));
                let text = p.message.clone().unwrap_or_else(|| match p.total {
                    Some(t) => format!("progress {}/{}", p.progress, t),
                    None => format!("progress {}", p.progress),
                });
                ctx.updates.send(ToolUpdate {
                    content: vec![ContentBlock::text(text)],
                    details: None,
                    progress: Some(Progress { progress: p.progress, total: p.total, message: p.message.clone() }),
                });
            }
            _ = &mut timer => {
                unanswered.cancel("timeout");
                return Err(if deadline == Some(timer.deadline()) {
                    timed_out()
                } else {
                    ToolError::new(
                        ErrorKind::Timeout,
                        format!("MCP server '{}' did not answer within {} ms (timeout_ms, reset by progress)", server.name(), idle.as_millis()),
                    )
                });
            }
            _ = ctx.cancel.cancelled() => {
                unanswered.cancel("cancelled by the caller");
                return Err(ToolError::cancelled(name));
            }
        }
    };
    unanswered.settle();
    match outcome {
        Ok(Value::Object(result)) => map_result(result),
        Ok(_) | Err(ServiceError::UnexpectedResponse) => Err(ToolError::failed(format!(
            "MCP server '{}' answered tools/call with something that is not a tool result",
            server.name()
        ))),
        Err(e) => Err(server.call_error(e)),
    }
}

/// Sleeps until `deadline`; without one, never wakes.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Maps an MCP `CallToolResult` (as JSON) onto our result: text joined into `output`,
/// `structuredContent` kept as `structured_content`, the first image as the control
/// fields `_multimodal`/`_image_data_url`, `isError` as a `failed` result. When there is
/// more than text (images, audio, resources), the blocks are also kept whole as `content`,
/// as a custom tool's are, so MCP frontends (the facade) get them as they were.
pub fn map_result(mut r: Map<String, Value>) -> ToolResult {
    let content = match r.remove("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    let rich = content.iter().any(|b| b["type"] != "text");
    // Text is moved out of the answer, not copied: a tool's output can be large. When the
    // blocks are kept whole (rich), they are read in place instead.
    let mut texts: Vec<String> = Vec::new();
    let mut image: Option<String> = None;
    let take_text = |block: &mut Value| match block.get_mut("text").map(Value::take) {
        Some(Value::String(t)) => t,
        _ => String::new(),
    };
    let mut kept = Vec::new();
    for mut block in content {
        match block["type"].as_str() {
            Some("text") if !rich => texts.push(take_text(&mut block)),
            Some("text") => texts.push(block["text"].as_str().unwrap_or("").to_owned()),
            Some("image") => {
                let mime = block["mimeType"]
                    .as_str()
                    .unwrap_or("application/octet-stream");
                let data = block["data"].as_str().unwrap_or("");
                texts.push(format!("[image: {mime}, {} bytes base64]", data.len()));
                if image.is_none() {
                    image = Some(format!("data:{mime};base64,{data}"));
                }
            }
            Some("resource") => {
                let res = &block["resource"];
                match res["text"].as_str() {
                    Some(t) => texts.push(t.to_owned()),
                    None => texts.push(format!(
                        "[resource: {}]",
                        res["uri"].as_str().unwrap_or("?")
                    )),
                }
            }
            Some("resource_link") => texts.push(format!(
                "[resource link: {}]",
                block["uri"].as_str().unwrap_or("?")
            )),
            Some(other) => texts.push(format!("[{other} content]")),
            None => {}
        }
        if rich {
            kept.push(block);
        }
    }
    let output = match texts.len() {
        1 => texts.pop().unwrap_or_default(),
        _ => texts.join("\n"),
    };
    let mut fields = Map::new();
    if let Some(s) = r.remove("structuredContent").filter(|v| !v.is_null()) {
        fields.insert("structured_content".into(), s);
    }
    if r.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if output.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            output
        };
        let mut e = ToolError::failed(message);
        e.fields = fields;
        return Err(e);
    }
    fields.insert("output".into(), Value::String(output));
    if rich {
        fields.insert("content".into(), Value::Array(kept));
    }
    if let Some(url) = image {
        fields.insert("_multimodal".into(), Value::Bool(true));
        fields.insert("_image_data_url".into(), Value::String(url));
    }
    Ok(fields)
}

/// Counts a call in flight; released on drop.
pub struct Slot {
    pub(super) server: Arc<Server>,
    pub(super) _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.server.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The result object of `v`, mapped.
    fn map_result(v: Value) -> ToolResult {
        match v {
            Value::Object(r) => super::map_result(r),
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn maps_text_structured_image_and_errors() {
        let ok = map_result(json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "structuredContent": {"n": 1}})).unwrap();
        assert_eq!(
            Value::Object(ok),
            json!({"structured_content": {"n": 1}, "output": "a\nb"})
        );
        let img = map_result(
            json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
        )
        .unwrap();
        assert_eq!(img["_image_data_url"], "data:image/png;base64,AAAA");
        assert_eq!(img["_multimodal"], true);
        assert_eq!(img["output"], "[image: image/png, 4 bytes base64]");
        assert_eq!(
            img["content"],
            json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}])
        );
        let err =
            map_result(json!({"content": [{"type": "text", "text": "boom"}], "isError": true}))
                .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Failed);
        assert_eq!(err.message, "boom");
    }

    #[test]
    fn one_text_block_is_the_output_and_mixed_blocks_are_kept_whole() {
        let big = "x".repeat(100_000);
        let ok = map_result(json!({"content": [{"type": "text", "text": big}]})).unwrap();
        assert_eq!(ok["output"], big.as_str());
        assert!(ok.get("content").is_none(), "{ok:?}");
        let blocks = json!([
            {"type": "text", "text": "before"},
            {"type": "resource_link", "uri": "file:///a"},
            {"text": "no type"}
        ]);
        let mixed = map_result(json!({"content": blocks})).unwrap();
        assert_eq!(mixed["output"], "before\n[resource link: file:///a]");
        assert_eq!(mixed["content"], blocks);
    }
}
