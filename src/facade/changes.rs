//! The host's list changes (`tools_changed`, `prompts_changed`, `resources_changed`) as the
//! facade hears them: one subscription of each per connection to the host, fanned out to
//! every MCP connection served over it. stdio subscribes once at start (before the client
//! says anything), so a `subscriptions/listen` that the client sends first misses no
//! change made right after its acknowledgement; the daemon's `/mcp` does the same on its
//! one shared connection, where a subscription per MCP session would fill the
//! connection's budget of subscriptions.

use tokio::sync::broadcast;

use crate::client::{Client, ClientError, Notification, Subscription};

pub(super) struct Changes {
    tools: broadcast::Sender<()>,
    prompts: broadcast::Sender<()>,
    resources: broadcast::Sender<()>,
}

/// One listener's view of one kind of change.
pub(super) struct Feed(broadcast::Receiver<()>);

impl Feed {
    /// Waits for the next change (changes while the listener lagged count as one);
    /// `false` once no more can come.
    pub(super) async fn changed(&mut self) -> bool {
        use broadcast::error::RecvError;
        !matches!(self.0.recv().await, Err(RecvError::Closed))
    }
}

impl Changes {
    pub(super) fn new() -> Changes {
        Changes {
            tools: broadcast::Sender::new(1),
            prompts: broadcast::Sender::new(1),
            resources: broadcast::Sender::new(1),
        }
    }

    /// Subscribes `client` to the host's three list changes, fanned out from now on. The
    /// three requests are in flight at once: a bridge's start waits one round trip, not three.
    pub(super) async fn follow(&self, client: &Client) -> Result<(), ClientError> {
        let (tools, prompts, resources) = tokio::try_join!(
            client.subscribe_tools_changed(),
            client.subscribe_prompts_changed(),
            client.subscribe_resources_changed(),
        )?;
        fan_out(tools, self.tools.clone());
        fan_out(prompts, self.prompts.clone());
        fan_out(resources, self.resources.clone());
        Ok(())
    }

    /// Says every list may have changed (the bridge reconnected to a daemon that may
    /// serve other lists than the one before).
    pub(super) fn all_changed(&self) {
        for tx in [&self.tools, &self.prompts, &self.resources] {
            let _ = tx.send(());
        }
    }

    /// Fires on every change of the live registry.
    pub(super) fn tools(&self) -> Feed {
        Feed(self.tools.subscribe())
    }

    /// Fires on every change of the live prompts.
    pub(super) fn prompts(&self) -> Feed {
        Feed(self.prompts.subscribe())
    }

    /// Fires on every change of the live resources or templates.
    pub(super) fn resources(&self) -> Feed {
        Feed(self.resources.subscribe())
    }
}

/// Fans the notifications of `sub` out to `tx`, for as long as the subscription lasts.
fn fan_out<N: Notification + Send + 'static>(mut sub: Subscription<N>, tx: broadcast::Sender<()>) {
    tokio::spawn(async move {
        while let Some(Ok(_)) = sub.next().await {
            let _ = tx.send(());
        }
    });
}
