//! Tool manifests (SEP-2636, issue 47) through the facade: behind `facade.tool_manifest`,
//! `tools/manifest` lists every tool, deferred ones too, with the digest and size of its
//! canonical JSON; `tools/describe` answers named tools in full and makes a deferred one
//! found for the frontend, so every session of it lists the tool, also after it reconnects.
//! Off, neither method exists and no capability says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::catalog::{server, wait_ready, write_catalog};
use crate::common::new_era::{self, RawStdio};
use crate::common::Daemon;

/// One fixture server `a` with `alpha` and `echo`, `echo` deferred.
async fn start(manifest: bool) -> Daemon {
    let d = Daemon::start_in(|dir| {
        let a = write_catalog(
            dir,
            "a",
            &json!([{"name": "alpha", "description": "First."}]),
        );
        json!({
            "mcp_servers": {"a": server(&a, json!({"include_tools": ["alpha", "echo"]}))},
            "catalog": {"defer": ["mcp_a_echo"]},
            "facade": {"tool_manifest": manifest},
        })
    })
    .await;
    wait_ready(&d, &["a"]).await;
    d
}

/// An old-era `initialize` of client `name`, then `initialized`; the result.
async fn initialize(mcp: &mut RawStdio, name: &str) -> Value {
    let (r, _) = mcp
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": name, "version": "1"}}),
        )
        .await;
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    r["result"].clone()
}

fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn listed(mcp: &mut RawStdio, id: u64) -> Vec<String> {
    let (r, _) = mcp.request(id, "tools/list", json!({})).await;
    names(&r["result"]["tools"])
}

