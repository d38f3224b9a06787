//! Guards (proto-docs/guards.md) against the real daemon: a `rate` rule under 100
//! parallel callers, a `daily` count across a `kill -9`, the built-in loop breaker through
//! the socket and through `toolhost mcp`, reloads that edit a rule or are refused, and the
//! operator's status, reset, CLI and metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{result, toolhost, write_atomic, Daemon};
use serde_json::{json, Value};

/// A config whose only guard besides the built-in loop breaker is `rule`.
fn with_rule(rule: Value) -> Value {
    json!({"guards": [rule]})
}

/// `invoke` of `read_file` with `path` in `session` (if any): the call's `result`.
async fn read(d: &Daemon, session: Option<&str>, path: &str) -> Value {
    let mut params = json!({"name": "read_file", "arguments": {"path": path}});
    if let Some(s) = session {
        params["session_id"] = json!(s);
    }
    let r = d.call("invoke", params).await;
    r["result"]["result"].clone()
}

fn limited(r: &Value) -> bool {
    r["ok"] == false && r["error_kind"] == "limited"
}

/// `guards.status`'s line of `rule`.
async fn rule_status(d: &Daemon, rule: &str) -> Value {
    let s = result(d, "guards.status", json!({})).await;
    s["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == rule)
        .cloned()
        .unwrap_or_else(|| panic!("no rule {rule} in {s}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_rule_lets_exactly_the_allowed_calls_through_100_parallel_callers() {
    let d = Daemon::start_with(Some(with_rule(json!({
        "name": "files", "tools": ["read_file"], "scope": "host",
        "rate": {"calls": 10, "per_s": 3600}
    }))))
    .await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let mut callers = Vec::new();
    for i in 0..100 {
        let client = d.client().await;
        callers.push(tokio::spawn(async move {
            // Different arguments, so the loop breaker has nothing to say.
            let args = json!({"path": "a.txt", "limit": i + 1});
            let p = toolhost::protocol::InvokeParams::new(
                "read_file",
                args.as_object().unwrap().clone(),
            );
            client.invoke(&p).await.unwrap().result
        }));
    }
    let mut passed = 0;
    let mut refused = Vec::new();
    for c in callers {
        let r = serde_json::to_value(c.await.unwrap()).unwrap();
        if limited(&r) {
            refused.push(r);
        } else {
            assert_eq!(r["ok"], true, "{r}");
            passed += 1;
        }
    }
    assert_eq!(passed, 10);
    assert_eq!(refused.len(), 90);
    let r = &refused[0];
    assert_eq!(r["guard"]["rule"], "files");
    assert_eq!(r["guard"]["limit"], "rate");
    assert_eq!(r["guard"]["scope"], "host");
    assert_eq!(r["guard"]["allowed"], 10);
    assert!(r["guard"]["resets_at_ms"].as_u64().unwrap() > 0, "{r}");
    let msg = r["error"].as_str().unwrap();
    assert!(
        msg.contains("guard 'files' allows 10 calls per 3600 s"),
        "{msg}"
    );

    let status = rule_status(&d, "files").await;
    assert_eq!(status["refusals"], 90);
    assert_eq!(status["scopes"][0]["scope"], "host");
    assert_eq!(status["scopes"][0]["rate"]["used"], 10);
    // Full, less what has trickled back since (10 calls an hour).
    assert!(
        status["scopes"][0]["fill"].as_f64().unwrap() > 0.99,
        "{status}"
    );

    // The metric counts them by rule.
    let (code, text) = d.http("GET", "/metrics", "").await;
    assert_eq!(code, 200);
    assert!(
        text.lines()
            .any(|l| l == "toolhost_guard_refusals_total{rule=\"files\"} 90"),
        "{text}"
    );
    assert!(text
        .lines()
        .any(|l| l == "toolhost_guard_refusals_total{rule=\"default-loop\"} 0"));
}

#[tokio::test]
async fn a_daily_count_survives_a_kill_9_restart() {
    let mut d = Daemon::start_with(Some(with_rule(json!({
        "name": "paid", "tools": ["read_file"], "scope": "host",
        "daily": {"limit": 3, "time_zone": "UTC"}
    }))))
    .await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    for i in 0..3 {
        let r = read(&d, None, &format!("./{}a.txt", "./".repeat(i))).await;
        assert_eq!(r["ok"], true, "{r}");
    }
    d.kill9().await;
    d.spawn(&[]).await;
    let status = rule_status(&d, "paid").await;
    assert_eq!(status["scopes"][0]["daily"]["used"], 3, "{status}");
    let r = read(&d, None, "a.txt").await;
    assert!(limited(&r), "{r}");
    assert_eq!(r["guard"]["limit"], "daily");
    assert_eq!(r["guard"]["count"], 4);
    // Refused at midnight UTC: the next one.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let resets = r["guard"]["resets_at_ms"].as_u64().unwrap();
    assert!(resets > now && resets <= now + 86_400_000 && resets % 86_400_000 == 0);
    assert!(
        r["error"].as_str().unwrap().contains("midnight (UTC)"),
        "{r}"
    );

    // The operator's reset clears it, in the store too.
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["guards", "reset", "paid"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    d.kill9().await;
    d.spawn(&[]).await;
    let status = rule_status(&d, "paid").await;
    assert_eq!(status["scopes"][0]["daily"]["used"], 1, "{status}");
}

#[tokio::test]
async fn the_loop_breaker_stops_identical_calls_through_the_socket_but_not_others() {
    let d = Daemon::start().await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let s = d.session(json!({})).await;
    for i in 0..8 {
        let r = read(&d, Some(&s), "a.txt").await;
        assert_eq!(r["ok"], true, "call {i}: {r}");
    }
    let r = read(&d, Some(&s), "a.txt").await;
    assert!(limited(&r), "{r}");
    assert_eq!(r["guard"]["rule"], "default-loop");
    assert_eq!(r["guard"]["limit"], "loop");
    assert_eq!(r["guard"]["count"], 9);
    let msg = r["error"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "This is the 9th identical call to read_file in 60 s; its result will not change"
        ),
        "{msg}"
    );
    // Other arguments, and the same call in another session, pass.
    assert_eq!(read(&d, Some(&s), "./a.txt").await["ok"], true);
    let other = d.session(json!({})).await;
    assert_eq!(read(&d, Some(&other), "a.txt").await["ok"], true);

    // The audit line records the refusal and its rule.
    common::eventually(10, "the refusal in the audit log", || async {
        let recent = result(&d, "audit.recent", json!({})).await;
        recent["records"].as_array().unwrap().iter().any(|l| {
            l["error_kind"] == "limited"
                && l["guard"]["rule"] == "default-loop"
                && l["guard"]["limit"] == "loop"
                && l["session"] == s.as_str()
        })
    })
    .await;
}

#[tokio::test]
async fn the_loop_breaker_reaches_an_mcp_client_as_a_tool_result() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;
    use rmcp::ServiceExt;

    let d = Daemon::start().await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let mut cmd = toolhost(d.dir.path());
    cmd.arg("mcp").arg("--socket").arg(d.socket());
    let mcp = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let call = |path: &str| {
        let params = CallToolRequestParams::new("read_file")
            .with_arguments(json!({"path": path}).as_object().unwrap().clone());
        let peer = mcp.peer().clone();
        async move { serde_json::to_value(peer.call_tool(params).await.unwrap()).unwrap() }
    };
    for i in 0..8 {
        let r = call("a.txt").await;
        assert_ne!(r["isError"], true, "call {i}: {r}");
    }
    let r = call("a.txt").await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("This is the 9th identical call to read_file in 60 s"),
        "{r}"
    );
    assert_ne!(call("./a.txt").await["isError"], true);
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn a_rule_edit_takes_effect_on_reload_and_keeps_its_counts() {
    let rule = |tools: Value| {
        with_rule(json!({
            "name": "budget", "tools": tools, "scope": "host",
            "rate": {"calls": 3, "per_s": 3600}
        }))
    };
    let d = Daemon::start_with(Some(rule(json!(["read_file", "list_dir"])))).await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    assert_eq!(read(&d, None, "./a.txt").await["ok"], true);
    write_atomic(&d.config_path(), &rule(json!(["read_file"])));
    let r = result(&d, "config.reload", json!({})).await;
    assert_eq!(r["applied"], true, "{r}");
    // Two of three were used before the edit: one more passes, then none.
    assert_eq!(read(&d, None, "././a.txt").await["ok"], true);
    assert!(limited(&read(&d, None, "./././a.txt").await));
    // The edit took effect: list_dir is no longer guarded by it.
    for i in 0..3 {
        let r = d
            .invoke("list_dir", json!({"path": ".", "depth": i + 1}))
            .await;
        assert_eq!(r["ok"], true, "{r}");
    }
}

#[tokio::test]
async fn bad_guards_are_refused_with_a_hint_and_the_last_good_ones_keep_running() {
    let good = with_rule(json!({
        "name": "files", "tools": ["read_file"], "scope": "host",
        "rate": {"calls": 1, "per_s": 3600}
    }));
    let d = Daemon::start_with(Some(good)).await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let cases = [
        (
            json!({"name": "x", "rat": {"calls": 1, "per_s": 1}}),
            "guards[0].rat: unknown key (did you mean \"rate\"?)",
        ),
        (
            json!({"name": "x", "rate": {"calls": 0, "per_s": 1}}),
            "guards[0].rate.calls: must be at least 1, found 0",
        ),
        (
            json!({"name": "x", "loop": {"calls": 3, "window_s": 0}}),
            "guards[0].loop.window_s: must be at least 1, found 0",
        ),
        (
            json!({"name": "x", "scope": "sesion", "loop": {"calls": 3, "window_s": 5}}),
            "guards[0].scope: expected one of \"host\", \"frontend\", \"session\", \"workspace\", found \"sesion\" (did you mean \"session\"?)",
        ),
        (
            json!({"name": "x", "daily": {"limit": 3, "time_zone": "Mars/Olympus"}}),
            "guards[0].daily.time_zone: \"Mars/Olympus\" is no time zone this system knows",
        ),
        (json!({"name": "x"}), "guards[0]: holds no limit"),
        (
            json!({"name": "x", "rate": {"calls": 2, "per_s": 0}}),
            "guards[0].rate.per_s",
        ),
        (
            json!({"name": "x", "rate": {"calls": 2}}),
            "guards[0].rate",
        ),
    ];
    for (rule, expected) in cases {
        write_atomic(&d.config_path(), &json!({"guards": [rule]}));
        let r = result(&d, "config.reload", json!({})).await;
        assert_eq!(r["applied"], false, "{r}");
        let text = r["error"].as_str().unwrap();
        assert!(text.contains(expected), "{expected:?} not in {text}");
    }
    // Two rules of one name.
    let same = json!({"name": "x", "loop": {"calls": 3, "window_s": 5}});
    write_atomic(&d.config_path(), &json!({"guards": [same, same]}));
    let r = result(&d, "config.reload", json!({})).await;
    assert!(
        r["error"].as_str().unwrap().contains("guards[1].name"),
        "{r}"
    );

    // The last good config still guards.
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    assert!(limited(&read(&d, None, "./a.txt").await));
    assert_eq!(rule_status(&d, "files").await["refusals"], 1);
}

#[tokio::test]
async fn a_concurrency_rule_queues_calls_past_its_slots_within_their_deadline() {
    let d = Daemon::start_with(Some(with_rule(json!({
        "name": "one-shell", "tools": ["bash"], "scope": "host", "concurrency": {"max": 1}
    }))))
    .await;
    let c = std::sync::Arc::new(d.client().await);
    let start = |id: &'static str, command: &'static str, timeout_ms: u64| {
        let c = c.clone();
        let p = json!({"name": "bash", "call_id": id, "arguments": {"command": command}, "timeout_ms": timeout_ms});
        tokio::spawn(async move { common::call_value(&c, "invoke", &p).await.unwrap() })
    };
    let long = start("long", "sleep 30", 60_000);
    d.wait_for_call("long").await;
    // Waits for the slot until its deadline, then is refused.
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": "true"}, "timeout_ms": 300}),
        )
        .await;
    let r = &r["result"]["result"];
    assert!(limited(r), "{r}");
    assert_eq!(r["guard"]["limit"], "concurrency");
    assert!(
        r["error"].as_str().unwrap().contains("after waiting"),
        "{r}"
    );
    let status = rule_status(&d, "one-shell").await;
    assert_eq!(status["scopes"][0]["concurrency"]["used"], 1, "{status}");
    // A queued call runs once the slot is free.
    let queued = start("queued", "echo ran", 60_000);
    d.wait_for_call("queued").await;
    result(&d, "cancel", json!({"call_id": "long"})).await;
    long.await.unwrap();
    let r = queued.await.unwrap();
    assert_eq!(r["result"]["ok"], true, "{r}");
    assert_eq!(r["result"]["stdout"], "ran\n");
}

#[tokio::test]
async fn status_and_reset_are_admin_methods_and_the_cli_shows_them() {
    let d = Daemon::start().await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let s = d.session(json!({})).await;
    for _ in 0..9 {
        read(&d, Some(&s), "a.txt").await;
    }
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .arg("guards")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("default-loop"), "{text}");
    assert!(text.contains(&format!("session:{s}")), "{text}");

    let r = d
        .call("guards.reset", json!({"rule": "default-lop"}))
        .await
        .to_string();
    assert!(r.contains("did you mean \\\"default-loop\\\""), "{r}");
    let r = result(
        &d,
        "guards.reset",
        json!({"rule": "default-loop", "scope": format!("session:{s}")}),
    )
    .await;
    assert_eq!(r["cleared"], 1);
    assert_eq!(read(&d, Some(&s), "a.txt").await["ok"], true);

    // A process the host started may not lift its own limits.
    let r = d
        .invoke(
            "bash",
            json!({"command": format!("{} --socket {} guards reset default-loop", common::BIN, d.socket().display())}),
        )
        .await;
    assert!(
        r.to_string()
            .contains("Not allowed from a process the host started"),
        "{r}"
    );
}

