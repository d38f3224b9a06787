//! Requests relayed to the server that owns a prompt, resource or template: `get_prompt`,
//! `read_resource`, `complete` and resource subscriptions. Each goes to the live
//! connection of its owner in the [`surface::Catalog`](super::surface::Catalog) under the
//! server's `timeout_ms`; a server's error keeps its MCP code. Each is asked in a
//! frontend's view ([`Serves`]): what it is not served does not exist for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, ClientRequest, CompleteRequestParams, CompletionContext, ErrorCode,
    GetPromptRequest, GetPromptRequestParams, InputRequiredResult, PromptReference,
    ReadResourceRequest, ReadResourceRequestParams, Reference, RequestMetaObject,
    ResourceContents as McpContents, ResourceTemplateReference, ServerResult,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use rmcp::RoleClient;
use serde_json::{Map, Value};

use super::held::Round;
use super::server::InUse;
use super::surface::{Catalog, Event};
use super::{McpManager, Server};
use crate::error::Error;
use crate::lock;
use crate::protocol::{
    self, CompleteParams, CompleteResult, Completion, CompletionRef, GetPromptParams,
    GetPromptResult, InputKind, PromptEntry, PromptMessage, ReadResourceParams, ReadResourceResult,
    ResourceContents,
};

/// A frontend's view of the catalog (its profile): whether it is served the prompt,
/// resource or template `name` (a prompt's catalog name, a URI, a `uriTemplate`) of MCP
/// server `server`. A hidden entry is refused with the same error as a missing one.
pub type Serves<'a> = &'a (dyn Fn(&str, &str) -> bool + Sync);

impl McpManager {
    /// The live catalog of prompts, resources and templates.
    pub fn surface(&self) -> Arc<Catalog> {
        self.runtime.surface.catalog()
    }

