//! The Landlock sandbox (issue 16) through the real daemon: what `bash`, custom tool
//! programs and a stdio MCP server may write and connect to under each policy, approval
//! with the sandbox, and a kernel that cannot enforce a policy (test switch).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{eventually, write_atomic, Daemon, FIXTURE};
use serde_json::{json, Value};

/// The daemon's test-only switch: pretend the kernel has this Landlock ABI.
const TEST_ABI: &str = "TOOLHOST_TEST_SANDBOX_ABI";

/// The tests below need file-system and TCP rules (ABI 4, Linux 6.7).
fn require_landlock() {
    common::require_landlock(4);
}

async fn start_with_env(cfg: Value, env: &[(&str, &str)]) -> Daemon {
    let mut d = Daemon::unstarted();
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(env).await;
    d
}

/// `invoke` with extra params (session, approved, sandbox); returns the tool's outcome.
async fn invoke(d: &Daemon, name: &str, args: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": args});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let r = d.call("invoke", params).await;
    r["result"]["result"].clone()
}

async fn bash(d: &Daemon, command: &str, extra: Value) -> Value {
    invoke(d, "bash", json!({"command": command}), extra).await
}

/// The note a confined run gets when the sandbox refused something.
fn denied(policy: &str, network: &str) -> Value {
    let places = if policy == "workspace-write" {
        "the workspace, "
    } else {
        ""
    };
    json!({
        "policy": policy,
        "network": network,
        "status": "denied",
        "note": format!("the sandbox ({policy}, network {network}) probably refused this: writes are allowed only in {places}$TMPDIR and the configured sandbox.writable paths; ask the user to run it outside the sandbox (sandbox: \"off\", approved: true) if it must"),
    })
}

#[tokio::test]
async fn workspace_write_confines_writes_and_keeps_reads() {
    require_landlock();
    let d = Daemon::start_with(Some(json!({"sandbox": {"policy": "workspace-write"}}))).await;
    let ws = d.workspace();

    // The workspace and the per-call temp dir are writable; TMPDIR is that dir.
    let r = bash(
        &d,
        "echo a > in_ws.txt && echo b > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && printf %s \"$TMPDIR\"",
        json!({}),
    )
    .await;
    let stdout = r["stdout"].as_str().unwrap().to_owned();
    let tmp = stdout.strip_prefix("b\n").unwrap().to_owned();
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": stdout, "stderr": ""})
    );
    assert!(tmp.contains("toolhost-call-"), "{tmp}");
    assert_eq!(
        std::fs::read_to_string(ws.join("in_ws.txt")).unwrap(),
        "a\n"
    );
    assert!(!Path::new(&tmp).exists(), "the call's temp dir is removed");

    // Home and /etc are not, and the result says the sandbox refused it.
    let home = std::env::var("HOME").unwrap();
    let probe = format!("toolhost-sandbox-probe-{}", std::process::id());
    for dir in [home.as_str(), "/etc"] {
        let target = format!("{dir}/{probe}");
        let r = bash(&d, &format!("touch {target}"), json!({})).await;
        assert_eq!(
            r,
            json!({
                "ok": true,
                "exit_code": 1,
                "stdout": "",
                "stderr": format!("touch: cannot touch '{target}': Permission denied\n"),
                "sandbox": denied("workspace-write", "allow"),
            })
        );
        assert!(!Path::new(&target).exists());
    }
    // Outside the workspace next to it (the daemon's own dir) is refused too.
    let r = bash(&d, "echo x > ../outside.txt", json!({})).await;
    assert_eq!(r["exit_code"], 1, "{r}");
    assert!(!d.dir.path().join("outside.txt").exists());

    // Reading anywhere works.
    let r = bash(&d, "cat /etc/hostname", json!({})).await;
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": std::fs::read_to_string("/etc/hostname").unwrap(), "stderr": ""})
    );
}

#[tokio::test]
async fn read_only_session_writes_nothing_until_updated() {
    require_landlock();
    // Config default off; the session asks for read-only.
    let d = Daemon::start().await;
    let id = d.session(json!({"sandbox": {"policy": "read-only"}})).await;
    let got = d.call("session.get", json!({"id": id})).await;
    assert_eq!(
        got["result"]["sandbox"],
        json!({"policy": "read-only"}),
        "{got}"
    );
    let r = bash(&d, "echo x > f.txt", json!({"session_id": id})).await;
    let stderr = r["stderr"].as_str().unwrap();
    assert!(stderr.ends_with("f.txt: Permission denied\n"), "{r}");
    assert_eq!(r["sandbox"], denied("read-only", "allow"));
    assert!(!d.workspace().join("f.txt").exists());

    // Back to the config's default (off): the same command writes.
    let up = d
        .call("session.update", json!({"id": id, "sandbox": {}}))
        .await;
    assert_eq!(up["result"].get("sandbox"), None, "{up}");
    let r = bash(&d, "echo x > f.txt", json!({"session_id": id})).await;
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": "", "stderr": ""})
    );
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("f.txt")).unwrap(),
        "x\n"
    );
}

