//! One MCP server tool as a host [`Tool`]: forwards calls to the server's live connection
//! and maps MCP results onto our result shape.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ClientRequest, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use rmcp::RoleClient;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::client::Note;
use super::mrtr::{self, Retry, MAX_ROUNDS};
use super::naming::public_name;
use super::origin::InFlight;
use super::server::{Link, Server};
use super::stdio::{DirectCalls, RawResult};
use crate::catalog::{ToolSource, ToolSpec};
use crate::config::McpServer;
use crate::protocol::{
    blocks_text, first_image, ApprovalClass, ContentBlock, Control, ErrorKind, Progress, ToolOutput,
};
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

impl McpTool {
    /// The host tool for `t`, one entry of `server`'s `tools/list`, under `cfg` (naming,
    /// approval classes, trusted annotations).
    pub(super) fn new(server: &Arc<Server>, cfg: &McpServer, t: &rmcp::model::Tool) -> McpTool {
        let remote_name = t.name.to_string();
        let mut schema = t.input_schema.as_ref().clone();
        if schema.is_empty() {
            schema.insert("type".into(), json!("object"));
        }
        schema.entry("type").or_insert_with(|| json!("object"));
        if schema.get("type") == Some(&json!("object")) {
            schema.entry("properties").or_insert_with(|| json!({}));
        }
        let parameters = Value::Object(schema);
        let trusted_read_only = cfg.trust_annotations
            && t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
        let annotations = t
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok());
        let approval = cfg
            .approval
            .get(&remote_name)
            .copied()
            .or(trusted_read_only.then_some(ApprovalClass::ReadOnly));
        McpTool {
            spec: ToolSpec {
                name: public_name(server.name(), cfg.prefix, &remote_name),
                description: t.description.as_deref().unwrap_or("").to_owned(),
                parameters,
                approval,
                source: ToolSource::Mcp {
                    server: server.name().to_owned(),
                    remote_name: remote_name.clone(),
                },
                hidden: false,
                deferrable: false,
                annotations,
            },
            title: t
                .title
                .clone()
                .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone())),
            output_schema: t
                .output_schema
                .as_ref()
                .map(|s| Value::Object(s.as_ref().clone())),
            remote_name,
            server: server.clone(),
        }
    }
}

/// Whether the config serves the server's tool `name` (`include_tools`, `exclude_tools`).
pub(super) fn serves(cfg: &McpServer, name: &str) -> bool {
    (cfg.include_tools.is_empty() || cfg.include_tools.iter().any(|t| t == name))
        && !cfg.exclude_tools.iter().any(|t| t == name)
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
pub(super) struct Unanswered {
    sent: Option<Sent>,
}

impl Unanswered {
    /// A request sent through rmcp to `peer` as `id`.
    pub(super) fn peer(peer: Peer<RoleClient>, id: RequestId) -> Unanswered {
        Unanswered {
            sent: Some(Sent::Peer { peer, id }),
        }
    }

    /// The request was answered.
    pub(super) fn settle(&mut self) {
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

/// A call on its way: what was sent, its notifications (progress, log messages), and its
/// answer (the result as JSON).
struct Outgoing {
    sent: Sent,
    notes: BoxStream<'static, Note>,
    answer: BoxFuture<'static, Result<RawResult, ServiceError>>,
}

/// Sends the call, by the direct way when the connection has one.
async fn send_call(
    server: &Server,
    link: Link,
    remote_name: &str,
    args: &Map<String, Value>,
    retry: &Retry,
    in_flight: &InFlight,
    capabilities: &ClientCapabilities,
) -> Result<Outgoing, ToolError> {
    if let Some(calls) = link.direct {
        let declared = serde_json::to_value(capabilities).unwrap_or_default();
        let call = calls
            .call(remote_name, args, &retry.params(), &declared)
            .await
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    server.call_error(ServiceError::TransportClosed)
                } else {
                    ToolError::new(
                        ErrorKind::Unavailable,
                        format!("MCP server '{}' cannot take the call: {e}", server.name()),
                    )
                }
            })?;
        let mut queued = call.notes;
        let notes = futures::stream::poll_fn(move |cx| queued.poll_recv(cx));
        let answer = async move {
            match call.answer.await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => Err(ServiceError::McpError(e)),
                Err(_) => Err(ServiceError::TransportClosed),
            }
        };
        return Ok(Outgoing {
            sent: Sent::Direct { calls, id: call.id },
            notes: notes.boxed(),
            answer: answer.boxed(),
        });
    }
    let mut params =
        CallToolRequestParams::new(remote_name.to_owned()).with_arguments(args.clone());
    params.input_responses = retry.input_responses.clone();
    params.request_state = retry.request_state.clone();
    let mut options = PeerRequestOptions::no_options();
    if super::era::peer_is_new(&link.peer) {
        params.meta = Some(super::era::log_meta());
        // After rmcp's own `_meta` (which names the connection's capabilities).
        let mut declared = RequestMetaObject::default();
        declared.set_client_capabilities(capabilities.clone());
        options.meta = Some(declared);
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = link
        .peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| server.call_error(e))?;
    in_flight.sent(handle.id.clone());
    let sent = Sent::Peer {
        peer: link.peer,
        id: handle.id.clone(),
    };
    // Through rmcp each notification is handled in a task of its own, so progress sent
    // right before the answer can still come after it (stdio calls take the direct way).
    let notes = server
        .progress()
        .subscribe(handle.progress_token.clone())
        .await
        .map(Note::Progress);
    let answer = async move {
        let text = match handle.await_response().await? {
            ServerResult::CallToolResult(r) => serde_json::to_string(&r),
            ServerResult::InputRequiredResult(r) => serde_json::to_string(&r),
            ServerResult::CustomResult(r) => serde_json::to_string(&r.0),
            _ => return Err(ServiceError::UnexpectedResponse),
        };
        text.map(RawResult::whole)
            .map_err(|_| ServiceError::UnexpectedResponse)
    };
    Ok(Outgoing {
        sent,
        notes: notes.boxed(),
        answer: answer.boxed(),
    })
}

