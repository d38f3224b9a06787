//! Fleet mode's MRTR hand-off: behind a load balancer with no affinity, a 2026-07-28
//! client's retry (`tools/call` with a `requestState`) may land on another member than the
//! one holding its call. The state names the holder (it is sealed with the fleet's key, so
//! every member opens it); the member it landed on forwards the request as it came to the
//! holder's `internal_url` (from the fleet's members table) and streams the answer back. A
//! holder that is gone, lost or unreachable gets the retry refused with a clear error: the
//! call is never started again here, so it never runs twice.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use serde_json::{json, Value};

use super::mrtr::HeldCalls;
use crate::fleet::Fleet;

/// Marks a request handed over by another member (the value names it): it is served where
/// it lands, never handed on again, so two members cannot bounce a request between them.
pub const HANDED_OVER: &str = "x-toolhost-handed-over";

/// The request headers the holder needs to serve the request as the client sent it.
const FORWARDED: [&str; 6] = [
    "content-type",
    "accept",
    "authorization",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

/// How long reaching the holder may take (the call itself runs under its own deadline).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

type Response = http::Response<BoxBody<Bytes, Infallible>>;

/// What a member needs to hand retries over: the fleet (who holds what, where) and the
/// held calls (whose key opens the states).
pub struct Handoff {
    fleet: Fleet,
    held: Arc<HeldCalls>,
    http: reqwest::Client,
}

impl Handoff {
    pub fn new(fleet: Fleet, held: Arc<HeldCalls>) -> anyhow::Result<Handoff> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()?;
        Ok(Handoff { fleet, held, http })
    }

    /// The other member that holds the call a request `body` retries, if any.
    pub fn holder(&self, body: &[u8]) -> Option<String> {
        let message: Value = serde_json::from_slice(body).ok()?;
        if message.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let state = message.get("params")?.get("requestState")?.as_str()?;
        self.held.holder(state)
    }

    /// Forwards the request (`head`, `body`) to `member`, and its answer back; refuses it
    /// when `member` cannot take it.
    pub async fn hand_over(
        &self,
        member: &str,
        head: &http::request::Parts,
        body: Bytes,
    ) -> Response {
        let id = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|m| m.get("id").cloned())
            .unwrap_or(Value::Null);
        let url = match self.fleet.reach(member).await {
            Ok(url) => url,
            Err(why) => return refusal(&id, &why),
        };
        let mut request = self
            .http
            .post(format!("{}/mcp", url.trim_end_matches('/')))
            .header(HANDED_OVER, self.fleet.member())
            .body(body);
        for name in FORWARDED {
            if let Some(value) = head.headers.get(name) {
                request = request.header(name, value.clone());
            }
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) => {
                return refusal(
                    &id,
                    &format!("member {member} cannot be reached at {url}: {e}"),
                )
            }
        };
        tracing::debug!(%member, status = %answer.status(), "handed an MRTR retry over");
        let mut response = http::Response::builder().status(answer.status());
        for name in [http::header::CONTENT_TYPE, http::header::CACHE_CONTROL] {
            if let Some(value) = answer.headers().get(&name) {
                response = response.header(name, value.clone());
            }
        }
        // A stream cut by the holder ends the answer here too.
        let frames = answer
            .bytes_stream()
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok().map(|b| Ok(Frame::data(b)))));
        response
            .body(BodyExt::boxed(StreamBody::new(frames)))
            .unwrap_or_else(|e| refusal(&id, &format!("cannot pass the answer on: {e}")))
    }
}

/// The JSON-RPC error that refuses a retry whose holder cannot take it.
fn refusal(id: &Value, why: &str) -> Response {
    let message = format!(
        "the call of this requestState is held by another member of the fleet, which cannot \
         take the retry: {why}; the call was not run again here: start it again without \
         requestState"
    );
    let body = json!({"jsonrpc": "2.0", "id": id,
                      "error": {"code": -32602, "message": message}});
    let mut response = http::Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
