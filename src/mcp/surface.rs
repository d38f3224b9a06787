//! The rest of what a server offers besides tools: its prompts, resources and resource
//! templates, listed when it connects (bounded like tools, see [`listing`]), listed again
//! on its `prompts/list_changed` and `resources/list_changed`, and gathered into one live
//! [`Catalog`] over every server, in config order.
//!
//! [`Hub`] holds each server's last listing under the server's name (an entry is made when
//! the server is started, so the catalog follows config order, and kept when a reload
//! replaces the server, so a reconnect that lists the same again changes nothing). Every
//! change rebuilds the catalog, and a catalog whose prompts (or resources and templates)
//! differ from the last one is one `prompts_changed` (or `resources_changed`) event.
//!
//! A resource's URI stays the server's own. A URI or template that two servers both list
//! is served by the first in config order; the other's claim is a [`ResourceClash`] in
//! its `mcp.status`. Prompts are named like tools ([`public_name`]); a prompt name taken
//! by an earlier server is left out in the same way as a tool's, and reported like one in
//! `host.health` `clashes`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use indexmap::IndexMap;
use rmcp::model::PaginatedRequestParams;
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::broadcast;

use super::listing::{self, Bounds, ListError, Listing};
use super::naming::public_name;
use super::skills::{self, Listed};
use crate::lock;
use crate::protocol::{
    NameClash, PromptArgument, PromptEntry, PromptsChanged, ResourceClash, ResourceEntry,
    ResourceTemplateEntry, ResourcesChanged,
};
use crate::registry::SourceKey;

/// What one server offers besides tools, as last listed (also kept across restarts with
/// its tools, `list_cache.rs`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ServerSurface {
    /// Each prompt under its catalog name, with the server's own name for it.
    pub prompts: Vec<(PromptEntry, String)>,
    pub resources: Vec<ResourceEntry>,
    pub templates: Vec<ResourceTemplateEntry>,
    /// Its skills (the skills extension, listed with the resources: [`super::skills`]).
    pub skills: Vec<Listed>,
    /// The server declared `resources.subscribe`.
    pub subscribe: bool,
}

/// Which list a server said has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Prompts,
    Resources,
}

/// Lists everything of `kinds` that the server's capabilities declare, within `bounds`;
/// what they do not declare is empty.
pub async fn list(
    server: &str,
    prefixed: bool,
    peer: &Peer<RoleClient>,
    bounds: Bounds,
    kinds: &[Kind],
    mut into: ServerSurface,
) -> Result<ServerSurface, ListError> {
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let prompts = caps.as_ref().is_some_and(|c| c.prompts.is_some());
    let resources = caps.as_ref().and_then(|c| c.resources.as_ref());
    into.subscribe = resources.is_some_and(|r| r.subscribe == Some(true));
    if kinds.contains(&Kind::Prompts) {
        into.prompts = if prompts {
            list_prompts(server, prefixed, peer, bounds).await?
        } else {
            Vec::new()
        };
    }
    if kinds.contains(&Kind::Resources) {
        (into.resources, into.templates, into.skills) = match resources {
            Some(_) => (
                list_resources(server, peer, bounds).await?,
                list_templates(server, peer, bounds).await?,
                skills::list(server, prefixed, peer, bounds).await?,
            ),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
    }
    Ok(into)
}

/// An rmcp list item as one of our entries, through their common MCP JSON, with `server`
/// added; an item that does not fit is left out with a warning.
fn entry<T: DeserializeOwned>(server: &str, item: &impl serde::Serialize) -> Option<T> {
    let mut json = serde_json::to_value(item).ok()?;
    if let Value::Object(o) = &mut json {
        o.insert("server".into(), server.into());
    }
    serde_json::from_value(json)
        .map_err(|e| tracing::warn!(%server, %e, "an MCP list item was left out"))
        .ok()
}

async fn list_prompts(
    server: &str,
    prefixed: bool,
    peer: &Peer<RoleClient>,
    bounds: Bounds,
) -> Result<Vec<(PromptEntry, String)>, ListError> {
    listing::list_pages(Listing::Prompts, bounds, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_prompts(Some(params)).await?;
        let prompts = listed.prompts.iter().map(|p| {
            let arguments = p.arguments.iter().flatten();
            let entry = PromptEntry {
                name: public_name(server, prefixed, &p.name),
                title: p.title.clone(),
                description: p.description.clone(),
                arguments: arguments
                    .map(|a| PromptArgument {
                        name: a.name.clone(),
                        title: a.title.clone(),
                        description: a.description.clone(),
                        required: a.required == Some(true),
                    })
                    .collect(),
                server: server.to_owned(),
            };
            (entry, p.name.clone())
        });
        Ok((prompts.collect(), listed.next_cursor))
    })
    .await
}

