//! The approval queue: one per daemon, where a strict session's call that needs approval
//! waits for an operator (`approvals.decide` from `toolhost approvals`, the page, or any
//! socket client) instead of failing at once because its own frontend cannot be asked.
//!
//! A call enters with [`Approvals::enqueue`] and holds a [`Ticket`] while it waits. Every
//! way a wait can end goes through the queue's one lock, so exactly one ending wins: an
//! operator's decision, the caller's own answer (when its frontend was asked too, the two
//! race), the deadline, or the call leaving (its ticket dropped: cancelled, caller gone,
//! shutdown). Each ending is announced once as an `approval_decided` event; a decision
//! that comes second is refused with the first one's name. [`settle`] is the pipeline's
//! whole approval step, queue or not.
//!
//! In fleet mode the queue has a [`Shared`] side (src/fleet/): entries are published to
//! the fleet's database, an operator's decision is claimed there first (exactly one claim
//! wins fleet-wide) and so is each ending taken here (caller's answer, deadline, leaving);
//! a decision made on another member reaches its call through [`Approvals::apply`].
//!
//! `allow_session` is remembered here in memory, per session and tool, until the session
//! is deleted or the daemon stops: a restart asks again (the safe side).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::sync::{broadcast, oneshot};

use crate::audit::Caller;
use crate::error::Error;
use crate::lock;
use crate::protocol::{
    ApprovalClass, ApprovalDecider, ApprovalDecision, ApprovalEvent, ApprovalOutcome,
    ApprovalSummary, ApprovalVerdictRecord, ApprovalsDecideParams, DecidedApproval, DecidedVia,
    ErrorKind, InputKind, PendingApproval,
};
use crate::registry::{CallContext, ToolError};

/// Calls waiting at most; one more fails at once, as without a queue.
pub const MAX_PENDING: usize = 256;
/// Calls of one frontend waiting at most: one client flooding the queue leaves the rest
/// of it to the others.
pub const MAX_PENDING_PER_FRONTEND: usize = MAX_PENDING / 4;
/// Endings remembered, so that a late decision hears who came first.
const KEEP_DECIDED: usize = 256;
/// A decision's reason is kept to this many characters.
const MAX_REASON_CHARS: usize = 500;

/// Which frontend a queued call comes from: the process at the other end of its
/// connection (`SO_PEERCRED`, or the kernel's socket tables on TCP); for the daemon's own
/// connection (the MCP facade's), the client's name. `None`: not told (not limited by
/// frontend).
fn frontend(client: Option<&str>) -> Option<String> {
    let me = std::process::id() as i32;
    match crate::audit::current_caller().and_then(|c| c.pid) {
        Some(pid) if pid != me => Some(format!("pid:{pid}")),
        _ => client.map(|c| format!("client:{c}")),
    }
}

/// The fleet's side of the queue, when the daemon is a member of one (src/fleet/).
pub trait Shared: Send + Sync {
    /// This member's id: it prefixes entry ids (`ap-<member>-<n>`, unique in the fleet)
    /// and names where a decision was made.
    fn member(&self) -> &str;
    /// Queues the entry's row (written in order with this member's other writes).
    fn publish(&self, entry: &PendingApproval);
    /// Queues an ending taken on this member (a no-op in the database when another
    /// decision is there already).
    fn ended(&self, decided: &DecidedApproval);
    /// Decides entry `id` in the database with `verdict`, if it still waits there.
    fn claim(
        &self,
        id: &str,
        verdict: &ApprovalVerdictRecord,
    ) -> BoxFuture<'static, Result<Claim, String>>;
    /// Every entry waiting in the fleet, oldest first.
    fn list(&self) -> BoxFuture<'static, Result<Vec<PendingApproval>, String>>;
    /// Who may decide, when the fleet limits it to a role (`fleet.approver_role`).
    fn deciders(&self) -> Option<&Deciders>;
}

/// Who may decide the queue's calls when a role is required (proto-docs/fleet.md, "Who
/// decides"): a fleet user whose token carries `role`, and the operator — a caller with
/// no user's token (the daemon's socket, an operator token, the page logged in with
/// either or with a login code) — unless `operator` is false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deciders {
    pub role: String,
    pub operator: bool,
}

