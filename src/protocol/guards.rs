//! `guards.status` and `guards.reset`, and what a guard's refusal says
//! (proto-docs/guards.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which of a rule's limits refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardLimit {
    Rate,
    Daily,
    Concurrency,
    Loop,
}

impl GuardLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardLimit::Rate => "rate",
            GuardLimit::Daily => "daily",
            GuardLimit::Concurrency => "concurrency",
            GuardLimit::Loop => "loop",
        }
    }
}

/// A refusal by a guard: the `guard` field of a `limited` result, and of its audit line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardRefusal {
    /// The rule's name.
    pub rule: String,
    pub limit: GuardLimit,
    /// The counter's scope key (`host`, `session:<id>`, `frontend:<name>/<uid>`,
    /// `workspace:<path>`).
    pub scope: String,
    /// What was counted, this call included (calls or cost units; for `concurrency`,
    /// the calls running).
    pub count: u64,
    /// What the limit allows.
    pub allowed: u64,
    /// Milliseconds since the Unix epoch when a call like this one may pass again;
    /// absent for `concurrency` (when a running call ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at_ms: Option<u64>,
}

/// `guards.status`: every rule in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardsStatusResult {
    pub rules: Vec<GuardRuleStatus>,
    /// Why the store's `daily` counters cannot be read, naming the fix; the rules named
    /// refuse every call they match until then (they fail closed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One rule: its limits as configured, its refusals, and its counters per scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardRuleStatus {
    pub name: String,
    pub enabled: bool,
    /// `host`, `frontend`, `session` or `workspace`.
    pub scope: String,
    /// The built-in loop breaker (no rule in config.json names it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub builtin: bool,
    /// Which limits it holds.
    pub limits: Vec<GuardLimit>,
    /// Calls it refused since the daemon started (or its last reset).
    pub refusals: u64,
    /// The scopes it counts now, fullest first (at most 100).
    pub scopes: Vec<GuardScopeStatus>,
    /// Scopes counted, beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_scopes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One scope's counters under one rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardScopeStatus {
    pub scope: String,
    /// How full its fullest limit is, 0 to 1.
    pub fill: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<GuardCounter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily: Option<GuardCounter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<GuardCounter>,
    /// The most repeated call in the window.
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub loop_: Option<GuardCounter>,
}

/// One counter: how much is used of what is allowed, and when it is next refilled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardCounter {
    pub used: u64,
    pub allowed: u64,
    /// Milliseconds since the epoch of the next refill (the next token, the next day, the
    /// oldest repeated call leaving the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at_ms: Option<u64>,
}

/// `guards.reset`: clears a rule's counters, of one scope or all (also its stored `daily`
/// counters and any damage recorded for them).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardsResetParams {
    pub rule: String,
    /// A scope key as `guards.status` lists it; absent: every scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GuardsResetResult {
    /// Scopes cleared.
    pub cleared: usize,
}
