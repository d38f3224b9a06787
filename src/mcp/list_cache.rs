//! The last listing of each MCP server (its tools, prompts, resources and templates), kept
//! across restarts of the daemon in `<data_dir>/mcp-tools/<server>.json`, so that a lazy
//! server is listed before it has ever run in this daemon (proto-docs/config.md, lifecycle).
//!
//! Beside `pins.json` and for the same reasons a small JSON file rather than a sled tree:
//! written only when a listing differs from the one kept, read once when the server starts,
//! and an operator can read or delete it. One file a server, so a listing rewrites only its
//! own server's file. A listing is kept with the digest of the launch config that produced
//! it ([`launch_digest`]): a server whose command, arguments, environment, `cwd`, URL or
//! headers changed is another program and is started to be listed again, never served the
//! old program's tools.
//!
//! A missing, unreadable or foreign file is only a cache miss: the server is started to
//! learn its tools, and its listing replaces the file. The kept definitions are no more
//! trusted than live ones: they pass the catalog's pins like any listing, and a call that
//! names a tool the server no longer has fails as such a call always does.

use std::path::{Path, PathBuf};

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::surface::ServerSurface;
use crate::atomic_file::{write_atomic, Durability};
use crate::config::McpServer;

/// The largest listing file read (ten thousand tools with large schemas fit easily).
const MAX_LIST_BYTES: u64 = 64 * 1024 * 1024;

/// The listing files of one daemon.
pub struct ListCache {
    dir: PathBuf,
}

/// One server's file.
#[derive(Default, Serialize, Deserialize)]
struct Kept {
    /// [`launch_digest`] of the config that listed what follows.
    launch: String,
    /// The `tools/list` entries as the server sent them.
    tools: Option<Vec<Tool>>,
    /// Its prompts, resources and templates, if listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    surface: Option<KeptSurface>,
}

/// A server's prompts, resources and templates: their catalog names depend on `prefix`.
#[derive(Serialize, Deserialize)]
struct KeptSurface {
    prefix: bool,
    listing: ServerSurface,
}

/// What a server listed when last run with the same launch config.
pub struct Listing {
    pub tools: Vec<Tool>,
    /// Absent when not listed, or listed under another `prefix`.
    pub surface: Option<ServerSurface>,
}

impl ListCache {
    /// The cache of the daemon whose data dir is `data_dir`.
    pub fn new(data_dir: &Path) -> ListCache {
        ListCache {
            dir: data_dir.join("mcp-tools"),
        }
    }

    /// Server names match `^[A-Za-z0-9_-]+$` (config validation), so they are file names.
    fn path(&self, server: &str) -> PathBuf {
        self.dir.join(format!("{server}.json"))
    }

    /// The file of `server` if it is of `cfg`'s launch config.
    fn read(&self, server: &str, cfg: &McpServer) -> Option<Kept> {
        let path = self.path(server);
        let bytes = crate::safe_read::read_path(&path, MAX_LIST_BYTES).ok()?;
        match serde_json::from_slice::<Kept>(&bytes) {
            Ok(kept) if kept.launch == launch_digest(cfg) => Some(kept),
            Ok(_) => {
                tracing::info!(server, "the kept listing is of another launch config; the server is started to list again");
                None
            }
            Err(e) => {
                tracing::warn!(server, file = %path.display(), error = %e, "the kept listing cannot be read; the server is started to list again");
                None
            }
        }
    }

    /// What `server` listed when last run with the launch config of `cfg`, if kept.
    pub fn load(&self, server: &str, cfg: &McpServer) -> Option<Listing> {
        let kept = self.read(server, cfg)?;
        Some(Listing {
            tools: kept.tools?,
            surface: kept
                .surface
                .filter(|s| s.prefix == cfg.prefix)
                .map(|s| s.listing),
        })
    }

    /// Keeps `tools` as `server`'s tool listing under `cfg`'s launch config.
    pub fn store_tools(&self, server: &str, cfg: &McpServer, tools: &[Tool]) {
        self.update(server, cfg, |kept| kept.tools = Some(tools.to_vec()));
    }

    /// Keeps `surface` as `server`'s prompts, resources and templates.
    pub fn store_surface(&self, server: &str, cfg: &McpServer, surface: &ServerSurface) {
        self.update(server, cfg, |kept| {
            kept.surface = Some(KeptSurface {
                prefix: cfg.prefix,
                listing: surface.clone(),
            });
        });
    }

