//! `input_required` from a server of the 2026-07-28 era (SEP-2322, multi-round-trip
//! requests): instead of asking the client mid-call with a request of its own, the server
//! answers `tools/call` with `resultType: "input_required"`, a map of `inputRequests`
//! (elicitation, sampling, roots) and an opaque `requestState`; the client asks, then sends
//! the same request again with `inputResponses` under the same keys and the state echoed
//! byte for byte.
//!
//! Each input request goes to the frontend of the call through the host's input path
//! (`inputs.rs`), exactly as a classic server request does (`client.rs`): so a socket
//! frontend sees an `input_request` event, and the MCP facade turns it into whatever its own
//! client's era understands. `roots/list` that the frontend does not answer gets the
//! server's roots, as the classic handler gives it. The caller bounds the rounds
//! ([`MAX_ROUNDS`]) and runs them all within the call's deadline and cancel.

use futures::future::try_join_all;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::inputs::CallInputs;
use crate::protocol::InputKind;

/// Most `input_required` answers one call follows before it fails (a server that asks
/// again and again must not hold a call for ever).
pub const MAX_ROUNDS: usize = 8;

/// What a retry adds to the request's params.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<std::collections::BTreeMap<String, Value>>,
    /// As the server sent it: never parsed, never changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
}

impl Retry {
    /// The params to add, as JSON (for the direct stdio call).
    pub fn params(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(params)) => params,
            _ => Map::new(),
        }
    }
}

/// Whether a result whose `resultType` member is `result_type` (as JSON) is
/// `input_required` rather than the final one.
pub fn input_required(result_type: Option<&serde_json::value::RawValue>) -> bool {
    result_type.map(serde_json::value::RawValue::get) == Some(r#""input_required""#)
}

/// Answers every input request of an `input_required` result through the frontend of the
/// call (all asked at once), and returns the retry. `Err` says why the call cannot go on.
pub async fn answer(
    mut result: Map<String, Value>,
    inputs: &CallInputs,
    roots: &[String],
) -> Result<Retry, String> {
    let request_state = match result.remove("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) => Some(state),
        Some(_) => return Err("its requestState is not a string".to_owned()),
    };
    let requests = match result.remove("inputRequests") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(requests)) => requests,
        Some(_) => return Err("its inputRequests is not an object".to_owned()),
    };
    if requests.is_empty() && request_state.is_none() {
        return Err("it has neither inputRequests nor requestState".to_owned());
    }
    let asked = requests.into_iter().map(|(key, request)| async move {
        Ok::<_, String>((key.clone(), ask(key, request, inputs, roots).await?))
    });
    let responses: std::collections::BTreeMap<String, Value> =
        try_join_all(asked).await?.into_iter().collect();
    Ok(Retry {
        input_responses: (!responses.is_empty()).then_some(responses),
        request_state,
    })
}

/// One input request (`{method, params}`), named `key` by its server, put to the frontend;
/// its answer.
async fn ask(
    key: String,
    mut request: Value,
    inputs: &CallInputs,
    roots: &[String],
) -> Result<Value, String> {
    let kind = match request.get("method").and_then(Value::as_str) {
        Some(method) => InputKind::of_method(method)
            .ok_or_else(|| format!("it asks for {method}, which is no input request"))?,
        None => return Err("one of its inputRequests names no method".to_owned()),
    };
    if kind == InputKind::Roots && !inputs.accepts(kind) {
        let roots: Vec<Value> = roots
            .iter()
            .map(|uri| serde_json::json!({"uri": uri}))
            .collect();
        return Ok(serde_json::json!({ "roots": roots }));
    }
    let params = match request.get_mut("params").map(Value::take) {
        Some(Value::Object(params)) => Value::Object(params),
        _ => Value::Object(Map::new()),
    };
    inputs
        .ask_as(kind, params, Some(key))
        .await
        .map_err(|e| format!("{}: {}", kind.method(), e.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn roots_are_answered_for_a_frontend_that_does_not_and_the_state_kept_as_it_came() {
        let inputs = CallInputs::unanswered("c");
        let state = "  opaque \u{e9}\"state\" ";
        let result = object(json!({
            "resultType": "input_required",
            "inputRequests": {"r": {"method": "roots/list", "params": {}}},
            "requestState": state,
        }));
        let result_type = serde_json::value::to_raw_value(&result["resultType"]).unwrap();
        assert!(input_required(Some(&result_type)));
        let retry = answer(result, &inputs, &["file:///w".to_owned()])
            .await
            .unwrap();
        assert_eq!(retry.request_state.as_deref(), Some(state));
        assert_eq!(
            Value::Object(retry.params()),
            json!({"inputResponses": {"r": {"roots": [{"uri": "file:///w"}]}}, "requestState": state})
        );
    }

    #[tokio::test]
    async fn an_elicitation_no_frontend_answers_fails_and_a_bare_result_is_refused() {
        let inputs = CallInputs::unanswered("c");
        let result = object(json!({
            "resultType": "input_required",
            "inputRequests": {"e": {"method": "elicitation/create", "params": {"message": "?"}}},
        }));
        let e = answer(result, &inputs, &["file:///w".to_owned()])
            .await
            .unwrap_err();
        assert!(e.starts_with("elicitation/create: "), "{e}");
        let bare = object(json!({"resultType": "input_required"}));
        assert!(answer(bare, &inputs, &["file:///w".to_owned()])
            .await
            .is_err());
        assert!(!input_required(None));
        let final_result = serde_json::value::to_raw_value("final").unwrap();
        assert!(!input_required(Some(&final_result)));
    }
}
