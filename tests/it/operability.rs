//! Seeing what the host does (issue 13): `/metrics` parsed as Prometheus text, the call
//! audit log with two frontends, `status`/`health` degraded by a server that cannot start
//! (with its stderr cause), and JSON logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The value of the sample `name` whose labels are exactly `labels`.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: HashMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let found: Vec<&prometheus_parse::Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && *s.labels == want)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    match &found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(buckets) => {
            buckets.last().map(|b| b.count).unwrap_or(0.0)
        }
        other => panic!("{name}: unexpected {other:?}"),
    }
}

async fn metrics(d: &Daemon) -> prometheus_parse::Scrape {
    let (status, body) = d.http("GET", "/metrics", "").await;
    assert_eq!(status, 200, "{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

async fn wait_ready(d: &Daemon, server: &str) {
    eventually(20, "the MCP server is ready", || async {
        let r = d.call("mcp.status", json!({"server": server})).await;
        r["result"]["servers"][0]["state"] == "ready"
    })
    .await;
}

#[tokio::test]
async fn metrics_count_calls_by_tool_source_and_outcome() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {"fx": {"command": FIXTURE}}}))).await;
    wait_ready(&d, "fx").await;
    assert_eq!(
        d.invoke("bash", json!({"command": "echo hi"})).await["ok"],
        true
    );
    assert_eq!(
        d.invoke("read_file", json!({"path": "missing.txt"})).await["error_kind"],
        "failed"
    );
    assert_eq!(
        d.invoke("nope", json!({})).await["error_kind"],
        "unknown_tool"
    );
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "x"})).await["ok"],
        true
    );

    let m = metrics(&d).await;
    let calls = |tool: &str, source: &str, server: &str, outcome: &str| {
        sample(
            &m,
            "toolhost_calls_total",
            &[
                ("tool", tool),
                ("source", source),
                ("server", server),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(calls("bash", "builtin", "", "ok"), 1.0);
    assert_eq!(calls("read_file", "builtin", "", "failed"), 1.0);
    // An unknown tool's name is the caller's, not a label (see the test below).
    assert_eq!(calls("", "unknown", "", "unknown_tool"), 1.0);
    assert_eq!(calls("mcp_fx_echo", "mcp", "fx", "ok"), 1.0);
    let latency = |source: &str, server: &str| {
        sample(
            &m,
            "toolhost_call_duration_seconds_count",
            &[("source", source), ("server", server)],
        )
    };
    assert_eq!((latency("builtin", ""), latency("mcp", "fx")), (2.0, 1.0));
    for (state, on) in [
        ("ready", 1.0),
        ("connecting", 0.0),
        ("failed", 0.0),
        ("circuit_open", 0.0),
    ] {
        let v = sample(
            &m,
            "toolhost_mcp_server_state",
            &[("server", "fx"), ("state", state)],
        );
        assert_eq!(v, on, "{state}");
    }
    assert_eq!(
        sample(
            &m,
            "toolhost_mcp_server_restarts_total",
            &[("server", "fx")]
        ),
        0.0
    );
    assert_eq!(sample(&m, "toolhost_calls_in_flight", &[]), 0.0);
    assert_eq!(sample(&m, "toolhost_calls_queued", &[]), 0.0);
    assert_eq!(sample(&m, "toolhost_sessions", &[]), 0.0);
    // Each call above came on its own newline connection; this scrape is the open HTTP one.
    assert!(sample(&m, "toolhost_connections_total", &[("framing", "newline")]) >= 5.0);
    assert_eq!(
        sample(&m, "toolhost_connections_open", &[("framing", "http")]),
        1.0
    );

    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    let m = metrics(&d).await;
    assert_eq!(
        sample(
            &m,
            "toolhost_config_reloads_total",
            &[("result", "applied")]
        ),
        1.0
    );
}

#[tokio::test]
async fn metrics_on_tcp_need_the_bearer_token() {
    let (_d, addr) = Daemon::start_on_tcp("s3cret").await;
    let get = |auth: &'static [(&'static str, &'static str)]| {
        let addr = addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            http_on(&mut s, "GET", "/metrics", "", auth).await
        }
    };
    assert_eq!(get(&[]).await.0, 401);
    let (status, body) = get(&[("Authorization", "Bearer s3cret")]).await;
    assert_eq!(status, 200, "{body}");
    let m = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    // The refused connection may not be closed yet; both were counted.
    assert!(sample(&m, "toolhost_connections_total", &[("framing", "http")]) >= 2.0);
    assert_eq!(sample(&m, "toolhost_calls_in_flight", &[]), 0.0);
}