/// The SHA-256 and length of `tool`'s canonical JSON, as Python's own `json` writes it:
/// keys sorted, no whitespace, UTF-8 (RFC 8785 for these tools: ASCII keys, no fractions).
async fn python_digest(tool: &Value) -> (String, u64) {
    let script = "import sys, json, hashlib\n\
        b = json.dumps(json.load(sys.stdin), sort_keys=True, separators=(',', ':'), ensure_ascii=False).encode()\n\
        print('sha256:' + hashlib.sha256(b).hexdigest(), len(b))";
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(tool.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (digest, size) = text.trim().split_once(' ').unwrap();
    (digest.to_owned(), size.parse().unwrap())
}

#[tokio::test]
async fn a_manifest_lists_deferred_tools_and_a_described_one_stays_found_for_its_frontend() {
    let d = start(true).await;
    let mut mcp = RawStdio::open(&d).await;
    let init = initialize(&mut mcp, "manifest-client").await;
    assert_eq!(init["capabilities"]["tools"]["manifest"], true, "{init}");
    let before = listed(&mut mcp, 2).await;
    assert!(!before.contains(&"mcp_a_echo".to_owned()), "{before:?}");
    assert!(before.contains(&"tool_search".to_owned()), "{before:?}");

    // Every tool, the deferred one too, without schemas.
    let (m, _) = mcp.request(3, "tools/manifest", json!({})).await;
    let entries = m["result"]["tools"].as_array().unwrap().clone();
    let all = names(&m["result"]["tools"]);
    for want in ["mcp_a_alpha", "mcp_a_echo", "bash", "tool_search"] {
        assert!(all.contains(&want.to_owned()), "{want} not in {all:?}");
    }
    assert!(
        entries.iter().all(|e| e.get("inputSchema").is_none()),
        "{m}"
    );

    // A name it does not know fails the whole request, and finds nothing.
    let (bad, _) = mcp
        .request(
            4,
            "tools/describe",
            json!({"names": ["mcp_a_echo", "nope"]}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(
        bad["error"]["data"]["unknownNames"],
        json!(["nope"]),
        "{bad}"
    );
    assert!(!listed(&mut mcp, 5).await.contains(&"mcp_a_echo".to_owned()));

    // Every tool in full, in the order named, each as its entry's digest and size say.
    let (full, _) = mcp
        .request(6, "tools/describe", json!({"names": all}))
        .await;
    let tools = full["result"]["tools"].as_array().unwrap();
    assert_eq!(names(&full["result"]["tools"]), all);
    for (entry, tool) in entries.iter().zip(tools) {
        let (digest, size) = python_digest(tool).await;
        assert_eq!(entry["digest"], digest, "{entry} for {tool}");
        assert_eq!(entry["size"], size, "{entry} for {tool}");
        assert_eq!(entry.get("title"), tool.get("title"));
    }
    // What it describes is what tools/list gives.
    let (list, _) = mcp.request(7, "tools/list", json!({})).await;
    let alpha = |tools: &Value| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "mcp_a_alpha")
            .cloned()
    };
    assert_eq!(
        alpha(&list["result"]["tools"]),
        alpha(&full["result"]["tools"])
    );

    // Described, the deferred tool is listed to this frontend, and callable.
    assert!(listed(&mut mcp, 8).await.contains(&"mcp_a_echo".to_owned()));
    let (call, _) = mcp
        .request(
            9,
            "tools/call",
            json!({"name": "mcp_a_echo", "arguments": {"text": "found"}}),
        )
        .await;
    assert_eq!(call["result"]["content"][0]["text"], "found", "{call}");
    drop(mcp);

    // The same frontend reconnecting still has it; another frontend does not.
    let mut again = RawStdio::open(&d).await;
    initialize(&mut again, "manifest-client").await;
    assert!(listed(&mut again, 2)
        .await
        .contains(&"mcp_a_echo".to_owned()));
    let mut other = RawStdio::open(&d).await;
    initialize(&mut other, "another-client").await;
    assert!(!listed(&mut other, 2)
        .await
        .contains(&"mcp_a_echo".to_owned()));
}

#[tokio::test]
async fn switched_off_there_is_no_manifest() {
    let d = start(false).await;
    let mut mcp = RawStdio::open(&d).await;
    let init = initialize(&mut mcp, "manifest-client").await;
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    assert_eq!(
        init["capabilities"]["tools"].get("manifest"),
        None,
        "{init}"
    );
    for (id, method, params) in [
        (2, "tools/manifest", json!({})),
        (3, "tools/describe", json!({"names": ["bash"]})),
    ] {
        let (r, _) = mcp.request(id, method, params).await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
    }
    let r = discover(&mut RawStdio::open(&d).await).await;
    assert_eq!(
        r["result"]["capabilities"]["tools"].get("manifest"),
        None,
        "{r}"
    );
}

/// One new-era POST to `/mcp` of client `manifest-http`; the JSON-RPC answer.
async fn post(d: &Daemon, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = new_era::meta("manifest-http", json!({}));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    crate::facade_era::post(d, &crate::facade_era::new_era_headers(method, None), body)
        .await
        .1
}

/// `server/discover` on stdio; its answer.
async fn discover(mcp: &mut RawStdio) -> Value {
    let meta = new_era::meta("manifest-client", json!({}));
    mcp.request(1, "server/discover", json!({"_meta": meta}))
        .await
        .0
}

/// The 2026-07-28 era: `server/discover` declares it on stdio and on `/mcp`, where the
/// methods answer sessionless requests with the era's result fields.
#[tokio::test]
async fn the_new_era_discovers_and_uses_manifests_on_both_doors() {
    let d = start(true).await;
    let mut mcp = RawStdio::open(&d).await;
    let r = discover(&mut mcp).await;
    assert_eq!(
        r["result"]["capabilities"]["tools"]["manifest"], true,
        "{r}"
    );
    let r = mcp
        .rpc(
            "tools/manifest",
            json!({"_meta": new_era::meta("manifest-client", json!({}))}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(names(&r["result"]["tools"]).contains(&"mcp_a_echo".to_owned()));

    let r = post(&d, 1, "server/discover", json!({})).await;
    assert_eq!(
        r["result"]["capabilities"]["tools"]["manifest"], true,
        "{r}"
    );
    let r = post(&d, 2, "tools/manifest", json!({})).await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "complete", "{r}");
    assert!(
        result["ttlMs"].is_u64() && result["cacheScope"].is_string(),
        "{r}"
    );
    let echo = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "mcp_a_echo")
        .cloned()
        .unwrap_or_else(|| panic!("no mcp_a_echo in {r}"));
    let r = post(&d, 3, "tools/describe", json!({"names": ["mcp_a_echo"]})).await;
    let tool = &r["result"]["tools"][0];
    assert_eq!(tool["name"], "mcp_a_echo", "{r}");
    let (digest, size) = python_digest(tool).await;
    assert_eq!(
        (echo["digest"].clone(), echo["size"].clone()),
        (json!(digest), json!(size))
    );
    let r = post(&d, 4, "tools/describe", json!({"names": ["nope"]})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}
