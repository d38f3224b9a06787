//! One MCP server tool as a host [`Tool`]: forwards calls to the server's live connection
//! and maps MCP results onto our result shape.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions};
use rmcp::RoleClient;
use serde_json::{Map, Value};

use super::server::Server;
use crate::protocol::{ContentBlock, ErrorKind, Progress};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolSpec, ToolUpdate};

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
        Box::pin(call_upstream(
            self.server.clone(),
            self.remote_name.clone(),
            args,
            ctx,
        ))
    }
}

/// A request sent and not yet answered: if the call's future is dropped while it waits
/// (the pipeline gave up on it), the server is told to stop (`notifications/cancelled`)
/// from a task of its own. So a sent request is always either answered or cancelled
/// upstream, without running every call in a task of its own (a spawn and a wake-up
/// more per call).
struct Unanswered {
    peer: Peer<RoleClient>,
    id: RequestId,
    armed: bool,
}

impl Unanswered {
    /// The request was answered, or the call cancels it itself.
    fn settle(&mut self) {
        self.armed = false;
    }

    /// Settles it by telling the server to stop.
    async fn cancel(&mut self, reason: &str) {
        self.settle();
        cancel_upstream(&self.peer, self.id.clone(), reason).await;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (peer, id) = (self.peer.clone(), self.id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime
                .spawn(async move { cancel_upstream(&peer, id, "abandoned by the caller").await });
        }
    }
}

async fn call_upstream(
    server: Arc<Server>,
    remote_name: String,
    args: Map<String, Value>,
    ctx: CallContext,
) -> ToolResult {
    let cancelled = || ToolError::new(ErrorKind::Cancelled, "the call was cancelled");
    let peer = server.peer_for_call()?;
    let _slot = tokio::select! {
        slot = server.acquire_slot() => slot?,
        _ = ctx.cancel.cancelled() => return Err(cancelled()),
    };
    // The idle timeout (reset by progress) is kept here rather than in rmcp's request
    // options: one timer in the loop below costs less than rmcp's per-request watchers.
    let idle = Duration::from_millis(server.config().timeout_ms);
    let opts = PeerRequestOptions::no_options();
    let params = CallToolRequestParams::new(remote_name).with_arguments(args);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, opts)
        .await
        .map_err(|e| server.call_error(e))?;
    let mut unanswered = Unanswered {
        peer,
        id: handle.id.clone(),
        armed: true,
    };
    let mut progress = server
        .progress()
        .subscribe(handle.progress_token.clone())
        .await;
    let response = handle.await_response();
    let idle_timer = tokio::time::sleep(idle);
    tokio::pin!(response, idle_timer);
    let outcome = loop {
        tokio::select! {
            r = &mut response => break r,
            Some(p) = progress.next() => {
                idle_timer.as_mut().reset(tokio::time::Instant::now() + idle);
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
            _ = &mut idle_timer => {
                unanswered.cancel("timeout").await;
                return Err(ToolError::new(
                    ErrorKind::Timeout,
                    format!("MCP server '{}' did not answer within {} ms (timeout_ms, reset by progress)", server.name(), idle.as_millis()),
                ));
            }
            _ = ctx.cancel.cancelled() => {
                unanswered.cancel("cancelled by the caller").await;
                return Err(cancelled());
            }
        }
    };
    unanswered.settle();
    match outcome {
        // A stdio server's answer, parsed once by our transport.
        Ok(ServerResult::CustomResult(r)) if r.0.is_object() => map_result(r.0),
        // An HTTP server's answer, typed by rmcp.
        Ok(ServerResult::CallToolResult(r)) => {
            map_result(serde_json::to_value(r).unwrap_or(Value::Null))
        }
        Ok(other) => Err(ToolError::failed(format!(
            "MCP server '{}' answered tools/call with an unexpected {}",
            server.name(),
            variant_name(&other)
        ))),
        Err(e) => Err(server.call_error(e)),
    }
}

/// Tells the server to stop working on request `id` (`notifications/cancelled`).
async fn cancel_upstream(peer: &Peer<RoleClient>, id: RequestId, reason: &str) {
    let note = CancelledNotification::new(CancelledNotificationParam::new(
        Some(id),
        Some(reason.to_owned()),
    ));
    let _ = peer.send_notification(note.into()).await;
}

fn variant_name(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        })
        .unwrap_or_default()
}

/// Maps an MCP `CallToolResult` (as JSON) onto our result: text joined into `output`,
/// `structuredContent` kept as `structured_content`, the first image as the control
/// fields `_multimodal`/`_image_data_url`, `isError` as a `failed` result. When there is
/// more than text (images, audio, resources), the blocks are also kept whole as `content`,
/// as a custom tool's are, so MCP frontends (the facade) get them as they were.
pub fn map_result(r: Value) -> ToolResult {
    let rich = r["content"]
        .as_array()
        .is_some_and(|blocks| blocks.iter().any(|b| b["type"] != "text"));
    let mut texts = Vec::new();
    let mut image: Option<String> = None;
    for block in r["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
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
    }
    let output = texts.join("\n");
    let mut fields = Map::new();
    if let Some(s) = r.get("structuredContent").filter(|v| !v.is_null()) {
        fields.insert("structured_content".into(), s.clone());
    }
    if r["isError"].as_bool() == Some(true) {
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
        fields.insert("content".into(), r["content"].clone());
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
}
