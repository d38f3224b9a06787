//! Input requests: what a running tool asks the frontend of its call (an MCP server's
//! `elicitation/create`, `sampling/createMessage`, `roots/list`; a custom program's
//! `input_request` line; the host's own approval prompt), and the answers that come back
//! through `invoke.respond`.
//!
//! Every call has one [`CallInputs`], registered with the call in the calls table (that is
//! how `invoke.respond` finds it from any connection). A question goes to the call's
//! `subscribe_invoke` stream as an `input_request` event and waits for its answer, for the
//! end of the call (cancel, timeout, the frontend leaving), whichever comes first: a
//! question never outlives its call. A frontend that did not list the question's kind in
//! `inputs` (or a plain `invoke`, which has no stream) is never asked: the asker hears
//! `-32601` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::lock;
use crate::protocol::{codes, InputError, InputKind, InputRequest, InvokeEvent, InvokeLog};

/// The frontend's answer: the MCP result of the request's kind, or an error.
pub type Answer = Result<Value, InputError>;

/// The questions of one call in flight and the way to its frontend.
#[derive(Debug)]
pub struct CallInputs {
    call_id: String,
    /// The kinds the frontend said it answers (`inputs` of `subscribe_invoke`).
    accepts: Vec<InputKind>,
    /// The call's stream; `None` for a plain `invoke`.
    events: Option<mpsc::Sender<InvokeEvent>>,
    /// Questions asked and not yet answered, by request id.
    pending: Mutex<HashMap<String, Pending>>,
    next: AtomicU64,
    /// Fires when the call ends, however it ends.
    ended: CancellationToken,
}

#[derive(Debug)]
struct Pending {
    kind: InputKind,
    answer: oneshot::Sender<Answer>,
}

impl CallInputs {
    /// The questions of call `call_id`, whose frontend answers `accepts` on `events`;
    /// `ended` is the call's own token.
    pub fn new(
        call_id: &str,
        accepts: Vec<InputKind>,
        events: Option<mpsc::Sender<InvokeEvent>>,
        ended: CancellationToken,
    ) -> Self {
        CallInputs {
            call_id: call_id.to_owned(),
            accepts,
            events,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            ended,
        }
    }

    /// A call whose frontend answers nothing (plain `invoke`, unit tests).
    pub fn unanswered(call_id: &str) -> Self {
        Self::new(call_id, Vec::new(), None, CancellationToken::new())
    }

    /// Whether the frontend answers questions of `kind`.
    pub fn accepts(&self, kind: InputKind) -> bool {
        self.events.is_some() && self.accepts.contains(&kind)
    }

    /// Asks the frontend and waits for its answer (or the end of the call).
    pub async fn ask(&self, kind: InputKind, params: Value) -> Answer {
        self.ask_as(kind, params, None).await
    }

