//! The timeline for models (proto-docs/checkpoints.md#the-tools): the MCP tools
//! `checkpoint_list` and `checkpoint_restore` and the `/undo` prompt, driven by a real
//! Python MCP SDK client over `toolhost mcp` while socket clients (other frontends) change
//! the same project.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{Daemon, BIN};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// One Python MCP SDK session (`tests/facade_py/checkpoint_driver.py`), a step at a time.
struct Driver {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    _home: tempfile::TempDir,
}

impl Driver {
    async fn start(d: &Daemon) -> Driver {
        let python = common::python_sdk_interpreter().await;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/facade_py/checkpoint_driver.py");
        let home = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new(python);
        common::isolate(cmd.as_std_mut(), home.path());
        let mut child = cmd
            .arg(script)
            .arg(BIN)
            .arg(d.socket())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut driver = Driver {
            child,
            stdin,
            lines,
            _home: home,
        };
        assert_eq!(driver.next().await["ready"], true);
        driver
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the driver answers within 60 s")
            .unwrap()
            .expect("the driver is running");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line}: {e}"))
    }

    async fn step(&mut self, step: Value) -> Value {
        let line = format!("{step}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let out = self.next().await;
        assert!(out.get("exception").is_none(), "{step}: {out}");
        out
    }

    async fn call(&mut self, name: &str, args: Value) -> Value {
        self.step(json!({"op": "call", "name": name, "args": args}))
            .await
    }

    async fn tool_names(&mut self) -> Vec<(String, bool)> {
        let t = self.step(json!({"op": "tools"})).await;
        t["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_owned(),
                    t["read_only"].as_bool().unwrap(),
                )
            })
            .collect()
    }

    async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"op\": \"quit\"}\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

async fn start() -> Daemon {
    Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await
}