/// A loopback TCP port that accepts (and closes) every connection, for connect checks.
async fn local_listener() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    port
}

#[tokio::test]
async fn network_deny_refuses_tcp_connect_and_allow_permits_it() {
    require_landlock();
    let port = local_listener().await;
    let d = Daemon::start().await;
    let deny = d
        .session(json!({"sandbox": {"policy": "workspace-write", "network": "deny"}}))
        .await;
    let allow = d
        .session(json!({"sandbox": {"policy": "workspace-write", "network": "allow"}}))
        .await;
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let r = bash(&d, &connect, json!({"session_id": deny})).await;
    assert_eq!(r["exit_code"], 1, "{r}");
    assert_eq!(r["stdout"], "", "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap()
            .contains("connect: Permission denied"),
        "{r}"
    );
    assert_eq!(r["sandbox"], denied("workspace-write", "deny"));
    let r = bash(&d, &connect, json!({"session_id": allow})).await;
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": "connected\n", "stderr": ""})
    );
}

/// A shell tool that writes into `cache` and connects to `port`.
fn grant_tool(tools: &Path, name: &str, cache: &Path, port: u16) {
    let dir = tools.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("run.sh");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/bash\necho w > {cache}/{name} || exit 3\nexec 3<>/dev/tcp/127.0.0.1/{port} || exit 4\necho '{{\"result\": {{\"wrote\": true, \"connected\": true}}}}'\n",
            cache = cache.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_atomic(
        &dir.join("tool.json"),
        &json!({
            "name": name,
            "description": "Writes to a cache outside the workspace and connects to a port.",
            "command": ["./run.sh"],
            "approval": "command",
            "sandbox": {"network": true, "writable": [cache]},
        }),
    );
}

#[tokio::test]
async fn custom_tools_get_what_the_manifest_asks_only_when_config_grants_it() {
    require_landlock();
    let port = local_listener().await;
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let (tools, cache) = (dir.join("tools"), dir.join("cache"));
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(dir.join("xdg")).unwrap();
    grant_tool(&tools, "granted", &cache, port);
    grant_tool(&tools, "half", &cache, port);
    grant_tool(&tools, "refused", &cache, port);
    let cfg = json!({
        "custom_tools": {"paths": [tools]},
        "sandbox": {
            "policy": "workspace-write",
            "network": "deny",
            "tools": {"granted": {"network": true, "writable": true}, "half": {"writable": true}},
        },
    });
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    let xdg = dir.join("xdg");
    d.spawn(&[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]).await;

    let r = invoke(&d, "granted", json!({}), json!({})).await;
    assert_eq!(r, json!({"ok": true, "wrote": true, "connected": true}));
    assert_eq!(
        std::fs::read_to_string(cache.join("granted")).unwrap(),
        "w\n"
    );

    // Writable granted, network not: the write works, the connect is refused.
    let r = invoke(&d, "half", json!({}), json!({})).await;
    assert_eq!(r["exit_code"], 4, "{r}");
    assert_eq!(r["error_kind"], "failed", "{r}");
    assert_eq!(r["sandbox"], denied("workspace-write", "deny"));
    assert_eq!(std::fs::read_to_string(cache.join("half")).unwrap(), "w\n");

    // Nothing granted: the write is refused.
    let r = invoke(&d, "refused", json!({}), json!({})).await;
    assert_eq!(r["exit_code"], 3, "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .ends_with("refused: Permission denied"),
        "{r}"
    );
    assert_eq!(r["sandbox"], denied("workspace-write", "deny"));
    assert!(!cache.join("refused").exists());
}

