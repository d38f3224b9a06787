//! config.json: layered loading, hot reload and administration (issue 4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::mcp::{pids, status, wait_state};
use common::*;
use serde_json::{json, Value};
use toolhost::client::Subscription;
use toolhost::protocol::ToolsChanged;

fn fixture(dir: &Path, name: &str) -> Value {
    json!({"command": FIXTURE, "env": {"FIXTURE_PID_FILE": dir.join(format!("{name}.pids"))}, "include_tools": ["echo", "add"]})
}

/// A daemon whose config is `cfg(dir)`, with a client subscribed to tools_changed.
async fn start(cfg: impl FnOnce(&Path) -> Value) -> (Daemon, Subscription<ToolsChanged>) {
    let d = Daemon::start_in(cfg).await;
    let sub = d.client().await.subscribe_tools_changed().await.unwrap();
    (d, sub)
}

/// The next tools_changed, as JSON (so assertions compare whole values with `json!`).
async fn next_change(sub: &mut Subscription<ToolsChanged>) -> Value {
    let n = tokio::time::timeout(CLIENT_TIMEOUT, sub.next())
        .await
        .expect("a tools_changed in time")
        .expect("the subscription is open")
        .unwrap();
    serde_json::to_value(n).unwrap()
}

/// A subscription made once server `a` is ready and its tools are served: the notification
/// of their arrival may go out before a subscription made at start exists (it raced in
/// CI), so it is neither awaited nor mistaken for a later change.
async fn subscribed_once_a_serves(d: &Daemon) -> Subscription<ToolsChanged> {
    wait_state(d, "a", "ready").await;
    assert_eq!(
        d.invoke("mcp_a_echo", json!({"text": "up"})).await["output"],
        "up"
    );
    d.client().await.subscribe_tools_changed().await.unwrap()
}

async fn no_change_within(sub: &mut Subscription<ToolsChanged>, ms: u64) {
    if let Ok(n) = tokio::time::timeout(Duration::from_millis(ms), sub.next()).await {
        panic!("unexpected notification: {n:?}");
    }
}

#[tokio::test]
async fn file_edits_apply_as_a_diff_with_one_notification_each() {
    let d = Daemon::start_in(|dir| json!({"mcp_servers": {"a": fixture(dir, "a")}})).await;
    let mut sub = subscribed_once_a_serves(&d).await;
    let a = wait_state(&d, "a", "ready").await;
    let a_pid = pids(&d, "a");
    let dir = d.dir.path().to_path_buf();

    // Add b by atomic rename.
    write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {"a": fixture(&dir, "a"), "b": fixture(&dir, "b")}}),
    );
    let ch = next_change(&mut sub).await;
    assert_eq!(ch["added"], json!(["mcp_b_echo", "mcp_b_add"]));
    assert_eq!(ch["removed"], json!([]));
    assert_eq!(wait_state(&d, "b", "ready").await["state"], "ready");

    // Change only b's filters in place (no rename): no restart, a untouched.
    let b_pid = pids(&d, "b");
    let mut b = fixture(&dir, "b");
    b["include_tools"] = json!(["echo"]);
    std::fs::write(
        d.config_path(),
        serde_json::to_string(&json!({"mcp_servers": {"a": fixture(&dir, "a"), "b": b}})).unwrap(),
    )
    .unwrap();
    let ch = next_change(&mut sub).await;
    assert_eq!(ch["removed"], json!(["mcp_b_add"]));
    assert_eq!(pids(&d, "b"), b_pid, "a filter change restarted b");

    // Change b's command env: b restarts, a does not.
    let mut b2 = b.clone();
    b2["env"]["EXTRA"] = json!("1");
    write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {"a": fixture(&dir, "a"), "b": b2}}),
    );
    eventually(20, "b to restart", || async { pids(&d, "b").len() == 2 }).await;
    wait_state(&d, "b", "ready").await;
    no_change_within(&mut sub, 700).await; // same tools after the restart: nothing to notify
                                           // Calls reach the restarted server, not the retired one.
    assert_eq!(
        d.invoke("mcp_b_echo", json!({"text": "new b"})).await["output"],
        "new b"
    );

    // Remove b: its process is gone and its tools leave in one notification.
    write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {"a": fixture(&dir, "a")}}),
    );
    let ch = next_change(&mut sub).await;
    assert_eq!(ch["removed"], json!(["mcp_b_echo"]));
    for p in pids(&d, "b") {
        eventually(10, "b's process to exit", || async move { !alive(p) }).await;
    }
    let a_now = status(&d, "a").await;
    assert_eq!(pids(&d, "a"), a_pid, "a was restarted");
    assert_eq!(a_now["connected_since"], a["connected_since"]);
    assert_eq!(a_now["restarts"], 0);
    assert!(d.call("mcp.status", json!({"server": "b"})).await["error"]["code"] == -32602);
}

