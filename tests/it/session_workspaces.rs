//! A session's workspace brings its project's tools, skills and commands for as long as a
//! session is in it (issue 48): when its last session goes, they go, and so do the
//! daemon's watches on its folders, so a daemon does not grow with every project ever
//! opened. Watches are read from the kernel (`/proc/<pid>/fdinfo`, the inotify watches).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::skills::{front, write_skill};
use common::{eventually, result, write_atomic, Daemon};
use serde_json::{json, Value};

/// Writes project `name` under the daemon's dir: a tool `<name>_hello`, a skill
/// `<name>-deploy` and a command `<name>-release`; returns its folder (canonical).
fn project(d: &Daemon, name: &str) -> PathBuf {
    let root = d.subdir(name);
    let tool = root.join(format!(".toolhost/tools/{name}_hello"));
    std::fs::create_dir_all(&tool).unwrap();
    let run = tool.join("run.sh");
    std::fs::write(&run, "#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = json!({
        "name": format!("{name}_hello"),
        "description": "- says hello from this project",
        "command": ["./run.sh"],
        "approval": "read_only",
    });
    write_atomic(&tool.join("tool.json"), &manifest);
    let skill = format!("{name}-deploy");
    write_skill(
        &root.join(".toolhost/skills"),
        &skill,
        &front(&skill, "Deploys this project."),
        "Run make deploy.\n",
        &[],
    );
    let commands = root.join(".toolhost/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join(format!("{name}-release.md")), "Release.\n").unwrap();
    root
}

async fn names(d: &Daemon, method: &str, key: &str) -> Vec<String> {
    let list = result(d, method, json!({})).await;
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("{method}: {list}"))
        .iter()
        .map(|t| {
            let name = t["name"].as_str().or(t["function"]["name"].as_str());
            name.unwrap().to_owned()
        })
        .collect()
}

async fn tools(d: &Daemon) -> Vec<String> {
    names(d, "list_tools", "tools").await
}

async fn commands(d: &Daemon) -> Vec<String> {
    names(d, "list_commands", "commands").await
}

/// The inodes the daemon's inotify watches are on, from the kernel.
fn watched_inodes(pid: i32) -> Vec<u64> {
    let mut out = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(text) = std::fs::read_to_string(fd.unwrap().path()) else {
            continue;
        };
        for line in text.lines().filter(|l| l.starts_with("inotify ")) {
            let ino = line
                .split(' ')
                .find_map(|f| f.strip_prefix("ino:"))
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            out.extend(ino);
        }
    }
    out
}

/// The inodes of `root` and every folder beneath it.
fn folder_inodes(root: &Path) -> Vec<u64> {
    let mut out = vec![std::fs::metadata(root).unwrap().ino()];
    for e in std::fs::read_dir(root).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(folder_inodes(&e.path()));
        }
    }
    out
}

/// Whether the daemon watches `root` or any folder beneath it.
fn watches_any_of(d: &Daemon, root: &Path) -> bool {
    let watched = watched_inodes(d.pid());
    folder_inodes(root).iter().any(|i| watched.contains(i))
}

async fn delete(d: &Daemon, id: &str) {
    let r = d.call("session.delete", json!({"id": id})).await;
    assert_eq!(r["result"]["deleted"], true, "{r}");
}

#[tokio::test]
async fn a_workspaces_items_and_watches_stay_while_a_session_is_in_it_and_go_with_the_last() {
    let d = Daemon::start().await;
    let w = project(&d, "w");
    let other = project(&d, "other");
    d.trust(&[d.dir.path().as_os_str()]).await;
    assert!(!watches_any_of(&d, &w));
    let mut skills = d.subscribed("subscribe_skills_changed").await;

    let a = d.session(json!({"workspace": w})).await;
    let b = d.session(json!({"workspace": w})).await;
    // Scanned before the session is answered.
    assert!(tools(&d).await.contains(&"w_hello".to_owned()));
    let listed = commands(&d).await;
    assert!(listed.contains(&"w-release".to_owned()), "{listed:?}");
    let own = result(&d, "list_skills", json!({"session_id": a})).await;
    assert!(own.to_string().contains("w-deploy"), "{own}");
    assert!(watches_any_of(&d, &w));
    let note = skills.notification("skills_changed").await;
    assert_eq!(note["workspaces"], json!([w]), "{note}");

    // A workspace shared by two sessions stays until both are gone.
    delete(&d, &a).await;
    assert!(tools(&d).await.contains(&"w_hello".to_owned()));
    let theirs = result(&d, "list_skills", json!({"session_id": b})).await;
    assert!(theirs.to_string().contains("w-deploy"), "{theirs}");
    assert!(watches_any_of(&d, &w));

    // The last one gone: the project's tool, command, skills and watches go with it.
    delete(&d, &b).await;
    assert!(!tools(&d).await.contains(&"w_hello".to_owned()));
    assert!(!commands(&d).await.contains(&"w-release".to_owned()));
    let note = skills.notification("skills_changed").await;
    assert_eq!(note["workspaces"], json!([w]), "{note}");
    assert!(!watches_any_of(&d, &w), "the daemon still watches {w:?}");
    let status = result(&d, "config.status", json!({})).await;
    let folder = json!(w.join(".toolhost/tools"));
    let searched = status["custom_tool_folders"].as_array().unwrap();
    assert!(!searched.contains(&folder), "{status}");

    // A session that moves to another workspace takes its items along.
    let c = d.session(json!({"workspace": w})).await;
    assert!(tools(&d).await.contains(&"w_hello".to_owned()));
    let moved = d
        .call("session.update", json!({"id": c, "workspace": other}))
        .await;
    assert!(moved.get("result").is_some(), "{moved}");
    let now = tools(&d).await;
    assert!(now.contains(&"other_hello".to_owned()), "{now:?}");
    assert!(!now.contains(&"w_hello".to_owned()), "{now:?}");
    assert!(!watches_any_of(&d, &w));
    assert!(watches_any_of(&d, &other));

    // A session.create that fails holds nothing.
    let refused = d
        .call("session.create", json!({"id": c, "workspace": w}))
        .await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(!tools(&d).await.contains(&"w_hello".to_owned()));
    assert!(!watches_any_of(&d, &w));
}

