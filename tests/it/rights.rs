//! A sandboxed call's process gets no more than its call's rights, whatever shape its
//! requests take (issue 46, "session and rights rules leave the transport"): the rights are
//! checked by each method on its parsed params, so params the transport cannot read (an
//! array, a duplicate key, a mistyped sandbox, an escaped key name, a batch) are refused
//! or rejected before anything runs, over the Unix socket as over TCP with a leaked token.
//! A session id is owned by the rights that made it: an id the peer reuses, borrows or gets
//! back after its session was deleted gives it nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{eventually, Daemon};
use serde_json::{json, Value};

/// The attacker, run by a `bash` call: sends each `[label, via, raw]` request as written
/// (`via` is `unix`, one newline connection, or `tcp`, an HTTP POST with the bearer token;
/// `$OWN` becomes the id of the session labelled `own`), or for `wait` waits until the
/// file `raw` exists. After each it writes every reply so far to `out`, as JSON.
const ATTACK: &str = r#"
import json, os, socket, sys, time
sock, out, tcp, token = sys.argv[1:5]
reqs = json.loads(sys.argv[5])
s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rw")
def post(body):
    host, port = tcp.rsplit(":", 1)
    c = socket.create_connection((host, int(port)))
    body = body.encode()
    c.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    data = b""
    while True:
        chunk = c.recv(65536)
        if not chunk: break
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    if b"chunked" in head.lower():
        body = b""
        while True:
            size, rest = rest.split(b"\r\n", 1)
            n = int(size, 16)
            if n == 0: break
            body += rest[:n]; rest = rest[n + 2:]
        rest = body
    return json.loads(rest)
replies = {}
for label, via, raw in reqs:
    own = replies.get("own", {}).get("result", {}).get("id", "")
    raw = raw.replace("$OWN", own)
    if via == "wait":
        while not os.path.exists(raw): time.sleep(0.05)
        continue
    if via == "tcp":
        replies[label] = post(raw)
    else:
        f.write(raw + "\n"); f.flush()
        replies[label] = json.loads(f.readline())
    open(out + ".tmp", "w").write(json.dumps(replies)); os.rename(out + ".tmp", out)
open(out + ".done", "w").write("")
"#;

const TOKEN: &str = "tok-rights-5e6f";