    /// [`ask`](Self::ask), naming the question `key` as its asker does (an upstream
    /// server's `inputRequests` key).
    pub async fn ask_as(&self, kind: InputKind, params: Value, key: Option<String>) -> Answer {
        let Some(events) = self.events.as_ref().filter(|_| self.accepts(kind)) else {
            return Err(InputError::new(
                codes::METHOD_NOT_FOUND,
                format!(
                    "{}: the frontend of this call does not answer it",
                    kind.method()
                ),
            ));
        };
        let defaults = match kind {
            InputKind::Elicitation => form_defaults(&params),
            _ => Vec::new(),
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let request_id = format!("in-{n}");
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(request_id.clone(), Pending { kind, answer: tx });
        let _forget = Forget {
            inputs: self,
            request_id: &request_id,
        };
        let event = InvokeEvent::InputRequest(InputRequest {
            call_id: self.call_id.clone(),
            request_id: request_id.clone(),
            input: kind,
            params,
            key,
        });
        let ended = || {
            InputError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "{}: the call ended before its frontend answered",
                    kind.method()
                ),
            )
        };
        tokio::select! {
            sent = events.send(event) => if sent.is_err() { return Err(ended()) },
            _ = self.ended.cancelled() => return Err(ended()),
        }
        let mut answer = tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| Err(ended())),
            _ = self.ended.cancelled() => Err(ended()),
        };
        if let Ok(result) = &mut answer {
            apply_defaults(result, defaults);
        }
        answer
    }

    /// A question as a tool writes it on a channel of its own (a custom program's
    /// `input_request` line, a module's `ctx.ui`): `{"id", "kind", "params"}`. Asks it and
    /// returns what the tool reads back, `{"id", "result"}` with the MCP result or
    /// `{"id", "error": {"code", "message"}}` (`-32602` for a question that cannot be read).
    pub async fn answer_written(&self, question: Value) -> Value {
        #[derive(Deserialize)]
        struct Question {
            id: Value,
            kind: InputKind,
            #[serde(default)]
            params: Value,
        }
        let (id, answer) = match serde_json::from_value::<Question>(question.clone()) {
            Ok(q) => (q.id, self.ask(q.kind, q.params).await),
            Err(e) => (
                question.get("id").cloned().unwrap_or(Value::Null),
                Err(InputError::new(
                    codes::INVALID_PARAMS,
                    format!("input_request: {e}"),
                )),
            ),
        };
        match answer {
            Ok(result) => serde_json::json!({"id": id, "result": result}),
            Err(error) => serde_json::json!({"id": id, "error": error}),
        }
    }

    /// Passes a log message on to the frontend, if it streams (a slow reader loses it).
    pub fn log(&self, level: &str, logger: Option<String>, data: Value) {
        if let Some(events) = &self.events {
            let _ = events.try_send(InvokeEvent::Log(InvokeLog {
                call_id: self.call_id.clone(),
                level: level.to_owned(),
                logger,
                data,
            }));
        }
    }

    /// Takes the frontend's answer to `request_id`. An unknown id, or a result that is not
    /// of the question's kind, is refused and changes nothing.
    pub fn respond(&self, request_id: &str, answer: Answer) -> Result<(), Error> {
        let mut pending = lock(&self.pending);
        let Some(question) = pending.get(request_id) else {
            return Err(Error::InvalidParams(format!(
                "call {:?} has no input request {request_id:?} waiting",
                self.call_id
            )));
        };
        if let Ok(result) = &answer {
            check_answer(question.kind, result).map_err(Error::InvalidParams)?;
        }
        if let Some(question) = pending.remove(request_id) {
            let _ = question.answer.send(answer);
        }
        Ok(())
    }
}

/// The `default` of each field of a form elicitation's `requestedSchema` that has one.
fn form_defaults(params: &Value) -> Vec<(String, Value)> {
    let fields = params
        .pointer("/requestedSchema/properties")
        .and_then(Value::as_object);
    fields
        .into_iter()
        .flatten()
        .filter_map(|(name, field)| Some((name.clone(), field.get("default")?.clone())))
        .collect()
}

/// SEP-1034: an accepted form answers every field that has a default, the ones the user
/// left alone with that default, so the asker gets a complete answer from every frontend
/// (one that shows the defaults pre-filled and sends only what was typed, too). Applied
/// here, where every elicitation's answer passes (an MCP server's, classic or
/// `input_required`, a custom tool's, the host's own), as the MCP client the asker sees.
fn apply_defaults(result: &mut Value, defaults: Vec<(String, Value)>) {
    if defaults.is_empty() || result.get("action").and_then(Value::as_str) != Some("accept") {
        return;
    }
    let Some(answer) = result.as_object_mut() else {
        return;
    };
    let content = answer.entry("content").or_insert(Value::Null);
    if content.is_null() {
        *content = Value::Object(serde_json::Map::new());
    }
    if let Some(content) = content.as_object_mut() {
        for (name, default) in defaults {
            content.entry(name).or_insert(default);
        }
    }
}

/// Forgets a question whose asker stopped waiting (answered, or the call ended).
struct Forget<'a> {
    inputs: &'a CallInputs,
    request_id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.inputs.pending).remove(self.request_id);
    }
}

