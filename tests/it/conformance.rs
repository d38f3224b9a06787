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
