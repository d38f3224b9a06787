//! The call audit log: one JSON line per finished call in `<data_dir>/audit.jsonl`, so an
//! operator can tell which frontend ran which command.
//!
//! Records are queued to a writer thread (the call path never touches the file), which
//! writes them in batches: after the first record of a burst it waits [`BATCH`] and then
//! writes everything queued with one `write`. A busy daemon thus wakes the writer a few
//! dozen times a second instead of once per call (a wake-up per call cost a tenth of the
//! daemon's CPU on a relayed MCP call). The file is rotated by size (`audit.jsonl.1` … `.N`). Arguments are never written: only
//! their SHA-256 and size, since they may hold secrets. The caller's identity comes from
//! the connection (`SO_PEERCRED`) through [`CALLER`], set by the RPC layer around a call.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use crate::protocol::AuditRecord;

/// The file name of the live log in the data directory.
pub const FILE_NAME: &str = "audit.jsonl";
/// The live file is rotated once it passes this size.
const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Rotated files kept (`audit.jsonl.1` is the newest).
const KEEP: usize = 3;
/// Records waiting for the writer at most; more are dropped (and counted). With
/// [`BATCH`] this allows 20,000 calls per batch, ~800,000 calls/s.
const QUEUE: usize = 20_000;
/// How long the writer lets records gather after the first of a burst.
const BATCH: std::time::Duration = std::time::Duration::from_millis(25);

/// Who is on the other end of a connection, as the kernel says (`SO_PEERCRED`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The peer's user; `None` for a TCP client that is no process of this machine (known
    /// by its token only).
    pub uid: Option<u32>,
    pub pid: Option<i32>,
    /// The peer process's name (`/proc/<pid>/comm`), read once per connection.
    pub process: Option<String>,
    /// The `User-Agent` an HTTP or WebSocket client sent: its name when a session does not
    /// give one.
    pub agent: Option<String>,
    /// The name of the bearer token the request carried (TCP, `listen.tokens`; a fleet
    /// user's token is `user:<user>`): who the caller is over TCP, as the uid is on the
    /// Unix socket.
    pub token: Option<String>,
    /// The roles a fleet user's token carries (`fleet.approver_role`); none otherwise.
    pub roles: Vec<String>,
}

/// The token a request carried, as [`Caller`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presented {
    /// Its name: of `listen.tokens`, or `user:<user>` ([`user_token_name`]).
    pub name: Arc<str>,
    /// A fleet user's token's roles.
    pub roles: Vec<String>,
}

/// What a fleet user's caller name starts with.
const USER: &str = "user:";

/// The caller name of a fleet user's token (`listen.tokens` names the others).
pub fn user_token_name(user: &str) -> String {
    format!("{USER}{user}")
}

impl Caller {
    /// Whether this is the daemon's own in-process connection (the MCP facade's), whose
    /// word the host takes for what the facade learned of its own callers.
    pub fn is_daemon(&self) -> bool {
        self.pid.and_then(|p| u32::try_from(p).ok()) == Some(std::process::id())
    }

    /// The fleet user whose token the caller came in with.
    pub fn user(&self) -> Option<&str> {
        self.token.as_deref()?.strip_prefix(USER)
    }

    /// The peer of a Unix socket connection.
    pub fn of_unix(stream: &tokio::net::UnixStream) -> Option<Arc<Caller>> {
        let cred = stream.peer_cred().ok()?;
        Some(Caller::of_process(cred.uid(), cred.pid()))
    }

    /// The caller that is process `pid` (when known) of user `uid`, named by its `comm`.
    fn of_process(uid: u32, pid: Option<i32>) -> Arc<Caller> {
        let process = pid
            .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
            .map(|s| s.trim_end().to_owned());
        Arc::new(Caller {
            uid: Some(uid),
            pid,
            process,
            ..Caller::default()
        })
    }

