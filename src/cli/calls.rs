//! `toolhost calls [--follow] [--session ID] [--json]`: reads the call audit log.
//!
//! The log is a file in the daemon's data directory; the CLI reads it directly (no RPC), so
//! it works while the daemon is down. The directory is `--data-dir`, else the one the
//! running daemon reports, else the one `serve` would use.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::render::{say, say_err};
use super::Globals;
use crate::audit::FILE_NAME;
use crate::client::Client;
use crate::protocol::AuditRecord as Record;

#[derive(Args, Debug)]
pub struct CallsArgs {
    /// Keep printing calls as they finish.
    #[arg(long, short)]
    follow: bool,
    /// Only the calls of this session.
    #[arg(long)]
    session: Option<String>,
    /// Only the last N calls (0: all).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// The daemon's data dir (default: the running daemon's, else as `serve` resolves it).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// What to show.
struct Filter {
    session: Option<String>,
    json: bool,
    /// Only the last `limit` matching records of the existing log (0: all).
    limit: usize,
}

pub async fn run(g: &Globals, a: CallsArgs) -> ExitCode {
    let data_dir = match a.data_dir {
        Some(d) => d,
        None => data_dir(g).await,
    };
    let filter = Filter {
        session: a.session,
        json: g.out.json,
        limit: a.limit,
    };
    show(&data_dir, &filter, a.follow).await
}

/// Where the audit log is: the running daemon's data dir, else the one `serve` would use.
async fn data_dir(g: &Globals) -> PathBuf {
    let asked = async {
        let c = Client::connect_first(&g.socket_paths()).await.ok()?;
        c.status().await.ok().map(|s| PathBuf::from(s.data_dir))
    };
    match tokio::time::timeout(Duration::from_secs(2), asked).await {
        Ok(Some(d)) => d,
        _ => crate::session::resolve_data_dir(None, g.config.clone()),
    }
}

/// Prints the log (the live file after its newest rotated one); with `follow`, keeps
/// printing new records as they are written, across rotations, until interrupted.
async fn show(data_dir: &Path, filter: &Filter, follow: bool) -> ExitCode {
    let live = data_dir.join(FILE_NAME);
    let rotated = PathBuf::from(format!("{}.1", live.display()));
    let mut shown: Vec<String> = Vec::new();
    for p in [&rotated, &live] {
        if let Ok(f) = std::fs::File::open(p) {
            for line in BufReader::new(f).lines().map_while(Result::ok) {
                if let Some(out) = format_line(&line, filter) {
                    shown.push(out);
                }
            }
        }
    }
    if !follow && !live.exists() && !rotated.exists() {
        say_err!("toolhost: no audit log at {}", live.display());
        return ExitCode::from(1);
    }
    let skip = if filter.limit == 0 {
        0
    } else {
        shown.len().saturating_sub(filter.limit)
    };
    for s in &shown[skip..] {
        say!("{s}");
    }
    if !follow {
        return ExitCode::SUCCESS;
    }
    let mut pos = std::fs::metadata(&live).map(|m| m.len()).unwrap_or(0);
    let mut partial = String::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        }
        let len = match std::fs::metadata(&live) {
            Ok(m) => m.len(),
            Err(_) => continue,
        };
        if len < pos {
            // Rotated: the live file started over.
            pos = 0;
            partial.clear();
        }
        if len == pos {
            continue;
        }
        let Ok(mut f) = std::fs::File::open(&live) else {
            continue;
        };
        if f.seek(SeekFrom::Start(pos)).is_err() {
            continue;
        }
        let mut chunk = String::new();
        let Ok(n) = std::io::Read::read_to_string(&mut f, &mut chunk) else {
            continue;
        };
        pos += n as u64;
        partial.push_str(&chunk);
        // Only whole lines: a record being written is finished on the next round.
        while let Some(i) = partial.find('\n') {
            let line: String = partial.drain(..=i).collect();
            if let Some(out) = format_line(line.trim_end(), filter) {
                say!("{out}");
            }
        }
    }
}

/// The line to print for one log line, or `None` when filtered out or unreadable.
fn format_line(line: &str, filter: &Filter) -> Option<String> {
    let r: Record = serde_json::from_str(line).ok()?;
    if filter.session.is_some() && r.session != filter.session {
        return None;
    }
    if filter.json {
        return Some(line.to_owned());
    }
    Some(human(&r))
}

/// `2026-11-30 17:55:02.123Z  bash  ok  12ms  session s1  vim (toolhost pid 42 uid 1000)  call_…`
fn human(r: &Record) -> String {
    let outcome = match (r.ok, r.error_kind) {
        (true, _) => "ok".to_owned(),
        (false, Some(k)) => super::render::wire(&k),
        (false, None) => "failed".to_owned(),
    };
    let peer = match (&r.peer_process, r.peer_pid, r.peer_uid) {
        (None, None, None) => "-".to_owned(),
        (process, pid, uid) => format!(
            "{} pid {} uid {}",
            process.as_deref().unwrap_or("?"),
            pid.map_or("?".to_owned(), |p| p.to_string()),
            uid.map_or("?".to_owned(), |u| u.to_string())
        ),
    };
    format!(
        "{}  {:<28} {:<17} {:>7}ms  session {:<24} {} ({})  {}",
        utc(r.time_ms),
        r.tool,
        outcome,
        r.duration_ms,
        r.session.as_deref().unwrap_or("-"),
        r.client.as_deref().unwrap_or("-"),
        peer,
        r.call_id
    )
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS.mmmZ` (UTC).
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29 00:00:00.123Z");
        assert_eq!(utc(1_796_083_200_000), "2026-12-01 00:00:00.000Z");
    }
}
