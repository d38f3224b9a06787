//! Multi-round-trip results (MRTR, MCP 2026-07-28) on the facade's side: a new-era client
//! gets the questions of its call (an MCP server's elicitation, sampling or roots request,
//! a custom tool's `input_request` line, a strict session's approval) as an
//! `input_required` result of its `tools/call`, since that era has no server-to-client
//! requests, and answers them by retrying the same `tools/call` with `inputResponses` and
//! the echoed `requestState`.
//!
//! The host call keeps running in between: it is *held* here. A held call's stream is
//! parked with a task that keeps the questions the call asks meanwhile, ends the hold when
//! the call ends by itself (its own timeout, a cancel), and cancels the call when the hold
//! outlives its limit ([`HOLD_LIMIT`]; a client that never retries leaks nothing).
//!
//! The `requestState` is a handle to the held call, sealed with an HMAC (rmcp's
//! `RequestStateCodec`) under a key drawn at random when the process starts (the daemon's
//! for `/mcp`, the `toolhost mcp` process's for stdio), or, in fleet mode, the fleet's key
//! from the database, and it names the member holding the call: a retry that lands on
//! another member is handed to that one ([`super::handoff`]). It binds the held call, the ids of
//! the questions it asked, the tool name, arguments and profile of the original request,
//! and an expiry; it is good for one retry. A tampered, replayed, expired or unknown state,
//! or a retry of another tool or with other arguments, is refused with `-32602` and
//! changes nothing: the held call still waits for its own retry.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, InputRequests, InputRequiredResult, RequestStateCodec};
use rmcp::model::{InputResponses, ProgressToken, SealOptions};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use super::{inputs, Facade, Followed};
use crate::client::{Client, Subscription};
use crate::lock;
use crate::protocol::{InputRequest, InvokeEvent, InvokeParams, InvokeResult};

/// How long a call may be held for a retry at most, unless `TOOLHOST_MCP_HOLD_MS` says
/// otherwise (tests use a short one). A call usually ends sooner, by its own timeout (which
/// runs while it waits for its answers); this bounds the ones that keep a deadline of
/// their own.
pub const HOLD_LIMIT: Duration = Duration::from_secs(600);

fn hold_limit() -> Duration {
    std::env::var("TOOLHOST_MCP_HOLD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&ms: &u64| ms > 0)
        .map_or(HOLD_LIMIT, Duration::from_millis)
}

/// A `tools/call` of a new-era client, after one round.
pub enum Round {
    /// The call ended with this result.
    Done(Box<InvokeResult>),
    /// The call waits for the answers to these questions.
    InputRequired(InputRequiredResult),
}

/// The calls of this process held for their clients' retries, and the key that seals their
/// handles.
#[derive(Default)]
pub struct HeldCalls {
    codec: OnceLock<RequestStateCodec>,
    /// The fleet member this is, in fleet mode: its states name it.
    member: Option<String>,
    held: Mutex<HashMap<String, Held>>,
}

/// A call that asked questions, waiting for the retry that answers them.
struct Held {
    call_id: String,
    /// The questions put to the client in the last `input_required`, by request id.
    asked: BTreeMap<String, InputRequest>,
    /// Hands the call's stream back from its parking task.
    resume: oneshot::Sender<()>,
    parked: tokio::task::JoinHandle<Option<Parked>>,
}

/// A held call's stream, and the questions it asked while parked.
struct Parked {
    sub: Subscription<InvokeEvent>,
    later: Vec<InputRequest>,
}

/// What a `requestState` says, under its seal.
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// The held call's key in [`HeldCalls`], new for every round (so a state works once).
    handle: String,
    call: String,
    /// What the request was: see [`binding`].
    binding: String,
    /// The request ids of the questions asked.
    asked: Vec<String>,
    /// The fleet member holding the call (none outside fleet mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<String>,
}

/// A held call taken back for a retry: the answers it got, and what it still asks.
struct Resumed {
    call_id: String,
    sub: Subscription<InvokeEvent>,
    answered: Vec<(InputRequest, Value)>,
    /// Questions without an answer in the retry, and those asked meanwhile: asked again.
    unanswered: Vec<InputRequest>,
}

impl HeldCalls {
    /// The held calls of fleet member `member`, sealed with the fleet's `key`, so that
    /// every member opens every member's states. An unusable key (the database's row was
    /// changed by hand) leaves this member's own key drawn at random: its retries then
    /// work only where they land on it, and the log says why.
    pub fn for_member(member: &str, key: &[u8]) -> HeldCalls {
        let held = HeldCalls {
            member: Some(member.to_owned()),
            ..HeldCalls::default()
        };
        match RequestStateCodec::try_new(key.to_vec()) {
            Ok(codec) => {
                let _ = held.codec.set(codec);
            }
            Err(e) => {
                tracing::error!(%e, "the fleet's requestState key is unusable: sealing with this member's own");
            }
        }
        held
    }

