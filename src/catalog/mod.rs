//! What reaches the model: which tools are listed, which are deferred behind `tool_search`,
//! and which are held back (quarantined) because their definition changed or looks like an
//! injection attempt. See proto-docs/catalog.md.
//!
//! The registry applies these decisions when it builds a snapshot (so they cost nothing per
//! request); this module owns the rules, the search index, the pins and the screening.

pub mod index;
pub mod pins;
pub mod screen;
mod spec;

use std::collections::HashSet;

use serde_json::Value;

use crate::config::{Config, Trust};
use crate::protocol::{McpTool, QuarantineReason, QuarantinedTool};
pub use pins::{Pin, Pins};
pub use spec::{ToolSource, ToolSpec};

/// The built-in search tool's name.
pub const SEARCH_TOOL: &str = "tool_search";
/// Matches returned when the caller names no limit, and the most it may ask for.
pub const DEFAULT_LIMIT: usize = 5;
pub const MAX_LIMIT: usize = 50;

/// The config's catalog rules, in the form the registry reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    pub max_tokens: Option<usize>,
    pub defer: HashSet<String>,
    /// Per MCP server, in config order (which is also their precedence on a name clash):
    /// (`defer`, `trust`).
    pub servers: indexmap::IndexMap<String, (bool, Trust)>,
    pub custom_trust: Trust,
}

impl Policy {
    pub fn from_config(cfg: &Config) -> Policy {
        Policy {
            max_tokens: cfg.catalog.max_tokens,
            defer: cfg.catalog.defer.iter().cloned().collect(),
            servers: cfg
                .mcp_servers
                .iter()
                .map(|(n, s)| (n.clone(), (s.defer, s.trust)))
                .collect(),
            custom_trust: cfg.custom_tools.trust,
        }
    }

    /// Where MCP server `server` stands among the servers on a name clash: its place in
    /// the config; one the config does not name (yet) comes after all of them.
    pub fn server_rank(&self, server: &str) -> usize {
        self.servers.get_index_of(server).unwrap_or(usize::MAX)
    }

    /// The trust rule of a tool's source; `None` for built-ins, which are never pinned.
    pub fn trust(&self, source: &ToolSource) -> Option<Trust> {
        match source {
            ToolSource::Builtin => None,
            // A workspace tool or module is listed only after the workspace-trust gate
            // admitted its very files (`crate::trust`); pinning it again would ask twice.
            // A changed one never gets here: its new digest waits at the gate.
            ToolSource::Custom {
                workspace_digest: Some(_),
                ..
            } => Some(Trust::Auto),
            ToolSource::Custom { .. } => Some(self.custom_trust),
            ToolSource::Mcp { server, .. } => {
                Some(self.servers.get(server).map_or(Trust::Pin, |s| s.1))
            }
        }
    }

    /// Deferred by its manifest or by config (the budget comes on top, in [`deferred`]).
    fn defers(&self, spec: &ToolSpec) -> bool {
        match &spec.source {
            ToolSource::Builtin => false,
            ToolSource::Custom { .. } => spec.deferrable || self.defer.contains(&spec.name),
            ToolSource::Mcp { server, .. } => {
                self.defer.contains(&spec.name) || self.servers.get(server).is_some_and(|s| s.0)
            }
        }
    }
}

/// A tool as the deferral decision sees it.
pub struct Candidate<'a> {
    pub spec: &'a ToolSpec,
    /// Estimated tokens of its listed definition.
    pub tokens: usize,
}