async fn call_upstream(tool: &McpTool, args: Map<String, Value>, ctx: CallContext) -> ToolResult {
    let name = tool.spec.name.as_str();
    // The call's deadline and the server's idle timeout share one timer (see
    // `Tool::keeps_deadline`).
    let deadline = ctx
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let timed_out = || ToolError::timed_out(name, ctx.timeout_ms.unwrap_or_default());
    // A scoped server's call runs on the caller's instance (`instances.rs`), held busy
    // until the call ends; waiting for room or for its start counts against the deadline.
    let bound = Bound {
        ctx: &ctx,
        name,
        deadline,
        timed_out: &timed_out,
    };
    let lease = match tool.server.instances() {
        None => None,
        Some(set) => {
            bound
                .run(set.route(&tool.server, &tool.remote_name, &ctx))
                .await??
        }
    };
    let server = lease.as_ref().map_or(&tool.server, |l| l.server());
    // Not connected: say so at once rather than after waiting for a slot. A parked server
    // (lazy, or stopped idle) is started for the call, under its deadline.
    let _in_use = bound.run(server.begin_use()).await??.0;
    let acquiring = async {
        let slot = server.acquire_slot().await?;
        // Entered before the request is written: the server may ask at once.
        let in_flight = server.origins().enter(ctx.inputs.clone());
        Ok::<_, ToolError>((slot, in_flight))
    };
    let (_slot, in_flight) = bound.run(acquiring).await??;
    // Each round the same request, after an `input_required` answer with the frontend's
    // answers and the server's state (`mrtr.rs`); all rounds under the one deadline.
    let mut retry = Retry::default();
    // What this call's frontend answers is what a 2026-07-28 server is told it may ask.
    let capabilities = super::client::capabilities(|kind| ctx.inputs.accepts(kind));
    for _ in 0..=MAX_ROUNDS {
        let sending = async {
            // The connection now (the wait for a slot may have outlived the one seen above).
            let link = server.link_for_call()?;
            let (name, caps) = (&tool.remote_name, &capabilities);
            send_call(server, link, name, &args, &retry, &in_flight, caps).await
        };
        let outgoing = bound.run(sending).await??;
        let raw = answer_of(server, name, outgoing, &ctx, deadline, &timed_out).await?;
        let answer = Answer::read(raw.get()).map_err(|e| unreadable(server, &e))?;
        if !answer.input_required() {
            return map_result(answer);
        }
        // Rare (a 2026-07-28 server asking for input): read whole for its questions.
        let result = serde_json::from_str(raw.get()).map_err(|e| unreadable(server, &e))?;
        let roots = server.roots();
        let answering = mrtr::answer(result, &ctx.inputs, &roots);
        retry = tokio::select! {
            // A question ends with its call: the call's own end is the answer then.
            biased;
            _ = sleep_until(deadline) => return Err(timed_out()),
            _ = ctx.cancel.cancelled() => return Err(ToolError::cancelled(name)),
            answered = answering => answered.map_err(|why| ToolError::failed(format!(
                "MCP server '{}' asked for input the call cannot give ({why})", server.name()
            )))?,
        };
    }
    Err(ToolError::failed(format!(
        "MCP server '{}' asked for input more than {MAX_ROUNDS} times in one call",
        server.name()
    )))
}

