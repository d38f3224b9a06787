//! The daemon, its socket and the wire protocol (issue 2): framings, errors, limits,
//! subscriptions, shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use toolhost::protocol::{CancelResult, ErrorKind, InvokeParams};

#[tokio::test]
async fn socket_is_private_and_removed_on_clean_shutdown() {
    let mut d = Daemon::start().await;
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let status = d.stop().await;
    assert!(status.success(), "exit status {status:?}");
    assert!(!d.socket().exists(), "socket file left behind");
}

#[tokio::test]
async fn second_daemon_on_a_live_socket_exits_with_a_clear_message() {
    let d = Daemon::start().await;
    let out = d.command().output().await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another toolhost daemon is already serving"),
        "{err}"
    );
    // The first daemon still serves.
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

#[tokio::test]
async fn stale_socket_file_is_replaced() {
    let mut d = Daemon::unstarted();
    // A socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(d.socket()).unwrap());
    assert!(d.socket().exists());
    d.spawn(&[]).await;
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

#[tokio::test]
async fn health_over_http_get_matches_the_method() {
    let d = Daemon::start().await;
    let (status, body) = d.http("GET", "/health", "").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["tools"], json!(6));
    assert!(v["version"].is_string());
}

#[tokio::test]
async fn http_post_single_and_batch() {
    let d = Daemon::start().await;
    let (status, body) = d
        .http(
            "POST",
            "/",
            r#"{"jsonrpc":"2.0","id":7,"method":"host.health"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["status"], "ok");

    // What `curl -d` sends: a form content type. A JSON-RPC body is still understood.
    let (status, body) = http_request_with(
        &d.socket(),
        "POST",
        "/",
        r#"{"jsonrpc":"2.0","id":8,"method":"host.health"}"#,
        &[("Content-Type", "application/x-www-form-urlencoded")],
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"host.health"},{"jsonrpc":"2.0","id":2,"method":"no.such"}]"#;
    let (status, body) = d.http("POST", "/", batch).await;
    assert_eq!(status, 200);
    let v: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(v.len(), 2);
    let by_id = |id: i64| v.iter().find(|m| m["id"] == id).unwrap().clone();
    assert_eq!(by_id(1)["result"]["status"], "ok");
    assert_eq!(by_id(2)["error"]["code"], -32601);
}

