//! A call's input requests and log messages, turned into MCP for the facade's client: an
//! `input_request` becomes the same MCP request to the client (only of a kind it declared),
//! answered back with `invoke.respond`; a `log` event becomes `notifications/message`.
// Sampling, roots and logging are deprecated by SEP-2577, but servers still send them and
// clients still answer them: relaying them faithfully is the point.
#![allow(deprecated)]

use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
    ElicitRequestParams, InputRequest as McpInputRequest, ListRootsRequest, LoggingLevel,
    LoggingMessageNotificationParam, ServerRequest,
};
use std::collections::BTreeMap;

use rmcp::model::ErrorCode;
use rmcp::service::{Peer, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};

use crate::client::Client;
use crate::protocol::{codes, InputError, InputKind, InputRequest, InvokeLog, RespondParams};

/// The kinds of input request the client of `ctx` declared it answers.
pub fn answerable(ctx: &RequestContext<RoleServer>) -> Vec<InputKind> {
    let caps = super::era::of(ctx).client_capabilities;
    [
        (caps.elicitation.is_some(), InputKind::Elicitation),
        (caps.sampling.is_some(), InputKind::Sampling),
        (caps.roots.is_some(), InputKind::Roots),
    ]
    .into_iter()
    .filter_map(|(declared, kind)| declared.then_some(kind))
    .collect()
}

/// Puts `q` to the client and hands its answer to the host.
pub async fn answer(client: &Client, peer: &Peer<RoleServer>, mut q: InputRequest) {
    let answer = ask(peer, q.input, q.params.take()).await;
    hand_back(client, q, answer).await;
}

/// Hands the client's answer to question `q` to the host (`invoke.respond`); whether the
/// host took it (it does not once the call has ended).
pub async fn hand_back(
    client: &Client,
    q: InputRequest,
    answer: Result<Value, InputError>,
) -> bool {
    let (result, error) = match answer {
        Ok(result) => (Some(result), None),
        Err(error) => (None, Some(error)),
    };
    let params = RespondParams {
        call_id: q.call_id,
        request_id: q.request_id,
        result,
        error,
    };
    match client.respond(&params).await {
        Ok(_) => true,
        Err(e) => {
            // The call ended meanwhile, or the client's answer was not of the right shape.
            tracing::debug!(%e, "the host did not take the MCP client's answer");
            false
        }
    }
}

/// The retry a client of the `initialize` era gives an upstream's `input_required` for a
/// prompt or resource (`what`): its `asked` (`inputRequests`, `requestState`) become the
/// classic requests to the client, all at once, and their answers go back under the
/// server's keys with the state as it came. A kind the client did not declare is `-32600`
/// naming the capability (the server should not have asked it).
pub async fn answer_classic(
    peer: &Peer<RoleServer>,
    what: &str,
    mut asked: Map<String, Value>,
) -> Result<(Option<BTreeMap<String, Value>>, Option<String>), ErrorData> {
    let bad = |why: &str| {
        ErrorData::internal_error(
            format!("{what}: its MCP server's input_required {why}"),
            None,
        )
    };
    let state = match asked.remove("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) => Some(state),
        Some(_) => return Err(bad("has a requestState that is not a string")),
    };
    let requests = match asked.remove("inputRequests") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(requests)) => requests,
        Some(_) => return Err(bad("has inputRequests that are not an object")),
    };
    if requests.is_empty() && state.is_none() {
        return Err(bad("has neither inputRequests nor requestState"));
    }
    let mut questions = Vec::with_capacity(requests.len());
    for (key, mut request) in requests {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(kind) = InputKind::of_method(method) else {
            return Err(bad(&format!(
                "asks for {method:?}, which is no input request"
            )));
        };
        if !answerable_by(peer, kind) {
            let capability = kind.capability();
            return Err(ErrorData::invalid_request(
                format!(
                    "{what}: its MCP server asks for {method}, which needs the client \
                     capability '{capability}'; this MCP client did not declare it"
                ),
                Some(serde_json::json!({"requiredCapabilities": {capability: {}}})),
            ));
        }
        let params = request
            .get_mut("params")
            .map(Value::take)
            .unwrap_or_default();
        questions.push(async move { (key, ask(peer, kind, params).await) });
    }
    let mut answers = BTreeMap::new();
    for (key, answer) in futures::future::join_all(questions).await {
        let answer = answer.map_err(|e| {
            ErrorData::new(
                ErrorCode(i32::try_from(e.code).unwrap_or(ErrorCode::INTERNAL_ERROR.0)),
                format!("{what}: {}", e.message),
                e.data,
            )
        })?;
        answers.insert(key, answer);
    }
    Ok(((!answers.is_empty()).then_some(answers), state))
}

