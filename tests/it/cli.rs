//! The CLI as a client of a real daemon (issue 13): every subcommand added for
//! completeness, the global `--json` and `--timeout`, the strict-mode hint and the tools
//! table with long names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        assert_eq!(
            self.stdout.lines().count(),
            1,
            "--json prints one line: {}",
            self.stdout
        );
        serde_json::from_str(&self.stdout).unwrap()
    }
}

async fn cli(d: &Daemon, args: &[&str]) -> Out {
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .output()
        .await
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test]
async fn session_update_resume_and_tools() {
    let d = Daemon::start().await;
    let created = cli(&d, &["session", "create", "--id", "s1", "--json"]).await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    let updated = cli(
        &d,
        &[
            "--json",
            "session",
            "update",
            "s1",
            "--meta",
            r#"{"model":"m"}"#,
            "--approval",
            "strict",
        ],
    )
    .await;
    assert_eq!(updated.code, 0, "{}", updated.stderr);
    let s = updated.json();
    assert_eq!(
        (&s["id"], &common::own_meta(&s), &s["approval"]),
        (&json!("s1"), &json!({"model": "m"}), &json!("strict"))
    );

    let tools = cli(&d, &["session", "tools", "s1", "--json"]).await.json();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "patch_file",
            "list_dir",
            "search_files",
            "bash"
        ]
    );
    let etag = tools["etag"].as_str().unwrap();
    let same = cli(&d, &["session", "tools", "s1", "--if-etag", etag]).await;
    assert_eq!(
        (same.code, same.stdout),
        (0, format!("unchanged (etag {etag})\n"))
    );

    let resumed = cli(&d, &["session", "resume", "s1"]).await;
    assert_eq!(
        (resumed.code, resumed.stdout.as_str()),
        (0, "resumed s1: 6 tools, added none, missing none\n")
    );
    let missing = cli(&d, &["session", "resume", "nope"]).await;
    assert_eq!(missing.code, 1, "{}", missing.stderr);
}

#[tokio::test]
async fn cancel_stops_a_call_in_flight() {
    let d = Daemon::start().await;
    let client = d.client().await;
    let params = toolhost::protocol::InvokeParams {
        call_id: Some("c-1".into()),
        ..toolhost::protocol::InvokeParams::new("bash", args(json!({"command": "sleep 30"})))
    };
    let call = tokio::spawn(async move { client.invoke(&params).await });
    eventually(10, "the call is in flight", || async {
        cli(&d, &["cancel", "c-1"]).await.code == 0
    })
    .await;
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        serde_json::to_value(r.result.error_kind).unwrap(),
        json!("cancelled")
    );
    let again = cli(&d, &["cancel", "c-1"]).await;
    assert_eq!(
        (again.code, again.stderr.as_str()),
        (1, "toolhost: no call c-1 in flight\n")
    );
    assert_eq!(
        cli(&d, &["cancel", "c-1", "--json"]).await.json(),
        json!({"cancelled": false})
    );
}

#[tokio::test]
async fn config_reload_and_status() {
    let d = Daemon::start_with(Some(json!({}))).await;
    write_atomic(
        &d.config_path(),
        &json!({"limits": {"max_output_bytes": 0}}),
    );
    let refused = cli(&d, &["config", "reload"]).await;
    assert_eq!(
        (refused.code, refused.stdout.as_str()),
        (
            1,
            "not applied: limits.max_output_bytes: must be at least 1, found 0\n"
        )
    );
    write_atomic(
        &d.config_path(),
        &json!({"limits": {"max_output_bytes": 5}}),
    );
    let applied = cli(&d, &["--json", "config", "reload"]).await;
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    let r = applied.json();
    assert_eq!(r["applied"], json!(true));
    let status = cli(&d, &["config", "status", "--json"]).await.json();
    assert_eq!(status["revision"], r["status"]["revision"]);
    assert_eq!(status["path"], json!(d.config_path().display().to_string()));
    let human = cli(&d, &["config", "status"]).await;
    assert_eq!(
        human.stdout,
        format!(
            "{} (revision {})\nwatching {} for edits\n",
            d.config_path().display(),
            status["revision"],
            d.config_path().parent().unwrap().display()
        )
    );
}

#[tokio::test]
async fn strict_mode_refusal_names_the_approved_flag() {
    let d = Daemon::start_with(Some(json!({"approval": {"mode": "strict", "wait_s": 0}}))).await;
    let denied = cli(
        &d,
        &["invoke", "bash", "--args", r#"{"command":"echo hi"}"#],
    )
    .await;
    assert_eq!(denied.code, 1);
    assert!(
        denied
            .stderr
            .ends_with("toolhost: once the user agrees, run the same command with --approved\n"),
        "{}",
        denied.stderr
    );
    let ok = cli(
        &d,
        &[
            "invoke",
            "bash",
            "--args",
            r#"{"command":"echo hi"}"#,
            "--approved",
            "--json",
        ],
    )
    .await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let r = ok.json();
    assert_eq!(
        r["result"],
        json!({"ok": true, "exit_code": 0, "stdout": "hi\n", "stderr": ""})
    );
}

#[tokio::test]
async fn timeout_bounds_the_wait_for_an_answer() {
    let d = Daemon::start().await;
    let t0 = Instant::now();
    let out = cli(
        &d,
        &[
            "--timeout",
            "0.5",
            "invoke",
            "bash",
            "--args",
            r#"{"command":"sleep 20"}"#,
        ],
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(out.stderr.contains("500ms"), "{}", out.stderr);
}

#[tokio::test]
async fn the_tools_table_keeps_its_columns_with_long_names() {
    let d = Daemon::start_with(Some(json!({"mcp_servers": {"fx": {"command": FIXTURE}}}))).await;
    eventually(20, "the fixture's tools", || async {
        cli(&d, &["tools"]).await.stdout.contains("mcp:fx")
    })
    .await;
    let out = cli(&d, &["tools"]).await;
    // The source column (`builtin` / `mcp:fx`) starts at the same place on every line,
    // however long the name before it.
    let starts: std::collections::BTreeSet<usize> = out
        .stdout
        .lines()
        .map(|l| {
            l.find("  builtin")
                .or_else(|| l.find("  mcp:fx"))
                .unwrap_or_else(|| panic!("no source column in {l:?}"))
        })
        .collect();
    assert_eq!(starts.len(), 1, "{}", out.stdout);
    let longest = out
        .stdout
        .lines()
        .map(|l| l.split(' ').next().unwrap().len())
        .max();
    assert!(longest > Some(32), "a long name is listed: {}", out.stdout);
    let parsed = cli(&d, &["tools", "--json"]).await.json();
    assert!(parsed["tools"].as_array().unwrap().len() > 6);
}

/// A reader that goes away (`toolhost health | head -0`) ends the CLI quietly by SIGPIPE,
/// like any Unix filter (regression: `println!` panicked with "Broken pipe").
#[tokio::test]
async fn a_closed_stdout_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let d = Daemon::start().await;
    let mut child = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["tools", "--all"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[tokio::test]
async fn a_bad_worker_count_is_refused_with_a_message_not_a_panic() {
    let home = tempfile::tempdir().unwrap();
    for bad in ["0", "two", "-1", ""] {
        let out = toolhost(home.path())
            .args(["config", "check"])
            .env("TOKIO_WORKER_THREADS", bad)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("TOKIO_WORKER_THREADS must be a whole number above 0"),
            "{bad:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let out = toolhost(home.path())
        .args(["config", "check"])
        .env("TOKIO_WORKER_THREADS", "3")
        .output()
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("TOKIO_WORKER_THREADS"),
        "a good count is taken: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