#[tokio::test]
async fn protocol_errors_have_their_codes_and_the_connection_survives() {
    let d = Daemon::start().await;
    let mut c = d.raw_lines().await;
    c.send_line("{this is not json").await;
    assert_eq!(c.recv().await["error"]["code"], -32700);
    c.send_line(r#"{"jsonrpc":"2.0","id":1}"#).await;
    assert_eq!(c.recv().await["error"]["code"], -32600);
    let r = c.call("no.such.method", json!({})).await;
    assert_eq!(r["error"]["code"], -32601);
    let r = c.call("invoke", json!({})).await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("name"),
        "{r}"
    );
    let r = c.call("invoke", json!({"name": 5})).await;
    assert_eq!(r["error"]["code"], -32602);
    let r = c.call("invoke", json!(["read_file"])).await;
    assert_eq!(r["error"]["code"], -32602);
    // A notification gets no reply; the next call is answered on the same connection.
    c.send_line(r#"{"jsonrpc":"2.0","method":"host.health"}"#)
        .await;
    let r = c.call("host.health", json!({})).await;
    assert_eq!(r["result"]["status"], "ok");
}

#[tokio::test]
async fn oversized_request_is_refused_and_the_daemon_keeps_serving() {
    let d = Daemon::start_with(Some(json!({"limits": {"max_request_bytes": 4096}}))).await;
    let mut c = d.raw_lines().await;
    let big = "x".repeat(10_000);
    c.send_line(&json!({"jsonrpc":"2.0","id":1,"method":"invoke","params":{"name":"read_file","arguments":{"path":big}}}).to_string()).await;
    let r = c.recv().await;
    assert_eq!(r["error"]["code"], -32007, "{r}");
    // Same connection still works.
    assert_eq!(
        c.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    // And over HTTP the limit holds too.
    let body = json!({"jsonrpc":"2.0","id":2,"method":"invoke","params":{"name":"x","arguments":{"p":big}}}).to_string();
    let (status, _) = d.http("POST", "/", &body).await;
    assert_eq!(status, 413);
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

#[tokio::test]
async fn unknown_tool_returns_exact_error() {
    let d = Daemon::start().await;
    let r = d
        .call("invoke", json!({"name": "nope", "call_id": "c1"}))
        .await;
    let env = &r["result"];
    assert_eq!(env["call_id"], "c1");
    assert_eq!(env["tool"], "nope");
    assert_eq!(
        env["result"],
        json!({"ok": false, "error": "Unknown tool: nope", "error_kind": "unknown_tool"})
    );
    assert!(env["revision"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn list_tools_formats_meta_and_etag() {
    let d = Daemon::start().await;
    let r = d.call("list_tools", json!({})).await["result"].clone();
    let names = tool_names(&r);
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "patch_file",
            "list_dir",
            "search_files",
            "bash"
        ]
    );
    for t in r["tools"].as_array().unwrap() {
        let keys: Vec<&String> = t.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["type", "function"]);
        assert_eq!(t["type"], "function");
        let f = t["function"].as_object().unwrap();
        assert_eq!(
            f.keys().collect::<Vec<_>>(),
            ["name", "description", "parameters"]
        );
        assert_eq!(f["parameters"]["type"], "object");
        assert!(f["description"]
            .as_str()
            .unwrap()
            .trim_start()
            .starts_with("- "));
    }
    assert_eq!(
        r["meta"]["bash"],
        json!({"source": "builtin", "approval": "command", "hidden": false, "deferrable": false})
    );
    assert_eq!(r["meta"]["read_file"]["approval"], "read_only");
    let again = d.call("list_tools", json!({})).await["result"].clone();
    assert_eq!(again["etag"], r["etag"]);
    let mcp = d.call("list_tools", json!({"format": "mcp"})).await["result"].clone();
    let first = &mcp["tools"][0];
    assert_eq!(first["name"], "read_file");
    assert_eq!(first["inputSchema"]["type"], "object");
    assert!(d.call("list_tools", json!({"format": "yaml"})).await["error"]["code"] == -32602);
}

#[tokio::test]
async fn arguments_are_validated_before_running_and_name_the_field() {
    let d = Daemon::start().await;
    let r = d.invoke("read_file", json!({"path": 42})).await;
    assert_eq!(r["ok"], false);
    assert_eq!(r["error_kind"], "invalid_arguments");
    assert!(r["error"].as_str().unwrap().contains("path"), "{r}");
    let r = d.invoke("write_file", json!({"content": "x"})).await;
    assert_eq!(r["error_kind"], "invalid_arguments");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("arguments.path: missing required field"),
        "{r}"
    );
    let r = d
        .invoke("read_file", json!({"path": "a", "colour": 1}))
        .await;
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("arguments.colour: unexpected field"),
        "{r}"
    );
    assert!(!d.workspace().join("x").exists());
}

#[tokio::test]
async fn file_tools_work_inside_the_workspace_and_refuse_outside() {
    let d = Daemon::start().await;
    let r = d
        .invoke(
            "write_file",
            json!({"path": "a/b.txt", "content": "one\ntwo\nthree\n"}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("a/b.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    let r = d
        .invoke(
            "read_file",
            json!({"path": "a/b.txt", "offset": 2, "limit": 1}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        r["content"].as_str().unwrap().contains("two")
            && !r["content"].as_str().unwrap().contains("three"),
        "{r}"
    );
    let r = d
        .invoke(
            "patch_file",
            json!({"path": "a/b.txt", "old_string": "two", "new_string": "2"}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("a/b.txt")).unwrap(),
        "one\n2\nthree\n"
    );
    for bad in ["../outside.txt", "/etc/passwd"] {
        let r = d.invoke("read_file", json!({"path": bad})).await;
        assert_eq!(r["ok"], false, "{bad}: {r}");
        assert!(r["error"].as_str().unwrap().contains("workspace"), "{r}");
    }
    std::os::unix::fs::symlink("/etc", d.workspace().join("link")).unwrap();
    let r = d.invoke("read_file", json!({"path": "link/passwd"})).await;
    assert_eq!(r["ok"], false, "{r}");
    std::fs::write(d.workspace().join("bin.dat"), [0u8, 1, 2, 3, 0, 255]).unwrap();
    let r = d.invoke("read_file", json!({"path": "bin.dat"})).await;
    assert_eq!(r["ok"], false);
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("binary"),
        "{r}"
    );
}

#[tokio::test]
async fn bash_runs_in_the_workspace_and_times_out_killing_the_group() {
    let d = Daemon::start().await;
    let r = d
        .invoke("bash", json!({"command": "pwd; echo err >&2; exit 3"}))
        .await;
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(
        r["stdout"].as_str().unwrap().trim(),
        d.workspace().canonicalize().unwrap().display().to_string()
    );
    assert_eq!(r["stderr"].as_str().unwrap().trim(), "err");

    let pidfile = d.dir.path().join("bg.pid");
    let cmd = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": cmd}, "timeout_ms": 500}),
        )
        .await;
    let res = &r["result"]["result"];
    assert_eq!(res["ok"], false, "{r}");
    assert_eq!(res["error_kind"], "timeout");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(10, "background sleep to be killed", || async move {
        !alive(pid)
    })
    .await;
}

#[tokio::test]
async fn huge_output_is_truncated_with_a_spill_file_readable_by_read_file() {
    let d = Daemon::start_with(Some(json!({"limits": {"max_output_bytes": 10000}}))).await;
    let r = d.invoke("bash", json!({"command": "seq 1 100000"})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["truncated"], true);
    assert!(serde_json::to_string(&r).unwrap().len() <= 10000);
    let path = r["full_output_path"].as_str().unwrap();
    let full = std::fs::read_to_string(path).unwrap();
    assert!(full.contains("\n100000\n"), "spill file lacks the tail");
    let page = d
        .invoke(
            "read_file",
            json!({"path": path, "offset": 99999, "limit": 2}),
        )
        .await;
    assert_eq!(page["ok"], true, "{page}");
    assert!(
        page["content"].as_str().unwrap().contains("100000"),
        "{page}"
    );
}

#[tokio::test]
async fn cancel_from_another_connection_stops_the_call() {
    let d = Daemon::start().await;
    let a = d.client().await;
    let call = tokio::spawn(async move {
        let mut params = InvokeParams::new("bash", args(json!({"command": "sleep 30"})));
        params.call_id = Some("slow-1".into());
        a.invoke(&params).await
    });
    let b = d.client().await;
    eventually(10, "the call to be in flight", || async {
        b.cancel("slow-1").await.unwrap().cancelled
    })
    .await;
    let r = call.await.unwrap().unwrap();
    assert_eq!(r.call_id, "slow-1");
    assert_eq!(r.result.error_kind, Some(ErrorKind::Cancelled), "{r:?}");
    assert_eq!(
        b.cancel("slow-1").await.unwrap(),
        CancelResult { cancelled: false }
    );
}

#[tokio::test]
async fn subscribe_invoke_streams_and_ends_with_one_result_over_websocket_and_newline() {
    let d = Daemon::start().await;
    let mut ws = d.ws().await;
    let r = ws
        .call(
            "subscribe_invoke",
            json!({"name": "bash", "arguments": {"command": "echo one; sleep 0.2; echo two"}}),
        )
        .await;
    let sub = r["result"].clone();
    assert!(!sub.is_null(), "{r}");
    let mut kinds = Vec::new();
    loop {
        let n = ws.recv().await;
        assert_eq!(n["method"], "invoke_event");
        assert_eq!(n["params"]["subscription"], sub);
        let ev = n["params"]["result"].clone();
        kinds.push(ev["kind"].as_str().unwrap().to_owned());
        if ev["kind"] == "result" {
            assert_eq!(ev["result"]["ok"], true);
            assert_eq!(ev["result"]["stdout"], "one\ntwo\n");
            break;
        }
        assert!(ev["call_id"].is_string());
    }
    assert_eq!(kinds.last().unwrap(), "result");
    assert_eq!(kinds.iter().filter(|k| *k == "result").count(), 1);

    // Over newline, through the library client: no updates, then the one result.
    let c = d.client().await;
    let sub = c
        .subscribe_invoke(&InvokeParams::new("nope", Default::default()))
        .await
        .unwrap();
    let (updates, r) = sub.finish().await.unwrap();
    assert_eq!(updates, vec![]);
    assert_eq!(r.result.error.as_deref(), Some("Unknown tool: nope"));
    assert_eq!(r.result.error_kind, Some(ErrorKind::UnknownTool));
}

#[tokio::test]
async fn closing_the_connection_cancels_a_streaming_call() {
    let d = Daemon::start().await;
    let pidfile = d.dir.path().join("p.pid");
    // Raw lines: dropping them closes the socket at once, with no unsubscribe first.
    let mut c = d.raw_lines().await;
    let cmd = format!("echo $$ > {}; sleep 30", pidfile.display());
    c.call(
        "subscribe_invoke",
        json!({"name": "bash", "arguments": {"command": cmd}}),
    )
    .await;
    eventually(10, "pid file", || async {
        std::fs::metadata(&pidfile)
            .map(|m| m.len() > 0)
            .unwrap_or(false)
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    drop(c);
    eventually(10, "the call's shell to die", || async move { !alive(pid) }).await;
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
}

#[tokio::test]
async fn a_client_that_vanishes_mid_call_does_not_disturb_others() {
    let d = Daemon::start().await;
    let mut a = d.raw_lines().await;
    a.send(
        "invoke",
        json!({"name": "bash", "arguments": {"command": "sleep 0.5; echo late"}}),
    )
    .await;
    a.writer.shutdown().await.unwrap();
    drop(a);
    let (status, _) = d
        .http(
            "POST",
            "/",
            r#"{"jsonrpc":"2.0","id":1,"method":"host.health"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let r = d
        .invoke("bash", json!({"command": "echo still here"}))
        .await;
    assert_eq!(r["stdout"], "still here\n");
}

#[tokio::test]
async fn tools_changed_is_not_sent_without_a_change_and_subscription_works_over_newline() {
    let d = Daemon::start().await;
    let mut sub = d.client().await.subscribe_tools_changed().await.unwrap();
    // Calls that change nothing (and a config reload of an unchanged file) notify nobody.
    d.invoke("read_file", json!({"path": "nope"})).await;
    d.call("config.reload", json!({})).await;
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(300), sub.next()).await;
    assert!(quiet.is_err(), "unexpected notification: {quiet:?}");
    // HTTP cannot carry subscriptions: the answer is a clear error, not a hang.
    let (status, body) = d
        .http(
            "POST",
            "/",
            r#"{"jsonrpc":"2.0","id":1,"method":"subscribe_tools_changed"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], -32601, "{body}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WebSocket"),
        "{body}"
    );
}

#[tokio::test]
async fn rpc_discover_lists_every_method() {
    let d = Daemon::start().await;
    let doc = d.call("rpc.discover", json!({})).await["result"].clone();
    assert!(doc["openrpc"].as_str().unwrap().starts_with("1."));
    let names: Vec<&str> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for m in [
        "list_tools",
        "invoke",
        "subscribe_invoke",
        "cancel",
        "subscribe_tools_changed",
        "session.create",
        "session.get",
        "session.list",
        "session.update",
        "session.delete",
        "session.tools",
        "session.resume",
        "session.refresh_tools",
        "config.status",
        "host.health",
        "rpc.discover",
    ] {
        assert!(
            names.contains(&m),
            "{m} missing from rpc.discover: {names:?}"
        );
    }
    let invoke = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "invoke")
        .unwrap();
    let pnames: Vec<&str> = invoke["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        pnames,
        [
            "name",
            "arguments",
            "session_id",
            "call_id",
            "timeout_ms",
            "approved",
            "sandbox"
        ]
    );
}

#[tokio::test]
async fn cli_reports_no_daemon_with_exit_code_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolhost(dir.path())
        .arg("--socket")
        .arg(dir.path().join("none.sock"))
        .arg("health")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no toolhost daemon"));
}

#[tokio::test]
async fn cli_tools_invoke_call_and_health() {
    let d = Daemon::start().await;
    let cli = |args: &[&str]| {
        let mut c = toolhost(d.dir.path());
        c.arg("--socket").arg(d.socket()).args(args);
        c.output()
    };
    let out = cli(&["tools"]).await.unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("read_file"));
    std::fs::write(d.workspace().join("f.txt"), "hello\n").unwrap();
    let out = cli(&[
        "invoke",
        "read_file",
        "--args",
        r#"{"path":"f.txt"}"#,
        "--json",
    ])
    .await
    .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["ok"], true);
    let out = cli(&["invoke", "read_file", "--args", r#"{"path":"missing.txt"}"#])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = cli(&["invoke", "read_file", "--args", "{oops"])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = cli(&["call", "host.health", "--json"]).await.unwrap();
    assert!(out.status.success());
    let out = cli(&["call", "no.such"]).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = cli(&["health"]).await.unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok"));
}

#[tokio::test]
async fn sigterm_during_a_call_exits_zero_within_the_grace() {
    let mut d = Daemon::start().await;
    let mut c = d.raw_lines().await;
    let id = c
        .send(
            "invoke",
            json!({"name": "bash", "call_id": "long", "arguments": {"command": "sleep 60"}}),
        )
        .await;
    d.wait_for_call("long").await;
    let started = std::time::Instant::now();
    let status = d.stop().await;
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    // The call was answered before the daemon went: cancelled once the grace ran out.
    let reply = c.recv().await;
    assert_eq!(reply["id"], id, "{reply}");
    assert_eq!(reply["result"]["call_id"], "long", "{reply}");
    assert_eq!(
        reply["result"]["result"]["error_kind"], "cancelled",
        "{reply}"
    );
}

#[tokio::test]
async fn tcp_listener_requires_a_bearer_token() {
    let mut d = Daemon::unstarted();
    std::fs::write(
        d.config_path(),
        json!({"listen": {"tcp": "127.0.0.1:0", "socket_mode": "0660"}}).to_string(),
    )
    .unwrap();
    // Without a token the daemon refuses to listen on TCP at all.
    let out = d.command().output().await.unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("without a token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    d.spawn(&[("TOOLHOST_TOKEN", "s3cret")]).await;
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let addr = d.tcp_addr().await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"host.health"}"#;
    let post = |auth: Option<&'static str>| {
        let addr = addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let headers: Vec<(&str, &str)> =
                auth.map(|a| vec![("Authorization", a)]).unwrap_or_default();
            http_on(&mut s, "POST", "/", body, &headers).await
        }
    };
    assert_eq!(post(None).await.0, 401);
    assert_eq!(post(Some("Bearer wrong")).await.0, 401);
    // The refusal names its scheme (RFC 6750), as HTTP clients expect of a 401.
    let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let answer = common::http::exchange(s, "GET", "/health", &[], "").await;
    assert_eq!(answer.status, 401);
    let scheme = answer.header("www-authenticate").unwrap_or_default();
    assert!(scheme.eq_ignore_ascii_case("bearer"), "{}", answer.head());
    let (status, body) = post(Some("Bearer s3cret")).await;
    assert_eq!(status, 200);
    assert!(body.contains(r#""status":"ok""#), "{body}");
}

#[tokio::test]
async fn systemd_socket_activation_uses_the_passed_socket_and_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("activated.sock");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut activate = tokio::process::Command::new("systemd-socket-activate");
    isolate(activate.as_std_mut(), dir.path());
    let mut child = activate
        .arg("-l")
        .arg(&sock)
        .arg(BIN)
        .args(["serve", "--workspace"])
        .arg(&ws)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("TOOLHOST_SOCKET", dir.path().join("unused.sock"))
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("systemd-socket-activate is installed on this machine kind");
    eventually(10, "the activation socket to exist", || async {
        sock.exists()
    })
    .await;
    // The first connection starts the daemon on the passed descriptor.
    let (status, body) = http_request(&sock, "GET", "/health", "").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !dir.path().join("unused.sock").exists(),
        "bound its own socket instead of the passed one"
    );
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(15), child.wait()).await;
}