/// Every series of a scrape: its metric name and labels, values aside.
fn series(scrape: &prometheus_parse::Scrape) -> std::collections::BTreeSet<String> {
    scrape
        .samples
        .iter()
        .map(|s| {
            let mut labels: Vec<String> =
                s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            format!("{}{{{}}}", s.metric, labels.join(","))
        })
        .collect()
}

#[tokio::test]
async fn five_thousand_invented_tool_names_leave_metrics_the_same_size() {
    let d = Daemon::start().await;
    let mut raw = d.raw_lines().await;
    let r = raw
        .call("invoke", json!({"name": "invented_0", "arguments": {}}))
        .await;
    assert_eq!(r["result"]["result"]["error_kind"], "unknown_tool", "{r}");
    let (_, before_text) = d.http("GET", "/metrics", "").await;
    let before = metrics(&d).await;

    // Pipelined on one connection, in rounds small enough that neither side's socket
    // buffer fills while the other is still writing.
    const NAMES: usize = 5_000;
    const ROUND: usize = 250;
    for round in 0..NAMES / ROUND {
        let mut ids = std::collections::HashSet::new();
        for i in 0..ROUND {
            let name = format!("invented_{}", 1 + round * ROUND + i);
            ids.insert(
                raw.send("invoke", json!({"name": name, "arguments": {}}))
                    .await,
            );
        }
        while !ids.is_empty() {
            let m = raw.recv().await;
            assert_eq!(m["result"]["result"]["error_kind"], "unknown_tool", "{m}");
            assert!(ids.remove(&m["id"].as_u64().unwrap()), "{m}");
        }
    }

    let (_, after_text) = d.http("GET", "/metrics", "").await;
    let after = metrics(&d).await;
    assert_eq!(series(&after), series(&before));
    let unknown = [
        ("tool", ""),
        ("source", "unknown"),
        ("server", ""),
        ("outcome", "unknown_tool"),
    ];
    assert_eq!(sample(&after, "toolhost_calls_total", &unknown), 5_001.0);
    assert!(!after_text.contains("invented"), "{after_text}");
    // Only counter digits grew: one series per name would add hundreds of kilobytes.
    let growth = after_text.len().abs_diff(before_text.len());
    assert!(
        growth < 256,
        "{growth} bytes: {before_text}\n---\n{after_text}"
    );
}

#[tokio::test]
async fn a_removed_servers_series_leave_metrics() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {"fx": {"command": FIXTURE}}}))).await;
    wait_ready(&d, "fx").await;
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "x"})).await["ok"],
        true
    );
    let m = metrics(&d).await;
    let echo = [
        ("tool", "mcp_fx_echo"),
        ("source", "mcp"),
        ("server", "fx"),
        ("outcome", "ok"),
    ];
    assert_eq!(sample(&m, "toolhost_calls_total", &echo), 1.0);

    write_atomic(&d.config_path(), &json!({}));
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    // Shown once more with its last count, then gone: nothing is left of the server.
    eventually(
        10,
        "the removed server's series to leave /metrics",
        || async {
            let (_, text) = d.http("GET", "/metrics", "").await;
            !text.contains("fx")
        },
    )
    .await;
}