impl Deciders {
    /// Whether `peer` may decide; else why not, in words for the one refused.
    pub fn admits(&self, peer: Option<&Caller>) -> Result<(), String> {
        let role = &self.role;
        match peer.and_then(|c| c.user().map(|u| (u, &c.roles))) {
            Some((_, roles)) if roles.contains(role) => Ok(()),
            Some((user, _)) => Err(format!(
                "user {user} may not decide approvals: this fleet lets only tokens with the role \"{role}\" decide (fleet.approver_role), and this token of {user} has no such role; ask an approver, or have an operator make a token with `toolhost fleet token create --user {user} --role {role}`"
            )),
            None if self.operator => Ok(()),
            None => Err(format!(
                "only tokens with the role \"{role}\" decide approvals in this fleet (fleet.approver_role), and fleet.operator_approves is false: decide with a user's token that carries it"
            )),
        }
    }
}

/// What a [`Shared::claim`] found.
#[derive(Debug)]
pub enum Claim {
    /// This claim decided the entry.
    Won(DecidedApproval),
    /// Another decision came first: this one.
    Lost(DecidedApproval),
    /// The entry waits, but `allow_session` was claimed for an entry without a session.
    Sessionless,
    /// No such entry in the database (not yet written, or not a fleet id).
    Unknown,
}

/// The daemon's approval queue.
pub struct Approvals {
    state: Mutex<State>,
    /// The fleet's side, set once at start in fleet mode.
    shared: OnceLock<Arc<dyn Shared>>,
    /// Sent under the state's lock, so a subscriber's snapshot and its events never
    /// overlap or leave a gap.
    events: broadcast::Sender<ApprovalEvent>,
}

#[derive(Default)]
struct State {
    /// By number, so oldest first.
    pending: BTreeMap<u64, Waiting>,
    decided: VecDeque<DecidedApproval>,
    /// Tools allowed for the rest of a session, by session id.
    allowed: HashMap<String, HashSet<String>>,
    /// The number of the last entry (ids are `ap-<number>`, never reused).
    last: u64,
}

struct Waiting {
    entry: PendingApproval,
    /// Who asked ([`frontend`]).
    frontend: Option<String>,
    since: Instant,
    answer: oneshot::Sender<ApprovalVerdictRecord>,
}

/// What a call puts to the queue.
pub struct Request<'a> {
    pub call_id: &'a str,
    pub tool: &'a str,
    pub session_id: Option<&'a str>,
    pub client: Option<String>,
    pub class: Option<ApprovalClass>,
    pub summary: ApprovalSummary,
    pub arguments: &'a Map<String, Value>,
    pub caller_asked: bool,
    pub wait: Duration,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            state: Mutex::default(),
            shared: OnceLock::new(),
            events: broadcast::channel(256).0,
        }
    }
}

impl Approvals {
    /// Makes this the member's side of the fleet's queue (once, before anything waits).
    pub fn share(&self, shared: Arc<dyn Shared>) {
        let _ = self.shared.set(shared);
    }

    fn shared(&self) -> Option<Arc<dyn Shared>> {
        self.shared.get().cloned()
    }

    /// The id of entry number `key`.
    fn id_of(&self, key: u64) -> String {
        match self.shared.get() {
            Some(s) => format!("ap-{}-{key}", s.member()),
            None => format!("ap-{key}"),
        }
    }

    /// The entry number of `id`, when it is one of this queue's.
    fn key_of(&self, id: &str) -> Option<u64> {
        let rest = id.strip_prefix("ap-")?;
        let number = match self.shared.get() {
            Some(s) => rest.strip_prefix(s.member())?.strip_prefix('-')?,
            None => rest,
        };
        number.parse().ok()
    }

    /// Whether `id` waits in this daemon's own queue.
    pub fn is_local(&self, id: &str) -> bool {
        self.key_of(id)
            .is_some_and(|k| lock(&self.state).pending.contains_key(&k))
    }

    /// The ids waiting in this daemon's own queue.
    pub fn local_ids(&self) -> Vec<String> {
        lock(&self.state)
            .pending
            .values()
            .map(|w| w.entry.id.clone())
            .collect()
    }

