//! The operator's page's methods: `ui.login` mints the one-time code of a link to the page
//! (`toolhost ui`), `audit.recent` gives the page the audit log's last calls.

use std::sync::Arc;

use super::{Api, Error};
use crate::protocol::*;
use crate::ui::Access;

/// The most records `audit.recent` returns: what the page lists.
const MAX_RECENT: usize = 500;

pub(super) fn register(api: &mut Api, access: Arc<Access>) -> anyhow::Result<()> {
    api.method(
        method::UI_LOGIN,
        "A one-time login code for the operator's page (good once, for two minutes), and the page's link on the TCP listener with the code in its fragment.",
        move |_host, _: EmptyParams| {
            let access = access.clone();
            async move {
                let code = access.new_code();
                let url = access
                    .tcp()
                    .map(|addr| format!("http://{}/ui/#code={code}", link_host(addr)));
                Ok(UiLoginResult { code, url })
            }
        },
    )?;
    api.method(
        method::AUDIT_RECENT,
        "The audit log's last calls (at most 500), oldest first.",
        |host, p: AuditRecentParams| async move {
            let limit = p.limit.unwrap_or(MAX_RECENT).min(MAX_RECENT);
            let dir = host.data_dir().to_owned();
            tokio::task::spawn_blocking(move || crate::audit::recent(&dir, limit))
                .await
                .map(|records| AuditRecentResult { records })
                .map_err(Error::server)
        },
    )
}

/// The host part of a link to `addr`: a listener on every address is reached through the
/// loopback, the only origin the page's rule lets act.
fn link_host(addr: std::net::SocketAddr) -> String {
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => format!("127.0.0.1:{}", addr.port()),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => format!("[::1]:{}", addr.port()),
        _ => addr.to_string(),
    }
}
