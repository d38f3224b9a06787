//! Config files that vanish, turn into directories or dangle: the last good config stays
//! live, the problem is reported, and the next good file clears it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");

fn good(dir: &Path) -> Value {
    json!({"mcp_servers": {"fx": {"command": FIXTURE, "env": {"FIXTURE_PID_FILE": dir.join("pids")}}}})
}

async fn status(d: &Daemon) -> Value {
    d.call("config.status", json!({})).await["result"].clone()
}

async fn fx_ready(d: &Daemon) {
    eventually(20, "fx ready", || async {
        d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"] == "ready"
    })
    .await;
}

fn server_pid(d: &Daemon) -> String {
    std::fs::read_to_string(d.dir.path().join("pids")).unwrap()
}

#[tokio::test]
async fn a_deleted_config_keeps_the_last_good_one_and_is_reported() {
    let d = Daemon::start_in(good).await;
    fx_ready(&d).await;
    let pid = server_pid(&d);
    std::fs::remove_file(d.config_path()).unwrap();
    let r = d.call("config.reload", json!({})).await["result"].clone();
    assert_eq!(r["applied"], false, "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("keeping the last good config"),
        "{r}"
    );
    let h = d.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    // The server was not stopped: same process, tools still callable.
    assert_eq!(server_pid(&d), pid);
    let r = d.invoke("mcp_fx_echo", json!({"text": "still"})).await;
    assert_eq!(r["ok"], true, "{r}");
    // The same file back clears the error (identical to the live config).
    write_atomic(&d.config_path(), &good(d.dir.path()));
    eventually(10, "error cleared", || async {
        status(&d).await.get("last_error").is_none()
    })
    .await;
    assert_eq!(d.health().await["status"], "ok");
}

#[tokio::test]
async fn a_dangling_symlink_keeps_the_last_good_config() {
    let d = Daemon::start_in(good).await;
    fx_ready(&d).await;
    let real = d.dir.path().join("real.json");
    std::fs::rename(d.config_path(), &real).unwrap();
    std::os::unix::fs::symlink(d.dir.path().join("gone.json"), d.config_path()).unwrap();
    let r = d.call("config.reload", json!({})).await["result"].clone();
    assert_eq!(r["applied"], false, "{r}");
    assert_eq!(
        d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"],
        "ready"
    );
    // Pointing the link at a good file applies it.
    std::fs::rename(&real, d.dir.path().join("gone.json")).unwrap();
    let r = d.call("config.reload", json!({})).await["result"].clone();
    assert_eq!(r["applied"], true, "{r}");
}

#[tokio::test]
async fn a_directory_then_the_identical_good_file_clears_the_error() {
    let d = Daemon::start_in(good).await;
    fx_ready(&d).await;
    let text = std::fs::read(d.config_path()).unwrap();
    std::fs::remove_file(d.config_path()).unwrap();
    std::fs::create_dir(d.config_path()).unwrap();
    eventually(10, "directory reported", || async {
        status(&d).await.get("last_error").is_some()
    })
    .await;
    assert_eq!(d.health().await["status"], "degraded");
    std::fs::remove_dir(d.config_path()).unwrap();
    let tmp = d.dir.path().join("c.tmp");
    std::fs::write(&tmp, &text).unwrap();
    std::fs::rename(&tmp, d.config_path()).unwrap();
    eventually(10, "error cleared by the identical file", || async {
        status(&d).await.get("last_error").is_none()
    })
    .await;
    assert_eq!(d.health().await["status"], "ok");
}

#[tokio::test]
async fn a_server_that_cannot_start_makes_health_degraded() {
    // An environment too large for exec (E2BIG): the server can never start.
    let big = "x".repeat(200_000);
    let d = Daemon::start_in(|_| {
        json!({"mcp_servers": {"huge": {"command": FIXTURE, "env": {"A": big, "B": big, "C": big, "D": big, "E": big, "F": big, "G": big, "H": big, "I": big, "J": big, "K": big, "L": big}}}})
    })
    .await;
    eventually(20, "huge failed", || async {
        let s = d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"].clone();
        s == "failed" || s == "circuit_open"
    })
    .await;
    let h = d.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(d.http("GET", "/health", "").await.0, 503);
    let last = d.call("mcp.status", json!({})).await["result"]["servers"][0]["last_error"].clone();
    assert!(last.is_string(), "{last}");
}
