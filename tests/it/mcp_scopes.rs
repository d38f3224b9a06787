//! Server scopes (issue 28): a `per_workspace` or `per_session` stdio server runs one
//! instance per session workspace or session, started by the first call that needs it, in
//! its workspace (`cwd`, `${WORKSPACE}`), bounded by `max_instances`, shown in `mcp.status`;
//! and the `roots/list` answer of a server given directories on its command line. Against
//! the real fixture server and the real server-filesystem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};
use toolhost::protocol::InvokeParams;

/// The fixture as a server of `scope` with `whereami`, its args after `--` and the label
/// `${WORKSPACE}` (both reported by `whereami`), and the block's other keys from `extra`.
fn scoped(scope: &str, extra: Value) -> Value {
    let mut block = json!({
        "command": FIXTURE,
        "args": ["--", "${WORKSPACE}/from-args"],
        "scope": scope,
        "env": {"FIXTURE_WHEREAMI": "1", "FIXTURE_LABEL": "label:${WORKSPACE}"},
    });
    for (k, v) in extra.as_object().unwrap() {
        block[k] = v.clone();
    }
    block
}

async fn daemon(server: Value) -> Daemon {
    let d = Daemon::start_in(|_| json!({"mcp_servers": {"sc": server}})).await;
    eventually(20, "the server's own instance ready", || async {
        status(&d).await["state"] == "ready"
    })
    .await;
    d
}

async fn status(d: &Daemon) -> Value {
    d.call("mcp.status", json!({"server": "sc"})).await["result"]["servers"][0].clone()
}

/// The call's envelope `result` of `tool` in `session` (none: the daemon's own).
async fn call_in(d: &Daemon, session: Option<&str>, tool: &str, arguments: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(s) = session {
        params["session_id"] = json!(s);
    }
    let r = d.call("invoke", params).await;
    r["result"]["result"].clone()
}

