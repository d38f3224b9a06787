//! The fleet's deployment files (deploy/) agree with the tools that read them: the
//! Kubernetes manifests pass a schema checker from PyPI (`kubernetes-validate`, pinned in
//! tests/deploy_requirements.txt, installed into tests/.venv by tests/run.sh), the config
//! the ConfigMap and the Compose file carry is one config and one the binary accepts, and
//! HAProxy accepts deploy/haproxy.cfg (tests/it/fleet_gateway.rs runs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::common::BIN;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const MANIFESTS: [&str; 5] = [
    "deployment.yaml",
    "service.yaml",
    "configmap.yaml",
    "postgres.yaml",
    "secret.yaml",
];

/// `kubernetes-validate` from tests/.venv; missing, the test fails (tests/run.sh installs it).
fn kubernetes_validate() -> PathBuf {
    let program = repo("tests/.venv/bin/kubernetes-validate");
    assert!(
        program.exists(),
        "{} is missing: run tests/run.sh (it installs tests/deploy_requirements.txt)",
        program.display()
    );
    program
}

async fn validate(files: &[PathBuf]) -> std::process::Output {
    tokio::process::Command::new(kubernetes_validate())
        .arg("--strict")
        .args(files)
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_kubernetes_manifests_pass_the_schema_checker() {
    let files: Vec<PathBuf> = MANIFESTS
        .iter()
        .map(|f| repo(&format!("deploy/kubernetes/{f}")))
        .collect();
    let out = validate(&files).await;
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    for f in MANIFESTS {
        assert!(report.contains(&format!("{f} passed")), "{f}: {report}");
    }
    let deployment = read("deploy/kubernetes/deployment.yaml");
    assert!(deployment.contains("replicas: 3"), "{deployment}");
    // The checker does refuse a broken manifest (a count that is no number).
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("deployment.yaml");
    std::fs::write(
        &broken,
        deployment.replace("replicas: 3", "replicas: three"),
    )
    .unwrap();
    let out = validate(&[broken]).await;
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The `config.json` a ConfigMap carries.
fn configmap_config() -> serde_json::Value {
    let text = read("deploy/kubernetes/configmap.yaml");
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
    let config = docs[0]["data"]["config.json"].as_str().unwrap();
    serde_json::from_str(config).unwrap()
}

#[tokio::test]
async fn the_deployed_config_is_one_config_that_the_daemon_accepts() {
    let compose: serde_json::Value = serde_json::from_str(&read("deploy/config.json")).unwrap();
    assert_eq!(
        configmap_config(),
        compose,
        "deploy/config.json (Compose) and the ConfigMap's config.json must be the same"
    );
    let compose_file = read("deploy/compose.yaml");
    let docs = yaml_rust2::YamlLoader::load_from_str(&compose_file).unwrap();
    let services = docs[0]["services"].as_hash().unwrap();
    let gateways: Vec<_> = services
        .keys()
        .filter_map(|k| k.as_str())
        .filter(|k| k.starts_with("gateway-"))
        .collect();
    assert_eq!(gateways.len(), 3, "{gateways:?}");
    assert!(compose_file.contains("./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg"));
    assert!(compose_file.contains("file: ./config.json"));
    // `toolhost config check` with what the containers' environment holds.
    let out = tokio::process::Command::new(BIN)
        .args(["config", "check", "--config"])
        .arg(repo("deploy/config.json"))
        .env("TOOLHOST_PG_HOST", "db.internal")
        .env("TOOLHOST_PG_PASSWORD", "secret")
        .env(
            "TOOLHOST_FLEET_KEY",
            "a-fleet-key-of-at-least-32-characters",
        )
        .env("TOOLHOST_INTERNAL_HOST", "10.0.0.7")
        .env("TOOLHOST_TOKEN", "a-token")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn haproxy_accepts_the_shipped_config() {
    crate::common::require_program("haproxy");
    let check = |bind: &str| {
        std::process::Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(repo("deploy/haproxy.cfg"))
            .env("TOOLHOST_GATEWAY_BIND", bind)
            .env("TOOLHOST_MEMBER_1", "127.0.0.1:7401")
            .env("TOOLHOST_MEMBER_2", "127.0.0.1:7402")
            .env("TOOLHOST_MEMBER_3", "127.0.0.1:7403")
            .output()
            .unwrap()
    };
    let out = check("127.0.0.1:7400");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And it does check: a bind address that is none is refused.
    assert!(!check("not an address").status.success());
}
