//! The fixture MCP server (tests/fixtures/mcp_server.rs) as the MCP tests configure and
//! watch it: one server block per name, whose pids and events land in files named after
//! it, and its line of `mcp.status`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{eventually, Daemon, FIXTURE};

/// A stdio block running the fixture, its pids appended to `dir/<name>.pids` and its
/// events to `dir/<name>.events`. `extra`'s keys are set on the block, but its `env` is
/// added to the block's own.
pub fn fixture(dir: &Path, name: &str, extra: Value) -> Value {
    let mut block = json!({
        "command": FIXTURE,
        "env": {
            "FIXTURE_PID_FILE": dir.join(format!("{name}.pids")),
            "FIXTURE_EVENTS_FILE": dir.join(format!("{name}.events")),
        },
    });
    for (k, v) in extra.as_object().unwrap() {
        if k == "env" {
            for (ek, ev) in v.as_object().unwrap() {
                block["env"][ek] = ev.clone();
            }
        } else {
            block[k] = v.clone();
        }
    }
    block
}

/// Every pid the fixture server `name` has run as, oldest first.
pub fn pids(d: &Daemon, name: &str) -> Vec<i32> {
    std::fs::read_to_string(d.dir.path().join(format!("{name}.pids")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `server`'s line of `mcp.status`.
pub async fn status(d: &Daemon, server: &str) -> Value {
    d.call("mcp.status", json!({"server": server})).await["result"]["servers"][0].clone()
}

/// Polls `mcp.status` (for 30 s at the most) until `server`'s line satisfies `pred`, and
/// returns it.
pub async fn wait_status(d: &Daemon, server: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status(d, server).await;
        if pred(&st) {
            return st;
        }
        assert!(Instant::now() < deadline, "{server} never got there: {st}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// [`wait_status`] until `server` is in `state`.
pub async fn wait_state(d: &Daemon, server: &str, state: &str) -> Value {
    wait_status(d, server, |st| st["state"] == state).await
}

/// [`wait_state`] `ready`, then until `tool` (a public name) is listed. A server turns ready
/// just before it publishes its tools, and the registry sends `tools_changed` before any
/// listing shows them; so from here on the notification of their arrival has gone out, and
/// a subscription made now neither waits for it nor mistakes it for a later change.
pub async fn wait_serving(d: &Daemon, server: &str, tool: &str) -> Value {
    let st = wait_state(d, server, "ready").await;
    super::eventually(30, &format!("{tool} listed"), || async {
        let list = d
            .call("list_tools", json!({"include_deferred": true}))
            .await;
        super::tool_names(&list["result"]).contains(&tool)
    })
    .await;
    st
}

/// Our fixture over streamable HTTP with `env` (and `FIXTURE_INPUTS=1`): the process and
/// its URL.
pub async fn http_fixture(env: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let mut fx = tokio::process::Command::new(FIXTURE)
        .args(["--http", "127.0.0.1:0"])
        .env("FIXTURE_INPUTS", "1")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(fx.stdout.take().unwrap()));
    let first = lines.next_line().await.unwrap().unwrap();
    (fx, first.trim_start_matches("listening on ").to_owned())
}

/// server-everything serving the legacy transport at `http://127.0.0.1:<port>/sse`; it is
/// killed when the handle drops.
pub async fn legacy_sse_server() -> (tokio::process::Child, String) {
    let index = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        index.exists(),
        "run `npm ci --prefix tests` to install server-everything"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("node")
        .arg(index)
        .arg("sse")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually(20, "the SSE server to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    (child, format!("http://127.0.0.1:{port}/sse"))
}