    /// Catalog events: list changes and resource updates.
    pub fn surface_events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.runtime.surface.subscribe()
    }

    /// `get_prompt`: checked against the prompt's declared arguments, then asked of its
    /// server under the server's own name for it.
    pub async fn get_prompt(
        &self,
        p: GetPromptParams,
        serves: Serves<'_>,
    ) -> Result<GetPromptResult, Error> {
        let catalog = self.surface();
        let (entry, remote) = prompt(&catalog, &p.name, serves)?;
        if let Some(missing) = entry
            .arguments
            .iter()
            .find(|a| a.required && !p.arguments.contains_key(&a.name))
        {
            return Err(Error::InvalidParams(format!(
                "prompt '{}' needs the argument '{}'",
                p.name, missing.name
            )));
        }
        if let Some(unknown) = p
            .arguments
            .keys()
            .find(|k| !entry.arguments.iter().any(|a| &a.name == *k))
        {
            return Err(Error::InvalidParams(format!(
                "prompt '{}' has no argument '{unknown}'",
                p.name
            )));
        }
        let (server, peer, in_use) = self.owner(&entry.server).await?;
        let arguments: Map<String, Value> = p
            .arguments
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let asking = Asking {
            binding: format!("prompts/get {remote} {}", Value::Object(arguments.clone())),
            inputs: &p.inputs,
            responses: p.input_responses,
            state: p.request_state,
        };
        let request = GetPromptRequestParams::new(remote.clone()).with_arguments(arguments);
        let answer = match self
            .ask(&server, (peer, in_use), asking, |responses, state| {
                let mut request = request;
                (request.input_responses, request.request_state) = (responses, state);
                ClientRequest::GetPromptRequest(GetPromptRequest::new(request))
            })
            .await?
        {
            ServerResult::GetPromptResult(answer) => answer,
            // Passed back whole: the frontend answers, and asks again with the state.
            ServerResult::InputRequiredResult(asked) => {
                return Ok(GetPromptResult {
                    description: None,
                    messages: Vec::new(),
                    input_required: Some(questions(asked)),
                });
            }
            _ => return Err(unknown_kind(&server, "prompts/get")),
        };
        let messages = answer.messages.into_iter().map(|m| PromptMessage {
            role: serde_json::to_value(m.role)
                .ok()
                .and_then(|r| r.as_str().map(str::to_owned))
                .unwrap_or_default(),
            content: serde_json::to_value(m.content).unwrap_or(Value::Null),
        });
        Ok(GetPromptResult {
            description: answer.description,
            messages: messages.collect(),
            input_required: None,
        })
    }

    /// `read_resource`: from the server that lists the URI, else the one whose template
    /// matches it. Contents pass as they came, moved rather than copied; a result over
    /// `max_bytes` (the output cap) is refused whole, since a cut resource is another
    /// resource. A server's `input_required` is passed back, as for `get_prompt`.
    pub async fn read_resource(
        &self,
        p: ReadResourceParams,
        max_bytes: usize,
        serves: Serves<'_>,
    ) -> Result<ReadResourceResult, Error> {
        let uri = p.uri.as_str();
        let owner = owner_of(&self.surface(), uri, serves)?;
        let (server, peer, in_use) = self.owner(&owner).await?;
        let asking = Asking {
            binding: format!("resources/read {uri}"),
            inputs: &p.inputs,
            responses: p.input_responses,
            state: p.request_state,
        };
        let answer = match self
            .ask(&server, (peer, in_use), asking, |responses, state| {
                let mut request = ReadResourceRequestParams::new(uri);
                (request.input_responses, request.request_state) = (responses, state);
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request))
            })
            .await?
        {
            ServerResult::ReadResourceResult(answer) => answer,
            ServerResult::InputRequiredResult(asked) => {
                return Ok(ReadResourceResult {
                    contents: Vec::new(),
                    input_required: Some(questions(asked)),
                })
            }
            _ => return Err(unknown_kind(&server, "resources/read")),
        };
        let size: usize = answer
            .contents
            .iter()
            .map(|c| match c {
                McpContents::TextResourceContents { text, .. } => text.len(),
                McpContents::BlobResourceContents { blob, .. } => blob.len(),
                other => protocol::json_len(other),
            })
            .sum();
        if size > max_bytes {
            return Err(Error::Server(format!(
                "resource {uri} is {size} bytes, over the output cap of {max_bytes} bytes (limits.max_output_bytes)"
            )));
        }
        let contents = answer.contents.into_iter().filter_map(contents);
        Ok(ReadResourceResult {
            contents: contents.collect(),
            input_required: None,
        })
    }

    /// `complete`: a prompt argument by the prompt's catalog name, or a template variable.
    pub async fn complete(
        &self,
        p: CompleteParams,
        serves: Serves<'_>,
    ) -> Result<CompleteResult, Error> {
        let catalog = self.surface();
        let (owner, reference) = match &p.reference {
            CompletionRef::Prompt { name } => {
                let (entry, remote) = prompt(&catalog, name, serves)?;
                (
                    entry.server.clone(),
                    Reference::Prompt(PromptReference::new(remote.clone())),
                )
            }
            CompletionRef::Resource { uri } => {
                let owner = catalog
                    .templates
                    .get(uri)
                    .map(|t| t.server.clone())
                    .or_else(|| catalog.resources.get(uri).map(|r| r.server.clone()))
                    .filter(|owner| serves(uri, owner))
                    .ok_or_else(|| {
                        Error::InvalidParams(format!("unknown resource template: {uri}"))
                    })?;
                (
                    owner,
                    Reference::Resource(ResourceTemplateReference::new(uri.clone())),
                )
            }
        };
        let (server, peer, _in_use) = self.owner(&owner).await?;
        let mut request = CompleteRequestParams::new(
            reference,
            ArgumentInfo::new(p.argument.name, p.argument.value),
        );
        if let Some(context) = p.context {
            request.context = Some(CompletionContext::with_arguments(
                context.arguments.into_iter().collect(),
            ));
        }
        let answer = relay(&server, peer.complete(request)).await?;
        Ok(CompleteResult {
            completion: Completion {
                values: answer.completion.values,
                total: answer.completion.total,
                has_more: answer.completion.has_more,
            },
        })
    }

    /// Opens one subscriber's interest in `uri`: the first one for a (server, URI)
    /// subscribes upstream. The returned guard, dropped, closes it again; the
    /// `resource_updated` events to forward are the hub's [`Event::Updated`] for the
    /// owner and URI.
    pub async fn subscribe_resource(
        &self,
        uri: &str,
        serves: Serves<'_>,
    ) -> Result<ResourceInterest, Error> {
        let owner = owner_of(&self.surface(), uri, serves)?;
        let (server, peer, _in_use) = self.owner(&owner).await?;
        if !self.runtime.surface.of(&owner).subscribe {
            return Err(Error::InvalidParams(format!(
                "MCP server '{owner}' does not offer resource subscriptions"
            )));
        }
        let key = (owner.clone(), uri.to_owned());
        let first = {
            let mut subs = lock(&self.runtime.surface.subscribers);
            let n = subs.entry(key.clone()).or_default();
            *n += 1;
            *n == 1
        };
        let interest = ResourceInterest {
            server: server.clone(),
            key,
        };
        if first && super::era::peer_is_new(&peer) {
            // The server's listen is opened again with this URI (`listen.rs`).
            self.runtime.surface.subscribers_changed();
        } else if first {
            #[allow(deprecated)] // resources/subscribe: what servers before 2026-07-28 speak
            relay(&server, peer.subscribe(SubscribeRequestParams::new(uri))).await?;
        }
        Ok(interest)
    }

    /// Sends a prompt or resource request (`request`, given the retry's answers and
    /// state) that may ask the caller something. A 2026-07-28 server is told what the
    /// caller answers, and its `input_required` comes back as it is; one of the
    /// `initialize` era, which asks with requests of its own mid-request, is held open
    /// while it asks ([`held`](super::held)), its questions coming back as an
    /// `input_required` of ours, the retry's answers and state ours too.
    async fn ask(
        &self,
        server: &Arc<Server>,
        (peer, in_use): (Peer<RoleClient>, InUse),
        asking: Asking<'_>,
        request: impl FnOnce(Option<BTreeMap<String, Value>>, Option<String>) -> ClientRequest,
    ) -> Result<ServerResult, Error> {
        if super::era::peer_is_new(&peer) {
            let request = request(asking.responses, asking.state);
            let answer = relay(server, declaring(&peer, request, asking.inputs)).await;
            drop(in_use);
            return answer;
        }
        let round = self
            .runtime
            .held
            .round(server, (peer, in_use), request(None, None), &asking);
        match round.await? {
            Round::Done(answer) => Ok(*answer),
            Round::Asked(mut asked) => {
                asked.insert("resultType".into(), "input_required".into());
                serde_json::from_value(Value::Object(asked))
                    .map(ServerResult::InputRequiredResult)
                    .map_err(|e| {
                        Error::Server(format!(
                            "cannot relay the questions of MCP server '{}': {e}",
                            server.name()
                        ))
                    })
            }
        }
    }

    /// A server that owns `name`'s entries, and its live connection, for one request: a
    /// parked server is started for it, within the server's `timeout_ms`.
    pub(super) async fn owner(
        &self,
        name: &str,
    ) -> Result<(Arc<Server>, Peer<RoleClient>, InUse), Error> {
        let server = self.known(name)?;
        let timeout = timeout_of(&server);
        let (in_use, link) = tokio::time::timeout(timeout, server.begin_use())
            .await
            .map_err(|_| {
                Error::Server(format!(
                    "MCP server '{name}' did not start within {} ms (timeout_ms)",
                    timeout.as_millis()
                ))
            })?
            .map_err(|e| Error::Server(e.message))?;
        Ok((server, link.peer, in_use))
    }
}

