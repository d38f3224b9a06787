//! `toolhost session recover`: rebuild a damaged session store from what can still be read.
//!
//! sled has no read-only or repair mode, and on some damaged logs `open` panics or leaves
//! the process unable to reopen the dir, so every attempt opens a *copy* of the store in a
//! child process (`toolhost session recover --export-from COPY`), which prints the records
//! it can decode as JSON lines. Attempts, best first:
//! 1. the copy as it is, and the copy without `snap.*` (sled then rebuilds its page table
//!    from the log alone; a bad snapshot is a known way to make it fail); the one that
//!    yields more sessions wins;
//! 2. if neither opens: the copy without snapshots, its log cut back to ever earlier segment
//!    boundaries, until one opens (sessions after the cut are lost; the output says so).
//!
//! 3. when the last clean shutdown left its record (`toolhost-clean-shutdown.json`, with
//!    every id), the ids still missing are looked for as JSON in the raw log and blob
//!    files, newest `updated_at` per id. Only those ids, so deleted sessions stay deleted;
//!    without that record nothing is carved (it could bring deleted sessions back).
//!
//! The salvaged sessions go into a fresh store built next to the old one; then the damaged
//! store is renamed to `sessions.corrupt-<unix time>` and the new one takes its place. The
//! damaged store is never modified, so a better tool can try again later. The whole run
//! holds sled's own lock on the damaged log, so it refuses while a daemon uses the store
//! and no daemon can open it meanwhile.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};
use nix::fcntl::{Flock, FlockArg};

use super::backend::SessionStore;
use super::sled_store::{SledStore, BLOBS_DIR, LOG_FILE, SEAL_FILE};
use crate::protocol::Session;

/// sled 0.34's default segment size (we don't change it): the log is written in
/// segments of this size, so a cut at a boundary drops whole segments.
const SEGMENT: u64 = 512 * 1024;
/// At most this many cut-back attempts (each a child process).
const MAX_CUTS: u64 = 64;
/// How long one export child may take.
const CHILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// What [`recover`] did.
#[derive(Debug)]
pub struct Recovered {
    /// Sessions copied into the new store (`from_store + from_raw_log`).
    pub kept: usize,
    /// Of those, read through sled from a copy of the store.
    pub from_store: usize,
    /// Of those, found as JSON in the raw log (ids of the last clean shutdown only).
    pub from_raw_log: usize,
    /// Records that were readable but did not decode as a session (dropped).
    pub unreadable: u64,
    /// Which sled attempt `from_store` comes from, or why none opened.
    pub source: String,
    /// Where the damaged store now is.
    pub moved_to: PathBuf,
    /// The session count the last clean shutdown recorded, if it left a record.
    pub at_clean_shutdown: Option<u64>,
}

/// The data dir `serve` would use, with the same precedence: `--data-dir`, config
/// `data_dir`, `$STATE_DIRECTORY`, then `$XDG_STATE_HOME/toolhost`.
pub fn resolve_data_dir(explicit: Option<PathBuf>, config_path: Option<PathBuf>) -> PathBuf {
    let path = config_path.unwrap_or_else(crate::config::default_path);
    let cfg = crate::config::load(&path).ok().map(|l| l.config);
    crate::config::data_dir(explicit, cfg.as_ref())
}

