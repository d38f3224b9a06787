//! The facade's prompts, resources, templates, completions and resource subscriptions:
//! each MCP request becomes the host method of the same meaning (proto-docs/mcp-facade.md),
//! and the host's `prompts_changed`, `resources_changed` and `resource_updated` become
//! MCP's list-changed and updated notifications. Each is asked in this connection's view
//! (its profile and session), as `tools/list` is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Reference, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};

use super::{convert, host_error, inputs, Changes, Facade, Feed};
use crate::client::{Client, ClientError};
use crate::lock;
use crate::mcp::mrtr::MAX_ROUNDS;
use crate::protocol::{self, CompletionRef};

/// An upstream's `input_required` for a prompt or resource, as the facade's client takes it.
enum Round {
    /// A new-era client answers it itself: passed back as it came.
    Asked(InputRequiredResult),
    /// An old-era client was asked with classic requests: the retry's answers and state.
    Retry(Option<BTreeMap<String, Value>>, Option<String>),
}

/// What the client of `ctx` does with `asked`, the `input_required` of `what` in round
/// `round` (the first is 0).
async fn round_for(
    ctx: &RequestContext<RoleServer>,
    what: &str,
    mut asked: Map<String, Value>,
    round: usize,
) -> Result<Round, ErrorData> {
    if super::era::is_modern(ctx) {
        asked.insert("resultType".into(), "input_required".into());
        return Ok(Round::Asked(convert::via_json(&asked)?));
    }
    if round == MAX_ROUNDS {
        return Err(too_many_rounds(what));
    }
    let (responses, state) = inputs::answer_classic(&ctx.peer, what, asked).await?;
    Ok(Round::Retry(responses, state))
}

/// A server that asks again and again does not hold a request for ever.
fn too_many_rounds(what: &str) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "{what}: its MCP server asked for input more than {MAX_ROUNDS} times in one request"
        ),
        None,
    )
}

/// What one MCP connection follows of the host's surface.
#[derive(Default)]
pub(super) struct Following {
    /// `prompts_changed` and `resources_changed`, subscribed in `initialize` and forwarded
    /// from `initialized` on (as for tools).
    feeds: Mutex<Option<Feeds>>,
    /// The client's `resources/subscribe`s, and the resource subscriptions of its
    /// `subscriptions/listen`s, by who hears the updates and URI.
    resources: Mutex<HashMap<(Listener, String), Followed>>,
    /// The number of the next listen (see [`Listener::Listen`]).
    listens: std::sync::atomic::AtomicU64,
}

/// Who hears a followed resource's updates: the client (`resources/subscribe`), or one
/// of its listens by number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Listener {
    Client,
    Listen(u64),
}

/// Where a followed resource's updates go: the connection's peer, or a listen's sink
/// (which tags them with its subscription id).
#[derive(Clone)]
pub(super) enum UpdatesTo {
    Peer(Peer<RoleServer>),
    Listen(rmcp::service::SubscriptionSink),
}

impl UpdatesTo {
    /// Says `uri` was updated; false once no one hears it any more.
    async fn updated(&self, uri: String) -> bool {
        match self {
            UpdatesTo::Peer(peer) => peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .is_ok(),
            UpdatesTo::Listen(sink) => sink.notify_resource_updated(uri).await.is_ok(),
        }
    }
}

/// One resource followed: what to subscribe to again on a bridge's next daemon, and the
/// task forwarding the host's `resource_updated` (aborting it ends the host subscription).
struct Followed {
    params: protocol::ResourceParams,
    to: UpdatesTo,
    task: tokio::task::AbortHandle,
}

/// Where a connection hears of changes of the live prompts and resources.
pub(super) struct Feeds {
    pub(super) prompts: Feed,
    pub(super) resources: Feed,
}

