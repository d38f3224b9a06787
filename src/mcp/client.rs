//! Our rmcp client handler: routes progress to the waiting call, reports
//! `tools/list_changed` to the server's supervisor, and answers `roots/list` with the
//! directory the server works in.

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion,
};
#[allow(deprecated)] // roots: deprecated by SEP-2577, still asked for by servers
use rmcp::model::{ListRootsResult, Root};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use tokio::sync::mpsc;

/// What a connection tells its supervisor.
#[derive(Debug)]
pub enum Notice {
    ToolListChanged,
}

#[derive(Clone)]
pub struct Client {
    pub progress: ProgressDispatcher,
    notices: mpsc::UnboundedSender<Notice>,
    /// The one root offered (a `file://` URI).
    root: String,
}

impl Client {
    pub fn new(
        progress: ProgressDispatcher,
        notices: mpsc::UnboundedSender<Notice>,
        root: String,
    ) -> Self {
        Client {
            progress,
            notices,
            root,
        }
    }
}

/// `path` as a `file://` URI, with every byte outside the unreserved set and `/`
/// percent-encoded (RFC 8089, RFC 3986).
pub fn file_uri(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        // Roots without `listChanged`: the root of a connection never changes.
        let mut caps = ClientCapabilities::default();
        caps.roots = Some(Default::default());
        // We speak the `initialize` lifecycle, so offer its newest version (rmcp's `LATEST`
        // is a revision without `initialize`); the launcher checks what the server picks.
        ClientConfig::new(
            caps,
            Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    // Roots are deprecated by SEP-2577, but servers (server-filesystem) still ask for them.
    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(vec![Root::new(self.root.clone())]))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::ToolListChanged);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_uris_encode_what_a_uri_cannot_hold() {
        assert_eq!(
            super::file_uri(std::path::Path::new("/home/a b/ü-x_1.~")),
            "file:///home/a%20b/%C3%BC-x_1.~"
        );
    }
}
