//! The shipped deployment files agree with the binary: every flag the Dockerfile and the
//! systemd unit pass is accepted, and the unit passes `systemd-analyze verify`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::BIN;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Runs `toolhost ARGS --help`: clap rejects unknown flags before printing help.
async fn accepts(args: &[String]) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .arg("--help")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "toolhost {args:?} was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn dockerfile_cmd_and_healthcheck_use_real_flags() {
    let docker = repo_file("Dockerfile");
    let json_after = |key: &str| -> Vec<String> {
        let line = docker
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} line"));
        let start = line.find('[').unwrap();
        serde_json::from_str(&line[start..]).unwrap()
    };
    let entry = json_after("ENTRYPOINT");
    assert_eq!(
        entry,
        ["tini", "--", "toolhost"],
        "tini must be PID 1 and exec toolhost directly"
    );
    accepts(&json_after("CMD")).await;
    let health = json_after("HEALTHCHECK");
    assert_eq!(health[0], "toolhost");
    accepts(&health[1..]).await;
    // The image installs the module host's own packages with flags that exist.
    let setup = docker
        .lines()
        .find_map(|l| l.strip_prefix("RUN toolhost modules setup"))
        .expect("the image runs `toolhost modules setup`");
    let mut args: Vec<String> = vec!["modules".into(), "setup".into()];
    args.extend(
        setup
            .split("&&")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned),
    );
    accepts(&args).await;
    // Everything the build stage copies exists in the repository.
    for line in docker
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            assert!(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(src)
                    .exists(),
                "Dockerfile copies missing {src}"
            );
        }
    }
}

#[tokio::test]
async fn systemd_unit_verifies_and_its_flags_exist() {
    let unit = repo_file("systemd/toolhost.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let args: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(|a| {
            a.replace("${CONFIGURATION_DIRECTORY}", "/etc/toolhost")
                .replace("${STATE_DIRECTORY}", "/var/lib/toolhost")
        })
        .collect();
    accepts(&args).await;
    assert!(unit.contains("KillMode=mixed"));
    assert!(
        !unit
            .lines()
            .any(|l| l.trim_start().starts_with("MemoryDenyWriteExecute")),
        "MDWE would kill Node MCP servers"
    );

    // systemd-analyze verify needs the binary at the unit's path: point it at ours.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.service"),
        unit.replace("/usr/bin/toolhost", BIN),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("toolhost.socket"),
        repo_file("systemd/toolhost.socket"),
    )
    .unwrap();
    let out = tokio::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("toolhost.service"))
        .arg(dir.path().join("toolhost.socket"))
        .output()
        .await
        .expect("systemd-analyze is installed on this machine kind");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let complaints: Vec<&str> = text.lines().filter(|l| l.contains("toolhost.s")).collect();
    assert!(complaints.is_empty(), "systemd-analyze verify: {text}");
}

/// The deployment traps of issue 13, read from the files themselves (no Docker engine or
/// systemd is needed): tini without `--init` warnings, a writable config mount, a fixed
/// uid, uv/uvx; a unit whose socket directory survives a stop and which has a workspace.
#[test]
fn dockerfile_and_unit_avoid_the_known_traps() {
    let docker = repo_file("Dockerfile");
    assert!(
        docker.contains("TINI_SUBREAPER=1"),
        "tini must not warn under --init"
    );
    assert!(
        docker.contains("COPY --from=uv /uv /uvx /usr/local/bin/"),
        "uv/uvx in the image"
    );
    assert!(
        docker.contains("--uid 10001"),
        "a fixed uid for host clients"
    );
    let run_line = docker
        .lines()
        .find(|l| l.contains("/etc/toolhost\""))
        .expect("the documented docker run line mounts the config directory");
    assert!(
        !run_line.contains(":ro"),
        "mcp add/remove need a writable config mount: {run_line}"
    );

    let unit = repo_file("systemd/toolhost.service");
    let keys: Vec<&str> = unit
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .collect();
    assert!(
        !keys.contains(&"RuntimeDirectory") || unit.contains("RuntimeDirectoryPreserve=yes"),
        "RuntimeDirectory= would delete the .socket unit's socket on every stop"
    );
    let workdir = unit
        .lines()
        .find_map(|l| l.strip_prefix("WorkingDirectory="))
        .expect("the unit sets a workspace (else it is /)");
    let state = unit
        .lines()
        .find_map(|l| l.strip_prefix("StateDirectory="))
        .unwrap();
    let created: Vec<String> = state
        .split_whitespace()
        .map(|d| format!("/var/lib/{d}"))
        .collect();
    assert!(
        created.iter().any(|d| d == workdir),
        "systemd creates the workspace {workdir}: {created:?}"
    );
}