/// The user's own tools, as `toolhost tool new --user` makes them, in
/// `$XDG_CONFIG_HOME/toolhost/tools` and in `~/.config/toolhost/tools`.
fn users_tools(outer: &Path) -> [(&'static str, std::ffi::OsString); 2] {
    let (xdg, home) = (outer.join("xdg"), outer.join("home"));
    for (name, env) in [
        ("users_xdg_tool", vec![("XDG_CONFIG_HOME", Some(&xdg))]),
        (
            "users_home_tool",
            vec![("XDG_CONFIG_HOME", None), ("HOME", Some(&home))],
        ),
    ] {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["tool", "new", "--user", name]);
        for (var, value) in env {
            match value {
                Some(v) => cmd.env(var, v),
                None => cmd.env_remove(var),
            };
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    assert!(xdg.join("toolhost/tools/users_xdg_tool").is_dir());
    assert!(home.join(".config/toolhost/tools/users_home_tool").is_dir());
    [("XDG_CONFIG_HOME", xdg.into()), ("HOME", home.into())]
}

/// Run by the test below in an environment full of the user's tools; it passes alone too.
#[tokio::test]
#[ignore = "run by a_users_own_tools_do_not_reach_the_daemons_tests_start"]
async fn a_test_daemon_and_cli_see_none_of_the_users_tools() {
    let d = Daemon::start().await;
    let list = d.call("list_tools", json!({"include_hidden": true})).await;
    let custom: Vec<&str> = tool_names(&list["result"])
        .into_iter()
        .filter(|n| list["result"]["meta"][*n]["source"] == "custom")
        .collect();
    assert_eq!(custom, Vec::<&str>::new(), "{list}");
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["tools", "--all"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("read_file"),
        "{out:?}"
    );
    assert!(!text.contains("users_"), "{text}");
}

#[test]
fn a_users_own_tools_do_not_reach_the_daemons_tests_start() {
    let outer = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "daemon::a_test_daemon_and_cli_see_none_of_the_users_tools",
            "--exact",
            "--ignored",
        ])
        .envs(users_tools(outer.path()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A daemon killed with SIGKILL may still be dying (its socket taking connections it will
/// never answer, its lock not yet dropped) when the next one starts on its socket: the
/// next one must wait for it to go, not mistake it for a live daemon and refuse to start.
#[tokio::test]
async fn a_restart_right_after_kill_9_is_never_refused() {
    let mut d = Daemon::start().await;
    for round in 0..32 {
        let mut old = d.child.take().unwrap();
        // Not waited for: the restart races the old daemon's death.
        old.start_kill().unwrap();
        let mut new = d.spawn_raw(&[]);
        tokio::select! {
            status = new.wait() => panic!("restart {round} exited ({status:?}): {}", d.log()),
            () = d.wait_ready() => {}
        }
        let _ = old.wait().await;
        d.child = Some(new);
    }
    let r = d.call("host.health", json!({})).await;
    assert_eq!(r["result"]["status"], "ok", "{r}");
}
