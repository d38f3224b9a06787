//! A process the host started gets no more through the daemon's socket than its call had
//! (issue 32 item 6): a `bash` call's command calls the socket itself and tries to leave
//! its sandbox, approve itself, make a session outside, add an MCP server and reach the MCP
//! facade; each is refused and nothing is written outside, while the same command's plain
//! calls and a client of the user are unaffected. A peer gets its own call's rights: the
//! call's workspace (not the daemon's) and its session's sandbox and approval as a floor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::{eventually, Daemon};
use serde_json::{json, Value};

/// The attacker: one JSON-RPC line per request on one connection, then a POST to `/mcp` on
/// another; prints `{label: reply}` (the `/mcp` entry is the HTTP status line) as JSON.
const ATTACK: &str = r#"
import json, socket, sys
sock, out = sys.argv[1], sys.argv[2]
requests = json.loads(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rw")
replies = {}
for n, (label, method, params) in enumerate(requests):
    own = replies.get("own session", {}).get("result", {}).get("id", "")
    params = json.loads(json.dumps(params).replace("$OWN", own))
    f.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n"); f.flush()
    replies[label] = json.loads(f.readline())
h = socket.socket(socket.AF_UNIX); h.connect(sock)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}})
h.sendall(("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
replies["mcp facade"] = h.recv(100).decode().split("\r\n")[0]
open(out, "w").write(json.dumps(replies))
"#;

/// The requests the attacker sends, as `[label, method, params]`, writing into `outside`.
fn requests(outside: &Path) -> Value {
    let touch = |n: &str| format!("touch {}", outside.join(n).display());
    json!([
        ["sandbox off", "invoke", {"name": "bash", "arguments": {"command": touch("1")}, "sandbox": "off", "approved": true}],
        ["approved", "invoke", {"name": "bash", "arguments": {"command": touch("2")}, "approved": true}],
        ["session sandbox", "session.create", {"sandbox": {"policy": "off"}}],
        ["session outside", "session.create", {"workspace": outside.display().to_string()}],
        ["session approval", "session.create", {"approval": "auto"}],
        ["mcp.add", "mcp.add", {"name": "evil", "server": {"command": "/bin/sh", "args": ["-c", touch("4")]}}],
        ["config.reload", "config.reload", {}],
        ["session.list", "session.list", {}],
        ["sessionless", "invoke", {"name": "list_dir", "arguments": {"path": "."}}],
        ["own session", "session.create", {}],
        ["own call", "invoke", {"name": "list_dir", "arguments": {"path": "."}, "session_id": "$OWN"}],
        ["own bash", "invoke", {"name": "bash", "arguments": {"command": touch("5")}, "session_id": "$OWN"}],
    ])
}

/// Runs the attacker from a `bash` call (`launch` wraps the python command line) and
/// returns its replies.
async fn attack(d: &Daemon, outside: &Path, launch: &str) -> Value {
    attack_in(d, None, &d.workspace(), &requests(outside), launch).await
}

/// Runs the attacker sending `reqs` from a `bash` call in `session` (or none), whose
/// workspace is `ws`.
async fn attack_in(
    d: &Daemon,
    session: Option<&str>,
    ws: &Path,
    reqs: &Value,
    launch: &str,
) -> Value {
    std::fs::write(ws.join("attack.py"), ATTACK).unwrap();
    let out = ws.join("replies.json");
    let reqs = reqs.to_string();
    let python = format!(
        "python3 '{}' '{}' '{}' '{}'",
        ws.join("attack.py").display(),
        d.socket().display(),
        out.display(),
        reqs.replace('\'', r"'\''")
    );
    // The call lasts until the replies are in, so a process it left behind is still its own.
    let command = format!(
        "{}; while [ ! -s '{}' ]; do sleep 0.05; done",
        launch.replace("{}", &python),
        out.display()
    );
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": command}, "session_id": session}),
        )
        .await;
    let r = &r["result"]["result"];
    assert_eq!(r["ok"], true, "{r}");
    eventually(20, "the attacker's replies", || {
        let out = out.clone();
        async move { std::fs::read_to_string(&out).is_ok_and(|t| t.ends_with('}')) }
    })
    .await;
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

fn assert_refused(replies: &Value, outside: &Path) {
    for label in [
        "sandbox off",
        "approved",
        "session sandbox",
        "session outside",
        "session approval",
        "mcp.add",
        "config.reload",
        "session.list",
        "sessionless",
    ] {
        let e = &replies[label]["error"];
        assert_eq!(e["code"], -32008, "{label}: {}", replies[label]);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .starts_with("Not allowed from a process the host started"),
            "{label}: {e}"
        );
    }
    assert!(
        replies["mcp facade"].as_str().unwrap().contains(" 403 "),
        "{}",
        replies["mcp facade"]
    );
    // What a call may do anyway still works, in a session of its own with the call's rights
    // (confined to the workspace): a read runs, a command cannot write outside.
    assert!(
        replies["own session"]["result"]["id"].is_string(),
        "{replies}"
    );
    assert_eq!(
        replies["own call"]["result"]["result"]["ok"], true,
        "{replies}"
    );
    let own_bash = &replies["own bash"]["result"]["result"];
    assert_eq!(own_bash["sandbox"]["status"], "denied", "{replies}");
    let written: Vec<_> = std::fs::read_dir(outside).unwrap().collect();
    assert!(written.is_empty(), "written outside: {written:?}");
}

/// A daemon whose calls run confined (`workspace-write`, strict, confined commands without
/// approval), and a folder outside its workspace.
async fn daemon_and_outside() -> (Daemon, std::path::PathBuf) {
    daemon_with_outside(Some(json!({
        "sandbox": {"policy": "workspace-write"},
        "approval": {"mode": "strict", "sandboxed_commands": "auto"}
    })))
    .await
}

async fn daemon_with_outside(config: Option<Value>) -> (Daemon, std::path::PathBuf) {
    let d = Daemon::start_with(config).await;
    let outside = d.workspace().parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    (d, outside)
}

#[tokio::test]
async fn a_calls_command_cannot_raise_its_rights_through_the_socket() {
    let (d, outside) = daemon_and_outside().await;
    let replies = attack(&d, &outside, "{}").await;
    assert_refused(&replies, &outside);
    // A created session is the command's own: it may call into it.
    let own = replies["own session"]["result"]["id"].as_str().unwrap();
    let r = d.call("session.get", json!({"id": own})).await;
    assert_eq!(
        r["result"]["workspace"],
        d.workspace().canonicalize().unwrap().display().to_string()
    );
    // The call's own rights, not more and not the most restricted.
    assert_eq!(r["result"]["sandbox"]["policy"], "workspace-write", "{r}");
    assert_eq!(r["result"]["approval"], "strict", "{r}");
}

#[tokio::test]
async fn a_peer_gets_its_own_calls_workspace_and_sandbox() {
    let (d, _) = daemon_and_outside().await;
    // The call runs in a session whose workspace is a folder inside the daemon's.
    let sub = d.workspace().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("notes.txt"), "inside").unwrap();
    let session = d
        .call(
            "session.create",
            json!({"workspace": sub.display().to_string()}),
        )
        .await;
    let session = session["result"]["id"].as_str().unwrap().to_owned();
    let daemons = d.workspace().display().to_string();
    let reqs = json!([
        ["daemon's workspace", "session.create", {"workspace": daemons}],
        ["looser sandbox", "session.create", {"sandbox": {"policy": "off"}}],
        ["own session", "session.create", {}],
        ["tools", "list_tools", {"session_id": "$OWN"}],
        ["read inside", "invoke", {"name": "read_file", "arguments": {"path": "notes.txt"}, "session_id": "$OWN"}],
    ]);
    let replies = attack_in(&d, Some(&session), &sub, &reqs, "{}").await;
    for label in ["daemon's workspace", "looser sandbox"] {
        assert_eq!(
            replies[label]["error"]["code"], -32008,
            "{label}: {replies}"
        );
    }
    assert!(replies["tools"]["result"]["tools"].is_array(), "{replies}");
    let read = &replies["read inside"]["result"]["result"];
    assert_eq!(read["ok"], true, "{replies}");
    assert!(read.to_string().contains("inside"), "{read}");
    let own = replies["own session"]["result"]["id"].as_str().unwrap();
    let r = d.call("session.get", json!({"id": own})).await;
    assert_eq!(
        r["result"]["workspace"],
        sub.canonicalize().unwrap().display().to_string()
    );
    // The call's sandbox and approval, not the most restricted a peer of no call gets.
    assert_eq!(r["result"]["sandbox"]["policy"], "workspace-write", "{r}");
    assert_eq!(r["result"]["approval"], "strict", "{r}");
}

#[tokio::test]
async fn an_escaped_process_without_environment_is_still_limited() {
    let (d, outside) = daemon_and_outside().await;
    // A new session and an empty environment: neither the group nor the cookie says it is
    // ours, only its parent chain (re-parented to the daemon, the child subreaper).
    let path = std::env::var("PATH").unwrap();
    let launch =
        format!("setsid -f env -i PATH='{path}' HOME=/nonexistent {{}} </dev/null >/dev/null 2>&1");
    let replies = attack(&d, &outside, &launch).await;
    assert_refused(&replies, &outside);
}

#[tokio::test]
async fn the_users_own_client_is_unaffected() {
    let (d, outside) = daemon_with_outside(None).await;
    let r = d
        .call(
            "session.create",
            json!({"workspace": outside.display().to_string(), "approval": "auto"}),
        )
        .await;
    assert!(r["result"]["id"].is_string(), "{r}");
    let touch = format!("touch {}", outside.join("mine").display());
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": touch}, "approved": true}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    assert!(outside.join("mine").exists());
    let r = d.call("session.list", json!({})).await;
    assert!(r["result"]["sessions"].is_array(), "{r}");
}