#[tokio::test]
async fn a_frontend_scope_counts_every_session_of_one_frontend_together() {
    let d = Daemon::start_with(Some(with_rule(json!({
        "name": "per-frontend", "tools": ["read_file"], "scope": "frontend",
        "rate": {"calls": 2, "per_s": 3600}
    }))))
    .await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    let alpha1 = d.session(json!({"meta": {"client": "alpha"}})).await;
    let alpha2 = d
        .session(json!({"meta": {"clientInfo": {"name": "alpha"}}}))
        .await;
    let beta = d.session(json!({"meta": {"client": "beta"}})).await;
    assert_eq!(read(&d, Some(&alpha1), "a.txt").await["ok"], true);
    assert_eq!(read(&d, Some(&alpha2), "a.txt").await["ok"], true);
    let r = read(&d, Some(&alpha1), "./a.txt").await;
    assert!(limited(&r), "{r}");
    // Both sessions are of one frontend (one program naming itself alpha either way).
    let frontend =
        d.call("session.get", json!({"id": alpha2})).await["result"]["meta"]["frontend_id"].clone();
    assert!(
        frontend.as_str().is_some_and(|f| f.starts_with("f_")),
        "{frontend}"
    );
    assert_eq!(
        r["guard"]["scope"],
        format!("frontend:{}", frontend.as_str().unwrap())
    );
    assert_eq!(read(&d, Some(&beta), "a.txt").await["ok"], true);
}