/// Whether the client of `peer` declared it answers `kind` (at `initialize`).
fn answerable_by(peer: &Peer<RoleServer>, kind: InputKind) -> bool {
    peer.peer_info().is_some_and(|info| {
        let caps = &info.capabilities;
        match kind {
            InputKind::Elicitation => caps.elicitation.is_some(),
            InputKind::Sampling => caps.sampling.is_some(),
            InputKind::Roots => caps.roots.is_some(),
        }
    })
}

/// The MCP request of `kind` with `params`, sent to the client; its result as JSON.
async fn ask(peer: &Peer<RoleServer>, kind: InputKind, params: Value) -> Result<Value, InputError> {
    if !answerable_by(peer, kind) {
        return Err(InputError::new(
            codes::METHOD_NOT_FOUND,
            format!("{}: the MCP client did not declare it", kind.method()),
        ));
    }
    let request = match request(kind, params)? {
        McpInputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
        McpInputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
        McpInputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
        _ => {
            return Err(InputError::new(
                codes::INTERNAL_ERROR,
                format!("{} has no classic request", kind.method()),
            ))
        }
    };
    let result = match peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(r)) => serde_json::to_value(r),
        Ok(ClientResult::CreateMessageResult(r)) => serde_json::to_value(r),
        Ok(ClientResult::ListRootsResult(r)) => serde_json::to_value(r),
        Ok(_) | Err(ServiceError::UnexpectedResponse) => {
            return Err(InputError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "the MCP client answered {} with something else",
                    kind.method()
                ),
            ))
        }
        Err(ServiceError::McpError(e)) => {
            return Err(InputError {
                code: i64::from(e.code.0),
                message: e.message.into_owned(),
                data: e.data,
            })
        }
        Err(e) => {
            return Err(InputError::new(
                codes::INTERNAL_ERROR,
                format!("{} failed: {e}", kind.method()),
            ))
        }
    };
    result.map_err(|e| InputError::new(codes::INTERNAL_ERROR, e.to_string()))
}

/// The MCP request a question of `kind` with `params` is, in both eras (a classic request
/// to the client, or one entry of an `input_required` result's `inputRequests`).
pub fn request(kind: InputKind, params: Value) -> Result<McpInputRequest, InputError> {
    let bad_params = |e: serde_json::Error| {
        InputError::new(
            codes::INVALID_PARAMS,
            format!("{} params: {e}", kind.method()),
        )
    };
    Ok(match kind {
        InputKind::Elicitation => {
            let p: ElicitRequestParams = serde_json::from_value(params).map_err(bad_params)?;
            McpInputRequest::Elicitation(ElicitRequest::new(p))
        }
        InputKind::Sampling => {
            let p: CreateMessageRequestParams =
                serde_json::from_value(params).map_err(bad_params)?;
            McpInputRequest::CreateMessage(CreateMessageRequest::new(p))
        }
        InputKind::Roots => McpInputRequest::ListRoots(ListRootsRequest::default()),
    })
}

/// A log message of the call's MCP server, passed on as `notifications/message`.
pub async fn log(peer: &Peer<RoleServer>, log: InvokeLog) {
    let Ok(level) = serde_json::from_value::<LoggingLevel>(Value::String(log.level)) else {
        return;
    };
    let mut note = LoggingMessageNotificationParam::new(level, log.data);
    note.logger = log.logger;
    let _ = peer.notify_logging_message(note).await;
}