/// One subscriber's interest in a resource; dropped, it unsubscribes upstream when it
/// was the last.
pub struct ResourceInterest {
    server: Arc<Server>,
    key: (String, String),
}

impl ResourceInterest {
    /// The server and URI whose `Event::Updated` this subscriber wants.
    pub fn wants(&self, server: &str, uri: &str) -> bool {
        self.key.0 == server && self.key.1 == uri
    }
}

impl Drop for ResourceInterest {
    fn drop(&mut self) {
        let last = {
            let mut subs = lock(&self.server.runtime.surface.subscribers);
            match subs.get_mut(&self.key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    subs.remove(&self.key);
                    true
                }
            }
        };
        if !last {
            return;
        }
        let (Ok(link), Ok(runtime)) = (
            self.server.link_for_call(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        if super::era::peer_is_new(&link.peer) {
            self.server.runtime.surface.subscribers_changed();
            return;
        }
        {
            let uri = self.key.1.clone();
            let timeout = timeout_of(&self.server);
            runtime.spawn(async move {
                #[allow(deprecated)] // resources/unsubscribe, as for subscribe
                let unsubscribe = link.peer.unsubscribe(UnsubscribeRequestParams::new(uri));
                let _ = tokio::time::timeout(timeout, unsubscribe).await;
            });
        }
    }
}

/// A prompt or resource request that may ask its caller something: what it is (a retry
/// must be the same request), the kinds its caller answers, and a retry's answers and
/// state.
pub(super) struct Asking<'a> {
    pub binding: String,
    pub inputs: &'a [InputKind],
    pub responses: Option<BTreeMap<String, Value>>,
    pub state: Option<String>,
}

