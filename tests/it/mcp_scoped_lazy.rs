//! A lazy scoped server (issue 28): `"scope": "per_workspace", "start": "lazy"`. Its first
//! run ever starts the daemon's own instance to learn its tools (there is no listing to
//! show yet); every later run lists them from that run's kept listing and starts nothing
//! until a call, which starts only the caller's instance. Instances stop after the idle
//! time, and a listed tool the caller's instance lacks fails naming that instance. Against
//! the real fixture server (tests/fixtures/mcp_server.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

/// The fixture as a lazy per-workspace server: `whereami`, its starts appended to
/// `dir/sc.pids`, and the block's other keys from `extra` (`env` merged).
fn lazy_scoped(dir: &Path, extra: Value) -> Value {
    let mut block = mcp::fixture(dir, "sc", extra);
    block["scope"] = json!("per_workspace");
    block["start"] = json!("lazy");
    block["env"]["FIXTURE_WHEREAMI"] = json!("1");
    block
}

/// Every process the server has started, in order.
fn starts(d: &Daemon) -> Vec<i32> {
    mcp::pids(d, "sc")
}

async fn status(d: &Daemon) -> Value {
    mcp::status(d, "sc").await
}

async fn wait_state(d: &Daemon, state: &str) -> Value {
    mcp::wait_state(d, "sc", state).await
}

fn instances(status: &Value) -> Vec<Value> {
    status["instances"].as_array().cloned().unwrap_or_default()
}

/// The call's envelope `result` of `tool` in `session` (none: the daemon's own).
async fn call_in(d: &Daemon, session: Option<&str>, tool: &str) -> Value {
    let mut params = json!({"name": tool, "arguments": {}});
    if let Some(s) = session {
        params["session_id"] = json!(s);
    }
    d.call("invoke", params).await["result"]["result"].clone()
}

async fn whereami(d: &Daemon, session: &str) -> Value {
    let r = call_in(d, Some(session), "mcp_sc_whereami").await;
    assert_eq!(r["ok"], true, "{r}");
    serde_json::from_str(r["output"].as_str().unwrap()).unwrap()
}

/// The first run of the daemon ever: no listing is kept yet, so the daemon's own instance
/// is started to learn the tools (a lazy server is listed only from a listing it gave) and
/// leaves its listing for the next run, which this returns stopped.
async fn first_run(extra: impl Fn(&Path) -> Value) -> Daemon {
    let mut d =
        Daemon::start_in(|dir| json!({"mcp_servers": {"sc": lazy_scoped(dir, extra(dir))}})).await;
    let st = wait_state(&d, "ready").await;
    assert_eq!(st["tools_from"], "live", "{st}");
    let home = d.workspace().canonicalize().unwrap();
    let own: Vec<Value> = instances(&st)
        .iter()
        .map(|i| i["workspace"].clone())
        .collect();
    assert_eq!(own, vec![json!(home)], "{st}");
    assert_eq!(starts(&d).len(), 1);
    assert!(d.data_dir().join("mcp-tools/sc.json").exists());
    d.stop().await;
    d
}