#[tokio::test]
async fn a_connections_ephemeral_session_takes_its_workspace_along_when_it_ends() {
    let d = Daemon::start().await;
    let w = project(&d, "w");
    d.trust(&[d.dir.path().as_os_str()]).await;
    let mut conn = d.raw_lines().await;
    let r: Value = conn
        .call("session.create", json!({"workspace": w, "ephemeral": true}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert!(tools(&d).await.contains(&"w_hello".to_owned()));
    drop(conn);
    eventually(
        10,
        "the project's tool to go with the connection",
        || async { !tools(&d).await.contains(&"w_hello".to_owned()) },
    )
    .await;
    assert!(!watches_any_of(&d, &w));
}

/// `write_file` of `notes.txt` in session `session`, as call `call_id`.
async fn write_notes(d: &Daemon, session: &str, call_id: &str, content: &str) {
    let wrote = d
        .call(
            "invoke",
            json!({"name": "write_file", "session_id": session, "call_id": call_id,
                   "arguments": {"path": "notes.txt", "content": content}}),
        )
        .await;
    assert_eq!(wrote["result"]["result"]["ok"], true, "{wrote}");
}

/// The call ids of the checkpoint entries of workspace `w`.
async fn entry_calls(d: &Daemon, w: &Path) -> Vec<String> {
    let list = result(d, "checkpoint.list", json!({"workspace": w})).await;
    list["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|e| e["call_id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_projects_checkpoint_timeline_closes_with_its_last_session_and_its_entries_stay() {
    let d = Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await;
    let w = project(&d, "w");
    d.trust(&[d.dir.path().as_os_str()]).await;
    let a = d.session(json!({"workspace": w})).await;
    write_notes(&d, &a, "first-write", "one\n").await;
    assert_eq!(
        std::fs::read_to_string(w.join("notes.txt")).unwrap(),
        "one\n"
    );
    // The write opened the project's timeline; its change watcher watches the project.
    assert!(watches_any_of(&d, &w), "the project was never watched");

    delete(&d, &a).await;
    // Its timeline closes with the session (once the write's entry lets it go): no watch
    // on the project is left...
    eventually(10, "no watch left on the project", || async {
        !watches_any_of(&d, &w)
    })
    .await;
    // ...and what it recorded is still there for the next session in it.
    let b = d.session(json!({"workspace": w})).await;
    let recorded = entry_calls(&d, &w).await;
    assert!(recorded.contains(&"first-write".to_owned()), "{recorded:?}");
    write_notes(&d, &b, "second-write", "two\n").await;
    let recorded = entry_calls(&d, &w).await;
    assert!(
        recorded.contains(&"first-write".to_owned())
            && recorded.contains(&"second-write".to_owned()),
        "{recorded:?}"
    );
}

/// What the daemon kept for a project's session and tool goes with them (issue 48): the
/// loop breaker's counters of the session, and the tool's call counts when no scraper has
/// read any (none is owed their last showing).
#[tokio::test]
async fn a_sessions_counters_and_its_project_tools_series_go_with_them() {
    let d = Daemon::start().await;
    let w = project(&d, "w");
    d.trust(&[d.dir.path().as_os_str()]).await;
    let s = d.session(json!({"workspace": w})).await;
    let r = d
        .call(
            "invoke",
            json!({"name": "w_hello", "arguments": {}, "session_id": s}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let scopes = || async {
        let status = result(&d, "guards.status", json!({})).await;
        status["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["scopes"].as_array().unwrap().clone())
            .map(|sc| sc["scope"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(scopes().await.contains(&format!("session:{s}")));
    delete(&d, &s).await;
    let left = scopes().await;
    assert!(!left.contains(&format!("session:{s}")), "{left:?}");
    let (status, text) = d.http("GET", "/metrics", "").await;
    assert_eq!(status, 200, "{text}");
    // The call is counted by source; its tool's series went with the tool.
    let latency = "toolhost_call_duration_seconds_count{source=\"custom\",server=\"\"} 1";
    assert!(text.lines().any(|l| l == latency), "{text}");
    assert!(!text.contains("w_hello"), "{text}");
}
