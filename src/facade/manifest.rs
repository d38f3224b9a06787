//! Tool manifests (SEP-2636, a draft: "Tool Manifests for Incremental Catalog
//! Synchronization"), offered when `facade.tool_manifest` is on
//! (proto-docs/mcp-facade.md#tool-manifests). `tools/manifest` lists every tool the
//! connection may call, deferred ones too, as `{name, title?, digest, size, annotations?}`:
//! the digest (`sha256:<hex>`) and size are those of the whole `Tool` in RFC 8785 canonical
//! JSON, so a client refetches only what changed. `tools/describe {names}` answers the named
//! `Tool`s in full and tells the host that this connection's frontend found them: a deferred
//! one is then listed to every session of that frontend, across its stateless requests and
//! its reconnects (`tools.describe`), where `tool_search` loads tools into one session.
//!
//! The draft has renamed its methods before, so its names live here alone. rmcp's
//! `ServerCapabilities` has no place for `tools.manifest`: the results that carry
//! capabilities go out as JSON with it added ([`declared`]); [`Served`] does it for
//! `server/discover`, and for `initialize`, whose typed result rmcp's handshake needs, the
//! stdio transport ([`Declaring`]) and `/mcp`'s session manager do it once it is made.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CacheScope, CustomResult, MetaObject, ResultType, ServerJsonRpcMessage, ServerResult, Tool,
};
use rmcp::service::{RequestContext, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{era, host_error, surface::page, Facade, Link};
use crate::protocol::ToolsDescribeParams;

/// The compact listing of every tool.
pub const MANIFEST: &str = "tools/manifest";
/// The named tools in full.
pub const DESCRIBE: &str = "tools/describe";
/// The capability: `capabilities.tools.manifest: true`.
const CAPABILITY: &str = "manifest";

/// One tool as the manifest lists it.
#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<Value>,
    /// `sha256:` and the lowercase hex digest of the tool's canonical JSON.
    digest: String,
    /// The canonical JSON's length in bytes.
    size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<Value>,
}

/// The manifest entry of `tool`, as `tools/list` and `tools/describe` give it.
fn entry(tool: &Tool) -> Result<Entry, ErrorData> {
    let mut json = serde_json::to_value(tool).map_err(|e| internal(&e))?;
    let canonical = serde_json_canonicalizer::to_vec(&json).map_err(|e| internal(&e))?;
    let mut field = |key: &str| json.as_object_mut().and_then(|o| o.remove(key));
    Ok(Entry {
        name: tool.name.to_string(),
        title: field("title"),
        annotations: field("annotations"),
        digest: format!("sha256:{}", hex::encode(Sha256::digest(&canonical))),
        size: canonical.len(),
    })
}

fn internal(e: &dyn std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("cannot encode a tool: {e}"), None)
}

/// `tools/manifest`'s result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    result_type: Option<ResultType>,
    tools: Vec<Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_scope: Option<CacheScope>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<MetaObject>,
}

/// `tools/describe`'s result: the tools in the order they were named.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DescribeResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    result_type: Option<ResultType>,
    tools: Vec<Tool>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<MetaObject>,
}

impl era::Stamped for ManifestResult {
    fn meta_mut(&mut self) -> &mut Option<MetaObject> {
        &mut self.meta
    }
    fn mark_complete(&mut self) {
        self.result_type.get_or_insert(ResultType::COMPLETE);
    }
}

impl era::Cached for ManifestResult {
    fn set_hints(&mut self, ttl_ms: u64, scope: CacheScope) {
        (self.ttl_ms, self.cache_scope) = (Some(ttl_ms), Some(scope));
    }
}

impl era::Stamped for DescribeResult {
    fn meta_mut(&mut self) -> &mut Option<MetaObject> {
        &mut self.meta
    }
    fn mark_complete(&mut self) {
        self.result_type.get_or_insert(ResultType::COMPLETE);
    }
}

#[derive(Deserialize)]
struct ManifestParams {
    cursor: Option<String>,
}

#[derive(Deserialize)]
struct DescribeParams {
    names: Vec<String>,
}

fn params<P: serde::de::DeserializeOwned>(
    method: &str,
    params: Option<Value>,
) -> Result<P, ErrorData> {
    serde_json::from_value(params.unwrap_or_else(|| Value::Object(Default::default())))
        .map_err(|e| ErrorData::invalid_params(format!("{method}: {e}"), None))
}

