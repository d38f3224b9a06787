//! Issue 49's load run, short: 24 clients on every framing against the real daemon for a
//! few seconds while the config is reloaded and the MCP server and the module host are
//! killed in turn; no request may go unanswered or get another's answer
//! (`benches/load.rs` runs the same for two minutes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common;

use common::load::{self, Plan};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_on_every_framing_through_reloads_and_kills_lose_no_reply() {
    let d = load::daemon().await;
    let plan = Plan {
        clients_per_framing: 6,
        run_for: Duration::from_secs(12),
        disturb_every: Duration::from_secs(1),
    };
    let f = load::run(&d, &plan).await;
    println!("{f}");
    assert_eq!((f.lost, f.wrong), (0, 0), "{f}");
    assert!(f.right_by_framing.iter().all(|&n| n > 0), "{f}");
    assert!(
        f.reloads >= 3 && f.server_kills >= 2 && f.host_kills >= 2,
        "{f}"
    );
    // Once the kills stop, both tools answer again.
    for (tool, arguments) in [
        ("mcp_fx_echo", json!({"text": "after"})),
        ("lecho", json!({"text": "after"})),
    ] {
        common::eventually(20, &format!("{tool} to answer again"), || async {
            d.invoke(tool, arguments.clone()).await["output"] == "after"
        })
        .await;
    }
}