#[tokio::test]
async fn damaged_daily_counters_fail_closed_with_a_health_error_until_reset() {
    let mut d = Daemon::start_with(Some(with_rule(json!({
        "name": "paid", "tools": ["read_file"], "scope": "host",
        "daily": {"limit": 5, "time_zone": "UTC"}
    }))))
    .await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    d.kill9().await;
    {
        // The stored count, overwritten with something no daemon wrote.
        let db = sled::open(d.data_dir().join("sessions")).unwrap();
        let tree = db.open_tree("guards").unwrap();
        assert_eq!(tree.len(), 1);
        tree.insert(b"daily\0paid\0host", b"{\"day\":".as_slice())
            .unwrap();
        db.flush().unwrap();
    }
    d.spawn(&[]).await;
    let health = d.health().await;
    assert_eq!(health["status"], "degraded", "{health}");
    let errors = health["guard_errors"].to_string();
    assert!(
        errors.contains("rule 'paid'") && errors.contains("toolhost guards reset paid"),
        "{health}"
    );
    // Fail closed for daily; the loop breaker (nothing stored) still lets other calls by.
    let r = read(&d, None, "a.txt").await;
    assert!(limited(&r), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("toolhost guards reset paid"),
        "{r}"
    );
    assert_eq!(d.invoke("list_dir", json!({"path": "."})).await["ok"], true);

    result(&d, "guards.reset", json!({"rule": "paid"})).await;
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    assert_eq!(d.health().await["status"], "ok");
}

/// A scope's counters go once its window is over, with no later call to sweep them
/// (issue 48: after a burst of sessions in many workspaces nothing came to).
#[tokio::test]
async fn a_scope_goes_when_its_window_is_over_without_another_call() {
    let d = Daemon::start_with(Some(with_rule(json!({
        "name": "ws",
        "scope": "workspace",
        "loop": {"calls": 5, "window_s": 1}
    }))))
    .await;
    std::fs::write(d.workspace().join("a.txt"), "hello").unwrap();
    assert_eq!(read(&d, None, "a.txt").await["ok"], true);
    let listed = rule_status(&d, "ws").await;
    assert_eq!(listed["scopes"].as_array().unwrap().len(), 1, "{listed}");
    common::eventually(20, "the scope to go after its window", || async {
        rule_status(&d, "ws").await["scopes"]
            .as_array()
            .unwrap()
            .is_empty()
    })
    .await;
}
