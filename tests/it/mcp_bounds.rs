//! Every request to an MCP server is bounded, so a server cannot wedge its supervisor: one
//! that hangs in `tools/list` or pages on without end is reported in `mcp.status` with the
//! cause, and a reload that removes it kills its process group, also while it hangs in the
//! middle of a request (the fixture's `FIXTURE_LIST` modes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::mcp::{fixture, pids, status, wait_status};
use common::*;
use serde_json::{json, Value};

/// A fixture server block misbehaving as `mode` says (`FIXTURE_LIST`), with its pid and
/// events files named after `name` in `dir`.
fn server(dir: &Path, name: &str, mode: &str, mut extra: Value) -> Value {
    extra["env"] = json!({"FIXTURE_LIST": mode});
    fixture(dir, name, extra)
}

fn hangs(d: &Daemon, name: &str) -> usize {
    std::fs::read_to_string(d.dir.path().join(format!("{name}.events")))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "tools/list hangs")
        .count()
}

fn error_of(st: &Value) -> &str {
    st["last_error"].as_str().unwrap_or("")
}

/// Live processes in the process group `pgid` (a zombie counts as gone).
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse()))
                .and_then(Result::ok)
                == Some(pgid)
                && alive(p)
        })
        .collect()
}

/// Removes every server by a reload and checks that each process group any of `names`
/// started is gone soon after: closing the session waits up to 2 s, the TERM grace is 2 s.
async fn reload_removes_and_kills(d: &Daemon, names: &[&str]) {
    let groups: Vec<i32> = names.iter().flat_map(|n| pids(d, n)).collect();
    assert!(!groups.is_empty());
    write_atomic(&d.config_path(), &json!({}));
    let started = Instant::now();
    let r = d.call("config.reload", json!({})).await;
    assert_eq!(r["result"]["applied"], true, "{r}");
    for g in groups {
        eventually(
            10,
            &format!("process group {g} to be gone"),
            || async move { group_members(g).is_empty() },
        )
        .await;
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "the groups took {took:?} to go"
    );
    assert_eq!(
        d.call("mcp.status", json!({})).await["result"]["servers"],
        json!([])
    );
}

#[tokio::test]
async fn a_server_that_pages_forever_or_lists_too_many_tools_is_refused() {
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {
            "endless": server(dir, "endless", "endless", json!({})),
            "many": server(dir, "many", "", json!({"max_tools": 3})),
        }})
    })
    .await;
    let st = wait_status(&d, "endless", |s| s["state"] == "failed").await;
    assert!(
        error_of(&st).contains("tools/list returned more than 100 pages (max_list_pages)"),
        "{st}"
    );
    assert_eq!(
        st["tools"], 0,
        "a listing over the cap is refused whole: {st}"
    );
    let st = wait_status(&d, "many", |s| s["state"] == "failed").await;
    assert!(
        error_of(&st).contains("tools/list returned more than 3 tools (max_tools)"),
        "{st}"
    );
    // The next attempt is under way or waiting its backoff; either way reload ends it.
    wait_status(&d, "endless", |s| {
        s["consecutive_failures"].as_u64() >= Some(2)
    })
    .await;
    reload_removes_and_kills(&d, &["endless", "many"]).await;
}

#[tokio::test]
async fn a_server_that_hangs_in_tools_list_times_out_and_is_killed_mid_request() {
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {
            "hung": server(dir, "hung", "hang", json!({"timeout_ms": 1000, "startup_timeout_ms": 60000})),
        }})
    })
    .await;
    let st = wait_status(&d, "hung", |s| s["state"] == "failed").await;
    assert!(
        error_of(&st).contains("tools/list did not answer within 1000 ms (timeout_ms)"),
        "{st}"
    );
    // Removed while its next attempt hangs in tools/list.
    eventually(20, "the second attempt to hang", || async {
        hangs(&d, "hung") >= 2
    })
    .await;
    reload_removes_and_kills(&d, &["hung"]).await;
}

#[tokio::test]
async fn a_server_that_hangs_after_list_changed_keeps_its_tools_and_is_killed_by_reload() {
    let d = Daemon::start_in(|dir| {
        json!({"mcp_servers": {
            // Times out its listing after list_changed and says so.
            "quick": server(dir, "quick", "hang_after_change", json!({"timeout_ms": 1000})),
            // Still waits for its listing when the reload removes it.
            "wedged": server(dir, "wedged", "hang_after_change", json!({"timeout_ms": 600000})),
        }})
    })
    .await;
    let st = wait_status(&d, "quick", |s| !error_of(s).is_empty()).await;
    assert_eq!(st["state"], "ready", "{st}");
    let tools = st["tools"].as_u64().unwrap();
    assert!(tools > 0, "{st}");
    assert_eq!(
        error_of(&st),
        format!("tools/list did not answer within 1000 ms (timeout_ms), after tools/list_changed; the {tools} tools listed before stay")
    );
    eventually(20, "wedged's listing to hang", || async {
        hangs(&d, "wedged") == 1
    })
    .await;
    let st = status(&d, "wedged").await;
    assert_eq!(st["state"], "ready", "{st}");
    // The connection still serves its tools while the listing hangs.
    assert_eq!(
        d.invoke("mcp_wedged_echo", json!({"text": "still here"}))
            .await["output"],
        "still here"
    );
    reload_removes_and_kills(&d, &["quick", "wedged"]).await;
}