impl Feeds {
    pub(super) fn open(changes: &Changes) -> Feeds {
        Feeds {
            prompts: changes.prompts(),
            resources: changes.resources(),
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        for (_, followed) in lock(&self.resources).drain() {
            followed.task.abort();
        }
    }
}

impl Following {
    /// Forwards the host's `resource_updated` of `params` on `client` to `to`, in place
    /// of whatever `who` followed of that URI before.
    pub(super) async fn follow_resource(
        &self,
        client: &Client,
        who: Listener,
        params: protocol::ResourceParams,
        to: UpdatesTo,
    ) -> Result<(), ClientError> {
        let mut sub = client.subscribe_resource(&params).await?;
        let updates = to.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(updated)) = sub.next().await {
                if !updates.updated(updated.uri).await {
                    break;
                }
            }
        });
        let key = (who, params.uri.clone());
        let followed = Followed {
            params,
            to,
            task: task.abort_handle(),
        };
        if let Some(old) = lock(&self.resources).insert(key, followed) {
            old.task.abort();
        }
        Ok(())
    }

    /// Whether `who` follows `uri`.
    pub(super) fn follows(&self, who: Listener, uri: &str) -> bool {
        lock(&self.resources).contains_key(&(who, uri.to_owned()))
    }

    /// Ends what `who` follows of `uri` (`None`: of every URI).
    pub(super) fn unfollow(&self, who: Listener, uri: Option<&str>) {
        lock(&self.resources).retain(|(w, u), followed| {
            let gone = *w == who && uri.is_none_or(|uri| uri == u);
            if gone {
                followed.task.abort();
            }
            !gone
        });
    }

    /// A number for a new listen, never given before on this connection.
    pub(super) fn next_listen(&self) -> Listener {
        use std::sync::atomic::Ordering;
        Listener::Listen(self.listens.fetch_add(1, Ordering::Relaxed))
    }

    /// Subscribes again on `client` (a bridge's next daemon) to every resource the client
    /// and its listens subscribed to; one the new daemon refuses (gone with its server) is
    /// dropped.
    pub(super) async fn follow_again(&self, client: &Client) {
        let all: Vec<_> = lock(&self.resources)
            .iter()
            .map(|((who, _), f)| (*who, f.params.clone(), f.to.clone()))
            .collect();
        for (who, params, to) in all {
            let uri = params.uri.clone();
            if let Err(e) = self.follow_resource(client, who, params, to).await {
                tracing::warn!(%e, %uri, "cannot follow the resource on the new daemon");
                self.unfollow(who, Some(&uri));
            }
        }
    }

    /// Subscribes to the host's list changes (in `initialize`, before the first list).
    pub(super) fn subscribe(&self, changes: &Changes) {
        *lock(&self.feeds) = Some(Feeds::open(changes));
    }

    /// Forwards the list changes to the MCP client, from `initialized` on.
    pub(super) fn forward(&self, facade: &Facade, peer: &Peer<RoleServer>) {
        let Some(Feeds {
            mut prompts,
            mut resources,
        }) = lock(&self.feeds).take()
        else {
            return;
        };
        let to = peer.clone();
        facade.spawn(async move {
            while prompts.changed().await {
                if to.notify_prompt_list_changed().await.is_err() {
                    break;
                }
            }
        });
        let to = peer.clone();
        facade.spawn(async move {
            while resources.changed().await {
                if to.notify_resource_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }
}

/// `page` of `items` at `cursor` (the index of its first item, as `tools/list` pages).
pub(super) fn page<T: Clone>(
    items: &[T],
    cursor: Option<String>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|&i| i <= items.len())
            .ok_or_else(|| ErrorData::invalid_params(format!("invalid cursor {c:?}"), None))?,
    };
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

impl Facade {
    /// This connection's view, for the host's list methods.
    fn view(&self) -> protocol::SurfaceListParams {
        protocol::SurfaceListParams {
            profile: self.state.profile.get().cloned(),
            session_id: self.session_id(),
        }
    }

    /// The resource `uri` in this connection's view.
    pub(super) fn viewed_resource(&self, uri: String) -> protocol::ResourceParams {
        let view = self.view();
        protocol::ResourceParams {
            uri,
            profile: view.profile,
            session_id: view.session_id,
        }
    }

    pub(super) async fn prompts_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let list = self
            .client()
            .await?
            .list_prompts(&self.view())
            .await
            .map_err(host_error)?;
        let (items, next) = page(
            &list.prompts,
            request.and_then(|r| r.cursor),
            self.page_size,
        )?;
        let mut result = ListPromptsResult::with_all_items(convert::listed(&items));
        result.next_cursor = next;
        Ok(result)
    }

    pub(super) async fn resources_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let client = self.client().await?;
        let list = client
            .list_resources(&self.view())
            .await
            .map_err(host_error)?;
        let (items, next) = page(
            &list.resources,
            request.and_then(|r| r.cursor),
            self.page_size,
        )?;
        let mut result = ListResourcesResult::with_all_items(convert::listed(&items));
        result.next_cursor = next;
        Ok(result)
    }

    pub(super) async fn templates_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let client = self.client().await?;
        let list = client
            .list_resource_templates(&self.view())
            .await
            .map_err(host_error)?;
        let cursor = request.and_then(|r| r.cursor);
        let (items, next) = page(&list.resource_templates, cursor, self.page_size)?;
        let mut result = ListResourceTemplatesResult::with_all_items(convert::listed(&items));
        result.next_cursor = next;
        Ok(result)
    }

    /// `prompts/get`. A prompt whose MCP server answers `input_required` is passed back
    /// as it came to a client of the 2026-07-28 era, whose retry carries the answers and
    /// the server's state to it; a client of the `initialize` era is asked with classic
    /// requests instead and the facade retries for it ([`Facade::round_for`]).
    pub(super) async fn prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        // MCP prompt arguments are strings; a client that sends another JSON value gets
        // it as its JSON text.
        let arguments = request.arguments.unwrap_or_default().into_iter();
        let view = self.view();
        let mut params = protocol::GetPromptParams {
            profile: view.profile,
            session_id: view.session_id,
            name: request.name,
            arguments: arguments
                .map(|(k, v)| match v {
                    Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect(),
            input_responses: request.input_responses,
            request_state: request.request_state,
            inputs: super::inputs::answerable(ctx),
        };
        let client = self.client().await?;
        let what = format!("prompt '{}'", params.name);
        for round in 0..=MAX_ROUNDS {
            let mut answer = client.get_prompt(&params).await.map_err(host_error)?;
            let Some(asked) = answer.input_required.take() else {
                return Ok(GetPromptResponse::Complete(convert::via_json(&answer)?));
            };
            match round_for(ctx, &what, asked, round).await? {
                Round::Asked(asked) => return Ok(GetPromptResponse::InputRequired(asked)),
                Round::Retry(responses, state) => {
                    (params.input_responses, params.request_state) = (responses, state);
                }
            }
        }
        Err(too_many_rounds(&what))
    }

    /// `resources/read`, following the resource's MCP server's `input_required` as
    /// [`Facade::prompt`] does.
    pub(super) async fn resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = self.client().await?;
        let view = self.view();
        let what = format!("resource {}", request.uri);
        let mut params = protocol::ReadResourceParams {
            uri: request.uri,
            profile: view.profile,
            session_id: view.session_id,
            input_responses: request.input_responses,
            request_state: request.request_state,
            inputs: super::inputs::answerable(ctx),
        };
        for round in 0..=MAX_ROUNDS {
            let mut answer = client.read_resource(&params).await.map_err(host_error)?;
            let Some(asked) = answer.input_required.take() else {
                let answer: ReadResourceResult = convert::via_json(&answer)?;
                return Ok(answer.into());
            };
            match round_for(ctx, &what, asked, round).await? {
                Round::Asked(asked) => return Ok(asked.into()),
                Round::Retry(responses, state) => {
                    (params.input_responses, params.request_state) = (responses, state);
                }
            }
        }
        Err(too_many_rounds(&what))
    }

    pub(super) async fn completion(
        &self,
        request: CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let reference = match request.r#ref {
            Reference::Prompt(p) => CompletionRef::Prompt { name: p.name },
            Reference::Resource(r) => CompletionRef::Resource { uri: r.uri },
            _ => {
                return Err(ErrorData::invalid_params(
                    "unknown completion reference",
                    None,
                ))
            }
        };
        let view = self.view();
        let params = protocol::CompleteParams {
            profile: view.profile,
            session_id: view.session_id,
            reference,
            argument: protocol::CompletionArgument {
                name: request.argument.name,
                value: request.argument.value,
            },
            context: request.context.map(|c| protocol::CompletionContext {
                arguments: c.arguments.unwrap_or_default().into_iter().collect(),
            }),
        };
        let client = self.client().await?;
        let answer = client.complete(&params).await.map_err(host_error)?;
        convert::via_json(&answer)
    }

    /// `resources/subscribe`: one host subscription per URI and connection (a second
    /// subscribe of the same URI changes nothing), forwarded as `resources/updated`.
    pub(super) async fn subscribe_resource(
        &self,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        let following = &self.state.following;
        if following.follows(Listener::Client, &uri) {
            return Ok(());
        }
        let client = self.client().await?;
        let params = self.viewed_resource(uri);
        following
            .follow_resource(&client, Listener::Client, params, UpdatesTo::Peer(peer))
            .await
            .map_err(host_error)
    }

    /// `resources/unsubscribe`: ends the URI's host subscription, if any.
    pub(super) fn unsubscribe_resource(&self, uri: &str) {
        self.state.following.unfollow(Listener::Client, Some(uri));
    }
}
