//! Over TCP a caller is known by the name of the bearer token it presents (`listen.tokens`),
//! as the Unix socket knows the uid (issue 40): the name is in its frontend record, its
//! sessions' meta and its audit lines; two tokens are two frontends, a client cannot claim
//! a token's name it did not present.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{eventually, Daemon};
use serde_json::{json, Value};

/// One JSON-RPC call over TCP with `token`: the HTTP status and the reply.
async fn tcp_call(addr: &str, token: &str, method: &str, params: Value) -> (u16, Value) {
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
    let addr = d.tcp_addr();
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