    /// Rewrites one part of the file (the rest kept if of the same launch config). A file
    /// that would not change is not written; a failure to write is logged and costs only
    /// the next lazy start its head start.
    fn update(&self, server: &str, cfg: &McpServer, edit: impl FnOnce(&mut Kept)) {
        let path = self.path(server);
        let mut kept = self.read(server, cfg).unwrap_or_else(|| Kept {
            launch: launch_digest(cfg),
            ..Kept::default()
        });
        let Ok(old) = serde_json::to_vec(&kept) else {
            return;
        };
        edit(&mut kept);
        let Ok(bytes) = serde_json::to_vec(&kept) else {
            return;
        };
        if bytes == old && path.exists() {
            return;
        }
        if let Err(e) = write_atomic(&path, &bytes, Durability::Atomic) {
            tracing::warn!(server, file = %path.display(), error = %e, "cannot keep the listing");
        }
    }
}

/// A digest of what makes a server the program it is: its transport, command, arguments,
/// environment, `cwd`, sandbox, URL and headers. Filters, naming, timeouts and lifecycle
/// keys are left out: they change what is served of a listing, not the listing. Only the
/// digest is written, never the values (headers and environment may hold secrets).
pub fn launch_digest(cfg: &McpServer) -> String {
    let launch = json!({
        "transport": cfg.transport(),
        "command": cfg.command,
        "args": cfg.args,
        "env": cfg.env,
        "env_passthrough": cfg.env_passthrough,
        "cwd": cfg.cwd,
        "sandbox": cfg.sandbox,
        "url": cfg.url,
        "headers": cfg.headers,
    });
    hex::encode(Sha256::digest(launch.to_string().as_bytes()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn server(args: &[&str]) -> McpServer {
        McpServer {
            command: Some("srv".into()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..McpServer::default()
        }
    }

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "", rmcp::model::JsonObject::new())
    }

    #[test]
    fn a_listing_is_kept_for_its_launch_config_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ListCache::new(dir.path());
        let tools = vec![tool("echo")];
        let tools_of = |cfg: &McpServer| cache.load("fx", cfg).map(|l| l.tools);
        assert_eq!(tools_of(&server(&["a"])), None);
        cache.store_tools("fx", &server(&["a"]), &tools);
        assert_eq!(tools_of(&server(&["a"])), Some(tools.clone()));
        // Other arguments are another program; other filters or timeouts are not.
        assert_eq!(tools_of(&server(&["b"])), None);
        let filtered = McpServer {
            include_tools: vec!["echo".into()],
            timeout_ms: 5,
            idle_stop_s: Some(3),
            ..server(&["a"])
        };
        assert_eq!(tools_of(&filtered), Some(tools));
        assert!(cache.load("other", &server(&["a"])).is_none());
    }

    #[test]
    fn the_surface_is_kept_beside_the_tools_for_its_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ListCache::new(dir.path());
        let cfg = server(&[]);
        let surface = ServerSurface {
            subscribe: true,
            ..ServerSurface::default()
        };
        cache.store_surface("fx", &cfg, &surface);
        // Prompts and resources alone are no tool listing to start lazily from.
        assert!(cache.load("fx", &cfg).is_none());
        cache.store_tools("fx", &cfg, &[tool("t")]);
        let kept = cache.load("fx", &cfg).unwrap();
        assert_eq!(kept.surface, Some(surface));
        let unprefixed = McpServer {
            prefix: false,
            ..cfg
        };
        assert_eq!(cache.load("fx", &unprefixed).unwrap().surface, None);
    }

    #[test]
    fn a_damaged_file_is_a_miss_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ListCache::new(dir.path());
        std::fs::create_dir_all(dir.path().join("mcp-tools")).unwrap();
        std::fs::write(dir.path().join("mcp-tools/fx.json"), b"{\"launch\": tru").unwrap();
        assert!(cache.load("fx", &server(&[])).is_none());
        cache.store_tools("fx", &server(&[]), &[tool("t")]);
        assert_eq!(
            cache.load("fx", &server(&[])).map(|l| l.tools),
            Some(vec![tool("t")])
        );
    }

    #[test]
    fn secrets_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ListCache::new(dir.path());
        let mut cfg = server(&[]);
        cfg.env.insert("TOKEN".into(), "s3cret-value".into());
        cache.store_tools("fx", &cfg, &[]);
        let text = std::fs::read_to_string(dir.path().join("mcp-tools/fx.json")).unwrap();
        assert!(!text.contains("s3cret-value"), "{text}");
    }
}
