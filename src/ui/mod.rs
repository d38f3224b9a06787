//! The operator's page (`GET /ui`): its files, who may use it, and how its event stream is
//! written. The HTTP side (routes, the stream's producer over the host's state) is
//! `rpc/ui.rs`; this module knows neither the host nor HTTP, so the host can hold its
//! [`Access`] without an import circle.
//!
//! Who may use the page: a request for data or an action carries a *page token*, which
//! only `POST /ui/login` hands out: on the Unix socket to anyone (reaching the socket is
//! the right already), on TCP for the listener's bearer token or a one-time *login code*
//! (`toolhost ui`), so the raw token never goes into a URL. Page requests from a browser
//! page of another origin are refused with `/mcp`'s rule ([`origin_allowed`]).

pub mod sse;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::audit::Presented;
use crate::lock;

/// One of the page's files.
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static str,
}

const INDEX: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_str!("assets/index.html"),
};

/// The page's files by path. `/ui/oauth` is the page again: where an OAuth sign-in started
/// from the page comes back to.
pub fn asset(path: &str) -> Option<&'static Asset> {
    const SCRIPT: Asset = Asset {
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/app.js"),
    };
    const STYLE: Asset = Asset {
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/app.css"),
    };
    match path {
        "/ui" | "/ui/" | "/ui/oauth" => Some(&INDEX),
        "/ui/app.js" => Some(&SCRIPT),
        "/ui/app.css" => Some(&STYLE),
        _ => None,
    }
}

/// Whether `path` is the page's (the router sends every such request to `rpc/ui.rs`).
pub fn is_ui_path(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// How long a login code from `toolhost ui` stays good: long enough to click the link.
const CODE_LIFETIME: Duration = Duration::from_secs(120);
/// How long a page token stays good (a page left open over a working day).
const PAGE_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// At most this many codes and page tokens are remembered; a new one pushes out the
/// oldest, so nobody can grow the tables without end.
const MAX_CODES: usize = 16;
const MAX_PAGES: usize = 64;

/// The page's login codes and page tokens, and the TCP address links point to. Held by
/// the host: `ui.login` (a socket method) mints codes and `rpc/ui.rs` redeems them.
#[derive(Default)]
pub struct Access {
    codes: Mutex<HashMap<String, (Instant, ())>>,
    /// Each page token with the bearer token its login presented (none: a login code, or
    /// the Unix socket): the page acts as that token's holder.
    pages: Mutex<HashMap<String, (Instant, Option<Presented>)>>,
    /// The bound TCP listener (its real port when config said `:0`), set at start.
    tcp: OnceLock<SocketAddr>,
}

impl Access {
    /// Records the TCP listener's bound address, for the links `toolhost ui` prints.
    pub fn set_tcp(&self, addr: SocketAddr) {
        let _ = self.tcp.set(addr);
    }

    pub fn tcp(&self) -> Option<SocketAddr> {
        self.tcp.get().copied()
    }

    /// A fresh one-time login code, good for [`CODE_LIFETIME`].
    pub fn new_code(&self) -> String {
        let code = secret();
        remember(
            &mut lock(&self.codes),
            code.clone(),
            (),
            CODE_LIFETIME,
            MAX_CODES,
        );
        code
    }

    /// Spends `code`: true once, while it is fresh.
    pub fn redeem(&self, code: &str) -> bool {
        lock(&self.codes)
            .remove(code)
            .is_some_and(|(expires, ())| Instant::now() < expires)
    }

    /// A fresh page token for a login that presented `bearer`.
    pub fn new_page(&self, bearer: Option<Presented>) -> String {
        let token = secret();
        remember(
            &mut lock(&self.pages),
            token.clone(),
            bearer,
            PAGE_LIFETIME,
            MAX_PAGES,
        );
        token
    }

    /// `None` when `token` is no live page token; else the bearer token its login
    /// presented, if any.
    pub fn page(&self, token: &str) -> Option<Option<Presented>> {
        lock(&self.pages)
            .get(token)
            .filter(|(expires, _)| Instant::now() < *expires)
            .map(|(_, bearer)| bearer.clone())
    }
}

/// Adds `key` to `table` until `lifetime` from now, first dropping the expired entries
/// and, when still full, the one that expires first.
fn remember<V>(
    table: &mut HashMap<String, (Instant, V)>,
    key: String,
    value: V,
    lifetime: Duration,
    max: usize,
) {
    let now = Instant::now();
    table.retain(|_, (expires, _)| *expires > now);
    if table.len() >= max {
        if let Some(oldest) = table
            .iter()
            .min_by_key(|(_, (expires, _))| *expires)
            .map(|(k, _)| k.clone())
        {
            table.remove(&oldest);
        }
    }
    table.insert(key, (now + lifetime, value));
}

/// 244 random bits from the OS generator (two v4 UUIDs), as 64 hex digits.
fn secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Whether a request with this `Origin` header may use the page's data and actions: none
/// (not a browser's cross-origin request), or a page on this machine, as for `/mcp`
/// (`protocol::LOCAL_ORIGINS`), so a remote page cannot drive the host through a DNS-rebound
/// name.
pub fn origin_allowed(origin: Option<&str>) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    crate::protocol::LOCAL_ORIGINS.iter().any(|pattern| {
        pattern
            .strip_suffix(":*")
            .and_then(|base| url::Url::parse(base).ok())
            .is_some_and(|base| base.scheme() == url.scheme() && base.host() == url.host())
    }) && url.path() == "/"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_on_this_machine_pass_the_origin_rule() {
        for ok in [
            None,
            Some("http://127.0.0.1:8765"),
            Some("http://localhost:1"),
            Some("https://[::1]:443"),
            Some("http://localhost"),
        ] {
            assert!(origin_allowed(ok), "{ok:?}");
        }
        for bad in [
            "http://evil.example:8765",
            "http://127.0.0.1.evil.example",
            "null",
            "file://",
            "ftp://127.0.0.1",
            "http://192.168.1.5:8765",
        ] {
            assert!(!origin_allowed(Some(bad)), "{bad}");
        }
    }

    #[test]
    fn a_login_code_is_spent_once_and_page_tokens_are_bounded() {
        let access = Access::default();
        let code = access.new_code();
        assert!(!access.redeem("nope"));
        assert!(access.redeem(&code));
        assert!(!access.redeem(&code));
        let first = access.new_page(None);
        assert_eq!(access.page(&first), Some(None));
        for _ in 0..MAX_PAGES {
            access.new_page(None);
        }
        assert!(
            access.page(&first).is_none(),
            "the oldest page token is pushed out"
        );
        assert_eq!(lock(&access.pages).len(), MAX_PAGES);
    }

    #[test]
    fn every_asset_is_served_and_the_first_load_is_small() {
        let total: usize = ["/ui/", "/ui/app.js", "/ui/app.css"]
            .iter()
            .map(|p| asset(p).map_or(0, |a| a.body.len()))
            .sum();
        assert!(total > 0 && total <= 100 * 1024, "{total} bytes");
        assert!(asset("/ui/../Cargo.toml").is_none());
    }
}
