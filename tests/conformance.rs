//! The official MCP conformance suite's client scenarios other than authorization (those
//! are tests/conformance_auth.rs), run against our MCP client by the shared runner in
//! tests/common/conformance.rs. Scenarios we do not pass are listed in proto-docs/oauth.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::conformance::UNVERSIONED;

client_scenarios! { UNVERSIONED;
    initialize => "initialize",
    tools_call => "tools_call",
    sse_retry => "sse-retry",
}