/// What the instance serving `session` says of itself.
async fn whereami(d: &Daemon, session: Option<&str>) -> Value {
    let r = call_in(d, session, "mcp_sc_whereami", json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    serde_json::from_str(r["output"].as_str().unwrap()).unwrap()
}

fn instances(status: &Value) -> Vec<Value> {
    status["instances"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn per_workspace_runs_one_instance_per_workspace_in_it() {
    let d = daemon(scoped("per_workspace", json!({}))).await;
    let home = d.workspace().canonicalize().unwrap();
    // Listed before any session called: by the daemon's own instance, in its workspace.
    let listed = d.call("list_tools", json!({})).await;
    assert!(
        tool_names(&listed["result"]).contains(&"mcp_sc_whereami"),
        "{listed}"
    );
    let own = whereami(&d, None).await;
    assert_eq!(own["cwd"], json!(home));

    let (a, b) = (d.subdir("a"), d.subdir("b"));
    let (sa, sb, sa2) = (
        d.session(json!({"workspace": &a})).await,
        d.session(json!({"workspace": &b})).await,
        d.session(json!({"workspace": &a})).await,
    );
    let at_a = whereami(&d, Some(&sa)).await;
    let at_b = whereami(&d, Some(&sb)).await;
    // Each in its workspace, `${WORKSPACE}` expanded in its args and env.
    assert_eq!(at_a["cwd"], json!(a));
    assert_eq!(at_a["args"], json!([format!("{}/from-args", a.display())]));
    assert_eq!(at_a["label"], json!(format!("label:{}", a.display())));
    assert_eq!(at_b["cwd"], json!(b));
    assert_eq!(at_b["label"], json!(format!("label:{}", b.display())));
    let pids = [&own, &at_a, &at_b].map(|w| w["pid"].as_u64().unwrap());
    assert!(
        pids[0] != pids[1] && pids[1] != pids[2] && pids[0] != pids[2],
        "{pids:?}"
    );
    // A second session in the same workspace shares its instance.
    assert_eq!(whereami(&d, Some(&sa2)).await["pid"], at_a["pid"]);
    // A session in the daemon's workspace is served by the daemon's own instance.
    let at_home = d.session(json!({"workspace": &home})).await;
    assert_eq!(whereami(&d, Some(&at_home)).await["pid"], own["pid"]);

    let s = status(&d).await;
    assert_eq!(s["scope"], "per_workspace");
    let listed: Vec<(Value, Value, Value)> = instances(&s)
        .iter()
        .map(|i| {
            (
                i["workspace"].clone(),
                i["pid"].clone(),
                i["default"].clone(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (json!(home), json!(pids[0]), json!(true)),
            (json!(a), json!(pids[1]), json!(false)),
            (json!(b), json!(pids[2]), json!(false)),
        ],
        "{s}"
    );
    for i in instances(&s) {
        assert_eq!(i["state"], "ready", "{i}");
        assert!(i["rss_bytes"].as_u64().unwrap() > 100_000, "{i}");
        assert!(i["last_used"].as_u64().unwrap() > 0, "{i}");
        assert!(i.get("session_id").is_none(), "{i}");
    }
}

#[tokio::test]
async fn per_session_runs_one_instance_per_session_until_it_is_deleted() {
    let d = daemon(scoped("per_session", json!({}))).await;
    let a = d.subdir("a");
    let (s1, s2) = (
        d.session(json!({"workspace": &a})).await,
        d.session(json!({"workspace": &a})).await,
    );
    let own = whereami(&d, None).await["pid"].as_u64().unwrap();
    let p1 = whereami(&d, Some(&s1)).await;
    let p2 = whereami(&d, Some(&s2)).await;
    assert_eq!(p1["cwd"], json!(a));
    assert_eq!(p2["cwd"], json!(a));
    let (p1, p2) = (p1["pid"].as_u64().unwrap(), p2["pid"].as_u64().unwrap());
    assert!(p1 != p2 && p1 != own && p2 != own, "{own} {p1} {p2}");
    assert_eq!(whereami(&d, Some(&s1)).await["pid"], json!(p1));
    let sessions: Vec<Value> = instances(&status(&d).await)
        .iter()
        .map(|i| i["session_id"].clone())
        .collect();
    assert_eq!(sessions, vec![Value::Null, json!(s1), json!(s2)]);

    let deleted = d.call("session.delete", json!({"id": s1})).await;
    assert_eq!(deleted["result"]["deleted"], true, "{deleted}");
    let s = status(&d).await;
    let pids: Vec<Value> = instances(&s).iter().map(|i| i["pid"].clone()).collect();
    assert_eq!(pids, vec![json!(own), json!(p2)], "{s}");
    eventually(10, "the deleted session's instance to exit", || async {
        !alive(p1 as i32)
    })
    .await;
    assert!(alive(p2 as i32));

    // A session moved to another workspace gets an instance there.
    let b = d.subdir("b");
    let moved = d
        .call("session.update", json!({"id": s2, "workspace": b}))
        .await;
    assert_eq!(moved["result"]["workspace"], json!(b), "{moved}");
    let there = whereami(&d, Some(&s2)).await;
    assert_eq!(there["cwd"], json!(b));
    assert_ne!(there["pid"], json!(p2));
    eventually(10, "the instance in the old workspace to exit", || async {
        !alive(p2 as i32)
    })
    .await;
}

#[tokio::test]
async fn max_instances_stops_the_least_recently_used_idle_one_and_a_call_waits_for_room() {
    let d = daemon(scoped("per_workspace", json!({"max_instances": 1}))).await;
    let (a, b) = (d.subdir("a"), d.subdir("b"));
    let (sa, sb) = (
        d.session(json!({"workspace": &a})).await,
        d.session(json!({"workspace": &b})).await,
    );
    let at_a = whereami(&d, Some(&sa)).await["pid"].as_u64().unwrap();
    // Room for B: A, idle, is stopped.
    let at_b = whereami(&d, Some(&sb)).await["pid"].as_u64().unwrap();
    let live: Vec<Value> = instances(&status(&d).await)
        .iter()
        .skip(1)
        .map(|i| i["workspace"].clone())
        .collect();
    assert_eq!(live, vec![json!(b)]);
    eventually(10, "A's instance to exit", || async { !alive(at_a as i32) }).await;

    // B busy: a call for A waits (in the server's queue) instead of stopping it.
    let c = std::sync::Arc::new(d.client().await);
    let holder = {
        let c = c.clone();
        let sb = sb.clone();
        tokio::spawn(async move {
            let mut p = InvokeParams::new("mcp_sc_sleep", args(json!({"ms": 60_000})));
            p.call_id = Some("holder".into());
            p.session_id = Some(sb);
            c.invoke(&p).await
        })
    };
    d.wait_for_call("holder").await;
    let waiter = {
        let c = c.clone();
        let sa = sa.clone();
        tokio::spawn(async move {
            let mut p = InvokeParams::new("mcp_sc_whereami", args(json!({})));
            p.session_id = Some(sa);
            c.invoke(&p).await
        })
    };
    eventually(10, "the call for A to wait for room", || async {
        status(&d).await["queued"] == 1
    })
    .await;
    // Bounded by its own timeout.
    let r = d
        .call(
            "invoke",
            json!({"name": "mcp_sc_whereami", "arguments": {}, "session_id": sa, "timeout_ms": 200}),
        )
        .await;
    assert_eq!(
        r["result"]["result"]["error"], "Tool 'mcp_sc_whereami' timed out after 200 ms",
        "{r}"
    );
    assert!(alive(at_b as i32));
    // B's call ends: the waiting call gets the room.
    assert_eq!(
        d.call("cancel", json!({"call_id": "holder"})).await["result"]["cancelled"],
        true
    );
    let _ = holder.await.unwrap();
    let r = waiter.await.unwrap().unwrap();
    assert!(r.result.ok, "{r:?}");
    let output = r.result.output.fields["output"].as_str().unwrap();
    let now: Value = serde_json::from_str(output).unwrap();
    assert_eq!(now["cwd"], json!(a));
    eventually(10, "B's instance to exit", || async { !alive(at_b as i32) }).await;
    assert_eq!(status(&d).await["queued"], 0);
}

#[tokio::test]
async fn an_idle_instance_stops_after_the_idle_time() {
    let d = daemon(scoped("per_workspace", json!({"idle_stop_s": 1}))).await;
    let a = d.subdir("a");
    let sa = d.session(json!({"workspace": &a})).await;
    let pid = whereami(&d, Some(&sa)).await["pid"].as_u64().unwrap();
    eventually(10, "the idle instance to stop", || async {
        instances(&status(&d).await).len() == 1 && !alive(pid as i32)
    })
    .await;
    // The next call starts it again.
    let again = whereami(&d, Some(&sa)).await;
    assert_eq!(again["cwd"], json!(a));
    assert_ne!(again["pid"], json!(pid));
}

#[tokio::test]
async fn a_workspace_that_no_longer_exists_fails_the_call_naming_it() {
    let d = daemon(scoped("per_workspace", json!({}))).await;
    let gone = d.subdir("gone");
    let s = d.session(json!({"workspace": &gone})).await;
    std::fs::remove_dir(&gone).unwrap();
    let r = call_in(&d, Some(&s), "mcp_sc_whereami", json!({})).await;
    assert_eq!(r["error_kind"], "unavailable", "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "MCP server 'sc' cannot start for workspace {}: ",
            gone.display()
        )),
        "{error}"
    );
    // Nothing was started for it.
    assert_eq!(instances(&status(&d).await).len(), 1);
}

#[tokio::test]
async fn an_instance_that_cannot_start_says_why() {
    // The daemon's own instance starts; one in a workspace where the fixture cannot write
    // its pid file (a directory is in the way) does not.
    let d = daemon(scoped(
        "per_workspace",
        json!({"env": {"FIXTURE_WHEREAMI": "1", "FIXTURE_PID_FILE": "${WORKSPACE}/pids"}}),
    ))
    .await;
    let a = d.subdir("a");
    std::fs::create_dir(a.join("pids")).unwrap();
    let s = d.session(json!({"workspace": &a})).await;
    let r = call_in(&d, Some(&s), "mcp_sc_whereami", json!({})).await;
    let error = r["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "MCP server 'sc' did not start for workspace {}: ",
            a.display()
        )),
        "{error}"
    );
    assert_eq!(instances(&status(&d).await).len(), 1);
}

/// server-filesystem started with a directory replaces its allowed directories with the
/// roots it is told: told the host workspace, it refused the very directory it was given
/// ("Access denied - path outside allowed directories").
#[tokio::test]
async fn server_filesystem_is_told_the_directory_it_was_given() {
    let index = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        index.exists(),
        "run `npm ci --prefix tests` to install server-filesystem"
    );
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    std::fs::write(data_dir.join("note.txt"), "hello from the data dir").unwrap();
    let d = Daemon::start_in(
        |_| json!({"mcp_servers": {"fs": {"command": "node", "args": [index, data_dir]}}}),
    )
    .await;
    eventually(30, "server-filesystem to take its roots", || async {
        d.log()
            .contains("stderr: Updated allowed directories from MCP roots")
    })
    .await;
    let r = d
        .invoke(
            "mcp_fs_read_text_file",
            json!({"path": data_dir.join("note.txt")}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["output"], "hello from the data dir", "{r}");
}

#[tokio::test]
async fn only_the_daemons_own_instance_keeps_the_listing_for_the_next_run() {
    // Each instance lists its tools under a prefix naming its workspace.
    let env = json!({"FIXTURE_WHEREAMI": "1", "FIXTURE_TOOL_PREFIX": "t:${WORKSPACE}:"});
    let d = daemon(scoped("per_workspace", json!({"env": env}))).await;
    let home = d.workspace().canonicalize().unwrap();
    let kept = d.data_dir().join("mcp-tools/sc.json");
    let own = format!("t:{}:whereami", home.display());
    assert!(std::fs::read_to_string(&kept).unwrap().contains(&own));

    let a = d.subdir("a");
    let sa = d.session(json!({"workspace": &a})).await;
    let listed = d.call("list_tools", json!({})).await;
    let tool = tool_names(&listed["result"])
        .into_iter()
        .find(|n| n.ends_with("whereami"))
        .unwrap()
        .to_owned();
    // The call starts the instance in `a` (which lists its own names, so the daemon's own
    // name of the tool is unknown to it): its listing is not the server's.
    call_in(&d, Some(&sa), &tool, json!({})).await;
    let s = status(&d).await;
    assert_eq!(instances(&s).len(), 2, "{s}");
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.contains(&own), "{text}");
    assert!(!text.contains(&format!("t:{}:", a.display())), "{text}");
}
