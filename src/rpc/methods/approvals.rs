//! The approval queue's methods (proto-docs/approvals.md): what waits, a decision on one
//! entry, and a stream of the queue's events for the page and `toolhost approvals --follow`.

use super::{subscription, Api};
use crate::protocol::*;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::APPROVALS_LIST,
        "The calls waiting in the approval queue, oldest first: tool, session, frontend, approval class and summary, arguments (secret-looking values masked), since when and until when; and the workspace items waiting for trust (trust.approve, trust.folder).",
        |host, _: EmptyParams| async move {
            Ok(ApprovalsListResult {
                pending: host.approvals().list_anywhere().await,
                trust: host.trust().waiting(),
            })
        },
    )?;
    api.method(
        method::APPROVALS_DECIDE,
        "Decides a waiting call: allow_once, allow_session (the tool needs no approval in that session from now on) or deny. The first decision wins; a later one is refused naming it. Who decided (the connection's uid and pid, and `via`) goes into the audit log.",
        |host, p: ApprovalsDecideParams| async move {
            let peer = crate::audit::current_caller();
            host.approvals().decide_anywhere(p, peer.as_deref()).await
        },
    )?;
    api.subscription::<EmptyParams, ApprovalEvent, _, _>(
        [
            method::SUBSCRIBE_APPROVALS,
            method::APPROVAL_EVENT,
            method::UNSUBSCRIBE_APPROVALS,
        ],
        "The approval queue's events: first an approval_pending for each call waiting now, then approval_pending as calls begin to wait and approval_decided as waits end (decided, timed out, withdrawn). WebSocket and newline framing only.",
        |host, _: EmptyParams| async move {
            // Snapshot and subscription are taken together: no event is missed or doubled.
            let (waiting, mut rx) = host.approvals().subscribe();
            Ok(subscription::stream(move |sink| async move {
                for entry in waiting {
                    if !sink.send(&ApprovalEvent::ApprovalPending(entry)).await {
                        return;
                    }
                }
                subscription::relay(&mut rx, &sink, method::APPROVAL_EVENT, Some).await;
            }))
        },
    )
}