/// The audit lines of `d`, parsed.
fn audit_lines(d: &Daemon) -> Vec<Value> {
    std::fs::read_to_string(d.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A record without the fields that differ from run to run.
fn stable(mut r: Value) -> Value {
    for k in [
        "time_ms",
        "call_id",
        "duration_ms",
        "output_bytes",
        "peer_pid",
        "frontend",
        "workspace",
    ] {
        r.as_object_mut().unwrap().remove(k);
    }
    r
}

fn sha256_hex(v: &Value) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(serde_json::to_vec(v).unwrap()))
}

#[tokio::test]
async fn audit_log_tells_two_frontends_apart_and_keeps_no_arguments() {
    let d = Daemon::start().await;
    let c = d.client().await;
    for (id, meta) in [
        ("sa", json!({"client": "vim"})),
        ("sb", json!({"clientInfo": {"name": "zed"}})),
    ] {
        let r = d
            .call("session.create", json!({"id": id, "meta": meta}))
            .await;
        assert_eq!(r["result"]["id"], id, "{r}");
    }
    // Frontend one: this test process, on a newline connection.
    let secret_args = json!({"command": "echo secret-value-123"});
    let r = c
        .invoke(&toolhost::protocol::InvokeParams {
            session_id: Some("sa".into()),
            ..toolhost::protocol::InvokeParams::new("bash", args(secret_args.clone()))
        })
        .await
        .unwrap();
    assert!(r.result.ok);
    // Frontend two: the CLI, another process.
    let cli_args = json!({"command": "echo two"});
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["invoke", "bash", "--session", "sb", "--args"])
        .arg(cli_args.to_string())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    eventually(10, "two audit lines", || async {
        audit_lines(&d).len() == 2
    })
    .await;
    let lines = audit_lines(&d);
    let uid = nix::unistd::getuid().as_raw();
    let me = std::fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(lines[0]["peer_pid"], std::process::id());
    assert!(lines[1]["peer_pid"]
        .as_u64()
        .is_some_and(|p| p != u64::from(std::process::id())));
    assert!(lines.iter().all(|l| l["output_bytes"].as_u64() > Some(0)));
    // Two frontends, each named by its id, both in the daemon's workspace.
    let frontend = |l: &Value| l["frontend"].as_str().unwrap_or_default().to_owned();
    assert!(frontend(&lines[0]).starts_with("f_"), "{}", lines[0]);
    assert!(frontend(&lines[1]).starts_with("f_"), "{}", lines[1]);
    assert_ne!(frontend(&lines[0]), frontend(&lines[1]));
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    assert!(
        lines.iter().all(|l| l["workspace"] == ws.as_str()),
        "{lines:?}"
    );
    let expected = |session: &str, client: &str, process: &str, a: &Value| {
        json!({
            "session": session, "peer_uid": uid, "peer_process": process, "client": client,
            "tool": "bash", "source": "builtin", "approval": "allow", "ok": true,
            "args_sha256": sha256_hex(a), "args_bytes": serde_json::to_vec(a).unwrap().len(),
        })
    };
    assert_eq!(
        stable(lines[0].clone()),
        expected("sa", "vim", &me, &secret_args)
    );
    assert_eq!(
        stable(lines[1].clone()),
        expected("sb", "zed", "toolhost", &cli_args)
    );
    let raw = std::fs::read_to_string(d.data_dir().join("audit.jsonl")).unwrap();
    assert!(!raw.contains("secret-value-123"), "arguments leaked: {raw}");

    // `toolhost calls` reads it: filtered by session, as JSON; and as text.
    let calls = |extra: &[&str]| {
        let mut cmd = toolhost(d.dir.path()).into_std();
        cmd.arg("calls")
            .arg("--data-dir")
            .arg(d.data_dir())
            .args(extra);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let json_b: Vec<Value> = calls(&["--session", "sb", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json_b, vec![lines[1].clone()]);
    let text = calls(&[]);
    let text_lines: Vec<&str> = text.lines().collect();
    assert_eq!(text_lines.len(), 2, "{text}");
    assert!(
        text_lines[0].contains("bash") && text_lines[0].contains(" vim ("),
        "{text}"
    );
    assert!(text_lines[1].contains(" zed (toolhost pid "), "{text}");

    // --follow prints what is there, then each call as it finishes.
    let mut follow = toolhost(d.dir.path())
        .args(["calls", "--follow", "--json", "--data-dir"])
        .arg(d.data_dir())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut next = async || {
        let line = tokio::time::timeout(Duration::from_secs(10), out.next_line()).await;
        serde_json::from_str::<Value>(&line.unwrap().unwrap().unwrap()).unwrap()
    };
    assert_eq!(next().await["client"], "vim");
    assert_eq!(next().await["client"], "zed");
    assert_eq!(d.invoke("list_dir", json!({})).await["ok"], true);
    let third = next().await;
    assert_eq!(
        (third["tool"].clone(), third["session"].clone()),
        (json!("list_dir"), Value::Null)
    );
    follow.kill().await.unwrap();

    // A streamed call runs in a subscription task of its own: the peer is still known.
    let mut raw = d.raw_lines().await;
    let sub = raw
        .call(
            "subscribe_invoke",
            json!({"name": "list_dir", "arguments": {}, "call_id": "streamed"}),
        )
        .await;
    assert!(sub["result"].is_u64() || sub["result"].is_string(), "{sub}");
    eventually(10, "the streamed call's audit line", || async {
        audit_lines(&d).iter().any(|l| l["call_id"] == "streamed")
    })
    .await;
    let streamed = audit_lines(&d)
        .into_iter()
        .find(|l| l["call_id"] == "streamed")
        .unwrap();
    assert_eq!(
        (
            streamed["peer_pid"].clone(),
            streamed["peer_process"].clone()
        ),
        (json!(std::process::id()), json!(me))
    );

    // Without a session naming it, an HTTP client is named by its User-Agent.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "invoke",
        "params": {"name": "list_dir", "arguments": {}, "call_id": "via-http"}});
    let (status, _) = http_request_with(
        &d.socket(),
        "POST",
        "/",
        &body.to_string(),
        &[("User-Agent", "my-editor/1.2")],
    )
    .await;
    assert_eq!(status, 200);
    eventually(10, "the HTTP call's audit line", || async {
        audit_lines(&d).iter().any(|l| l["call_id"] == "via-http")
    })
    .await;
    let via_http = audit_lines(&d)
        .into_iter()
        .find(|l| l["call_id"] == "via-http")
        .unwrap();
    assert_eq!(
        (via_http["client"].clone(), via_http["peer_pid"].clone()),
        (json!("my-editor/1.2"), json!(std::process::id()))
    );
}