/// `invoke` over the socket (another frontend) with a call id of ours.
async fn invoke(d: &Daemon, call_id: &str, name: &str, args: Value) {
    let r = d
        .call(
            "invoke",
            json!({"name": name, "arguments": args, "call_id": call_id}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{name}: {r}");
}

async fn timeline(d: &Daemon) -> Vec<Value> {
    let r = d.call("checkpoint.list", json!({})).await;
    r["result"]["entries"].as_array().unwrap().clone()
}

/// The id of call `call_id`'s entry.
async fn id_of(d: &Daemon, call_id: &str) -> String {
    let t = timeline(d).await;
    t.iter()
        .find(|e| e["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no entry of {call_id}: {t:?}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn read(d: &Daemon, rel: &str) -> String {
    std::fs::read_to_string(d.workspace().join(rel)).unwrap_or_else(|e| format!("<{e}>"))
}

#[tokio::test]
async fn a_model_lists_and_undoes_another_frontends_change_over_mcp() {
    let d = start().await;
    std::fs::write(d.workspace().join("a.txt"), "original\n").unwrap();
    std::fs::write(d.workspace().join("keep.txt"), "kept\n").unwrap();
    let mut py = Driver::start(&d).await;
    let tools = py.tool_names().await;
    assert!(
        tools.contains(&("checkpoint_list".into(), true)),
        "checkpoint_list is listed, read-only: {tools:?}"
    );
    assert!(
        tools.contains(&("checkpoint_restore".into(), false)),
        "checkpoint_restore is listed, not read-only: {tools:?}"
    );

    // Another frontend (a socket client) changes the project with bash.
    invoke(
        &d,
        "bash-1",
        "bash",
        json!({"command": "echo from bash > a.txt"}),
    )
    .await;
    let id = id_of(&d, "bash-1").await;

    let listed = py.call("checkpoint_list", json!({})).await;
    assert_eq!(listed["is_error"], false, "{listed}");
    let text = listed["text"].as_str().unwrap();
    assert!(
        text.contains(&id) && text.contains("bash") && text.contains("a.txt modified +1 -1"),
        "the model reads the socket client's bash change: {text}"
    );
    assert_eq!(
        listed["structured"]["entries"][0]["call_id"], "bash-1",
        "{listed}"
    );
    let diff = py.call("checkpoint_list", json!({"id": id})).await;
    let diff = diff["text"].as_str().unwrap();
    assert!(
        diff.contains("-original") && diff.contains("+from bash"),
        "{diff}"
    );

    let restored = py.call("checkpoint_restore", json!({"id": id})).await;
    assert_eq!(restored["is_error"], false, "{restored}");
    assert!(
        restored["text"]
            .as_str()
            .unwrap()
            .contains("a.txt put back"),
        "{restored}"
    );
    assert_eq!(read(&d, "a.txt"), "original\n");
    assert_eq!(read(&d, "keep.txt"), "kept\n");

    // The restore is one entry, the model's, naming what it restored; the tool call itself
    // adds no second entry.
    let t = timeline(&d).await;
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!(t[0]["kind"], "restore");
    assert_eq!(t[0]["tool"], "checkpoint_restore");
    assert_eq!(t[0]["frontend"], "python-undo-mcp", "{t:?}");
    assert_eq!(t[0]["restores"], json!(id));
    let undo_id = t[0]["id"].as_str().unwrap().to_owned();
    assert!(
        restored["text"].as_str().unwrap().contains(&undo_id),
        "{restored}"
    );

    // Undo of the undo, from the socket: the bash change is back.
    let r = d.call("checkpoint.restore", json!({"id": undo_id})).await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(read(&d, "a.txt"), "from bash\n");
    py.quit().await;
}

#[tokio::test]
async fn a_conflict_is_named_to_the_model_and_force_overwrites_it() {
    let d = start().await;
    std::fs::write(d.workspace().join("a.txt"), "zero\n").unwrap();
    let mut py = Driver::start(&d).await;
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
    let (one, two) = (id_of(&d, "one").await, id_of(&d, "two").await);

    let refused = py.call("checkpoint_restore", json!({"id": one})).await;
    assert_eq!(refused["is_error"], true, "{refused}");
    let text = refused["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("a.txt was changed later by {two} (write_file")),
        "the conflict names the file and the later change: {text}"
    );
    assert_eq!(read(&d, "a.txt"), "two\n", "nothing was restored");

    // A dry run says the same without refusing.
    let dry = py
        .call("checkpoint_restore", json!({"id": one, "dry_run": true}))
        .await;
    assert_eq!(dry["is_error"], false, "{dry}");
    assert!(
        dry["text"].as_str().unwrap().contains("(a conflict)"),
        "{dry}"
    );
    assert_eq!(read(&d, "a.txt"), "two\n");

    let forced = py
        .call("checkpoint_restore", json!({"id": one, "force": true}))
        .await;
    assert_eq!(forced["is_error"], false, "{forced}");
    assert_eq!(read(&d, "a.txt"), "zero\n");
    py.quit().await;
}

#[tokio::test]
async fn a_restore_is_refused_to_the_model_while_another_call_runs_in_the_project() {
    let d = start().await;
    let mut py = Driver::start(&d).await;
    invoke(
        &d,
        "w1",
        "write_file",
        json!({"path": "b.txt", "content": "b\n"}),
    )
    .await;
    let id = id_of(&d, "w1").await;

    // Another frontend's long call in the same project.
    let mut other = d.raw_lines().await;
    let long = other
        .send(
            "invoke",
            json!({"name": "bash", "arguments": {"command": "until [ -e go ]; do sleep 0.05; done"}, "call_id": "long"}),
        )
        .await;
    d.wait_for_call("long").await;
    let refused = py.call("checkpoint_restore", json!({"id": id})).await;
    assert_eq!(refused["is_error"], true, "{refused}");
    let text = refused["text"].as_str().unwrap();
    assert!(
        text.contains("a call is running in this workspace (long)"),
        "{text}"
    );
    assert_eq!(read(&d, "b.txt"), "b\n");

    // When it has ended, the same restore goes through.
    std::fs::write(d.workspace().join("go"), "").unwrap();
    loop {
        let m = other.recv().await;
        if m["id"] == json!(long) {
            break;
        }
    }
    let ok = py.call("checkpoint_restore", json!({"id": id})).await;
    assert_eq!(ok["is_error"], false, "{ok}");
    assert!(!d.workspace().join("b.txt").exists());
    py.quit().await;
}

#[tokio::test]
async fn the_tools_act_on_their_own_project_only() {
    let d = start().await;
    let other = d.subdir("other");
    let session = d.session(json!({"workspace": other})).await;
    let r = d
        .call(
            "invoke",
            json!({"name": "write_file", "arguments": {"path": "o.txt", "content": "o\n"},
                   "call_id": "in-other", "session_id": session}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let t = d
        .call(
            "checkpoint.list",
            json!({"workspace": other.display().to_string()}),
        )
        .await;
    let id = t["result"]["entries"][0]["id"].as_str().unwrap().to_owned();

    // The model works in the daemon's workspace: another project's entry is unknown to it.
    let mut py = Driver::start(&d).await;
    let refused = py.call("checkpoint_restore", json!({"id": id})).await;
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["text"]
            .as_str()
            .unwrap()
            .contains("in this project"),
        "{refused}"
    );
    let diff = py.call("checkpoint_list", json!({"id": id})).await;
    assert_eq!(diff["is_error"], true, "{diff}");
    let listed = py.call("checkpoint_list", json!({})).await;
    assert!(
        !listed["text"].as_str().unwrap().contains("o.txt"),
        "{listed}"
    );
    assert_eq!(std::fs::read_to_string(other.join("o.txt")).unwrap(), "o\n");
    py.quit().await;
}

#[tokio::test]
async fn the_undo_prompt_and_the_tools_follow_checkpoints_being_on() {
    // Off (the default): no tools, and `/undo` says why nothing can be undone.
    let d = Daemon::start().await;
    let mut py = Driver::start(&d).await;
    let tools = py.tool_names().await;
    assert!(
        !tools.iter().any(|(n, _)| n.starts_with("checkpoint_")),
        "{tools:?}"
    );
    let prompts = py.step(json!({"op": "prompts"})).await;
    assert!(
        prompts["prompts"]
            .as_array()
            .unwrap()
            .contains(&json!("undo")),
        "{prompts}"
    );
    let off = py.step(json!({"op": "prompt", "name": "undo"})).await;
    assert!(
        off["text"][0]
            .as_str()
            .unwrap()
            .contains("Checkpoints are off"),
        "{off}"
    );

    // A reload turning them on adds the tools, and `/undo` says how to undo with them.
    std::fs::write(
        d.config_path(),
        json!({"checkpoint": {"enabled": true}}).to_string(),
    )
    .unwrap();
    let r = d.call("config.reload", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    common::eventually(10, "the checkpoint tools to be listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"checkpoint_restore")
    })
    .await;
    let tools = py.tool_names().await;
    assert!(
        tools.iter().any(|(n, _)| n == "checkpoint_restore"),
        "{tools:?}"
    );
    let on = py.step(json!({"op": "prompt", "name": "undo"})).await;
    let text = on["text"][0].as_str().unwrap();
    assert!(
        text.contains("checkpoint_list") && text.contains("checkpoint_restore"),
        "{text}"
    );
    py.quit().await;
}

#[tokio::test]
async fn checkpoint_restore_asks_approval_in_strict_mode_showing_what_it_would_restore() {
    let d = Daemon::start_with(Some(json!({
        "checkpoint": {"enabled": true},
        "approval": {"mode": "strict", "wait_s": 30}
    })))
    .await;
    let r = d
        .call(
            "invoke",
            json!({"name": "write_file", "arguments": {"path": "s.txt", "content": "s\n"},
                   "call_id": "w", "approved": true}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let id = id_of(&d, "w").await;
    // Listing is read-only: no approval.
    let listed = d
        .call(
            "invoke",
            json!({"name": "checkpoint_list", "arguments": {}}),
        )
        .await;
    assert_eq!(listed["result"]["result"]["ok"], true, "{listed}");

    let mut watch = d.raw_lines().await;
    let w = watch.call("subscribe_approvals", json!({})).await;
    assert!(w.get("result").is_some(), "{w}");
    let mut caller = d.raw_lines().await;
    let sent = caller
        .send(
            "invoke",
            json!({"name": "checkpoint_restore", "arguments": {"id": id}, "call_id": "undo-1"}),
        )
        .await;
    let pending = loop {
        let n = watch.recv().await;
        let e = &n["params"]["result"];
        if e["kind"] == "approval_pending" && e["call_id"] == "undo-1" {
            break e.clone();
        }
    };
    assert_eq!(pending["class"], "write", "{pending}");
    assert_eq!(
        pending["summary"],
        json!(format!("undo {id}: restore 1 file (s.txt)")),
        "{pending}"
    );
    let r = d
        .call(
            "approvals.decide",
            json!({"id": pending["id"], "decision": "deny"}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let answer = loop {
        let m = caller.recv().await;
        if m["id"] == json!(sent) {
            break m;
        }
    };
    assert_eq!(answer["result"]["result"]["ok"], false, "{answer}");
    assert_eq!(
        read(&d, "s.txt"),
        "s\n",
        "a denied restore restores nothing"
    );
}
