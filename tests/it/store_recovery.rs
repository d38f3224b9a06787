//! A damaged session store: startup refuses with a clear message (never a panic),
//! `toolhost session recover` salvages it, acknowledged writes survive kill -9, and the sled
//! layout the store relies on is what we expect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// A newline JSON-RPC connection that reports a broken connection instead of panicking
/// (the kill -9 test breaks it on purpose).
struct Conn {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
}

impl Conn {
    async fn open(sock: &Path) -> Conn {
        let (r, w) = UnixStream::connect(sock).await.unwrap().into_split();
        Conn {
            lines: BufReader::new(r).lines(),
            writer: w,
            next_id: 1,
        }
    }

    /// The response object, or `None` once the connection is gone.
    async fn call(&mut self, method: &str, params: Value) -> Option<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.ok()?;
        loop {
            let l = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .expect("a response within 30 s")
                .ok()??;
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["id"] == json!(id) {
                return Some(v);
            }
        }
    }
}

/// Creates `n` sessions `s00000…` with meta `{"n": i, "pad": "x" * pad}` over 4 connections.
async fn fill(d: &Daemon, n: usize, pad: usize) {
    let mut tasks = Vec::new();
    for c in 0..4 {
        let sock = d.socket();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&sock).await;
            for i in (c..n).step_by(4) {
                let r = conn
                    .call(
                        "session.create",
                        json!({"id": format!("s{i:05}"), "meta": {"n": i, "pad": "x".repeat(pad)}}),
                    )
                    .await
                    .unwrap();
                assert!(r.get("result").is_some(), "{r}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Every session, paging through `session.list`.
async fn all_sessions(d: &Daemon) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = Value::Null;
    loop {
        let r = d
            .call("session.list", json!({"limit": 500, "after": after}))
            .await;
        let page = &r["result"];
        out.extend(page["sessions"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(n) => after = json!(n),
            None => return out,
        }
    }
}

/// Runs `toolhost ARGS…`; (exit code, stdout, stderr).
async fn run_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        toolhost(home.path())
            .args(args)
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .expect("toolhost exits")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts the daemon expecting it to exit on its own; (exit code, stderr).
async fn start_expecting_exit(d: &Daemon) -> (Option<i32>, String) {
    try_start(d, 60)
        .await
        .expect("the daemon exits on a damaged store")
}

/// Starts the daemon; (exit code, stderr) if it exits within `secs`, `None` if it was
/// serving instead (it is killed).
async fn try_start(d: &Daemon, secs: u64) -> Option<(Option<i32>, String)> {
    use tokio::io::AsyncReadExt;
    let mut child = d.command().spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let read = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some((status.code(), read.await.unwrap()));
        }
        // Serving: it did not refuse.
        if serving(&d.socket()).await {
            child.kill().await.unwrap();
            return None;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon neither exited nor served within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Whether a daemon answers `GET /health` on `sock` (the socket is bound before the store
/// is opened, so a connect alone proves nothing).
async fn serving(sock: &Path) -> bool {
    let Ok(s) = UnixStream::connect(sock).await else {
        return false;
    };
    common::http::try_status(s, "/health").await == Some(200)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Removes the store and everything `recover` left next to it.
fn clear_stores(data: &Path) {
    for e in std::fs::read_dir(data).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().contains("sessions") {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
}

const SESSIONS: usize = 2000;
const PAD: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_store_refuses_to_start_and_recover_keeps_readable_sessions() {
    let mut d = Daemon::start().await;
    fill(&d, SESSIONS, PAD).await;
    assert_eq!(d.stop().await.code(), Some(0));
    let data = d.data_dir();
    let store = data.join("sessions");
    let pristine = d.dir.path().join("pristine");
    copy_dir(&store, &pristine);
    let db_len = std::fs::metadata(store.join("db")).unwrap().len();

    let mut figures = Vec::new();
    let refuses = |code: Option<i32>, err: &str, what: &str| {
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(
            err.contains(&format!("session store {} is damaged", store.display())),
            "{what}: {err}"
        );
        assert!(
            err.contains(&format!(
                "run: toolhost session recover --data-dir {}",
                data.display()
            )),
            "{what}: {err}"
        );
    };
    for pct in [30u64, 60, 90] {
        let truncate = || {
            clear_stores(&data);
            copy_dir(&pristine, &store);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(store.join("db"))
                .unwrap();
            f.set_len(db_len * pct / 100).unwrap();
        };
        // As after a crash (no clean-shutdown record): sled replays the cut log. It mostly
        // panics (caught) or reports corruption: a clear refusal. It may also replay a
        // prefix without complaint; then the daemon starts with fewer sessions (only a
        // clean-shutdown record can tell) and is killed here.
        truncate();
        std::fs::remove_file(store.join("toolhost-clean-shutdown.json")).unwrap();
        let crash_case = match try_start(&d, 60).await {
            Some((code, err)) => {
                refuses(code, &err, &format!("{pct}% without record"));
                if err.contains("sled failed while replaying its log") {
                    "sled panic caught"
                } else {
                    "sled reported corruption"
                }
            }
            None => "sled replayed a prefix silently",
        };
        // After a clean shutdown: refused before sled touches the log.
        truncate();
        let (code, err) = start_expecting_exit(&d).await;
        refuses(code, &err, &format!("{pct}%"));
        assert!(
            err.contains("its log changed since the last clean shutdown"),
            "{err}"
        );

        let (code, out, err) =
            run_cli(&["session", "recover", "--data-dir", data.to_str().unwrap()]).await;
        assert_eq!(code, Some(0), "{pct}%: {out}{err}");
        let kept: usize = out
            .split("kept ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in {out}"));
        assert!(
            out.contains(&format!(
                "lost: {} of the {SESSIONS} sessions the last clean shutdown recorded",
                SESSIONS - kept
            )),
            "{out}"
        );
        let moved = std::fs::read_dir(&data)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("sessions.corrupt-")
            })
            .count();
        assert_eq!(moved, 1, "{pct}%: the damaged store is kept aside");

        d.spawn(&[]).await;
        let got = all_sessions(&d).await;
        assert_eq!(got.len(), kept, "{pct}%");
        for s in &got {
            let id = s["id"].as_str().unwrap();
            let i: usize = id[1..].parse().unwrap();
            assert_eq!(
                common::own_meta(s),
                json!({"n": i, "pad": "x".repeat(PAD)}),
                "{pct}%: {id}"
            );
            assert_eq!(d.call("session.get", json!({"id": id})).await["result"], *s);
        }
        assert_eq!(d.stop().await.code(), Some(0));
        eprintln!("{pct}%: {out}");
        figures.push(format!(
            "{pct}%: {kept}/{SESSIONS} (without a record: {crash_case})"
        ));
    }
    eprintln!(
        "sessions salvaged per truncation point: {}",
        figures.join(", ")
    );
}

/// The sled files the store opens by name (`db` for the fsync, `blobs/`), the lock
/// `recover` shares with sled (flock on `db`), and the raw JSON values `recover` looks for
/// in the log: if a sled upgrade changes any of these, this fails.
#[tokio::test]
async fn sled_layout_the_store_relies_on() {
    let lock =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
    assert!(
        lock.contains("name = \"sled\"\nversion = \"0.34.7\"\n"),
        "sled is not 0.34.7 in Cargo.lock"
    );

    let mut d = Daemon::start().await;
    let store = d.data_dir().join("sessions");
    let created = d
        .call(
            "session.create",
            json!({"id": "layout", "meta": {"marker": "m-7f3a"}}),
        )
        .await["result"]
        .clone();
    assert!(store.join("conf").is_file());
    assert!(store.join("blobs").is_dir());
    let db = std::fs::read(store.join("db")).unwrap();
    let json = serde_json::to_vec(&created).unwrap();
    assert!(
        db.windows(json.len()).any(|w| w == json),
        "the acknowledged session is not stored as raw JSON in db"
    );

    let (code, _, err) = run_cli(&[
        "session",
        "recover",
        "--data-dir",
        d.data_dir().to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is in use") && err.contains("stop the toolhost daemon"),
        "{err}"
    );

    assert_eq!(d.stop().await.code(), Some(0));
    let seal = store.join("toolhost-clean-shutdown.json");
    let rec: Value = serde_json::from_slice(&std::fs::read(&seal).unwrap()).unwrap();
    assert_eq!(
        (&rec["count"], &rec["ids"]),
        (&json!(1), &json!(["layout"]))
    );
    d.spawn(&[]).await;
    assert!(!seal.exists(), "the record is consumed on open");
    assert_eq!(
        d.call("session.get", json!({"id": "layout"})).await["result"],
        created
    );
}

/// Writes from a few clients, kill -9 mid-stream, restart: every acknowledged write is
/// there. `TOOLHOST_STRESS=N` runs N rounds (default 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_rounds() {
    let rounds: usize = std::env::var("TOOLHOST_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    let mut d = Daemon::start().await;
    // id -> the meta its last acknowledged write set, and the one an unacknowledged
    // update in flight at the kill may have set (either may be on disk).
    let mut expected: HashMap<String, (Value, Option<Value>)> = HashMap::new();
    let note = |expected: &mut HashMap<String, (Value, Option<Value>)>, (id, meta, acked)| {
        if acked {
            expected.insert(id, (meta, None));
        } else if let Some(e) = expected.get_mut(&id) {
            e.1 = Some(meta);
        }
    };
    for round in 0..rounds {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Value, bool)>();
        let mut writers = Vec::new();
        for c in 0..3 {
            let sock: PathBuf = d.socket();
            let tx = tx.clone();
            writers.push(tokio::spawn(async move {
                let mut conn = Conn::open(&sock).await;
                for i in 0.. {
                    let id = format!("r{round}-c{c}-{i}");
                    let meta = json!({"v": i});
                    let Some(r) = conn
                        .call("session.create", json!({"id": id, "meta": meta}))
                        .await
                    else {
                        return;
                    };
                    assert!(r.get("result").is_some(), "{r}");
                    let _ = tx.send((id, meta, true));
                    if i % 3 == 2 {
                        // Update an earlier session of this writer.
                        let id = format!("r{round}-c{c}-{}", i - 2);
                        let meta = json!({"v": i - 2, "u": i});
                        let _ = tx.send((id.clone(), meta.clone(), false));
                        let Some(r) = conn
                            .call("session.update", json!({"id": id, "meta": {"u": i}}))
                            .await
                        else {
                            return;
                        };
                        assert_eq!(common::own_meta(&r["result"]), meta, "{r}");
                        let _ = tx.send((id, meta, true));
                    }
                }
            }));
        }
        drop(tx);
        // Kill once a fair number of writes are acknowledged and more are in flight.
        let mut acked = 0;
        while acked < 60 {
            let m = rx.recv().await.expect("writers running");
            acked += usize::from(m.2);
            note(&mut expected, m);
        }
        d.kill9().await;
        for w in writers {
            w.await.unwrap();
        }
        while let Some(m) = rx.recv().await {
            note(&mut expected, m);
        }
        d.spawn(&[]).await;
        for (id, (meta, maybe)) in &expected {
            let r = d.call("session.get", json!({"id": id})).await;
            let got = &common::own_meta(&r["result"]);
            assert!(
                got == meta || Some(got) == maybe.as_ref(),
                "round {round}: {id}: {r}, expected {meta}"
            );
        }
    }
    eprintln!(
        "{rounds} kill -9 rounds: {} acknowledged sessions all present",
        expected.len()
    );
}

/// Random bytes appended to the log after a clean shutdown: the daemon refuses to start
/// on it (rather than let sled decide what to replay), and `recover` keeps every session.
#[tokio::test]
async fn tail_garbage_after_clean_shutdown_is_refused_and_recovered() {
    let mut d = Daemon::start().await;
    fill(&d, 40, 10).await;
    let before = all_sessions(&d).await;
    assert_eq!(d.stop().await.code(), Some(0));
    let db = d.data_dir().join("sessions").join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes.extend((0..4096).map(|_| fastrand::u8(..)));
    std::fs::write(&db, &bytes).unwrap();

    let (code, err) = start_expecting_exit(&d).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("its log changed since the last clean shutdown") && !err.contains("panicked"),
        "{err}"
    );
    let (code, out, err) = run_cli(&[
        "session",
        "recover",
        "--data-dir",
        d.data_dir().to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("kept 40 sessions"), "{out}");
    assert!(
        out.contains("lost: 0 of the 40 sessions the last clean shutdown recorded"),
        "{out}"
    );
    d.spawn(&[]).await;
    assert_eq!(all_sessions(&d).await, before);
}