#[tokio::test]
async fn status_and_health_degraded_by_a_server_that_cannot_start_with_its_stderr_cause() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {
        "broken": {"command": "node", "args": ["/nonexistent/server.js"]}
    }})))
    .await;
    let cause = "Error: Cannot find module '/nonexistent/server.js'";
    eventually(20, "the server's start failure is recorded", || async {
        let r = d.call("mcp.status", json!({"server": "broken"})).await;
        r["result"]["servers"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(cause))
    })
    .await;

    let (status, body) = d.http("GET", "/health", "").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        "degraded"
    );
    let cli = |args: &[&str]| {
        let mut cmd = toolhost(d.dir.path()).into_std();
        cmd.arg("--socket").arg(d.socket()).args(args);
        cmd.output().unwrap()
    };
    assert_eq!(cli(&["health"]).status.code(), Some(1));

    // A call in flight shows in status with its age.
    let c = d.client().await;
    let long = tokio::spawn(async move {
        c.invoke(&toolhost::protocol::InvokeParams {
            call_id: Some("long-one".into()),
            ..toolhost::protocol::InvokeParams::new("bash", args(json!({"command": "sleep 30"})))
        })
        .await
    });
    d.wait_for_call("long-one").await;

    let out = cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["health"]["status"], "degraded");
    assert_eq!(s["config"]["path"], d.config_path().display().to_string());
    assert_eq!(s["data_dir"], d.data_dir().display().to_string());
    let server = &s["servers"][0];
    assert_eq!(server["name"], "broken");
    assert!(
        // Between attempts a failing server is `connecting` again, with its last error.
        ["failed", "circuit_open", "connecting"].contains(&server["state"].as_str().unwrap()),
        "{server}"
    );
    assert!(
        server["last_error"].as_str().unwrap().contains(cause),
        "{server}"
    );
    let call = &s["calls"][0];
    assert_eq!(
        (call["call_id"].clone(), call["tool"].clone()),
        (json!("long-one"), json!("bash"))
    );
    assert!(call["age_ms"].as_u64().is_some());

    let out = cli(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("DEGRADED"), "{text}");
    assert!(text.contains(cause), "{text}");
    assert!(text.contains("long-one"), "{text}");

    assert_eq!(
        d.call("cancel", json!({"call_id": "long-one"})).await["result"]["cancelled"],
        true
    );
    let r = long.await.unwrap().unwrap();
    assert_eq!(
        r.result.error_kind,
        Some(toolhost::protocol::ErrorKind::Cancelled)
    );
}

