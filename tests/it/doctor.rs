//! `toolhost doctor` (issue 40): each frontend's toolhost entry, in that frontend's own file
//! format under a temp HOME, started as that frontend starts it (its environment rule, its
//! directory), and whether it reaches this daemon, in which workspace, with how many tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{toolhost, Daemon, BIN};
use serde_json::{json, Value};

fn home(d: &Daemon) -> PathBuf {
    d.dir.path().join("home")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn write_json(path: &Path, v: &Value) {
    write(path, &serde_json::to_string_pretty(v).unwrap());
}

/// `toolhost --json doctor` in `cwd` with `env` on top of the test's isolation; exit code
/// and the report.
async fn doctor(d: &Daemon, cwd: &Path, env: &[(&str, &str)]) -> (i32, Value, String) {
    let mut cmd = toolhost(d.dir.path());
    cmd.args(["--json", "doctor"]).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// The report's entry of `frontend` read from a file ending in `file`.
fn entry<'a>(report: &'a Value, frontend: &str, file: &str) -> &'a Value {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["frontend"] == frontend && e["file"].as_str().unwrap().ends_with(file))
        .unwrap_or_else(|| panic!("no {frontend} entry from {file} in {report:#}"))
}

/// A project directory (canonical, as the session reports it).
fn project(d: &Daemon) -> PathBuf {
    d.subdir("proj").canonicalize().unwrap()
}