    /// The other member that holds the call of `state`, if it names one; `None` for a
    /// state of this member's, or one that does not open (refused where it is served).
    pub fn holder(&self, state: &str) -> Option<String> {
        let sealed: Sealed = self.codec().ok()?.open_json(state).ok()?;
        sealed.member.filter(|m| Some(m) != self.member.as_ref())
    }

    /// The sealing key, drawn from the OS on first use.
    fn codec(&self) -> Result<&RequestStateCodec, ErrorData> {
        if let Some(codec) = self.codec.get() {
            return Ok(codec);
        }
        let mut key = [0u8; RequestStateCodec::MIN_KEY_LENGTH];
        getrandom::fill(&mut key)
            .map_err(|e| super::internal(format!("cannot draw a requestState key: {e}")))?;
        let codec = RequestStateCodec::try_new(key.to_vec())
            .map_err(|e| super::internal(format!("cannot make a requestState key: {e}")))?;
        Ok(self.codec.get_or_init(|| codec))
    }

    /// Holds the call `call_id`, whose stream is `sub`, for a retry answering `asked`;
    /// returns the retry's `requestState`.
    fn hold(
        self: &Arc<Self>,
        client: Arc<Client>,
        call_id: String,
        sub: Subscription<InvokeEvent>,
        asked: BTreeMap<String, InputRequest>,
        binding: String,
    ) -> Result<String, ErrorData> {
        let handle = uuid::Uuid::new_v4().simple().to_string();
        let limit = hold_limit();
        let sealed = Sealed {
            handle: handle.clone(),
            call: call_id.clone(),
            binding: binding.clone(),
            asked: asked.keys().cloned().collect(),
            member: self.member.clone(),
        };
        let state = self
            .codec()?
            .seal_json_with(&sealed, &SealOptions::new().ttl(limit))
            .map_err(|e| super::internal(format!("cannot seal the requestState: {e}")))?;
        let (resume, resumed) = oneshot::channel();
        let parked = tokio::spawn(park(
            Arc::downgrade(self),
            handle.clone(),
            client,
            call_id.clone(),
            sub,
            resumed,
            limit,
        ));
        let held = Held {
            call_id,
            asked,
            resume,
            parked,
        };
        lock(&self.held).insert(handle, held);
        Ok(state)
    }

    /// Takes back the held call that `state` names, for a retry of the request `binding`
    /// with `responses`. Every check comes before the call is taken, so a refused retry
    /// leaves it held as it was.
    async fn resume(
        &self,
        state: &str,
        binding: &str,
        responses: Option<&InputResponses>,
    ) -> Result<Resumed, ErrorData> {
        let sealed: Sealed = self.codec()?.open_json(state).map_err(|e| {
            tracing::debug!(%e, "refused a requestState");
            refused("requestState is not one this server issued, or it expired")
        })?;
        if sealed.member != self.member {
            return Err(refused(&format!(
                "requestState belongs to a call held by fleet member {}, and it was not \
                 handed over there: start the call again",
                sealed.member.as_deref().unwrap_or("(none)")
            )));
        }
        if sealed.binding != binding {
            return Err(refused(
                "requestState belongs to a call of another tool or with other arguments: \
                 retry with the name and arguments of the original request",
            ));
        }
        let no_responses = InputResponses::new();
        let responses = responses.unwrap_or(&no_responses);
        let held = {
            let mut table = lock(&self.held);
            let Some(held) = table
                .get(&sealed.handle)
                .filter(|h| h.call_id == sealed.call && h.asked.keys().eq(sealed.asked.iter()))
            else {
                return Err(refused(
                    "no call waits for this requestState: it was used already, or its call \
                     ended (timed out or cancelled)",
                ));
            };
            for (id, question) in &held.asked {
                if let Some(answer) = responses.get(id) {
                    crate::inputs::check_answer(question.input, answer)
                        .map_err(|why| refused(&format!("inputResponses[{id:?}]: {why}")))?;
                }
            }
            table
                .remove(&sealed.handle)
                .ok_or_else(|| super::internal("the held call went away"))?
        };
        let _ = held.resume.send(());
        let Ok(Some(parked)) = held.parked.await else {
            return Err(refused(
                "the call of this requestState ended before the retry came",
            ));
        };
        let mut answered = Vec::new();
        let mut unanswered = Vec::new();
        for (id, question) in held.asked {
            match responses.get(&id) {
                Some(answer) => answered.push((question, answer.clone())),
                None => unanswered.push(question),
            }
        }
        unanswered.extend(parked.later);
        Ok(Resumed {
            call_id: held.call_id,
            sub: parked.sub,
            answered,
            unanswered,
        })
    }