/// A real socket activation with `systemd-socket-activate` (what the .socket unit does):
/// the daemon serves the socket it is given, logs that path, and leaves it in place when
/// it stops. A full systemd run (`systemctl stop` keeping the socket) needs systemd as
/// PID 1, which test machines and containers usually lack.
#[tokio::test]
async fn socket_activation_serves_the_given_socket_and_leaves_it_on_stop() {
    use tokio::io::AsyncBufReadExt;
    common::require_program("systemd-socket-activate");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    let sock = dir.path().join("activated.sock");
    let mut activate = tokio::process::Command::new("systemd-socket-activate");
    common::isolate(activate.as_std_mut(), dir.path());
    let mut child = activate
        .arg("-l")
        .arg(&sock)
        .args(["-E", "RUST_LOG=info"])
        .arg(BIN)
        .arg("--config")
        .arg(dir.path().join("config.json"))
        .arg("serve")
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("TOOLHOST_SOCKET")
        .env_remove("TOOLHOST_CONFIG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    common::eventually(10, "the activation socket", || {
        let sock = sock.clone();
        async move { sock.exists() }
    })
    .await;
    // The first connection starts the daemon, which answers on the same socket.
    let (status, body) = common::http_request(&sock, "GET", "/health", "").await;
    assert_eq!(status, 200, "{body}");
    let serving = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("toolhost serving") {
                return l;
            }
        }
        panic!("the daemon exited without serving");
    })
    .await
    .unwrap();
    assert!(
        serving.contains(&format!("socket={} activated=true", sock.display())),
        "{serving}"
    );
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&sock)
            .unwrap()
            .file_type()
            .is_socket(),
        "the daemon must not unlink a socket it was given"
    );
}

/// Started in `/` with no workspace, the daemon says so (log and `config.status`).
#[tokio::test]
async fn a_workspace_of_root_is_warned_about() {
    let mut d = common::Daemon::unstarted();
    let mut cmd = common::toolhost(d.dir.path());
    cmd.arg("--socket")
        .arg(d.socket())
        .arg("serve")
        .arg("--data-dir")
        .arg(d.data_dir())
        .current_dir("/")
        .env("XDG_CONFIG_HOME", d.dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    d.child = Some(child);
    d.wait_ready().await;
    let st = d.call("config.status", serde_json::json!({})).await;
    assert_eq!(
        st["result"]["warnings"],
        serde_json::json!([
            "the workspace is / (no --workspace, no config `workspace`, started in /): built-in \
             tools resolve paths against the whole file system; set one"
        ])
    );
}

/// The image builds the optimised profile (whole-program optimisation, as the README's run
/// command and the benchmarks) and copies that profile's binary.
#[test]
fn dockerfile_builds_the_optimised_profile_and_copies_its_binary() {
    let docker = repo_file("Dockerfile");
    let build = docker
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build line");
    let words: Vec<&str> = build.split_whitespace().collect();
    let profile = if words.contains(&"--release") {
        "release"
    } else {
        words
            .iter()
            .skip_while(|w| **w != "--profile")
            .nth(1)
            .copied()
            .expect("the build names its profile")
    };
    let cargo = repo_file("Cargo.toml");
    let section = cargo
        .split(&format!("[profile.{profile}]"))
        .nth(1)
        .expect("Cargo.toml defines the profile");
    let section = section.split("\n[").next().unwrap_or_default();
    assert!(
        section.contains("lto = \"fat\""),
        "[profile.{profile}] optimises the whole program: {section}"
    );
    assert!(
        docker.contains(&format!("/src/target/{profile}/toolhost ")),
        "the image copies target/{profile}/toolhost"
    );
}
