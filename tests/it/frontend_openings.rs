//! Frontends caught between the eras, replayed byte for byte on `toolhost mcp` (stdio):
//! Copilot CLI's and Claude Code's `server/discover` probe followed by an `initialize`
//! (also while the probe is still unanswered), an `initialize` followed by a probe, and
//! Codex's `initialize` only, with a version the host may not know. Whatever the order,
//! every request is answered and the connection settles on one era: once `initialize`
//! came, it is of the `initialize` era (results without `resultType`). The recorded bytes
//! are in proto-docs/mcp-facade.md ("Frontends between the eras").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::new_era::RawStdio;
use common::Daemon;
use serde_json::{json, Value};

/// Copilot CLI 1.0.85's opening request (copilot-cli#4888).
const COPILOT_DISCOVER: &str = r#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"copilot-cli","version":"1.0.85"},"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{"form":{},"url":{}}}}}}"#;
/// The `initialize` Copilot CLI sends next (2025-11-25), here under id 1.
const COPILOT_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"copilot-cli","version":"1.0.85"}}}"#;
/// Claude Code's `initialize`, in its own key order (2.0.73, cl-ai-project/cl-mcp#26).
const CLAUDE_INITIALIZE: &str = r#"{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"claude-code","version":"2.0.73"}},"jsonrpc":"2.0","id":0}"#;
/// Claude Code 2.1.280's probe: its bytes are not on record, so Copilot's shape with its
/// name and capabilities, under id 1 (its `initialize` has id 0).
const CLAUDE_DISCOVER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","version":"2.1.280"},"io.modelcontextprotocol/clientCapabilities":{"roots":{}}}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Reads until the answers to every id in `ids` came (in any order), answering a
/// `roots/list` request of the facade on the way; returns them by id.
async fn answers(mcp: &mut RawStdio, ids: &[u64]) -> Vec<Value> {
    let mut got: Vec<Option<Value>> = vec![None; ids.len()];
    while got.iter().any(Option::is_none) {
        let m = mcp.next().await;
        if m["method"] == "roots/list" {
            let answer = json!({"jsonrpc": "2.0", "id": m["id"], "result": {"roots": []}});
            mcp.send(answer).await;
            continue;
        }
        if let Some(i) = ids.iter().position(|id| m["id"] == *id) {
            if m.get("method").is_none() {
                got[i] = Some(m);
            }
        }
    }
    got.into_iter().map(Option::unwrap).collect()
}

/// The connection is of the `initialize` era: a list has no new-era fields.
async fn is_old_era(mcp: &mut RawStdio) {
    mcp.send_raw(INITIALIZED).await;
    mcp.send(json!({"jsonrpc": "2.0", "id": 50, "method": "tools/list", "params": {}}))
        .await;
    let list = answers(mcp, &[50]).await.remove(0);
    let r = &list["result"];
    assert!(
        r["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{list}"
    );
    assert!(r.get("resultType").is_none(), "{list}");
    assert!(r.get("ttlMs").is_none(), "{list}");
}

fn discovered(answer: &Value) {
    let versions = answer["result"]["supportedVersions"].as_array();
    assert!(
        versions.is_some_and(|v| v.contains(&json!("2026-07-28"))),
        "{answer}"
    );
}

#[tokio::test]
async fn copilot_discovers_then_initializes_after_the_answer() {
    let d = Daemon::start().await;
    let mut mcp = RawStdio::open(&d).await;
    mcp.send_raw(COPILOT_DISCOVER).await;
    discovered(&answers(&mut mcp, &[0]).await[0]);
    mcp.send_raw(COPILOT_INITIALIZE).await;
    let init = answers(&mut mcp, &[1]).await.remove(0);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    is_old_era(&mut mcp).await;
}

/// A slow start: Copilot's `initialize` goes out before the probe is answered.
#[tokio::test]
async fn copilot_initializes_while_its_probe_is_in_flight() {
    let d = Daemon::start().await;
    let mut mcp = RawStdio::open(&d).await;
    mcp.send_raw(COPILOT_DISCOVER).await;
    mcp.send_raw(COPILOT_INITIALIZE).await;
    let got = answers(&mut mcp, &[0, 1]).await;
    discovered(&got[0]);
    assert_eq!(
        got[1]["result"]["protocolVersion"], "2025-11-25",
        "{}",
        got[1]
    );
    is_old_era(&mut mcp).await;
}

#[tokio::test]
async fn claude_code_initializes_then_probes() {
    let d = Daemon::start().await;
    let mut mcp = RawStdio::open(&d).await;
    mcp.send_raw(CLAUDE_INITIALIZE).await;
    let init = answers(&mut mcp, &[0]).await.remove(0);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    mcp.send_raw(CLAUDE_DISCOVER).await;
    discovered(&answers(&mut mcp, &[1]).await[0]);
    is_old_era(&mut mcp).await;
}

/// Claude Code 2.1.280 probes, then initializes even after a successful probe.
#[tokio::test]
async fn claude_code_probes_then_initializes() {
    let d = Daemon::start().await;
    let mut mcp = RawStdio::open(&d).await;
    mcp.send_raw(CLAUDE_DISCOVER).await;
    discovered(&answers(&mut mcp, &[1]).await[0]);
    mcp.send_raw(CLAUDE_INITIALIZE).await;
    let init = answers(&mut mcp, &[0]).await.remove(0);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    is_old_era(&mut mcp).await;
}

/// Codex speaks only the `initialize` era; a version the host does not know is answered
/// with one it does (the newest with `initialize`), not refused.
#[tokio::test]
async fn codex_initializes_with_an_unknown_version() {
    let d = Daemon::start().await;
    let mut mcp = RawStdio::open(&d).await;
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{"elicitation":{}},"clientInfo":{"name":"codex-mcp-client","version":"0.1.0"}}}"#;
    mcp.send_raw(init).await;
    let init = answers(&mut mcp, &[0]).await.remove(0);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    is_old_era(&mut mcp).await;
}

