//! List changes and resource updates from a server of the 2026-07-28 era, which sends them
//! only on the stream of a `subscriptions/listen` request (no GET stream, no
//! `resources/subscribe`). One listen per connection opts in to the tools, prompts and
//! resources lists and to every URI of the server that has subscribers; when that set of
//! URIs changes (`relay.rs`), the listen is opened again with the new set. What arrives
//! becomes the same [`Notice`]s a server of the `initialize` era sends unasked, so the
//! supervisor follows both alike. A server that refuses the listen leaves the connection
//! as it is: its lists are the ones listed at connect.

use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::Peer;
use rmcp::RoleClient;
use tokio::sync::mpsc;

use super::client::Notice;
use super::surface::Kind;
use crate::lock;

/// Follows one connection's subscription for as long as the connection lives (the caller
/// drops the future with it, which cancels the listen upstream). Never returns.
pub(super) async fn follow(
    server: &super::Server,
    peer: Peer<RoleClient>,
    notices: mpsc::UnboundedSender<Notice>,
) {
    if !super::era::peer_is_new(&peer) {
        return std::future::pending().await;
    }
    let mut uris_changed = server.runtime.surface.subscriptions_changed();
    let timeout = Duration::from_millis(server.config().timeout_ms);
    loop {
        uris_changed.mark_unchanged();
        let wanted = filter(server);
        let reopen = match tokio::time::timeout(timeout, peer.listen(wanted.clone())).await {
            Ok(Ok(mut subscription)) => loop {
                tokio::select! {
                    next = subscription.next() => match next {
                        Ok(Some(note)) => {
                            if let Some(notice) = notice(note) {
                                let _ = notices.send(notice);
                            }
                        }
                        // Ended by the server, or the connection gone: nothing more comes
                        // on it (a lost connection ends this future with it).
                        Ok(None) | Err(_) => break false,
                    },
                    // Another server's URIs changed: this listen stays as it is.
                    _ = uris_changed.changed() => if filter(server) != wanted { break true },
                }
            },
            Ok(Err(e)) => {
                tracing::warn!(server = %server.name(), error = %e, "subscriptions/listen refused; list changes of this server are not followed");
                false
            }
            Err(_) => {
                tracing::warn!(server = %server.name(), "subscriptions/listen was not acknowledged within timeout_ms");
                false
            }
        };
        // A refused or ended listen is opened again once the URIs wanted change, rather
        // than asked for again in a loop.
        if !reopen && uris_changed.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Every list, and the URIs of `server` that have subscribers.
fn filter(server: &super::Server) -> SubscriptionFilter {
    let uris: Vec<String> = lock(&server.runtime.surface.subscribers)
        .keys()
        .filter(|(s, _)| s == server.name())
        .map(|(_, uri)| uri.clone())
        .collect();
    let builder = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resources_list_changed();
    if uris.is_empty() {
        builder.build()
    } else {
        builder.resource_subscriptions(uris).build()
    }
}

/// The supervisor's notice for a notification of the subscription.
fn notice(note: ServerNotification) -> Option<Notice> {
    Some(match note {
        ServerNotification::ToolListChangedNotification(_) => Notice::ToolListChanged,
        ServerNotification::PromptListChangedNotification(_) => Notice::ListChanged(Kind::Prompts),
        ServerNotification::ResourceListChangedNotification(_) => {
            Notice::ListChanged(Kind::Resources)
        }
        ServerNotification::ResourceUpdatedNotification(n) => Notice::ResourceUpdated(n.params.uri),
        _ => return None,
    })
}
