//! A newcomer's first steps: `toolhost --version` / `where`, and `toolhost import` of the
//! MCP servers other frontends hold, with real files in each frontend's format written into
//! a temp HOME and workspace, run through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// Runs `toolhost ARGS` in `cwd` with the user directories of `root`; (exit, stdout, stderr).
async fn run(
    root: &Path,
    cwd: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (i32, String, String) {
    let mut cmd = toolhost(root);
    cmd.current_dir(cwd).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn version_and_where_name_the_paths_a_client_uses() {
    let root = tempfile::tempdir().unwrap();
    let (code, out, _) = run(root.path(), root.path(), &[], &["--version"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("toolhost {}", env!("CARGO_PKG_VERSION"))
    );

    // No daemon: the default socket under XDG_RUNTIME_DIR, exit 3, the default config.
    let (code, out, _) = run(root.path(), root.path(), &[], &["where"]).await;
    assert_eq!(code, 3, "{out}");
    let sock = root.path().join("runtime/toolhost/toolhost.sock");
    assert!(
        out.contains(&format!(
            "socket    {} (no daemon answering",
            sock.display()
        )),
        "{out}"
    );
    let config = root.path().join("xdg/toolhost/config.json");
    assert!(
        out.contains(&format!("config    {} (not there yet", config.display())),
        "{out}"
    );

    // A daemon answering: its own config file and data directory.
    let d = Daemon::start().await;
    let (code, out, err) = run(
        d.dir.path(),
        d.dir.path(),
        &[],
        &["--json", "--socket", d.socket().to_str().unwrap(), "where"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let w: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["daemon"]["state"], "answering", "{w}");
    assert_eq!(w["daemon"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(w["socket"], d.socket().display().to_string());
    assert_eq!(w["config"], d.config_path().display().to_string());
    assert_eq!(w["config_exists"], true);
    assert_eq!(w["data_dir"], d.data_dir().display().to_string());
}

/// A home and a project holding servers in every frontend's format.
struct Frontends {
    root: tempfile::TempDir,
}

impl Frontends {
    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }
    fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }
    fn config(&self) -> PathBuf {
        self.root.path().join("xdg/toolhost/config.json")
    }
    fn claude(&self) -> PathBuf {
        self.home().join(".claude.json")
    }
    fn desktop(&self) -> PathBuf {
        self.home()
            .join(".config/Claude/claude_desktop_config.json")
    }
    fn cursor(&self) -> PathBuf {
        self.home().join(".cursor/mcp.json")
    }
    fn vscode(&self) -> PathBuf {
        self.project().join(".vscode/mcp.json")
    }
    fn codex(&self) -> PathBuf {
        self.home().join(".codex/config.toml")
    }
    fn gemini(&self) -> PathBuf {
        self.home().join(".gemini/settings.json")
    }
    fn mcp_json(&self) -> PathBuf {
        self.project().join(".mcp.json")
    }

    const CODEX: &'static str = "# my Codex settings\nmodel = \"o4\"\n\n[mcp_servers.docs]\n# the docs server\nurl = \"https://docs.example/mcp\"\nbearer_token_env_var = \"DOCS_TOKEN\"\n\n[profiles.fast]\nmodel = \"o4-mini\"\n";

    fn new() -> Frontends {
        let f = Frontends {
            root: tempfile::tempdir().unwrap(),
        };
        let p = f.project().display().to_string();
        // Claude Code: a user-scope server, a project-scope one, other keys beside them.
        write(
            &f.claude(),
            &json!({
                "numStartups": 7,
                "mcpServers": {"fs": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/a"], "env": {}}},
                "projects": {p.clone(): {"allowedTools": ["Bash"], "mcpServers": {"proj": {"command": "proj-mcp", "args": []}}}}
            })
            .to_string(),
        );
        // Claude Desktop and Gemini CLI hold the same server: merged.
        let everything =
            json!({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]});
        write(
            &f.desktop(),
            &json!({"mcpServers": {"everything": everything}, "globalShortcut": "Ctrl+Space"})
                .to_string(),
        );
        write(
            &f.gemini(),
            &json!({"theme": "dark", "mcpServers": {"everything": everything, "legacy": {"url": "https://old.example/sse"}}})
                .to_string(),
        );
        // Cursor: `fs` with a different folder (a clash) and a server with a literal token;
        // its file is a link into a dotfiles repository.
        let dotfiles = f.root.path().join("dotfiles/cursor-mcp.json");
        std::fs::create_dir_all(f.cursor().parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&dotfiles, f.cursor()).unwrap();
        write(
            &dotfiles,
            &json!({"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/b"]},
                "github": {"command": "github-mcp", "args": ["stdio"], "env": {"GITHUB_TOKEN": "ghp_s3cretvalue", "GITHUB_HOST": "github.com"}}
            }})
            .to_string(),
        );
        write(
            &f.vscode(),
            &json!({"inputs": [
                    {"type": "promptString", "id": "db-pass", "password": true},
                    {"type": "promptString", "id": "site"},
                ], "servers": {
                "time": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
                "lint": {"type": "stdio", "command": "lint-mcp", "args": ["--root", "${workspaceFolder}"]},
                "db": {"type": "stdio", "command": "db-mcp", "env": {"DB_PASSWORD": "${input:db-pass}"}},
                "site": {"type": "stdio", "command": "site-mcp", "args": ["${input:site}", "${workspaceFolderBasename}"]},
            }})
            .to_string(),
        );
        write(&f.codex(), Self::CODEX);
        write(
            &f.mcp_json(),
            &json!({"mcpServers": {"notes": {"command": "notes-mcp"}}}).to_string(),
        );
        f
    }

    async fn import(&self, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["import"];
        all.extend_from_slice(args);
        run(self.root.path(), &self.project(), env, &all).await
    }
}

#[tokio::test]
async fn import_plans_applies_and_rewrites_every_frontend() {
    let f = Frontends::new();
    let originals: Vec<(PathBuf, String)> = [
        f.claude(),
        f.desktop(),
        f.cursor(),
        f.vscode(),
        f.codex(),
        f.gemini(),
        f.mcp_json(),
    ]
    .into_iter()
    .map(|p| {
        let text = std::fs::read_to_string(&p).unwrap();
        (p, text)
    })
    .collect();

    // The plan: nothing written.
    let (code, out, err) = f.import(&[], &[]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    for name in [
        "fs ",
        "proj",
        "everything",
        "github",
        "time",
        "docs",
        "notes",
        "fs-cursor",
        "legacy",
    ] {
        assert!(
            out.contains(&format!("add     {name}")),
            "{name} planned:\n{out}"
        );
    }
    assert!(out.contains("merged: 2 identical definitions"), "{out}");
    assert!(
        out.contains("name clash: fs is taken by a different definition, so this one is fs-cursor"),
        "{out}"
    );
    assert!(out.contains("add     legacy               sse "), "{out}");
    assert!(
        out.contains(&format!(
            "GITHUB_TOKEN=***             from {} at mcpServers.github.env.GITHUB_TOKEN",
            f.cursor().display()
        )),
        "{out}"
    );
    assert!(
        !out.contains("ghp_s3cretvalue"),
        "a secret is never shown: {out}"
    );
    assert!(!f.config().exists());

    // --apply: the secret's value goes to the secrets file; a variable Codex only names
    // (DOCS_TOKEN) must be set, so that one server is refused and the rest land.
    let (code, out, err) = f.import(&[], &["--apply"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("docs not added"), "{err}");
    assert!(err.contains("DOCS_TOKEN"), "{err}");
    let secrets = f.config().with_file_name("secrets.env");
    assert_eq!(
        std::fs::read_to_string(&secrets).unwrap(),
        "GITHUB_TOKEN=ghp_s3cretvalue\n"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secrets).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let cfg = read_json(&f.config());
    let servers = cfg["mcp_servers"].as_object().unwrap();
    assert!(!servers.contains_key("docs"));
    assert_eq!(servers["fs"]["args"][2], "/a");
    assert_eq!(servers["fs-cursor"]["args"][2], "/b");
    assert_eq!(
        servers["legacy"],
        json!({"url": "https://old.example/sse", "type": "sse"})
    );
    assert_eq!(servers["proj"]["command"], "proj-mcp");
    // VS Code's ${workspaceFolder}: one process per session workspace.
    assert_eq!(
        servers["lint"],
        json!({"command": "lint-mcp", "args": ["--root", "${WORKSPACE}"], "scope": "per_workspace"})
    );

    // With the named variable set, the rest is added; everything else is already there.
    let bin = f.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("toolhost")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let env = [
        ("DOCS_TOKEN", "d"),
        ("DB_PASS", "p"),
        ("PATH", path.as_str()),
    ];
    let (code, out, err) = f.import(&env, &["--apply"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("present fs "), "{out}");
    assert!(out.contains("added db, docs to "), "{out}");
    assert_eq!(
        read_json(&f.config())["mcp_servers"]["docs"]["headers"]["Authorization"],
        "Bearer ${DOCS_TOKEN}"
    );
    let text = std::fs::read_to_string(f.config()).unwrap();
    assert!(!text.contains("ghp_s3cretvalue"), "{text}");
    let cfg: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        cfg["mcp_servers"]["github"]["env"],
        json!({"GITHUB_TOKEN": "${GITHUB_TOKEN}", "GITHUB_HOST": "github.com"})
    );

    // --rewrite: each file keeps its other keys, loses the imported servers, gains toolhost
    // (by its name: `toolhost` is on PATH, so a committed `.mcp.json` works elsewhere too).
    let (code, out, err) = f.import(&env, &["--rewrite"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let entry = json!({"command": "toolhost", "args": ["mcp"]});
    for (path, original) in &originals {
        let backup = PathBuf::from(format!("{}.toolhost-backup", path.display()));
        assert_eq!(
            &std::fs::read_to_string(&backup).unwrap(),
            original,
            "{}",
            backup.display()
        );
    }
    let claude = read_json(&f.claude());
    assert_eq!(claude["numStartups"], 7);
    assert_eq!(claude["mcpServers"], json!({"toolhost": entry}));
    let project = &claude["projects"][f.project().display().to_string()];
    assert_eq!(project["allowedTools"], json!(["Bash"]));
    assert_eq!(project["mcpServers"], json!({}));
    assert_eq!(read_json(&f.desktop())["globalShortcut"], "Ctrl+Space");
    assert_eq!(
        read_json(&f.desktop())["mcpServers"],
        json!({"toolhost": entry})
    );
    assert_eq!(
        read_json(&f.cursor())["mcpServers"],
        json!({"toolhost": entry})
    );
    let link = std::fs::symlink_metadata(f.cursor()).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "written through, not replaced"
    );
    let gemini = read_json(&f.gemini());
    assert_eq!(gemini["theme"], "dark");
    assert_eq!(gemini["mcpServers"], json!({"toolhost": entry}));
    // VS Code: the input only an imported server used is gone; the one of the server
    // left behind (a variable only VS Code fills in) stays.
    let vscode = read_json(&f.vscode());
    assert_eq!(
        vscode["inputs"],
        json!([{"type": "promptString", "id": "site"}])
    );
    let servers = vscode["servers"].as_object().unwrap();
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    assert_eq!(names, ["site", "toolhost"]);
    assert_eq!(
        servers["toolhost"],
        json!({"type": "stdio", "command": "toolhost", "args": ["mcp"]})
    );
    assert_eq!(
        read_json(&f.mcp_json())["mcpServers"],
        json!({"toolhost": entry})
    );
    // Codex: comments and the other tables as they were.
    let codex = std::fs::read_to_string(f.codex()).unwrap();
    assert!(
        codex.starts_with("# my Codex settings\nmodel = \"o4\"\n"),
        "{codex}"
    );
    assert!(
        codex.contains("[profiles.fast]\nmodel = \"o4-mini\"\n"),
        "{codex}"
    );
    assert!(!codex.contains("docs"), "{codex}");
    assert!(
        codex.contains("[mcp_servers.toolhost]\ncommand = \"toolhost\"\nargs = [\"mcp\"]\n"),
        "{codex}"
    );

    // Again: nothing left to import, and the backups are never overwritten.
    let (code, out, err) = f.import(&env, &["--apply", "--rewrite"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!out.lines().any(|l| l.starts_with("add ")), "{out}");
    assert!(!out.contains("rewrote"), "{out}");
}

#[tokio::test]
async fn import_apply_goes_through_the_running_daemon() {
    let d = Daemon::start_with(Some(json!({}))).await;
    let root = d.dir.path();
    write(
        &root.join("home/.cursor/mcp.json"),
        &json!({"mcpServers": {"fx": {"command": FIXTURE, "args": []}}}).to_string(),
    );
    let sock = d.socket();
    let (code, out, err) = run(
        root,
        root,
        &[],
        &["--socket", sock.to_str().unwrap(), "import", "--apply"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("config.json: {}", d.config_path().display())),
        "the daemon's config file: {out}"
    );
    assert_eq!(
        read_json(&d.config_path())["mcp_servers"]["fx"]["command"],
        FIXTURE
    );
    // The daemon applied its own edit and started the server.
    eventually(20, "the imported server to be ready", || async {
        let s = d.call("mcp.status", json!({})).await;
        s["result"]["servers"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["name"] == "fx" && s["state"] == "ready"))
    })
    .await;
}

async fn greet_listed(d: &Daemon) -> bool {
    let r = d.call("list_tools", json!({})).await;
    tool_names(&r["result"]).contains(&"greet")
}

/// The README's custom-tool loop, from a project that is not the daemon's workspace: the
/// CLI says the folder is not searched and how to make it so; a session there makes the
/// daemon search it (also after a restart), and the tool runs once approved.
#[tokio::test]
async fn custom_tool_loop_from_a_directory_other_than_the_daemons() {
    let mut d = Daemon::start().await;
    let project = d.dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = project.canonicalize().unwrap();
    let sock = d.socket();
    let sock = sock.to_str().unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec!["--socket", sock];
        all.extend_from_slice(args);
        let all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        let (root, cwd) = (d.dir.path().to_path_buf(), project.clone());
        async move {
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            run(&root, &cwd, &[], &refs).await
        }
    };
    let folder = project.join(".toolhost/tools");
    let not_searched = format!(
        "note: the running daemon does not search {}",
        folder.display()
    );
    let command = format!("toolhost session create --workspace {}", project.display());

    let (code, out, err) = cli(&["tool", "new", "greet"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(&not_searched), "{out}");
    assert!(
        out.contains(&format!("to have it searched: {command}")),
        "{out}"
    );
    assert!(out.contains("toolhost tools approve greet"), "{out}");
    let (code, out, _) = cli(&["tool", "check"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok      greet"), "{out}");
    assert!(out.contains(&not_searched), "{out}");
    // `invoke` works in the directory it runs in (issue 40): the daemon now searches the
    // project, whose tool waits for the user's trust and says how to give it.
    let (code, _, err) = cli(&["invoke", "greet"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("waits for workspace trust") && err.contains("toolhost tools approve greet"),
        "{err}"
    );

    // The printed command: the daemon now searches the project (the tool waits for approval).
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let (code, out, err) = cli(&args).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let health = d.call("host.health", json!({})).await;
    assert_eq!(
        health["result"]["trust_waiting"][0]["item"], ".toolhost/tools/greet",
        "{health}"
    );
    let (code, out, _) = cli(&["tool", "check"]).await;
    assert!(code == 0 && !out.contains("note:"), "{out}");
    let (code, out, err) = cli(&["tools", "approve", "greet"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = cli(&["invoke", "greet", "--args", r#"{"name": "you"}"#]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Hello, you!"), "{out}");
    // Listed for sessions in the project only: a session elsewhere does not see it.
    let elsewhere = d.call("session.create", json!({})).await;
    let names = elsewhere["result"]["tool_names"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!names.contains(&json!("greet")), "{elsewhere}");
    let here = d
        .call(
            "session.create",
            json!({"workspace": project.display().to_string()}),
        )
        .await;
    let names = here["result"]["tool_names"].as_array().unwrap().clone();
    assert!(names.contains(&json!("greet")), "{here}");

    // After a restart the stored session's workspace is searched again.
    d.stop().await;
    d.spawn(&[]).await;
    eventually(10, "greet to be listed after the restart", || {
        greet_listed(&d)
    })
    .await;

    // Without a session there, a restarted daemon does not search the project; a new
    // session brings it back, in that session's own view at once (the pin was kept).
    let sessions = d.call("session.list", json!({})).await;
    for s in sessions["result"]["sessions"].as_array().unwrap() {
        d.call("session.delete", json!({"id": s["id"]})).await;
    }
    d.stop().await;
    d.spawn(&[]).await;
    assert!(!greet_listed(&d).await);
    let s = d
        .call(
            "session.create",
            json!({"workspace": project.display().to_string()}),
        )
        .await;
    assert!(
        s["result"]["tool_names"]
            .as_array()
            .unwrap()
            .contains(&json!("greet")),
        "{s}"
    );
}

/// A free TCP port on loopback (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Issue 41's "done when": five frontends' files in their real formats, holding one
/// server spelled five ways (Claude Code with `env: {}`, the others without), toolhost's
/// own entries (its HTTP listener, `mcp-remote` to it, its binary), an SSE server, an HTTP
/// server twice, and a key in `args`: `import --apply` against the running daemon leaves
/// one entry per distinct server, none of toolhost, no secret in config.json, and the
/// daemon serves all of them, the key included, without a restart.
#[tokio::test]
async fn five_frontends_import_as_one_entry_per_server_served_without_a_restart() {
    let (_sse, sse_url) = common::mcp::legacy_sse_server().await;
    let (_web, web_url) = common::mcp::http_fixture(&[]).await;
    let port = free_port();
    let mut d = Daemon::unstarted();
    let listen = json!({"listen": {"tcp": format!("127.0.0.1:{port}")}});
    std::fs::write(d.config_path(), listen.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_TOKEN", "t0k")]).await;
    let pid = d.pid();
    let root = d.dir.path();
    let (home, project) = (root.join("home"), root.join("project"));
    let own = format!("http://127.0.0.1:{port}/mcp");
    let key = "ctx7sk-0123456789abcdef";
    let mem = json!({"command": FIXTURE, "args": ["--", "mem"]});
    let context7 = json!({"type": "stdio", "command": FIXTURE,
        "args": ["--", "--api-key", key], "env": {"FIXTURE_WHEREAMI": "1"}});
    write(
        &home.join(".claude.json"),
        &json!({"numStartups": 3, "mcpServers": {
            "mem": {"type": "stdio", "command": FIXTURE, "args": ["--", "mem"], "env": {}},
            "context7": context7,
            "toolhost-http": {"type": "http", "url": own, "headers": {"Authorization": "Bearer t0k"}},
        }})
        .to_string(),
    );
    write(
        &home.join(".cursor/mcp.json"),
        &json!({"mcpServers": {"memory": mem, "web": {"url": web_url},
            "th": {"command": "toolhost", "args": ["mcp"]}}})
        .to_string(),
    );
    write(
        &project.join(".vscode/mcp.json"),
        &json!({"inputs": [], "servers": {
            "mem": {"type": "stdio", "command": FIXTURE, "args": ["--", "mem"]},
            "th-bin": {"type": "stdio", "command": BIN, "args": ["mcp"]},
        }})
        .to_string(),
    );
    write(
        &home.join(".codex/config.toml"),
        &format!(
            "model = \"o4\"\n\n[mcp_servers.memory]\ncommand = \"{FIXTURE}\"\nargs = [\"--\", \"mem\"]\n\n\
             [mcp_servers.host]\ncommand = \"npx\"\nargs = [\"-y\", \"mcp-remote\", \"http://localhost:{port}/mcp\"]\n\n\
             [mcp_servers.toolhost_http]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    );
    write(
        &home.join(".gemini/settings.json"),
        &json!({"mcpServers": {"mem": mem, "legacy": {"url": sse_url}, "web2": {"httpUrl": web_url}}})
            .to_string(),
    );

    let sock = d.socket();
    let (code, out, err) = run(
        root,
        &project,
        &[],
        &["--socket", sock.to_str().unwrap(), "import", "--apply"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("merged: 5 identical definitions"), "{out}");
    assert!(out.contains("CONTEXT7_API_KEY=***"), "{out}");
    // Every form of toolhost, whatever the entry is called: its URL, the binary's absolute
    // path, `toolhost mcp` on PATH, mcp-remote to its URL, Codex's `url =`.
    for own in ["toolhost-http", "th-bin", "th", "host", "toolhost_http"] {
        assert!(
            out.contains(&format!("itself  {own} ")),
            "{own} is toolhost: {out}"
        );
    }
    assert!(!out.contains(key) && !err.contains(key), "{out}\n{err}");

    let text = std::fs::read_to_string(d.config_path()).unwrap();
    assert!(!text.contains(key), "no secret in config.json: {text}");
    let cfg: Value = serde_json::from_str(&text).unwrap();
    let servers = cfg["mcp_servers"].as_object().unwrap();
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    assert_eq!(names, ["mem", "context7", "web", "legacy"], "{cfg}");
    assert_eq!(servers["mem"], mem);
    assert_eq!(
        servers["context7"]["args"],
        json!(["--", "--api-key", "${CONTEXT7_API_KEY}"])
    );
    assert_eq!(servers["legacy"]["type"], "sse");
    let secrets = std::fs::read_to_string(d.dir.path().join("secrets.env")).unwrap();
    assert_eq!(secrets, format!("CONTEXT7_API_KEY={key}\n"));

    // Served, by the daemon that was running all along, the key reaching its server.
    for name in ["mem", "context7", "web", "legacy"] {
        common::mcp::wait_state(&d, name, "ready").await;
    }
    assert_eq!(d.pid(), pid);
    let me = d.invoke("mcp_context7_whereami", json!({})).await;
    let me: Value = serde_json::from_str(me["output"].as_str().unwrap()).unwrap();
    assert_eq!(me["args"], json!(["--api-key", key]), "{me}");
    let r = d.invoke("mcp_legacy_echo", json!({"message": "sse"})).await;
    assert_eq!(r["output"], "Echo: sse", "{r}");

    // The daemon never takes itself as an upstream, whatever adds it.
    let r = d
        .call(
            "mcp.add",
            json!({"name": "me", "server": {"url": format!("http://localhost:{port}/mcp")}}),
        )
        .await;
    let e = r["error"]["message"].as_str().unwrap_or_default();
    assert!(e.contains("this daemon's own listener"), "{r}");
}

/// The `label` the fixture server `server` (started with `FIXTURE_WHEREAMI`) says it has.
async fn label_of(d: &Daemon, server: &str) -> Option<Value> {
    let r = d.invoke(&format!("mcp_{server}_whereami"), json!({})).await;
    r["output"]
        .as_str()
        .and_then(|o| serde_json::from_str::<Value>(o).ok())
        .map(|me| me["label"].clone())
}

/// Waits for a reload refused because the secrets file at `path` can be read by others.
async fn refused_as_readable(d: &Daemon, path: &Path) {
    let path = path.display().to_string();
    eventually(30, "the reload to be refused", || async {
        let s = d.call("config.status", json!({})).await;
        s["result"]["last_error"].as_str().is_some_and(|e| {
            e.contains("can be read by others") && e.contains("chmod 600") && e.contains(&path)
        })
    })
    .await;
}

/// The secrets file is read with config.json: a value added or changed there reaches the
/// servers at once, no restart; one others can read is refused and named.
#[tokio::test]
async fn the_secrets_file_is_reloaded_and_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::unstarted();
    std::fs::write(d.config_path(), "{}").unwrap();
    // A value only the daemon's own environment has still reaches a server; a name the
    // file sets too takes the file's value (LABEL_T41 below).
    d.spawn(&[("ENV_ONLY_T41", "from-env"), ("LABEL_T41", "from-env")])
        .await;
    let secrets = d.dir.path().join("secrets.env");
    let private = |text: &str| {
        write(&secrets, text);
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    private("# mine\nLABEL_T41=one\n");
    let server = json!({"command": FIXTURE, "env": {"FIXTURE_WHEREAMI": "1", "FIXTURE_LABEL": "${LABEL_T41}"}});
    // The test polls one call until a reload applies: the built-in loop breaker is off.
    let no_loop = json!([{"name": "default-loop", "enabled": false}]);
    let from_env = json!({"command": FIXTURE, "env": {"FIXTURE_WHEREAMI": "1", "FIXTURE_LABEL": "${ENV_ONLY_T41}"}});
    common::write_atomic(
        &d.config_path(),
        &json!({"mcp_servers": {"fx": server, "fy": from_env}, "guards": no_loop}),
    );
    eventually(
        30,
        "fy to run with the daemon's environment's value",
        || async { label_of(&d, "fy").await == Some(json!("from-env")) },
    )
    .await;
    let label = || label_of(&d, "fx");
    eventually(30, "fx to run with the file's value", || async {
        label().await == Some(json!("one"))
    })
    .await;
    private("LABEL_T41=two\n");
    eventually(30, "fx to run with the new value", || async {
        label().await == Some(json!("two"))
    })
    .await;

    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    write(&secrets, "LABEL_T41=three\n");
    refused_as_readable(&d, &secrets).await;
    assert_eq!(
        label().await,
        Some(json!("two")),
        "the last good config stays"
    );
}

/// Issue 49 item 3: frontend files a workspace or a hostile dotfile could plant — a FIFO
/// with no writer, a link to `/dev/zero`, a 300 MB sparse file, 200,000-deep JSON and TOML
/// — are each named with a reason, import does not hang on them, and the good files
/// (VS Code's, the project's `.mcp.json`) are still planned.
#[tokio::test]
async fn import_refuses_fifos_devices_huge_and_deep_files_and_keeps_the_rest() {
    let f = Frontends::new();
    let fifo = f.claude();
    std::fs::remove_file(&fifo).unwrap();
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::fs::remove_file(f.cursor()).unwrap();
    std::os::unix::fs::symlink("/dev/zero", f.cursor()).unwrap();
    std::fs::File::create(f.gemini())
        .unwrap()
        .set_len(300 * 1024 * 1024)
        .unwrap();
    let depth = 200_000;
    write(
        &f.desktop(),
        &format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
    );
    write(
        &f.codex(),
        &format!("a = {}{}", "[".repeat(depth), "]".repeat(depth)),
    );

    // The timeout only turns a hang into a failure.
    let (code, out, err) =
        tokio::time::timeout(std::time::Duration::from_secs(120), f.import(&[], &[]))
            .await
            .expect("import hung");
    let all = format!("{out}{err}");
    assert_eq!(code, 1, "{all}");
    assert!(all.len() < 20_000, "{all}");
    for (file, reason) in [
        (f.claude(), "is not a regular file (fifo)"),
        (f.cursor(), "is not a regular file (character device)"),
        (f.gemini(), "is larger than"),
        (f.desktop(), "recursion limit"),
        (f.codex(), "max recursion depth"),
    ] {
        let line = all
            .lines()
            .find(|l| l.contains(&*file.display().to_string()))
            .unwrap_or_else(|| panic!("{} not named: {all}", file.display()));
        assert!(line.contains(reason), "{reason}: {line}\n{all}");
    }
    for good in ["time", "lint", "notes"] {
        assert!(all.contains(good), "{good}: {all}");
    }
}

/// Links each frontend file to its target, runs `toolhost import` and checks each is
/// refused at once, unread, as a kernel file of `fs` (`/proc`, `/sys`), named by its path.
/// Returns what import printed.
async fn import_refusing_kernel_links(f: &Frontends, links: &[(PathBuf, String, &str)]) -> String {
    for (file, target, _) in links {
        std::fs::remove_file(file).unwrap();
        std::os::unix::fs::symlink(target, file).unwrap();
    }
    let start = std::time::Instant::now();
    // The timeout only turns a hang into a failure.
    let (code, out, err) =
        tokio::time::timeout(std::time::Duration::from_secs(60), f.import(&[], &[]))
            .await
            .expect("import hung on a kernel file");
    let all = format!("{out}{err}");
    assert_eq!(code, 1, "{all}");
    for (file, target, fs) in links {
        let line = all
            .lines()
            .find(|l| l.contains(&*file.display().to_string()))
            .unwrap_or_else(|| panic!("{} ({target}) not named: {all}", file.display()));
        assert!(
            line.contains(&format!("is not a regular file (a kernel file of {fs})")),
            "{target}: {line}\n{all}"
        );
    }
    // Refused before a read: no 64 MiB of pagemap read first.
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    all
}

/// Kernel files linked as a frontend's file: they claim 0 bytes, and `/proc/self/pagemap`
/// streams for gigabytes while `/proc/kmsg` (readable by root) blocks once drained. Each is
/// refused at once, by what it is, and the other frontends are imported.
#[tokio::test]
async fn import_refuses_kernel_files_that_claim_no_size_without_reading_them() {
    let f = Frontends::new();
    let all = import_refusing_kernel_links(
        &f,
        &[
            (f.claude(), "/proc/self/pagemap".into(), "/proc"),
            (f.cursor(), "/proc/kmsg".into(), "/proc"),
            (f.desktop(), "/proc/self/smaps".into(), "/proc"),
            (f.gemini(), "/sys/kernel/uevent_seqnum".into(), "/sys"),
        ],
    )
    .await;
    for good in ["time", "lint", "notes", "docs"] {
        assert!(all.contains(good), "{good}: {all}");
    }
}

/// A variant: the project's own files (VS Code's, `.mcp.json`) and Codex's TOML lead to
/// kernel files through a chain of links and through `/proc/self/root` (the pagemap of the
/// reading thread, our own memory, our map). Each is refused by name at once, unread, and
/// the user-scope frontends are still imported.
#[tokio::test]
async fn import_refuses_a_pagemap_behind_a_chain_of_links_and_the_root_link() {
    let f = Frontends::new();
    let hop = f.project().join("settings-link.json");
    std::os::unix::fs::symlink("/proc/self/root/proc/thread-self/pagemap", &hop).unwrap();
    let all = import_refusing_kernel_links(
        &f,
        &[
            (f.vscode(), hop.display().to_string(), "/proc"),
            (f.mcp_json(), "/proc/self/mem".into(), "/proc"),
            (f.codex(), "/proc/self/root/proc/self/maps".into(), "/proc"),
        ],
    )
    .await;
    for good in ["proj", "github", "legacy", "everything"] {
        assert!(all.contains(good), "{good}: {all}");
    }
}

/// A project's own `.cursor/mcp.json` (committed beside the code) is imported and rewritten
/// like the user's: its server lands in config.json, the file names `toolhost` by name (so
/// it works on a teammate's machine) and the original is kept as a backup.
#[tokio::test]
async fn a_projects_cursor_file_is_imported_and_rewritten_portably() {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("project");
    let file = project.join(".cursor/mcp.json");
    write(
        &file,
        &json!({"mcpServers": {"proj-cursor": {"command": "proj-cursor-mcp", "args": ["--x"]}}})
            .to_string(),
    );
    let original = std::fs::read_to_string(&file).unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("toolhost")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (code, out, err) = run(
        root.path(),
        &project,
        &[("PATH", path.as_str())],
        &["import", "--apply", "--rewrite"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let cfg = read_json(&root.path().join("xdg/toolhost/config.json"));
    assert_eq!(
        cfg["mcp_servers"]["proj-cursor"],
        json!({"command": "proj-cursor-mcp", "args": ["--x"]}),
        "{cfg}"
    );
    assert_eq!(
        read_json(&file)["mcpServers"],
        json!({"toolhost": {"command": "toolhost", "args": ["mcp"]}})
    );
    let backup = PathBuf::from(format!("{}.toolhost-backup", file.display()));
    assert_eq!(std::fs::read_to_string(backup).unwrap(), original);
}

/// A secrets file kept elsewhere (`TOOLHOST_SECRETS_FILE`, e.g. on a private mount): read
/// instead of the one beside config.json, its folder watched, a change taken up without a
/// restart, and its mode checked the same way.
#[tokio::test]
async fn a_secrets_file_kept_elsewhere_is_read_watched_and_checked() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::unstarted();
    let elsewhere = d.dir.path().join("private/vault.env");
    std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    let private = |text: &str| {
        write(&elsewhere, text);
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    private("LABEL_T41V=vault-one\n");
    // The usual place holds another value, which must not be used.
    let beside = d.config_path().with_file_name("secrets.env");
    write(&beside, "LABEL_T41V=beside\n");
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = json!({"command": FIXTURE, "env": {"FIXTURE_WHEREAMI": "1", "FIXTURE_LABEL": "${LABEL_T41V}"}});
    let no_loop = json!([{"name": "default-loop", "enabled": false}]);
    std::fs::write(
        d.config_path(),
        json!({"mcp_servers": {"fx": server}, "guards": no_loop}).to_string(),
    )
    .unwrap();
    d.spawn(&[("TOOLHOST_SECRETS_FILE", elsewhere.to_str().unwrap())])
        .await;
    let label = || label_of(&d, "fx");
    eventually(30, "fx to run with the vault's value", || async {
        label().await == Some(json!("vault-one"))
    })
    .await;
    private("LABEL_T41V=vault-two\n");
    eventually(30, "fx to run with the vault's new value", || async {
        label().await == Some(json!("vault-two"))
    })
    .await;
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o640)).unwrap();
    write(&elsewhere, "LABEL_T41V=vault-three\n");
    refused_as_readable(&d, &elsewhere).await;
    assert_eq!(label().await, Some(json!("vault-two")));
}
