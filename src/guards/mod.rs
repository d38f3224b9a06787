//! Guards: rate limits, daily budgets, concurrency limits and loop breakers on tool calls,
//! held in one place for every frontend (proto-docs/guards.md).
//!
//! The rules come from config (`guards`), compiled into a [`rules::RuleSet`] that a reload
//! swaps whole; the counters belong to a rule's *name* ([`RuleState`]), so a reload that
//! edits a rule keeps them. The call pipeline asks [`Guards::check`] once per call, after
//! the approval policy and before anything runs: a refusal is a tool result
//! (`error_kind: "limited"`), never a transport error. What is counted against a `daily`
//! limit is persisted in the session store before the call runs ([`Guards::persist`]), so a
//! restart — even a `kill -9` — keeps it.
//!
//! Memory: scopes are created as calls come and dropped once idle: by a sweeper that runs
//! while any scope is held and wakes when the first of them becomes idle (its window over,
//! its bucket full, its day past), and by a sweep whenever a rule's scopes have doubled
//! since the last one; so 10,000 sessions that come and go leave nothing behind, even
//! after the burst. A scope's loop memory is bounded (`counters::Repeats`).

mod counters;
mod rules;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::{GuardRule, GuardScope};
use crate::lock;
use crate::protocol::{
    GuardCounter, GuardLimit, GuardRefusal, GuardRuleStatus, GuardScopeStatus, GuardsStatusResult,
};
use crate::session::{Counter, CounterWrite};
use counters::{Bucket, Day, ScopeState};
pub use rules::Target;
use rules::{Daily, Rule, RuleSet};

pub use crate::config::GuardSource;

/// The `frontend` scope's key of a call: who is calling, as far as the host can tell. A
/// session's stable frontend id (`Session::frontend_id`: its user, client, workspace and
/// the programs that started it, proto-docs/sessions.md) when it has one, so every
/// conversation of one frontend shares the counters; else, for a call without such a
/// session, the client's own name (meta `client`, else the connection's `User-Agent`, else
/// the peer's process name) with the peer's uid, so two users running the same program
/// are two frontends.
pub fn frontend_key(frontend_id: Option<&str>, client: Option<&str>, uid: Option<u32>) -> String {
    if let Some(id) = frontend_id {
        return id.to_owned();
    }
    let client = client.unwrap_or("unnamed");
    match uid {
        Some(uid) => format!("{client}/{uid}"),
        None => client.to_owned(),
    }
}

/// One call, as the guards see it.
pub struct Call<'a> {
    pub target: Target<'a>,
    pub args: &'a Map<String, Value>,
    pub session: Option<&'a str>,
    /// [`frontend_key`] of the caller.
    pub frontend: &'a str,
    pub workspace: &'a Path,
}

/// A refused call: the record for its result and audit line, and the text for the model.
#[derive(Debug, Clone)]
pub struct Refused {
    pub refusal: GuardRefusal,
    pub message: String,
}

/// A rule's counters, by scope key, and its refusals; kept across reloads by name.
#[derive(Default)]
pub struct RuleState {
    scopes: Mutex<Scopes>,
    refusals: AtomicU64,
}

#[derive(Default)]
struct Scopes {
    map: HashMap<String, ScopeState>,
    /// The size at which the next new scope first sweeps the idle ones out.
    sweep_at: usize,
}

/// Scopes a rule holds before its first sweep of idle ones.
const SWEEP_FLOOR: usize = 256;
/// Scopes listed per rule by `guards.status`.
const STATUS_SCOPES: usize = 100;

/// What a passed call took, so a refusal by a later limit can give it back.
enum Taken {
    Rate(usize, String),
    Daily(usize, String, u64),
    Loop(usize, String, u64),
}

/// A call the guards let through (or that still waits for a `concurrency` slot, see
/// [`Admission::wait`]). It holds the call's slots until dropped, at the end of the call.
pub struct Admission {
    set: Arc<RuleSet>,
    permits: Vec<OwnedSemaphorePermit>,
    waits: Vec<(usize, String, Arc<Semaphore>)>,
    taken: Vec<Taken>,
    /// The `daily` counters this call changed: (rule, scope), to persist.
    daily: Vec<(String, String)>,
    /// Whether the call waited in a concurrency queue (its deadline is then shorter).
    queued: bool,
}

impl Admission {
    /// The call waited for a concurrency slot: it has that much less of its deadline left.
    pub fn queued(&self) -> bool {
        self.queued
    }

    /// The `daily` counters (rule, scope) this call counted, to persist before it runs.
    pub fn counted_daily(&self) -> &[(String, String)] {
        &self.daily
    }
}

/// The guards of one daemon.
pub struct Guards {
    set: Arc<ArcSwap<RuleSet>>,
    /// Whether the sweeper runs ([`arm_sweeper`]).
    sweeping: Arc<AtomicBool>,
    states: Mutex<HashMap<String, Arc<RuleState>>>,
    /// Stored `daily` counters that could not be read, by rule ("" when the store itself
    /// could not be read: every `daily` rule).
    damage: Mutex<BTreeMap<String, Damage>>,
    /// Held while `daily` values are read and written to the store, so the last write of
    /// a counter is always its newest value.
    persist: Mutex<()>,
}

/// Why a rule's stored counters cannot be read, and their keys, dropped at a reset.
struct Damage {
    why: String,
    keys: Vec<Vec<u8>>,
}

