//! `checkpoint.restore`: puts recorded files back, refusing over later changes unless
//! forced, and records itself as an entry (so a restore can be undone too).
//!
//! Files are written beneath a handle on the workspace directory (cap-std, as the file
//! tools write: a path never resolves outside it, whatever symlinks it meets), each
//! atomically (a temporary file renamed over the path). Only the recorded paths are
//! touched: never a tree-wide clean.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use cap_std::fs::{Dir, OpenOptionsExt as _};

use super::store::{Objects, Record};
use super::tree::{Item, RelPath};
use super::{file_of, Caller, Checkpoints};
use crate::config::Config;
use crate::error::Error;
use crate::protocol::{
    CheckpointKind, CheckpointRestoreParams, CheckpointRestoreResult, RestoreConflict, RestoreScope,
};

/// One path to put back.
struct Step {
    path: RelPath,
    target: Option<Item>,
    current: Option<Item>,
    /// The later entry that changed it.
    conflict: Option<Record>,
}

/// Why a restore did nothing.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Calls running in the workspace (a restore waits until they end).
    #[error("a call is running in this workspace ({}): restore when it has ended", .0.join(", "))]
    Busy(Vec<String>),
    /// Files changed after the entry, and no `force`.
    #[error("restore refused, files changed since {id}: {}; repeat with force: true to overwrite them", named(.conflicts))]
    Conflicts {
        id: String,
        conflicts: Vec<RestoreConflict>,
    },
    #[error(transparent)]
    Other(#[from] Error),
}

impl From<Refused> for Error {
    fn from(r: Refused) -> Error {
        match r {
            Refused::Other(e) => e,
            other => Error::InvalidParams(other.to_string()),
        }
    }
}

/// Each conflict in words: the file, the later entry, its tool and frontend.
fn named(conflicts: &[RestoreConflict]) -> String {
    let named: Vec<String> = conflicts
        .iter()
        .map(|c| {
            let by = match (&c.tool, &c.frontend) {
                (Some(t), Some(f)) => format!(" ({t} from {f})"),
                (Some(t), None) => format!(" ({t})"),
                _ => " (outside)".to_owned(),
            };
            format!("{} was changed later by {}{by}", c.path, c.changed_by)
        })
        .collect();
    named.join("; ")
}

/// Restores `p.id` for `caller`. A call running in the workspace refuses it — except
/// the caller's own (the `checkpoint_restore` tool's call, which the pipeline registers).
pub async fn restore(
    checkpoints: &Checkpoints,
    config: &Arc<Config>,
    p: CheckpointRestoreParams,
    mut caller: Caller,
) -> Result<CheckpointRestoreResult, Refused> {
    let (ws, seq) = checkpoints.by_id(&p.id)?;
    let mut state = ws.state.lock().await;
    let mut busy = ws.busy();
    busy.retain(|id| Some(id) != caller.call_id.as_ref());
    if !busy.is_empty() && !p.dry_run {
        return Err(Refused::Busy(busy));
    }
    // What changed since the last scan is recorded first, so it counts as a later change.
    ws.scan_and_record(
        &mut state,
        config,
        CheckpointKind::Outside,
        Caller::default(),
        None,
    )
    .await;
    let tl = ws
        .loaded(&mut state, config)
        .await
        .ok_or_else(|| Error::Server("this workspace's checkpoints are unavailable".into()))?;
    let unknown =
        || Error::InvalidParams(format!("no checkpoint entry {:?} (pruned, or lost)", p.id));
    let idx = tl
        .entries
        .iter()
        .position(|r| r.seq == seq)
        .ok_or_else(unknown)?;
    let later = &tl.entries[idx + 1..];
    let changed_later = |path: &RelPath| {
        later
            .iter()
            .find(|r| r.changes.iter().any(|c| &c.path == path))
            .cloned()
    };
    let mut targets: BTreeMap<RelPath, Option<Item>> = BTreeMap::new();
    let scope = match p.scope {
        RestoreScope::Call => &tl.entries[idx..=idx],
        RestoreScope::Before => &tl.entries[idx..],
    };
    for r in scope {
        for c in &r.changes {
            targets
                .entry(c.path.clone())
                .or_insert_with(|| c.before.clone());
        }
    }
    if let Some(paths) = &p.paths {
        for want in paths {
            if !targets.keys().any(|k| &k.shown() == want) {
                return Err(Refused::Other(Error::InvalidParams(format!(
                    "{want} is not among the files of {}",
                    p.id
                ))));
            }
        }
        targets.retain(|k, _| paths.contains(&k.shown()));
    }
    let mut steps = Vec::new();
    let mut not_restorable = Vec::new();
    for (path, target) in targets {
        let current = tl.tree.get(&path).cloned();
        if current == target {
            continue;
        }
        match &target {
            None | Some(Item::File { .. }) | Some(Item::Symlink { .. }) => {}
            Some(other) => {
                not_restorable.push(format!("{} (a {})", path.shown(), other.kind()));
                continue;
            }
        }
        let conflict = changed_later(&path);
        steps.push(Step {
            path,
            target,
            current,
            conflict,
        });
    }
    let conflicts: Vec<RestoreConflict> = steps
        .iter()
        .filter_map(|s| {
            let r = s.conflict.as_ref()?;
            Some(RestoreConflict {
                path: s.path.shown(),
                changed_by: ws.id(r.seq),
                tool: r.tool.clone(),
                frontend: r.frontend.clone(),
            })
        })
        .collect();
    let files = steps
        .iter()
        .map(|s| {
            file_of(&super::store::Change {
                path: s.path.clone(),
                before: s.current.clone(),
                after: s.target.clone(),
                plus: None,
                minus: None,
            })
        })
        .collect();
    if p.dry_run {
        return Ok(CheckpointRestoreResult {
            files,
            conflicts,
            not_restorable,
            entry: None,
        });
    }
    if !conflicts.is_empty() && !p.force {
        return Err(Refused::Conflicts {
            id: p.id.clone(),
            conflicts,
        });
    }
    let store = ws.store.clone();
    let root = ws.root.clone();
    let plan: Vec<(RelPath, Option<Item>)> =
        steps.into_iter().map(|s| (s.path, s.target)).collect();
    let written = tokio::task::spawn_blocking(move || apply(&root, &store.objects, &plan))
        .await
        .map_err(|e| Error::Server(e.to_string()))?;
    caller.restores = Some(p.id.clone());
    let entry = ws
        .scan_and_record(&mut state, config, CheckpointKind::Restore, caller, None)
        .await
        .map(|r| ws.entry(&r));
    written.map_err(Error::Server)?;
    Ok(CheckpointRestoreResult {
        files,
        conflicts,
        not_restorable,
        entry,
    })
}

