//! Spill files of oversized outputs (`<data_dir>/outputs/`) are pruned by age and by total
//! size, so a long-running daemon does not fill the disk with old command output.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

/// Spill files older than this are deleted (a model may page through one for days).
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Above this total, the oldest spill files are deleted first.
pub const MAX_TOTAL_BYTES: u64 = 512 * 1024 * 1024;
/// How often the folder is pruned.
const EVERY: Duration = Duration::from_secs(600);

/// Prunes `dir` now and every few minutes until `stop`.
pub async fn prune_periodically(dir: PathBuf, stop: CancellationToken) {
    loop {
        let d = dir.clone();
        match tokio::task::spawn_blocking(move || prune(&d, MAX_AGE, MAX_TOTAL_BYTES)).await {
            Ok(0) | Err(_) => {}
            Ok(n) => tracing::info!(dir = %dir.display(), removed = n, "pruned spilled outputs"),
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Deletes regular files older than `max_age`, then the oldest until the rest fit in
/// `max_total`; returns how many were deleted. Symlinks and folders are left alone.
pub fn prune(dir: &Path, max_age: Duration, max_total: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            // symlink_metadata: never follow a link planted in the folder.
            let m = e.path().symlink_metadata().ok()?;
            m.is_file()
                .then(|| (m.modified().unwrap_or(now), m.len(), e.path()))
        })
        .collect();
    files.sort_by_key(|(t, _, _)| *t);
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    let mut removed = 0;
    for (modified, len, path) in files {
        let old = now.duration_since(modified).unwrap_or_default() > max_age;
        if !old && total <= max_total {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            removed += 1;
            total = total.saturating_sub(len);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prunes_old_files_then_oldest_over_the_size_cap() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let file = |name: &str, age_s: u64, len: usize| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![b'x'; len]).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(now - Duration::from_secs(age_s)).unwrap();
        };
        file("ancient.txt", 10_000, 10);
        file("old.txt", 300, 100);
        file("mid.txt", 200, 100);
        file("new.txt", 100, 100);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        // Older than an hour goes; then 300 bytes must fit in 250: the oldest goes.
        assert_eq!(prune(dir.path(), Duration::from_secs(3600), 250), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["mid.txt", "new.txt", "sub"]);
    }
}
