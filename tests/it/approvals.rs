//! The approval queue (issue 31): a strict session's call that its own frontend cannot
//! approve waits for an operator instead of failing at once. Each test starts the real
//! daemon, makes a `bash` call wait from a connection of its own (the caller), watches the
//! queue with `subscribe_approvals` and decides it as an operator would: over the socket,
//! through `toolhost approvals`, or by the caller's own answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::MetadataExt;

use common::{eventually, toolhost, Daemon, RawLines};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A daemon whose calls are strict, waiting at most `wait_s` for a decision.
async fn start(wait_s: u64) -> Daemon {
    Daemon::start_with(Some(
        json!({"approval": {"mode": "strict", "wait_s": wait_s}}),
    ))
    .await
}

/// Starts a `bash` call of `command` on a connection of its own (the caller, which answers
/// the `inputs` kinds) and returns that connection.
pub(crate) async fn caller(
    d: &Daemon,
    call_id: &str,
    command: &str,
    session: Option<&str>,
    inputs: Value,
) -> RawLines {
    let mut c = d.raw_lines().await;
    let r = c
        .call(
            "subscribe_invoke",
            json!({"name": "bash", "arguments": {"command": command}, "call_id": call_id,
                   "session_id": session, "inputs": inputs}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    c
}

/// The tool's outcome of the caller's call.
pub(crate) async fn outcome(c: &mut RawLines) -> Value {
    c.invoke_event("result").await["result"].clone()
}

/// A connection following the queue with `subscribe_approvals`.
struct Watch(RawLines);

impl Watch {
    async fn new(d: &Daemon) -> Watch {
        let mut c = d.raw_lines().await;
        let r = c.call("subscribe_approvals", json!({})).await;
        assert!(r.get("result").is_some(), "{r}");
        Watch(c)
    }

    /// The next event about `call_id` of `kind` (`approval_pending`, `approval_decided`).
    async fn event(&mut self, kind: &str, call_id: &str) -> Value {
        self.event_where(kind, "call_id", call_id).await
    }

    /// The next event of `kind` whose `key` is `value`.
    async fn event_where(&mut self, kind: &str, key: &str, value: &str) -> Value {
        loop {
            let n = self.0.recv().await;
            let e = &n["params"]["result"];
            if n["method"] == "approval_event" && e["kind"] == kind && e[key] == value {
                return e.clone();
            }
        }
    }
}

async fn strict_session(d: &Daemon) -> String {
    let r = d
        .call("session.create", json!({"approval": "strict"}))
        .await;
    r["result"]["id"].as_str().unwrap().to_owned()
}

async fn decide(d: &Daemon, id: &Value, decision: &str) -> Value {
    d.call("approvals.decide", json!({"id": id, "decision": decision}))
        .await
}

/// The audit record of `call_id`, once the writer has it in the file.
async fn audit_record(d: &Daemon, call_id: &str) -> Value {
    let path = d.data_dir().join("audit.jsonl");
    let find = || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["call_id"] == call_id)
    };
    eventually(10, "the call's audit record", || async { find().is_some() }).await;
    find().unwrap()
}

fn my_uid(d: &Daemon) -> u32 {
    std::fs::metadata(d.socket()).unwrap().uid()
}

#[tokio::test]
async fn an_operator_allows_a_waiting_call_once_and_the_audit_log_says_who() {
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    let mut c = caller(&d, "c1", "touch ran", None, json!([])).await;
    let p = watch.event("approval_pending", "c1").await;
    assert_eq!(
        (&p["tool"], &p["class"], &p["summary"]),
        (
            &json!("bash"),
            &json!("command"),
            &json!("bash (command) command=\"touch ran\"")
        ),
        "{p}"
    );
    assert_eq!(p["arguments"], json!({"command": "touch ran"}));
    let waits = p["deadline_ms"].as_u64().unwrap() - p["since_ms"].as_u64().unwrap();
    assert_eq!(waits, 60_000, "{p}");
    // The list shows the same entry (the event adds its `kind`).
    let mut entry = p.clone();
    entry.as_object_mut().unwrap().remove("kind");
    let listed = d.call("approvals.list", json!({})).await;
    assert_eq!(listed["result"]["pending"], json!([entry]), "{listed}");
    assert!(!d.workspace().join("ran").exists());

    let r = d
        .call(
            "approvals.decide",
            json!({"id": p["id"], "decision": "allow_once", "via": "ui"}),
        )
        .await;
    let decided = &r["result"];
    assert_eq!(decided["outcome"], "allow_once", "{r}");
    assert_eq!(decided["by"]["via"], "ui", "{r}");
    assert_eq!(decided["by"]["uid"], my_uid(&d), "{r}");
    assert!(decided["by"]["pid"].as_i64().is_some(), "{r}");
    assert_eq!(outcome(&mut c).await["ok"], true);
    assert!(d.workspace().join("ran").exists());
    let e = watch.event("approval_decided", "c1").await;
    assert_eq!((&e["id"], &e["outcome"]), (&p["id"], &json!("allow_once")));
    assert_eq!(
        d.call("approvals.list", json!({})).await["result"]["pending"],
        json!([])
    );
    // A later decision hears who came first.
    let late = decide(&d, &p["id"], "deny").await;
    let message = late["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("already decided: allow_once by uid") && message.contains("via ui"),
        "{late}"
    );
    let record = audit_record(&d, "c1").await;
    let verdict = &record["approval_decision"];
    assert_eq!(
        (
            &verdict["outcome"],
            &verdict["by"]["via"],
            &verdict["by"]["uid"]
        ),
        (&json!("allow_once"), &json!("ui"), &json!(my_uid(&d))),
        "{record}"
    );
    assert!(verdict["waited_ms"].as_u64().is_some(), "{record}");
    assert_eq!(record["ok"], true);
}