/// Writes the plan beneath the workspace; stops at the first failure, naming the file.
fn apply(root: &Path, objects: &Objects, plan: &[(RelPath, Option<Item>)]) -> Result<(), String> {
    let ws = crate::tools::paths::Root::open(root)
        .map_err(|e| format!("the workspace {} is not usable: {e}", root.display()))?;
    for (i, (path, target)) in plan.iter().enumerate() {
        let rel = Path::new(OsStr::from_bytes(&path.0));
        put(&ws.dir, rel, target.as_ref(), objects).map_err(|e| {
            let why = if crate::tools::paths::is_escape(&e) {
                "it leads outside the workspace through a symbolic link".to_owned()
            } else {
                e.to_string()
            };
            format!(
                "restored {i} of {} files, then could not restore {}: {why}",
                plan.len(),
                path.shown()
            )
        })?;
    }
    Ok(())
}

/// Removes what is at `rel` (not a directory).
fn remove(dir: &Dir, rel: &Path) -> io::Result<()> {
    match dir.symlink_metadata(rel) {
        Ok(m) if m.is_dir() => Err(io::Error::other("a directory is there now")),
        Ok(_) => dir.remove_file(rel),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn put(dir: &Dir, rel: &Path, target: Option<&Item>, objects: &Objects) -> io::Result<()> {
    let Some(target) = target else {
        return remove(dir, rel);
    };
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::other("not a file path"));
    };
    if !parent.as_os_str().is_empty() {
        dir.create_dir_all(parent)?;
    }
    let tmp = parent.join(format!(
        ".{}.{:016x}.tmp",
        String::from_utf8_lossy(&name.as_bytes()[..name.len().min(100)]),
        fastrand::u64(..)
    ));
    match target {
        Item::File { id, mode, .. } => {
            let bytes = objects.get(id)?;
            let mut opts = cap_std::fs::OpenOptions::new();
            opts.write(true).create_new(true).mode(*mode);
            let written = dir.open_with(&tmp, &opts).and_then(|f| {
                let mut f = f.into_std();
                f.write_all(&bytes)?;
                // The umask may have narrowed the mode at creation.
                f.set_permissions(std::fs::Permissions::from_mode(*mode))?;
                remove_if_dir_free(dir, rel)?;
                dir.rename(&tmp, dir, rel)
            });
            if written.is_err() {
                let _ = dir.remove_file(&tmp);
            }
            written
        }
        Item::Symlink { id } => {
            let link = objects.get(id)?;
            dir.symlink_contents(OsStr::from_bytes(&link), &tmp)?;
            let moved = remove_if_dir_free(dir, rel).and_then(|_| dir.rename(&tmp, dir, rel));
            if moved.is_err() {
                let _ = dir.remove_file(&tmp);
            }
            moved
        }
        other => Err(io::Error::other(format!(
            "a {} cannot be restored",
            other.kind()
        ))),
    }
}

/// A rename replaces a file or a link, but not a directory: refuse that case clearly.
fn remove_if_dir_free(dir: &Dir, rel: &Path) -> io::Result<()> {
    match dir.symlink_metadata(rel) {
        Ok(m) if m.is_dir() => Err(io::Error::other("a directory is there now")),
        _ => Ok(()),
    }
}