#[tokio::test]
async fn broken_configs_keep_the_old_one_and_recover() {
    let d = Daemon::start_in(|dir| json!({"mcp_servers": {"a": fixture(dir, "a")}})).await;
    let mut sub = subscribed_once_a_serves(&d).await;
    let dir = d.dir.path().to_path_buf();
    let good = json!({"mcp_servers": {"a": fixture(&dir, "a")}});

    let cases: Vec<(&str, String)> = vec![
        ("syntax", "{\"mcp_servers\": {".to_owned()),
        ("both", json!({"mcp_servers": {"a": {"command": "x", "url": "http://localhost/"}}}).to_string()),
        ("type", json!({"mcp_servers": {"a": {"command": "x", "args": ["ok", 3]}}}).to_string()),
        ("unset", json!({"mcp_servers": {"a": {"url": "http://localhost/", "headers": {"A": "${TOOLHOST_TEST_SURELY_UNSET}"}}}}).to_string()),
    ];
    for (what, text) in cases {
        std::fs::write(d.config_path(), text).unwrap();
        let err = d.call("config.reload", json!({})).await["result"].clone();
        assert_eq!(err["applied"], false, "{what}: {err}");
        let st = d.call("config.status", json!({})).await["result"].clone();
        let msg = st["last_error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no error in {st}"));
        match what {
            "both" => assert!(msg.contains("mcp_servers.a"), "{msg}"),
            "type" => assert!(msg.contains("mcp_servers.a.args[1]"), "{msg}"),
            "unset" => assert!(msg.contains("TOOLHOST_TEST_SURELY_UNSET"), "{msg}"),
            _ => {}
        }
        let h = d.call("host.health", json!({})).await["result"].clone();
        assert_eq!(h["status"], "degraded");
        assert!(h["config_error"].is_string());
        // The old config is still live.
        assert_eq!(
            d.invoke("mcp_a_echo", json!({"text": "alive"})).await["output"],
            "alive"
        );
    }
    // Writing the same good config back clears the error (even though it equals the live one).
    write_atomic(&d.config_path(), &good);
    eventually(10, "the error to clear", || async {
        d.call("config.status", json!({})).await["result"]
            .get("last_error")
            .is_none()
    })
    .await;
    assert_eq!(
        d.call("host.health", json!({})).await["result"]["status"],
        "ok"
    );
    no_change_within(&mut sub, 500).await;
}

