//! Checkpoints as frontends meet them (proto-docs/checkpoints.md): on or off per session
//! and per profile, and a store confined commands cannot read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Daemon;
use serde_json::{json, Value};

async fn bash_in(d: &Daemon, session: &str, call_id: &str, command: &str) -> Value {
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": command}, "session_id": session, "call_id": call_id}),
        )
        .await;
    r["result"]["result"].clone()
}

async fn recorded_calls(d: &Daemon) -> Vec<String> {
    let t = d.call("checkpoint.list", json!({"limit": 100})).await;
    let mut ids: Vec<String> = t["result"]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{t}"))
        .iter()
        .filter_map(|e| e["call_id"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn checkpoints_are_switched_per_session_and_per_profile() {
    let d = Daemon::start_with(Some(json!({
        "checkpoint": {"enabled": true},
        "profiles": {"scratch": {"checkpoint": {"enabled": false}}}
    })))
    .await;
    let ws = d.workspace();
    let plain = d.session(json!({"workspace": &ws})).await;
    let off = d
        .session(json!({"workspace": &ws, "meta": {"checkpoint": {"enabled": false}}}))
        .await;
    let scratch = d
        .session(json!({"workspace": &ws, "profile": "scratch"}))
        .await;
    let scratch_on = d
        .session(json!({"workspace": &ws, "profile": "scratch", "meta": {"checkpoint": {"enabled": true}}}))
        .await;
    for (s, id) in [
        (&plain, "plain"),
        (&off, "off"),
        (&scratch, "scratch"),
        (&scratch_on, "scratch-on"),
    ] {
        let r = bash_in(&d, s, id, &format!("echo {id} > {id}.txt")).await;
        assert_eq!(r["ok"], true, "{r}");
    }
    assert_eq!(recorded_calls(&d).await, ["plain", "scratch-on"]);

    // Turned on by a session's meta where config leaves them off.
    let d = Daemon::start_with(Some(json!({"checkpoint": {"enabled": false}}))).await;
    let ws = d.workspace();
    let on = d
        .session(json!({"workspace": &ws, "meta": {"checkpoint": {"enabled": true}}}))
        .await;
    let plain = d.session(json!({"workspace": &ws})).await;
    bash_in(&d, &plain, "default-off", "echo a > a.txt").await;
    bash_in(&d, &on, "meta-on", "echo b > b.txt").await;
    assert_eq!(recorded_calls(&d).await, ["meta-on"]);
    // `session.update` switches them off again.
    let r = d
        .call(
            "session.update",
            json!({"id": &on, "meta": {"checkpoint": {"enabled": false}}}),
        )
        .await;
    assert!(r["error"].is_null(), "{r}");
    bash_in(&d, &on, "meta-off", "echo c > c.txt").await;
    assert_eq!(recorded_calls(&d).await, ["meta-on"]);
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn a_sandboxed_bash_cannot_read_the_checkpoint_store() {
    assert!(
        common::landlock_abi() >= 1,
        "this test needs Landlock (the sandbox's file rules)"
    );
    let d = Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await;
    let ws = d.workspace();
    std::fs::write(ws.join("secret.txt"), "a private line\n").unwrap();
    let s = d
        .session(json!({"workspace": &ws, "sandbox": {"policy": "workspace-write"}}))
        .await;
    let r = bash_in(&d, &s, "w", "echo changed > secret.txt").await;
    assert_eq!(r["ok"], true, "{r}");
    let store = d.data_dir().join("checkpoints");
    let files = files_under(&store);
    let timeline = files
        .iter()
        .find(|p| p.ends_with("timeline.jsonl"))
        .unwrap_or_else(|| panic!("no timeline in {files:?}"));
    let object = files
        .iter()
        .find(|p| p.to_string_lossy().contains("/objects/"))
        .unwrap_or_else(|| panic!("no objects in {files:?}"));
    // Landlock lets a run list the directories on the way to a hidden path (and names
    // beneath them: proto-docs/sandbox.md), never read what they hold.
    let key_file = timeline.with_file_name("workspace");
    for (i, target) in [timeline, object, &key_file].into_iter().enumerate() {
        let r = bash_in(
            &d,
            &s,
            &format!("read-{i}"),
            &format!("cat '{}'", target.display()),
        )
        .await;
        assert_ne!(r["exit_code"], 0, "{} was read: {r}", target.display());
        assert!(
            r["stderr"].as_str().unwrap().contains("Permission denied"),
            "{r}"
        );
        assert!(!r["stdout"].as_str().unwrap().contains("private"), "{r}");
    }
    // The workspace itself stays readable.
    let r = bash_in(&d, &s, "ok", "cat secret.txt").await;
    assert_eq!(r["stdout"], "changed\n", "{r}");
}