fn custom(result: impl Serialize) -> Result<CustomResult, ErrorData> {
    serde_json::to_value(result)
        .map(CustomResult)
        .map_err(|e| internal(&e))
}

impl Facade {
    /// Whether this connection offers tool manifests: the daemon's `facade.tool_manifest`
    /// (a bridge asks its daemon, and keeps the answer for [`Declaring`]; without a daemon,
    /// the last answer).
    pub(super) async fn offers_manifest(&self) -> bool {
        let offered = &self.state.manifest_offered;
        match &self.link {
            Link::Shared(shared) => shared.offers_manifest(),
            Link::Bridge(upstream, _) => {
                if let Some(client) = upstream.current() {
                    if let Ok(status) = client.config_status().await {
                        offered.store(status.tool_manifest, Ordering::Relaxed);
                    }
                }
                offered.load(Ordering::Relaxed)
            }
        }
    }

    /// `tools/manifest` and `tools/describe` when offered; any other method is unknown.
    pub(super) async fn custom_request(
        &self,
        method: &str,
        params: Option<Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let known = method == MANIFEST || method == DESCRIBE;
        if !known || !self.offers_manifest().await {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                method.to_owned(),
                None,
            ));
        }
        if method == MANIFEST {
            self.manifest(self::params(method, params)?, ctx).await
        } else {
            self.describe(self::params(method, params)?, ctx).await
        }
    }

    async fn manifest(
        &self,
        p: ManifestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.ready(ctx, false).await?;
        let tools = self.live_tools(true).await?;
        let (tools, next_cursor) = page(&tools, p.cursor, self.page_size)?;
        let mut result = ManifestResult {
            result_type: None,
            tools: tools.iter().map(entry).collect::<Result<_, _>>()?,
            next_cursor,
            ttl_ms: None,
            cache_scope: None,
            meta: None,
        };
        era::stamp_cached(ctx, &mut result, era::LIST_TTL_MS, self.shaped());
        custom(result)
    }

    /// The named tools in full, in the order named; a name this connection may not call
    /// (`data.unknownNames`) fails the whole request (`-32602`), as `resources/read` of an
    /// unknown URI does.
    async fn describe(
        &self,
        p: DescribeParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if p.names.is_empty() {
            return Err(ErrorData::invalid_params(
                format!("{DESCRIBE}: names is empty"),
                None,
            ));
        }
        // A session, so that the frontend is known (a sessionless client's shared one).
        self.ready(ctx, true).await?;
        let all = self.live_tools(true).await?;
        let mut tools = Vec::with_capacity(p.names.len());
        let mut unknown = Vec::new();
        for name in &p.names {
            match all.iter().find(|t| t.name == name.as_str()) {
                Some(t) => tools.push(t.clone()),
                None => unknown.push(name.clone()),
            }
        }
        if !unknown.is_empty() {
            return Err(ErrorData::invalid_params(
                format!("{DESCRIBE}: no such tool: {}", unknown.join(", ")),
                Some(serde_json::json!({ "unknownNames": unknown })),
            ));
        }
        if let Some(session_id) = self.session_id() {
            let client = self.client().await?;
            let params = ToolsDescribeParams {
                session_id,
                names: p.names,
            };
            client.tools_describe(&params).await.map_err(host_error)?;
        }
        let mut result = DescribeResult {
            result_type: None,
            tools,
            meta: None,
        };
        era::stamp(ctx, &mut result);
        custom(result)
    }
}

/// Declares tool manifests in `result` (a result with `capabilities`); false if it has no
/// `capabilities.tools`.
fn declare(result: &mut Value) -> bool {
    let Some(tools) = result
        .pointer_mut("/capabilities/tools")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    tools.insert(CAPABILITY.into(), Value::Bool(true));
    true
}

/// `result` with tool manifests declared, if it is `initialize`'s or `server/discover`'s
/// (as JSON: rmcp's type has no place for them).
fn declared(result: ServerResult) -> ServerResult {
    if !matches!(
        result,
        ServerResult::InitializeResult(_) | ServerResult::DiscoverResult(_)
    ) {
        return result;
    }
    let Ok(mut json) = serde_json::to_value(&result) else {
        return result;
    };
    if declare(&mut json) {
        ServerResult::CustomResult(CustomResult(json))
    } else {
        result
    }
}