async fn list_resources(
    server: &str,
    peer: &Peer<RoleClient>,
    bounds: Bounds,
) -> Result<Vec<ResourceEntry>, ListError> {
    listing::list_pages(Listing::Resources, bounds, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_resources(Some(params)).await?;
        let items = listed.resources.iter().filter_map(|r| entry(server, r));
        Ok((items.collect(), listed.next_cursor))
    })
    .await
}

async fn list_templates(
    server: &str,
    peer: &Peer<RoleClient>,
    bounds: Bounds,
) -> Result<Vec<ResourceTemplateEntry>, ListError> {
    listing::list_pages(Listing::ResourceTemplates, bounds, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_resource_templates(Some(params)).await?;
        let items = listed
            .resource_templates
            .iter()
            .filter_map(|r| entry(server, r));
        Ok((items.collect(), listed.next_cursor))
    })
    .await
}

/// The live catalog over every server: what `list_prompts`, `list_resources` and
/// `list_resource_templates` answer, and who serves what.
#[derive(Debug, Default)]
pub struct Catalog {
    /// By catalog name: the entry and the server's own name for the prompt.
    pub prompts: IndexMap<String, (PromptEntry, String)>,
    /// By URI; `server` is the owner.
    pub resources: IndexMap<String, ResourceEntry>,
    /// By template; `server` is the owner.
    pub templates: IndexMap<String, ResourceTemplateEntry>,
    /// The servers' skills by catalog name (`mcp_<server>_<name>`; the first wins).
    pub skills: IndexMap<String, Listed>,
    /// The URIs and templates each server lists but does not serve.
    pub clashes: HashMap<String, Vec<ResourceClash>>,
    /// Prompt names a later prompt (of another server, or the same) also came out as.
    pub prompt_clashes: Vec<NameClash>,
    /// Skill names a later skill also came out as (`"prefix": false` servers), which one
    /// is used and why, as `host.health` says it of the host's own skills.
    pub skill_clashes: Vec<String>,
}

impl Catalog {
    fn build(servers: &IndexMap<String, ServerSurface>) -> Catalog {
        let mut c = Catalog::default();
        for (name, s) in servers {
            for (p, remote) in &s.prompts {
                match c.prompts.entry(p.name.clone()) {
                    indexmap::map::Entry::Vacant(v) => {
                        v.insert((p.clone(), remote.clone()));
                    }
                    indexmap::map::Entry::Occupied(o) => c.prompt_clashes.push(NameClash {
                        name: p.name.clone(),
                        kept: SourceKey::Mcp(o.get().0.server.clone()).to_string(),
                        dropped: SourceKey::Mcp(name.clone()).to_string(),
                    }),
                }
            }
            let mut clash = |uri: &str, kept: &str| {
                if kept != name {
                    c.clashes
                        .entry(name.clone())
                        .or_default()
                        .push(ResourceClash {
                            uri: uri.to_owned(),
                            kept: kept.to_owned(),
                        });
                }
            };
            for k in &s.skills {
                match c.skills.entry(k.name.clone()) {
                    indexmap::map::Entry::Vacant(v) => {
                        v.insert(k.clone());
                    }
                    indexmap::map::Entry::Occupied(o) => c.skill_clashes.push(format!(
                        "skill '{}' is defined twice: MCP server '{}' ({}) is used, MCP server '{name}' ({}) is ignored (the first server in config order wins)",
                        k.name,
                        o.get().server,
                        o.get().skill.uri,
                        k.skill.uri
                    )),
                }
            }
            // A file of the server's skills is served verified, under the host's URI
            // for it (`skills.rs`), never relayed as it came.
            let of_a_skill = |uri: &str| s.skills.iter().any(|k| k.contains(uri));
            for r in s.resources.iter().filter(|r| !of_a_skill(&r.uri)) {
                let kept = c
                    .resources
                    .entry(r.uri.clone())
                    .or_insert_with(|| r.clone());
                clash(&r.uri, &kept.server);
            }
            for t in &s.templates {
                let kept = c
                    .templates
                    .entry(t.uri_template.clone())
                    .or_insert_with(|| t.clone());
                clash(&t.uri_template, &kept.server);
            }
        }
        c
    }

