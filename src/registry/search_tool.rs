//! The built-in `tool_search`: the tool the model sees, and the search it runs over a
//! snapshot's deferred tools (the ranking itself is the catalog's index).

use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::tool::{openai_definition, CallContext, Tool, ToolError, ToolResult};
use crate::catalog::ToolSpec;
use crate::catalog::{estimate_tokens, MAX_LIMIT, SEARCH_TOOL};
use crate::protocol::{ApprovalClass, ToolOutput, ToolsSearchResult};

/// Measured the way every other listed tool is (`Entry::tokens`), so the budget holds.
pub(super) fn search_tool_tokens() -> usize {
    let definition = openai_definition(search_tool().as_ref());
    estimate_tokens(serde_json::to_vec(&definition).map_or(0, |v| v.len()))
}

/// The built-in `tool_search`: listed whenever some tool is deferred. Its calls are served
/// by the pipeline ([`crate::invoke`]), which has the snapshot and the session at hand.
pub fn search_tool() -> &'static Arc<dyn Tool> {
    static TOOL: OnceLock<Arc<dyn Tool>> = OnceLock::new();
    TOOL.get_or_init(|| {
        Arc::new(SearchTool(ToolSpec::builtin(
            SEARCH_TOOL,
            "- Find tools that are available but not listed yet, by what you want to do (keywords) or by a regular expression over their names.\n- Returns the full definitions of the best matches; they can be called right away by name.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "What the tool should do, in a few words; or a regular expression such as ^mcp_github_."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "How many tools to return (default 5)."}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
            ApprovalClass::ReadOnly,
        )))
    })
}

struct SearchTool(ToolSpec);

impl Tool for SearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, _args: Map<String, Value>, _ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async {
            Err(ToolError::failed(
                "tool_search is served by the host pipeline",
            ))
        })
    }
}

/// Whether `tool` is the built-in search tool (a custom tool may not stand in for it).
pub fn is_search_tool(tool: &Arc<dyn Tool>) -> bool {
    Arc::ptr_eq(tool, search_tool())
}

/// The `tool_search` tool's result: definitions in `openai` format plus a line per match the
/// model can read.
pub fn search_tool_result(result: ToolsSearchResult) -> ToolOutput {
    let text = if result.tools.is_empty() {
        "No matching tools.".to_owned()
    } else {
        result
            .tools
            .iter()
            .map(|t| format!("{}: {}", t.name(), first_line(t.description())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = ToolOutput::default();
    out.insert("text", text);
    out.insert(
        "tools",
        serde_json::to_value(&result.tools).unwrap_or(Value::Null),
    );
    out
}

fn first_line(s: &str) -> &str {
    s.trim_start_matches("- ").lines().next().unwrap_or("")
}