    /// The peer of a TCP connection, when it is a process on this host: the kernel's
    /// socket tables give the peer's socket inode and uid, and the process holding that
    /// socket is the pid (`None` when it cannot be found: then it is vouched for by no
    /// one, and `rpc/peer.rs` gives it the least rights). A peer on another machine is
    /// `None`: it has only the bearer token. Looked up by [`tcp_lookups`], which serves
    /// every connection waiting at the moment with one scan of /proc.
    pub async fn of_tcp(stream: &tokio::net::TcpStream) -> Option<Arc<Caller>> {
        let ends = (stream.peer_addr().ok()?, stream.local_addr().ok()?);
        let (answer, answered) = tokio::sync::oneshot::channel();
        tcp_lookups()?.send(TcpLookup { ends, answer }).ok()?;
        answered.await.ok().flatten()
    }

    /// The caller of a request of the operator's page (`frontend`) on a connection whose
    /// peer is `peer`, made as the holder of the token its login presented.
    pub fn of_page(
        peer: Option<&Caller>,
        login: Option<Presented>,
        frontend: &str,
    ) -> Option<Arc<Caller>> {
        let (token, roles) = match login {
            Some(t) => (Some(t.name.to_string()), t.roles),
            None => (None, Vec::new()),
        };
        let base = match peer {
            Some(c) => c.clone(),
            None if token.is_some() => Caller::default(),
            None => return None,
        };
        Some(Arc::new(Caller {
            agent: Some(frontend.to_owned()),
            token,
            roles,
            ..base
        }))
    }

    /// The caller of one HTTP request on a connection whose peer is `peer`: named by its
    /// `User-Agent` (when it sent one) and by the name of the bearer token it carried
    /// (TCP). A request from another machine has a caller only when it carried a token.
    pub fn of_request<B>(
        peer: Option<&Arc<Caller>>,
        req: &http::Request<B>,
        token: Option<&Presented>,
    ) -> Option<Arc<Caller>> {
        let agent = req
            .headers()
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(200).collect::<String>());
        let roles = token.map(|t| t.roles.clone()).unwrap_or_default();
        let token = token.map(|t| t.name.to_string());
        match peer {
            Some(c) if agent.is_none() && token.is_none() => Some(c.clone()),
            Some(c) => Some(Arc::new(Caller {
                agent: agent.or_else(|| c.agent.clone()),
                token,
                roles,
                ..Caller::clone(c)
            })),
            None => token.map(|token| {
                Arc::new(Caller {
                    agent,
                    token: Some(token),
                    roles,
                    ..Caller::default()
                })
            }),
        }
    }
}

/// A TCP connection's peer to look up: its ends (the peer's end first, as the peer's
/// socket has them), and where the answer goes.
struct TcpLookup {
    ends: (std::net::SocketAddr, std::net::SocketAddr),
    answer: tokio::sync::oneshot::Sender<Option<Arc<Caller>>>,
}

/// The thread that looks TCP peers up, started at the first lookup; `None` when the system
/// refused a thread (then no TCP peer is known and each gets the least rights). It takes
/// every lookup waiting at the moment, drops those whose connection has gone, and serves
/// the rest with one read of the socket tables and one pass over the processes'
/// descriptors: thousands of connections that each sent a byte cost a few scans, not one
/// each (4,096 scans, even one at a time, kept a core busy and the CLI on the Unix socket
/// waiting for seconds).
fn tcp_lookups() -> Option<&'static std::sync::mpsc::Sender<TcpLookup>> {
    static LOOKUPS: std::sync::OnceLock<Option<std::sync::mpsc::Sender<TcpLookup>>> =
        std::sync::OnceLock::new();
    LOOKUPS
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<TcpLookup>();
            let serve = move || {
                while let Ok(first) = rx.recv() {
                    let batch: Vec<TcpLookup> = std::iter::once(first)
                        .chain(rx.try_iter())
                        .filter(|l| !l.answer.is_closed())
                        .collect();
                    let ends: Vec<_> = batch.iter().map(|l| l.ends).collect();
                    let sockets = crate::procfs::tcp_sockets(&ends);
                    let holders = crate::procfs::socket_holders(sockets.iter().flatten().copied());
                    for (lookup, socket) in batch.into_iter().zip(sockets) {
                        let caller = socket.map(|(uid, inode)| {
                            Caller::of_process(uid, holders.get(&inode).copied())
                        });
                        let _ = lookup.answer.send(caller);
                    }
                }
            };
            std::thread::Builder::new()
                .name("toolhost-tcp-peers".into())
                .spawn(serve)
                .map_err(|e| tracing::error!("cannot start the TCP peer lookup thread: {e}"))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// The name of the bearer token an HTTP request to `/mcp` carried (TCP), in the request's
