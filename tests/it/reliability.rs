//! Load with faults: many clients call built-in and MCP tools while the config is reloaded
//! and the MCP server crashes. Every call must get exactly one answer, and the right one:
//! a fault may turn a call into an `ok:false` (`unavailable`), never into a lost or wrong
//! reply. The fast form runs in CI; `TOOLHOST_STRESS=N` multiplies the calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Map, Value};
use toolhost::client::{Client, ClientError};
use toolhost::protocol::{ErrorKind, InvokeParams};

const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");

fn stress() -> usize {
    std::env::var("TOOLHOST_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn config(extra_server: bool) -> Value {
    let mut servers = json!({"fx": {"command": FIXTURE}});
    if extra_server {
        servers["fy"] = json!({"command": FIXTURE});
    }
    json!({"mcp_servers": servers})
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    /// Of `ok`, the calls of `bash`, which no fault of the MCP server can touch.
    bash_ok: AtomicUsize,
    refused: AtomicUsize,
    lost: AtomicUsize,
    wrong: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_with_reloads_and_server_crashes_loses_no_reply() {
    let d = Daemon::start_with(Some(config(false))).await;
    eventually(20, "fx ready", || async {
        d.call("mcp.status", json!({})).await["result"]["servers"][0]["state"] == "ready"
    })
    .await;
    let clients = 16;
    let calls_each = 40 * stress();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    // Faults: reload (adding and removing a server) and crash the server, in turn.
    let faults = {
        let (socket, path, stop) = (d.socket(), d.config_path(), stop.clone());
        tokio::spawn(async move {
            let c = Client::connect(&socket).await.unwrap();
            let (mut reloads, mut crashes) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                write_atomic(&path, &config(reloads % 2 == 0));
                reloads += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
                let _ = c
                    .invoke(&InvokeParams::new("mcp_fx_crash", Map::new()))
                    .await;
                crashes += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            (reloads, crashes)
        })
    };

    let mut workers = Vec::new();
    for n in 0..clients {
        let (socket, tally) = (d.socket(), tally.clone());
        workers.push(tokio::spawn(async move {
            // One connection per client, with several calls in flight on it at once.
            let c = Arc::new(
                Client::connect(&socket)
                    .await
                    .unwrap()
                    .with_timeout(Duration::from_secs(60)),
            );
            let mut batch = Vec::new();
            for i in 0..calls_each {
                let token = format!("c{n}-{i}-{}", fastrand::u64(..));
                let (name, a) = if i % 2 == 0 {
                    ("bash", json!({"command": format!("printf %s {token}")}))
                } else {
                    ("mcp_fx_echo", json!({"text": token}))
                };
                let (c, tally) = (c.clone(), tally.clone());
                batch.push(tokio::spawn(async move {
                    match c.invoke(&InvokeParams::new(name, args(a))).await {
                        Ok(r) if r.result.ok => {
                            let out = r
                                .result
                                .output
                                .fields
                                .get("stdout")
                                .or_else(|| r.result.output.fields.get("output"));
                            if out.and_then(Value::as_str) == Some(token.as_str()) {
                                tally.ok.fetch_add(1, Ordering::Relaxed);
                                if name == "bash" {
                                    tally.bash_ok.fetch_add(1, Ordering::Relaxed);
                                }
                            } else {
                                eprintln!("wrong reply for {token}: {r:?}");
                                tally.wrong.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // A crashed or reloading server refuses a call; that is an answer.
                        Ok(r)
                            if r.result.error_kind == Some(ErrorKind::Unavailable)
                                || r.result.error_kind == Some(ErrorKind::UnknownTool) =>
                        {
                            tally.refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => {
                            eprintln!("unexpected failure for {token}: {r:?}");
                            tally.wrong.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(
                            e @ (ClientError::Timeout { .. }
                            | ClientError::Io(_)
                            | ClientError::NotSent(_)
                            | ClientError::NoDaemon { .. }
                            | ClientError::Decode(_)
                            | ClientError::Rpc { .. }),
                        ) => {
                            eprintln!("lost reply for {token}: {e}");
                            tally.lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
                if batch.len() == 4 {
                    for t in batch.drain(..) {
                        t.await.unwrap();
                    }
                }
            }
            for t in batch {
                t.await.unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (reloads, crashes) = faults.await.unwrap();
    let total = clients * calls_each;
    let (ok, refused, lost, wrong) = (
        tally.ok.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        tally.lost.load(Ordering::Relaxed),
        tally.wrong.load(Ordering::Relaxed),
    );
    println!(
        "load with faults: {total} calls from {clients} clients in {:.1} s, {reloads} reloads, {crashes} server crashes: {ok} ok, {refused} refused (unavailable), {lost} lost, {wrong} wrong",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(ok + refused + lost + wrong, total);
    assert_eq!(
        (lost, wrong),
        (0, 0),
        "every call gets exactly its own answer"
    );
    // The faults hit the MCP server only: every bash call (half of them) succeeds.
    assert_eq!(tally.bash_ok.load(Ordering::Relaxed), total / 2);
    // The daemon ran exactly the calls the clients saw answered: none twice, none unseen.
    let (_, metrics) = d.http("GET", "/metrics", "").await;
    let counted = |labels: &str| -> usize {
        let series = format!("toolhost_calls_total{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0, |v| v.parse().unwrap())
    };
    assert_eq!(
        counted(r#"tool="bash",source="builtin",server="",outcome="ok""#),
        total / 2,
        "{metrics}"
    );
    assert_eq!(
        counted(r#"tool="mcp_fx_echo",source="mcp",server="fx",outcome="ok""#),
        ok - total / 2,
        "{metrics}"
    );
    assert!(reloads > 0 && crashes > 0);
    // The daemon is still healthy enough to answer.
    let h = d.call("host.health", json!({})).await;
    assert!(h.get("result").is_some(), "{h}");
}
