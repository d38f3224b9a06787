//! Shapes between the host protocol and MCP: a `list_tools` entry as an MCP `Tool`, an
//! `invoke` result as a `CallToolResult`, catalog entries and results of prompts and
//! resources as their MCP types, MCP roots as a workspace path.
//!
//! rmcp's model types deserialise from the JSON the MCP spec defines, and our protocol
//! types serialise to the same spelling (`inputSchema`, `mimeType`, content `type`s), so
//! most conversions go through JSON rather than restating every field by hand.

use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken, Tool};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::protocol::ApprovalClass;
use crate::protocol::{CallOutcome, InvokeUpdate, McpTool, ToolMeta};

/// One live tool as an MCP `Tool`: title, description, input and output schema kept, and
/// annotations whose `readOnlyHint` follows the tool's approval class (`destructiveHint`
/// and the rest as the tool or its upstream server reported them).
pub fn tool(entry: &McpTool, meta: Option<&ToolMeta>) -> Option<Tool> {
    let mut annotations = entry
        .annotations
        .clone()
        .or_else(|| meta.and_then(|m| m.annotations.clone()))
        .and_then(|a| match a {
            Value::Object(o) => Some(o),
            _ => None,
        })
        .unwrap_or_default();
    match meta.and_then(|m| m.approval) {
        Some(ApprovalClass::ReadOnly) => {
            annotations.insert("readOnlyHint".into(), Value::Bool(true));
        }
        Some(ApprovalClass::Write | ApprovalClass::Command) => {
            annotations.insert("readOnlyHint".into(), Value::Bool(false));
        }
        None => {}
    }
    let mut t = Map::new();
    t.insert("name".into(), entry.name.clone().into());
    if let Some(title) = &entry.title {
        t.insert("title".into(), title.clone().into());
    }
    t.insert("description".into(), entry.description.clone().into());
    t.insert("inputSchema".into(), entry.input_schema.clone());
    if let Some(out) = entry.output_schema.as_ref().filter(|s| s.is_object()) {
        t.insert("outputSchema".into(), out.clone());
    }
    if !annotations.is_empty() {
        t.insert("annotations".into(), Value::Object(annotations));
    }
    match serde_json::from_value(Value::Object(t)) {
        Ok(tool) => Some(tool),
        Err(e) => {
            tracing::warn!(tool = %entry.name, %e, "tool cannot be described over MCP; left out");
            None
        }
    }
}

/// A finished call as an MCP result. A tool's own `content` blocks pass through as they
/// are; otherwise its main text becomes a text block and the facts beside it a second
/// (compact JSON) block, so facts such as `exit_code` reach the model
/// ([`crate::protocol::ToolOutput::shown`]). Structured content becomes `structuredContent`; `ok:false`
/// becomes `isError` with the error text first.
pub fn call_result(outcome: &CallOutcome) -> CallToolResult {
    let output = &outcome.output;
    let mut blocks: Vec<ContentBlock> = Vec::new();
    if let Some(e) = outcome.error.as_deref().filter(|e| !e.is_empty()) {
        blocks.push(ContentBlock::text(e));
    }
    let own = output
        .content
        .as_ref()
        .and_then(|c| Vec::<ContentBlock>::deserialize(Value::Array(c.clone())).ok());
    if let Some(own) = own {
        blocks.extend(own);
    } else {
        let shown = output.shown();
        let mut facts = shown.facts;
        if let Some(text) = shown.main_text {
            if !text.is_empty() || blocks.is_empty() {
                blocks.push(ContentBlock::text(text));
            }
        }
        // Blocks that are not MCP blocks still reach the model, as JSON.
        if let Some(content) = &output.content {
            facts.insert("content".into(), Value::Array(content.clone()));
        }
        if !facts.is_empty() {
            blocks.push(ContentBlock::text(Value::Object(facts).to_string()));
        }
    }
    let mut r = if outcome.ok {
        CallToolResult::success(blocks)
    } else {
        CallToolResult::error(blocks)
    };
    r.structured_content = output.structured_content.clone().map(Value::Object);
    r
}