#[tokio::test]
async fn every_frontends_entry_is_run_as_it_would_run_it_and_found_in_its_workspace() {
    let d = Daemon::start().await;
    let (home, proj) = (home(&d), project(&d));
    let stdio = json!({"type": "stdio", "command": BIN, "args": ["mcp"], "env": {}});
    // Claude Code: user scope and a project's local scope in ~/.claude.json, `.mcp.json`.
    write_json(
        &home.join(".claude.json"),
        &json!({"numStartups": 4, "mcpServers": {"toolhost": stdio},
                "projects": {proj.display().to_string():
                    {"allowedTools": [], "mcpServers": {"toolhost": stdio}}}}),
    );
    write_json(
        &proj.join(".mcp.json"),
        &json!({"mcpServers": {"toolhost": {"command": BIN, "args": ["mcp"]}}}),
    );
    write_json(
        &home.join(".config/Claude/claude_desktop_config.json"),
        &json!({"mcpServers": {"toolhost": {"command": BIN, "args": ["mcp"]}}}),
    );
    write_json(
        &home.join(".cursor/mcp.json"),
        &json!({"mcpServers": {"toolhost": {"command": BIN, "args": ["mcp"]}}}),
    );
    // A project Cursor file with other servers and no toolhost entry.
    write_json(
        &proj.join(".cursor/mcp.json"),
        &json!({"mcpServers": {"memory": {"command": "npx", "args": ["-y", "mem"]}}}),
    );
    write_json(
        &proj.join(".vscode/mcp.json"),
        &json!({"inputs": [], "servers": {"toolhost": {"type": "stdio", "command": BIN, "args": ["mcp"]}}}),
    );
    write(
        &home.join(".codex/config.toml"),
        &format!(
            "model = \"o3\"\n\n[mcp_servers.toolhost]\ncommand = \"{BIN}\"\nargs = [\"mcp\"]\n"
        ),
    );
    // Gemini's entry names a socket nobody listens on.
    write_json(
        &home.join(".gemini/settings.json"),
        &json!({"theme": "Default", "mcpServers": {"toolhost":
            {"command": BIN, "args": ["mcp", "--socket", "/nonexistent/toolhost.sock"]}}}),
    );

    let (code, report, err) = doctor(&d, &proj, &[]).await;
    assert_eq!(code, 1, "Gemini's entry fails: {report:#}\n{err}");
    assert_eq!(
        report["socket"],
        d.socket().display().to_string(),
        "{report:#}"
    );
    assert_eq!(report["found_without_environment"], false, "{report:#}");
    assert_eq!(report["entries"].as_array().unwrap().len(), 8, "{report:#}");

    // What the bridge lists: the same for every entry that reaches the daemon.
    let tools = entry(&report, "claude_code", ".mcp.json")["tools"]
        .as_u64()
        .unwrap();
    assert!(tools > 5, "{report:#}");
    let project_at = format!("projects.{}.mcpServers.toolhost", proj.display());
    let in_project = [
        ("claude_code", ".claude.json", "mcpServers.toolhost"),
        ("claude_code", ".claude.json", project_at.as_str()),
        ("claude_code", ".mcp.json", "mcpServers.toolhost"),
        ("cursor", ".cursor/mcp.json", "mcpServers.toolhost"),
        ("vs_code", ".vscode/mcp.json", "servers.toolhost"),
        ("codex", ".codex/config.toml", "mcp_servers.toolhost"),
    ];
    for (frontend, file, at) in in_project {
        let e = report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| {
                e["frontend"] == frontend
                    && e["file"].as_str().unwrap().ends_with(file)
                    && e["at"] == at
            })
            .unwrap_or_else(|| panic!("no {frontend} {at}: {report:#}"));
        assert_eq!(e["reached"], true, "{e:#}");
        assert_eq!(e["workspace"], proj.display().to_string(), "{e:#}");
        assert_eq!(e["workspace_from"], "cwd", "{e:#}");
        assert_eq!(e["tools"], tools, "{e:#}");
        assert!(e.get("fix").is_none(), "{e:#}");
    }
    assert_eq!(
        entry(&report, "codex", "config.toml")["env"],
        "codex_allow_list"
    );
    // Claude Desktop starts it in no project: the daemon's workspace, and it says so.
    let desktop = entry(&report, "claude_desktop", "claude_desktop_config.json");
    assert_eq!(desktop["reached"], true, "{desktop:#}");
    assert_eq!(desktop["env"], "sdk_default");
    assert_eq!(desktop["workspace_from"], "daemon", "{desktop:#}");
    assert_eq!(
        desktop["workspace"],
        d.workspace().canonicalize().unwrap().display().to_string()
    );
    assert!(
        desktop["fix"].as_str().unwrap().contains("--workspace"),
        "{desktop:#}"
    );
    // Gemini reaches nothing; the fix names this daemon's socket.
    let gemini = entry(&report, "gemini", ".gemini/settings.json");
    assert_eq!(gemini["reached"], false, "{gemini:#}");
    assert!(
        gemini["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/toolhost.sock"),
        "{gemini:#}"
    );
    let fix = gemini["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!("--socket {}", d.socket().display())),
        "{fix}"
    );
    let missing = &report["without_toolhost"][0];
    assert_eq!(missing["frontend"], "cursor", "{report:#}");
    assert_eq!(missing["servers"], 1, "{report:#}");

    // The doctor's probes leave no session behind.
    common::eventually(10, "the doctor's sessions to end", || async {
        let r = d.call("session.list", json!({})).await;
        !r["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["meta"]["mcp_client"]["name"] == "toolhost-doctor")
    })
    .await;

    // For people: one block per entry, the failure and its fix.
    let out = toolhost(d.dir.path())
        .arg("doctor")
        .current_dir(&proj)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Gemini CLI"), "{text}");
    assert!(text.contains("FAIL"), "{text}");
    assert!(text.contains(&format!("{tools} tools")), "{text}");
}

