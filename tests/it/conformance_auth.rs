//! The official MCP conformance suite's authorization scenarios (`auth/*`), run against our
//! MCP client by the shared runner in tests/it/common/conformance.rs: every scenario the
//! frozen requirement sets of 2025-11-25 and 2026-07-28 list, each at its revision's wire,
//! plus the 2025-03-26 endpoint fallback and the client-credentials extension. Checks known
//! to fail are in the per-version baselines, tests/conformance/client-<version>.yaml;
//! proto-docs/oauth.md says why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

mod v2025_11_25 {
    crate::client_scenarios! { crate::common::conformance::V2025_11_25;
        metadata_default => "auth/metadata-default",
        metadata_var1 => "auth/metadata-var1",
        metadata_var2 => "auth/metadata-var2",
        metadata_var3 => "auth/metadata-var3",
        basic_cimd => "auth/basic-cimd",
        scope_from_www_authenticate => "auth/scope-from-www-authenticate",
        scope_from_scopes_supported => "auth/scope-from-scopes-supported",
        scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
        scope_step_up => "auth/scope-step-up",
        scope_retry_limit => "auth/scope-retry-limit",
        token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
        token_endpoint_auth_post => "auth/token-endpoint-auth-post",
        token_endpoint_auth_none => "auth/token-endpoint-auth-none",
        pre_registration => "auth/pre-registration",
    }
}

mod v2026_07_28 {
    crate::client_scenarios! { crate::common::conformance::V2026_07_28;
        metadata_default => "auth/metadata-default",
        metadata_var1 => "auth/metadata-var1",
        metadata_var2 => "auth/metadata-var2",
        metadata_var3 => "auth/metadata-var3",
        basic_cimd => "auth/basic-cimd",
        scope_from_www_authenticate => "auth/scope-from-www-authenticate",
        scope_from_scopes_supported => "auth/scope-from-scopes-supported",
        scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
        scope_step_up => "auth/scope-step-up",
        scope_retry_limit => "auth/scope-retry-limit",
        token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
        token_endpoint_auth_post => "auth/token-endpoint-auth-post",
        token_endpoint_auth_none => "auth/token-endpoint-auth-none",
        pre_registration => "auth/pre-registration",
        resource_mismatch => "auth/resource-mismatch",
        offline_access_scope => "auth/offline-access-scope",
        offline_access_not_supported => "auth/offline-access-not-supported",
        authorization_server_migration => "auth/authorization-server-migration",
        iss_supported => "auth/iss-supported",
        iss_not_advertised => "auth/iss-not-advertised",
        iss_supported_missing => "auth/iss-supported-missing",
        iss_wrong_issuer => "auth/iss-wrong-issuer",
        iss_unexpected => "auth/iss-unexpected",
        iss_normalized => "auth/iss-normalized",
        metadata_issuer_mismatch => "auth/metadata-issuer-mismatch",
    }
}

/// Not on the spec timeline (an extension) or from before 2025-11-25.
mod unversioned {
    crate::client_scenarios! { crate::common::conformance::UNVERSIONED;
        oauth_endpoint_fallback_2025_03_26 => "auth/2025-03-26-oauth-endpoint-fallback",
        client_credentials_basic => "auth/client-credentials-basic",
    }
}

/// Every `auth/*` client scenario a requirement set lists runs here at that version, so an
/// upgrade of the suite that adds one fails until it is added (or baselined).
#[test]
fn every_required_auth_scenario_runs() {
    for (version, ours) in [
        ("2025-11-25", v2025_11_25::SCENARIOS),
        ("2026-07-28", v2026_07_28::SCENARIOS),
    ] {
        let mut required: Vec<String> = common::conformance::required_client_scenarios(version)
            .into_iter()
            .filter(|s| s.starts_with("auth/"))
            .collect();
        required.sort();
        let mut ours: Vec<&str> = ours.to_vec();
        ours.sort_unstable();
        assert_eq!(required, ours, "auth scenarios required at {version}");
    }
}