/// Whether `result` has the members MCP requires of an answer of `kind`; if not, why.
pub fn check_answer(kind: InputKind, result: &Value) -> Result<(), String> {
    check_shape(kind, result)
        .map_err(|why| format!("result is not the result of {}: {why}", kind.method()))
}

/// Whether `result` has the members MCP requires of an answer of `kind` (its other
/// members, `_meta` included, pass through untouched).
fn check_shape(kind: InputKind, result: &Value) -> Result<(), serde_json::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Action {
        Accept,
        Decline,
        Cancel,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)] // read by serde only: the shape is the check
    struct Elicited {
        action: Action,
        #[serde(default)]
        content: Option<serde_json::Map<String, Value>>,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Sampled {
        role: String,
        content: Value,
        model: String,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Root {
        uri: String,
    }
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Roots {
        roots: Vec<Root>,
    }
    match kind {
        InputKind::Elicitation => Elicited::deserialize(result).map(drop),
        InputKind::Sampling => Sampled::deserialize(result).map(drop),
        InputKind::Roots => Roots::deserialize(result).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_question_waits_for_its_answer_and_a_wrong_one_changes_nothing() {
        let (tx, mut rx) = mpsc::channel(4);
        let inputs = std::sync::Arc::new(CallInputs::new(
            "c",
            vec![InputKind::Elicitation],
            Some(tx),
            CancellationToken::new(),
        ));
        let asking = tokio::spawn({
            let inputs = inputs.clone();
            async move {
                inputs
                    .ask(InputKind::Elicitation, json!({"message": "ok?"}))
                    .await
            }
        });
        let Some(InvokeEvent::InputRequest(q)) = rx.recv().await else {
            panic!("no input request")
        };
        assert_eq!(q.input, InputKind::Elicitation);
        assert!(inputs
            .respond("in-9", Ok(json!({"action": "accept"})))
            .is_err());
        assert!(inputs
            .respond(&q.request_id, Ok(json!({"action": "maybe"})))
            .is_err());
        inputs
            .respond(&q.request_id, Ok(json!({"action": "accept"})))
            .unwrap();
        assert_eq!(asking.await.unwrap().unwrap()["action"], "accept");
        assert!(inputs
            .respond(&q.request_id, Ok(json!({"action": "accept"})))
            .is_err());
    }

    #[test]
    fn subscribe_invoke_takes_inputs_beside_the_call_and_still_refuses_unknown_fields() {
        use crate::protocol::SubscribeInvokeParams;
        let p: SubscribeInvokeParams =
            serde_json::from_value(json!({"name": "bash", "inputs": ["roots"]})).unwrap();
        assert_eq!(
            (p.call.name.as_str(), p.inputs),
            ("bash", vec![InputKind::Roots])
        );
        assert!(
            serde_json::from_value::<SubscribeInvokeParams>(json!({"name": "x", "bogus": 1}))
                .is_err()
        );
        // `invoke` itself takes no `inputs`: only a stream can answer.
        assert!(serde_json::from_value::<crate::protocol::InvokeParams>(
            json!({"name": "x", "inputs": []})
        )
        .is_err());
    }

    #[tokio::test]
    async fn a_kind_not_accepted_is_refused_at_once_and_the_end_of_the_call_ends_a_wait() {
        let ended = CancellationToken::new();
        let (tx, _rx) = mpsc::channel(4);
        let inputs = CallInputs::new("c", vec![InputKind::Roots], Some(tx), ended.clone());
        let refused = inputs
            .ask(InputKind::Sampling, json!({}))
            .await
            .unwrap_err();
        assert_eq!(refused.code, i64::from(codes::METHOD_NOT_FOUND));
        ended.cancel();
        let e = inputs.ask(InputKind::Roots, json!({})).await.unwrap_err();
        assert!(e.message.contains("call ended"), "{e:?}");
        assert!(lock(&inputs.pending).is_empty());
    }
}