#[tokio::test]
async fn the_environment_each_frontend_gives_decides_whether_it_finds_the_daemon() {
    let d = Daemon::start().await;
    let (home, proj) = (home(&d), project(&d));
    // No location file (a daemon restarting, or one that could not write it): only the
    // environment can lead to the socket.
    std::fs::remove_file(home.join(".local/state/toolhost/socket")).unwrap();
    let entry_json = json!({"mcpServers": {"toolhost": {"command": BIN, "args": ["mcp"]}}});
    write_json(&proj.join(".mcp.json"), &entry_json);
    write_json(
        &home.join(".config/Claude/claude_desktop_config.json"),
        &entry_json,
    );
    write(
        &home.join(".codex/config.toml"),
        &format!("[mcp_servers.toolhost]\ncommand = \"{BIN}\"\nargs = [\"mcp\"]\n"),
    );
    let sock = d.socket().display().to_string();
    let (code, report, err) = doctor(&d, &proj, &[("TOOLHOST_SOCKET", &sock)]).await;
    assert_eq!(code, 1, "{report:#}\n{err}");
    // Claude Code passes its environment on: TOOLHOST_SOCKET leads it there.
    let claude = entry(&report, "claude_code", ".mcp.json");
    assert_eq!(claude["reached"], true, "{claude:#}");
    // Codex's allow-list and the SDK default drop it.
    for (frontend, file) in [
        ("codex", "config.toml"),
        ("claude_desktop", "claude_desktop_config.json"),
    ] {
        let e = entry(&report, frontend, file);
        assert_eq!(e["reached"], false, "{e:#}");
        let fix = e["fix"].as_str().unwrap();
        assert!(fix.contains(&format!("--socket {sock}")), "{fix}");
    }
    // The fix, applied in Codex's file (its `env_vars` could pass the variable too).
    write(
        &home.join(".codex/config.toml"),
        &format!("[mcp_servers.toolhost]\ncommand = \"{BIN}\"\nargs = [\"mcp\", \"--socket\", \"{sock}\"]\n"),
    );
    let (_, report, _) = doctor(&d, &proj, &[("TOOLHOST_SOCKET", &sock)]).await;
    let codex = entry(&report, "codex", "config.toml");
    assert_eq!(codex["reached"], true, "{codex:#}");
    assert_eq!(codex["workspace"], proj.display().to_string(), "{codex:#}");
}

/// `toolhost import --rewrite` (issue 40): with the daemon on a socket a bridge would not
/// find by itself (here `--socket` in a temp dir), the entry it writes names that socket,
/// so Codex's allow-list reaches the daemon even with no location file.
#[tokio::test]
async fn the_rewritten_entry_names_a_socket_the_bridge_would_not_find() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let (home, proj) = (home(&d), project(&d));
    let fixture = json!({"mcpServers": {"fx": {"command": common::FIXTURE, "args": []}}});
    write_json(&proj.join(".mcp.json"), &fixture);
    write(
        &home.join(".codex/config.toml"),
        &format!("[mcp_servers.fx]\ncommand = \"{}\"\n", common::FIXTURE),
    );
    let sock = d.socket().display().to_string();
    let out = toolhost(d.dir.path())
        .args(["--socket", &sock, "import", "--apply", "--rewrite"])
        .current_dir(&proj)
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(proj.join(".mcp.json")).unwrap()).unwrap();
    assert_eq!(
        mcp["mcpServers"]["toolhost"]["args"],
        json!(["mcp", "--socket", sock]),
        "{mcp}"
    );
    let codex = std::fs::read_to_string(home.join(".codex/config.toml")).unwrap();
    assert!(
        codex.contains(&format!("args = [\"mcp\", \"--socket\", \"{sock}\"]")),
        "{codex}"
    );
    // Started as Codex starts it, with no location file: it reaches the daemon.
    std::fs::remove_file(home.join(".local/state/toolhost/socket")).unwrap();
    let (_, report, _) = doctor(&d, &proj, &[("TOOLHOST_SOCKET", &sock)]).await;
    for (frontend, file) in [("codex", "config.toml"), ("claude_code", ".mcp.json")] {
        let e = entry(&report, frontend, file);
        assert_eq!(e["reached"], true, "{e:#}");
    }
}