/// A daemon whose calls run confined (`workspace-write`, network allowed so TCP is
/// reachable, strict with confined commands run without approval), listening on TCP
/// too; and a folder outside its workspace.
async fn daemon() -> (Daemon, PathBuf) {
    let mut d = Daemon::unstarted();
    let token_file = d.dir.path().join("listen.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let cfg = json!({
        "listen": {"tcp": "127.0.0.1:0", "token_file": token_file},
        "sandbox": {"policy": "workspace-write", "network": "allow"},
        "approval": {"mode": "strict", "sandboxed_commands": "auto"},
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    let outside = d.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    (d, outside)
}

/// One JSON-RPC request line.
fn rpc(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// Starts the attacker with `reqs` in a `bash` call of session `session` (in the
/// background: the returned task ends with the call, with its result); its replies file.
async fn launch(
    d: &Daemon,
    session: &str,
    reqs: &Value,
) -> (tokio::task::JoinHandle<Value>, PathBuf) {
    let ws = d.workspace();
    std::fs::write(ws.join("attack.py"), ATTACK).unwrap();
    let out = ws.join("replies.json");
    let python = format!(
        "python3 attack.py '{}' '{}' '{}' '{TOKEN}' '{}'",
        d.socket().display(),
        out.display(),
        d.tcp_addr().await,
        reqs.to_string().replace('\'', r"'\''")
    );
    let params = json!({
        "name": "bash",
        "arguments": {"command": python},
        "session_id": session,
    });
    let c = d.client().await;
    let task = tokio::spawn(async move {
        let r = common::call_value(&c, "invoke", &params).await.unwrap();
        r["result"].clone()
    });
    (task, out)
}

async fn replies(out: &Path, label: &str) -> Value {
    eventually(30, &format!("the attacker's reply {label}"), || async {
        std::fs::read_to_string(out)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|r| r.get(label).is_some())
    })
    .await;
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {reply}"))
}

#[tokio::test]
async fn malformed_or_odd_params_from_a_sandboxed_call_get_it_nothing_on_either_door() {
    let (d, outside) = daemon().await;
    let users = d
        .session(json!({"workspace": d.workspace(), "approval": "strict",
            "sandbox": {"policy": "workspace-write", "network": "allow"}}))
        .await;
    let touch = |n: &str| format!("touch {}", outside.join(n).display());
    let bash = |n: &str, extra: &str| {
        format!(
            r#"{{"name":"bash","arguments":{{"command":"{}"}},"session_id":"$OWN"{extra}}}"#,
            touch(n)
        )
    };
    let reqs = json!([
        [
            "own",
            "unix",
            rpc(
                "session.create",
                r#"{"id":"peer's  odd id ☃","approval":"strict"}"#
            )
        ],
        [
            "array params",
            "unix",
            rpc("session.create", r#"[{"sandbox":{"policy":"off"}}]"#)
        ],
        [
            "duplicate key",
            "unix",
            rpc(
                "session.create",
                r#"{"sandbox":{"policy":"read-only"},"sandbox":{"policy":"off"}}"#
            )
        ],
        [
            "mistyped sandbox",
            "unix",
            rpc("session.create", r#"{"sandbox":"off"}"#)
        ],
        [
            "control id",
            "unix",
            rpc("session.create", r#"{"id":"a\u0007b"}"#)
        ],
        [
            "users id",
            "unix",
            rpc("session.create", &format!(r#"{{"id":"{users}"}}"#))
        ],
        [
            "in users session",
            "unix",
            rpc(
                "invoke",
                &format!(
                    r#"{{"name":"list_dir","arguments":{{"path":"."}},"session_id":"{users}"}}"#
                )
            )
        ],
        [
            "update users",
            "unix",
            rpc(
                "session.update",
                &format!(r#"{{"id":"{users}","meta":{{"x":1}}}}"#)
            )
        ],
        [
            "escaped key",
            "unix",
            rpc("invoke", &bash("1", r#","appr\u006fved":true"#))
        ],
        [
            "escaped override",
            "unix",
            rpc("invoke", &bash("2", r#","\u0073andbox":"off""#))
        ],
        [
            "loosen own",
            "unix",
            rpc(
                "session.update",
                r#"{"id":"$OWN","sandbox":{"policy":"off"}}"#
            )
        ],
        [
            "own approval",
            "unix",
            rpc("session.update", r#"{"id":"$OWN","approval":"auto"}"#)
        ],
        [
            "subscribed",
            "unix",
            rpc("subscribe_invoke", &bash("3", r#","approved":true"#))
        ],
        [
            "batch",
            "unix",
            format!(
                "[{},{}]",
                rpc("invoke", &bash("4", r#","sandbox":"off","approved":true"#)),
                rpc("session.create", r#"{"workspace":"/"}"#)
            )
        ],
        ["own call", "unix", rpc("invoke", &bash("5", ""))],
        [
            "tcp create",
            "tcp",
            rpc(
                "session.create",
                r#"{"sandbox":{"network":"allow","policy":"off"}}"#
            )
        ],
        [
            "tcp invoke",
            "tcp",
            rpc("invoke", &bash("6", r#","sandbox":"off","approved":true"#))
        ],
        [
            "tcp sessionless",
            "tcp",
            rpc("invoke", r#"{"name":"list_dir","arguments":{"path":"."}}"#)
        ],
        [
            "tcp users",
            "tcp",
            rpc("list_tools", &format!(r#"{{"session_id":"{users}"}}"#))
        ],
        ["tcp list", "tcp", rpc("session.list", "{}")],
        ["tcp own", "tcp", rpc("session.get", r#"{"id":"$OWN"}"#)],
    ]);
    let (task, out) = launch(&d, &users, &reqs).await;
    let r = replies(&out, "tcp own").await;
    let call = task.await.unwrap();
    assert_eq!(call["ok"], true, "{call}");

    // Refused as beyond its rights (the method read the params, then said no).
    for label in [
        "in users session",
        "update users",
        "escaped key",
        "escaped override",
        "loosen own",
        "own approval",
        "subscribed",
        "tcp create",
        "tcp invoke",
        "tcp sessionless",
        "tcp users",
        "tcp list",
    ] {
        assert_eq!(code(&r[label]), -32008, "{label}: {}", r[label]);
    }
    // Params that do not read are invalid, for a peer as for anyone; nothing ran.
    for label in [
        "array params",
        "duplicate key",
        "mistyped sandbox",
        "control id",
    ] {
        assert_eq!(code(&r[label]), -32602, "{label}: {}", r[label]);
    }
    // The user's session id is taken: not the peer's.
    assert_eq!(code(&r["users id"]), -32602, "{}", r["users id"]);
    let batch = r["batch"].as_array().unwrap();
    assert_eq!(batch.len(), 2, "{batch:?}");
    for reply in batch {
        assert_eq!(code(reply), -32008, "{reply}");
    }

    // Its own session (an odd id is still an id) keeps the call's rights: its command ran
    // confined, and TCP reached the same session as the same process.
    let own = r["own"]["result"]["id"].as_str().unwrap();
    assert_eq!(own, "peer's  odd id ☃");
    assert_eq!(r["tcp own"]["result"]["id"], own, "{}", r["tcp own"]);
    let s = d.call("session.get", json!({"id": own})).await["result"].clone();
    assert_eq!(
        (&s["sandbox"]["policy"], &s["approval"]),
        (&json!("workspace-write"), &json!("strict")),
        "{s}"
    );
    let own_call = &r["own call"]["result"]["result"];
    assert_ne!(own_call["exit_code"], 0, "{own_call}");
    let written: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert!(written.is_empty(), "written outside: {written:?}");
    // The user's session is as it was.
    let u = d.call("session.get", json!({"id": users})).await["result"].clone();
    assert_eq!(u["approval"], "strict", "{u}");
    assert!(u["meta"].get("x").is_none(), "{u}");
}

#[tokio::test]
async fn a_session_id_the_peer_once_owned_is_not_its_own_once_the_user_reuses_it() {
    let (d, outside) = daemon().await;
    let users = d
        .session(json!({"workspace": d.workspace(), "approval": "auto",
            "sandbox": {"policy": "workspace-write", "network": "allow"}}))
        .await;
    let go = d.dir.path().join("go");
    let touch = format!("touch {}", outside.join("x").display());
    let reqs = json!([
        [
            "own",
            "unix",
            rpc("session.create", r#"{"id":"reused","ephemeral":true}"#)
        ],
        ["wait", "wait", go.display().to_string()],
        [
            "reused call",
            "unix",
            rpc(
                "invoke",
                &format!(
                    r#"{{"name":"bash","arguments":{{"command":"{touch}"}},"session_id":"reused"}}"#
                )
            )
        ],
        [
            "reused get",
            "tcp",
            rpc("session.get", r#"{"id":"reused"}"#)
        ],
        [
            "reused delete",
            "unix",
            rpc("session.delete", r#"{"id":"reused"}"#)
        ],
    ]);
    let (task, out) = launch(&d, &users, &reqs).await;
    let r = replies(&out, "own").await;
    assert_eq!(r["own"]["result"]["id"], "reused", "{r}");
    // The user ends the peer's session and makes one of their own under the same id, with
    // rights the peer's call does not have.
    let deleted = d.call("session.delete", json!({"id": "reused"})).await;
    assert_eq!(deleted["result"]["deleted"], true, "{deleted}");
    let again = d
        .call(
            "session.create",
            json!({"id": "reused", "approval": "auto", "sandbox": {"policy": "off"}}),
        )
        .await;
    assert_eq!(again["result"]["id"], "reused", "{again}");
    std::fs::write(&go, "").unwrap();
    let r = replies(&out, "reused delete").await;
    assert!(task.await.unwrap()["ok"] == true);
    for label in ["reused call", "reused get", "reused delete"] {
        assert_eq!(code(&r[label]), -32008, "{label}: {}", r[label]);
    }
    assert!(!outside.join("x").exists());
    // The user's session outlived the peer's connection (which owned the ephemeral id it
    // made, not the session made later under it).
    let s = d.call("session.get", json!({"id": "reused"})).await;
    assert_eq!(s["result"]["sandbox"]["policy"], "off", "{s}");
}
