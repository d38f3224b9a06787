//! The shipped deployment files agree with the binary: every flag the Dockerfile and the
//! systemd unit pass is accepted, and the unit passes `systemd-analyze verify`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