/// The CLI entry: `recover` on the resolved data dir, or the child's `--export-from`.
/// Exit 0 when a new store is in place, 1 otherwise.
pub fn cli(
    data_dir: Option<PathBuf>,
    config_path: Option<PathBuf>,
    export_from: Option<PathBuf>,
) -> ExitCode {
    if let Some(dir) = export_from {
        return match export_child(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("toolhost: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    let data_dir = resolve_data_dir(data_dir, config_path);
    match recover(&data_dir) {
        Ok(r) => {
            // A closed stdout (`| head`) must not turn into a panic after the work is done.
            let _ = print_report(&data_dir, &r);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolhost: session recover failed: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn print_report(data_dir: &Path, r: &Recovered) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "recovered {}: kept {} sessions",
        data_dir.join("sessions").display(),
        r.kept
    )?;
    writeln!(out, "  from the store: {} ({})", r.from_store, r.source)?;
    writeln!(
        out,
        "  found in the raw log: {} (newest copy of each)",
        r.from_raw_log
    )?;
    match r.at_clean_shutdown {
        Some(n) => writeln!(
            out,
            "  lost: {} of the {n} sessions the last clean shutdown recorded",
            n.saturating_sub(r.kept as u64)
        )?,
        None => writeln!(
            out,
            "  lost: unknown (the store was not shut down cleanly, so there is no record to compare with)"
        )?,
    }
    writeln!(out, "  unreadable records dropped: {}", r.unreadable)?;
    writeln!(out, "the damaged store is kept at {}", r.moved_to.display())
}

/// Child side: open the store copy in `dir` and print one JSON line per decodable session,
/// then `{"done":{"unreadable":N}}`. A panic here costs only this process.
fn export_child(dir: &Path) -> anyhow::Result<()> {
    let store = SledStore::open_for_export(dir)?;
    let (sessions, unreadable) = store.export()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for s in &sessions {
        serde_json::to_writer(&mut out, &serde_json::json!({ "session": s }))?;
        out.write_all(b"\n")?;
    }
    writeln!(
        out,
        "{}",
        serde_json::json!({"done": {"unreadable": unreadable}})
    )?;
    out.flush()?;
    Ok(())
}

/// Rebuilds `<data_dir>/sessions` from what can be read (see the module doc).
pub fn recover(data_dir: &Path) -> anyhow::Result<Recovered> {
    let dir = data_dir.join("sessions");
    let log = dir.join(LOG_FILE);
    if !log.is_file() {
        bail!("no session store at {} (no {LOG_FILE} file)", dir.display());
    }
    // The same lock sled takes (flock on `db`): refuse while a daemon has the store open,
    // and keep one from opening it until the new store is in place.
    let lock_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        anyhow::anyhow!(
            "session store {} is in use ({e}); stop the toolhost daemon using this data dir first",
            dir.display()
        )
    })?;
    let seal = std::fs::read(dir.join(SEAL_FILE))
        .ok()
        .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok());
    let at_clean_shutdown = seal.as_ref().and_then(|v| v["count"].as_u64());
    let sealed_ids: HashSet<String> = seal
        .as_ref()
        .and_then(|v| v["ids"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect();

    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let work = unique(data_dir, &format!(".sessions.recover-{stamp}"));
    std::fs::create_dir(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let result = salvage_and_swap(data_dir, &dir, &work, stamp, &sealed_ids);
    let _ = std::fs::remove_dir_all(&work);
    let (sessions, carved, unreadable, source, moved_to) = result?;
    Ok(Recovered {
        kept: sessions,
        from_store: sessions - carved,
        from_raw_log: carved,
        unreadable,
        source,
        moved_to,
        at_clean_shutdown,
    })
}

fn salvage_and_swap(
    data_dir: &Path,
    dir: &Path,
    work: &Path,
    stamp: u64,
    sealed_ids: &HashSet<String>,
) -> anyhow::Result<(usize, usize, u64, String, PathBuf)> {
    let (mut sessions, unreadable, source) = match salvage(dir, work) {
        Ok(found) => found,
        Err(e) if !sealed_ids.is_empty() => (Vec::new(), 0, format!("{e:#}")),
        Err(e) => return Err(e),
    };
    let have: HashSet<String> = sessions.iter().map(|s| s.id.clone()).collect();
    let missing: HashSet<String> = sealed_ids.difference(&have).cloned().collect();
    let mut carved = 0;
    if !missing.is_empty() {
        let found = carve(dir, &missing)?;
        carved = found.len();
        sessions.extend(found.into_values());
    }
    let fresh = work.join("new");
    {
        let store = SledStore::open(&fresh)?;
        for s in &sessions {
            if !store.insert(s)? {
                tracing::warn!(id = %s.id, "duplicate session id in the salvage; kept the first");
            }
        }
        store.flush()?;
        // Sealed, so the first start on the new store checks it.
        SledStore::seal(std::sync::Arc::new(store), &fresh)?;
    }
    let moved_to = unique(data_dir, &format!("sessions.corrupt-{stamp}"));
    std::fs::rename(dir, &moved_to)
        .with_context(|| format!("cannot move {} aside", dir.display()))?;
    if let Err(e) = std::fs::rename(&fresh, dir) {
        // Put the damaged store back rather than leave no store at all.
        let _ = std::fs::rename(&moved_to, dir);
        return Err(e).with_context(|| format!("cannot move the new store to {}", dir.display()));
    }
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", data_dir.display()))?;
    Ok((sessions.len(), carved, unreadable, source, moved_to))
}

/// The best readable set of sessions, how many records were dropped, and where it came from.
fn salvage(dir: &Path, work: &Path) -> anyhow::Result<(Vec<Session>, u64, String)> {
    let mut best: Option<(Vec<Session>, u64, String)> = None;
    let mut failures = Vec::new();
    for (name, snapshots) in [("as is", true), ("without snapshots", false)] {
        let copy = work.join(format!("try-{}", if snapshots { "full" } else { "nosnap" }));
        copy_store(dir, &copy, snapshots, None)?;
        match export_in_child(&copy) {
            Ok((s, bad)) => {
                if best.as_ref().is_none_or(|b| s.len() > b.0.len()) {
                    best = Some((s, bad, format!("store opened {name}")));
                }
            }
            Err(e) => failures.push(format!("{name}: {e:#}")),
        }
        let _ = std::fs::remove_dir_all(&copy);
    }
    if let Some(b) = best {
        return Ok(b);
    }
    let len = std::fs::metadata(dir.join(LOG_FILE))?.len();
    let mut cut = (len.saturating_sub(1) / SEGMENT) * SEGMENT;
    let mut tries = 0;
    while cut >= SEGMENT && tries < MAX_CUTS {
        let copy = work.join(format!("try-cut-{cut}"));
        copy_store(dir, &copy, false, Some(cut))?;
        let r = export_in_child(&copy);
        let _ = std::fs::remove_dir_all(&copy);
        match r {
            Ok((s, bad)) => {
                let source = format!("log cut back to {cut} of {len} bytes");
                return Ok((s, bad, source));
            }
            Err(e) => failures.push(format!("cut at {cut}: {e:#}")),
        }
        cut -= SEGMENT;
        tries += 1;
    }
    bail!(
        "no copy of {} could be opened; nothing was changed. Attempts:\n  {}",
        dir.display(),
        failures.join("\n  ")
    )
}

/// Copies sled's files from `from` to a new dir `to`: `conf`, the log (cut to `log_len`
/// if given), `blobs/`, and `snap.*` when `snapshots`. Our clean-shutdown record is left out.
fn copy_store(from: &Path, to: &Path, snapshots: bool, log_len: Option<u64>) -> anyhow::Result<()> {
    std::fs::create_dir_all(to.join(BLOBS_DIR))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let src = entry.path();
        if name == SEAL_FILE || (!snapshots && name.starts_with("snap.")) {
            continue;
        }
        if name == BLOBS_DIR {
            for blob in std::fs::read_dir(&src)? {
                let blob = blob?;
                std::fs::copy(blob.path(), to.join(BLOBS_DIR).join(blob.file_name()))?;
            }
        } else if entry.file_type()?.is_file() {
            std::fs::copy(&src, to.join(&*name))
                .with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    if let Some(len) = log_len {
        std::fs::OpenOptions::new()
            .write(true)
            .open(to.join(LOG_FILE))?
            .set_len(len)?;
    }
    Ok(())
}

/// Runs this binary's `--export-from` on `copy`; the sessions and the unreadable count.
fn export_in_child(copy: &Path) -> anyhow::Result<(Vec<Session>, u64)> {
    let exe = std::env::current_exe().context("cannot find the toolhost binary")?;
    let mut child = Command::new(exe)
        .args(["session", "recover", "--export-from"])
        .arg(copy)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run the export child")?;
    // Read both pipes while waiting, so a large export can't block on a full pipe.
    let drain = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    // A replay that hangs instead of failing must not hang `recover`.
    let deadline = std::time::Instant::now() + CHILD_TIMEOUT;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the export child took over {} s", CHILD_TIMEOUT.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        let err = String::from_utf8_lossy(&stderr);
        bail!(
            "{} ({})",
            err.trim().trim_start_matches("toolhost: "),
            status
        );
    }
    let mut sessions = Vec::new();
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        if let Some(done) = v.get("done") {
            return Ok((sessions, done["unreadable"].as_u64().unwrap_or(0)));
        }
        sessions.push(serde_json::from_value(v["session"].clone())?);
    }
    bail!("the export child stopped before the end")
}

/// Sessions in `ids` found as JSON in the raw bytes of the log and blob files; per id the
/// copy with the newest `updated_at` (sled keeps old versions until it reuses a segment).
///
/// Only ids the last clean shutdown recorded are taken, so a session deleted before that
/// shutdown (whose old copies may still be in the log) does not come back.
fn carve(dir: &Path, ids: &HashSet<String>) -> anyhow::Result<HashMap<String, Session>> {
    let mut files = vec![dir.join(LOG_FILE)];
    if let Ok(blobs) = std::fs::read_dir(dir.join(BLOBS_DIR)) {
        files.extend(blobs.filter_map(|b| b.ok().map(|b| b.path())));
    }
    let mut found: HashMap<String, Session> = HashMap::new();
    for file in files {
        let bytes =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        let mut i = 0;
        while let Some(at) = bytes[i..].windows(2).position(|w| w == b"{\"") {
            let start = i + at;
            let mut values =
                serde_json::Deserializer::from_slice(&bytes[start..]).into_iter::<Session>();
            match values.next() {
                Some(Ok(s)) => {
                    i = start + values.byte_offset().max(1);
                    if ids.contains(&s.id)
                        && found
                            .get(&s.id)
                            .is_none_or(|old| s.updated_at >= old.updated_at)
                    {
                        found.insert(s.id.clone(), s);
                    }
                }
                _ => i = start + 1,
            }
        }
    }
    Ok(found)
}

/// `dir/name`, or `dir/name-2`, `-3`… if taken.
fn unique(dir: &Path, name: &str) -> PathBuf {
    let mut p = dir.join(name);
    let mut n = 2;
    while p.exists() {
        p = dir.join(format!("{name}-{n}"));
        n += 1;
    }
    p
}