/// extensions: the facade's calls reach the host through the daemon's own connection,
/// whose caller is the daemon, so the facade names the token in the sessions it makes
/// (session meta `tcp_token`, which the host takes from no one else).
#[derive(Debug, Clone)]
pub struct TokenName(pub String);

tokio::task_local! {
    /// The caller of the request being handled (set by the RPC layer).
    pub static CALLER: Arc<Caller>;
}

/// The caller of the current request, when the RPC layer set one.
pub fn current_caller() -> Option<Arc<Caller>> {
    CALLER.try_with(Arc::clone).ok()
}

/// Where records also go in fleet mode: the fleet's audit table (src/fleet/).
pub trait Shared: Send + Sync {
    /// Queues the record for the shared table; never blocks.
    fn record(&self, r: &AuditRecord);
}

/// The sending end of the audit log; cheap to share.
#[derive(Clone)]
pub struct AuditLog {
    tx: Option<SyncSender<Entry>>,
    /// The fleet's table, set once at start in fleet mode.
    shared: Arc<std::sync::OnceLock<Arc<dyn Shared>>>,
}

/// What the writer thread is sent.
enum Entry {
    Record(Box<AuditRecord>),
    /// Write everything queued before this, then answer (a stopping daemon waits for it).
    Flush(std::sync::mpsc::Sender<()>),
}

impl AuditLog {
    /// Starts the writer thread for `<data_dir>/audit.jsonl`; without a thread (the
    /// system refused one) records are dropped and the daemon still serves.
    pub fn start(data_dir: &Path) -> AuditLog {
        let (tx, rx) = sync_channel(QUEUE);
        let path = data_dir.join(FILE_NAME);
        let spawned = std::thread::Builder::new()
            .name("toolhost-audit".into())
            .spawn(move || write_loop(&path, rx, MAX_BYTES, KEEP));
        match spawned {
            Ok(_) => AuditLog {
                tx: Some(tx),
                shared: Arc::default(),
            },
            Err(e) => {
                tracing::error!("audit log disabled: cannot start its writer thread: {e}");
                AuditLog {
                    tx: None,
                    shared: Arc::default(),
                }
            }
        }
    }

    /// Also sends every record to `shared` from now on (once, at start).
    pub fn share(&self, shared: Arc<dyn Shared>) {
        let _ = self.shared.set(shared);
    }

    /// Queues a record; false when it had to be dropped.
    pub fn record(&self, r: AuditRecord) -> bool {
        if let Some(shared) = self.shared.get() {
            shared.record(&r);
        }
        match &self.tx {
            Some(tx) => match tx.try_send(Entry::Record(Box::new(r))) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        }
    }

    /// Waits (at most `limit`) until every record queued so far is in the file: a
    /// stopping daemon calls this so its last calls are not lost with the batch.
    pub async fn flush(&self, limit: std::time::Duration) {
        let Some(tx) = self.tx.clone() else { return };
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        let wait = tokio::task::spawn_blocking(move || {
            if tx.send(Entry::Flush(ack_tx)).is_ok() {
                let _ = ack_rx.recv_timeout(limit);
            }
        });
        let _ = tokio::time::timeout(limit, wait).await;
    }
}

