//! An immutable view of the registry at one revision, with its serialised lists cached.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::tool::openai_definition;
use super::{SourceKey, Tool};
use crate::catalog::ToolSource;
use crate::catalog::{self, index::Index, Pin, Pins, Policy, Verdict, DEFAULT_LIMIT, MAX_LIMIT};
use crate::protocol::ApprovalClass;
use crate::protocol::{
    ListToolsResult, McpTool, OpenAiTool, QuarantinedTool, SearchMatch, ToolEntry, ToolFormat,
    ToolMeta, ToolSourceKind, ToolsSearchResult,
};

/// A registered tool with what the host derives from it once per registration.
pub struct Entry {
    pub tool: Arc<dyn Tool>,
    /// The class in force: the config's override, else the tool's own.
    pub approval: Option<ApprovalClass>,
    openai: OpenAiTool,
    mcp: McpTool,
    meta: ToolMeta,
    /// Compiled lazily on the first call and kept while the tool is unchanged.
    validator: OnceLock<Result<jsonschema::Validator, String>>,
    /// Estimated tokens of the listed definition (for the catalog budget).
    tokens: usize,
    /// Pin hash and screening of the definition, computed once per registration.
    pin_hash: String,
    flags: Vec<String>,
}

impl Entry {
    fn new(tool: Arc<dyn Tool>, approval: Option<ApprovalClass>) -> Self {
        let spec = tool.spec();
        let openai = openai_definition(tool.as_ref());
        let mcp = McpTool {
            name: spec.name.clone(),
            title: tool.title().map(str::to_owned),
            description: spec.description.clone(),
            input_schema: spec.parameters.clone(),
            output_schema: tool.output_schema().cloned(),
            annotations: spec.annotations.clone(),
        };
        let (source, server) = match &spec.source {
            ToolSource::Builtin => (ToolSourceKind::Builtin, None),
            ToolSource::Custom { .. } => (ToolSourceKind::Custom, None),
            ToolSource::Mcp { server, .. } => (ToolSourceKind::Mcp, Some(server.clone())),
        };
        let meta = ToolMeta {
            source,
            server,
            approval,
            hidden: spec.hidden,
            deferrable: spec.deferrable,
            deferred: false,
            annotations: spec.annotations.clone(),
        };
        let tokens = catalog::estimate_tokens(serde_json::to_vec(&openai).map_or(0, |v| v.len()));
        let (pin_hash, flags) = match spec.source {
            ToolSource::Builtin => (String::new(), Vec::new()),
            _ => (
                catalog::pin_hash(spec, &mcp),
                catalog::screen_definition(&mcp),
            ),
        };
        Entry {
            tool,
            approval,
            openai,
            mcp,
            meta,
            validator: OnceLock::new(),
            tokens,
            pin_hash,
            flags,
        }
    }

    /// The definition as pinned and as shown by `tools.diff` (MCP format).
    pub fn definition(&self) -> &McpTool {
        &self.mcp
    }

    /// The pin of the definition as it is now.
    pub fn pin(&self) -> Pin {
        Pin {
            hash: self.pin_hash.clone(),
            definition: self.mcp.clone(),
        }
    }

    pub fn hidden(&self) -> bool {
        self.meta.hidden
    }

