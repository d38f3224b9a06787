//! The methods of the MCP surface besides tools: prompts, resources, resource templates,
//! completions, resource subscriptions and the `prompts_changed` / `resources_changed`
//! notifications (proto-docs/surface.md). Each answers from the MCP servers' live
//! catalog (`mcp::surface`) or relays to the server that owns the entry.

use super::{Api, Sink};
use crate::host::Host;
use crate::mcp::surface::Event;
use crate::protocol::*;
use crate::rpc::subscription;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::LIST_PROMPTS,
        "The prompts of every MCP server, named like tools (mcp_<server>_<prompt>).",
        |host, _: EmptyParams| async move {
            let catalog = host.mcp().surface();
            let prompts = catalog.prompts.values().map(|(p, _)| p.clone()).collect();
            Ok(ListPromptsResult { prompts })
        },
    )?;
    api.method(
        method::GET_PROMPT,
        "One prompt's messages, its arguments checked against the ones it declares.",
        |host, p: GetPromptParams| async move { host.mcp().get_prompt(p).await },
    )?;
    api.method(
        method::LIST_RESOURCES,
        "The resources of every MCP server, by their own URIs (a URI two servers list is the first's).",
        |host, _: EmptyParams| async move {
            let resources = host.mcp().surface().resources.values().cloned().collect();
            Ok(ListResourcesResult { resources })
        },
    )?;
    api.method(
        method::LIST_RESOURCE_TEMPLATES,
        "The resource templates (RFC 6570) of every MCP server.",
        |host, _: EmptyParams| async move {
            let templates = host.mcp().surface().templates.values().cloned().collect();
            Ok(ListResourceTemplatesResult {
                resource_templates: templates,
            })
        },
    )?;
    api.method(
        method::READ_RESOURCE,
        "Reads a resource from the server that lists it (or whose template matches it); -32002 when none does. A resource over limits.max_output_bytes is refused.",
        |host, p: ResourceUri| async move {
            let cap = host.config().limits.max_output_bytes;
            host.mcp().read_resource(&p.uri, cap).await
        },
    )?;
    api.method(
        method::COMPLETE,
        "Completions for a prompt argument or a resource-template variable, from the server that owns it.",
        |host, p: CompleteParams| async move { host.mcp().complete(p).await },
    )?;
    api.subscription::<ResourceUri, ResourceUri, _, _>(
        [method::SUBSCRIBE_RESOURCE, method::RESOURCE_UPDATED, method::UNSUBSCRIBE_RESOURCE],
        "A resource_updated notification whenever the server that owns the resource says it changed. WebSocket and newline framing only.",
        |host, p: ResourceUri| async move {
            // Listening before subscribing upstream: no update after the reply is missed.
            let mut rx = host.mcp().surface_events();
            let interest = host.mcp().subscribe_resource(&p.uri).await?;
            Ok(subscription::stream(move |sink: Sink| async move {
                subscription::relay(&mut rx, &sink, "MCP resource", |e| match e {
                    Event::Updated { server, uri } if interest.wants(&server, &uri) => {
                        Some(ResourceUri { uri })
                    }
                    _ => None,
                })
                .await;
                drop(interest);
            }))
        },
    )?;
    api.subscription::<EmptyParams, PromptsChanged, _, _>(
        [method::SUBSCRIBE_PROMPTS_CHANGED, method::PROMPTS_CHANGED, method::UNSUBSCRIBE_PROMPTS_CHANGED],
        "A notification whenever the live prompts change (a server's list, or a reload that adds or removes a server). WebSocket and newline framing only.",
        |host, _: EmptyParams| async move { Ok(changes(&host, |e| match e { Event::Prompts(n) => Some(n), _ => None })) },
    )?;
    api.subscription::<EmptyParams, ResourcesChanged, _, _>(
        [method::SUBSCRIBE_RESOURCES_CHANGED, method::RESOURCES_CHANGED, method::UNSUBSCRIBE_RESOURCES_CHANGED],
        "A notification whenever the live resources or resource templates change. WebSocket and newline framing only.",
        |host, _: EmptyParams| async move { Ok(changes(&host, |e| match e { Event::Resources(n) => Some(n), _ => None })) },
    )?;
    Ok(())
}

/// A stream of the catalog events `pick` keeps, subscribed before the reply goes out.
fn changes<N: serde::Serialize + Send + Sync + 'static>(
    host: &Host,
    pick: fn(Event) -> Option<N>,
) -> subscription::Stream {
    let mut rx = host.mcp().surface_events();
    subscription::stream(move |sink: Sink| async move {
        subscription::relay(&mut rx, &sink, "MCP surface", pick).await;
    })
}
