//! Change notices for open operator pages: whatever the page shows that has no event of its own
//! (calls started or ended, a config applied or refused) rings here, and each page's
//! producer (`rpc/ui.rs`) waits on it instead of comparing the host's state every 100 ms,
//! so an open page on an idle host costs its 1 s metrics and nothing else.
//!
//! One notice for the whole process, not one per host: a notice only makes an open page
//! compare what it told with the host's state, so a notice from another host (tests run
//! several in one process) costs a comparison, never a wrong event.

use std::sync::LazyLock;

use tokio::sync::watch;

static CHANGES: LazyLock<watch::Sender<()>> = LazyLock::new(|| watch::channel(()).0);

/// Tells every open page that something it shows may have changed. Without an open
/// page it is one atomic load.
pub fn changed() {
    if CHANGES.receiver_count() > 0 {
        CHANGES.send_replace(());
    }
}

/// A page's subscription: `changed().await` returns after the next [`changed`].
pub fn subscribe() -> watch::Receiver<()> {
    CHANGES.subscribe()
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_notice_wakes_a_subscriber() {
        let mut rx = super::subscribe();
        super::changed();
        tokio::time::timeout(std::time::Duration::from_secs(1), rx.changed())
            .await
            .unwrap()
            .unwrap();
    }
}