/// A probe is answered at once (start-up races of frontends that initialize when the
/// probe is slow never fire): the median of ten probes, each taken from the write to its
/// answer, stays within 5 ms on an idle machine (about 0.3 ms in a debug build); 20 ms is
/// asserted, for a machine loaded by the whole suite. The first probe of a freshly started
/// bridge (which connects to the daemon first) is printed too.
#[tokio::test]
async fn a_probe_is_answered_at_once() {
    let d = Daemon::start().await;
    let spawned = Instant::now();
    let mut mcp = RawStdio::open(&d).await;
    mcp.send_raw(COPILOT_DISCOVER).await;
    discovered(&answers(&mut mcp, &[0]).await[0]);
    eprintln!(
        "first server/discover answered {:?} after the bridge started",
        spawned.elapsed()
    );
    let mut took = Vec::new();
    for id in 100..110u64 {
        let probe = COPILOT_DISCOVER.replacen(r#""id":0"#, &format!(r#""id":{id}"#), 1);
        let start = Instant::now();
        mcp.send_raw(&probe).await;
        discovered(&answers(&mut mcp, &[id]).await[0]);
        took.push(start.elapsed());
    }
    took.sort();
    let median = took[took.len() / 2];
    eprintln!("server/discover answered in {median:?} (median of 10)");
    assert!(median < Duration::from_millis(20), "{took:?}");
}

/// The same openings on `/mcp` (streamable HTTP over the daemon's Unix socket): each
/// message one POST, the probe with the headers a 2026-07-28 client sends with it.
mod http {
    use super::*;

    /// One POST of `body` (exact bytes) to `/mcp`: (status, the session id the head
    /// names, the JSON-RPC answer).
    async fn post(d: &Daemon, body: &str, extra: &[(&str, &str)]) -> (u16, Option<String>, Value) {
        let mut headers = vec![("Accept", "application/json, text/event-stream")];
        headers.extend_from_slice(extra);
        let mut s = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
        headers.push(("Content-Type", "application/json"));
        let answer = common::http::exchange(&mut s, "POST", "/mcp", &headers, body).await;
        let (status, session, text) = (answer.status, answer.header("mcp-session-id"), answer.body);
        let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
                .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
                .unwrap_or(Value::Null)
        });
        (status, session, answer)
    }

    /// The probe, with the new era's headers (and the session's id when it has one).
    async fn probe(d: &Daemon, body: &str, session: Option<&str>) {
        let mut headers = vec![
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ];
        if let Some(id) = session {
            headers.push(("Mcp-Session-Id", id));
        }
        let (status, _, answer) = post(d, body, &headers).await;
        assert_eq!(status, 200, "{answer}");
        discovered(&answer);
    }

    /// `initialize`: answered with 2025-11-25 and a session id.
    async fn initialize(d: &Daemon, body: &str) -> String {
        let (status, session, init) = post(d, body, &[]).await;
        assert_eq!(status, 200, "{init}");
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        session.unwrap_or_else(|| panic!("no Mcp-Session-Id: {init}"))
    }

    /// The session is of the `initialize` era: a list has no new-era fields.
    async fn is_old_era(d: &Daemon, session: &str) {
        let headers = [
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        let (status, _, _) = post(d, INITIALIZED, &headers).await;
        assert_eq!(status, 202);
        let list = r#"{"jsonrpc":"2.0","id":50,"method":"tools/list","params":{}}"#;
        let (status, _, list) = post(d, list, &headers).await;
        assert_eq!(status, 200, "{list}");
        let r = &list["result"];
        assert!(
            r["tools"].as_array().is_some_and(|t| !t.is_empty()),
            "{list}"
        );
        assert!(r.get("resultType").is_none(), "{list}");
        assert!(r.get("ttlMs").is_none(), "{list}");
    }

    #[tokio::test]
    async fn copilot_discovers_then_initializes_after_the_answer() {
        let d = Daemon::start().await;
        probe(&d, COPILOT_DISCOVER, None).await;
        let session = initialize(&d, COPILOT_INITIALIZE).await;
        is_old_era(&d, &session).await;
    }

    #[tokio::test]
    async fn copilot_initializes_while_its_probe_is_in_flight() {
        let d = Daemon::start().await;
        let (_, session) = tokio::join!(
            probe(&d, COPILOT_DISCOVER, None),
            initialize(&d, COPILOT_INITIALIZE)
        );
        is_old_era(&d, &session).await;
    }

    /// The probe after `initialize` carries the session's id: still answered, and the
    /// session stays of the `initialize` era.
    #[tokio::test]
    async fn claude_code_initializes_then_probes() {
        let d = Daemon::start().await;
        let session = initialize(&d, CLAUDE_INITIALIZE).await;
        probe(&d, CLAUDE_DISCOVER, Some(&session)).await;
        is_old_era(&d, &session).await;
    }

    #[tokio::test]
    async fn claude_code_probes_then_initializes() {
        let d = Daemon::start().await;
        probe(&d, CLAUDE_DISCOVER, None).await;
        let session = initialize(&d, CLAUDE_INITIALIZE).await;
        is_old_era(&d, &session).await;
    }

    #[tokio::test]
    async fn codex_initializes_with_an_unknown_version() {
        let d = Daemon::start().await;
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{"elicitation":{}},"clientInfo":{"name":"codex-mcp-client","version":"0.1.0"}}}"#;
        let session = initialize(&d, init).await;
        is_old_era(&d, &session).await;
    }
}