    /// Forgets the held call `handle` (its parking task ended it).
    fn forget(&self, handle: &str) {
        lock(&self.held).remove(handle);
    }

    /// How many calls are held (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.held).len()
    }
}

/// Keeps a held call's stream until its retry comes (then hands it back), the call ends,
/// or the hold expires (then cancels the call). Progress and log messages of a held call
/// have no request to go to: they are dropped.
async fn park(
    table: Weak<HeldCalls>,
    handle: String,
    client: Arc<Client>,
    call_id: String,
    mut sub: Subscription<InvokeEvent>,
    mut resumed: oneshot::Receiver<()>,
    limit: Duration,
) -> Option<Parked> {
    let mut later = Vec::new();
    let expired = tokio::time::sleep(limit);
    tokio::pin!(expired);
    let forget = || {
        if let Some(table) = table.upgrade() {
            table.forget(&handle);
        }
    };
    loop {
        tokio::select! {
            biased;
            r = &mut resumed => return r.is_ok().then_some(Parked { sub, later }),
            event = sub.next() => match event {
                Some(Ok(InvokeEvent::InputRequest(q))) => later.push(q),
                Some(Ok(InvokeEvent::Update(_) | InvokeEvent::Log(_))) => {}
                Some(Ok(InvokeEvent::Result(_)) | Err(_)) | None => {
                    forget();
                    return None;
                }
            },
            () = &mut expired => {
                forget();
                if let Err(e) = client.cancel(&call_id).await {
                    tracing::debug!(%e, call = %call_id, "cannot cancel an expired held call");
                }
                return None;
            }
        }
    }
}

impl Facade {
    /// `tools/call` for a new-era client, one round: a first request starts the call; a
    /// retry (`requestState`) answers the held call's questions with its `inputResponses`.
    /// Either way the call is followed until it ends or asks (again).
    pub(super) async fn call_in_rounds(
        &self,
        client: &Arc<Client>,
        request: &CallToolRequestParams,
        params: &InvokeParams,
        ctx: &RequestContext<RoleServer>,
        progress: Option<&ProgressToken>,
    ) -> Result<Round, ErrorData> {
        let binding = binding(
            &params.name,
            params.arguments.as_ref(),
            self.state.profile.get().map(String::as_str),
        );
        // Answers sent without a state (a client that knows what the tool will ask) answer
        // the call's questions of the same names; what they do not answer is asked.
        let mut unasked = match &request.request_state {
            None => request.input_responses.clone().unwrap_or_default(),
            Some(_) => InputResponses::new(),
        };
        let (call_id, mut sub, mut asking) = match &request.request_state {
            None => {
                let call_id = params.call_id.clone().unwrap_or_default();
                let sub = self
                    .subscribe(client, params, inputs::answerable(ctx))
                    .await?;
                (call_id, sub, Vec::new())
            }
            Some(state) => {
                let resumed = self
                    .held
                    .resume(state, &binding, request.input_responses.as_ref())
                    .await?;
                // The call may have ended (timed out) just before the retry took it: then
                // the host takes none of the answers, and the retry is refused.
                let mut taken = resumed.answered.is_empty();
                for (question, answer) in resumed.answered {
                    taken |= inputs::hand_back(client, question, Ok(answer)).await;
                }
                if !taken {
                    return Err(refused(
                        "the call of this requestState ended before the retry came",
                    ));
                }
                (resumed.call_id, resumed.sub, resumed.unanswered)
            }
        };
        loop {
            if asking.is_empty() {
                match self
                    .follow(client, &mut sub, &call_id, ctx, progress, true)
                    .await?
                {
                    Followed::Done(r) => return Ok(Round::Done(r)),
                    Followed::Asked(questions) => asking = questions,
                }
            }
            let mut requests = InputRequests::new();
            let mut asked = BTreeMap::new();
            for q in asking.drain(..) {
                // The asker's own name when it has one (an upstream server's key reaches the
                // client unchanged), else the host's id of the question.
                let key = q
                    .key
                    .clone()
                    .filter(|k| !asked.contains_key(k))
                    .unwrap_or_else(|| q.request_id.clone());
                if let Some(answer) = unasked.remove(&key) {
                    // A malformed answer is not used: the question is put to the client.
                    if crate::inputs::check_answer(q.input, &answer).is_ok() {
                        inputs::hand_back(client, q, Ok(answer)).await;
                        continue;
                    }
                }
                match inputs::request(q.input, q.params.clone()) {
                    Ok(r) => {
                        requests.insert(key.clone(), r);
                        asked.insert(key, q);
                    }
                    // Not a request MCP can carry: the asker hears why, and the call goes on.
                    Err(e) => {
                        inputs::hand_back(client, q, Err(e)).await;
                    }
                }
            }
            if requests.is_empty() {
                continue;
            }
            let state = self
                .held
                .hold(client.clone(), call_id, sub, asked, binding)?;
            return Ok(Round::InputRequired(InputRequiredResult::new(
                Some(requests),
                Some(state),
            )));
        }
    }
}

