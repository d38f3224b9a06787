//! A config's guards compiled for the call path: each rule's matcher (its tool patterns
//! as one glob set), its limits in the units the counters use, and the built-in loop
//! breaker; and which rules match a tool, remembered per tool.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use globset::{GlobSet, GlobSetBuilder};
use jiff::tz::TimeZone;

use super::RuleState;
use crate::config::{GuardRule, GuardScope, GuardSource, LoopLimit};
use crate::protocol::{ApprovalClass, GuardLimit};

/// The built-in loop breaker's name; a rule of this name in config.json replaces it.
pub const DEFAULT_LOOP: &str = "default-loop";

/// The built-in loop breaker: 8 identical calls in 60 s per session pass, the 9th is
/// refused. Why these numbers: a model repeating itself calls again at the pace of its
/// turns (one to a few seconds), so it is stopped within a minute; a poll of a build or a
/// server every 7.5 s or slower never trips it; and one that does is told to wait longer
/// between checks (proto-docs/guards.md, and `polling_patterns` below).
pub fn default_loop() -> GuardRule {
    GuardRule {
        name: DEFAULT_LOOP.to_owned(),
        scope: GuardScope::Session,
        loop_: Some(LoopLimit {
            calls: 8,
            window_s: 60,
            ignore: Vec::new(),
        }),
        ..GuardRule::default()
    }
}

/// What a call is, as far as matching goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub tool: &'a str,
    pub source: GuardSource,
    pub server: Option<&'a str>,
    pub approval: Option<ApprovalClass>,
}

pub(super) struct Rate {
    pub cap: f64,
    pub per_sec: f64,
    pub calls: u32,
    pub per_s: f64,
}

pub(super) struct Daily {
    pub limit: u64,
    pub cost: BTreeMap<String, u64>,
    pub tz: TimeZone,
    /// The zone's name as configured (`None`: the system's), for messages.
    pub tz_name: String,
}

pub(super) struct Loop {
    pub calls: u32,
    pub window: Duration,
    pub ignore: Vec<String>,
}

/// One compiled rule.
pub(super) struct Rule {
    pub name: String,
    pub builtin: bool,
    pub enabled: bool,
    tools: Option<GlobSet>,
    sources: Vec<GuardSource>,
    servers: Vec<String>,
    approval: Vec<ApprovalClass>,
    pub scope: GuardScope,
    pub rate: Option<Rate>,
    pub daily: Option<Daily>,
    pub concurrency: Option<(u32, bool)>,
    pub loop_: Option<Loop>,
    /// Its counters (shared with the rule of the same name in the next config).
    pub state: Arc<RuleState>,
}

impl Rule {
    fn matches(&self, t: &Target) -> bool {
        self.enabled
            && self.tools.as_ref().is_none_or(|g| g.is_match(t.tool))
            && (self.sources.is_empty() || self.sources.contains(&t.source))
            && (self.servers.is_empty()
                || t.server
                    .is_some_and(|s| self.servers.iter().any(|x| x == s)))
            && (self.approval.is_empty() || t.approval.is_some_and(|a| self.approval.contains(&a)))
    }

    pub fn limits(&self) -> Vec<GuardLimit> {
        let mut l = Vec::new();
        if self.rate.is_some() {
            l.push(GuardLimit::Rate);
        }
        if self.daily.is_some() {
            l.push(GuardLimit::Daily);
        }
        if self.concurrency.is_some() {
            l.push(GuardLimit::Concurrency);
        }
        if self.loop_.is_some() {
            l.push(GuardLimit::Loop);
        }
        l
    }

    /// `rate` as (capacity, tokens per second), for idleness.
    pub fn bucket(&self) -> Option<(f64, f64)> {
        self.rate.as_ref().map(|r| (r.cap, r.per_sec))
    }
}

/// Which rules a tool matched, and what it was then (a tool of the same name from another
/// source is matched afresh).
struct Matched {
    source: GuardSource,
    server: Option<String>,
    approval: Option<ApprovalClass>,
    rules: Arc<[usize]>,
}

/// Tools whose matches are remembered at most; past it the memory starts over (tool
/// names come from the registry, so this is only reached by a registry that large).
const MATCH_MEMORY: usize = 4096;

