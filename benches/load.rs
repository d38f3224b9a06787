//! Issue 49's load run, long: 24 clients on every framing (socket JSON-RPC, `toolhost mcp`
//! stdio, `/mcp` in both eras) against the real daemon for two minutes while the config
//! is reloaded and the MCP server and the module host are killed in turn; prints answers,
//! lost, wrong and throughput (`tests/it/common/load.rs` drives it; `load_run` in the
//! suite is the short version). `TOOLHOST_LOAD_SECS` changes the length.
//!
//! Run: `cargo bench --bench load`
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::time::Duration;

use common::load::{self, Plan};

#[tokio::main]
async fn main() {
    let secs = std::env::var("TOOLHOST_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let d = load::daemon().await;
    let plan = Plan {
        clients_per_framing: 6,
        run_for: Duration::from_secs(secs),
        disturb_every: Duration::from_secs(2),
    };
    println!(
        "toolhost load run: {} clients, {secs} s, a disturbance every {:?}\nbinary: {}",
        plan.clients_per_framing * load::FRAMINGS.len(),
        plan.disturb_every,
        common::BIN
    );
    let f = load::run(&d, &plan).await;
    println!("{f}");
}