/// Waits for the answer to one request sent, passing its notifications on; the server is
/// told to stop if the call is cancelled or times out meanwhile.
async fn answer_of(
    server: &Server,
    name: &str,
    outgoing: Outgoing,
    ctx: &CallContext,
    deadline: Option<Instant>,
    timed_out: &(dyn Fn() -> ToolError + Sync),
) -> Result<RawResult, ToolError> {
    let Outgoing {
        sent,
        notes,
        answer: response,
    } = outgoing;
    // The idle timeout (reset by progress) is kept here rather than in rmcp's request
    // options: one timer in the loop below costs less than rmcp's per-request watchers.
    let idle = Duration::from_millis(server.config().timeout_ms);
    let wake_at = |now: Instant| deadline.map_or(now + idle, |d| d.min(now + idle));
    let mut unanswered = Unanswered { sent: Some(sent) };
    let mut notes = notes;
    let timer = tokio::time::sleep_until(wake_at(Instant::now()));
    tokio::pin!(response, timer);
    let outcome = loop {
        tokio::select! {
            r = &mut response => {
                // What came before the answer goes out before the result.
                while let Some(Some(note)) = notes.next().now_or_never() {
                    pass_on(note, ctx);
                }
                break r;
            }
            Some(note) = notes.next() => {
                if matches!(note, Note::Progress(_)) {
                    timer.as_mut().reset(wake_at(Instant::now()));
                }
                pass_on(note, ctx);
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
        Ok(result) if result.get().starts_with('{') => Ok(result),
        Ok(_) | Err(ServiceError::UnexpectedResponse) => Err(ToolError::failed(format!(
            "MCP server '{}' answered tools/call with something that is not a tool result",
            server.name()
        ))),
        Err(e) => Err(server.call_error(e)),
    }
}

/// A tool result object the pipeline cannot read (two `content` members, say).
fn unreadable(server: &Server, e: &serde_json::Error) -> ToolError {
    ToolError::failed(format!(
        "MCP server '{}' answered tools/call with a result that cannot be read: {e}",
        server.name()
    ))
}

/// What the pipeline reads of a `CallToolResult`, in one pass over the server's JSON and
/// without building it as a `Value`: members of any type are taken raw and judged by
/// [`map_result`], so an odd member is handled there, not a parse error.
#[derive(Deserialize)]
pub struct Answer<'a> {
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, rename = "structuredContent")]
    structured_content: Option<Value>,
    #[serde(default, borrow, rename = "isError")]
    is_error: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "resultType")]
    result_type: Option<&'a RawValue>,
}

impl<'a> Answer<'a> {
    pub fn read(result: &'a str) -> Result<Answer<'a>, serde_json::Error> {
        serde_json::from_str(result)
    }

    /// An `input_required` result of the 2026-07-28 era (`mrtr.rs`).
    fn input_required(&self) -> bool {
        mrtr::input_required(self.result_type)
    }
}

/// A plain text block, read in place: the text is all the output keeps of it.
#[derive(Deserialize)]
struct TextBlock<'a> {
    #[serde(borrow, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    text: std::borrow::Cow<'a, str>,
}

/// A notification of the call's server, passed on to the call's frontend: progress as an
/// update, a log message as a `log` event.
fn pass_on(note: Note, ctx: &CallContext) {
    match note {
        Note::Progress(p) => {
            let text = p.message.clone().unwrap_or_else(|| match p.total {
                Some(t) => format!("progress {}/{}", p.progress, t),
                None => format!("progress {}", p.progress),
            });
            ctx.updates.send(ToolUpdate {
                content: vec![ContentBlock::text(text)],
                details: None,
                progress: Some(Progress {
                    progress: p.progress,
                    total: p.total,
                    message: p.message,
                }),
            });
        }
        Note::Log(m) => super::client::log_to(&ctx.inputs, m),
    }
}

