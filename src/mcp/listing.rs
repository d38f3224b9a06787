//! Listing a server's tools, bounded (and with the same bounds its prompts, resources and
//! resource templates, [`list_pages`]). We follow `tools/list` cursors ourselves rather than
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

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, ServiceError};
use rmcp::RoleClient;

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

/// Which list a listing follows: the method asked and what its items are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
    Skills,
}

impl Listing {
    fn method(self) -> &'static str {
        match self {
            Listing::Tools => "tools/list",
            Listing::Prompts => "prompts/list",
            Listing::Resources => "resources/list",
            Listing::ResourceTemplates => "resources/templates/list",
            Listing::Skills => "skills/list",
        }
    }
    fn items(self) -> &'static str {
        match self {
            Listing::Tools => "tools",
            Listing::Prompts => "prompts",
            Listing::Resources => "resources",
            Listing::ResourceTemplates => "resource templates",
            Listing::Skills => "skills",
        }
    }
}

/// Why a listing was given up; shown as the server's `last_error`.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("{} did not answer within {} ms (timeout_ms){}", .list.method(), .timeout.as_millis(), page_note(*.page))]
    Timeout {
        list: Listing,
        page: usize,
        timeout: Duration,
    },
    #[error("{} returned more than {max} pages (max_list_pages)", .list.method())]
    TooManyPages { list: Listing, max: usize },
    #[error("{} returned more than {max} {} (max_tools)", .list.method(), .list.items())]
    TooManyItems { list: Listing, max: usize },
    #[error("{} failed{}: {source}", .list.method(), page_note(*.page))]
    Failed {
        list: Listing,
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

/// Every tool the server lists, within `bounds`.
pub async fn list_tools(peer: &Peer<RoleClient>, bounds: Bounds) -> Result<Vec<Tool>, ListError> {
    list_pages(Listing::Tools, bounds, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_tools(Some(params)).await?;
        Ok((listed.tools, listed.next_cursor))
    })
    .await
}

/// Every item of a paged list, within `bounds` (`max_tools` caps the items of every kind
/// of list). `page` asks for the page at a cursor and answers its items and next cursor.
/// A page request given up at its timeout is cancelled upstream (rmcp sends
/// `notifications/cancelled` when its request future is dropped).
pub async fn list_pages<T, F, Fut>(
    list: Listing,
    bounds: Bounds,
    mut page: F,
) -> Result<Vec<T>, ListError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    for n in 1..=bounds.max_pages {
        let (listed, next) = tokio::time::timeout(bounds.page_timeout, page(cursor))
            .await
            .map_err(|_| ListError::Timeout {
                list,
                page: n,
                timeout: bounds.page_timeout,
            })?
            .map_err(|source| ListError::Failed {
                list,
                page: n,
                source,
            })?;
        if items.len() + listed.len() > bounds.max_tools {
            return Err(ListError::TooManyItems {
                list,
                max: bounds.max_tools,
            });
        }
        items.extend(listed);
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(items),
        }
    }
    Err(ListError::TooManyPages {
        list,
        max: bounds.max_pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_setting_to_change() {
        let t = ListError::Timeout {
            list: Listing::Tools,
            page: 1,
            timeout: Duration::from_secs(30),
        };
        assert_eq!(
            t.to_string(),
            "tools/list did not answer within 30000 ms (timeout_ms)"
        );
        let t = ListError::Timeout {
            list: Listing::Tools,
            page: 3,
            timeout: Duration::from_millis(500),
        };
        assert_eq!(
            t.to_string(),
            "tools/list did not answer within 500 ms (timeout_ms) on page 3"
        );
        assert_eq!(
            ListError::TooManyPages {
                list: Listing::Tools,
                max: 100
            }
            .to_string(),
            "tools/list returned more than 100 pages (max_list_pages)"
        );
        assert_eq!(
            ListError::TooManyItems {
                list: Listing::Tools,
                max: 10_000
            }
            .to_string(),
            "tools/list returned more than 10000 tools (max_tools)"
        );
        assert_eq!(
            ListError::TooManyItems {
                list: Listing::ResourceTemplates,
                max: 5
            }
            .to_string(),
            "resources/templates/list returned more than 5 resource templates (max_tools)"
        );
    }
}