/// Writes queued records until every sender is gone; gathers each burst for [`BATCH`],
/// flushes after it, and rotates as soon as the live file reaches `max_bytes`.
fn write_loop(path: &Path, rx: Receiver<Entry>, max_bytes: u64, keep: usize) {
    let mut out: Option<(BufWriter<File>, u64)> = None;
    let mut warned = false;
    while let Ok(first) = rx.recv() {
        if matches!(first, Entry::Record(_)) {
            std::thread::sleep(BATCH);
        }
        let mut next = Some(first);
        let mut acks = Vec::new();
        while let Some(entry) = next {
            let r = match entry {
                Entry::Record(r) => r,
                Entry::Flush(ack) => {
                    acks.push(ack);
                    next = rx.try_recv().ok();
                    continue;
                }
            };
            if out.is_none() {
                match open(path) {
                    Ok(f) => {
                        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                        out = Some((BufWriter::with_capacity(256 * 1024, f), len));
                        warned = false;
                    }
                    Err(e) if !warned => {
                        tracing::error!(path = %path.display(), "cannot open the audit log: {e}");
                        warned = true;
                    }
                    Err(_) => {}
                }
            }
            if let Some((w, len)) = &mut out {
                let mut line = serde_json::to_vec(&r).unwrap_or_default();
                line.push(b'\n');
                if w.write_all(&line).is_err() {
                    out = None;
                } else {
                    *len += line.len() as u64;
                    if *len >= max_bytes {
                        let _ = w.flush();
                        out = None;
                        rotate(path, keep);
                    }
                }
            }
            next = rx.try_recv().ok();
        }
        if let Some((w, _)) = &mut out {
            let _ = w.flush();
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The log names commands and peers: readable by the daemon's user only.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `audit.jsonl` → `.1` → `.2` …; the oldest beyond `keep` is deleted.
fn rotate(path: &Path, keep: usize) {
    let numbered = |n: usize| -> PathBuf {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let _ = std::fs::rename(numbered(n), numbered(n + 1));
    }
    if keep == 0 {
        let _ = std::fs::remove_file(path);
    } else if let Err(e) = std::fs::rename(path, numbered(1)) {
        tracing::warn!(path = %path.display(), "cannot rotate the audit log: {e}");
    }
}

/// The last `limit` records, oldest first: the live file's tail, then the newest rotated
/// file's when the live one holds fewer. Read backwards from the end, so a full 16 MiB log
/// costs about as much as a short one; a line that does not parse is skipped.
pub fn recent(data_dir: &Path, limit: usize) -> Vec<AuditRecord> {
    let live = data_dir.join(FILE_NAME);
    let rotated = PathBuf::from(format!("{}.1", live.display()));
    let mut newest_first: Vec<AuditRecord> = Vec::new();
    for path in [live, rotated] {
        if newest_first.len() >= limit {
            break;
        }
        let want = limit - newest_first.len();
        newest_first.extend(
            tail_lines(&path, want)
                .iter()
                .rev()
                .filter_map(|line| serde_json::from_slice::<AuditRecord>(line).ok()),
        );
    }
    newest_first.truncate(limit);
    newest_first.reverse();
    newest_first
}

/// The last `n` complete lines of the file at `path` (oldest first), read backwards in
/// blocks; none when it cannot be opened.
fn tail_lines(path: &Path, n: usize) -> Vec<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return Vec::new();
    };
    let mut end = file.metadata().map(|m| m.len()).unwrap_or(0);
    // Bytes from `end` to the file's end as read so far, and the lines found in them.
    let mut buf: Vec<u8> = Vec::new();
    while end > 0 && buf.iter().filter(|b| **b == b'\n').count() <= n {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(end - start).unwrap_or(0)];
        if file.seek(SeekFrom::Start(start)).is_err() || file.read_exact(&mut block).is_err() {
            break;
        }
        block.extend_from_slice(&buf);
        buf = block;
        end = start;
    }
    let mut lines: Vec<&[u8]> = buf.split(|b| *b == b'\n').collect();
    // The last piece follows the final newline (empty, or a line still being written);
    // the first is cut unless the file's start was reached.
    lines.pop();
    if end > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(n);
    lines[skip..]
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| l.to_vec())
        .collect()
}

/// SHA-256 (hex) of a call's arguments and their size as JSON. The JSON is hashed as it is
/// written, not gathered first: this runs on every call.
pub fn digest_args(args: &serde_json::Value) -> (Option<String>, u64) {
    use sha2::Digest;
    /// Hashes and counts what serde_json writes.
    struct Hashing {
        hasher: sha2::Sha256,
        len: u64,
    }
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.hasher.update(buf);
            self.len += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Hashing {
        hasher: sha2::Sha256::new(),
        len: 0,
    };
    if serde_json::to_writer(&mut out, args).is_err() {
        return (None, 0);
    }
    (Some(hex::encode(out.hasher.finalize())), out.len)
}