const DAILY_PREFIX: &str = "daily\0";

fn daily_key(rule: &str, scope: &str) -> Vec<u8> {
    format!("{DAILY_PREFIX}{rule}\0{scope}").into_bytes()
}

impl Guards {
    /// Guards for `rules`, with the `daily` counters read from the store (or why they
    /// could not be read).
    pub fn new(rules: &[GuardRule], stored: Result<Vec<Counter>, String>) -> Guards {
        let guards = Guards {
            set: Arc::new(ArcSwap::from_pointee(RuleSet::new(&[], &mut |_| {
                Arc::default()
            }))),
            sweeping: Arc::default(),
            states: Mutex::new(HashMap::new()),
            damage: Mutex::new(BTreeMap::new()),
            persist: Mutex::new(()),
        };
        guards.load(stored);
        guards.configure(rules);
        // Counts of past days read from the store go at the first sweep.
        arm_sweeper(&guards.set, &guards.sweeping);
        guards
    }

    fn load(&self, stored: Result<Vec<Counter>, String>) {
        let mut damage = lock(&self.damage);
        let entries = match stored {
            Ok(e) => e,
            Err(why) => {
                damage.insert(
                    String::new(),
                    Damage {
                        why,
                        keys: Vec::new(),
                    },
                );
                return;
            }
        };
        let mut states = lock(&self.states);
        for (key, value) in entries {
            let parsed = std::str::from_utf8(&key)
                .ok()
                .and_then(|k| k.strip_prefix(DAILY_PREFIX))
                .and_then(|k| k.split_once('\0'))
                .map(|(r, s)| (r.to_owned(), s.to_owned()));
            let Some((rule, scope)) = parsed else {
                let e = damage.entry(String::new()).or_insert_with(|| Damage {
                    why: "a stored counter has an unreadable key".into(),
                    keys: Vec::new(),
                });
                e.keys.push(key);
                continue;
            };
            match Day::decode(&value) {
                Ok(day) => {
                    let state = states.entry(rule).or_default().clone();
                    lock(&state.scopes).map.entry(scope).or_default().day = Some(day);
                }
                Err(why) => {
                    let e = damage.entry(rule).or_insert_with(|| Damage {
                        why: format!("its stored count for {scope} is unreadable ({why})"),
                        keys: Vec::new(),
                    });
                    e.keys.push(key);
                }
            }
        }
    }

    /// Puts `rules` in force. A rule keeps the counters of the rule of the same name; the
    /// counters of a rule no longer there are dropped.
    pub fn configure(&self, rules: &[GuardRule]) {
        let mut states = lock(&self.states);
        let set = RuleSet::new(rules, &mut |name| {
            states.entry(name.to_owned()).or_default().clone()
        });
        states.retain(|name, _| set.rules.iter().any(|r| r.name == *name));
        self.set.store(Arc::new(set));
    }

    /// Checks a call against every rule it matches, and counts it where it passes. A
    /// refusal gives back whatever the call took from the other rules.
    pub fn check(&self, call: &Call) -> Result<Admission, Refused> {
        let set = self.set.load_full();
        let matched = set.matching(&call.target);
        let mut adm = Admission {
            set: set.clone(),
            permits: Vec::new(),
            waits: Vec::new(),
            taken: Vec::new(),
            daily: Vec::new(),
            queued: false,
        };
        if matched.is_empty() {
            return Ok(adm);
        }
        let now = Instant::now();
        for &i in matched.iter() {
            let rule = &set.rules[i];
            let scope = scope_key(rule.scope, call);
            if let Err(refused) = self.take(rule, i, scope, call, now, &mut adm) {
                give_back(&set, &adm.taken);
                rule.state.refusals.fetch_add(1, Ordering::Relaxed);
                return Err(refused);
            }
        }
        Ok(adm)
    }