    /// Puts a call in the queue; `None` when [`MAX_PENDING`] calls wait already, or
    /// [`MAX_PENDING_PER_FRONTEND`] of the same frontend.
    pub fn enqueue(self: &Arc<Self>, r: Request<'_>) -> Option<Ticket> {
        let mut state = lock(&self.state);
        if state.pending.len() >= MAX_PENDING {
            return None;
        }
        let from = frontend(r.client.as_deref());
        if from.is_some()
            && state
                .pending
                .values()
                .filter(|w| w.frontend == from)
                .count()
                >= MAX_PENDING_PER_FRONTEND
        {
            return None;
        }
        state.last += 1;
        let key = state.last;
        let since_ms = crate::now_ms();
        let wait_ms = u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX);
        let entry = PendingApproval {
            id: self.id_of(key),
            call_id: r.call_id.to_owned(),
            tool: r.tool.to_owned(),
            session_id: r.session_id.map(str::to_owned),
            client: r.client,
            class: r.class,
            summary: r.summary,
            arguments: masked(r.arguments),
            caller_asked: r.caller_asked,
            since_ms,
            deadline_ms: since_ms.saturating_add(wait_ms),
        };
        let (answer, rx) = oneshot::channel();
        let _ = self
            .events
            .send(ApprovalEvent::ApprovalPending(entry.clone()));
        if let Some(shared) = self.shared.get() {
            shared.publish(&entry);
        }
        state.pending.insert(
            key,
            Waiting {
                entry,
                frontend: from,
                since: Instant::now(),
                answer,
            },
        );
        Some(Ticket {
            queue: self.clone(),
            key,
            rx,
        })
    }

    /// The calls waiting now, oldest first.
    pub fn list(&self) -> Vec<PendingApproval> {
        let state = lock(&self.state);
        state.pending.values().map(|w| w.entry.clone()).collect()
    }

    /// [`Approvals::list`], fleet-wide in fleet mode: every member's waiting calls (this
    /// member's own ones not yet written there included); only this member's while the
    /// database is unreachable.
    pub async fn list_anywhere(&self) -> Vec<PendingApproval> {
        let local = self.list();
        let Some(shared) = self.shared() else {
            return local;
        };
        match shared.list().await {
            Ok(mut all) => {
                let known: HashSet<String> = all.iter().map(|e| e.id.clone()).collect();
                all.extend(local.into_iter().filter(|e| !known.contains(&e.id)));
                all.sort_by_key(|e| e.since_ms);
                all
            }
            Err(_) => local,
        }
    }

    /// [`Approvals::decide`], fleet-wide in fleet mode: the decision is claimed in the
    /// database first, so the first decision anywhere wins; a call waiting on another
    /// member is woken there. With the database unreachable only this member's own calls
    /// can be decided (the ending is written when it returns).
    pub async fn decide_anywhere(
        &self,
        p: ApprovalsDecideParams,
        peer: Option<&Caller>,
    ) -> Result<DecidedApproval, Error> {
        let Some(shared) = self.shared() else {
            return self.decide(p, peer);
        };
        let by = self.decider(&p, peer)?;
        let verdict = ApprovalVerdictRecord {
            outcome: p.decision.into(),
            by: Some(by),
            reason: p.reason.as_deref().map(clip_reason),
            waited_ms: 0,
        };
        match shared.claim(&p.id, &verdict).await {
            Ok(Claim::Won(d)) => Ok(self.apply(&d).unwrap_or(d)),
            Ok(Claim::Lost(first)) => {
                self.apply(&first);
                Err(already_decided(&first))
            }
            Ok(Claim::Sessionless) => Err(sessionless_error(&p.id)),
            // Not (yet) in the database: this member's own queue decides.
            Ok(Claim::Unknown) => self.decide(p, peer),
            Err(e) if self.is_local(&p.id) => {
                tracing::warn!(id = %p.id, error = %e, "fleet store unreachable: deciding a local call here");
                self.decide(p, peer)
            }
            Err(e) => Err(Error::Server(format!(
                "the fleet's database is unreachable ({e}): only this member's own waiting calls can be decided now"
            ))),
        }
    }

    /// Ends this member's waiting call `d.id` as decided elsewhere (no-op when it does
    /// not wait here): what the fleet's LISTEN connection applies.
    pub fn apply(&self, d: &DecidedApproval) -> Option<DecidedApproval> {
        let key = self.key_of(&d.id)?;
        let mut state = lock(&self.state);
        let waiting = state.pending.remove(&key)?;
        let v = &d.verdict;
        Some(self.finish(
            &mut state,
            waiting,
            v.outcome,
            v.by.clone(),
            v.reason.clone(),
        ))
    }

    /// Who decides, from the params and the deciding connection.
    fn decider(
        &self,
        p: &ApprovalsDecideParams,
        peer: Option<&Caller>,
    ) -> Result<ApprovalDecider, Error> {
        if p.via == DecidedVia::Caller {
            return Err(Error::InvalidParams(
                "via \"caller\" is the call's own answer; an operator decides via socket, cli or ui"
                    .into(),
            ));
        }
        if let Some(rule) = self.shared.get().and_then(|s| s.deciders()) {
            rule.admits(peer).map_err(Error::InvalidParams)?;
        }
        Ok(ApprovalDecider {
            via: p.via,
            uid: peer.and_then(|c| c.uid),
            pid: peer.and_then(|c| c.pid),
            process: peer.and_then(|c| c.process.clone()),
            member: self.shared.get().map(|s| s.member().to_owned()),
            user: peer.and_then(Caller::user).map(str::to_owned),
        })
    }

    /// The calls waiting now and every event from this moment on.
    pub fn subscribe(&self) -> (Vec<PendingApproval>, broadcast::Receiver<ApprovalEvent>) {
        let state = lock(&self.state);
        let rx = self.events.subscribe();
        (
            state.pending.values().map(|w| w.entry.clone()).collect(),
            rx,
        )
    }

    /// An operator's decision on entry `p.id`, made from the connection of `peer`; the
    /// first one wins.
    pub fn decide(
        &self,
        p: ApprovalsDecideParams,
        peer: Option<&Caller>,
    ) -> Result<DecidedApproval, Error> {
        let by = self.decider(&p, peer)?;
        let mut state = lock(&self.state);
        let unknown = || {
            Error::InvalidParams(format!(
                "no call waits for approval as {:?} (see approvals.list)",
                p.id
            ))
        };
        let Some(key) = self.key_of(&p.id).filter(|k| state.pending.contains_key(k)) else {
            return Err(match state.decided.iter().find(|d| d.id == p.id) {
                Some(first) => already_decided(first),
                None => unknown(),
            });
        };
        let sessionless = state
            .pending
            .get(&key)
            .is_some_and(|w| w.entry.session_id.is_none());
        if p.decision == ApprovalDecision::AllowSession && sessionless {
            return Err(sessionless_error(&p.id));
        }
        let waiting = state.pending.remove(&key).ok_or_else(unknown)?;
        let reason = p.reason.as_deref().map(clip_reason);
        Ok(self.finish(&mut state, waiting, p.decision.into(), Some(by), reason))
    }

    /// Whether `tool` was allowed for the rest of session `session`.
    pub fn allowed_in_session(&self, session: &str, tool: &str) -> bool {
        lock(&self.state)
            .allowed
            .get(session)
            .is_some_and(|tools| tools.contains(tool))
    }

    /// Forgets a deleted session's allowances (a new session of the same id starts afresh).
    pub fn forget_session(&self, session: &str) {
        lock(&self.state).allowed.remove(session);
    }

    /// Ends a wait just taken out of `state.pending` with `outcome`: tells its call,
    /// remembers it, announces it.
    fn finish(
        &self,
        state: &mut State,
        waiting: Waiting,
        outcome: ApprovalOutcome,
        by: Option<ApprovalDecider>,
        reason: Option<String>,
    ) -> DecidedApproval {
        let verdict = ApprovalVerdictRecord {
            outcome,
            by,
            reason,
            waited_ms: u64::try_from(waiting.since.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let e = waiting.entry;
        if let (ApprovalOutcome::AllowSession, Some(session)) = (outcome, &e.session_id) {
            state
                .allowed
                .entry(session.clone())
                .or_default()
                .insert(e.tool.clone());
        }
        let decided = DecidedApproval {
            id: e.id,
            call_id: e.call_id,
            tool: e.tool,
            session_id: e.session_id,
            verdict: verdict.clone(),
        };
        if state.decided.len() >= KEEP_DECIDED {
            state.decided.pop_front();
        }
        state.decided.push_back(decided.clone());
        if let Some(shared) = self.shared.get() {
            shared.ended(&decided);
        }
        let _ = waiting.answer.send(verdict);
        let _ = self
            .events
            .send(ApprovalEvent::ApprovalDecided(decided.clone()));
        decided
    }
}

fn clip_reason(r: &str) -> String {
    r.chars().take(MAX_REASON_CHARS).collect()
}

fn sessionless_error(id: &str) -> Error {
    Error::InvalidParams(format!(
        "{id} has no session, so it cannot be allowed for one; use allow_once"
    ))
}

fn already_decided(first: &DecidedApproval) -> Error {
    let v = &first.verdict;
    let who = match &v.by {
        Some(by) => by.describe(),
        None => "nobody".into(),
    };
    Error::InvalidParams(format!(
        "{} is already decided: {} by {who}",
        first.id,
        v.outcome.as_str()
    ))
}

/// A call's place in the queue while it waits; dropped while still waiting (the call was
/// cancelled, its caller left), the entry is withdrawn.
pub struct Ticket {
    queue: Arc<Approvals>,
    key: u64,
    rx: oneshot::Receiver<ApprovalVerdictRecord>,
}

impl Ticket {
    /// Waits for an operator's decision.
    async fn decided(&mut self) -> ApprovalVerdictRecord {
        match (&mut self.rx).await {
            Ok(v) => v,
            // The entry always answers before it goes; should it not, the call waits on
            // for its other endings rather than run.
            Err(_) => std::future::pending().await,
        }
    }

    /// Ends the wait with `outcome` (an ending taken on this member), unless a decision
    /// came first: then that one. In fleet mode the ending is claimed in the database
    /// first, so a decision made on another member just before wins there and here.
    async fn end(
        &mut self,
        outcome: ApprovalOutcome,
        by: Option<ApprovalDecider>,
    ) -> ApprovalVerdictRecord {
        if let Some(shared) = self.queue.shared() {
            let proposed = ApprovalVerdictRecord {
                outcome,
                by: by.clone(),
                reason: None,
                waited_ms: 0,
            };
            if let Ok(Claim::Lost(first)) =
                shared.claim(&self.queue.id_of(self.key), &proposed).await
            {
                self.queue.apply(&first);
            }
        }
        self.close(outcome, by)
    }

    /// Ends the wait with `outcome`, unless a decision came first: then that one.
    fn close(
        &mut self,
        outcome: ApprovalOutcome,
        by: Option<ApprovalDecider>,
    ) -> ApprovalVerdictRecord {
        let mut state = lock(&self.queue.state);
        if let Some(waiting) = state.pending.remove(&self.key) {
            return self
                .queue
                .finish(&mut state, waiting, outcome, by, None)
                .verdict;
        }
        drop(state);
        match self.rx.try_recv() {
            Ok(v) => v,
            Err(_) => ApprovalVerdictRecord {
                outcome: ApprovalOutcome::Withdrawn,
                by: None,
                reason: None,
                waited_ms: 0,
            },
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        if let Some(waiting) = state.pending.remove(&self.key) {
            self.queue
                .finish(&mut state, waiting, ApprovalOutcome::Withdrawn, None, None);
        }
    }
}

/// A call that needs approval, as the pipeline found it.
pub struct Ask<'a> {
    pub tool: &'a str,
    pub class: Option<ApprovalClass>,
    /// The one-line summary shown to whoever decides.
    pub summary: ApprovalSummary,
    /// Why the call cannot run yet and how to approve it (the `approval_required` text).
    pub refusal: String,
    pub arguments: &'a Map<String, Value>,
    pub client: Option<String>,
    /// `approval.wait_s`: 0 keeps the call out of the queue.
    pub wait_s: u64,
    /// The call's timeout, which bounds the question to its own frontend when there is no
    /// queue.
    pub timeout_ms: u64,
}

/// The approval step of a call that needs approval: asks the call's frontend (when it
/// answers elicitation) and puts the call in the queue (when `wait_s` > 0), and returns
/// whether it may run, with the decision for the audit log.
pub async fn settle(
    queue: &Arc<Approvals>,
    ctx: &CallContext,
    ask: Ask<'_>,
) -> (Result<(), ToolError>, Option<ApprovalVerdictRecord>) {
    // Where a role decides, only the queue does: the caller's own frontend could approve
    // its own call.
    let role_decides = queue.shared.get().is_some_and(|s| s.deciders().is_some());
    let asks_caller = ctx.inputs.accepts(InputKind::Elicitation) && !role_decides;
    let wait = Duration::from_secs(ask.wait_s);
    let ticket = (ask.wait_s > 0)
        .then(|| {
            queue.enqueue(Request {
                call_id: &ctx.call_id,
                tool: ask.tool,
                session_id: ctx.session_id.as_deref(),
                client: ask.client.clone(),
                class: ask.class,
                summary: ask.summary.clone(),
                arguments: ask.arguments,
                caller_asked: asks_caller,
                wait,
            })
        })
        .flatten();
    let since = Instant::now();
    let caller = || ApprovalDecider {
        via: DecidedVia::Caller,
        uid: None,
        pid: None,
        process: None,
        member: None,
        user: None,
    };
    let Some(mut ticket) = ticket else {
        if !asks_caller {
            let mut refusal = ask.refusal.clone();
            if ask.wait_s > 0 {
                refusal.push_str(&format!(
                    " The approval queue is full ({MAX_PENDING} calls wait, at most {MAX_PENDING_PER_FRONTEND} of one frontend), so it did not wait there."
                ));
            }
            return (Err(approval_required(&ask, refusal)), None);
        }
        let asked = ask_caller(ctx, ask.tool, &ask.summary);
        let accepted =
            match tokio::time::timeout(Duration::from_millis(ask.timeout_ms), asked).await {
                Ok(Ok(accepted)) => accepted,
                Ok(Err(why)) => {
                    let refusal = format!("{} Asking the user failed: {why}", ask.refusal);
                    return (Err(approval_required(&ask, refusal)), None);
                }
                Err(_) => return (Err(ToolError::timed_out(ask.tool, ask.timeout_ms)), None),
            };
        let verdict = ApprovalVerdictRecord {
            outcome: if accepted {
                ApprovalOutcome::AllowOnce
            } else {
                ApprovalOutcome::Deny
            },
            by: Some(caller()),
            reason: None,
            waited_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        return (outcome(&ask, &verdict), Some(verdict));
    };
    // The caller's own answer; a question it cannot answer leaves the queue to decide.
    let asked = async {
        if asks_caller {
            if let Ok(accepted) = ask_caller(ctx, ask.tool, &ask.summary).await {
                return accepted;
            }
        }
        std::future::pending().await
    };
    let ending = tokio::select! {
        v = ticket.decided() => Err(v),
        accepted = asked => {
            let answer = if accepted { ApprovalOutcome::AllowOnce } else { ApprovalOutcome::Deny };
            Ok((answer, Some(caller())))
        }
        _ = tokio::time::sleep(wait) => Ok((ApprovalOutcome::TimedOut, None)),
        _ = ctx.cancel.cancelled() => Ok((ApprovalOutcome::Withdrawn, None)),
    };
    let verdict = match ending {
        Err(decided) => decided,
        Ok((outcome, by)) => ticket.end(outcome, by).await,
    };
    (outcome(&ask, &verdict), Some(verdict))
}

/// What a verdict means for the call.
fn outcome(ask: &Ask<'_>, v: &ApprovalVerdictRecord) -> Result<(), ToolError> {
    let summary = &ask.summary;
    match v.outcome {
        ApprovalOutcome::AllowOnce | ApprovalOutcome::AllowSession => Ok(()),
        ApprovalOutcome::Deny => {
            let mut message = match &v.by {
                Some(by) if by.via != DecidedVia::Caller => format!(
                    "The tool call {summary} was denied by {}; it did not run.",
                    by.describe()
                ),
                _ => format!("The user declined the tool call {summary}; it did not run."),
            };
            if let Some(reason) = &v.reason {
                message.push_str(&format!(" Reason: {reason}"));
            }
            Err(ToolError::new(ErrorKind::Denied, message))
        }
        ApprovalOutcome::TimedOut => {
            let refusal = format!(
                "{} It waited {} s in the approval queue (toolhost approvals) and nobody decided.",
                ask.refusal, ask.wait_s
            );
            Err(approval_required(ask, refusal))
        }
        ApprovalOutcome::Withdrawn => Err(ToolError::cancelled(ask.tool)),
    }
}

fn approval_required(ask: &Ask<'_>, message: String) -> ToolError {
    ToolError::approval_required(ask.summary.clone(), message)
}

/// Puts the call to the user through its own frontend (an `elicitation/create` with an
/// empty form); `Ok(true)` on accept.
async fn ask_caller(
    ctx: &CallContext,
    tool: &str,
    summary: &ApprovalSummary,
) -> Result<bool, String> {
    let params = serde_json::json!({
        "message": format!("Allow the tool call {summary}? (tool '{tool}', toolhost strict session)"),
        "requestedSchema": {"type": "object", "properties": {}},
    });
    let answer = ctx
        .inputs
        .ask(InputKind::Elicitation, params)
        .await
        .map_err(|e| e.message)?;
    Ok(answer.get("action").and_then(Value::as_str) == Some("accept"))
}

/// Names whose values an operator surface never shows.
const SECRET_NAMES: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "private_key",
    "cookie",
];

/// `args` with the value of every member whose name looks like a secret (at any depth)
/// replaced by `"***"`: the queue shows arguments to every operator surface, and an
/// argument named `api_key` is one nobody needs to read to decide.
fn masked(args: &Map<String, Value>) -> Map<String, Value> {
    args.iter()
        .map(|(k, v)| {
            let lower = k.to_ascii_lowercase();
            let value = if SECRET_NAMES.iter().any(|s| lower.contains(s)) {
                Value::String("***".into())
            } else {
                masked_value(v)
            };
            (k.clone(), value)
        })
        .collect()
}

fn masked_value(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(masked(o)),
        Value::Array(a) => Value::Array(a.iter().map(masked_value).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request<'a>(call_id: &'a str, args: &'a Map<String, Value>) -> Request<'a> {
        Request {
            call_id,
            tool: "bash",
            session_id: Some("s"),
            client: None,
            class: Some(ApprovalClass::Command),
            summary: ApprovalSummary::new("bash (command)"),
            arguments: args,
            caller_asked: false,
            wait: Duration::from_secs(60),
        }
    }

    fn decision(id: &str, decision: ApprovalDecision) -> ApprovalsDecideParams {
        ApprovalsDecideParams {
            id: id.into(),
            decision,
            reason: None,
            via: DecidedVia::Socket,
        }
    }

    #[test]
    fn the_queue_is_bounded_and_a_dropped_ticket_leaves_it() {
        let queue = Arc::new(Approvals::default());
        let args = Map::new();
        let tickets: Vec<Ticket> = (0..MAX_PENDING)
            .map(|n| queue.enqueue(request(&n.to_string(), &args)).unwrap())
            .collect();
        assert!(queue.enqueue(request("one more", &args)).is_none());
        let (waiting, mut events) = queue.subscribe();
        assert_eq!(waiting.len(), MAX_PENDING);
        drop(tickets);
        assert!(queue.list().is_empty());
        let Ok(ApprovalEvent::ApprovalDecided(d)) = events.try_recv() else {
            panic!("no event")
        };
        assert_eq!(d.verdict.outcome, ApprovalOutcome::Withdrawn);
    }

    #[tokio::test]
    async fn the_first_ending_wins_and_allow_session_is_remembered() {
        let queue = Arc::new(Approvals::default());
        let args = Map::new();
        let mut ticket = queue.enqueue(request("c", &args)).unwrap();
        let id = queue.list()[0].id.clone();
        let d = queue
            .decide(decision(&id, ApprovalDecision::AllowSession), None)
            .unwrap();
        assert_eq!(d.verdict.outcome, ApprovalOutcome::AllowSession);
        // The caller's answer, coming second, gets the operator's decision.
        let v = ticket.close(ApprovalOutcome::Deny, None);
        assert_eq!(v.outcome, ApprovalOutcome::AllowSession);
        let again = queue.decide(decision(&id, ApprovalDecision::Deny), None);
        let message = again.unwrap_err().to_string();
        assert!(
            message.contains("already decided: allow_session by an unnamed peer via socket"),
            "{message}"
        );
        assert!(queue.allowed_in_session("s", "bash"));
        assert!(!queue.allowed_in_session("s", "write_file"));
        queue.forget_session("s");
        assert!(!queue.allowed_in_session("s", "bash"));
    }

    #[test]
    fn secret_looking_arguments_are_masked_at_any_depth() {
        let Value::Object(args) =
            json!({"command": "ls", "API_KEY": "k", "nested": [{"auth_token": "t", "x": 1}]})
        else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(masked(&args)),
            json!({"command": "ls", "API_KEY": "***", "nested": [{"auth_token": "***", "x": 1}]})
        );
    }
}
