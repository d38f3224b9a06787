//! `prompts/get` and `resources/read` of a server of the `initialize` era, which asks the
//! client mid-request (`elicitation/create`, `sampling/createMessage`, `roots/list`) as
//! classic server requests. The socket's `get_prompt` and `read_resource` are one answer
//! each, with no stream to ask on, so such a question comes back as the `input_required`
//! answer a 2026-07-28 server would give (`inputRequests` under the question's request
//! id, a `requestState` of ours), while the upstream request is *held* open here. The
//! retry with `inputResponses` and that state answers the waiting questions and waits on
//! the same request again. So the facade serves both its eras one way (a new-era client
//! answers the `input_required` itself, an old-era one is asked classically and the
//! facade retries), whatever the era of the server.
//!
//! The state is a random handle, good for one retry of the same request (prompt and
//! arguments, or URI) from any caller that holds it. A held request that no retry takes
//! within the server's `timeout_ms` is cancelled upstream and forgotten, so a caller that
//! never retries leaks nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::{ClientRequest, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use rmcp::RoleClient;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::relay::Asking;
use super::server::InUse;
use super::Server;
use crate::error::Error;
use crate::inputs::CallInputs;
use crate::lock;
use crate::protocol::{InputKind, InputRequest, InvokeEvent};

/// Requests held for their callers' retries, by `requestState`.
#[derive(Default)]
pub struct Held {
    held: Mutex<HashMap<String, Waiting>>,
}

/// What one request comes to, one round at a time.
pub enum Round {
    /// The server's answer.
    Done(Box<ServerResult>),
    /// Questions to answer first, as a 2026-07-28 `input_required` carries them
    /// (`inputRequests`, `requestState`).
    Asked(Map<String, Value>),
}

/// A request on its way whose server asked something.
struct Waiting {
    /// What the request was: a retry must be the same request.
    binding: String,
    run: Running,
    /// The questions put to the caller, by request id.
    asked: BTreeMap<String, InputRequest>,
}

/// The upstream request, running in a task of its own.
struct Running {
    inputs: Arc<CallInputs>,
    events: mpsc::Receiver<InvokeEvent>,
    answer: oneshot::Receiver<Result<ServerResult, ServiceError>>,
    /// Dropped, it ends the request: cancelled upstream, its questions unanswered.
    _end: DropGuard,
}

impl Held {
    /// One round of `request` to the `initialize`-era `server`: the first when `asking`
    /// has no state (sent on `peer`, its questions going to a caller that answers
    /// `asking.inputs`), else the retry of the held request its state names, with its
    /// answers.
    pub(super) async fn round(
        self: &Arc<Self>,
        server: &Arc<Server>,
        (peer, in_use): (Peer<RoleClient>, InUse),
        request: ClientRequest,
        asking: &Asking<'_>,
    ) -> Result<Round, Error> {
        let binding = asking.binding.clone();
        let (run, unanswered) = match &asking.state {
            Some(state) => self.resume(state, &binding, asking.responses.as_ref())?,
            None => {
                let run = start(server, peer, in_use, request, asking.inputs).await?;
                (run, Vec::new())
            }
        };
        self.wait(server, binding, run, unanswered).await
    }

    /// Takes back the held request `state` names and gives it the answers in `responses`;
    /// returns it and the questions they left unanswered. Every check comes first: a
    /// refused retry leaves the request held as it was.
    fn resume(
        &self,
        state: &str,
        binding: &str,
        responses: Option<&BTreeMap<String, Value>>,
    ) -> Result<(Running, Vec<InputRequest>), Error> {
        let mut table = lock(&self.held);
        let Some(waiting) = table.get(state) else {
            return Err(Error::InvalidParams(
                "no request waits for this requestState: it was used already, or it expired".into(),
            ));
        };
        if waiting.binding != binding {
            return Err(Error::InvalidParams(
                "requestState belongs to another request: retry with the name and arguments \
                 (or URI) of the original one"
                    .into(),
            ));
        }
        let no_responses = BTreeMap::new();
        let responses = responses.unwrap_or(&no_responses);
        for (id, question) in &waiting.asked {
            if let Some(answer) = responses.get(id) {
                crate::inputs::check_answer(question.input, answer).map_err(|why| {
                    Error::InvalidParams(format!("inputResponses[{id:?}]: {why}"))
                })?;
            }
        }
        let Some(waiting) = table.remove(state) else {
            return Err(Error::Server("the held request went away".into()));
        };
        drop(table);
        let mut unanswered = Vec::new();
        for (id, question) in waiting.asked {
            match responses.get(&id) {
                Some(answer) => {
                    // Checked above; a question its request no longer waits on is moot.
                    let _ = waiting.run.inputs.respond(&id, Ok(answer.clone()));
                }
                None => unanswered.push(question),
            }
        }
        Ok((waiting.run, unanswered))
    }

