//! `subscriptions/listen`: how a 2026-07-28 client hears of changes (it replaces the GET
//! stream's list-changed notifications and `resources/subscribe`). rmcp sends the
//! acknowledgement with the accepted filter, then hands the subscription here; every
//! notification goes through its sink, which tags it with the `subscriptionId` and lets
//! through only the kinds the client opted into. It runs until the client cancels it
//! (stdio: `notifications/cancelled`; HTTP: the stream goes away) or the daemon stops.

use std::future::Future;
use std::pin::Pin;

use std::sync::Mutex;

use futures::stream::{FuturesUnordered, StreamExt};
use rmcp::model::SubscriptionFilter;
use rmcp::service::SubscriptionContext;
use rmcp::ErrorData;

use super::surface::{Feeds, Listener, UpdatesTo};
use super::{host_error, Facade, Feed};

type Forwarder = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The feeds of listens that were accepted and are not yet running. rmcp acknowledges a
/// listen before it runs it, so feeds opened only then would miss a change made right
/// after the acknowledgement; they are opened when the filter is accepted instead. Any
/// listen may take any of them: each hears every change from its opening on.
#[derive(Default)]
pub(super) struct Accepted(Mutex<Vec<(Feed, Feeds)>>);

impl Facade {
    /// Accepts a listen's filter as asked, and opens its feeds now (see [`Accepted`]).
    pub(super) fn accept_listen(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let changes = self.changes();
        let opened = (changes.tools(), Feeds::open(changes));
        if let Ok(mut accepted) = self.state.accepted_listens.0.lock() {
            accepted.push(opened);
        }
        requested.clone()
    }

    /// The feeds opened for this listen when it was accepted, else new ones.
    fn accepted_feeds(&self) -> (Feed, Feeds) {
        let taken = match self.state.accepted_listens.0.lock() {
            Ok(mut accepted) => accepted.pop(),
            Err(_) => None,
        };
        taken.unwrap_or_else(|| {
            let changes = self.changes();
            (changes.tools(), Feeds::open(changes))
        })
    }

    /// Follows what the subscription accepted, from the host, until it ends.
    pub(super) async fn forward_subscription(
        &self,
        subscription: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let (tools, Feeds { prompts, resources }) = self.accepted_feeds();
        self.ready(subscription.request_context(), false).await?;
        let client = self.client().await?.clone();
        let accepted = subscription.accepted().clone();
        let sink = subscription.sink().clone();
        let mut forwarders: FuturesUnordered<Forwarder> = FuturesUnordered::new();
        if accepted.tools_list_changed == Some(true) {
            let sink = sink.clone();
            forwarders.push(Box::pin(forward(tools, move || {
                let sink = sink.clone();
                async move { sink.notify_tool_list_changed().await.is_ok() }
            })));
        }
        let wants_prompts = accepted.prompts_list_changed == Some(true);
        let wants_resources = accepted.resources_list_changed == Some(true);
        if wants_prompts || wants_resources {
            if wants_prompts {
                let sink = sink.clone();
                forwarders.push(Box::pin(forward(prompts, move || {
                    let sink = sink.clone();
                    async move { sink.notify_prompt_list_changed().await.is_ok() }
                })));
            }
            if wants_resources {
                let sink = sink.clone();
                forwarders.push(Box::pin(forward(resources, move || {
                    let sink = sink.clone();
                    async move { sink.notify_resource_list_changed().await.is_ok() }
                })));
            }
        }
        // Followed with the client's own subscriptions, so a bridge follows them again on
        // its next daemon; ended with the listen.
        let listener = self.state.following.next_listen();
        let _unfollow = Unfollow(self.state.clone(), listener);
        for uri in accepted.resource_subscriptions.iter().flatten() {
            let params = self.viewed_resource(uri.clone());
            let to = UpdatesTo::Listen(sink.clone());
            self.state
                .following
                .follow_resource(&client, listener, params, to)
                .await
                .map_err(host_error)?;
        }
        let forwarding = async {
            while forwarders.next().await.is_some() {}
            // Nothing more can come; the subscription stays open until the client ends it.
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = subscription.cancelled() => {}
            () = forwarding => {}
        }
        Ok(())
    }
}

/// Ends what a listen followed when it ends (however its future goes).
struct Unfollow(std::sync::Arc<super::State>, Listener);

impl Drop for Unfollow {
    fn drop(&mut self) {
        self.0.following.unfollow(self.1, None);
    }
}

/// Calls `notify` on every change of `feed`, until the feed or the subscription ends.
async fn forward<F, Fut>(mut feed: Feed, notify: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    while feed.changed().await {
        if !notify().await {
            return;
        }
    }
}
