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
