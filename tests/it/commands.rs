//! Slash commands end to end: real command folders written by the tests, the real daemon,
//! the socket with raw JSON-RPC, and the MCP facade driven by the official Python SDK
//! (tests/facade_py/commands.py) against the fixture server (tests/fixtures/mcp_server.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::{eventually, result, Daemon, BIN, FIXTURE};
use serde_json::{json, Value};

/// Writes `root/rel` the way an editor saves (a temp file renamed over it).
fn write_command(root: &Path, rel: &str, text: &str) {
    let to = root.join(rel);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let tmp = to.with_file_name(".saving");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, to).unwrap();
}

/// The fixture server, which also serves the prompt `greet {name}`.
fn fixture(dir: &Path) -> Value {
    json!({"command": FIXTURE, "env": {
        "FIXTURE_RESOURCES": "fx",
        "FIXTURE_EVENTS_FILE": dir.join("fx.events"),
    }})
}

const REVIEW: &str = "---
description: Reviews a pull request.
arguments:
  - name: pr
    description: The pull request's number
    required: true
  - name: level
    choices: [low, high]
---
Review PR #$1 at {{level}} depth.
All: $ARGUMENTS
PR again: {{ pr }}, not {{unknown}}.
";

async fn error(d: &Daemon, method: &str, params: Value) -> (i64, String) {
    let r = d.call(method, params).await;
    let e = &r["error"];
    assert!(e.is_object(), "{method} did not fail: {r}");
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

/// The text of `get_command`'s one message.
async fn expand(d: &Daemon, name: &str, arguments: Value) -> String {
    let r = result(
        d,
        "get_command",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["messages"][0]["role"], "user");
    assert_eq!(r["messages"][0]["content"]["type"], "text");
    r["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn commands_are_prompts_through_the_facade_with_the_python_sdk() {
    let d = Daemon::start_in(|dir| {
        let ws = dir.join("ws/.toolhost/commands");
        write_command(&ws, "review/pr.md", REVIEW);
        write_command(&ws, "echo.md", "Echo: $ARGUMENTS / second: $2\n");
        write_command(&dir.join("xdg/toolhost/commands"), "mine.md", "Mine.\n");
        json!({"mcp_servers": {"fx": fixture(dir)}})
    })
    .await;
    d.trust_workspace().await;
    eventually(30, "fx to be ready", || async {
        let s = d.call("mcp.status", json!({"server": "fx"})).await;
        s["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let sock = d.socket();
    let commands_dir = d.workspace().join(".toolhost/commands");
    let args = [BIN, sock.to_str().unwrap(), commands_dir.to_str().unwrap()];
    let seen = common::python_sdk("commands.py", &args, &[]).await;
    // The commands first, by name, then the servers' prompts.
    assert_eq!(
        seen["prompts"],
        json!([
            "echo",
            "mcp_reload",
            "mcp_status",
            "mine",
            "review_pr",
            "skills",
            "tools",
            "undo",
            "mcp_fx_greet"
        ]),
        "{seen}"
    );
    assert_eq!(
        seen["review_pr"],
        json!({
            "title": "/review pr",
            "description": "Reviews a pull request.",
            "arguments": [["pr", true], ["level", false]],
        })
    );
    assert_eq!(
        seen["expanded"],
        json!(["Review PR #123 at high depth.\nAll: 123 high\nPR again: 123, not {{unknown}}."])
    );
    assert_eq!(seen["roles"], json!(["user"]));
    assert_eq!(
        seen["free_text"],
        json!(["Echo: one two three / second: two"])
    );
    assert_eq!(seen["missing"]["code"], -32602, "{seen}");
    assert!(
        seen["missing"]["message"]
            .as_str()
            .unwrap()
            .contains("needs the argument 'pr'"),
        "{seen}"
    );
    assert_eq!(seen["not_a_choice"]["code"], -32602, "{seen}");
    assert!(
        seen["not_a_choice"]["message"]
            .as_str()
            .unwrap()
            .contains("one of: low, high"),
        "{seen}"
    );
    assert_eq!(seen["completion"], json!(["high"]));
    assert_eq!(seen["completion_all"], json!(["low", "high"]));
    let status = seen["mcp_status"][0].as_str().unwrap();
    assert!(status.starts_with("# MCP servers (1)"), "{status}");
    assert!(status.contains("- **fx** (stdio): ready, "), "{status}");
    assert_eq!(seen["upstream"], "Hello, Ada!");
    assert_eq!(seen["after_add"], true, "{seen}");
}

#[tokio::test]
async fn the_socket_lists_expands_and_reports_invalid_files() {
    let d = Daemon::start_in(|dir| {
        let ws = dir.join("ws/.toolhost/commands");
        write_command(
            &dir.join("team"),
            "deploy.md",
            "---\ndescription: Deploys.\narguments:\n  - name: env\n---\nDeploy to {{env}}.\n",
        );
        // The same name in the workspace: a clash, the configured folder wins.
        write_command(&ws, "deploy.md", "Deploy elsewhere.\n");
        // A file overrides the built-in command of its name.
        write_command(&ws, "skills.md", "My own skills list.\n");
        write_command(&ws, "bad-description.md", "---\ndescription: [x]\n---\nx\n");
        write_command(
            &ws,
            "bad-arguments.md",
            "---\narguments:\n  - name: a\n    require: true\n---\nx\n",
        );
        write_command(&ws, "Upper.md", "x\n");
        write_command(&ws, "not-yaml.md", "---\ndescription: [unclosed\n---\nx\n");
        // A command file that is a symlink out of the folder is never read.
        std::fs::write(dir.join("secret.md"), "SECRET\n").unwrap();
        std::os::unix::fs::symlink(dir.join("secret.md"), ws.join("escape.md")).unwrap();
        // Not a command: deeper than NAME/SUB.md, and not Markdown.
        write_command(&ws, "a/b/c.md", "x\n");
        write_command(&ws, "notes.txt", "x\n");
        json!({"commands": {"paths": ["team"]}})
    })
    .await;
    d.trust_workspace().await;
    let list = result(&d, "list_commands", json!({})).await;
    let listed: Vec<(String, String)> = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expect = [
        ("deploy", "config"),
        ("mcp reload", "builtin"),
        ("mcp status", "builtin"),
        ("skills", "workspace"),
        ("tools", "builtin"),
        ("undo", "builtin"),
    ];
    assert_eq!(
        listed,
        expect.map(|(n, s)| (n.to_owned(), s.to_owned())),
        "{list}"
    );
    let deploy = &list["commands"][0];
    assert_eq!(deploy["prompt"], "deploy");
    assert_eq!(
        deploy["path"],
        d.dir.path().join("team/deploy.md").display().to_string()
    );
    assert_eq!(
        deploy["arguments"],
        json!([{"name": "env", "required": false}])
    );
    assert!(list["commands"][2].get("path").is_none(), "{list}");
    assert!(list["etag"].as_str().unwrap().starts_with("sha256:"));

    assert_eq!(
        expand(&d, "/deploy", json!({"env": "prod"})).await,
        "Deploy to prod."
    );
    assert_eq!(expand(&d, "skills", json!({})).await, "My own skills list.");
    let tools = expand(&d, "tools", json!({})).await;
    assert!(tools.starts_with("# Tools ("), "{tools}");
    assert!(tools.contains("(built-in): "), "{tools}");
    let (code, message) = error(&d, "get_command", json!({"name": "nothing"})).await;
    assert_eq!(
        (code, message.as_str()),
        (-32602, "no command named 'nothing'")
    );
    let (code, message) = error(
        &d,
        "get_command",
        json!({"name": "deploy", "arguments": {"target": "x"}}),
    )
    .await;
    assert_eq!(code, -32602);
    assert_eq!(message, "command 'deploy' has no argument 'target'");

    let h = result(&d, "host.health", json!({})).await;
    assert_eq!(h["status"], "degraded", "{h}");
    let errors: Vec<String> = serde_json::from_value(h["command_errors"].clone()).unwrap();
    let ws = d.workspace().join(".toolhost/commands");
    let at = |file: &str, rest: &str| format!("{}: {rest}", ws.join(file).display());
    let has = |want: String| {
        assert!(
            errors.iter().any(|e| e.starts_with(&want)),
            "no {want:?} in {errors:#?}"
        )
    };
    has(at("bad-description.md", "description: must be a string"));
    has(at(
        "bad-arguments.md",
        "arguments: item 1: unknown key `require`",
    ));
    has(at("Upper.md", "name: the file name: 'Upper' may hold only"));
    has(at("not-yaml.md", "front matter is not valid YAML"));
    has(at("escape.md", "the file "));
    has(format!(
        "command 'deploy' is defined twice: {} is used, {} is ignored",
        d.dir.path().join("team/deploy.md").display(),
        ws.join("deploy.md").display()
    ));
    assert_eq!(errors.len(), 6, "{errors:#?}");
    assert!(!errors.iter().any(|e| e.contains("SECRET")));

    // `mcp reload` is an action: it reloads config.json and reports the result.
    let dir = d.dir.path().to_path_buf();
    common::write_atomic(
        &d.config_path(),
        &json!({"commands": {"paths": ["team"]}, "mcp_servers": {"fx": fixture(&dir)}}),
    );
    let reload = expand(&d, "mcp reload", json!({})).await;
    assert!(
        reload.starts_with("# Config reload\n\nApplied "),
        "{reload}"
    );
    assert!(reload.contains("# MCP servers (1)"), "{reload}");
    assert!(reload.contains("- **fx** (stdio): "), "{reload}");
}

#[tokio::test]
async fn adding_editing_and_removing_a_command_notifies_once_each() {
    let d = Daemon::start_in(|_| json!({})).await;
    d.trust_workspace().await;
    let mut commands = d.subscribed("subscribe_commands_changed").await;
    let mut prompts = d.subscribed("subscribe_prompts_changed").await;
    // The folder does not exist yet: it is picked up when created.
    let root = d.workspace().join(".toolhost/commands");
    let builtins = 5;
    let steps: [(&str, Option<&str>, usize); 3] = [
        ("add", Some("Restart {{what}}.\n"), builtins + 1),
        ("edit", Some("Restart $ARGUMENTS now.\n"), builtins + 1),
        ("remove", None, builtins),
    ];
    let mut etag = result(&d, "list_commands", json!({})).await["etag"].clone();
    for (step, text, count) in steps {
        match text {
            Some(t) => write_command(&root, "ops/restart.md", t),
            None => std::fs::remove_dir_all(root.join("ops")).unwrap(),
        }
        let n = commands.notification("commands_changed").await;
        assert_eq!(n["count"], count, "{step}: {n}");
        assert_ne!(n["etag"], etag, "{step}");
        etag = n["etag"].clone();
        let p = prompts.notification("prompts_changed").await;
        assert_eq!(p["prompts"], count, "{step}: {p}");
        commands.quiet(600).await;
        prompts.quiet(100).await;
        let list = result(&d, "list_commands", json!({})).await;
        assert_eq!(list["etag"], etag, "{step}");
        let listed = list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "ops restart");
        assert_eq!(listed, text.is_some(), "{step}: {list}");
    }
}

#[tokio::test]
async fn a_profile_serves_commands_by_prompt_name() {
    let d =
        Daemon::start_in(|_| json!({"profiles": {"status-only": {"tools": ["mcp_status"]}}})).await;
    let all = result(&d, "list_prompts", json!({})).await;
    assert_eq!(all["prompts"].as_array().unwrap().len(), 5, "{all}");
    let one = result(&d, "list_prompts", json!({"profile": "status-only"})).await;
    assert_eq!(one["prompts"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["prompts"][0]["name"], "mcp_status");
    assert_eq!(one["prompts"][0]["server"], "toolhost");
    let (code, _) = error(
        &d,
        "get_prompt",
        json!({"name": "tools", "profile": "status-only"}),
    )
    .await;
    assert_eq!(code, -32602);
    let r = result(&d, "get_prompt", json!({"name": "mcp_status"})).await;
    let text = r["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("No MCP server is configured."), "{text}");
}

#[tokio::test]
async fn a_session_workspace_brings_its_commands_also_after_a_restart() {
    let mut d = Daemon::start_in(|_| json!({})).await;
    let project = d.dir.path().join("project");
    write_command(
        &project.join(".toolhost/commands"),
        "release.md",
        "Release {{version}}.\n",
    );
    let project = project.canonicalize().unwrap();
    let names = |list: Value| -> Vec<String> {
        list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!names(result(&d, "list_commands", json!({})).await).contains(&"release".into()));
    let r = d
        .call("session.create", json!({"id": "s1", "workspace": project}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    // Scanned before the session is answered: the project's command waits for the user's
    // trust, and trusted (kept in the data dir), it is listed.
    assert_eq!(d.trust_waiting().await, [".toolhost/commands/release.md"]);
    d.trust(&[project.as_os_str()]).await;
    let list = result(&d, "list_commands", json!({})).await;
    let release = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "release")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(release["source"], "workspace");
    assert_eq!(
        release["path"],
        project
            .join(".toolhost/commands/release.md")
            .display()
            .to_string()
    );
    // The session is kept in the store: the next daemon searches its workspace again.
    d.stop().await;
    d.spawn(&[]).await;
    assert!(names(result(&d, "list_commands", json!({})).await).contains(&"release".into()));
}

/// The frontends' own command folders are served as toolhost's are, each command tagged
/// with where it came from: Claude Code's Markdown (front matter of its own left alone),
/// Codex's prompts, Gemini CLI's TOML with `{{args}}`; toolhost's own folder wins a clash,
/// which is reported; a command added later is picked up.
#[tokio::test]
async fn the_frontends_own_command_folders_are_served_with_their_source() {
    let mut d = Daemon::unstarted();
    let home = d.dir.path().join("home");
    let ws = d.workspace();
    write_command(
        &home,
        ".claude/commands/review.md",
        "---\ndescription: Claude's review.\nallowed-tools: Bash(git diff:*)\n---\nReview $ARGUMENTS.\n",
    );
    write_command(&home, ".codex/prompts/explain.md", "Explain $1 simply.\n");
    write_command(
        &home,
        ".gemini/commands/git/commit.toml",
        "description = \"Writes a commit message.\"\nprompt = \"\"\"\nWrite a commit message for {{args}}.\n\"\"\"\n",
    );
    write_command(
        &ws,
        ".claude/commands/frontend/component.md",
        "Make a component.\n",
    );
    write_command(
        &ws,
        ".gemini/commands/lint.toml",
        "prompt = \"Lint the code.\"\n",
    );
    write_command(&ws, ".toolhost/commands/review.md", "Our review.\n");
    // The same name in the workspace's and the user's Claude Code folders: the workspace's
    // (row 3 of the order in proto-docs/commands.md) wins over the user's (row 6).
    write_command(
        &ws,
        ".claude/commands/deploy.md",
        "Deploy from the project.\n",
    );
    write_command(&home, ".claude/commands/deploy.md", "Deploy from home.\n");
    let codex = home.join(".codex");
    d.spawn(&[("CODEX_HOME", codex.to_str().unwrap())]).await;
    // The workspace's folders wait for the user's trust like toolhost's own (trust_gate.rs).
    d.trust_workspace().await;
    eventually(10, "the workspace's commands listed", || async {
        let list = result(&d, "list_commands", json!({})).await;
        list.to_string().contains("workspace_gemini")
    })
    .await;

    let list = result(&d, "list_commands", json!({})).await;
    let field = |name: &str, key: &str| {
        list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c[key].clone())
    };
    let source = |name: &str| field(name, "source");
    assert_eq!(source("review"), Some(json!("workspace")), "{list}");
    assert_eq!(
        source("frontend component"),
        Some(json!("workspace_claude"))
    );
    assert_eq!(source("lint"), Some(json!("workspace_gemini")));
    assert_eq!(source("explain"), Some(json!("user_codex")));
    assert_eq!(source("git commit"), Some(json!("user_gemini")));
    assert_eq!(source("deploy"), Some(json!("workspace_claude")));
    // Gemini's TOML `description`.
    assert_eq!(
        field("git commit", "description"),
        Some(json!("Writes a commit message."))
    );
    let health = d.health().await;
    let deploy_clash = format!(
        "command 'deploy' is defined twice: {} is used, {} is ignored",
        ws.join(".claude/commands/deploy.md").display(),
        home.join(".claude/commands/deploy.md").display()
    );
    assert!(
        health["command_errors"]
            .as_array()
            .unwrap()
            .contains(&json!(deploy_clash)),
        "{health}"
    );
    let clash = format!(
        "command 'review' is defined twice: {} is used, {} is ignored",
        ws.join(".toolhost/commands/review.md").display(),
        home.join(".claude/commands/review.md").display()
    );
    assert!(
        health["command_errors"]
            .as_array()
            .unwrap()
            .contains(&json!(clash)),
        "{health}"
    );
    assert_eq!(
        expand(&d, "git commit", json!({"args": "the parser fix"})).await,
        "Write a commit message for the parser fix."
    );
    assert_eq!(
        expand(&d, "lint", json!({"args": "src/"})).await,
        "Lint the code.\n\nsrc/"
    );
    assert_eq!(
        expand(&d, "explain", json!({"arguments": "lifetimes in Rust"})).await,
        "Explain lifetimes simply."
    );

    write_command(&home, ".codex/prompts/later.md", "Later.\n");
    eventually(10, "the Codex prompt added later to be listed", || async {
        let list = result(&d, "list_commands", json!({})).await;
        list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "later" && c["source"] == "user_codex")
    })
    .await;
    // Edited and removed, as they are hot reloaded.
    write_command(
        &home,
        ".gemini/commands/git/commit.toml",
        "description = \"Writes a better commit message.\"\nprompt = \"Commit {{args}}.\"\n",
    );
    std::fs::remove_file(home.join(".codex/prompts/explain.md")).unwrap();
    eventually(10, "the edit and the removal to be taken up", || async {
        let list = result(&d, "list_commands", json!({})).await;
        let all = list["commands"].as_array().unwrap();
        !all.iter().any(|c| c["name"] == "explain")
            && all.iter().any(|c| {
                c["name"] == "git commit" && c["description"] == "Writes a better commit message."
            })
    })
    .await;
    assert_eq!(
        expand(&d, "git commit", json!({"args": "x"})).await,
        "Commit x."
    );
}
