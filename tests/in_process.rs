//! A whole daemon driven in-process through `daemon::serve_until`: the shape that lets a
//! test (or an embedding program) own the daemon's lifetime without signals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use toolhost::client::Client;
use toolhost::daemon::{serve_until, ServeOptions};
use toolhost::protocol::{InvokeParams, ListToolsParams};

#[tokio::test]
async fn a_daemon_runs_in_process_and_stops_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("hello.txt"), "hello\n").unwrap();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    let socket = dir.path().join("s.sock");
    let opts = ServeOptions {
        config: Some(dir.path().join("config.json")),
        socket: Some(socket.clone()),
        workspace: Some(ws),
        data_dir: Some(dir.path().join("data")),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(serve_until(opts, async move {
        let _ = stopped.await;
    }));
    let mut tries = 0;
    let client = loop {
        match Client::connect(&socket).await {
            Ok(c) => break c,
            Err(_) if daemon.is_finished() => panic!("the daemon stopped: {:?}", daemon.await),
            Err(e) if tries > 500 => panic!("no daemon on {}: {e}", socket.display()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
        tries += 1;
    };
    let tools = client
        .list_tools(&ListToolsParams::default())
        .await
        .unwrap();
    assert!(tools.tools.iter().any(|t| t.name() == "read_file"));
    let args = json!({"path": "hello.txt"});
    let r = client
        .invoke(&InvokeParams::new(
            "read_file",
            args.as_object().unwrap().clone(),
        ))
        .await
        .unwrap();
    assert!(r.result.ok, "{r:?}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), daemon)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!socket.exists(), "the socket is removed on shutdown");
}