/// A server's `input_required` as the host's answers carry it: its `inputRequests` and
/// `requestState` as they came, for the asker to answer and send back.
fn questions(asked: InputRequiredResult) -> Map<String, Value> {
    let mut asked = match serde_json::to_value(asked) {
        Ok(Value::Object(asked)) => asked,
        _ => Map::new(),
    };
    asked.remove("resultType");
    asked
}

/// One part of a resource in our type, its strings moved, not copied (a kind of contents
/// newer than this host goes through its JSON).
fn contents(c: McpContents) -> Option<ResourceContents> {
    Some(match c {
        McpContents::TextResourceContents {
            uri,
            mime_type,
            text,
            meta,
        } => ResourceContents {
            uri,
            mime_type,
            text: Some(text),
            blob: None,
            meta: meta.map(|m| m.0),
        },
        McpContents::BlobResourceContents {
            uri,
            mime_type,
            blob,
            meta,
        } => ResourceContents {
            uri,
            mime_type,
            text: None,
            blob: Some(blob),
            meta: meta.map(|m| m.0),
        },
        other => serde_json::from_value(serde_json::to_value(other).ok()?).ok()?,
    })
}

/// Subscribes upstream again, after a reconnect, to every URI of `server` that still has
/// subscribers (a server of the 2026-07-28 era gets them in its listen instead).
pub(super) async fn resubscribe(server: &Server, peer: &Peer<RoleClient>) {
    if super::era::peer_is_new(peer) {
        return; // the connection's listen names them all (`listen.rs`)
    }
    let uris: Vec<String> = lock(&server.runtime.surface.subscribers)
        .keys()
        .filter(|(s, _)| s == server.name())
        .map(|(_, uri)| uri.clone())
        .collect();
    for uri in uris {
        #[allow(deprecated)] // resources/subscribe, as above
        let subscribe = peer.subscribe(SubscribeRequestParams::new(uri.clone()));
        if let Err(e) = relay(server, subscribe).await {
            tracing::warn!(server = %server.name(), %uri, error = %e, "cannot subscribe to the resource again after a reconnect");
        }
    }
}

fn timeout_of(server: &Server) -> Duration {
    Duration::from_millis(server.config().timeout_ms)
}

/// Runs one request to `server` under its `timeout_ms`, its failure as a method error.
pub(super) async fn relay<T>(
    server: &Server,
    request: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout_of(server), request).await {
        Err(_) => Err(timed_out(server)),
        Ok(answer) => answered(server, answer),
    }
}

/// A request to `server` that got no answer within its `timeout_ms`.
pub(super) fn timed_out(server: &Server) -> Error {
    Error::Server(format!(
        "MCP server '{}' did not answer within {} ms (timeout_ms)",
        server.name(),
        timeout_of(server).as_millis()
    ))
}

/// `server`'s answer to a relayed request, its failure as a method error.
pub(super) fn answered<T>(server: &Server, answer: Result<T, ServiceError>) -> Result<T, Error> {
    match answer {
        Ok(answer) => Ok(answer),
        Err(ServiceError::McpError(e)) => Err(Error::Upstream {
            code: e.code.0,
            message: format!("MCP server '{}': {}", server.name(), e.message),
            data: e
                .data
                .filter(|_| e.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY),
        }),
        Err(e) => Err(Error::Server(server.call_error(e).message)),
    }
}

/// Sends a prompt or resource request to a 2026-07-28 server declaring, as a tool call
/// does, what the caller's frontend answers (`inputs`) as the request's client
/// capabilities, rather than the connection's: the server can then refuse with `-32021`
/// or ask only what can be answered. Cancelled upstream when given up (the timeout).
async fn declaring(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    inputs: &[InputKind],
) -> Result<ServerResult, ServiceError> {
    let mut declared = RequestMetaObject::default();
    declared.set_client_capabilities(super::client::capabilities(|k| inputs.contains(&k)));
    let mut options = PeerRequestOptions::no_options();
    options.meta = Some(declared);
    let handle = peer.send_request_with_option(request, options).await?;
    let mut unanswered = super::tool::Unanswered::peer(peer.clone(), handle.id.clone());
    let answer = handle.await_response().await;
    unanswered.settle();
    answer
}

