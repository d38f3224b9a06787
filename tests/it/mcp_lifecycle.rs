//! The lifecycle of an MCP server's process (issue 28): lazy start from the listing kept
//! from the last run, idle stop and the transparent restart, and parallel, bounded
//! start-ups. Against the real fixture server (tests/fixtures/mcp_server.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::mcp::{fixture, pids, status, wait_state};
use common::*;
use serde_json::{json, Value};

fn write_config(d: &Daemon, servers: Value) {
    write_atomic(&d.config_path(), &json!({"mcp_servers": servers}));
}

async fn listed(d: &Daemon) -> Vec<String> {
    let r = d.call("list_tools", json!({})).await;
    tool_names(&r["result"])
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// A daemon running the fixture as `fx` (its block given `extra`), once `fx` is ready.
async fn ready_fx(extra: Value) -> Daemon {
    let d = Daemon::start_in(|dir| json!({"mcp_servers": {"fx": fixture(dir, "fx", extra)}})).await;
    wait_state(&d, "fx", "ready").await;
    d
}

/// Runs the daemon once with `servers` so a lazy server (started to learn its tools, having
/// no kept listing) leaves its listing behind, then stops it.
async fn first_run(servers: impl FnOnce(&Path) -> Value, lazy: &str) -> Daemon {
    let mut d = Daemon::start_in(|dir| json!({"mcp_servers": servers(dir)})).await;
    let st = wait_state(&d, lazy, "ready").await;
    assert_eq!(st["tools_from"], "live", "{st}");
    assert!(d.data_dir().join(format!("mcp-tools/{lazy}.json")).exists());
    d.stop().await;
    d
}

#[tokio::test]
async fn a_lazy_server_is_listed_from_its_last_run_and_started_by_its_first_call() {
    let lazy = json!({"start": "lazy", "env": {"FIXTURE_RESOURCES": "lbl"}});
    let mut d = first_run(|dir| json!({"fx": fixture(dir, "fx", lazy)}), "fx").await;
    assert_eq!(pids(&d, "fx").len(), 1);

    d.spawn(&[]).await;
    let st = wait_state(&d, "fx", "not_started").await;
    assert_eq!(st["tools_from"], "cache", "{st}");
    assert_eq!(st["tools"], 10, "{st}");
    assert!(st.get("pid").is_none(), "{st}");
    assert!(st.get("last_used").is_none(), "{st}");
    assert!(listed(&d).await.contains(&"mcp_fx_echo".to_owned()));
    // Its prompts and resources too (after the host's own commands).
    let prompts = d.call("list_prompts", json!({})).await;
    let server_prompts: Vec<&Value> = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["server"] == "fx")
        .collect();
    assert_eq!(server_prompts[0]["name"], "mcp_fx_greet", "{prompts}");
    let resources = d.call("list_resources", json!({})).await;
    let uris = resources["result"]["resources"].to_string();
    assert!(uris.contains("fixture://shared"), "{resources}");
    // Listed without running: no process was started for it.
    assert_eq!(pids(&d, "fx").len(), 1);
    let health = d.call("host.health", json!({})).await;
    assert_eq!(health["result"]["status"], "ok", "{health}");

    let r = d.invoke("mcp_fx_echo", json!({"text": "woken"})).await;
    assert_eq!(r["output"], "woken", "{r}");
    assert_eq!(pids(&d, "fx").len(), 2);
    let st = status(&d, "fx").await;
    assert_eq!(st["state"], "ready", "{st}");
    assert_eq!(st["tools_from"], "live", "{st}");
    assert_eq!(st["pid"], pids(&d, "fx")[1], "{st}");
    assert!(st["rss_kib"].as_u64().unwrap() > 0, "{st}");
    assert!(st["last_used"].as_u64().unwrap() > 0, "{st}");
    // Waking is a start, not a restart after a failure.
    assert_eq!(st["restarts"], 0, "{st}");
}

