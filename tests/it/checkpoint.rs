//! Checkpoints (proto-docs/checkpoints.md): one timeline per workspace, whichever frontend
//! changed it, and undo against the real daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::{toolhost, Daemon, BIN};
use serde_json::{json, Value};

/// A daemon with checkpoints on (they are opt-in: proto-docs/checkpoints.md).
async fn start() -> Daemon {
    Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await
}

/// `invoke` with a call id of ours; returns the whole response.
async fn invoke(d: &Daemon, call_id: &str, name: &str, args: Value) -> Value {
    let r = d
        .call(
            "invoke",
            json!({"name": name, "arguments": args, "call_id": call_id}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{name}: {r}");
    r
}

async fn timeline(d: &Daemon) -> Value {
    let r = d.call("checkpoint.list", json!({})).await;
    r["result"].clone()
}

/// The entry of call `call_id`.
async fn entry_of(d: &Daemon, call_id: &str) -> Value {
    let t = timeline(d).await;
    t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no entry of {call_id} in {t}"))
        .clone()
}

fn paths(entry: &Value) -> Vec<String> {
    entry["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect()
}

fn read(d: &Daemon, rel: &str) -> String {
    std::fs::read_to_string(d.workspace().join(rel)).unwrap_or_else(|e| format!("<{e}>"))
}

/// `toolhost undo ARGS` run in `cwd`, as a user runs it.
async fn undo(d: &Daemon, cwd: &Path, args: &[&str]) -> std::process::Output {
    toolhost(d.dir.path())
        .current_dir(cwd)
        .arg("--socket")
        .arg(d.socket())
        .arg("undo")
        .args(args)
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn undo_of_a_python_sdk_change_leaves_a_bash_change_by_a_socket_client() {
    let d = start().await;
    std::fs::write(d.workspace().join("a.txt"), "original a\n").unwrap();
    std::fs::write(d.workspace().join("b.txt"), "original b\n").unwrap();
    // Frontend one: a Python MCP SDK client over `toolhost mcp`.
    let sock = d.socket();
    let args = [BIN, sock.to_str().unwrap(), "a.txt", "from python\n"];
    let out = common::python_sdk("checkpoint.py", &args, &[]).await;
    assert_eq!(out["is_error"], false, "{out}");
    // Frontend two: a socket client running bash.
    invoke(
        &d,
        "bash-1",
        "bash",
        json!({"command": "echo from bash > b.txt"}),
    )
    .await;
    assert_eq!(read(&d, "a.txt"), "from python\n");

    let t = timeline(&d).await;
    let entries = t["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{t}");
    assert_eq!(entries[0]["call_id"], "bash-1", "newest first: {t}");
    assert_eq!(entries[0]["tool"], "bash");
    assert_eq!(paths(&entries[0]), ["b.txt"]);
    assert_eq!(entries[1]["tool"], "write_file");
    assert_eq!(entries[1]["frontend"], "python-undo", "{t}");
    assert_eq!(
        entries[1]["files"],
        json!([{"path": "a.txt", "change": "modified", "before": "file", "after": "file", "+lines": 1, "-lines": 1}])
    );

    // Undo of the Python client's change, from a subdirectory of the workspace.
    let sub = d.workspace().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let python_call = entries[1]["call_id"].as_str().unwrap().to_owned();
    let out = undo(&d, &sub, &["--call", &python_call, "--yes"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("-original a") || stdout.contains("+original a"),
        "preview shows the diff: {stdout}"
    );
    assert_eq!(read(&d, "a.txt"), "original a\n");
    assert_eq!(
        read(&d, "b.txt"),
        "from bash\n",
        "the other frontend's change stays"
    );

    // The undo is an entry itself, and `toolhost undo` (the last change) undoes it.
    let t = timeline(&d).await;
    assert_eq!(t["entries"][0]["kind"], "restore", "{t}");
    assert_eq!(t["entries"][0]["restores"], entries[1]["id"]);
    let out = undo(&d, &d.workspace(), &["--yes"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(read(&d, "a.txt"), "from python\n");
    assert_eq!(read(&d, "b.txt"), "from bash\n");
}

#[tokio::test]
async fn undo_without_yes_and_without_a_terminal_changes_nothing() {
    let d = start().await;
    invoke(
        &d,
        "w1",
        "write_file",
        json!({"path": "n.txt", "content": "new\n"}),
    )
    .await;
    let out = undo(&d, &d.workspace(), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--yes"),
        "{out:?}"
    );
    assert_eq!(read(&d, "n.txt"), "new\n");
}

#[tokio::test]
async fn a_restore_over_a_later_change_is_refused_naming_it_unless_forced() {
    let d = start().await;
    std::fs::write(d.workspace().join("a.txt"), "zero\n").unwrap();
    invoke(
        &d,
        "one",
        "write_file",
        json!({"path": "a.txt", "content": "one\n"}),
    )
    .await;
    invoke(
        &d,
        "two",
        "write_file",
        json!({"path": "a.txt", "content": "two\n"}),
    )
    .await;
    let first = entry_of(&d, "one").await;
    let second = entry_of(&d, "two").await;
    let r = d
        .call(
            "checkpoint.restore",
            json!({"id": first["id"], "scope": "call"}),
        )
        .await;
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(msg.contains("a.txt"), "{msg}");
    assert!(msg.contains(second["id"].as_str().unwrap()), "{msg}");
    assert!(msg.contains("write_file"), "{msg}");
    assert_eq!(read(&d, "a.txt"), "two\n", "nothing written");

    // A dry run shows the same conflict without writing.
    let r = d
        .call(
            "checkpoint.restore",
            json!({"id": first["id"], "dry_run": true}),
        )
        .await;
    assert_eq!(r["result"]["conflicts"][0]["path"], "a.txt", "{r}");
    assert_eq!(r["result"]["conflicts"][0]["changed_by"], second["id"]);

    let r = d
        .call(
            "checkpoint.restore",
            json!({"id": first["id"], "force": true}),
        )
        .await;
    assert_eq!(r["result"]["files"][0]["path"], "a.txt", "{r}");
    assert_eq!(read(&d, "a.txt"), "zero\n");

    // `before` of the second entry puts back the state between the two calls.
    let r = d
        .call(
            "checkpoint.restore",
            json!({"id": second["id"], "scope": "before", "force": true}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(read(&d, "a.txt"), "one\n");

    let diff = d.call("checkpoint.diff", json!({"id": second["id"]})).await;
    assert_eq!(
        diff["result"]["diff"], "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n",
        "{diff}"
    );
}

#[tokio::test]
async fn a_change_between_calls_is_an_outside_entry_not_blamed_on_a_call() {
    let d = start().await;
    invoke(
        &d,
        "x",
        "write_file",
        json!({"path": "x.txt", "content": "x\n"}),
    )
    .await;
    std::fs::write(d.workspace().join("editor.txt"), "typed by the user\n").unwrap();
    invoke(&d, "y", "bash", json!({"command": "echo y > y.txt"})).await;
    let t = timeline(&d).await;
    let e = t["entries"].as_array().unwrap();
    assert_eq!(e.len(), 3, "{t}");
    assert_eq!(e[0]["call_id"], "y");
    assert_eq!(paths(&e[0]), ["y.txt"]);
    assert_eq!(e[1]["kind"], "outside");
    assert!(e[1].get("call_id").is_none(), "{t}");
    assert_eq!(paths(&e[1]), ["editor.txt"]);
    assert_eq!(e[2]["call_id"], "x");
    // Filters.
    let r = d.call("checkpoint.list", json!({"limit": 1})).await;
    assert_eq!(r["result"]["entries"].as_array().unwrap().len(), 1);
    // A read-only call records nothing.
    d.invoke("read_file", json!({"path": "x.txt"})).await;
    assert_eq!(timeline(&d).await["entries"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn symlinks_fifos_and_paths_that_are_not_utf8_are_recorded_and_restored_byte_for_byte() {
    let d = start().await;
    let ws = d.workspace();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("link")).unwrap();
    let bad = OsStr::from_bytes(b"bad\xffname");
    let newline = OsStr::from_bytes(b"new\nline");
    std::fs::write(ws.join(bad), b"bytes \xfe\n").unwrap();
    invoke(
        &d,
        "mess",
        "bash",
        json!({"command": "mkfifo pipe && ln -sfn elsewhere link && rm -f \"$(printf 'bad\\377name')\" && printf 'nl' > \"$(printf 'new\\nline')\""}),
    )
    .await;
    assert!(ws.join("pipe").exists());
    let e = entry_of(&d, "mess").await;
    let files = e["files"].as_array().unwrap();
    let by_path = |p: &str| {
        files
            .iter()
            .find(|f| f["path"] == p)
            .unwrap_or_else(|| panic!("{p} in {e}"))
            .clone()
    };
    let b = by_path("bad\u{fffd}name");
    assert_eq!(b["change"], "deleted");
    assert_eq!(b["path_b64"], "YmFk/25hbWU=");
    assert_eq!(by_path("link")["before"], "symlink");
    assert_eq!(by_path("link")["change"], "modified");
    assert_eq!(by_path("pipe")["after"], "fifo");
    assert_eq!(by_path("new\nline")["change"], "added");

    let r = d.call("checkpoint.restore", json!({"id": e["id"]})).await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(std::fs::read(ws.join(bad)).unwrap(), b"bytes \xfe\n");
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        Path::new("/etc/hostname"),
        "the link is a link again, never followed"
    );
    assert!(!ws.join("pipe").exists());
    assert!(!ws.join(newline).exists());
}

#[tokio::test]
async fn ignored_excluded_and_large_files() {
    let d = Daemon::start_with(Some(json!({
        "checkpoint": {"enabled": true, "exclude": ["*.log"], "max_file_bytes": 16}
    })))
    .await;
    std::fs::write(d.workspace().join(".gitignore"), "target/\n").unwrap();
    invoke(
        &d,
        "build",
        "bash",
        json!({"command": "mkdir -p target && echo o > target/out && echo l > run.log && echo small > s.txt && echo 'more than sixteen bytes' > big.txt"}),
    )
    .await;
    let e = entry_of(&d, "build").await;
    assert_eq!(paths(&e), ["big.txt", "s.txt"], "{e}");
    assert_eq!(e["files"][0]["after"], "large");
    invoke(
        &d,
        "shrink",
        "bash",
        json!({"command": "echo tiny > big.txt"}),
    )
    .await;
    let shrink = entry_of(&d, "shrink").await;
    let r = d
        .call("checkpoint.restore", json!({"id": shrink["id"]}))
        .await;
    assert_eq!(
        r["result"]["not_restorable"],
        json!(["big.txt (a large)"]),
        "{r}"
    );
    assert_eq!(read(&d, "big.txt"), "tiny\n");
}

#[tokio::test]
async fn a_restore_while_a_call_runs_in_the_workspace_is_refused() {
    let d = start().await;
    invoke(
        &d,
        "w",
        "write_file",
        json!({"path": "w.txt", "content": "w\n"}),
    )
    .await;
    let id = entry_of(&d, "w").await["id"].clone();
    let client = d.client().await;
    let running = tokio::spawn(async move {
        let p = json!({"name": "bash", "arguments": {"command": "sleep 30"}, "call_id": "slow"});
        let _ = common::call_value(&client, "invoke", &p).await;
    });
    d.wait_for_call("slow").await;
    let r = d.call("checkpoint.restore", json!({"id": id})).await;
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(msg.contains("slow"), "{msg}");
    assert_eq!(read(&d, "w.txt"), "w\n");
    d.call("cancel", json!({"call_id": "slow"})).await;
    running.await.unwrap();
    common::eventually(10, "the restore to be let through", || async {
        d.call("checkpoint.restore", json!({"id": id}))
            .await
            .get("result")
            .is_some()
    })
    .await;
    assert!(!d.workspace().join("w.txt").exists());
}

#[tokio::test]
async fn a_daemon_killed_mid_call_leaves_a_readable_timeline() {
    let mut d = start().await;
    invoke(
        &d,
        "before",
        "write_file",
        json!({"path": "k.txt", "content": "1\n"}),
    )
    .await;
    let client = d.client().await;
    let _running = tokio::spawn(async move {
        let p = json!({"name": "bash", "arguments": {"command": "echo 2 > k.txt; sleep 30"}, "call_id": "killed"});
        let _ = common::call_value(&client, "invoke", &p).await;
    });
    d.wait_for_call("killed").await;
    common::eventually(10, "the killed call's write", || async {
        read(&d, "k.txt") == "2\n"
    })
    .await;
    d.kill9().await;
    // A torn line, as a write cut by the kill would leave.
    let stores = std::fs::read_dir(d.data_dir().join("checkpoints")).unwrap();
    let store = stores.flatten().next().unwrap().path();
    let mut journal = std::fs::read(store.join("timeline.jsonl")).unwrap();
    journal.extend_from_slice(b"{\"seq\":99,\"kind\":\"ca");
    std::fs::write(store.join("timeline.jsonl"), journal).unwrap();

    d.spawn(&[]).await;
    let t = timeline(&d).await;
    assert_eq!(t["lost"], 1, "{t}");
    assert_eq!(t["entries"][0]["call_id"], "before", "{t}");
    // The killed call's change is found at the next call, as a change from outside.
    invoke(
        &d,
        "after",
        "write_file",
        json!({"path": "l.txt", "content": "l\n"}),
    )
    .await;
    let t = timeline(&d).await;
    let e = t["entries"].as_array().unwrap();
    assert_eq!(e[0]["call_id"], "after", "{t}");
    assert_eq!(e[1]["kind"], "outside", "{t}");
    assert_eq!(paths(&e[1]), ["k.txt"]);
    let r = d
        .call(
            "checkpoint.restore",
            json!({"id": e[2]["id"], "scope": "before", "force": true}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert!(!d.workspace().join("k.txt").exists());
}