#[tokio::test]
async fn a_stdio_mcp_server_runs_confined_when_its_config_says_so() {
    require_landlock();
    let mut d = Daemon::unstarted();
    let dir = d.dir.path().to_path_buf();
    let rw = dir.join("rw");
    std::fs::create_dir_all(&rw).unwrap();
    let cfg = json!({"mcp_servers": {
        // Read-only: its events file (outside any writable place) cannot be written.
        "ro": {"command": FIXTURE, "env": {"FIXTURE_EVENTS_FILE": dir.join("ro.events")},
               "sandbox": {"policy": "read-only"}},
        // Workspace-write in its cwd: the events file there is written.
        "rw": {"command": FIXTURE, "cwd": rw, "env": {"FIXTURE_EVENTS_FILE": rw.join("rw.events")},
               "sandbox": {"policy": "workspace-write", "network": "deny"}},
    }});
    std::fs::write(d.config_path(), cfg.to_string()).unwrap();
    d.spawn(&[]).await;
    eventually(20, "both servers ready", || async {
        let s = d.call("mcp.status", json!({})).await;
        s["result"]["servers"]
            .as_array()
            .is_some_and(|a| a.iter().filter(|s| s["state"] == "ready").count() == 2)
    })
    .await;
    for server in ["ro", "rw"] {
        let r = invoke(
            &d,
            &format!("mcp_{server}_echo"),
            json!({"text": "hi"}),
            json!({}),
        )
        .await;
        assert_eq!(r["ok"], true, "{r}");
    }
    eventually(10, "the rw server's event", || async {
        std::fs::read_to_string(rw.join("rw.events")).is_ok_and(|s| s == "called echo\n")
    })
    .await;
    eventually(10, "the ro server's refused write in the log", || async {
        d.log().contains("ro.events") && d.log().contains("Permission denied")
    })
    .await;
    assert!(!dir.join("ro.events").exists());
}

#[tokio::test]
async fn strict_sessions_run_sandboxed_commands_and_must_approve_leaving() {
    require_landlock();
    let d = Daemon::start_with(Some(json!({
        "approval": {"mode": "strict", "sandboxed_commands": "auto", "wait_s": 0},
        "sandbox": {"policy": "workspace-write"},
    })))
    .await;
    // Confined: runs without approval.
    let r = bash(&d, "echo hi", json!({})).await;
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": "hi\n", "stderr": ""})
    );
    // Leaving the sandbox needs approval, and the summary says so.
    let outside = d.dir.path().join("outside.txt");
    let cmd = format!("echo out > {}", outside.display());
    let r = bash(&d, &cmd, json!({"sandbox": "off"})).await;
    assert_eq!(
        r,
        json!({
            "ok": false,
            "error_kind": "approval_required",
            "error": "Tool 'bash' asks to run outside the sandbox (sandbox: \"off\"), which always needs approval; repeat the call with \"approved\": true once the user agrees.",
            "approval": format!("bash (command) command={cmd:?} — OUTSIDE THE SANDBOX (sandbox: \"off\"; the session's policy is workspace-write)"),
        })
    );
    assert!(!outside.exists());
    let r = bash(&d, &cmd, json!({"sandbox": "off", "approved": true})).await;
    assert_eq!(
        r,
        json!({
            "ok": true, "exit_code": 0, "stdout": "", "stderr": "",
            "sandbox": {"policy": "off", "left": "workspace-write",
                        "note": "ran outside the sandbox (the session's policy is workspace-write), as approved"},
        })
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "out\n");
    // Other write tools still ask in strict mode.
    let r = invoke(
        &d,
        "write_file",
        json!({"path": "a.txt", "content": "x"}),
        json!({}),
    )
    .await;
    assert_eq!(r["error_kind"], "approval_required", "{r}");
}

#[tokio::test]
async fn a_kernel_without_landlock_refuses_or_runs_unconfined_as_configured() {
    // The switch only lowers what the daemon believes the kernel can do.
    let cfg = |required: bool| {
        json!({
            "approval": {"mode": "strict", "sandboxed_commands": "auto", "wait_s": 0},
            "sandbox": {"policy": "workspace-write", "required": required},
        })
    };
    let d = start_with_env(cfg(true), &[(TEST_ABI, "0")]).await;
    let h = d.call("host.health", json!({})).await;
    assert_eq!(
        h["result"]["sandbox"],
        json!({"abi": 0, "filesystem": false, "network": false, "scopes": false, "seccomp": false})
    );
    let reason = "the kernel has no Landlock (needs Linux 5.13+ with landlock in the `lsm=` list), so sandbox policy workspace-write cannot be enforced";
    // Unconfined commands are not auto-approved in strict mode...
    let r = bash(&d, "echo hi", json!({})).await;
    assert_eq!(r["error_kind"], "approval_required", "{r}");
    // ...and with approval they are refused, because the policy is required.
    let r = bash(&d, "echo hi", json!({"approved": true})).await;
    assert_eq!(
        r,
        json!({
            "ok": false,
            "error_kind": "sandbox_unavailable",
            "error": format!("{reason}; refused because sandbox.required is true (set it to false to run unconfined, or use sandbox policy off)"),
            "sandbox": {"policy": "workspace-write", "network": "allow", "status": "unavailable", "note": reason},
        })
    );

    // required: false runs it and says so.
    write_atomic(&d.config_path(), &cfg(false));
    let reload = d.call("config.reload", json!({})).await;
    assert!(reload.get("result").is_some(), "{reload}");
    let r = bash(&d, "echo hi", json!({"approved": true})).await;
    assert_eq!(
        r,
        json!({
            "ok": true, "exit_code": 0, "stdout": "hi\n", "stderr": "",
            "sandbox": {"policy": "workspace-write", "network": "allow", "status": "unenforced",
                        "note": format!("{reason}; ran unconfined because sandbox.required is false")},
        })
    );
}