/// The rules in force: config order, then the built-in loop breaker unless replaced.
pub(super) struct RuleSet {
    pub rules: Vec<Rule>,
    matched: RwLock<HashMap<String, Matched>>,
}

impl RuleSet {
    /// Compiles `rules`; `state` gives each its counters by name. Patterns and zones were
    /// checked with the config; one that still fails matches nothing (tools) or counts in
    /// UTC (zone) rather than failing the call path.
    pub fn new(rules: &[GuardRule], state: &mut dyn FnMut(&str) -> Arc<RuleState>) -> RuleSet {
        let builtin = default_loop();
        let with_default = (!rules.iter().any(|r| r.name == DEFAULT_LOOP)).then_some(&builtin);
        let rules = rules
            .iter()
            .map(|r| (r, false))
            .chain(with_default.map(|r| (r, true)))
            .map(|(r, builtin)| compile(r, builtin, state(&r.name)))
            .collect();
        RuleSet {
            rules,
            matched: RwLock::new(HashMap::new()),
        }
    }

    /// Forgets what `tools` matched (they left the registry).
    pub fn forget(&self, tools: &[String]) {
        if tools.is_empty() {
            return;
        }
        let mut memory = self.matched.write().unwrap_or_else(|e| e.into_inner());
        for t in tools {
            memory.remove(t);
        }
    }

    /// The indexes of the rules `t` matches (remembered per tool).
    pub fn matching(&self, t: &Target) -> Arc<[usize]> {
        let same = |m: &Matched| {
            m.source == t.source && m.server.as_deref() == t.server && m.approval == t.approval
        };
        if let Some(m) = self
            .matched
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(t.tool)
            .filter(|m| same(m))
        {
            return m.rules.clone();
        }
        let rules: Arc<[usize]> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.matches(t))
            .map(|(i, _)| i)
            .collect();
        let mut memory = self.matched.write().unwrap_or_else(|e| e.into_inner());
        if memory.len() >= MATCH_MEMORY {
            memory.clear();
        }
        memory.insert(
            t.tool.to_owned(),
            Matched {
                source: t.source,
                server: t.server.map(str::to_owned),
                approval: t.approval,
                rules: rules.clone(),
            },
        );
        rules
    }
}

fn compile(r: &GuardRule, builtin: bool, state: Arc<RuleState>) -> Rule {
    let tools = (!r.tools.is_empty()).then(|| {
        let mut set = GlobSetBuilder::new();
        for g in r
            .tools
            .iter()
            .filter_map(|p| crate::config::name_glob(p).ok())
        {
            set.add(g);
        }
        set.build().unwrap_or_else(|_| GlobSet::empty())
    });
    let rate = r.rate.as_ref().map(|l| {
        let per_s = if l.per_s > 0.0 { l.per_s } else { 1.0 };
        Rate {
            cap: f64::from(l.burst.unwrap_or(l.calls).max(1)),
            per_sec: f64::from(l.calls.max(1)) / per_s,
            calls: l.calls,
            per_s,
        }
    });
    let daily = r.daily.as_ref().map(|d| {
        let (tz, tz_name) = match &d.time_zone {
            Some(name) => (TimeZone::get(name).unwrap_or(TimeZone::UTC), name.clone()),
            None => {
                let tz = TimeZone::system();
                let name = tz
                    .iana_name()
                    .unwrap_or("the system's time zone")
                    .to_owned();
                (tz, name)
            }
        };
        Daily {
            limit: d.limit,
            cost: d.cost.clone(),
            tz,
            tz_name,
        }
    });
    Rule {
        name: r.name.clone(),
        builtin,
        enabled: r.enabled,
        tools,
        sources: r.sources.clone(),
        servers: r.servers.clone(),
        approval: r.approval.clone(),
        scope: r.scope,
        rate,
        daily,
        concurrency: r.concurrency.as_ref().map(|c| (c.max.max(1), c.queue)),
        loop_: r.loop_.as_ref().map(|l| Loop {
            calls: l.calls.max(1),
            window: Duration::from_secs(l.window_s.max(1)),
            ignore: l.ignore.clone(),
        }),
        state,
    }
}
