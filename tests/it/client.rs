//! The library client (`toolhost::client`) against the real daemon: many calls in flight
//! on one connection, subscriptions, timeouts, notifications, and the socket it resolves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolhost::protocol::{HealthStatus, InvokeParams, McpAddParams, ToolsChanged};

#[tokio::test]
async fn fifty_calls_in_flight_on_one_connection_each_get_their_own_answer() {
    let d = Daemon::start().await;
    let c = Arc::new(d.client().await);
    let started = Instant::now();
    let calls: Vec<_> = (0..50)
        .map(|n| {
            let c = c.clone();
            tokio::spawn(async move {
                let params = InvokeParams::new(
                    "bash",
                    args(json!({"command": format!("sleep 0.2; echo {n}")})),
                );
                c.invoke(&params).await
            })
        })
        .collect();
    for (n, call) in calls.into_iter().enumerate() {
        let r = call.await.unwrap().unwrap();
        assert!(r.result.ok, "{r:?}");
        assert_eq!(r.result.output.fields["stdout"], json!(format!("{n}\n")));
    }
    // One after another they would take 50 × 0.2 s = 10 s.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[tokio::test]
async fn a_subscription_gets_its_updates_then_one_result() {
    let d = Daemon::start().await;
    let c = d.client().await;
    let params = InvokeParams::new(
        "bash",
        args(json!({"command": "echo one; sleep 0.2; echo two"})),
    );
    let sub = c.subscribe_invoke(&params).await.unwrap();
    let (updates, r) = sub.finish().await.unwrap();
    assert!(!updates.is_empty(), "no updates before the result");
    assert!(
        updates.iter().all(|u| u.call_id == r.call_id),
        "{updates:?}"
    );
    assert!(r.result.ok, "{r:?}");
    assert_eq!(r.result.output.fields["stdout"], json!("one\ntwo\n"));
    // The connection carries on after the subscription ended.
    assert_eq!(c.health().await.unwrap().status, HealthStatus::Ok);
}

#[tokio::test]
async fn tools_changed_arrives_on_a_subscription() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let c = d.client().await;
    let mut sub = c.subscribe_tools_changed().await.unwrap();
    let before = c.list_tools(&Default::default()).await.unwrap();
    let server = args(json!({"command": FIXTURE, "include_tools": ["echo"]}));
    let added = c
        .mcp_add(&McpAddParams {
            name: "fx".into(),
            server,
        })
        .await
        .unwrap();
    assert!(added.ok);
    let n = tokio::time::timeout(Duration::from_secs(30), sub.next())
        .await
        .expect("tools_changed within 30 s")
        .expect("the subscription is open")
        .unwrap();
    let after = c.list_tools(&Default::default()).await.unwrap();
    assert_eq!(
        n,
        ToolsChanged {
            revision: before.revision + 1,
            etag: after.etag,
            added: vec!["mcp_fx_echo".into()],
            removed: vec![],
            changed: vec![],
        }
    );
    assert!(sub.unsubscribe().await.unwrap());
}

#[tokio::test]
async fn an_answer_later_than_the_timeout_is_a_timeout_error_and_the_connection_survives() {
    let d = Daemon::start().await;
    let c = d.client().await.with_timeout(Duration::from_millis(300));
    let params = InvokeParams::new("bash", args(json!({"command": "sleep 3"})));
    let started = Instant::now();
    match c.invoke(&params).await {
        Err(ClientError::Timeout { method, after }) => {
            assert_eq!(
                (method.as_str(), after),
                ("invoke", Duration::from_millis(300))
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(c.health().await.unwrap().status, HealthStatus::Ok);
}

#[tokio::test]
async fn no_daemon_on_a_missing_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.sock");
    match Client::connect(&path).await {
        Err(ClientError::NoDaemon { path: p, .. }) => assert_eq!(p, path),
        Err(e) => panic!("expected NoDaemon, got {e:?}"),
        Ok(_) => panic!("connected to a socket that does not exist"),
    }
}

#[tokio::test]
async fn a_notification_runs_and_nothing_answers() {
    let d = Daemon::start().await;
    let c = d.client().await;
    let params = InvokeParams::new(
        "write_file",
        args(json!({"path": "n.txt", "content": "hi"})),
    );
    c.notify("invoke", &params).await.unwrap();
    let file = d.workspace().join("n.txt");
    eventually(10, "the notified write_file to run", || async {
        std::fs::read_to_string(&file).is_ok_and(|t| t == "hi")
    })
    .await;
    // Nothing answered the notification: the next call gets its own answer.
    assert_eq!(c.health().await.unwrap().status, HealthStatus::Ok);
}

/// `toolhost --config FILE health` finds the daemon through `listen.socket` even when
/// another part of FILE no longer evaluates (an unset `${VAR}`): the CLI reads that one
/// key, it does not load the whole config.
#[tokio::test]
async fn cli_reaches_the_configured_socket_when_the_rest_of_the_config_is_broken() {
    let d = Daemon::unstarted();
    let socket = d.dir.path().join("configured.sock");
    let good = json!({"listen": {"socket": socket}});
    write_atomic(&d.config_path(), &good);
    // Not the harness's launcher: it passes --socket, and this daemon must find its
    // socket in the config.
    let _daemon = d
        .command_without_socket()
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(20, "the daemon on the configured socket", || async {
        Client::connect(&socket).await.is_ok()
    })
    .await;

    let mut broken = good.clone();
    broken["workspace"] = json!("${TOOLHOST_TEST_SURELY_UNSET_VAR}");
    write_atomic(&d.config_path(), &broken);
    // An explicit reload, so the test does not wait for the file watcher to arm.
    let c = Client::connect(&socket).await.unwrap();
    let reload = c.config_reload().await.unwrap();
    assert!(!reload.applied, "{reload:?}");
    assert_eq!(c.health().await.unwrap().status, HealthStatus::Degraded);

    let out = toolhost(d.dir.path())
        .arg("--config")
        .arg(d.config_path())
        .arg("health")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Exit 1 is the daemon's "degraded" (no daemon would be 3).
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("degraded"), "{stdout}");
    assert!(
        stdout.contains("TOOLHOST_TEST_SURELY_UNSET_VAR"),
        "{stdout}"
    );
}