    /// Waits for the request's answer, or for questions (then holds it and returns them).
    async fn wait(
        self: &Arc<Self>,
        server: &Server,
        binding: String,
        mut run: Running,
        mut asked: Vec<InputRequest>,
    ) -> Result<Round, Error> {
        let timeout = Duration::from_millis(server.config().timeout_ms);
        if asked.is_empty() {
            let next = async {
                loop {
                    tokio::select! {
                        answer = &mut run.answer => break Err(answer),
                        Some(event) = run.events.recv() => {
                            if let InvokeEvent::InputRequest(q) = event { break Ok(q) }
                        }
                    }
                }
            };
            match tokio::time::timeout(timeout, next).await {
                Err(_) => return Err(super::relay::timed_out(server)),
                Ok(Err(answer)) => {
                    let answer = answer.map_err(|_| {
                        Error::Server(format!("MCP server '{}' went away", server.name()))
                    })?;
                    return super::relay::answered(server, answer)
                        .map(|a| Round::Done(Box::new(a)));
                }
                Ok(Ok(question)) => asked.push(question),
            }
        }
        // Questions asked together go out together.
        while let Ok(event) = run.events.try_recv() {
            if let InvokeEvent::InputRequest(q) = event {
                asked.push(q);
            }
        }
        let requests: Map<String, Value> = asked
            .iter()
            .map(|q| {
                let request = json!({"method": q.input.method(), "params": q.params});
                (q.request_id.clone(), request)
            })
            .collect();
        let state = uuid::Uuid::new_v4().simple().to_string();
        let waiting = Waiting {
            binding,
            run,
            asked: asked
                .into_iter()
                .map(|q| (q.request_id.clone(), q))
                .collect(),
        };
        lock(&self.held).insert(state.clone(), waiting);
        tokio::spawn(expire(Arc::downgrade(self), state.clone(), timeout));
        let mut round = Map::new();
        round.insert("inputRequests".into(), Value::Object(requests));
        round.insert("requestState".into(), Value::String(state));
        Ok(Round::Asked(round))
    }
}

/// Forgets the held request `state` once `after` has passed (dropping it cancels it).
async fn expire(table: Weak<Held>, state: String, after: Duration) {
    tokio::time::sleep(after).await;
    if let Some(table) = table.upgrade() {
        let gone = lock(&table.held).remove(&state);
        drop(gone);
    }
}

/// Sends `request` to `server` in a task of its own, its questions going to a caller that
/// answers `inputs`; the task holds the server in use until it ends.
async fn start(
    server: &Arc<Server>,
    peer: Peer<RoleClient>,
    in_use: InUse,
    request: ClientRequest,
    inputs: &[InputKind],
) -> Result<Running, Error> {
    let end = CancellationToken::new();
    let (tx, events) = mpsc::channel(8);
    let call_id = format!("held-{}", uuid::Uuid::new_v4().simple());
    let inputs = Arc::new(CallInputs::new(
        &call_id,
        inputs.to_vec(),
        Some(tx),
        end.clone(),
    ));
    // Entered before the request is written: the server may ask at once.
    let in_flight = server.origins().enter(inputs.clone());
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| Error::Server(server.call_error(e).message))?;
    in_flight.sent(handle.id.clone());
    let mut unanswered = super::tool::Unanswered::peer(peer, handle.id.clone());
    let (tx, answer) = oneshot::channel();
    let ended = end.clone();
    tokio::spawn(async move {
        let _held = (in_flight, in_use);
        tokio::select! {
            answer = handle.await_response() => {
                unanswered.settle();
                let _ = tx.send(answer);
            }
            // Dropping `unanswered` tells the server to stop.
            _ = ended.cancelled() => {}
        }
    });
    Ok(Running {
        inputs,
        events,
        answer,
        _end: end.drop_guard(),
    })
}
