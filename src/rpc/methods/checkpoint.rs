//! The checkpoint methods (proto-docs/checkpoints.md): a workspace's timeline, an entry's
//! diff, and restores.

use super::Api;
use crate::protocol::*;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::CHECKPOINT_LIST,
        "A workspace's timeline of changes, newest first: each call's own change, changes made outside the host between calls, and restores, with the files each changed.",
        |host, p: CheckpointListParams| async move {
            let config = host.config();
            host.checkpoints().list(&config, host.workspace(), p).await
        },
    )?;
    api.method(
        method::CHECKPOINT_DIFF,
        "One timeline entry's changes as a unified diff (optionally of one file).",
        |host, p: CheckpointDiffParams| async move {
            let config = host.config();
            host.checkpoints()
                .diff(&config, &p.id, p.path.as_deref())
                .await
        },
    )?;
    api.method(
        method::CHECKPOINT_RESTORE,
        "Reverts an entry's changes (scope call) or puts its workspace back as it was before it (scope before); refuses over files changed since unless force, and while a call runs in the workspace. The restore is an entry itself.",
        |host, p: CheckpointRestoreParams| async move {
            let config = host.config();
            let caller = crate::checkpoint::Caller {
                tool: Some(method::CHECKPOINT_RESTORE.to_owned()),
                frontend: crate::audit::current_caller().and_then(|c| c.agent.clone()),
                ..Default::default()
            };
            Ok(crate::checkpoint::restore(host.checkpoints(), &config, p, caller).await?)
        },
    )
}