fn unknown_kind(server: &Server, method: &str) -> Error {
    Error::Server(format!(
        "MCP server '{}' answered {method} with a result of no known kind",
        server.name()
    ))
}

/// The prompt `name` of the catalog, with the server's own name for it, if `serves`.
fn prompt<'c>(
    catalog: &'c Catalog,
    name: &str,
    serves: Serves<'_>,
) -> Result<&'c (PromptEntry, String), Error> {
    catalog
        .prompts
        .get(name)
        .filter(|(entry, _)| serves(name, &entry.server))
        .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))
}

/// The server that serves `uri`: the one that lists it, else the first whose template
/// matches it. Through a template, the view must serve both the template and the URI
/// itself, so a profile can hide either.
fn owner_of(catalog: &Catalog, uri: &str, serves: Serves<'_>) -> Result<String, Error> {
    let owner = match catalog.resources.get(uri) {
        Some(r) => serves(uri, &r.server).then(|| r.server.clone()),
        None => catalog
            .templates
            .values()
            .find(|t| matches_template(&t.uri_template, uri))
            .filter(|t| serves(&t.uri_template, &t.server) && serves(uri, &t.server))
            .map(|t| t.server.clone()),
    };
    owner.ok_or_else(|| Error::ResourceNotFound(uri.to_owned()))
}

/// Whether `uri` is one expansion of the RFC 6570 `template`. Literal parts must match
/// exactly; a simple `{var}` stands for one or more characters other than `/`, `?` and
/// `#`; a reserved `{+var}` or fragment `{#var}` for any; a query `{?a,b}` or `{&a}` for
/// the rest of the URI when it starts with `?` or `&` (or nothing); other operators
/// (`{/var}`, `{.var}`, `{;var}`) for any run that starts with their character.
pub fn matches_template(template: &str, uri: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        parts.push(Part::Literal(&rest[..open]));
        parts.push(Part::Var(&rest[open + 1..open + close]));
        rest = &rest[open + close + 1..];
    }
    parts.push(Part::Literal(rest));
    matches_parts(&parts, uri)
}

enum Part<'a> {
    Literal(&'a str),
    Var(&'a str),
}

fn matches_parts(parts: &[Part], uri: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return uri.is_empty();
    };
    match first {
        Part::Literal(l) => uri
            .strip_prefix(l)
            .is_some_and(|tail| matches_parts(rest, tail)),
        Part::Var(expr) => {
            let op = expr.chars().next().unwrap_or(' ');
            let ok: &dyn Fn(char) -> bool = match op {
                '+' | '#' => &|_| true,
                '?' | '&' | '/' | '.' | ';' => &|_| true,
                _ => &|c| !matches!(c, '/' | '?' | '#'),
            };
            let optional = matches!(op, '?' | '&' | '/' | '.' | ';');
            if optional && matches_parts(rest, uri) {
                return true;
            }
            if optional && !uri.starts_with(op) {
                return false;
            }
            // Try every length of the variable's run, longest first.
            let run = uri
                .char_indices()
                .find(|(_, c)| !ok(*c))
                .map_or(uri.len(), |(i, _)| i);
            (1..=run)
                .rev()
                .filter(|n| uri.is_char_boundary(*n))
                .any(|n| matches_parts(rest, &uri[n..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::matches_template;

    #[test]
    fn uris_match_the_templates_that_expand_to_them() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(matches_template(t, "demo://resource/dynamic/text/7"));
        assert!(!matches_template(t, "demo://resource/dynamic/text/"));
        assert!(!matches_template(t, "demo://resource/dynamic/text/7/8"));
        assert!(!matches_template(t, "demo://resource/dynamic/blob/7"));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.txt"));
        assert!(matches_template("x://{a}-{b}", "x://one-two"));
        assert!(matches_template("x://s{?q,n}", "x://s"));
        assert!(matches_template("x://s{?q,n}", "x://s?q=1&n=2"));
        assert!(!matches_template("x://s{?q}", "x://sx"));
        assert!(matches_template("x://fixed", "x://fixed"));
        assert!(!matches_template("x://fixed", "x://fixed2"));
    }
}
