//! Our rmcp client handler: routes progress to the waiting call, reports
//! `tools/list_changed`, `prompts/list_changed`, `resources/list_changed` and
//! `resources/updated` to the server's supervisor, and answers `roots/list` with the
//! directory the server works in.

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
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
    /// `prompts/list_changed` or `resources/list_changed`.
    ListChanged(super::surface::Kind),
    /// `resources/updated` for this URI.
    ResourceUpdated(String),
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

/// `path` as a `file://` URI (RFC 8089), any bytes a URI cannot hold percent-encoded, so
/// a path that is not UTF-8 is named exactly too. A relative path is taken from the
/// daemon's working directory.
pub fn file_uri(path: &std::path::Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    url::Url::from_file_path(abs).map_or_else(|()| "file:///".to_owned(), String::from)
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

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self
            .notices
            .send(Notice::ListChanged(super::surface::Kind::Prompts));
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self
            .notices
            .send(Notice::ListChanged(super::surface::Kind::Resources));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let _ = self.notices.send(Notice::ResourceUpdated(params.uri));
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
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = std::ffi::OsStr::from_bytes(b"/tmp/a\xff%b#?");
        assert_eq!(
            super::file_uri(std::path::Path::new(not_utf8)),
            "file:///tmp/a%FF%25b%23%3F"
        );
        let back = url::Url::parse(&super::file_uri(std::path::Path::new(not_utf8)))
            .unwrap()
            .to_file_path()
            .unwrap();
        assert_eq!(back.as_os_str(), not_utf8);
    }
}