/// What a retry must repeat of its original request: the tool name, the arguments (keys in
/// order, so a client that reorders them is not refused) and the profile, as a digest.
fn binding(name: &str, arguments: Option<&Map<String, Value>>, profile: Option<&str>) -> String {
    let arguments = arguments.map(|a| canonical(&Value::Object(a.clone())));
    let bound = serde_json::json!([name, arguments, profile]);
    hex::encode(Sha256::digest(bound.to_string().as_bytes()))
}

/// `value` with every object's keys in order.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

fn refused(why: &str) -> ErrorData {
    ErrorData::invalid_params(why.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_binding_ignores_key_order_but_not_values_names_or_profiles() {
        let a = json!({"x": 1, "y": {"b": [1, {"d": 2, "c": 3}], "a": null}});
        let b = json!({"y": {"a": null, "b": [1, {"c": 3, "d": 2}]}, "x": 1});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(binding("t", Some(a), None), binding("t", Some(b), None));
        let other = json!({"x": 2, "y": {"b": [1, {"d": 2, "c": 3}], "a": null}});
        assert_ne!(
            binding("t", Some(a), None),
            binding("t", other.as_object(), None)
        );
        assert_ne!(binding("t", Some(a), None), binding("u", Some(a), None));
        assert_ne!(
            binding("t", Some(a), None),
            binding("t", Some(a), Some("p"))
        );
        assert_ne!(
            binding("t", None, None),
            binding("t", Some(&Map::new()), None)
        );
    }

    #[test]
    fn a_fleet_state_names_its_holder_to_every_member_sharing_the_key() {
        let key = [7u8; RequestStateCodec::MIN_KEY_LENGTH];
        let (a, b) = (
            HeldCalls::for_member("m-a", &key),
            HeldCalls::for_member("m-b", &key),
        );
        let sealed = Sealed {
            handle: "h".into(),
            call: "c".into(),
            binding: "b".into(),
            asked: vec![],
            member: Some("m-a".into()),
        };
        let state = a
            .codec()
            .unwrap()
            .seal_json_with(&sealed, &SealOptions::new().ttl(HOLD_LIMIT))
            .unwrap();
        assert_eq!(b.holder(&state).as_deref(), Some("m-a"));
        // Its own state is served where it lands; another fleet's key opens nothing.
        assert_eq!(a.holder(&state), None);
        let other = HeldCalls::for_member("m-b", &[8u8; RequestStateCodec::MIN_KEY_LENGTH]);
        assert_eq!(other.holder(&state), None);
        assert_eq!(b.holder(&format!("{state}x")), None);
    }

    #[test]
    fn a_state_opens_only_untouched_under_its_own_key_and_before_its_expiry() {
        let held = HeldCalls::default();
        let sealed = Sealed {
            handle: "h".into(),
            call: "c".into(),
            binding: "b".into(),
            asked: vec!["in-1".into()],
            member: None,
        };
        let codec = held.codec().unwrap();
        let state = codec
            .seal_json_with(&sealed, &SealOptions::new().ttl(HOLD_LIMIT))
            .unwrap();
        let opened: Sealed = codec.open_json(&state).unwrap();
        assert_eq!((opened.handle.as_str(), opened.asked.len()), ("h", 1));
        let tampered = format!("{state}-TAMPERED");
        assert!(codec.open_json::<Sealed>(&tampered).is_err());
        let mut flipped = state.clone().into_bytes();
        let mid = flipped.len() / 2;
        flipped[mid] = if flipped[mid] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(codec.open_json::<Sealed>(&flipped).is_err());
        // Another process's key (a restarted daemon) opens nothing of this one's.
        let other = HeldCalls::default();
        assert!(other.codec().unwrap().open_json::<Sealed>(&state).is_err());
        let short = codec
            .seal_json_with(&sealed, &SealOptions::new().ttl(Duration::from_millis(1)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(
            codec.open_json::<Sealed>(&short),
            Err(rmcp::model::RequestStateError::Expired)
        ));
        assert_eq!(held.len(), 0);
    }
}
