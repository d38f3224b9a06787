//! Whole daemons driven in-process through `daemon::serve_until`: the shape that lets a
//! test (or an embedding program) own a daemon's lifetime without signals, and run several
//! in one process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolhost::client::Client;
use toolhost::daemon::{serve_until, ServeOptions};
use toolhost::protocol::{method, InvokeParams, ListToolsParams};

const FIXTURE: &str = env!("CARGO_BIN_EXE_toolhost-fixture-mcp");

/// One daemon running in this process, in its own directory.
struct Daemon {
    dir: PathBuf,
    socket: PathBuf,
    client: Client,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Daemon {
    /// Starts a daemon on `dir` (workspace `dir/ws`, data dir `dir/data`) with `config`.
    async fn start(dir: &Path, config: Value) -> Daemon {
        let ws = dir.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let socket = dir.join("s.sock");
        let opts = ServeOptions {
            config: Some(dir.join("config.json")),
            socket: Some(socket.clone()),
            workspace: Some(ws),
            data_dir: Some(dir.join("data")),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_until(opts, async move {
            let _ = stopped.await;
        }));
        let mut tries = 0;
        let client = loop {
            match Client::connect(&socket).await {
                Ok(c) => break c,
                Err(_) if task.is_finished() => panic!("the daemon stopped: {:?}", task.await),
                Err(e) if tries > 500 => panic!("no daemon on {}: {e}", socket.display()),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
            tries += 1;
        };
        Daemon {
            dir: dir.to_path_buf(),
            socket,
            client,
            stop,
            task,
        }
    }

    /// Tells the daemon to stop and waits until it has.
    async fn shut_down(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!self.socket.exists(), "the socket is removed on shutdown");
    }

    /// Runs `command` through the `bash` tool and returns its stdout.
    async fn bash(&self, command: &str) -> String {
        let args = json!({"command": command});
        let r: Value = self
            .client
            .call(
                method::INVOKE,
                &InvokeParams::new("bash", args.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_eq!(r["result"]["ok"], true, "{r}");
        r["result"]["stdout"].as_str().unwrap().to_owned()
    }

    /// The token file of MCP server `name` in this daemon's OAuth directory.
    fn token_file(&self, name: &str) -> PathBuf {
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir.join("data/oauth").join(format!("{hex}.json"))
    }
}

#[tokio::test]
async fn a_daemon_runs_in_process_and_stops_when_told() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("ws/hello.txt"), "hello\n").unwrap();
    let daemon = Daemon::start(dir.path(), json!({})).await;
    let tools = daemon
        .client
        .list_tools(&ListToolsParams::default())
        .await
        .unwrap();
    assert!(tools.tools.iter().any(|t| t.name() == "read_file"));
    let args = json!({"path": "hello.txt"});
    let r = daemon
        .client
        .invoke(&InvokeParams::new(
            "read_file",
            args.as_object().unwrap().clone(),
        ))
        .await
        .unwrap();
    assert!(r.result.ok, "{r:?}");
    daemon.shut_down().await;
}

/// Whether `pid` is a running process (not gone, not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rsplit_once(") ").map(|(_, rest)| rest.as_bytes()[0]);
        state.is_some_and(|c| c != b'Z' && c != b'X')
    })
}

/// Waits until `file` holds a pid (the fixture server writes its own on start).
async fn pid_in(file: &Path) -> i32 {
    for _ in 0..1000 {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no pid in {}", file.display());
}

/// Waits until `pid` has stopped running.
async fn gone(pid: i32) -> bool {
    for _ in 0..500 {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_in_one_process_keep_their_own_children_environment_and_tokens() {
    // The passthrough pattern needs a variable this process has: cargo sets this one for
    // every test it runs.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo");
    let root = tempfile::tempdir().unwrap();
    let config = |who: &str, passthrough: Value| {
        json!({
            "env": {
                "WHO": who,
                "FIXTURE_PID_FILE": root.path().join(format!("{who}/fixture.pids")),
            },
            "env_passthrough": passthrough,
            "mcp_servers": {
                "fx": {"command": FIXTURE},
                "web": {"url": "http://127.0.0.1:9/mcp", "enabled": false},
            },
        })
    };
    let (dir_a, dir_b) = (root.path().join("a"), root.path().join("b"));
    let (a, b) = tokio::join!(
        Daemon::start(&dir_a, config("a", json!(["CARGO_MANIFEST_*"]))),
        Daemon::start(&dir_b, config("b", json!([]))),
    );

    // Each daemon's children start with that daemon's `env` and `env_passthrough`.
    let probe = "echo \"$WHO ${CARGO_MANIFEST_DIR:-none}\"";
    assert_eq!(a.bash(probe).await, format!("a {manifest_dir}\n"));
    assert_eq!(b.bash(probe).await, "b none\n");
    // Each one's stdio server too: it writes its pid where its own daemon's `env` says.
    let fixture_a = pid_in(&dir_a.join("fixture.pids")).await;
    let fixture_b = pid_in(&dir_b.join("fixture.pids")).await;
    assert_ne!(fixture_a, fixture_b);

    // Each daemon keeps its OAuth tokens in its own data dir: signing out of `web` on one
    // removes its file and leaves the other's.
    for d in [&a, &b] {
        let file = d.token_file("web");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "{}").unwrap();
    }
    let logout = json!({"name": "web"});
    let had: Value = a.client.call(method::MCP_LOGOUT, &logout).await.unwrap();
    assert_eq!(had["ok"], true, "{had}");
    assert!(!a.token_file("web").exists());
    assert!(b.token_file("web").exists(), "b's tokens went with a's");
    let had: Value = b.client.call(method::MCP_LOGOUT, &logout).await.unwrap();
    assert_eq!(had["ok"], true, "b signed out of a's directory: {had}");
    assert!(!b.token_file("web").exists());

    // Shutting one down kills its children only.
    assert!(running(fixture_a) && running(fixture_b));
    a.shut_down().await;
    assert!(gone(fixture_a).await, "a's server {fixture_a} outlived a");
    assert!(
        running(fixture_b),
        "a's shutdown killed b's server {fixture_b}"
    );
    assert_eq!(b.bash("echo still here").await, "still here\n");
    b.shut_down().await;
    assert!(gone(fixture_b).await, "b's server {fixture_b} outlived b");
}