#[tokio::test]
async fn an_idle_server_is_stopped_and_the_next_call_starts_it_again() {
    let d = ready_fx(json!({"idle_stop_s": 1})).await;
    assert_eq!(
        d.invoke("mcp_fx_echo", json!({"text": "one"})).await["output"],
        "one"
    );
    let first = pids(&d, "fx")[0];
    let st = wait_state(&d, "fx", "stopped_idle").await;
    assert_eq!(st["tools"], 10, "{st}");
    assert_eq!(st["tools_from"], "last_listing", "{st}");
    assert!(st.get("pid").is_none(), "{st}");
    eventually(10, "the idle server's process to exit", || async {
        !alive(first)
    })
    .await;
    assert!(listed(&d).await.contains(&"mcp_fx_echo".to_owned()));

    let r = d.invoke("mcp_fx_echo", json!({"text": "two"})).await;
    assert_eq!(r["output"], "two", "{r}");
    assert_eq!(pids(&d, "fx").len(), 2);
    assert_eq!(status(&d, "fx").await["state"], "ready");
}

#[tokio::test]
async fn a_call_in_flight_is_not_cut_by_the_idle_stop() {
    let d = ready_fx(json!({"idle_stop_s": 1})).await;
    // Longer than idle_stop_s, without progress notifications.
    let r = d.invoke("mcp_fx_sleep", json!({"ms": 2500})).await;
    assert!(r["output"].as_str().unwrap().contains("slept"), "{r}");
    assert_eq!(pids(&d, "fx").len(), 1);
    wait_state(&d, "fx", "stopped_idle").await;
}

#[tokio::test]
async fn a_listing_changed_while_stopped_is_published_once_the_server_runs() {
    let catalog = |dir: &Path, name: &str| {
        std::fs::write(
            dir.join("catalog.json"),
            json!([{"name": name, "description": "a catalog tool"}]).to_string(),
        )
        .unwrap();
    };
    let servers = |dir: &Path| {
        catalog(dir, "alpha");
        let env = json!({"FIXTURE_CATALOG_FILE": dir.join("catalog.json")});
        json!({"fx": fixture(dir, "fx", json!({"start": "lazy", "env": env}))})
    };
    let mut d = first_run(servers, "fx").await;
    catalog(d.dir.path(), "beta");

    d.spawn(&[]).await;
    wait_state(&d, "fx", "not_started").await;
    let before = listed(&d).await;
    assert!(before.contains(&"mcp_fx_alpha".to_owned()), "{before:?}");
    assert!(!before.contains(&"mcp_fx_beta".to_owned()), "{before:?}");
    let c = d.client().await;
    let mut changes = c.subscribe_tools_changed().await.unwrap();

    // The kept tool that is gone fails as a call to a tool the server lacks does, and
    // its call starts the server, whose real listing is published.
    let r = d.invoke("mcp_fx_alpha", json!({})).await;
    assert_eq!(r["ok"], false, "{r}");
    let n = changes.next().await.unwrap().unwrap();
    assert_eq!(n.added, vec!["mcp_fx_beta".to_owned()], "{n:?}");
    assert_eq!(n.removed, vec!["mcp_fx_alpha".to_owned()], "{n:?}");
    assert_eq!(
        d.invoke("mcp_fx_beta", json!({})).await["output"],
        "ran beta"
    );
    let r = d.invoke("mcp_fx_alpha", json!({})).await;
    assert_eq!(r["error_kind"], "unknown_tool", "{r}");
}

#[tokio::test]
async fn changed_args_do_not_reuse_the_kept_listing() {
    let mut d = first_run(
        |dir| json!({"fx": fixture(dir, "fx", json!({"start": "lazy"}))}),
        "fx",
    )
    .await;
    let dir = d.dir.path().to_owned();
    write_config(
        &d,
        json!({"fx": fixture(&dir, "fx", json!({"start": "lazy", "args": ["--", "v2"]}))}),
    );
    d.spawn(&[]).await;
    // Another program: started at once to learn its tools, not listed from the old run.
    let st = wait_state(&d, "fx", "ready").await;
    assert_eq!(st["tools_from"], "live", "{st}");
    assert_eq!(pids(&d, "fx").len(), 2);
}