/// The local directory a root names (`file:///a%20b` → `/a b`); `None` for other schemes,
/// other hosts, and paths that are not UTF-8 (a session's workspace travels as a string).
pub fn root_path(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok().filter(|u| u.scheme() == "file")?;
    // `url` takes a malformed escape (`%zz`) as a literal `%`; RFC 3986 does not, and such
    // a root is a client's bug rather than a directory of that name.
    let malformed = url.path().split('%').skip(1).any(|rest| {
        !rest
            .get(..2)
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if malformed {
        return None;
    }
    // `file://localhost/x` names `/x`; any other host is not local.
    url.to_file_path().ok()?.into_os_string().into_string().ok()
}

/// Our catalog entries (prompts, resources, templates) as the MCP items of the same
/// spelling, without the host's `server` field; an entry MCP cannot hold is left out.
pub fn listed<T: serde::Serialize, M: serde::de::DeserializeOwned>(entries: &[T]) -> Vec<M> {
    entries
        .iter()
        .filter_map(|e| {
            let mut json = serde_json::to_value(e).ok()?;
            if let Value::Object(o) = &mut json {
                o.remove("server");
            }
            serde_json::from_value(json)
                .map_err(
                    |err| tracing::warn!(%err, "an entry cannot be described over MCP; left out"),
                )
                .ok()
        })
        .collect()
}

/// One of our results as the MCP result of the same spelling (prompt messages, resource
/// contents and completions are MCP's own shapes on both sides).
pub fn via_json<M: serde::de::DeserializeOwned>(
    ours: &impl serde::Serialize,
) -> Result<M, rmcp::ErrorData> {
    serde_json::to_value(ours)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            rmcp::ErrorData::internal_error(
                format!("cannot pass the answer on over MCP: {e}"),
                None,
            )
        })
}

/// A tool update as an MCP progress notification: the tool's own progress when it gives
/// one, else a step count with the update's text as the message.
pub(super) fn progress_note(
    token: ProgressToken,
    u: &InvokeUpdate,
    step: f64,
) -> ProgressNotificationParam {
    let text = || {
        let texts: Vec<&str> = u
            .content
            .iter()
            .filter_map(|c| match c {
                crate::protocol::ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    };
    match &u.progress {
        Some(p) => {
            let mut n = ProgressNotificationParam::new(token, p.progress);
            if let Some(t) = p.total {
                n = n.with_total(t);
            }
            match p.message.clone().or_else(text) {
                Some(m) => n.with_message(m),
                None => n,
            }
        }
        None => {
            let n = ProgressNotificationParam::new(token, step);
            match text() {
                Some(m) => n.with_message(m),
                None => n,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A call's `result` as the client reads it off the wire.
    fn outcome(v: Value) -> CallOutcome {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn roots_name_local_directories_only() {
        assert_eq!(
            root_path("file:///home/a%20b/p").as_deref(),
            Some("/home/a b/p")
        );
        assert_eq!(root_path("file://localhost/x").as_deref(), Some("/x"));
        assert_eq!(root_path("https://example.com/x"), None);
        assert_eq!(root_path("file://host/x"), None);
        assert_eq!(root_path("file:///bad%zz"), None);
        assert_eq!(root_path("file:///a%25b%3F").as_deref(), Some("/a%b?"));
        // Not UTF-8: no workspace string can name it.
        assert_eq!(root_path("file:///tmp/a%FF"), None);
    }

    #[test]
    fn builtin_results_keep_their_main_text_and_facts() {
        let r = call_result(&outcome(
            json!({"ok": true, "output": "hi\n", "exit_code": 0}),
        ));
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"resultType": "complete", "content": [{"type": "text", "text": "hi\n"}, {"type": "text", "text": "{\"exit_code\":0}"}], "isError": false})
        );
    }

    #[test]
    fn own_content_blocks_and_structured_output_pass_through() {
        let r = call_result(&outcome(json!({
            "ok": true,
            "output": "[image: image/png, 4 bytes base64]",
            "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structured_content": {"n": 1}
        })));
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"resultType": "complete", "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}], "structuredContent": {"n": 1}, "isError": false})
        );
    }

    #[test]
    fn failures_lead_with_the_error() {
        let r = call_result(&outcome(json!({"ok": false, "error": "boom"})));
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"resultType": "complete", "content": [{"type": "text", "text": "boom"}], "isError": true})
        );
    }

    #[test]
    fn annotations_follow_the_approval_class() {
        let entry = McpTool {
            name: "w".into(),
            title: Some("Write".into()),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(json!({"type": "object"})),
            annotations: Some(json!({"destructiveHint": true})),
        };
        let meta = ToolMeta {
            source: crate::protocol::ToolSourceKind::Builtin,
            server: None,
            approval: Some(ApprovalClass::Write),
            hidden: false,
            deferrable: false,
            deferred: false,
            annotations: None,
        };
        let t = tool(&entry, Some(&meta)).unwrap();
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"name": "w", "title": "Write", "description": "d", "inputSchema": {"type": "object"},
                   "outputSchema": {"type": "object"}, "annotations": {"destructiveHint": true, "readOnlyHint": false}})
        );
    }
}