/// A step of a call that may wait (for an instance, a start, a slot, room in the pipe), run
/// under the call's cancel token and deadline.
struct Bound<'a> {
    ctx: &'a CallContext,
    name: &'a str,
    deadline: Option<Instant>,
    timed_out: &'a (dyn Fn() -> ToolError + Sync),
}

impl Bound<'_> {
    /// `step`'s output, or the call's cancellation or timeout. A step ready at once (a free
    /// slot, a pipe with room: the usual case) makes no timer and no cancel waiter.
    async fn run<T>(&self, step: impl std::future::Future<Output = T>) -> Result<T, ToolError> {
        tokio::pin!(step);
        if let Some(done) = (&mut step).now_or_never() {
            return Ok(done);
        }
        tokio::select! {
            biased;
            done = step => Ok(done),
            _ = self.ctx.cancel.cancelled() => Err(ToolError::cancelled(self.name)),
            _ = sleep_until(self.deadline) => Err((self.timed_out)()),
        }
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
pub fn map_result(answer: Answer<'_>) -> ToolResult {
    let blocks: Vec<&RawValue> = answer
        .content
        .filter(|c| c.get().starts_with('['))
        .and_then(|c| serde_json::from_str(c.get()).ok())
        .unwrap_or_default();
    fn text_block<'a>(b: &&'a RawValue) -> Option<TextBlock<'a>> {
        serde_json::from_str::<TextBlock>(b.get())
            .ok()
            .filter(|t| t.kind == "text")
    }
    let mut out = ToolOutput::default();
    let all_text: Option<Vec<TextBlock>> = blocks.iter().map(text_block).collect();
    let output = if let Some(text_blocks) = all_text {
        // Text only (the usual answer): read in place, as `blocks_text` would read it.
        let mut texts: Vec<String> = text_blocks
            .into_iter()
            .map(|t| t.text.into_owned())
            .collect();
        match texts.len() {
            1 => texts.pop().unwrap_or_default(),
            _ => texts.join("\n"),
        }
    } else {
        // The blocks are kept whole, and read by the one rule every source shares.
        let raw: Vec<Value> = blocks
            .iter()
            .filter_map(|b| serde_json::from_str(b.get()).ok())
            .collect();
        if let Some(url) = first_image(&raw) {
            out.control = Control::image(url);
        }
        let text = blocks_text(&raw);
        out.content = Some(raw);
        text
    };
    match answer.structured_content {
        Some(Value::Object(s)) => out.structured_content = Some(s),
        // Not an object, as the spec wants: passed on as it came.
        Some(other) if !other.is_null() => out.insert("structured_content", other),
        _ => {}
    }
    if answer.is_error.map(RawValue::get) == Some("true") {
        let message = if output.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            output
        };
        let mut e = ToolError::failed(message);
        e.output.structured_content = out.structured_content;
        e.output.fields = out.fields;
        return Err(e);
    }
    out.insert("output", output);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The result object of `v`, mapped, as one object: the output's members and its
    /// control fields.
    fn map_result(v: Value) -> Result<Value, ToolError> {
        let raw = v.to_string();
        let out = super::map_result(Answer::read(&raw).unwrap())?;
        let mut flat = serde_json::to_value(&out).unwrap();
        if let Value::Object(control) = serde_json::to_value(&out.control).unwrap() {
            flat.as_object_mut().unwrap().extend(control);
        }
        Ok(flat)
    }

    #[test]
    fn an_answer_is_read_in_place_and_one_it_cannot_read_is_refused() {
        // Escaped text is unescaped; members of odd types are judged, not parse errors.
        let raw = r#"{"content":[{"type":"text","text":"a\"b\u00e9","annotations":{}}],"isError":"yes","resultType":7}"#;
        let answer = Answer::read(raw).unwrap();
        assert!(!answer.input_required());
        let out = super::map_result(answer).unwrap();
        assert_eq!(out.fields["output"], "a\"b\u{e9}");
        assert!(Answer::read(r#"{"content":[],"content":[]}"#).is_err());
    }

    #[test]
    fn maps_text_structured_image_and_errors() {
        let ok = map_result(json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "structuredContent": {"n": 1}})).unwrap();
        assert_eq!(
            ok,
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