    fn take(
        &self,
        rule: &Rule,
        i: usize,
        scope: String,
        call: &Call,
        now: Instant,
        adm: &mut Admission,
    ) -> Result<(), Refused> {
        let refused = |limit, count, allowed, resets_at_ms, message| Refused {
            refusal: GuardRefusal {
                rule: rule.name.clone(),
                limit,
                scope: scope.clone(),
                count,
                allowed,
                resets_at_ms,
            },
            message,
        };
        if rule.daily.is_some() {
            let damage = lock(&self.damage);
            if let Some(Damage { why, .. }) = damage.get(&rule.name).or_else(|| damage.get("")) {
                return Err(refused(
                    GuardLimit::Daily,
                    0,
                    rule.daily.as_ref().map_or(0, |d| d.limit),
                    None,
                    format!(
                        "Refused by guard '{}': {}, so its daily budget cannot be counted and every call it guards is refused. The operator can clear it with `toolhost guards reset {}`.",
                        rule.name, damage_text(why), rule.name
                    ),
                ));
            }
        }
        let mut scopes = lock(&rule.state.scopes);
        if !scopes.map.contains_key(&scope) {
            if scopes.map.len() >= scopes.sweep_at.max(SWEEP_FLOOR) {
                sweep(&mut scopes, rule, now);
            }
            arm_sweeper(&self.set, &self.sweeping);
        }
        let st = scopes.map.entry(scope.clone()).or_default();
        let at_ms = |t: Instant| {
            crate::now_ms().saturating_add(
                u64::try_from(t.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX),
            )
        };

        if let Some(l) = &rule.loop_ {
            let digest = digest(call.target.tool, call.args, &l.ignore);
            match st.repeats.take(digest, now, l.window, l.calls) {
                Ok(()) => adm.taken.push(Taken::Loop(i, scope.clone(), digest)),
                Err((count, until)) => {
                    let wait = until.saturating_duration_since(now);
                    return Err(refused(
                        GuardLimit::Loop,
                        count,
                        u64::from(l.calls),
                        Some(at_ms(until)),
                        format!(
                            "This is the {} identical call to {} in {} s; its result will not change, so it was not run (guard '{}'). Try something else: different arguments, another tool, or ask the user. If you are waiting for something to change, wait longer between checks; the same call passes again in {}.",
                            ordinal(count),
                            call.target.tool,
                            l.window.as_secs(),
                            rule.name,
                            human(wait)
                        ),
                    ));
                }
            }
        }
        if let Some(r) = &rule.rate {
            let bucket = st.bucket.get_or_insert_with(|| Bucket::full(r.cap, now));
            match bucket.take(now, r.cap, r.per_sec) {
                Ok(()) => adm.taken.push(Taken::Rate(i, scope.clone())),
                Err(wait) => {
                    return Err(refused(
                        GuardLimit::Rate,
                        r.cap as u64 + 1,
                        r.cap as u64,
                        Some(at_ms(now + wait)),
                        format!(
                            "Rate limit: guard '{}' allows {} calls per {} s{} ({}), and they are used up; the call was not run. The next call may pass in {}.",
                            rule.name,
                            r.calls,
                            trim_float(r.per_s),
                            if (r.cap - f64::from(r.calls)).abs() > f64::EPSILON {
                                format!(" (bursts of {})", r.cap)
                            } else {
                                String::new()
                            },
                            scope,
                            human(wait)
                        ),
                    ));
                }
            }
        }
        if let Some(d) = &rule.daily {
            let zoned = jiff::Timestamp::now().to_zoned(d.tz.clone());
            let mut day = Day::current(st.day, zoned.date());
            let cost = d.cost.get(call.target.tool).copied().unwrap_or(1);
            if day.used.saturating_add(cost) > d.limit {
                return Err(daily_refused(rule, d, &scope, day, cost));
            }
            day.used += cost;
            st.day = Some(day);
            adm.taken.push(Taken::Daily(i, scope.clone(), cost));
            adm.daily.push((rule.name.clone(), scope.clone()));
        }
        if let Some((max, queue)) = rule.concurrency {
            let slots = match &st.slots {
                Some((m, s)) if *m == max => s.clone(),
                _ => {
                    let s = Arc::new(Semaphore::new(max as usize));
                    st.slots = Some((max, s.clone()));
                    s
                }
            };
            match slots.clone().try_acquire_owned() {
                Ok(p) => adm.permits.push(p),
                Err(_) if queue => adm.waits.push((i, scope.clone(), slots)),
                Err(_) => {
                    return Err(refused(
                        GuardLimit::Concurrency,
                        u64::from(max) + 1,
                        u64::from(max),
                        None,
                        concurrency_text(rule, max, &scope, None),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Waits for the `concurrency` slots the call queues for, until `deadline` or
    /// `cancel`; refused (giving back what it took) if they do not come in time.
    pub async fn wait(
        &self,
        mut adm: Admission,
        deadline: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Result<Admission, Refused> {
        let waits = std::mem::take(&mut adm.waits);
        for (i, scope, slots) in waits {
            if let Ok(p) = slots.clone().try_acquire_owned() {
                adm.permits.push(p);
                continue;
            }
            adm.queued = true;
            let started = Instant::now();
            let got = tokio::select! {
                p = tokio::time::timeout_at(deadline, slots.acquire_owned()) => p.ok().and_then(Result::ok),
                () = cancel.cancelled() => None,
            };
            match got {
                Some(p) => adm.permits.push(p),
                None => {
                    give_back(&adm.set, &adm.taken);
                    let rule = &adm.set.rules[i];
                    rule.state.refusals.fetch_add(1, Ordering::Relaxed);
                    let max = rule.concurrency.map_or(0, |c| c.0);
                    return Err(Refused {
                        refusal: GuardRefusal {
                            rule: rule.name.clone(),
                            limit: GuardLimit::Concurrency,
                            scope: scope.clone(),
                            count: u64::from(max) + 1,
                            allowed: u64::from(max),
                            resets_at_ms: None,
                        },
                        message: concurrency_text(rule, max, &scope, Some(started.elapsed())),
                    });
                }
            }
        }
        Ok(adm)
    }

    /// Writes the `daily` counters named by `counted` (an admission's
    /// [`Admission::counted_daily`]) with their values as they are when written: `write`
    /// stores them in the session store, whose durability the caller then waits for. Run
    /// on a blocking thread.
    pub fn persist(
        &self,
        counted: &[(String, String)],
        write: &dyn Fn(&[CounterWrite]) -> crate::error::Result<()>,
    ) -> crate::error::Result<()> {
        let _one_at_a_time = lock(&self.persist);
        let states = lock(&self.states).clone();
        let writes: Vec<_> = counted
            .iter()
            .filter_map(|(rule, scope)| {
                let state = states.get(rule)?;
                let day = lock(&state.scopes).map.get(scope).and_then(|s| s.day)?;
                Some((daily_key(rule, scope), Some(day.encode())))
            })
            .collect();
        write(&writes)
    }

    /// Fleet mode: the `daily` counts `adm` took, to charge against the fleet's counters
    /// ([`crate::fleet::Fleet::charge`]) before the call runs.
    pub fn daily_charges(&self, adm: &Admission) -> Vec<DailyCharge> {
        adm.taken
            .iter()
            .filter_map(|t| {
                let Taken::Daily(i, scope, cost) = t else {
                    return None;
                };
                let rule = &adm.set.rules[*i];
                let day = lock(&rule.state.scopes)
                    .map
                    .get(scope)
                    .and_then(|s| s.day)?;
                Some(DailyCharge {
                    key: daily_key(&rule.name, scope),
                    day: day.date.to_string(),
                    cost: *cost,
                    limit: rule.daily.as_ref().map_or(0, |d| d.limit),
                })
            })
            .collect()
    }

    /// Fleet mode: the fleet's answer to [`Guards::daily_charges`]: `Ok` with each counter's
    /// fleet-wide count (this member's counts catch up with it), or `Err((n, used))` when
    /// charge `n` would have gone over its limit (then nothing was charged, and the call is
    /// refused like one counted here).
    pub fn settle(
        &self,
        adm: Admission,
        charged: Result<Vec<u64>, (usize, u64)>,
    ) -> Result<Admission, Refused> {
        let daily = adm.taken.iter().filter_map(|t| match t {
            Taken::Daily(i, scope, cost) => Some((&adm.set.rules[*i], scope, *cost)),
            _ => None,
        });
        match charged {
            Ok(used) => {
                for ((rule, scope, _), used) in daily.zip(used) {
                    if let Some(d) = lock(&rule.state.scopes)
                        .map
                        .get_mut(scope)
                        .and_then(|s| s.day.as_mut())
                    {
                        d.used = d.used.max(used);
                    }
                }
                Ok(adm)
            }
            Err((n, used)) => {
                let refused = daily.clone().nth(n).and_then(|(rule, scope, cost)| {
                    let d = rule.daily.as_ref()?;
                    let day = lock(&rule.state.scopes)
                        .map
                        .get(scope)
                        .and_then(|s| s.day)?;
                    rule.state.refusals.fetch_add(1, Ordering::Relaxed);
                    Some(daily_refused(rule, d, scope, Day { used, ..day }, cost))
                });
                match refused {
                    Some(r) => {
                        give_back(&adm.set, &adm.taken);
                        Err(r)
                    }
                    None => {
                        Err(self
                            .unpersisted(adm, "the fleet refused a charge it was not asked for"))
                    }
                }
            }
        }
    }

    /// A refusal of a call whose `daily` count could not be stored: it fails closed.
    pub fn unpersisted(&self, adm: Admission, why: &str) -> Refused {
        give_back(&adm.set, &adm.taken);
        let (rule, scope) = adm.daily.first().cloned().unwrap_or_default();
        Refused {
            refusal: GuardRefusal {
                rule: rule.clone(),
                limit: GuardLimit::Daily,
                scope,
                count: 0,
                allowed: 0,
                resets_at_ms: None,
            },
            message: format!(
                "Refused by guard '{rule}': its daily count could not be stored ({why}), and a budget that a restart could forget is not kept; the call was not run."
            ),
        }
    }

    /// Clears `rule`'s counters, of `scope` or of every scope (and its refusals then), and
    /// any damage recorded for its stored counters; returns the scopes cleared and the
    /// store keys to remove. `None` when no rule has this name.
    pub fn reset(&self, rule: &str, scope: Option<&str>) -> Option<(usize, Vec<Vec<u8>>)> {
        let set = self.set.load_full();
        let r = set.rules.iter().find(|r| r.name == rule)?;
        let mut keys = Vec::new();
        {
            let mut damage = lock(&self.damage);
            for name in [rule, ""] {
                if let Some(d) = damage.remove(name) {
                    keys.extend(d.keys);
                }
            }
        }
        let mut scopes = lock(&r.state.scopes);
        let cleared: Vec<String> = match scope {
            Some(s) => scopes
                .map
                .remove_entry(s)
                .map(|(k, _)| k)
                .into_iter()
                .collect(),
            None => {
                r.state.refusals.store(0, Ordering::Relaxed);
                scopes.map.drain().map(|(k, _)| k).collect()
            }
        };
        keys.extend(cleared.iter().map(|s| daily_key(rule, s)));
        Some((cleared.len(), keys))
    }

    /// Drops the counters of `sessions` (they ended: no call counts in their scopes again)
    /// and what the rules remembered of `tools` (they left the registry).
    pub fn forget(&self, sessions: &[String], tools: &[String]) {
        let set = self.set.load_full();
        set.forget(tools);
        if sessions.is_empty() {
            return;
        }
        for rule in set.rules.iter().filter(|r| r.scope == GuardScope::Session) {
            let mut scopes = lock(&rule.state.scopes);
            for id in sessions {
                scopes.map.remove(&session_scope(id));
            }
        }
    }

    /// `guards.status`.
    pub fn status(&self) -> GuardsStatusResult {
        let set = self.set.load_full();
        let now = Instant::now();
        let now_ms = crate::now_ms();
        let at_ms = |t: Instant| {
            now_ms.saturating_add(
                u64::try_from(t.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX),
            )
        };
        let rules = set
            .rules
            .iter()
            .map(|rule| {
                let scopes = lock(&rule.state.scopes);
                let mut listed: Vec<GuardScopeStatus> = scopes
                    .map
                    .iter()
                    .map(|(key, st)| scope_status(rule, key, st, now, &at_ms))
                    .collect();
                listed.sort_by(|a, b| b.fill.total_cmp(&a.fill).then(a.scope.cmp(&b.scope)));
                let more = listed.len().saturating_sub(STATUS_SCOPES);
                listed.truncate(STATUS_SCOPES);
                GuardRuleStatus {
                    name: rule.name.clone(),
                    enabled: rule.enabled,
                    scope: scope_name(rule.scope).to_owned(),
                    builtin: rule.builtin,
                    limits: rule.limits(),
                    refusals: rule.state.refusals.load(Ordering::Relaxed),
                    scopes: listed,
                    more_scopes: more,
                }
            })
            .collect();
        GuardsStatusResult {
            rules,
            errors: self.errors(),
        }
    }

    /// The stored counters' damage, naming the fix (for `host.health` and the status).
    pub fn errors(&self) -> Vec<String> {
        lock(&self.damage)
            .iter()
            .map(|(rule, Damage { why, .. })| {
                if rule.is_empty() {
                    format!("guards: {}; every daily limit refuses its calls until `toolhost guards reset RULE` clears the stored counters", damage_text(why))
                } else {
                    format!("guards: rule '{rule}': {}; its calls are refused until `toolhost guards reset {rule}`", damage_text(why))
                }
            })
            .collect()
    }

    /// Refusals per rule in force, for `GET /metrics` (one series per configured rule).
    pub fn refusals(&self) -> Vec<(String, u64)> {
        self.set
            .load()
            .rules
            .iter()
            .map(|r| (r.name.clone(), r.state.refusals.load(Ordering::Relaxed)))
            .collect()
    }
}

fn damage_text(why: &str) -> String {
    format!("the stored daily counters are damaged: {why}")
}

fn concurrency_text(rule: &Rule, max: u32, scope: &str, waited: Option<Duration>) -> String {
    let waited = waited.map_or(String::new(), |w| {
        format!(" after waiting {} for one", human(w))
    });
    format!(
        "Concurrency limit: guard '{}' allows {max} call{} at once ({scope}), and no slot was free{waited}; the call was not run. Try again when a running call has finished.",
        rule.name,
        if max == 1 { "" } else { "s" }
    )
}

/// Gives back what a refused call took (its earlier rules' tokens, units and repeats).
fn give_back(set: &RuleSet, taken: &[Taken]) {
    for t in taken {
        let (i, scope) = match t {
            Taken::Rate(i, s) | Taken::Daily(i, s, _) | Taken::Loop(i, s, _) => (*i, s),
        };
        let rule = &set.rules[i];
        let mut scopes = lock(&rule.state.scopes);
        let Some(st) = scopes.map.get_mut(scope) else {
            continue;
        };
        match t {
            Taken::Rate(..) => {
                if let (Some(b), Some(r)) = (&mut st.bucket, &rule.rate) {
                    b.give_back(r.cap);
                }
            }
            Taken::Daily(_, _, cost) => {
                if let Some(d) = &mut st.day {
                    d.used = d.used.saturating_sub(*cost);
                }
            }
            Taken::Loop(_, _, digest) => st.repeats.give_back(*digest),
        }
    }
}

/// When `day` ends in `d`'s time zone, ms since the epoch: when its count starts again.
fn next_midnight(d: &Daily, day: Day) -> Option<u64> {
    day.date
        .tomorrow()
        .ok()
        .and_then(|t| t.to_zoned(d.tz.clone()).ok())
        .map(|z| u64::try_from(z.timestamp().as_millisecond()).unwrap_or(0))
}

/// The refusal of a call that would take `day`'s count over `rule`'s daily limit.
fn daily_refused(rule: &Rule, d: &Daily, scope: &str, day: Day, cost: u64) -> Refused {
    let next = next_midnight(d, day);
    Refused {
        refusal: GuardRefusal {
            rule: rule.name.clone(),
            limit: GuardLimit::Daily,
            scope: scope.to_owned(),
            count: day.used.saturating_add(cost),
            allowed: d.limit,
            resets_at_ms: next,
        },
        message: format!(
            "Daily budget: guard '{}' allows {} {} a day ({}); {} are used and this call would cost {}, so it was not run. The budget starts again at midnight ({}).",
            rule.name,
            d.limit,
            if d.cost.is_empty() { "calls" } else { "cost units" },
            scope,
            day.used,
            cost,
            d.tz_name
        ),
    }
}

/// One `daily` count a call took, as the fleet charges it (fleet mode): the counter's key,
/// the day counted (`YYYY-MM-DD` in the rule's time zone), the cost and the limit.
#[derive(Debug, Clone)]
pub struct DailyCharge {
    pub key: Vec<u8>,
    pub day: String,
    pub cost: u64,
    pub limit: u64,
}

/// Drops `rule`'s idle scopes and sets the size of the next sweep; returns how long until
/// the first scope left becomes idle (`None`: none is left).
fn sweep(scopes: &mut Scopes, rule: &Rule, now: Instant) -> Option<Duration> {
    let today = rule.daily.as_ref().map(|d| {
        let date = jiff::Timestamp::now().to_zoned(d.tz.clone()).date();
        let ends = next_midnight(d, Day { date, used: 0 }).unwrap_or(0);
        (
            date,
            Duration::from_millis(ends.saturating_sub(crate::now_ms())),
        )
    });
    let window = rule.loop_.as_ref().map(|l| l.window);
    let bucket = rule.bucket();
    let mut first: Option<Duration> = None;
    scopes.map.retain(|_, st| {
        let idle_in = st.idle_in(now, bucket, window, today);
        if let Some(d) = idle_in {
            first = Some(first.map_or(d, |f| f.min(d)));
        }
        idle_in.is_some()
    });
    scopes.sweep_at = (scopes.map.len() * 2).max(SWEEP_FLOOR);
    first
}

/// The sweeper's shortest sleep: scopes of a burst go a second at a time at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Sweeps the idle scopes of every rule in force as they become idle, from the first new
/// scope until no rule holds one: so scopes go with their window (not only when later
/// ones come), and an idle daemon keeps no guard timer. At most one runs (`armed`); none
/// without a tokio runtime (unit tests), where the sweeps of [`Guards::check`] remain.
fn arm_sweeper(set: &Arc<ArcSwap<RuleSet>>, armed: &Arc<AtomicBool>) {
    if armed.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        armed.store(false, Ordering::Release);
        return;
    };
    let set = Arc::downgrade(set);
    let armed = armed.clone();
    runtime.spawn(async move {
        loop {
            // Gone with the guards.
            let Some(rules) = set.upgrade() else { return };
            let rules = rules.load_full();
            let now = Instant::now();
            let mut dropped = false;
            let next = rules
                .rules
                .iter()
                .filter_map(|r| {
                    let mut scopes = lock(&r.state.scopes);
                    let before = scopes.map.len();
                    let next = sweep(&mut scopes, r, now);
                    dropped |= scopes.map.len() < before;
                    next
                })
                .min();
            drop(rules);
            if dropped {
                // What they held is freed after the work that made them: give it back.
                crate::trim::worked();
            }
            match next {
                Some(d) => tokio::time::sleep(d.max(SWEEP_EVERY)).await,
                None => {
                    // Disarmed, then one more look: a scope made meanwhile saw the sweeper
                    // armed and started none.
                    armed.store(false, Ordering::Release);
                    let Some(rules) = set.upgrade() else { return };
                    let held = rules
                        .load()
                        .rules
                        .iter()
                        .any(|r| !lock(&r.state.scopes).map.is_empty());
                    if !held || armed.swap(true, Ordering::AcqRel) {
                        return;
                    }
                }
            }
        }
    });
}

fn scope_status(
    rule: &Rule,
    key: &str,
    st: &ScopeState,
    now: Instant,
    at_ms: &dyn Fn(Instant) -> u64,
) -> GuardScopeStatus {
    let mut fill: f64 = 0.0;
    let mut counter = |used: f64, allowed: u64, resets: Option<u64>| {
        if allowed > 0 {
            fill = fill.max((used / allowed as f64).min(1.0));
        }
        GuardCounter {
            used: used.round() as u64,
            allowed,
            resets_at_ms: resets,
        }
    };
    let rate = rule.rate.as_ref().map(|r| {
        let (used, next) = st
            .bucket
            .as_ref()
            .map_or((0.0, None), |b| b.used(now, r.cap, r.per_sec));
        counter(used, r.cap as u64, next.map(|d| at_ms(now + d)))
    });
    let daily = rule.daily.as_ref().map(|d| {
        let today = jiff::Timestamp::now().to_zoned(d.tz.clone()).date();
        let day = Day::current(st.day, today);
        counter(day.used as f64, d.limit, next_midnight(d, day))
    });
    let concurrency = rule.concurrency.map(|(max, _)| {
        let running = st.slots.as_ref().map_or(0, |(m, s)| {
            (*m as usize).saturating_sub(s.available_permits())
        });
        counter(running as f64, u64::from(max), None)
    });
    let loop_ = rule.loop_.as_ref().map(|l| {
        let (n, until) = st.repeats.most(now, l.window);
        counter(n as f64, u64::from(l.calls), until.map(at_ms))
    });
    GuardScopeStatus {
        scope: key.to_owned(),
        fill,
        rate,
        daily,
        concurrency,
        loop_,
    }
}

pub fn scope_name(s: GuardScope) -> &'static str {
    match s {
        GuardScope::Host => "host",
        GuardScope::Frontend => "frontend",
        GuardScope::Session => "session",
        GuardScope::Workspace => "workspace",
    }
}

/// The counter key of session `id`'s calls under a `session` rule.
fn session_scope(id: &str) -> String {
    format!("session:{id}")
}

/// The counter key of `call` under a rule of `scope` (a call without a session counts as
/// its frontend's under a `session` rule).
fn scope_key(scope: GuardScope, call: &Call) -> String {
    match (scope, call.session) {
        (GuardScope::Host, _) => "host".to_owned(),
        (GuardScope::Session, Some(s)) => session_scope(s),
        (GuardScope::Session | GuardScope::Frontend, _) => format!("frontend:{}", call.frontend),
        (GuardScope::Workspace, _) => format!("workspace:{}", call.workspace.display()),
    }
}

/// The digest of a call for `loop`: its tool and its arguments as canonical JSON (object
/// members in any order are the same call; 1 and 1.0 are not), less the `ignore`d
/// top-level fields. No allocation: each object member is hashed alone and the members'
/// hashes are added up, which no order changes.
fn digest(tool: &str, args: &Map<String, Value>, ignore: &[String]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    tool.hash(&mut h);
    let members = args
        .iter()
        .filter(|(k, _)| !ignore.iter().any(|i| i == *k))
        .fold(0u64, |sum, (k, v)| sum.wrapping_add(member(k, v)));
    members.hash(&mut h);
    h.finish()
}

fn member(key: &str, value: &Value) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    hash_value(value, &mut h);
    h.finish()
}

fn hash_value(v: &Value, h: &mut std::hash::DefaultHasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                (2u8, i).hash(h);
            } else if let Some(u) = n.as_u64() {
                (3u8, u).hash(h);
            } else {
                (4u8, n.as_f64().map(f64::to_bits)).hash(h);
            }
        }
        Value::String(s) => (5u8, s).hash(h),
        Value::Array(items) => {
            (6u8, items.len()).hash(h);
            for x in items {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            let sum = m
                .iter()
                .fold(0u64, |sum, (k, v)| sum.wrapping_add(member(k, v)));
            (7u8, m.len(), sum).hash(h);
        }
    }
}

fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{} s", s.ceil())
    } else {
        format!("{} min", (s / 60.0).ceil())
    }
}

fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// The cost of checking a call against `rules` (plus the built-in loop breaker), for
/// `benches/`: `n` checks of one call, and each check's time in nanoseconds. Not part of
/// the daemon's API; here so a benchmark can time the very code the pipeline runs.
#[doc(hidden)]
pub fn bench_check(rules: serde_json::Value, n: usize) -> Result<Vec<u64>, String> {
    let rules: Vec<GuardRule> = serde_json::from_value(rules).map_err(|e| e.to_string())?;
    let guards = Guards::new(&rules, Ok(Vec::new()));
    let mut args = Map::new();
    args.insert("path".into(), Value::String("src/main.rs".into()));
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        // Calls that differ (as an agent's do), so the loop breaker never refuses.
        args.insert("offset".into(), Value::from(i));
        let call = Call {
            target: Target {
                tool: "read_file",
                source: GuardSource::Builtin,
                server: None,
                approval: Some(crate::protocol::ApprovalClass::ReadOnly),
            },
            args: &args,
            session: Some("bench-session"),
            frontend: "bench/1000",
            workspace: Path::new("/work"),
        };
        let t = Instant::now();
        let adm = guards.check(&call);
        times.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        drop(adm);
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::rules::default_loop;
    use super::*;
    use serde_json::json;

    fn rules(v: Value) -> Vec<GuardRule> {
        serde_json::from_value(v).unwrap()
    }

    fn call<'a>(tool: &'a str, args: &'a Map<String, Value>, session: &'a str) -> Call<'a> {
        Call {
            target: Target {
                tool,
                source: GuardSource::Builtin,
                server: None,
                approval: Some(crate::protocol::ApprovalClass::ReadOnly),
            },
            args,
            session: Some(session),
            frontend: "t/1",
            workspace: Path::new("/w"),
        }
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn the_digest_ignores_member_order_and_ignored_fields() {
        let a = obj(json!({"a": 1, "b": {"x": [1, 2], "y": null}, "id": "r1"}));
        let b = obj(json!({"b": {"y": null, "x": [1, 2]}, "a": 1, "id": "r2"}));
        assert_ne!(digest("t", &a, &[]), digest("t", &b, &[]));
        let ignore = vec!["id".to_owned()];
        assert_eq!(digest("t", &a, &ignore), digest("t", &b, &ignore));
        assert_ne!(digest("t", &a, &ignore), digest("u", &a, &ignore));
        let c = obj(json!({"a": 1.0, "b": {"x": [1, 2], "y": null}}));
        assert_ne!(digest("t", &a, &ignore), digest("t", &c, &ignore));
        let d = obj(json!({"b": {"x": [2, 1], "y": null}, "a": 1}));
        assert_ne!(digest("t", &a, &ignore), digest("t", &d, &ignore));
    }

    /// Realistic patterns against the default loop breaker (8 identical calls in 60 s):
    /// what an agent polling a build or a server does must pass, what a model repeating
    /// itself does must be stopped within a minute. The numbers in `default_loop` come
    /// from here.
    #[test]
    fn polling_patterns() {
        let t0 = Instant::now();
        let l = default_loop().loop_.unwrap();
        let window = Duration::from_secs(l.window_s);
        let run = |every_ms: u64, calls: u64| -> Option<u64> {
            let mut r = counters::Repeats::default();
            (0..calls).find(|i| {
                r.take(7, t0 + Duration::from_millis(i * every_ms), window, l.calls)
                    .is_err()
            })
        };
        // `gh run view` / `curl /health` / `cargo check` polled every 10 s, 15 s, 30 s for
        // 20 minutes: never stopped.
        for every in [7_500, 10_000, 15_000, 30_000] {
            assert_eq!(
                run(every, 20 * 60_000 / every),
                None,
                "poll every {every} ms"
            );
        }
        // A model re-sending the same call at the pace of its turns (1 to 5 s): stopped at
        // the 9th call, within 45 s.
        for every in [1_000, 2_000, 5_000] {
            let stopped = run(every, 100).expect("a loop is stopped");
            assert_eq!(stopped, 8, "loop every {every} ms");
            assert!(stopped * every <= 45_000);
        }
        // A poll every 5 s (tighter than needed) is told to wait longer at the 9th.
        assert_eq!(run(5_000, 100), Some(8));
    }

    #[test]
    fn a_refusal_gives_back_what_earlier_rules_took() {
        let g = Guards::new(
            &rules(json!([
                {"name": "wide", "rate": {"calls": 5, "per_s": 3600}},
                {"name": "narrow", "tools": ["bash"], "rate": {"calls": 1, "per_s": 3600}},
            ])),
            Ok(Vec::new()),
        );
        let a = obj(json!({"command": "ls"}));
        assert!(g.check(&call("bash", &a, "s1")).is_ok());
        let b = obj(json!({"command": "pwd"}));
        let refused = g.check(&call("bash", &b, "s1")).err().unwrap();
        assert_eq!(refused.refusal.rule, "narrow");
        // `wide` got its token back: four more calls of another tool pass.
        for i in 0..4 {
            let x = obj(json!({"i": i}));
            assert!(g.check(&call("read_file", &x, "s1")).is_ok(), "call {i}");
        }
        let x = obj(json!({"i": 9}));
        assert_eq!(
            g.check(&call("read_file", &x, "s1"))
                .err()
                .unwrap()
                .refusal
                .rule,
            "wide"
        );
    }

    #[test]
    fn scopes_of_many_sessions_are_swept_when_idle() {
        let g = Guards::new(
            &rules(json!([{"name": "r", "rate": {"calls": 100, "per_s": 0.001}}])),
            Ok(Vec::new()),
        );
        let a = obj(json!({}));
        for i in 0..10_000 {
            let s = format!("s{i}");
            assert!(g.check(&call("x", &a, &s)).is_ok());
        }
        // A refill of 100 calls in a millisecond makes every scope idle at once, and
        // the loop breaker's repeats are in the window: each rule sweeps what it can.
        let set = g.set.load_full();
        let r = set.rules.iter().find(|r| r.name == "r").unwrap();
        assert!(lock(&r.state.scopes).map.len() <= 2 * SWEEP_FLOOR, "swept");
    }

    /// After a burst of sessions nothing new comes to sweep their scopes: they go when
    /// their window is over, and the sweeper ends with them.
    #[tokio::test]
    async fn scopes_go_with_their_window_after_a_burst() {
        let g = Guards::new(
            &rules(json!([
                {"name": super::rules::DEFAULT_LOOP, "loop": {"calls": 2, "window_s": 1}},
                {"name": "r", "scope": "workspace", "rate": {"calls": 1000, "per_s": 1}}
            ])),
            Ok(Vec::new()),
        );
        let a = obj(json!({}));
        for i in 0..300 {
            let s = format!("s{i}");
            assert!(g.check(&call("x", &a, &s)).is_ok());
        }
        // Within the window the loop is still refused.
        assert!(g.check(&call("x", &a, "s0")).is_ok());
        assert!(g.check(&call("x", &a, "s0")).is_err());
        let held = || {
            g.set
                .load()
                .rules
                .iter()
                .map(|r| lock(&r.state.scopes).map.len())
                .sum::<usize>()
        };
        assert!(held() > SWEEP_FLOOR, "{}", held());
        let deadline = Instant::now() + Duration::from_secs(30);
        while (held() > 0 || g.sweeping.load(Ordering::Acquire)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(held(), 0, "scopes left after their window");
        assert!(
            !g.sweeping.load(Ordering::Acquire),
            "the sweeper outlived the scopes"
        );
        // A new scope arms it again.
        assert!(g.check(&call("x", &a, "again")).is_ok());
        assert!(g.sweeping.load(Ordering::Acquire));
    }

    #[test]
    fn damaged_daily_counters_fail_closed_until_reset() {
        let g = Guards::new(
            &rules(json!([
                {"name": "paid", "daily": {"limit": 5, "time_zone": "UTC"}},
                {"name": "fast", "rate": {"calls": 5, "per_s": 1}}
            ])),
            Ok(vec![(daily_key("paid", "session:s1"), b"garbage".to_vec())]),
        );
        let a = obj(json!({}));
        let refused = g.check(&call("x", &a, "s1")).err().unwrap();
        assert_eq!(refused.refusal.limit, GuardLimit::Daily);
        assert!(
            refused.message.contains("toolhost guards reset paid"),
            "{}",
            refused.message
        );
        assert_eq!(g.errors().len(), 1);
        let (n, keys) = g.reset("paid", None).unwrap();
        assert_eq!(n, 0);
        assert_eq!(keys, vec![daily_key("paid", "session:s1")]);
        assert!(g.check(&call("x", &a, "s1")).is_ok());
        assert!(g.errors().is_empty());
    }

    #[test]
    fn counts_survive_an_edit_and_go_with_a_removed_rule() {
        let g = Guards::new(
            &rules(json!([{"name": "r", "rate": {"calls": 2, "per_s": 3600}}])),
            Ok(Vec::new()),
        );
        let a = obj(json!({"n": 1}));
        let b = obj(json!({"n": 2}));
        assert!(g.check(&call("x", &a, "s")).is_ok());
        g.configure(&rules(
            json!([{"name": "r", "tools": ["x"], "rate": {"calls": 2, "per_s": 3600}}]),
        ));
        assert!(g.check(&call("x", &b, "s")).is_ok());
        assert!(g.check(&call("x", &b, "s")).is_err());
        g.configure(&[]);
        g.configure(&rules(
            json!([{"name": "r", "rate": {"calls": 2, "per_s": 3600}}]),
        ));
        assert!(g.check(&call("x", &b, "s")).is_ok());
    }
}