    fn prompts_changed(&self) -> PromptsChanged {
        PromptsChanged {
            prompts: self.prompts.len(),
        }
    }

    fn resources_changed(&self) -> ResourcesChanged {
        ResourcesChanged {
            resources: self.resources.len(),
            templates: self.templates.len(),
        }
    }

    fn same_prompts(&self, other: &Catalog) -> bool {
        self.prompts.values().eq(other.prompts.values())
    }

    fn same_resources(&self, other: &Catalog) -> bool {
        self.resources.values().eq(other.resources.values())
            && self.templates.values().eq(other.templates.values())
            && self.skills.values().eq(other.skills.values())
    }
}

/// What the hub tells the socket's subscribers.
#[derive(Debug, Clone)]
pub enum Event {
    Prompts(PromptsChanged),
    Resources(ResourcesChanged),
    /// The servers' skills changed (a server's listing, or a server coming or going).
    Skills,
    /// `server` sent `notifications/resources/updated` for `uri`.
    Updated {
        server: String,
        uri: String,
    },
}

/// Every server's surface, the catalog built from them, and the events of both.
pub struct Hub {
    servers: Mutex<IndexMap<String, ServerSurface>>,
    catalog: ArcSwap<Catalog>,
    events: broadcast::Sender<Event>,
    /// Subscribers per (server, URI): the first one subscribes upstream, the last one
    /// gone unsubscribes.
    pub(super) subscribers: Mutex<HashMap<(String, String), usize>>,
    /// Told when `subscribers` gains or loses a (server, URI): a server of the 2026-07-28
    /// era then gets its `subscriptions/listen` again with the new set (`listen.rs`).
    subscriptions: tokio::sync::watch::Sender<()>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            servers: Mutex::default(),
            catalog: ArcSwap::default(),
            events: broadcast::Sender::new(256),
            subscribers: Mutex::default(),
            subscriptions: tokio::sync::watch::Sender::new(()),
        }
    }
}

impl Hub {
    /// Wakes when the set of subscribed (server, URI) pairs changes.
    pub(super) fn subscriptions_changed(&self) -> tokio::sync::watch::Receiver<()> {
        self.subscriptions.subscribe()
    }