/// A `/mcp` answer to `server/discover` (served statelessly, where no code of ours sees the
/// result), JSON or SSE, with tool manifests declared.
pub(super) fn declared_body(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let declared_json = |json: &str| {
        let mut message: Value = serde_json::from_str(json).ok()?;
        declare(message.get_mut("result")?).then(|| message.to_string())
    };
    if let Some(json) = declared_json(text) {
        return Some(json.into_bytes());
    }
    let mut changed = false;
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            match line
                .strip_prefix("data:")
                .and_then(|d| declared_json(d.trim()))
            {
                Some(json) => {
                    changed = true;
                    format!("data: {json}")
                }
                None => line.to_owned(),
            }
        })
        .collect();
    changed.then(|| lines.join("\n").into_bytes())
}

/// [`declared`] on a message about to go out.
pub(super) fn declared_message(message: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
    match message {
        ServerJsonRpcMessage::Response(mut r) => {
            r.result = declared(r.result);
            ServerJsonRpcMessage::Response(r)
        }
        other => other,
    }
}

/// stdio's transport: `server/discover`'s and `initialize`'s results declare tool manifests
/// while the facade finds them offered (asked at the start and at each `initialize`).
pub(super) struct Declaring<T> {
    pub(super) inner: T,
    pub(super) offered: Arc<AtomicBool>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Declaring<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let item = if self.offered.load(Ordering::Relaxed) {
            declared_message(item)
        } else {
            item
        };
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleServer>>> + Send
    {
        self.inner.receive()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// RFC 8785 §3.2.2's example: numbers as ECMAScript writes them, strings with the
    /// shortest escapes, keys sorted.
    #[test]
    fn canonical_json_is_rfc_8785() {
        let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]}"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let out = serde_json_canonicalizer::to_string(&value).unwrap();
        assert_eq!(
            out,
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// RFC 8785 §3.2.3: keys sort by their UTF-16 code units, not their code points.
    #[test]
    fn keys_sort_by_utf16_code_units() {
        let input = r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let out = serde_json_canonicalizer::to_string(&value).unwrap();
        let order: Vec<&str> = [
            "Carriage", "One", "Control", "Latin", "Euro", "Emoji", "Hebrew",
        ]
        .into_iter()
        .collect();
        let mut at = 0;
        for word in order {
            let found = out[at..].find(word).map(|i| i + at);
            assert!(found.is_some(), "{word} out of order in {out}");
            at = found.unwrap_or(at);
        }
    }

    #[test]
    fn an_entry_digests_the_whole_tool() {
        let tool: Tool = serde_json::from_value(serde_json::json!({
            "name": "t", "title": "T", "description": "d",
            "inputSchema": {"type": "object", "properties": {"b": {"type": "number"}, "a": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        let e = entry(&tool).unwrap();
        let canonical = r#"{"annotations":{"readOnlyHint":true},"description":"d","inputSchema":{"properties":{"a":{"type":"string"},"b":{"type":"number"}},"type":"object"},"name":"t","title":"T"}"#;
        assert_eq!(e.size, canonical.len());
        assert_eq!(
            e.digest,
            format!("sha256:{}", hex::encode(Sha256::digest(canonical)))
        );
        assert_eq!(e.title, Some(Value::from("T")));
    }

    #[test]
    fn a_discover_answer_is_declared_as_json_and_as_sse() {
        let answer =
            r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{"listChanged":true}}}}"#;
        let json: Value =
            serde_json::from_slice(&declared_body(answer.as_bytes()).unwrap()).unwrap();
        assert_eq!(json["result"]["capabilities"]["tools"]["manifest"], true);
        let sse = format!("id: 0\nretry: 3000\n\nevent: message\ndata: {answer}\n\n");
        let out = String::from_utf8(declared_body(sse.as_bytes()).unwrap()).unwrap();
        assert!(
            out.starts_with("id: 0\nretry: 3000\n\nevent: message\ndata: {"),
            "{out}"
        );
        assert!(
            out.contains(r#""manifest":true"#) && out.ends_with("\n\n"),
            "{out}"
        );
        assert!(declared_body(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{}}").is_none());
    }

    #[test]
    fn only_capability_results_are_declared() {
        let init = ServerResult::InitializeResult(rmcp::model::InitializeResult::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        ));
        let ServerResult::CustomResult(CustomResult(json)) = declared(init) else {
            panic!("not declared");
        };
        assert_eq!(json["capabilities"]["tools"]["manifest"], true);
        let other = ServerResult::empty(());
        assert!(matches!(declared(other), ServerResult::EmptyResult(_)));
    }
}
