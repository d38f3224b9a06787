//! The checkpoint change watcher (proto-docs/checkpoints.md, "The change watcher"): scans
//! fed by inotify stay exact — a change made just before a call ends, a change between
//! calls, renames, deleted directories, and a full walk after the kernel dropped events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Daemon;
use serde_json::{json, Value};

async fn start() -> Daemon {
    Daemon::start_with(Some(json!({"checkpoint": {"enabled": true}}))).await
}

async fn bash(d: &Daemon, call_id: &str, command: &str) {
    let r = d
        .call(
            "invoke",
            json!({"name": "bash", "arguments": {"command": command}, "call_id": call_id}),
        )
        .await;
    assert_eq!(r["result"]["result"]["ok"], true, "{command}: {r}");
}

async fn timeline(d: &Daemon) -> Value {
    d.call("checkpoint.list", json!({"limit": 500})).await["result"].clone()
}

/// The files of the entry of `call_id` (empty when it has none), as "change path".
async fn files_of(d: &Daemon, call_id: &str) -> Vec<String> {
    let t = timeline(d).await;
    let Some(e) = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["call_id"] == call_id)
    else {
        return Vec::new();
    };
    changes(e)
}

fn changes(entry: &Value) -> Vec<String> {
    let mut v: Vec<String> = entry["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                f["change"].as_str().unwrap(),
                f["path"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

/// A daemon whose workspace holds a small tree and has taken its first scan (so the
/// watcher is armed); `checkpoint.list` says the workspace is watched.
async fn armed() -> Daemon {
    let d = start().await;
    let ws = d.workspace();
    for dir in ["src/a", "src/b", "target/debug"] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
    }
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(ws.join("src/a/one.rs"), "one\n").unwrap();
    std::fs::write(ws.join("src/b/two.rs"), "two\n").unwrap();
    std::fs::write(ws.join("target/debug/x.o"), "obj\n").unwrap();
    bash(&d, "arm", "true").await;
    let t = timeline(&d).await;
    assert_eq!(
        t["watched"], true,
        "the workspace is watched after its first scan: {t}"
    );
    d
}

#[tokio::test]
async fn a_change_made_as_the_call_ends_is_in_its_entry() {
    let d = armed().await;
    // Each call's last act is its change: the scan at its end must see it, every time.
    for i in 0..15 {
        let id = format!("end-{i}");
        bash(
            &d,
            &id,
            &format!("echo {i} >> src/a/one.rs; mkdir -p src/new{i}/deep; echo {i} > src/new{i}/deep/f.rs"),
        )
        .await;
        assert_eq!(
            files_of(&d, &id).await,
            [
                "added src/new{i}/deep/f.rs".replace("{i}", &i.to_string()),
                "modified src/a/one.rs".to_owned()
            ],
            "call {i}"
        );
    }
    // The new directory is watched: a later change in it is seen.
    bash(&d, "later", "echo more >> src/new3/deep/f.rs").await;
    assert_eq!(files_of(&d, "later").await, ["modified src/new3/deep/f.rs"]);
    // What .gitignore leaves out is never recorded.
    bash(&d, "ignored", "echo x > target/debug/y.o").await;
    assert_eq!(files_of(&d, "ignored").await, Vec::<String>::new());
    assert_eq!(timeline(&d).await["watched"], true);
}

#[tokio::test]
async fn a_change_between_calls_is_an_outside_entry() {
    let d = armed().await;
    let ws = d.workspace();
    std::fs::write(ws.join("src/b/two.rs"), "edited in an editor\n").unwrap();
    std::fs::create_dir_all(ws.join("docs/new")).unwrap();
    std::fs::write(ws.join("docs/new/readme.md"), "hi\n").unwrap();
    bash(&d, "next", "echo call > src/a/one.rs").await;
    let t = timeline(&d).await;
    let entries = t["entries"].as_array().unwrap();
    assert_eq!(entries[0]["call_id"], "next", "{t}");
    assert_eq!(changes(&entries[0]), ["modified src/a/one.rs"], "{t}");
    assert_eq!(entries[1]["kind"], "outside", "{t}");
    assert_eq!(
        changes(&entries[1]),
        ["added docs/new/readme.md", "modified src/b/two.rs"],
        "{t}"
    );
    // The directory made outside is watched from then on.
    std::fs::write(ws.join("docs/new/readme.md"), "edited\n").unwrap();
    bash(&d, "after", "true").await;
    let t = timeline(&d).await;
    assert_eq!(t["entries"][0]["kind"], "outside", "{t}");
    assert_eq!(changes(&t["entries"][0]), ["modified docs/new/readme.md"]);
}

#[tokio::test]
async fn a_renamed_directory_and_file_are_followed() {
    let d = armed().await;
    bash(
        &d,
        "mv",
        "mv src/a src/renamed && mv src/b/two.rs src/b/deux.rs",
    )
    .await;
    assert_eq!(
        files_of(&d, "mv").await,
        [
            "added src/b/deux.rs",
            "added src/renamed/one.rs",
            "deleted src/a/one.rs",
            "deleted src/b/two.rs"
        ]
    );
    // The renamed directory is watched under its new name...
    bash(&d, "in-renamed", "echo changed > src/renamed/one.rs").await;
    assert_eq!(
        files_of(&d, "in-renamed").await,
        ["modified src/renamed/one.rs"]
    );
    // ...and moving it back, then changing it, is seen too.
    bash(
        &d,
        "back",
        "mv src/renamed src/a && echo again >> src/a/one.rs",
    )
    .await;
    assert_eq!(
        files_of(&d, "back").await,
        ["added src/a/one.rs", "deleted src/renamed/one.rs"]
    );
    bash(&d, "in-back", "echo third >> src/a/one.rs").await;
    assert_eq!(files_of(&d, "in-back").await, ["modified src/a/one.rs"]);
}

#[tokio::test]
async fn a_deleted_directory_and_one_made_again_in_its_place() {
    let d = armed().await;
    bash(
        &d,
        "make",
        "mkdir -p src/gone/sub && echo 1 > src/gone/sub/f.rs && echo 2 > src/gone/g.rs",
    )
    .await;
    bash(&d, "rm", "rm -rf src/gone").await;
    assert_eq!(
        files_of(&d, "rm").await,
        ["deleted src/gone/g.rs", "deleted src/gone/sub/f.rs"]
    );
    // The same name, a new directory: its own watch, not the dead one's.
    bash(
        &d,
        "again",
        "mkdir -p src/gone/sub && echo new > src/gone/sub/f.rs",
    )
    .await;
    assert_eq!(files_of(&d, "again").await, ["added src/gone/sub/f.rs"]);
    bash(
        &d,
        "replace",
        "rm -rf src/gone && mkdir src/gone && echo x > src/gone/h.rs",
    )
    .await;
    assert_eq!(
        files_of(&d, "replace").await,
        ["added src/gone/h.rs", "deleted src/gone/sub/f.rs"]
    );
    bash(&d, "in-new", "echo y >> src/gone/h.rs").await;
    assert_eq!(files_of(&d, "in-new").await, ["modified src/gone/h.rs"]);
    // A .gitignore edited by a call changes what is recorded beneath it.
    bash(
        &d,
        "ignore",
        "echo x > src/gone/skip.log && printf 'target/\\n*.log\\n' > .gitignore",
    )
    .await;
    assert_eq!(files_of(&d, "ignore").await, ["modified .gitignore"]);
}

/// The kernel drops events past its queue (`IN_Q_OVERFLOW`) while the daemon is stopped:
/// the change made after the drop has no event, and only the full walk the overflow
/// forces finds it.
#[tokio::test]
async fn events_dropped_by_the_kernel_force_a_full_walk() {
    let d = armed().await;
    let ws = d.workspace();
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pid = d.pid();
    // SIGSTOP: the daemon's watcher thread reads nothing while the queue fills.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let noise = ws.join("src/noise");
    std::fs::create_dir(&noise).unwrap();
    // Each create + delete queues at least two events.
    for i in 0..max {
        let p = noise.join(i.to_string());
        std::fs::write(&p, "").unwrap();
        std::fs::remove_file(&p).unwrap();
    }
    std::fs::write(ws.join("src/b/two.rs"), "after the overflow\n").unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    bash(&d, "after", "true").await;
    let t = timeline(&d).await;
    let outside = &t["entries"][0];
    assert_eq!(outside["kind"], "outside", "{t}");
    assert_eq!(changes(outside), ["modified src/b/two.rs"], "{t}");
    // The full walk armed the watcher again.
    assert_eq!(t["watched"], true, "{t}");
    bash(&d, "watched-again", "echo z >> src/noise/n.rs").await;
    assert_eq!(
        files_of(&d, "watched-again").await,
        ["added src/noise/n.rs"]
    );
}

/// Everything under `dir` with its size and modification time (directories included).
fn listing(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), m.len(), m.modified().unwrap()));
        }
    }
    out.sort();
    out
}