    /// The set of subscribed (server, URI) pairs changed.
    pub(super) fn subscribers_changed(&self) {
        self.subscriptions.send_replace(());
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// A server was started: its entry goes (or stays) at its place in config order. A
    /// replaced server keeps its last listing until it lists again; a disabled one
    /// offers nothing.
    pub(super) fn started(&self, server: &str, enabled: bool) {
        self.change(|servers| {
            let entry = servers.entry(server.to_owned()).or_default();
            if !enabled {
                *entry = ServerSurface::default();
            }
        });
    }

    pub(super) fn removed(&self, server: &str) {
        self.change(|servers| {
            servers.shift_remove(server);
        });
    }

    /// A server's new listing.
    pub(super) fn listed(&self, server: &str, surface: ServerSurface) {
        self.change(|servers| {
            if let Some(entry) = servers.get_mut(server) {
                *entry = surface;
            }
        });
    }

    /// The server's last listing (the base a partial relisting starts from).
    pub(super) fn of(&self, server: &str) -> ServerSurface {
        lock(&self.servers).get(server).cloned().unwrap_or_default()
    }

    pub(super) fn updated(&self, server: &str, uri: String) {
        let _ = self.events.send(Event::Updated {
            server: server.to_owned(),
            uri,
        });
    }

    /// Applies `edit`, rebuilds the catalog and sends an event per list that changed. The
    /// lock is held throughout, so two changes cannot publish out of order.
    fn change(&self, edit: impl FnOnce(&mut IndexMap<String, ServerSurface>)) {
        let mut servers = lock(&self.servers);
        edit(&mut servers);
        let new = Catalog::build(&servers);
        let old = self.catalog.load();
        if !new.same_prompts(&old) {
            let _ = self.events.send(Event::Prompts(new.prompts_changed()));
        }
        if !new.same_resources(&old) {
            let _ = self.events.send(Event::Resources(new.resources_changed()));
        }
        if !new.skills.values().eq(old.skills.values()) {
            let _ = self.events.send(Event::Skills);
        }
        self.catalog.store(Arc::new(new));
    }
}

/// Listing again after a server's `list_changed`, beside its supervisor's other waits: a
/// later change of the same list replaces a listing still under way, and every listing
/// ends with the connection (the tasks are aborted when this is dropped).
#[derive(Default)]
pub struct Follower {
    tasks: Vec<(Kind, tokio::task::AbortHandle)>,
}

impl Follower {
    pub fn changed(&mut self, server: &Arc<super::Server>, peer: &Peer<RoleClient>, kind: Kind) {
        self.tasks.retain(|(k, task)| {
            let keep = *k != kind && !task.is_finished();
            if *k == kind {
                task.abort();
            }
            keep
        });
        let (server, peer) = (server.clone(), peer.clone());
        let task = tokio::spawn(async move {
            let cfg = server.config();
            let base = server.runtime.surface.of(server.name());
            match list(
                server.name(),
                cfg.prefix,
                &peer,
                Bounds::of(&cfg),
                &[kind],
                base,
            )
            .await
            {
                Ok(surface) => server.surface_listed(surface),
                Err(e) => {
                    tracing::warn!(server = %server.name(), error = %e, "listing again after list_changed failed; the previous listing stays");
                }
            }
        });
        self.tasks.push((kind, task.abort_handle()));
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        for (_, task) in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(uri: &str, server: &str) -> ResourceEntry {
        ResourceEntry {
            uri: uri.into(),
            name: uri.into(),
            title: None,
            description: None,
            mime_type: None,
            size: None,
            annotations: None,
            server: server.into(),
        }
    }

    #[test]
    fn the_first_server_in_config_order_serves_a_shared_uri() {
        let hub = Hub::default();
        let mut events = hub.subscribe();
        hub.started("a", true);
        hub.started("b", true);
        let b = ServerSurface {
            resources: vec![resource("x://shared", "b"), resource("x://b", "b")],
            ..Default::default()
        };
        hub.listed("b", b);
        let a = ServerSurface {
            resources: vec![resource("x://shared", "a")],
            ..Default::default()
        };
        hub.listed("a", a.clone());
        let c = hub.catalog();
        assert_eq!(c.resources["x://shared"].server, "a");
        assert_eq!(c.resources.len(), 2);
        assert_eq!(
            c.clashes["b"],
            vec![ResourceClash {
                uri: "x://shared".into(),
                kept: "a".into()
            }]
        );
        assert!(!c.clashes.contains_key("a"));
        // Two listings that changed the resources: two events, and none for the same again.
        assert!(matches!(events.try_recv(), Ok(Event::Resources(_))));
        assert!(matches!(events.try_recv(), Ok(Event::Resources(_))));
        hub.listed("a", a);
        assert!(events.try_recv().is_err());
        hub.removed("a");
        assert_eq!(hub.catalog().resources["x://shared"].server, "b");
        assert!(matches!(events.try_recv(), Ok(Event::Resources(_))));
    }
}