#[tokio::test]
async fn health_shows_the_kernels_landlock_abi() {
    let d = Daemon::start().await;
    let abi = common::landlock_abi();
    let h = d.call("host.health", json!({})).await;
    assert_eq!(
        h["result"]["sandbox"],
        json!({"abi": abi, "filesystem": abi >= 1, "network": abi >= 4, "scopes": abi >= 6, "seccomp": abi >= 1})
    );
}

/// What a metadata change would alter: mode, owner, group, mtime, and the number of bytes
/// of extended-attribute names.
fn metadata_of(path: &Path) -> (u32, u32, u32, i64, isize) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let xattrs = unsafe { libc::listxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    (m.mode(), m.uid(), m.gid(), m.mtime(), xattrs)
}

/// Whether the file system under `path` takes `user.` extended attributes at all.
fn user_xattrs_work(path: &Path) -> bool {
    let probe = path.join("xattr-probe");
    std::fs::write(&probe, "").unwrap();
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()).unwrap();
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.probe".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    r == 0
}

/// Runs each command in a fresh call and expects it to be refused (`touch` reports its
/// refused `open`, EACCES, rather than the refused time change, EPERM).
async fn all_refused(d: &Daemon, commands: &[String], extra: &Value) {
    for command in commands {
        let r = bash(d, command, extra.clone()).await;
        assert_ne!(r["exit_code"], 0, "{command}: {r}");
        let stderr = r["stderr"].as_str().unwrap();
        assert!(
            stderr.contains("Operation not permitted") || stderr.contains("Permission denied"),
            "{command}: {r}"
        );
    }
}

/// The changes Landlock has no right for, on a file outside the workspace (issue 32 item 8):
/// under read-only, no mode, owner, time or extended-attribute change gets through; the
/// run's own temp dir still takes `touch`.
#[tokio::test]
async fn read_only_refuses_metadata_changes_outside() {
    require_landlock();
    let d = Daemon::start_with(Some(json!({"sandbox": {"policy": "read-only"}}))).await;
    let victim = d.dir.path().join("victim.txt");
    std::fs::write(&victim, "x").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = metadata_of(&victim);
    let v = victim.display();
    let mut commands = vec![
        format!("chmod 0777 {v}"),
        format!("chmod 4755 {v}"),
        format!("chown 1234:1234 {v}"),
        format!("chgrp 1234 {v}"),
        format!("touch -d 2001-01-01 {v}"),
        format!("touch -r /etc/hostname {v}"),
    ];
    if user_xattrs_work(d.dir.path()) {
        commands.push(format!(
            "python3 -c 'import os; os.setxattr(\"{v}\", \"user.x\", b\"1\")'"
        ));
    }
    all_refused(&d, &commands, &json!({})).await;
    assert_eq!(metadata_of(&victim), before);

    // Plain `touch` of a new file in $TMPDIR (times set to now) keeps working.
    let r = bash(&d, "touch \"$TMPDIR/marker\" && echo ok", json!({})).await;
    assert_eq!(r["stdout"], "ok\n", "{r}");
}