    /// The compiled argument validator (an invalid schema is reported as a call failure).
    pub fn validator(&self) -> Result<&jsonschema::Validator, &str> {
        self.validator
            .get_or_init(|| {
                super::compile_schema(&self.tool.spec().parameters)
                    .map_err(|e| format!("the tool's parameter schema is invalid: {e}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    fn same_as(&self, other: &Entry) -> bool {
        self.openai == other.openai
            && self.mcp == other.mcp
            && self.approval == other.approval
            && self.meta.hidden == other.meta.hidden
            && self.meta.deferrable == other.meta.deferrable
            && self.meta.server == other.meta.server
    }
}

/// A name claimed by more than one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub name: String,
    pub kept: SourceKey,
    pub dropped: SourceKey,
}

#[derive(Default)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The catalog's inputs to a snapshot build: the config's rules and the pin table.
pub struct CatalogState {
    pub policy: Policy,
    pub pins: Arc<Pins>,
}

pub struct Snapshot {
    revision: u64,
    /// Callable tools (quarantined ones are not among them).
    tools: IndexMap<String, Arc<Entry>>,
    collisions: Vec<Collision>,
    etag: String,
    /// Tools left out of `list_tools` unless `include_deferred` (see `catalog`).
    deferred: HashSet<String>,
    /// Tools held back until approved, with the definition they have now.
    quarantined: IndexMap<String, (Arc<Entry>, QuarantinedTool)>,
    /// `list_tools` answers, serialised once per revision:
    /// [format][include_hidden][include_deferred].
    lists: [[[OnceLock<Box<RawValue>>; 2]; 2]; 2],
    /// The search index over deferred tools, built on the first search of this snapshot.
    index: OnceLock<Index>,
}

impl Snapshot {
    /// Ranks the snapshot's deferred tools for `query` and returns full definitions of
    /// those `serves` lets through (a profile's view).
    pub fn search(
        &self,
        query: &str,
        limit: Option<usize>,
        format: ToolFormat,
        serves: impl Fn(&Entry) -> bool,
    ) -> ToolsSearchResult {
        let limit = limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
        let mut hits = self.search_index().search(query, MAX_LIMIT);
        hits.retain(|(n, _)| self.tools.get(*n).is_some_and(|e| serves(e)));
        hits.truncate(limit);
        let names: Vec<&str> = hits.iter().map(|(n, _)| *n).collect();
        let list = self.list(&names, format);
        ToolsSearchResult {
            tools: list.tools,
            matches: hits
                .iter()
                .map(|(n, s)| SearchMatch {
                    name: (*n).to_owned(),
                    score: (s * 1000.0).round() / 1000.0,
                })
                .collect(),
            meta: list.meta,
        }
    }

    pub fn empty() -> Self {
        Self::from_tools(IndexMap::new(), Vec::new(), HashSet::new(), IndexMap::new())
    }

    fn from_tools(
        tools: IndexMap<String, Arc<Entry>>,
        collisions: Vec<Collision>,
        deferred: HashSet<String>,
        quarantined: IndexMap<String, (Arc<Entry>, QuarantinedTool)>,
    ) -> Self {
        let etag = etag_of(
            tools
                .iter()
                .filter(|(n, e)| !e.hidden() && !deferred.contains(*n))
                .map(|(_, e)| &e.openai),
        );
        Snapshot {
            revision: 0,
            tools,
            collisions,
            etag,
            deferred,
            quarantined,
            lists: Default::default(),
            index: OnceLock::new(),
        }
    }

    /// Builds the next snapshot, reusing entries (and their compiled validators) of `old`
    /// whose tool object and approval are unchanged.
    pub(super) fn build(
        old: &Snapshot,
        sources: &BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
        overrides: &HashMap<String, ApprovalClass>,
        catalog: &CatalogState,
    ) -> Snapshot {
        let mut tools: IndexMap<String, Arc<Entry>> = IndexMap::new();
        let unwrapped;
        let (sources, wrapped) = match wrapped_mcp_tools(sources, overrides) {
            None => (sources, HashMap::new()),
            Some((rest, wrapped)) => {
                unwrapped = rest;
                (&unwrapped, wrapped)
            }
        };
        let (winners, collisions) = claim_names(sources, &catalog.policy);
        let mut quarantined = IndexMap::new();
        let mut new_pins = Vec::new();
        // Changed definitions this member sees: held back by the whole fleet (fleet mode).
        let mut marks = Vec::new();
        // Listed in source order (built-ins, custom, MCP servers by name), each tool only
        // where it won its name.
        for list in sources.values() {
            for tool in list {
                let name = tool.spec().name.clone();
                if !winners.get(&name).is_some_and(|w| Arc::ptr_eq(w, tool)) {
                    continue;
                }
                let approval = overrides
                    .get(&name)
                    .copied()
                    .or(tool.spec().approval)
                    .or_else(|| tool.wraps_mcp_tool().and_then(|w| wrapped.get(&w).copied()));
                let reused = old
                    .tools
                    .get(&name)
                    .or_else(|| old.quarantined.get(&name).map(|q| &q.0));
                let entry = match reused {
                    Some(e) if Arc::ptr_eq(&e.tool, tool) && e.approval == approval => e.clone(),
                    _ => Arc::new(Entry::new(tool.clone(), approval)),
                };
                if let Some(trust) = catalog.policy.trust(&tool.spec().source) {
                    match catalog::verdict(
                        &catalog.pins,
                        trust,
                        &entry.mcp,
                        &entry.pin_hash,
                        &entry.flags,
                        entry.meta.server.as_deref(),
                    ) {
                        Verdict::Accept => {}
                        Verdict::Pin => new_pins.push((name.clone(), entry.pin())),
                        Verdict::Quarantine(q) => {
                            tracing::warn!(tool = %name, reason = ?q.reason, "tool quarantined");
                            if catalog.pins.matches(&name, &entry.pin_hash) == Some(false) {
                                marks.push((name.clone(), entry.pin()));
                            }
                            quarantined.insert(name, (entry, q));
                            continue;
                        }
                    }
                }
                tools.insert(name, entry);
            }
        }
        if let Err(e) = catalog.pins.set_all(new_pins) {
            tracing::warn!(error = %e, "new definitions not pinned");
        }
        catalog.pins.mark(marks);
        let candidates: Vec<catalog::Candidate<'_>> = tools
            .values()
            .filter(|e| !e.hidden())
            .map(|e| catalog::Candidate {
                spec: e.tool.spec(),
                tokens: e.tokens,
            })
            .collect();
        let deferred = catalog::deferred(
            &catalog.policy,
            &candidates,
            super::search_tool::search_tool_tokens(),
        );
        drop(candidates);
        if !deferred.is_empty() && !tools.contains_key(catalog::SEARCH_TOOL) {
            let search = super::search_tool::search_tool();
            let entry = match old.tools.get(catalog::SEARCH_TOOL) {
                Some(e) if Arc::ptr_eq(&e.tool, search) => e.clone(),
                _ => Arc::new(Entry::new(search.clone(), search.spec().approval)),
            };
            tools.insert(catalog::SEARCH_TOOL.to_owned(), entry);
        }
        Snapshot::from_tools(tools, collisions, deferred, quarantined)
    }

    pub(super) fn with_revision(mut self, revision: u64) -> Self {
        self.revision = revision;
        self
    }

    pub(super) fn diff(&self, next: &Snapshot) -> Diff {
        let mut d = Diff::default();
        for (name, e) in &next.tools {
            match self.tools.get(name) {
                None => d.added.push(name.clone()),
                Some(old) if !Arc::ptr_eq(old, e) && !old.same_as(e) => {
                    d.changed.push(name.clone())
                }
                Some(_) => {}
            }
        }
        d.removed = self
            .tools
            .keys()
            .filter(|n| !next.tools.contains_key(*n))
            .cloned()
            .collect();
        d
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Content hash of the visible tool list in `openai` format.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.tools.get(name)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_deferred(&self, name: &str) -> bool {
        self.deferred.contains(name)
    }

    /// A quarantined tool: its current definition and why it is held back.
    pub fn quarantined(&self, name: &str) -> Option<&(Arc<Entry>, QuarantinedTool)> {
        self.quarantined.get(name)
    }

    pub fn quarantined_tools(&self) -> impl Iterator<Item = &QuarantinedTool> {
        self.quarantined.values().map(|(_, q)| q)
    }

    /// The search index over deferred tools (built on first use).
    pub fn search_index(&self) -> &Index {
        self.index.get_or_init(|| {
            Index::build(
                self.tools
                    .iter()
                    .filter(|(n, e)| self.deferred.contains(*n) && !e.hidden())
                    .map(|(_, e)| catalog::index::Doc {
                        name: &e.mcp.name,
                        title: e.mcp.title.as_deref(),
                        description: &e.mcp.description,
                        params: catalog::param_names(&e.mcp.input_schema),
                    }),
            )
        })
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Every tool's public name (hidden and deferred ones too).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Names of listed (not hidden, not deferred) tools, in listing order.
    pub fn visible_names(&self) -> Vec<String> {
        self.visible().map(|(n, _)| n.clone()).collect()
    }

    /// [`visible_names`](Self::visible_names) for a session in `workspace`: without the
    /// tools of other sessions' workspaces.
    pub fn visible_names_in(&self, workspace: &std::path::Path) -> Vec<String> {
        self.visible()
            .filter(|(_, e)| e.tool.workspace_scope().is_none_or(|w| w == workspace))
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn visible(&self) -> impl Iterator<Item = (&String, &Arc<Entry>)> {
        self.tools
            .iter()
            .filter(|(n, e)| !e.hidden() && !self.deferred.contains(*n))
    }

    pub fn collisions(&self) -> &[Collision] {
        &self.collisions
    }

    /// The tools `list_tools` lists, in order, with the flags' choice of hidden and
    /// deferred ones.
    pub fn listed(
        &self,
        include_hidden: bool,
        include_deferred: bool,
    ) -> impl Iterator<Item = (&str, &Arc<Entry>)> {
        self.tools
            .iter()
            .filter(move |(_, e)| include_hidden || !e.hidden())
            .filter(move |(n, _)| include_deferred || !self.deferred.contains(*n))
            .map(|(n, e)| (n.as_str(), e))
    }

    /// The whole `list_tools` answer for the live registry, serialised once per revision.
    pub fn list_json(
        &self,
        format: ToolFormat,
        include_hidden: bool,
        include_deferred: bool,
    ) -> &RawValue {
        let slot = &self.lists[usize::from(format == ToolFormat::Mcp)][usize::from(include_hidden)]
            [usize::from(include_deferred)];
        slot.get_or_init(|| {
            let names: Vec<&str> = self
                .listed(include_hidden, include_deferred)
                .map(|(n, _)| n)
                .collect();
            let result = self.list_in(&names, format, &|e| e.tool.workspace_scope().is_none());
            serde_json::value::to_raw_value(&result).unwrap_or_else(|e| {
                tracing::error!(%e, "serialising list_tools failed");
                RawValue::NULL.to_owned()
            })
        })
    }

    /// A `list_tools` answer restricted to `names` (those not live are skipped), for a
    /// caller served just those.
    pub fn list(&self, names: &[&str], format: ToolFormat) -> ListToolsResult {
        let named: HashSet<&str> = names.iter().copied().collect();
        self.list_in(names, format, &|e| {
            named.contains(e.tool.spec().name.as_str())
        })
    }

    /// A `list_tools` answer restricted to `names`, for a caller served the (non-hidden)
    /// tools `serves` admits: a tool that declares the others ([`Tool::described_among`],
    /// the code tool) declares those.
    pub fn list_in(
        &self,
        names: &[&str],
        format: ToolFormat,
        serves: &dyn Fn(&Entry) -> bool,
    ) -> ListToolsResult {
        let mut tools = Vec::with_capacity(names.len());
        let mut meta = BTreeMap::new();
        for name in names {
            if let Some(e) = self.tools.get(*name) {
                let mut served = self
                    .listed(false, true)
                    .filter(|(_, e)| serves(e))
                    .map(|(n, e)| (e.as_ref(), self.deferred.contains(n)));
                let described = e.tool.described_among(&mut served);
                tools.push(match (format, described) {
                    (ToolFormat::Openai, None) => ToolEntry::Openai(e.openai.clone()),
                    (ToolFormat::Mcp, None) => ToolEntry::Mcp(e.mcp.clone()),
                    (ToolFormat::Openai, Some(d)) => {
                        let mut t = e.openai.clone();
                        t.function.description = d;
                        ToolEntry::Openai(t)
                    }
                    (ToolFormat::Mcp, Some(d)) => {
                        let mut t = e.mcp.clone();
                        t.description = d;
                        ToolEntry::Mcp(t)
                    }
                });
                let mut m = e.meta.clone();
                m.deferred = self.deferred.contains(*name);
                meta.insert((*name).to_owned(), m);
            }
        }
        ListToolsResult {
            revision: self.revision,
            etag: etag_of(tools.iter()),
            tools,
            meta,
        }
    }

    /// The `openai`-format tools of a session view (`names` ∩ live) and their etag.
    pub fn view(&self, names: &[String]) -> (Vec<OpenAiTool>, String) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let tools: Vec<OpenAiTool> = self
            .list(&names, ToolFormat::Openai)
            .tools
            .into_iter()
            .filter_map(|t| match t {
                ToolEntry::Openai(t) => Some(t),
                ToolEntry::Mcp(_) => None,
            })
            .collect();
        let etag = etag_of(tools.iter());
        (tools, etag)
    }
}

/// A tool standing in for an MCP tool ([`Tool::wraps_mcp_tool`]) takes its place: the
/// sources without the MCP tools some tool wraps, and the class in force of each wrapped
/// one (its override, else its own), which its wrapper inherits. `None` when nothing
/// wraps anything (the common case: nothing is copied).
#[allow(clippy::type_complexity)]
fn wrapped_mcp_tools<'a>(
    sources: &'a BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
    overrides: &HashMap<String, ApprovalClass>,
) -> Option<(
    BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
    HashMap<(&'a str, &'a str), ApprovalClass>,
)> {
    let wanted: HashSet<(&str, &str)> = sources
        .values()
        .flatten()
        .filter_map(|t| t.wraps_mcp_tool())
        .collect();
    if wanted.is_empty() {
        return None;
    }
    let mut classes = HashMap::new();
    let mut rest = BTreeMap::new();
    for (key, list) in sources {
        let kept = list
            .iter()
            .filter(|tool| {
                let spec = tool.spec();
                let ToolSource::Mcp {
                    server,
                    remote_name,
                } = &spec.source
                else {
                    return true;
                };
                let key = (server.as_str(), remote_name.as_str());
                if !wanted.contains(&key) {
                    return true;
                }
                if let Some(class) = overrides.get(&spec.name).copied().or(spec.approval) {
                    classes.insert(key, class);
                }
                false
            })
            .cloned()
            .collect();
        rest.insert(key.clone(), kept);
    }
    Some((rest, classes))
}

/// Which tool gets each name: built-ins, then custom tools, then the MCP servers in config
/// order; the first to claim a name keeps it, and every later claim is a [`Collision`].
fn claim_names<'a>(
    sources: &'a BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
    policy: &Policy,
) -> (HashMap<String, &'a Arc<dyn Tool>>, Vec<Collision>) {
    let mut ordered: Vec<(&SourceKey, &Vec<Arc<dyn Tool>>)> = sources.iter().collect();
    ordered.sort_by_key(|(key, _)| match key {
        SourceKey::Builtin => (0, 0),
        SourceKey::Skills => (0, 1),
        SourceKey::Custom => (1, 0),
        SourceKey::Mcp(server) => (2, policy.server_rank(server)),
    });
    let mut owner: HashMap<String, (&SourceKey, &Arc<dyn Tool>)> = HashMap::new();
    let mut collisions = Vec::new();
    for (key, list) in ordered {
        for tool in list {
            let name = &tool.spec().name;
            match owner.get(name) {
                Some((kept, _)) => {
                    tracing::warn!(tool = %name, kept = %kept, dropped = %key, "tool name collision; the earlier source keeps the name");
                    collisions.push(Collision {
                        name: name.clone(),
                        kept: (*kept).clone(),
                        dropped: key.clone(),
                    });
                }
                None => {
                    owner.insert(name.clone(), (key, tool));
                }
            }
        }
    }
    let winners = owner.into_iter().map(|(n, (_, t))| (n, t)).collect();
    (winners, collisions)
}

/// Content hash of a list of tools: equal lists give equal etags.
fn etag_of<T: Serialize>(tools: impl Iterator<Item = T>) -> String {
    let mut h = Sha256::new();
    for t in tools {
        // Serialising our own types cannot fail; an empty line would only weaken the etag.
        h.update(serde_json::to_vec(&t).unwrap_or_default());
        h.update(b"\n");
    }
    let digest = h.finalize();
    hex::encode(&digest[..12])
}
