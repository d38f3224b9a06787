//! What a session's program sees, in one place: the tools it may call ([`session_tools`],
//! the same set for `run_code`'s `tools`, `code_api`, the listed description and the
//! resource), and the full declarations as the MCP resource `toolhost://code/tools.d.ts`.

use std::path::Path;
use std::sync::Arc;

use crate::config::ProfileView;
use crate::protocol::{ReadResourceResult, ResourceContents, ResourceEntry};
use crate::registry::{Entry, Snapshot, Tool};

use super::api::{self, ToolApi};

/// The declarations resource's URI.
pub const RESOURCE_URI: &str = "toolhost://code/tools.d.ts";

/// The server name the resource is listed under (the host's own, as for skills).
const SERVER: &str = "toolhost";

/// The most the resource holds: unlike the description it is read on purpose, so it is
/// bounded only against a runaway registry.
const RESOURCE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Whether a registered tool is one a program may call: any but the code tools and
/// `tool_search` (a program calls deferred tools by name; it has nothing to search).
pub fn callable(tool: &Arc<dyn Tool>) -> bool {
    tool.code_mode().is_none() && !crate::registry::is_search_tool(tool)
}

/// The tools a program of a session under `view` in `workspace` may call, deferred ones
/// included, hidden ones not, custom tools of other workspaces not.
pub fn session_tools<'s>(
    snapshot: &'s Snapshot,
    view: &ProfileView<'_>,
    workspace: &Path,
) -> Vec<&'s Arc<Entry>> {
    snapshot
        .listed(false, true)
        .map(|(_, e)| e)
        .filter(|e| callable(&e.tool) && crate::session::serves(view, e))
        .filter(|e| e.tool.workspace_scope().is_none_or(|w| w == workspace))
        .collect()
}

/// The declaration inputs of `tools`.
pub fn apis<'a>(tools: &[&'a Arc<Entry>]) -> Vec<ToolApi<'a>> {
    tools.iter().map(|e| ToolApi::of(e.tool.as_ref())).collect()
}

/// The resource as `list_resources` lists it.
pub fn resource_entry() -> ResourceEntry {
    ResourceEntry {
        uri: RESOURCE_URI.to_owned(),
        name: "tools.d.ts".to_owned(),
        title: Some("Code mode: the tools as TypeScript".to_owned()),
        description: Some(
            "TypeScript declarations of every function a run_code program can call (`tools.<name>(args)`), with result types where a tool declares them; updated when the tools change.".to_owned(),
        ),
        mime_type: Some("application/typescript".to_owned()),
        size: None,
        annotations: None,
        server: SERVER.to_owned(),
    }
}

/// The resource's contents: the full declarations of `tools`.
pub fn read_resource(tools: &[&Arc<Entry>]) -> ReadResourceResult {
    ReadResourceResult {
        contents: vec![ResourceContents {
            uri: RESOURCE_URI.to_owned(),
            mime_type: Some("application/typescript".to_owned()),
            text: Some(api::declarations(&apis(tools), true, RESOURCE_MAX_BYTES)),
            blob: None,
            meta: None,
        }],
        input_required: None,
    }
}