#[tokio::test]
async fn allow_for_the_session_lets_the_tools_next_calls_in_that_session_run_without_asking() {
    let d = start(60).await;
    let (s1, s2) = (strict_session(&d).await, strict_session(&d).await);
    let mut watch = Watch::new(&d).await;
    let mut c = caller(&d, "first", "echo one", Some(&s1), json!([])).await;
    let p = watch.event("approval_pending", "first").await;
    assert_eq!(p["session_id"], s1.as_str());
    let r = decide(&d, &p["id"], "allow_session").await;
    assert_eq!(r["result"]["outcome"], "allow_session", "{r}");
    assert_eq!(outcome(&mut c).await["stdout"], "one\n");
    // The next bash call in s1 runs at once (a plain invoke, nobody deciding).
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": "echo two"}, "session_id": s1}),
        )
        .await;
    assert_eq!(r["result"]["result"]["stdout"], "two\n", "{r}");
    // Another session still asks.
    let mut other = caller(&d, "other", "echo three", Some(&s2), json!([])).await;
    let p = watch.event("approval_pending", "other").await;
    let r = decide(&d, &p["id"], "deny").await;
    assert_eq!(r["result"]["outcome"], "deny", "{r}");
    assert_eq!(outcome(&mut other).await["error_kind"], "denied");
    // A call without a session cannot be allowed for one.
    let mut none = caller(&d, "none", "true", None, json!([])).await;
    let p = watch.event("approval_pending", "none").await;
    let r = decide(&d, &p["id"], "allow_session").await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no session"),
        "{r}"
    );
    assert_eq!(
        decide(&d, &p["id"], "allow_once").await["result"]["outcome"],
        "allow_once"
    );
    assert_eq!(outcome(&mut none).await["ok"], true);
}