/// The frontend's name from session meta: `client`, else `clientInfo.name` (MCP's shape).
pub fn client_name(meta: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let name_in = |key: &str| {
        meta.get(key)
            .and_then(|c| c.get("name"))
            .and_then(|v| v.as_str())
    };
    meta.get("client")
        .and_then(|v| v.as_str())
        .or_else(|| name_in("clientInfo"))
        // A session the MCP facade made for an MCP client.
        .or_else(|| name_in("mcp_client"))
        .map(|s| s.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ApprovalVerdict;

    fn record(n: u64) -> AuditRecord {
        AuditRecord {
            time_ms: n,
            call_id: format!("c{n}"),
            session: None,
            peer_uid: Some(1000),
            peer_token: None,
            peer_pid: Some(42),
            peer_process: Some("curl".into()),
            client: None,
            frontend: None,
            workspace: None,
            tool: "bash".into(),
            source: "builtin".into(),
            server: None,
            approval: Some(ApprovalVerdict::Allow),
            approval_decision: None,
            approved: false,
            ok: true,
            error_kind: None,
            duration_ms: 3,
            output_bytes: 10,
            args_sha256: None,
            args_bytes: 2,
            guard: None,
            parent: None,
        }
    }

    #[test]
    fn writes_lines_and_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let line = serde_json::to_vec(&record(10)).unwrap().len() as u64 + 1;
        let (tx, rx) = sync_channel(16);
        for n in 10..22 {
            tx.send(Entry::Record(Box::new(record(n)))).unwrap();
        }
        drop(tx);
        // Three lines per file; twelve records make four files, of which two are kept.
        write_loop(&path, rx, 3 * line, 2);
        let read = |name: &str| -> Vec<u64> {
            std::fs::read_to_string(dir.path().join(name))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<AuditRecord>(l).unwrap().time_ms)
                .collect()
        };
        assert_eq!(read("audit.jsonl.2"), vec![16, 17, 18]);
        assert_eq!(read("audit.jsonl.1"), vec![19, 20, 21]);
        assert!(!path.exists());
        assert!(!dir.path().join("audit.jsonl.3").exists());
        let first: AuditRecord = serde_json::from_str(
            std::fs::read_to_string(dir.path().join("audit.jsonl.1"))
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(first, record(19));
    }

    #[test]
    fn recent_reads_the_last_records_across_the_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, range: std::ops::Range<u64>| {
            let mut text = String::new();
            for n in range {
                text.push_str(&serde_json::to_string(&record(n)).unwrap());
                text.push('\n');
            }
            std::fs::write(dir.path().join(name), text).unwrap();
        };
        // 3,000 lines in the live file: more than one 64 KiB block back.
        write("audit.jsonl.1", 0..10);
        write("audit.jsonl", 10..3010);
        let times = |limit| -> Vec<u64> {
            recent(dir.path(), limit)
                .iter()
                .map(|r| r.time_ms)
                .collect()
        };
        assert_eq!(times(2), vec![3008, 3009]);
        assert_eq!(times(500), (2510..3010).collect::<Vec<_>>());
        assert_eq!(times(3005)[..6], [5, 6, 7, 8, 9, 10]);
        assert_eq!(times(10_000).len(), 3010);
        assert!(recent(&dir.path().join("none"), 5).is_empty());
    }

    #[test]
    fn digest_args_is_the_sha256_and_size_of_the_arguments_as_json() {
        use sha2::Digest;
        let args = serde_json::json!({"message": "hi", "n": [1, 2, {"k": null}]});
        let json = serde_json::to_vec(&args).unwrap();
        let (sha, bytes) = digest_args(&args);
        assert_eq!(sha.unwrap(), hex::encode(sha2::Sha256::digest(&json)));
        assert_eq!(bytes, json.len() as u64);
    }

    #[test]
    fn client_name_prefers_client_then_client_info_then_the_facades_mcp_client() {
        let m = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert_eq!(
            client_name(&m(serde_json::json!({"client": "zed"}))),
            Some("zed".into())
        );
        assert_eq!(
            client_name(&m(
                serde_json::json!({"clientInfo": {"name": "claude-code"}})
            )),
            Some("claude-code".into())
        );
        assert_eq!(client_name(&m(serde_json::json!({"client": 3}))), None);
        assert_eq!(
            client_name(&m(
                serde_json::json!({"frontend": "mcp", "mcp_client": {"name": "cursor"}})
            )),
            Some("cursor".into())
        );
    }
}
