//! The workspace-trust gate's methods (proto-docs/trust.md): what waits, and the user's
//! decisions on one item or a whole folder. Admin methods: a process the host started
//! never approves what its own workspace brings.

use std::path::Path;

use super::Api;
use crate::error::Error;
use crate::host::Host;
use crate::protocol::*;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::TRUST_LIST,
        "What the workspaces bring and wait for the user's approval (program tools, modules, skills, commands: none of it loaded, run, listed or shown to a model), and the folders and items the user trusts.",
        |host, _: EmptyParams| async move { Ok(host.trust().list()) },
    )?;
    api.method(
        method::TRUST_APPROVE,
        "Approves the waiting item at path (or every waiting item beneath it) with the content it waits with; a later change waits again. The sources rescan before the answer.",
        |host, p: TrustApproveParams| async move {
            let path = p.path.clone();
            let admitted = off_runtime(&host, move |t| t.approve(Path::new(&path))).await?;
            tracing::info!(path = %p.path, items = admitted.len(), "workspace items approved");
            rescan(&host).await;
            Ok(TrustDecisionResult {
                admitted,
                folder: None,
            })
        },
    )?;
    api.method(
        method::TRUST_DIFF,
        "What changed in the item waiting at path since it was approved, file by file with unified diffs (never approved, or its files not kept: every file as added). Nothing is loaded or run.",
        |host, p: TrustDiffParams| async move {
            off_runtime(&host, move |t| t.diff(Path::new(&p.path))).await
        },
    )?;
    api.method(
        method::TRUST_FOLDER,
        "Trusts a folder as a whole (\"trust this folder\": everything its workspaces bring, now and changed later), or with trusted: false takes that back. The sources rescan before the answer.",
        |host, p: TrustFolderParams| async move {
            let (folder, admitted) = host
                .trust()
                .set_folder(Path::new(&p.folder), p.trusted)
                .map_err(Error::InvalidParams)?;
            tracing::info!(folder = %folder.display(), trusted = p.trusted, "workspace folder trust decided");
            rescan(&host).await;
            Ok(TrustDecisionResult {
                admitted,
                folder: Some(folder.display().to_string()),
            })
        },
    )?;
    Ok(())
}

/// Runs `f` on the gate off the async runtime (approving and diffing read the items'
/// files); its refusal is the caller's invalid params.
pub(super) async fn off_runtime<R: Send + 'static>(
    host: &Host,
    f: impl FnOnce(&crate::trust::Trust) -> Result<R, String> + Send + 'static,
) -> Result<R, Error> {
    let trust = host.trust().clone();
    tokio::task::spawn_blocking(move || f(&trust))
        .await
        .map_err(|e| Error::Server(e.to_string()))?
        .map_err(Error::InvalidParams)
}

/// Every source that asks the gate scans again (one apply), so a decision shows in the
/// next answer.
pub(super) async fn rescan(host: &Host) {
    crate::reload::rescan(host).await;
}