#[tokio::test]
async fn a_later_run_lists_from_the_cache_and_a_call_starts_only_the_callers_instance() {
    let mut d = first_run(|_| json!({})).await;
    d.spawn(&[]).await;
    let st = wait_state(&d, "not_started").await;
    assert_eq!(st["tools_from"], "cache", "{st}");
    let listed = d.call("list_tools", json!({})).await;
    assert!(
        tool_names(&listed["result"]).contains(&"mcp_sc_whereami"),
        "{listed}"
    );
    assert_eq!(starts(&d).len(), 1, "nothing started for the listing");

    let a = d.subdir("a");
    let sa = d.session(json!({"workspace": &a})).await;
    let at_a = whereami(&d, &sa).await;
    assert_eq!(at_a["cwd"], json!(a));
    assert_eq!(starts(&d).len(), 2, "one start: the instance in A");
    assert_eq!(at_a["pid"], json!(starts(&d)[1]));
    let st = status(&d).await;
    assert_eq!(
        st["state"], "not_started",
        "the daemon's own stays parked: {st}"
    );
    let listed: Vec<(Value, Value, Value)> = instances(&st)
        .iter()
        .map(|i| (i["workspace"].clone(), i["state"].clone(), i["pid"].clone()))
        .collect();
    let home = d.workspace().canonicalize().unwrap();
    assert_eq!(
        listed,
        vec![
            (json!(home), json!("not_started"), Value::Null),
            (json!(a), json!("ready"), at_a["pid"].clone()),
        ],
        "{st}"
    );
    // A second workspace gets an instance of its own; A's keeps serving A.
    let b = d.subdir("b");
    let at_b = whereami(&d, &d.session(json!({"workspace": &b})).await).await;
    assert_eq!(at_b["cwd"], json!(b));
    assert_eq!(whereami(&d, &sa).await["pid"], at_a["pid"]);
    assert_eq!(starts(&d).len(), 3);
    assert_eq!(status(&d).await["state"], "not_started");
}

#[tokio::test]
async fn an_idle_instance_of_a_lazy_scoped_server_stops_and_the_next_call_starts_it() {
    let mut d = first_run(|_| json!({"idle_stop_s": 1})).await;
    d.spawn(&[]).await;
    wait_state(&d, "not_started").await;
    let a = d.subdir("a");
    let sa = d.session(json!({"workspace": &a})).await;
    let pid = whereami(&d, &sa).await["pid"].as_u64().unwrap();
    eventually(10, "A's idle instance to stop", || async {
        instances(&status(&d).await).len() == 1 && !alive(pid as i32)
    })
    .await;
    assert_eq!(status(&d).await["state"], "not_started");

    let again = whereami(&d, &sa).await;
    assert_eq!(again["cwd"], json!(a));
    assert_ne!(again["pid"], json!(pid));
    assert_eq!(starts(&d).len(), 3);
}

#[tokio::test]
async fn a_listed_tool_the_callers_instance_lacks_fails_naming_its_workspace() {
    // Each instance adds the tools of its workspace's catalog: the daemon's own lists
    // `alpha`, the instance in A has `beta` instead.
    let env = |_: &Path| json!({"env": {"FIXTURE_CATALOG_FILE": "${WORKSPACE}/catalog.json"}});
    let catalog = |dir: &Path, name: &str| {
        let tools = json!([{"name": name, "description": "a catalog tool"}]);
        std::fs::write(dir.join("catalog.json"), tools.to_string()).unwrap();
    };
    let mut d = Daemon::unstarted();
    catalog(&d.workspace(), "alpha");
    let dir = d.dir.path().to_owned();
    std::fs::write(
        d.config_path(),
        json!({"mcp_servers": {"sc": lazy_scoped(&dir, env(&dir))}}).to_string(),
    )
    .unwrap();
    d.spawn(&[]).await;
    wait_state(&d, "ready").await;
    d.stop().await;
    d.spawn(&[]).await;
    wait_state(&d, "not_started").await;

    let a = d.subdir("a");
    catalog(&a, "beta");
    let sa = d.session(json!({"workspace": &a})).await;
    let r = call_in(&d, Some(&sa), "mcp_sc_alpha").await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error_kind"], "unknown_tool", "{r}");
    assert_eq!(
        r["error"],
        format!(
            "MCP server 'sc' has no tool 'alpha' in its instance for workspace {} \
             (the tools listed are those of its instance for {})",
            a.display(),
            d.workspace().canonicalize().unwrap().display()
        ),
        "{r}"
    );
    // The instance's own tool is not one the host lists.
    let r = call_in(&d, Some(&sa), "mcp_sc_beta").await;
    assert_eq!(r["error_kind"], "unknown_tool", "{r}");
    // The daemon's own instance has it: a call from its workspace starts it and runs.
    let r = call_in(&d, None, "mcp_sc_alpha").await;
    assert_eq!(r["output"], "ran alpha", "{r}");
    assert_eq!(status(&d).await["state"], "ready");
}