#[tokio::test]
async fn an_mcp_client_without_elicitation_waits_for_an_operator() {
    common::require_program("python3");
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    let sock = d.socket().display().to_string();
    let client = tokio::spawn(async move {
        let args = [env!("CARGO_BIN_EXE_toolhost"), sock.as_str()];
        common::python_sdk("approvals.py", &args, &[]).await
    });
    let p = watch
        .event_where("approval_pending", "client", "python-approvals")
        .await;
    assert_eq!(p["summary"], "bash (command) command=\"touch ran\"", "{p}");
    assert!(p.get("caller_asked").is_none(), "{p}");
    assert!(!d.workspace().join("ran").exists());
    let r = decide(&d, &p["id"], "allow_once").await;
    assert_eq!(r["result"]["outcome"], "allow_once", "{r}");
    let seen = client.await.unwrap();
    assert_eq!(seen["is_error"], false, "{seen}");
    assert!(d.workspace().join("ran").exists());
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_its_caller_hears_who_denied_it_and_why() {
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    let mut c = caller(&d, "d1", "touch ran", None, json!([])).await;
    let p = watch.event("approval_pending", "d1").await;
    let r = d
        .call(
            "approvals.decide",
            json!({"id": p["id"], "decision": "deny", "reason": "not on a Friday"}),
        )
        .await;
    assert_eq!(r["result"]["reason"], "not on a Friday", "{r}");
    let o = outcome(&mut c).await;
    assert_eq!(o["error_kind"], "denied", "{o}");
    let error = o["error"].as_str().unwrap();
    assert!(
        error.contains("was denied by uid")
            && error.contains("via socket")
            && error.ends_with("Reason: not on a Friday"),
        "{error}"
    );
    assert!(!d.workspace().join("ran").exists());
    let verdict = audit_record(&d, "d1").await["approval_decision"].clone();
    assert_eq!(verdict["reason"], "not on a Friday", "{verdict}");
    // An unknown id and a made-up surface are refused.
    let r = decide(&d, &json!("ap-999"), "deny").await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = d
        .call(
            "approvals.decide",
            json!({"id": "ap-1", "decision": "deny", "via": "caller"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[tokio::test]
async fn a_call_nobody_decides_fails_at_the_deadline_saying_it_waited() {
    let d = start(1).await;
    let mut watch = Watch::new(&d).await;
    let mut c = caller(&d, "t1", "touch ran", None, json!([])).await;
    let o = outcome(&mut c).await;
    assert_eq!(o["error_kind"], "approval_required", "{o}");
    assert_eq!(o["approval"], "bash (command) command=\"touch ran\"", "{o}");
    assert!(
        o["error"]
            .as_str()
            .unwrap()
            .contains("It waited 1 s in the approval queue"),
        "{o}"
    );
    let e = watch.event("approval_decided", "t1").await;
    assert_eq!(e["outcome"], "timed_out", "{e}");
    assert!(e.get("by").is_none(), "{e}");
    assert!(!d.workspace().join("ran").exists());
    let verdict = audit_record(&d, "t1").await["approval_decision"].clone();
    assert_eq!(verdict["outcome"], "timed_out", "{verdict}");
}

#[tokio::test]
async fn a_call_whose_caller_went_away_leaves_the_queue() {
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    let c = caller(&d, "gone", "touch ran", None, json!([])).await;
    let p = watch.event("approval_pending", "gone").await;
    drop(c);
    let e = watch.event("approval_decided", "gone").await;
    assert_eq!(e["outcome"], "withdrawn", "{e}");
    assert_eq!(
        d.call("approvals.list", json!({})).await["result"]["pending"],
        json!([])
    );
    let r = decide(&d, &p["id"], "allow_once").await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already decided: withdrawn by nobody"),
        "{r}"
    );
    // A cancelled call leaves it too.
    let _c = caller(&d, "cancelled", "true", None, json!([])).await;
    watch.event("approval_pending", "cancelled").await;
    let r = d.call("cancel", json!({"call_id": "cancelled"})).await;
    assert_eq!(r["result"]["cancelled"], true, "{r}");
    let e = watch.event("approval_decided", "cancelled").await;
    assert_eq!(e["outcome"], "withdrawn", "{e}");
    assert!(!d.workspace().join("ran").exists());
}

#[tokio::test]
async fn of_two_deciders_at_once_exactly_one_wins() {
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    for n in 0..5 {
        let call_id = format!("two-{n}");
        let mut c = caller(&d, &call_id, "echo ran", None, json!([])).await;
        let p = watch.event("approval_pending", &call_id).await;
        let (a, b) = tokio::join!(
            decide(&d, &p["id"], "allow_once"),
            decide(&d, &p["id"], "deny")
        );
        let winners: Vec<&Value> = [&a, &b]
            .into_iter()
            .filter(|r| r.get("result").is_some())
            .collect();
        assert_eq!(winners.len(), 1, "{a} {b}");
        let loser = if a.get("result").is_some() { &b } else { &a };
        assert!(
            loser["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already decided"),
            "{loser}"
        );
        let o = outcome(&mut c).await;
        let allowed = winners[0]["result"]["outcome"] == "allow_once";
        assert_eq!(o["ok"], allowed, "{o}");
        let e = watch.event("approval_decided", &call_id).await;
        assert_eq!(e["outcome"], winners[0]["result"]["outcome"]);
    }
}

#[tokio::test]
async fn the_callers_own_answer_and_the_queue_race_and_the_first_wins() {
    let d = start(60).await;
    let mut watch = Watch::new(&d).await;
    // The queue first: the caller's question is withdrawn.
    let mut c = caller(&d, "q-first", "echo ran", None, json!(["elicitation"])).await;
    let q = c.invoke_event("input_request").await;
    let p = watch.event("approval_pending", "q-first").await;
    assert_eq!(p["caller_asked"], true, "{p}");
    let r = decide(&d, &p["id"], "allow_once").await;
    assert_eq!(r["result"]["outcome"], "allow_once", "{r}");
    let late = c
        .call(
            "invoke.respond",
            json!({"call_id": "q-first", "request_id": q["request_id"], "result": {"action": "decline"}}),
        )
        .await;
    assert_eq!(late["error"]["code"], -32602, "{late}");
    assert_eq!(outcome(&mut c).await["ok"], true);

    // The caller first: the queue entry ends, decided by the caller.
    let mut c = caller(&d, "c-first", "touch ran", None, json!(["elicitation"])).await;
    let q = c.invoke_event("input_request").await;
    let p = watch.event("approval_pending", "c-first").await;
    let r = c
        .call(
            "invoke.respond",
            json!({"call_id": "c-first", "request_id": q["request_id"], "result": {"action": "decline"}}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let e = watch.event("approval_decided", "c-first").await;
    assert_eq!(
        (&e["outcome"], &e["by"]["via"]),
        (&json!("deny"), &json!("caller")),
        "{e}"
    );
    let o = outcome(&mut c).await;
    assert_eq!(o["error_kind"], "denied", "{o}");
    assert!(
        o["error"].as_str().unwrap().contains("The user declined"),
        "{o}"
    );
    let late = decide(&d, &p["id"], "allow_once").await;
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already decided: deny by the caller"),
        "{late}"
    );
    assert!(!d.workspace().join("ran").exists());
    let verdict = audit_record(&d, "c-first").await["approval_decision"].clone();
    assert_eq!(verdict["by"], json!({"via": "caller"}), "{verdict}");
}

#[tokio::test]
async fn wait_s_0_keeps_the_immediate_refusal() {
    let d = start(0).await;
    let r = d.invoke("bash", json!({"command": "touch ran"})).await;
    assert_eq!(r["error_kind"], "approval_required", "{r}");
    assert_eq!(
        r["error"],
        "Tool 'bash' needs approval in strict mode; repeat the call with \"approved\": true once the user agrees."
    );
    assert_eq!(
        d.call("approvals.list", json!({})).await["result"]["pending"],
        json!([])
    );
    assert!(!d.workspace().join("ran").exists());
}

#[tokio::test]
async fn the_cli_lists_follows_and_allows() {
    let d = start(60).await;
    let cli = |args: &[&str]| {
        let mut cmd = toolhost(d.dir.path());
        cmd.arg("--socket").arg(d.socket()).args(args);
        cmd
    };
    let mut follow = cli(&["approvals", "--follow"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    // Empty at first.
    let out = cli(&["approvals"]).output().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "No call waits for approval.\n"
    );

    let mut c = caller(&d, "cli-1", "touch ran", None, json!([])).await;
    let line = next_line(&mut lines).await;
    assert!(
        line.starts_with("pending ap-") && line.contains("bash (command) command=\"touch ran\""),
        "{line}"
    );
    let id = line.split_whitespace().nth(1).unwrap().to_owned();
    let out = cli(&["approvals"]).output().await.unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.starts_with("ID"), "{listed}");
    assert!(
        listed.contains(&id) && listed.contains("touch ran"),
        "{listed}"
    );

    let out = cli(&["approvals", "allow", &id]).output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.starts_with(&format!(
            "decided {id} allow_once (call cli-1, bash) by uid"
        )) && said.contains("via cli"),
        "{said}"
    );
    let line = next_line(&mut lines).await;
    assert!(
        line.starts_with(&format!("decided {id} allow_once")),
        "{line}"
    );
    assert_eq!(outcome(&mut c).await["ok"], true);
    assert!(d.workspace().join("ran").exists());
    // A second decision fails with exit 1, naming the first.
    let out = cli(&["approvals", "deny", &id, "--reason", "late"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already decided: allow_once"), "{err}");
}

#[tokio::test]
async fn a_process_the_host_started_may_not_see_or_decide_approvals() {
    // Calls without a session run (auto); the waiting call's session is strict.
    let d = Daemon::start_with(Some(json!({"approval": {"wait_s": 60}}))).await;
    let strict = strict_session(&d).await;
    let mut watch = Watch::new(&d).await;
    let mut c = caller(&d, "held", "touch ran", Some(&strict), json!([])).await;
    let p = watch.event("approval_pending", "held").await;
    let bin = env!("CARGO_BIN_EXE_toolhost");
    let sock = d.socket();
    let decide_cmd = format!(
        r#"{bin} --socket {} call approvals.decide '{{"id": "{}", "decision": "allow_once"}}'"#,
        sock.display(),
        p["id"].as_str().unwrap()
    );
    let list = format!("{bin} --socket {} call approvals.list", sock.display());
    for command in [decide_cmd, list] {
        let r = d
            .call(
                "invoke",
                json!({"name": "bash", "arguments": {"command": command}}),
            )
            .await;
        let r = &r["result"]["result"];
        assert_eq!(r["exit_code"], 1, "{r}");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("Not allowed from a process the host started"),
            "{r}"
        );
    }
    // The entry still waits, for an operator.
    let listed = d.call("approvals.list", json!({})).await;
    assert_eq!(listed["result"]["pending"][0]["id"], p["id"], "{listed}");
    let r = decide(&d, &p["id"], "deny").await;
    assert_eq!(r["result"]["outcome"], "deny", "{r}");
    assert_eq!(outcome(&mut c).await["error_kind"], "denied");
    assert!(!d.workspace().join("ran").exists());
}

/// The next line `toolhost approvals --follow` prints.
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line within 30 s")
        .unwrap()
        .expect("--follow still running")
}
