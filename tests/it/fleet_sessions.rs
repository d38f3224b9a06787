//! Fleet mode's shared sessions (issue 45): a session lives in the fleet's PostgreSQL, so
//! a session made on one member is read, changed and served by another; and an MCP client
//! (2025-11-25, `Mcp-Session-Id`) whose requests a real HAProxy spreads round robin over
//! two members, with no affinity, keeps one session throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::haproxy::Haproxy;
use crate::common::postgres::Postgres;
use crate::common::{eventually, http, Daemon};
use serde_json::{json, Value};

const KEY: &str = "fleet-key-for-the-tests-0123456789abcdef";
/// The members' bearer token (HAProxy::start adds it; a client of deploy/haproxy.cfg sends it).
pub const TOKEN: &str = "gateway-token-5f4e3d2c1b";

/// The config that makes a daemon whose directory is `dir` a member of the fleet on `pg`,
/// listening on TCP with [`TOKEN`] (written to `dir/token`).
pub fn fleet_config(pg: &Postgres, dir: &std::path::Path) -> Value {
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    json!({
        "store": {"kind": "postgres", "url": pg.url(), "pool": 2},
        "fleet": {"key": KEY, "heartbeat_ms": 200, "lost_after_ms": 3000},
        "listen": {"tcp": "127.0.0.1:0", "token_file": token},
    })
}

async fn member(pg: &Postgres) -> Daemon {
    Daemon::start_in(|dir| fleet_config(pg, dir)).await
}

#[tokio::test]
async fn a_session_made_on_one_member_is_served_by_another() {
    let pg = Postgres::start();
    let a = member(&pg).await;
    let b = member(&pg).await;
    let ws = a.workspace().display().to_string();
    let id = a
        .session(json!({"workspace": ws, "meta": {"made_on": "a"}}))
        .await;
    // B reads it, changes it; A sees the change; both list it.
    let got = b.call("session.get", json!({"id": id})).await;
    assert_eq!(got["result"]["workspace"], ws.as_str(), "{got}");
    assert_eq!(got["result"]["meta"]["made_on"], "a", "{got}");
    let r = b
        .call(
            "session.update",
            json!({"id": id, "meta": {"changed_on": "b"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let got = a.call("session.get", json!({"id": id})).await;
    assert_eq!(got["result"]["meta"]["changed_on"], "b", "{got}");
    assert_eq!(got["result"]["meta"]["made_on"], "a", "{got}");
    for d in [&a, &b] {
        let l = d.call("session.list", json!({"limit": 100})).await;
        let ids: Vec<&str> = l["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["id"].as_str())
            .collect();
        assert!(ids.contains(&id.as_str()), "{l}");
    }
    // A call in that session on B runs in the session's workspace (A's).
    std::fs::write(a.workspace().join("who.txt"), "a's workspace").unwrap();
    std::fs::write(b.workspace().join("who.txt"), "b's workspace").unwrap();
    let r = b
        .call(
            "invoke",
            json!({"name": "read_file", "arguments": {"path": "who.txt"}, "session_id": id}),
        )
        .await;
    assert!(
        r["result"]["result"].to_string().contains("a's workspace"),
        "{r}"
    );
    // Deleted on B: gone on A.
    let r = b.call("session.delete", json!({"id": id})).await;
    assert!(r.get("result").is_some(), "{r}");
    let got = a.call("session.get", json!({"id": id})).await;
    assert!(got.get("error").is_some(), "{got}");
    // Nothing of it in the members' own data dirs: the sled store was never opened.
    for d in [&a, &b] {
        assert!(!d.data_dir().join("sessions").exists());
    }
}

/// The JSON-RPC answer in a `/mcp` answer's body: the body itself, or the event carrying it.
pub fn reply_in(body: &str) -> Option<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(body))
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
}

/// One POST to `/mcp` through the gateway; the answer's JSON-RPC message (the body, or
/// the event that carries it) and the member that served it.
pub async fn mcp(
    gw: &Haproxy,
    session: Option<&str>,
    body: Value,
) -> (http::Answer, Value, String) {
    let tcp = tokio::net::TcpStream::connect(&gw.addr).await.unwrap();
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = vec![
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Authorization", &bearer),
    ];
    if let Some(s) = session {
        headers.push(("Mcp-Session-Id", s));
    }
    let answer = http::exchange(tcp, "POST", "/mcp", &headers, &body.to_string()).await;
    let message = reply_in(&answer.body).unwrap_or(Value::Null);
    let served_by = answer.header("x-served-by").unwrap_or_default();
    (answer, message, served_by)
}

#[tokio::test]
async fn an_mcp_client_through_haproxy_round_robin_keeps_one_session() {
    let pg = Postgres::start();
    let a = member(&pg).await;
    let b = member(&pg).await;
    std::fs::write(a.workspace().join("who.txt"), "a's workspace").unwrap();
    std::fs::write(b.workspace().join("who.txt"), "b's workspace").unwrap();
    let gw = Haproxy::start(&[a.tcp_addr().await, b.tcp_addr().await], TOKEN).await;

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "through-haproxy", "version": "1"}}});
    let (answer, reply, first) = mcp(&gw, None, init).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(reply["result"]["protocolVersion"].is_string(), "{reply}");
    let session = answer
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id: {}", answer.head()));
    let (answer, _, second) = mcp(
        &gw,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert!(answer.status < 300, "{} {}", answer.status, answer.body);

    // The session's workspace is that of the member that made it, wherever a call lands.
    let made_on = if first == "m0" { "a" } else { "b" };
    let mut served = vec![first, second];
    for n in 0..8 {
        let call = json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "who.txt"}}});
        let (answer, reply, by) = mcp(&gw, Some(&session), call).await;
        assert_eq!(answer.status, 200, "call {n} on {by}: {}", answer.body);
        assert_eq!(
            reply["result"]["isError"], false,
            "call {n} on {by}: {reply}"
        );
        assert!(
            reply["result"]
                .to_string()
                .contains(&format!("{made_on}'s workspace")),
            "call {n} on {by}: {reply}"
        );
        served.push(by);
    }
    // Round robin, no affinity: the members alternate.
    assert!(
        served.windows(2).all(|w| w[0] != w[1]) && served.iter().all(|s| s == "m0" || s == "m1"),
        "{served:?}"
    );
    // One host session in the database, and every call's audit record names it and the
    // member that ran it: both members ran calls.
    let audit = "SELECT count(*), count(DISTINCT member), count(DISTINCT record->>'session')
                   FROM toolhost_audit WHERE tool = 'read_file'";
    eventually(10, "the 8 calls in the audit table", || async {
        pg.sql(audit).trim() == "8|2|1"
    })
    .await;
}
