//! Over TCP a caller is known by the name of the bearer token it presents (`listen.tokens`),
//! as the Unix socket knows the uid (issue 40): the name is in its frontend record, its
//! sessions' meta and its audit lines; two tokens are two frontends, a client cannot claim
//! a token's name it did not present.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{eventually, Daemon};
use serde_json::{json, Value};

/// One JSON-RPC call over TCP with `token`: the HTTP status and the reply.
pub(crate) async fn tcp_call(addr: &str, token: &str, method: &str, params: Value) -> (u16, Value) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let (status, text) = common::http_on(
        &mut tcp,
        "POST",
        "/",
        &body,
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .await;
    let reply = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, reply)
}

#[tokio::test]
async fn a_tcp_caller_is_known_by_its_tokens_name_in_frontend_meta_and_audit() {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().join("tokens");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, token: &str| {
        let f = dir.join(name);
        std::fs::write(&f, format!("{token}\n")).unwrap();
        f
    };
    let cfg = json!({"listen": {
        "tcp": "127.0.0.1:0",
        "token_file": file("main", "tok-main-9a8b"),
        "tokens": {"ci-runner": file("ci", "tok-ci-7c6d"), "laptop.2": file("lap", "tok-lap-5e4f")},
    }});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    let addr = d.tcp_addr().await;
    let ws = d.workspace().display().to_string();

    let mut seen = Vec::new();
    for (name, token) in [
        ("ci-runner", "tok-ci-7c6d"),
        ("laptop.2", "tok-lap-5e4f"),
        ("default", "tok-main-9a8b"),
    ] {
        // The same client in the same workspace, and a forged name in its meta.
        let params =
            json!({"workspace": ws, "meta": {"frontend": "agent-x", "tcp_token": "forged"}});
        let (status, r) = tcp_call(&addr, token, "session.create", params).await;
        assert_eq!(status, 200, "{r}");
        let session = &r["result"];
        assert_eq!(session["meta"]["tcp_token"], name, "{r}");
        let frontend = session["meta"]["frontend_id"].as_str().unwrap().to_owned();
        let id = session["id"].as_str().unwrap().to_owned();
        let call_id = format!("call-{name}");
        let call = json!({"name": "list_dir", "arguments": {"path": "."}, "session_id": id, "call_id": call_id});
        let (status, r) = tcp_call(&addr, token, "invoke", call).await;
        assert_eq!(
            (status, &r["result"]["result"]["ok"]),
            (200, &json!(true)),
            "{r}"
        );
        // An update cannot change the name either.
        let update = json!({"id": id, "meta": {"tcp_token": "other"}});
        let (_, r) = tcp_call(&addr, token, "session.update", update).await;
        assert_eq!(r["result"]["meta"]["tcp_token"], name, "{r}");
        seen.push((name, frontend, call_id));
    }
    // Two tokens are two frontends, even for one client in one workspace.
    assert_ne!(seen[0].1, seen[1].1);
    assert_ne!(seen[1].1, seen[2].1);

    let status = d.call("host.status", json!({})).await["result"].clone();
    for (name, frontend, call_id) in &seen {
        let f = status["frontends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == frontend.as_str())
            .unwrap_or_else(|| panic!("no frontend {frontend}: {status}"));
        assert_eq!(f["token"], *name, "{f}");
        let audit = d.data_dir().join("audit.jsonl");
        eventually(10, &format!("the audit line of {call_id}"), || {
            let audit = audit.clone();
            async move {
                std::fs::read_to_string(&audit)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .any(|l| {
                        l["call_id"] == call_id.as_str()
                            && l["peer_token"] == *name
                            && l["frontend"] == frontend.as_str()
                    })
            }
        })
        .await;
    }

    // A client of the Unix socket presented no token: a name it sends is dropped.
    let r = d
        .call(
            "session.create",
            json!({"meta": {"frontend": "agent-x", "tcp_token": "ci-runner"}}),
        )
        .await;
    assert!(r["result"]["meta"].get("tcp_token").is_none(), "{r}");
    // A token that is no one's gets nothing.
    let (status, _) = tcp_call(&addr, "tok-ci-7c6", "host.health", json!({})).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn two_names_for_one_token_are_refused_at_start() {
    let d = Daemon::unstarted();
    let f = d.dir.path().join("one.token");
    std::fs::write(&f, "tok-same-1234").unwrap();
    let g = d.dir.path().join("two.token");
    std::fs::write(&g, " tok-same-1234 \n").unwrap();
    let cfg = json!({"listen": {"tcp": "127.0.0.1:0", "tokens": {"a": f, "b": g}}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let run = d.command().output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the daemon exits")
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"a\" and \"b\" are the same"), "{err}");
}

/// One POST to `/mcp` over TCP with `token`: the status, the session id the answer names,
/// and the JSON-RPC answer (from a JSON body or an SSE stream).
async fn mcp_post(
    addr: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Option<String>, Value) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let bearer = format!("Bearer {token}");
    let mut all = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    let a = common::http::exchange(tcp, "POST", "/mcp", &all, &body.to_string()).await;
    let answer = serde_json::from_str(&a.body).unwrap_or_else(|_| {
        a.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    (a.status, a.header("mcp-session-id"), answer)
}

/// A `list_dir` call's `tools/call` request.
fn list_dir(id: u64, meta: Option<Value>) -> Value {
    let mut params = json!({"name": "list_dir", "arguments": {"path": "."}});
    if let Some(m) = meta {
        params["_meta"] = m;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// The host sessions of MCP client `name`, with the token name each was made with.
async fn sessions_of(d: &Daemon, name: &str) -> Vec<Value> {
    let r = d.call("session.list", json!({"limit": 1000})).await;
    r["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["meta"]["mcp_client"]["name"] == name)
        .cloned()
        .collect()
}

/// Whether the audit log has the line of a `list_dir` call through `/mcp` in session `session`.
fn audited(d: &Daemon, session: &str, token: &str, frontend: &str) -> bool {
    std::fs::read_to_string(d.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|l| {
            l["session"] == session
                && l["tool"] == "list_dir"
                && l["peer_token"] == token
                && l["frontend"] == frontend
        })
}

/// `/mcp` over TCP knows its caller by the token's name as the JSON-RPC door does: in the
/// host session the facade makes (meta `tcp_token`), the frontend record and the audit
/// lines, in both eras; two tokens with one `clientInfo` are two frontends (and, sessionless,
/// two host sessions); a 2025-11-25 session taken up after a restart keeps its name.
#[tokio::test]
async fn mcp_over_tcp_carries_the_tokens_name() {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().join("tokens");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, token: &str| {
        let f = dir.join(name);
        std::fs::write(&f, format!("{token}\n")).unwrap();
        f
    };
    let tokens =
        json!({"ci-runner": file("ci", "tok-ci-7c6d"), "laptop": file("lap", "tok-lap-5e4f")});
    let cfg = json!({"listen": {"tcp": "127.0.0.1:0", "tokens": tokens}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    let addr = d.tcp_addr().await;
    let pairs = [("ci-runner", "tok-ci-7c6d"), ("laptop", "tok-lap-5e4f")];

    // 2025-11-25: initialize, initialized, a call; one MCP session per token.
    let mut old = Vec::new();
    for (name, token) in pairs {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "tcp-old", "version": "1"}}});
        let (status, id, r) = mcp_post(&addr, token, &[], init).await;
        assert_eq!(status, 200, "{r}");
        let id = id.unwrap_or_else(|| panic!("no Mcp-Session-Id: {r}"));
        let h = [
            ("Mcp-Session-Id", id.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(mcp_post(&addr, token, &h, note).await.0, 202);
        let (status, _, r) = mcp_post(&addr, token, &h, list_dir(2, None)).await;
        assert_eq!(
            (status, &r["result"]["isError"]),
            (200, &json!(false)),
            "{r}"
        );
        old.push((name, token, id));
    }
    // 2026-07-28: no session, one call each with the same clientInfo.
    let new_era = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "list_dir"),
    ];
    for (_, token) in pairs {
        let meta = common::new_era::meta("tcp-new", json!({}));
        let (status, id, r) = mcp_post(&addr, token, &new_era, list_dir(3, Some(meta))).await;
        assert_eq!(
            (status, &r["result"]["isError"]),
            (200, &json!(false)),
            "{r}"
        );
        assert!(id.is_none(), "stateless: {r}");
    }

    let status = d.call("host.status", json!({})).await["result"].clone();
    let mut frontends = Vec::new();
    for client in ["tcp-old", "tcp-new"] {
        let sessions = sessions_of(&d, client).await;
        assert_eq!(
            sessions.len(),
            2,
            "one host session per token: {sessions:?}"
        );
        for (name, _) in pairs {
            let s = sessions
                .iter()
                .find(|s| s["meta"]["tcp_token"] == name)
                .unwrap_or_else(|| panic!("no {client} session of {name}: {sessions:?}"));
            let frontend = s["meta"]["frontend_id"].as_str().unwrap().to_owned();
            let f = status["frontends"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["id"] == frontend.as_str())
                .unwrap_or_else(|| panic!("no frontend {frontend}: {status}"));
            assert_eq!(f["token"], name, "{f}");
            let session = s["id"].as_str().unwrap().to_owned();
            eventually(10, &format!("the audit line of {client} as {name}"), || {
                let ok = audited(&d, &session, name, &frontend);
                async move { ok }
            })
            .await;
            frontends.push(frontend);
        }
    }
    frontends.sort();
    frontends.dedup();
    assert_eq!(
        frontends.len(),
        4,
        "two clients × two tokens: {frontends:?}"
    );

    // A restart: the 2025-11-25 sessions are taken up with their token's name.
    let before = sessions_of(&d, "tcp-old").await;
    d.stop().await;
    let cfg = json!({"listen": {"tcp": addr, "tokens": tokens}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    for (name, token, id) in &old {
        let h = [
            ("Mcp-Session-Id", id.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        let (status, _, r) = mcp_post(&addr, token, &h, list_dir(4, None)).await;
        assert_eq!(
            (status, &r["result"]["isError"]),
            (200, &json!(false)),
            "{name}: {r}"
        );
    }
    let after = sessions_of(&d, "tcp-old").await;
    for s in &before {
        let again = after
            .iter()
            .find(|a| a["id"] == s["id"])
            .unwrap_or_else(|| panic!("{s} not taken up: {after:?}"));
        assert_eq!(
            again["meta"]["tcp_token"], s["meta"]["tcp_token"],
            "{again}"
        );
        assert_eq!(
            again["meta"]["frontend_id"], s["meta"]["frontend_id"],
            "{again}"
        );
    }
}