/// Under workspace-write the filter cannot tell the workspace from outside, so it refuses
/// what no build needs anywhere: set-ID bits and owner changes. Ordinary builds (create,
/// `chmod +x`, run, `touch -d`) keep working in the workspace.
#[tokio::test]
async fn workspace_write_refuses_set_id_and_owner_changes_and_builds_still_work() {
    require_landlock();
    let d = Daemon::start_with(Some(json!({"sandbox": {"policy": "workspace-write"}}))).await;
    let victim = d.dir.path().join("victim.sh");
    std::fs::write(&victim, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = metadata_of(&victim);
    let v = victim.display();
    let commands = [
        format!("chmod 4755 {v}"),
        format!("chmod g+s {v}"),
        format!("chown 1234 {v}"),
        "printf '#!/bin/sh\\n' > own.sh && chmod u+s own.sh".to_owned(),
    ];
    all_refused(&d, &commands, &json!({})).await;
    assert_eq!(metadata_of(&victim), before);
    let own = std::fs::metadata(d.workspace().join("own.sh")).unwrap();
    assert_eq!(own.permissions().mode() & 0o6000, 0);

    let r = bash(
        &d,
        "printf '#!/bin/sh\\necho built\\n' > build.sh && chmod +x build.sh && ./build.sh \
         && touch -d 2001-01-01 build.sh && chmod 0600 build.sh && stat -c %a build.sh",
        json!({}),
    )
    .await;
    assert_eq!(
        r,
        json!({"ok": true, "exit_code": 0, "stdout": "built\n600\n", "stderr": ""})
    );
}

/// Issue 49 item 9, pinned as documented ("What it cannot block"): under workspace-write a
/// file outside the workspace cannot be written, given set-ID bits, another owner or an
/// extended attribute; but a plain `chmod` or `touch -d` on it still succeeds, because
/// Landlock has no right for mode or time changes and the seccomp filter cannot see paths
/// (refusing them everywhere would break `chmod +x` in the workspace).
#[tokio::test]
async fn workspace_write_outside_refuses_writes_and_set_id_but_not_plain_mode_or_times() {
    require_landlock();
    let d = Daemon::start_with(Some(json!({"sandbox": {"policy": "workspace-write"}}))).await;
    let victim = d.dir.path().join("outside.txt");
    std::fs::write(&victim, "x").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = metadata_of(&victim);
    let v = victim.display();
    let mut commands = vec![
        format!("echo y > {v}"),
        format!("echo y >> {v}"),
        format!("touch {}/new.txt", d.dir.path().display()),
        format!("chmod u+s {v}"),
        format!("chown 1234 {v}"),
    ];
    if user_xattrs_work(d.dir.path()) {
        commands.push(format!(
            "python3 -c 'import os; os.setxattr(\"{v}\", \"user.x\", b\"1\")'"
        ));
    }
    all_refused(&d, &commands, &json!({})).await;
    assert_eq!(metadata_of(&victim), before);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "x");
    assert!(!d.dir.path().join("new.txt").exists());

    // The documented gap: plain mode and time changes outside go through.
    let r = bash(
        &d,
        &format!("chmod 0600 {v} && touch -d @978307200 {v} && echo changed"),
        json!({}),
    )
    .await;
    assert_eq!(r["stdout"], "changed\n", "{r}");
    let (mode, uid, gid, mtime, xattrs) = metadata_of(&victim);
    assert_eq!(mode & 0o7777, 0o600);
    assert_eq!(mtime, 978_307_200);
    assert_eq!((uid, gid, xattrs), (before.1, before.2, before.4));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "x");
}

/// A confined program cannot fake terminal input (issue 32 item 9): `TIOCSTI` is refused
/// even on a terminal it opened itself, where a root daemon's unconfined child succeeds.
#[tokio::test]
async fn confined_programs_cannot_fake_terminal_input() {
    require_landlock();
    let d = Daemon::start().await;
    let inject = "python3 -c 'import os, fcntl, termios; m, s = os.openpty(); \
                  fcntl.ioctl(s, termios.TIOCSTI, b\"x\"); print(os.read(m, 1))'";
    if unsafe { libc::geteuid() } == 0 {
        // The check below can fail: unconfined, root may inject.
        let r = bash(&d, inject, json!({})).await;
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    for policy in ["read-only", "workspace-write"] {
        let id = d.session(json!({"sandbox": {"policy": policy}})).await;
        let r = bash(&d, inject, json!({"session_id": id})).await;
        assert_eq!(r["exit_code"], 1, "{r}");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("PermissionError: [Errno 1] Operation not permitted"),
            "{r}"
        );
        // Neither stdin nor a controlling terminal reaches a terminal.
        let r = bash(
            &d,
            "test -t 0 || echo no-tty-stdin; exec 3</dev/tty || echo no-ctty",
            json!({"session_id": id}),
        )
        .await;
        assert_eq!(r["stdout"], "no-tty-stdin\nno-ctty\n", "{r}");
    }
}
