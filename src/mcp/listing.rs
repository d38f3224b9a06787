//! Listing a server's tools, bounded. We follow `tools/list` cursors ourselves rather than
//! through rmcp's `list_all_tools`, which follows them without limit: a server that hung on
//! a page, or answered every page with another cursor, held its supervisor for as long as it
//! liked, with the listing growing in memory, and a supervisor stuck in a request saw no
//! stop, so a reload that removed the server never killed its process group.
//!
//! Each page gets the server's `timeout_ms`; a listing gets at most `max_list_pages` pages
//! and `max_tools` tools. A listing over either cap is refused whole, never cut to its first
//! tools: a truncated listing would look complete and serve an arbitrary part of the server,
//! and a server that pages on is broken, not large. (A server that really has more tools
//! gets a larger cap in its config.) The error names the cap to raise.

use std::time::Duration;

use rmcp::model::PaginatedRequestParams;
use rmcp::service::{Peer, ServiceError};
use rmcp::RoleClient;
use serde_json::Value;

use crate::config::McpServer;

/// How far one listing may go.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub page_timeout: Duration,
    pub max_pages: usize,
    pub max_tools: usize,
}

impl Bounds {
    pub fn of(cfg: &McpServer) -> Bounds {
        Bounds {
            page_timeout: Duration::from_millis(cfg.timeout_ms),
            max_pages: cfg.max_list_pages,
            max_tools: cfg.max_tools,
        }
    }
}

/// Why a listing was given up; shown as the server's `last_error`.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("tools/list did not answer within {} ms (timeout_ms){}", .timeout.as_millis(), page_note(*.page))]
    Timeout { page: usize, timeout: Duration },
    #[error("tools/list returned more than {0} pages (max_list_pages)")]
    TooManyPages(usize),
    #[error("tools/list returned more than {0} tools (max_tools)")]
    TooManyTools(usize),
    #[error("tools/list failed{}: {source}", page_note(*.page))]
    Failed {
        page: usize,
        #[source]
        source: ServiceError,
    },
}

/// " on page N" for any page after the first.
fn page_note(page: usize) -> String {
    if page > 1 {
        format!(" on page {page}")
    } else {
        String::new()
    }
}

/// Every tool the server lists (as JSON), within `bounds`. A page request given up at its
/// timeout is cancelled upstream (rmcp sends `notifications/cancelled` when its request
/// future is dropped).
pub async fn list_tools(peer: &Peer<RoleClient>, bounds: Bounds) -> Result<Vec<Value>, ListError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for page in 1..=bounds.max_pages {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = tokio::time::timeout(bounds.page_timeout, peer.list_tools(Some(params)))
            .await
            .map_err(|_| ListError::Timeout {
                page,
                timeout: bounds.page_timeout,
            })?
            .map_err(|source| ListError::Failed { page, source })?;
        if tools.len() + listed.tools.len() > bounds.max_tools {
            return Err(ListError::TooManyTools(bounds.max_tools));
        }
        tools.extend(
            listed
                .tools
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok()),
        );
        match listed.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(ListError::TooManyPages(bounds.max_pages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_setting_to_change() {
        let t = ListError::Timeout {
            page: 1,
            timeout: Duration::from_secs(30),
        };
        assert_eq!(
            t.to_string(),
            "tools/list did not answer within 30000 ms (timeout_ms)"
        );
        let t = ListError::Timeout {
            page: 3,
            timeout: Duration::from_millis(500),
        };
        assert_eq!(
            t.to_string(),
            "tools/list did not answer within 500 ms (timeout_ms) on page 3"
        );
        assert_eq!(
            ListError::TooManyPages(100).to_string(),
            "tools/list returned more than 100 pages (max_list_pages)"
        );
        assert_eq!(
            ListError::TooManyTools(10_000).to_string(),
            "tools/list returned more than 10000 tools (max_tools)"
        );
    }
}