/// The daemon's stderr as JSON lines, for a start, one call and a stop under `rust_log`.
async fn json_log_run(rust_log: &str) -> Vec<Value> {
    let mut d = Daemon::unstarted();
    d.spawn(&[("TOOLHOST_LOG_FORMAT", "json"), ("RUST_LOG", rust_log)])
        .await;
    assert_eq!(d.invoke("list_dir", json!({})).await["ok"], true);
    d.stop().await;
    eventually(5, "the last log line", || async {
        d.stderr_lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("session store closed cleanly"))
    })
    .await;
    let lines = d.stderr_lines.lock().unwrap().clone();
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn sled_debug(lines: &[Value]) -> usize {
    lines
        .iter()
        .filter(|l| l["target"].as_str().is_some_and(|t| t.starts_with("sled")))
        .filter(|l| l["level"] == "DEBUG" || l["level"] == "TRACE")
        .count()
}

#[tokio::test]
async fn json_logs_and_sled_chatter_only_when_asked_for() {
    let lines = json_log_run("debug,rmcp=warn").await;
    let serving: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "toolhost serving")
        .collect();
    assert_eq!(serving.len(), 1, "{lines:#?}");
    assert_eq!(
        (serving[0]["level"].clone(), serving[0]["target"].clone()),
        (json!("INFO"), json!("toolhost::daemon"))
    );
    assert_eq!(sled_debug(&lines), 0, "{lines:#?}");
    // Named in RUST_LOG, sled's debug lines are there (so the filter above is what hid them).
    let lines = json_log_run("debug,rmcp=warn,sled=debug").await;
    assert!(sled_debug(&lines) > 0, "{lines:#?}");
}

/// The writer gathers lines in batches; a daemon told to stop still writes the lines of
/// the calls it answered before it exits.
#[tokio::test]
async fn a_stopping_daemon_writes_its_last_audit_lines() {
    let mut d = Daemon::start().await;
    let c = d.client().await;
    let r = c
        .invoke(&toolhost::protocol::InvokeParams {
            call_id: Some("last-before-stop".into()),
            ..toolhost::protocol::InvokeParams::new("bash", args(json!({"command": "true"})))
        })
        .await
        .unwrap();
    assert!(r.result.ok);
    drop(c);
    let status = d.stop().await;
    assert!(status.success(), "{status:?}");
    let lines = audit_lines(&d);
    assert!(
        lines.iter().any(|l| l["call_id"] == "last-before-stop"),
        "{lines:?}"
    );
}