#[tokio::test]
async fn sighup_reloads_and_restart_only_settings_are_reported() {
    let (d, mut sub) = start(|_| json!({})).await;
    let dir = d.dir.path().to_path_buf();
    // Written without a rename while the watcher runs; SIGHUP must apply it too.
    std::fs::write(
        d.config_path(),
        json!({"mcp_servers": {"h": fixture(&dir, "h")}, "listen": {"socket_mode": "0660"}})
            .to_string(),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let ch = next_change(&mut sub).await;
    assert_eq!(ch["added"], json!(["mcp_h_echo", "mcp_h_add"]));
    let st = d.call("config.status", json!({})).await["result"].clone();
    assert!(
        st["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("listen")),
        "{st}"
    );
    assert!(st["revision"].as_u64().unwrap() >= 2);
}

#[tokio::test]
async fn mcp_add_and_remove_edit_the_file_and_keep_other_keys() {
    let (d, mut sub) = start(|_| json!({"limits": {"default_timeout_ms": 60000}, "workspace": null, "approval": {"mode": "auto"}})).await;
    let dir = d.dir.path().to_path_buf();
    let r = d
        .call(
            "mcp.add",
            json!({"name": "x", "server": fixture(&dir, "x")}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let ch = next_change(&mut sub).await;
    assert_eq!(ch["added"], json!(["mcp_x_echo", "mcp_x_add"]));
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    let keys: Vec<&String> = file.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["limits", "workspace", "approval", "mcp_servers"]);
    assert_eq!(file["limits"]["default_timeout_ms"], 60000);

    // Two concurrent adds both land.
    let (r1, r2) = tokio::join!(
        d.call(
            "mcp.add",
            json!({"name": "y", "server": fixture(&dir, "y")})
        ),
        d.call(
            "mcp.add",
            json!({"name": "z", "server": fixture(&dir, "z")})
        ),
    );
    assert!(
        r1.get("result").is_some() && r2.get("result").is_some(),
        "{r1} {r2}"
    );
    eventually(20, "y and z to be live", || async {
        let m = d.call("list_tools", json!({})).await["result"]["meta"].clone();
        m.get("mcp_y_echo").is_some() && m.get("mcp_z_echo").is_some()
    })
    .await;
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(d.config_path()).unwrap()).unwrap();
    assert_eq!(file["mcp_servers"].as_object().unwrap().len(), 3);

    // Bad blocks and duplicates are refused and the file is unchanged.
    let before = std::fs::read_to_string(d.config_path()).unwrap();
    assert!(d
        .call(
            "mcp.add",
            json!({"name": "x", "server": fixture(&dir, "x")})
        )
        .await
        .get("error")
        .is_some());
    assert!(d
        .call(
            "mcp.add",
            json!({"name": "w", "server": {"command": "a", "url": "http://b/"}})
        )
        .await
        .get("error")
        .is_some());
    assert_eq!(std::fs::read_to_string(d.config_path()).unwrap(), before);

    let r = d.call("mcp.remove", json!({"name": "x"})).await;
    assert!(r.get("result").is_some(), "{r}");
    eventually(20, "x to leave", || async {
        d.call("list_tools", json!({})).await["result"]["meta"]
            .get("mcp_x_echo")
            .is_none()
    })
    .await;
    assert!(d
        .call("mcp.remove", json!({"name": "x"}))
        .await
        .get("error")
        .is_some());
}

#[tokio::test]
async fn mcp_servers_alias_env_overrides_and_cli() {
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let cfg =
        json!({"mcpServers": {"al": fixture(&dir, "al")}, "limits": {"max_output_bytes": 1000000}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_LIMITS__MAX_OUTPUT_BYTES", "2000")])
        .await;
    wait_state(&d, "al", "ready").await;
    let r = d.invoke("bash", json!({"command": "seq 1 3000"})).await;
    assert_eq!(r["truncated"], true, "env override not applied: {r}");

    let cli = |args: &[&str]| {
        let mut c = toolhost(d.dir.path());
        c.arg("--socket")
            .arg(d.socket())
            .arg("--config")
            .arg(d.config_path())
            .args(args);
        c.output()
    };
    let out = cli(&["mcp", "add", "cl", "--", FIXTURE]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_state(&d, "cl", "ready").await;
    let out = cli(&["mcp", "status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cl") && text.contains("ready"), "{text}");
    let out = cli(&["mcp", "reload", "cl"]).await.unwrap();
    assert!(out.status.success());
    let out = cli(&["mcp", "remove", "cl"]).await.unwrap();
    assert!(out.status.success());
    let file = std::fs::read_to_string(d.config_path()).unwrap();
    assert!(
        file.contains("mcpServers") && !file.contains("\"cl\""),
        "{file}"
    );

    // config check validates without starting anything.
    let bad = d.dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"mcp_servers": {"q": {"args": "not-a-list"}}}"#).unwrap();
    let out = toolhost(d.dir.path())
        .args(["config", "check", "--config"])
        .arg(&bad)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mcp_servers.q"), "{text}");
    let out = toolhost(d.dir.path())
        .args(["config", "check", "--config"])
        .arg(d.config_path())
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Configs that could never work are refused on reload with their JSON path, and the old
/// config stays live: duplicate keys, NUL bytes, `=` in an env name, an empty command.
#[tokio::test]
async fn hardened_refusals_name_the_path_and_keep_the_old_config() {
    let d = Daemon::start_in(|dir| json!({"mcp_servers": {"a": fixture(dir, "a")}})).await;
    let mut sub = subscribed_once_a_serves(&d).await;
    let dir = d.dir.path().to_path_buf();
    let a = fixture(&dir, "a");
    let with = |k: &str, v: Value| {
        let mut s = a.clone();
        s[k] = v;
        json!({"mcp_servers": {"a": s}}).to_string()
    };
    let cases = [
        (
            format!(r#"{{"mcpServers": {{"a": {a}, "a": {a}}}}}"#),
            "mcpServers.a: duplicate key \"a\"",
        ),
        (
            with("args", json!(["ok", "b\0"])),
            "mcp_servers.a.args[1]: contains a NUL byte",
        ),
        (
            with("env", json!({"A=B": "1"})),
            "mcp_servers.a.env[\"A=B\"]: environment variable names cannot contain \"=\"",
        ),
        (
            with("command", json!("")),
            "mcp_servers.a.command: expected a non-empty string, found \"\"",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(d.config_path(), &text).unwrap();
        let r = d.call("config.reload", json!({})).await["result"].clone();
        assert_eq!(r["applied"], false, "{text}: {r}");
        let st = d.call("config.status", json!({})).await["result"].clone();
        let msg = st["last_error"].as_str().unwrap_or_default();
        assert!(msg.starts_with(want), "{want}\n  got: {msg}");
        assert_eq!(
            d.invoke("mcp_a_echo", json!({"text": "still"})).await["output"],
            "still"
        );
    }
    no_change_within(&mut sub, 300).await;
}

/// A directory where the config should be is an error of its own, at start and in
/// `config check`, never "no file, so all defaults".
#[tokio::test]
async fn a_directory_as_config_is_refused() {
    let mut d = Daemon::unstarted();
    std::fs::create_dir(d.config_path()).unwrap();
    let mut child = d.spawn_raw(&[]);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the daemon should exit")
        .unwrap();
    assert!(!status.success());
    eventually(5, "the reason in the log", || async {
        d.log().contains("is a directory, not a config file")
    })
    .await;

    let out = toolhost(d.dir.path())
        .args(["config", "check", "--config"])
        .arg(d.config_path())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("is a directory, not a config file"), "{text}");

    let dup = d.dir.path().join("dup.json");
    std::fs::write(&dup, r#"{"limits": {}, "limits": {}}"#).unwrap();
    let out = toolhost(d.dir.path())
        .args(["config", "check", "--config"])
        .arg(&dup)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("limits: duplicate key \"limits\""), "{text}");
}

/// config.json replaced by a FIFO while the daemon runs: the watcher's look at it and
/// `config.reload` both refuse it at once, naming what it is (a blocking read would wait
/// for a writer forever), the old config stays live, and SIGTERM still stops the daemon.
#[tokio::test]
async fn a_fifo_as_config_is_refused_without_blocking() {
    let mut d = Daemon::start_with(Some(json!({"limits": {"max_output_bytes": 4096}}))).await;
    std::fs::remove_file(d.config_path()).unwrap();
    nix::unistd::mkfifo(&d.config_path(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    eventually(10, "the watcher's refusal", || async {
        let st = d.call("config.status", json!({})).await["result"].clone();
        st["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("is not a regular file"))
    })
    .await;
    let r = tokio::time::timeout(Duration::from_secs(5), d.call("config.reload", json!({})))
        .await
        .expect("config.reload answers");
    assert_eq!(r["result"]["applied"], false, "{r}");
    let msg = r["result"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        msg.contains(&format!("config path {}", d.config_path().display()))
            && msg.contains("is not a regular file"),
        "{msg}"
    );
    let out = tokio::process::Command::new(BIN)
        .args(["config", "check", "--config"])
        .arg(d.config_path())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(5), out)
        .await
        .expect("config check answers")
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is not a regular file"),
        "{out:?}"
    );
    let t = std::time::Instant::now();
    assert!(d.stop().await.success());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