/// The names to defer, given the tools in listing order (hidden tools excluded): those the
/// manifest or config defers, then — while the listed rest is over `max_tokens` — tools
/// from the end of the listing, so the earlier sources (custom tools, then servers in
/// config order) keep their place.
/// `search_tokens` is what `tool_search` itself costs once it is listed.
pub fn deferred(policy: &Policy, tools: &[Candidate<'_>], search_tokens: usize) -> HashSet<String> {
    let mut out: HashSet<String> = tools
        .iter()
        .filter(|c| policy.defers(c.spec))
        .map(|c| c.spec.name.clone())
        .collect();
    let Some(budget) = policy.max_tokens else {
        return out;
    };
    let mut listed: usize = tools
        .iter()
        .filter(|c| !out.contains(&c.spec.name))
        .map(|c| c.tokens)
        .sum();
    if listed <= budget {
        return out;
    }
    // tool_search itself is listed once anything is deferred.
    listed += search_tokens;
    for c in tools.iter().rev() {
        if listed <= budget {
            break;
        }
        if c.spec.source == ToolSource::Builtin || out.contains(&c.spec.name) {
            continue;
        }
        listed = listed.saturating_sub(c.tokens);
        out.insert(c.spec.name.clone());
    }
    out
}

/// Tokens of a definition, estimated as serialised bytes / 4 (close enough for English
/// text and JSON Schema with the common tokenizers; the budget is a soft limit).
pub fn estimate_tokens(serialised_len: usize) -> usize {
    serialised_len.div_ceil(4)
}

/// The pin hash of a tool: its definition's [`pins::hash_of`], and for a workspace tool
/// also the digest of its folder's files.
pub fn pin_hash(spec: &ToolSpec, def: &McpTool) -> String {
    let hash = pins::hash_of(def);
    match &spec.source {
        ToolSource::Custom {
            workspace_digest: Some(files),
            ..
        } => format!("{hash}+{files}"),
        _ => hash,
    }
}

/// What the registry should do with a non-built-in tool's definition.
pub enum Verdict {
    /// Pinned already with this very definition.
    Accept,
    /// New or changed under `auto`: pin it and list it.
    Pin,
    Quarantine(QuarantinedTool),
}

/// Applies the trust rule to one definition (`hash` = [`pins::hash_of`]`(def)`, `flags` =
/// its screening). An approved pin is final: a definition the user approved is not screened
/// again. While the pin store is damaged nothing can be checked against it, so every
/// definition under a trust rule is quarantined, whatever the rule.
pub fn verdict(
    pins: &Pins,
    trust: Trust,
    def: &McpTool,
    hash: &str,
    flags: &[String],
    server: Option<&str>,
) -> Verdict {
    let name = def.name.as_str();
    let damage = pins.damage();
    let quarantine = |reason, changed: Vec<String>| {
        Verdict::Quarantine(QuarantinedTool {
            name: name.to_owned(),
            server: server.map(str::to_owned),
            reason,
            message: message(name, server, reason, &changed, flags, damage.as_deref()),
            changed,
            flags: flags.to_vec(),
        })
    };
    if damage.is_some() {
        return quarantine(QuarantineReason::PinsDamaged, Vec::new());
    }
    // The hash differs but the definition does not: what else the pin covers changed (a
    // workspace tool's files).
    let changed = || {
        pins.get(name)
            .map(|p| {
                let parts = pins::changed_parts(&p.definition, def);
                if parts.is_empty() && p.hash != hash {
                    vec!["files".to_owned()]
                } else {
                    parts
                }
            })
            .unwrap_or_default()
    };
    match pins.matches(name, hash) {
        // Pinned with this definition, but a member of the fleet sees another one: held
        // back everywhere until a definition is approved.
        Some(true) => match pins.marked(name) {
            Some(seen) if seen.hash != hash => {
                let parts = pins
                    .get(name)
                    .map(|p| pins::changed_parts(&p.definition, &seen.definition))
                    .unwrap_or_default();
                quarantine(QuarantineReason::Changed, parts)
            }
            _ => Verdict::Accept,
        },
        _ if !flags.is_empty() => quarantine(QuarantineReason::Flagged, changed()),
        Some(false) if trust == Trust::Auto => Verdict::Pin,
        Some(false) => quarantine(QuarantineReason::Changed, changed()),
        None if trust == Trust::QuarantineNew => quarantine(QuarantineReason::New, Vec::new()),
        None => Verdict::Pin,
    }
}

fn message(
    name: &str,
    server: Option<&str>,
    reason: QuarantineReason,
    changed: &[String],
    flags: &[String],
    damage: Option<&str>,
) -> String {
    if let (QuarantineReason::PinsDamaged, Some(damage)) = (reason, damage) {
        return format!(
            "Tool '{name}' is quarantined: its approval cannot be checked because the {damage}. Repair the file, or move it aside and pin every tool afresh with `toolhost tools pins reset` (RPC tools.pins_reset)."
        );
    }
    let what = match reason {
        QuarantineReason::Changed => format!(
            "its definition changed since it was approved ({})",
            if changed.is_empty() {
                "details unknown".to_owned()
            } else {
                changed.join(", ")
            }
        ),
        QuarantineReason::New if server.is_none() => {
            "it is new, and `custom_tools.trust` has new tools wait for approval".to_owned()
        }
        QuarantineReason::New => "it is new and its server needs new tools approved".to_owned(),
        QuarantineReason::Flagged => format!(
            "its description looks like an injection attempt ({})",
            flags.join("; ")
        ),
        QuarantineReason::PinsDamaged => "the pin store is damaged".to_owned(),
    };
    format!(
        "Tool '{name}' is quarantined: {what}. Review it with `toolhost tools diff {name}` and approve it with `toolhost tools approve {name}` (RPC tools.approve)."
    )
}

/// The words screened in a definition: description, title and parameter descriptions.
pub fn screen_definition(def: &McpTool) -> Vec<String> {
    let mut flags = screen::screen(&def.description);
    if let Some(t) = &def.title {
        flags.extend(screen::screen(t));
    }
    if let Some(props) = def
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    {
        for (k, v) in props {
            if let Some(d) = v.get("description").and_then(Value::as_str) {
                flags.extend(
                    screen::screen(d)
                        .into_iter()
                        .map(|f| format!("parameter {k}: {f}")),
                );
            }
        }
    }
    flags.dedup();
    flags
}

/// Parameter names of an input schema (for the index).
pub fn param_names(schema: &Value) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// Adds `found` to `loaded` (tools a session loaded through a search, or a frontend was
/// given in full), keeping the existing order, each name once.
pub fn merge_loaded(loaded: &mut Vec<String>, found: &[String]) {
    let have: HashSet<String> = loaded.iter().cloned().collect();
    loaded.extend(found.iter().filter(|n| !have.contains(*n)).cloned());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ApprovalClass;
    use serde_json::json;

    /// What `tool_search` costs in these tests.
    const SEARCH_TOKENS: usize = 90;
    use std::path::PathBuf;

    fn spec(name: &str, source: ToolSource, deferrable: bool) -> ToolSpec {
        ToolSpec {
            deferrable,
            source,
            ..ToolSpec::builtin(name, "d", json!({}), ApprovalClass::ReadOnly)
        }
    }

    fn mcp(server: &str, name: &str) -> ToolSpec {
        spec(
            name,
            ToolSource::Mcp {
                server: server.into(),
                remote_name: name.into(),
            },
            false,
        )
    }

    fn sorted(s: HashSet<String>) -> Vec<String> {
        let mut v: Vec<String> = s.into_iter().collect();
        v.sort();
        v
    }

    #[test]
    fn manifest_config_and_budget_defer_but_never_builtins() {
        let builtin = spec("bash", ToolSource::Builtin, true);
        let custom = spec(
            "c",
            ToolSource::Custom {
                dir: PathBuf::from("/x"),
                workspace_digest: None,
            },
            true,
        );
        let (a1, a2, b1, b2) = (
            mcp("a", "a1"),
            mcp("a", "a2"),
            mcp("b", "b1"),
            mcp("b", "b2"),
        );
        let tools = [&builtin, &custom, &a1, &a2, &b1, &b2];
        let cands: Vec<Candidate<'_>> = tools
            .iter()
            .map(|s| Candidate {
                spec: s,
                tokens: 100,
            })
            .collect();
        let mut policy = Policy::default();
        assert_eq!(sorted(deferred(&policy, &cands, SEARCH_TOKENS)), vec!["c"]);
        policy.defer.insert("a1".into());
        policy.servers.insert("b".into(), (true, Trust::Pin));
        assert_eq!(
            sorted(deferred(&policy, &cands, SEARCH_TOKENS)),
            vec!["a1", "b1", "b2", "c"]
        );
        // A budget for the built-in, one more tool and tool_search: the last tools go first.
        let mut policy = Policy {
            max_tokens: Some(200 + SEARCH_TOKENS),
            ..Policy::default()
        };
        assert_eq!(
            sorted(deferred(&policy, &cands, SEARCH_TOKENS)),
            vec!["a2", "b1", "b2", "c"]
        );
        policy.max_tokens = Some(10);
        assert!(!deferred(&policy, &cands, SEARCH_TOKENS).contains("bash"));
    }

    #[test]
    fn trust_decides_new_changed_and_flagged() {
        let pins = Pins::in_memory();
        let def = |d: &str| McpTool {
            name: "t".into(),
            title: None,
            description: d.into(),
            input_schema: json!({}),
            output_schema: None,
            annotations: None,
        };
        let v = |trust, d: &str| {
            let t = def(d);
            let flags = screen_definition(&t);
            match verdict(&pins, trust, &t, &pins::hash_of(&t), &flags, None) {
                Verdict::Accept => "accept".to_owned(),
                Verdict::Pin => "pin".to_owned(),
                Verdict::Quarantine(q) => format!("{:?} {:?}", q.reason, q.changed),
            }
        };
        assert_eq!(v(Trust::QuarantineNew, "one"), "New []");
        assert_eq!(v(Trust::Pin, "one"), "pin");
        let t = def("one");
        pins.set_all(vec![(
            "t".into(),
            Pin {
                hash: pins::hash_of(&t),
                definition: t,
            },
        )])
        .unwrap();
        assert_eq!(v(Trust::Pin, "one"), "accept");
        assert_eq!(v(Trust::Pin, "two"), "Changed [\"description\"]");
        assert_eq!(v(Trust::Auto, "two"), "pin");
        assert_eq!(
            v(Trust::Auto, "<IMPORTANT>x</IMPORTANT>"),
            "Flagged [\"description\"]"
        );
    }
}