#[tokio::test]
async fn a_server_hanging_in_initialize_delays_none_of_the_others() {
    let names: Vec<String> = (0..20).map(|i| format!("s{i:02}")).collect();
    let d = Daemon::start_in(|dir| {
        let mut servers = serde_json::Map::new();
        for name in &names {
            let extra = if name == "s00" {
                json!({"startup_timeout_ms": 600_000, "env": {"FIXTURE_INITIALIZE": "hang"}})
            } else {
                json!({})
            };
            servers.insert(name.clone(), fixture(dir, name, extra));
        }
        json!({"mcp_servers": servers})
    })
    .await;
    eventually(60, "the 19 servers that answer to be ready", || async {
        let r = d.call("mcp.status", json!({})).await;
        let servers = r["result"]["servers"].as_array().unwrap().clone();
        servers
            .iter()
            .filter(|s| s["name"] != "s00")
            .all(|s| s["state"] == "ready")
    })
    .await;
    assert_eq!(status(&d, "s00").await["state"], "connecting");
    for name in names.iter().skip(1) {
        let r = d
            .invoke(&format!("mcp_{name}_echo"), json!({"text": name}))
            .await;
        assert_eq!(&r["output"], name, "{r}");
    }
    assert_eq!(status(&d, "s00").await["state"], "connecting");
}

#[tokio::test]
async fn start_ups_beyond_the_slots_wait_for_one_to_end() {
    // Nine servers that hang in initialize: eight take the start-up slots, the ninth waits
    // for one (and says so), and spawns once one of the eight is removed.
    let names: Vec<String> = (0..9).map(|i| format!("h{i}")).collect();
    let hanging = |dir: &Path, names: &[String]| {
        let mut servers = serde_json::Map::new();
        for name in names {
            let extra =
                json!({"startup_timeout_ms": 600_000, "env": {"FIXTURE_INITIALIZE": "hang"}});
            servers.insert(name.clone(), fixture(dir, name, extra));
        }
        Value::Object(servers)
    };
    let d = Daemon::start_in(|dir| json!({"mcp_servers": hanging(dir, &names)})).await;
    let spawned = || -> Vec<String> {
        names
            .iter()
            .filter(|n| !pids(&d, n).is_empty())
            .cloned()
            .collect()
    };
    eventually(30, "a server to wait for a start-up slot", || async {
        d.log().contains("waiting for a start-up slot")
    })
    .await;
    eventually(30, "eight servers to have spawned", || async {
        spawned().len() == 8
    })
    .await;
    let r = d.call("mcp.status", json!({})).await;
    let servers = r["result"]["servers"].as_array().unwrap();
    assert!(servers.iter().all(|s| s["state"] == "connecting"), "{r}");
    // The eight hang for ten minutes: the ninth cannot have spawned.
    assert_eq!(spawned().len(), 8);

    let gone = spawned()[0].clone();
    let rest: Vec<String> = names.iter().filter(|n| **n != gone).cloned().collect();
    let dir = d.dir.path().to_owned();
    write_config(&d, hanging(&dir, &rest));
    eventually(
        30,
        "the ninth server to spawn in the freed slot",
        || async { spawned().len() == 9 },
    )
    .await;
}

#[tokio::test]
async fn a_relayed_request_starts_an_idle_server_and_a_subscription_keeps_it_running() {
    let d = ready_fx(json!({"idle_stop_s": 1, "env": {"FIXTURE_RESOURCES": "lbl"}})).await;
    wait_state(&d, "fx", "stopped_idle").await;
    // Its resources stay listed, and reading one starts the server.
    let mut c = d.raw_lines().await;
    let r = c
        .call("read_resource", json!({"uri": "fixture://shared"}))
        .await;
    assert_eq!(r["result"]["contents"][0]["text"], "served by lbl", "{r}");
    assert_eq!(pids(&d, "fx").len(), 2);

    let sub = c
        .call("subscribe_resource", json!({"uri": "fixture://shared"}))
        .await;
    assert!(sub.get("result").is_some(), "{sub}");
    // Well past idle_stop_s since the last request, the subscription holds it.
    eventually(20, "the last use to be 2 s old", || async {
        let st = status(&d, "fx").await;
        let last = st["last_used"].as_u64().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        now.saturating_sub(last) > 2000
    })
    .await;
    assert_eq!(status(&d, "fx").await["state"], "ready");
    let done = c.call("unsubscribe_resource", json!([sub["result"]])).await;
    assert_eq!(done["result"], true, "{done}");
    wait_state(&d, "fx", "stopped_idle").await;
}