/// A call that changes nothing writes nothing: no entry, and not a byte or a timestamp of
/// the store changes (no marker file either: the scan reads inotify's queue itself).
#[tokio::test]
async fn an_unchanged_call_writes_nothing_to_the_store() {
    let d = armed().await;
    bash(&d, "change", "echo 1 >> src/a/one.rs").await;
    let entries = timeline(&d).await["entries"].as_array().unwrap().len();
    let store = d.data_dir().join("checkpoints");
    let before = listing(&store);
    for i in 0..5 {
        bash(&d, &format!("same-{i}"), "true").await;
    }
    assert_eq!(listing(&store), before, "the store changed");
    let t = timeline(&d).await;
    assert_eq!(t["entries"].as_array().unwrap().len(), entries, "{t}");
    assert_eq!(t["watched"], true, "{t}");
}

/// Bytes the daemon has read so far (`rchar`: files and sockets, not its children's).
fn read_by(pid: i32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A file a call changed is read once, by that call's scan: the next call, which changes
/// nothing, does not read it again, however soon it comes (a later change to it would be
/// an event).
#[tokio::test]
async fn a_file_just_changed_is_not_read_again_by_the_next_call() {
    let d = armed().await;
    let big = 4 << 20;
    bash(
        &d,
        "write",
        &format!("head -c {big} /dev/zero | tr '\\0' x > src/a/big.txt"),
    )
    .await;
    assert_eq!(files_of(&d, "write").await, ["added src/a/big.txt"]);
    let read = read_by(d.pid());
    bash(&d, "next", "true").await;
    let again = read_by(d.pid()) - read;
    assert!(again < big / 4, "the next call read {again} bytes");
    // A change to it made right after is still seen.
    bash(&d, "edit", "echo y > src/a/big.txt").await;
    assert_eq!(files_of(&d, "edit").await, ["modified src/a/big.txt"]);
}

/// A change another process makes just before a call (its write returned before the call
/// was sent) is an `outside` entry every time, never the call's.
#[tokio::test]
async fn a_change_made_just_before_a_call_is_outside_every_time() {
    let d = armed().await;
    let ws = d.workspace();
    for i in 0..10 {
        std::fs::create_dir_all(ws.join(format!("docs/d{i}"))).unwrap();
        std::fs::write(ws.join(format!("docs/d{i}/x.md")), "x\n").unwrap();
        std::fs::write(ws.join("src/b/two.rs"), format!("editor {i}\n")).unwrap();
        let id = format!("call-{i}");
        bash(&d, &id, &format!("echo {i} >> src/a/one.rs")).await;
        let t = timeline(&d).await;
        let entries = t["entries"].as_array().unwrap();
        assert_eq!(entries[0]["call_id"], id.as_str(), "{t}");
        assert_eq!(changes(&entries[0]), ["modified src/a/one.rs"], "{t}");
        assert_eq!(entries[1]["kind"], "outside", "{t}");
        assert_eq!(
            changes(&entries[1]),
            [
                format!("added docs/d{i}/x.md"),
                "modified src/b/two.rs".to_owned()
            ],
            "{t}"
        );
    }
}
