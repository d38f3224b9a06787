//! Our rmcp client handler: routes progress to the waiting call and reports
//! `tools/list_changed` to the server's supervisor.

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
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
}

impl Client {
    pub fn new(progress: ProgressDispatcher, notices: mpsc::UnboundedSender<Notice>) -> Self {
        Client { progress, notices }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        // We speak the `initialize` lifecycle, so offer its newest version (rmcp's `LATEST`
        // is a revision without `initialize`); the launcher checks what the server picks.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
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
