//! The methods of the MCP surface besides tools: prompts, resources, resource templates,
//! completions, resource subscriptions and the `prompts_changed` / `resources_changed`
//! notifications (proto-docs/surface.md). Each answers from the MCP servers' live
//! catalog (`mcp::surface`) or relays to the server that owns the entry, in the view of
//! the caller's profile ([`View`]), as `list_tools` is. The host's own slash commands
//! (`crate::commands`) are prompts too, listed first and answered here: a command's
//! prompt name takes precedence over an upstream prompt of the same name.

use std::sync::Arc;

use super::{Api, Sink};
use crate::commands::{self, Command, PROMPT_SERVER};
use crate::config::Config;
use crate::error::Error;
use crate::host::Host;
use crate::mcp::surface::Event;
use crate::protocol::*;
use crate::rpc::subscription;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::LIST_PROMPTS,
        "The host's slash commands (server `toolhost`, named by their words joined by `_`: mcp_status), then the prompts of every MCP server, named like tools (mcp_<server>_<prompt>).",
        |host, p: SurfaceListParams| async move {
            let view = View::of(&host, p.profile, p.session_id).await?;
            let serves = view.serves();
            let commands = host.commands().catalog();
            let mut prompts: Vec<PromptEntry> = commands
                .commands()
                .iter()
                .filter(|c| serves(&c.entry.prompt, PROMPT_SERVER))
                .map(|c| commands::prompt_entry(c))
                .collect();
            let catalog = host.mcp().surface();
            let upstream = catalog.prompts.values().map(|(p, _)| p);
            prompts.extend(
                upstream
                    .filter(|p| commands.by_prompt(&p.name).is_none() && serves(&p.name, &p.server))
                    .cloned(),
            );
            Ok(ListPromptsResult { prompts })
        },
    )?;
    api.method(
        method::GET_PROMPT,
        "One prompt's messages, its arguments checked against the ones it declares. A command's prompt is its expansion (getting `mcp_reload` reloads config.json).",
        |host, mut p: GetPromptParams| async move {
            let view = View::of(&host, p.profile.take(), p.session_id.take()).await?;
            let serves = view.serves();
            if let Some(command) = command_prompt(&host, &p.name, &serves) {
                let expanded = commands::expand(&command, &p.arguments, |b| super::builtin_commands::render(b, &host)).await?;
                return Ok(GetPromptResult {
                    description: expanded.description,
                    messages: expanded.messages,
                    input_required: None,
                });
            }
            host.mcp().get_prompt(p, &serves).await
        },
    )?;
    api.method(
        method::LIST_RESOURCES,
        "The host's skills (skill://<name>/<file>, server \"toolhost\"), the MCP servers' skills (skill://mcp_<server>/…, verified when read), then the resources of every MCP server, by their own URIs (a URI listed twice is the first's).",
        |host, p: SurfaceListParams| async move {
            let session = p.session_id.clone();
            let view = View::of(&host, p.profile, p.session_id).await?;
            let serves = view.serves();
            let mut resources = super::skills::resources(&host, session.as_deref(), &serves).await?;
            if view.code_tools(&host.registry().snapshot()).is_some() {
                resources.push(crate::code::surface::resource_entry());
            }
            let skills: std::collections::HashSet<String> =
                resources.iter().map(|r| r.uri.clone()).collect();
            let catalog = host.mcp().surface();
            let upstream = catalog.resources.values();
            let upstream = upstream.filter(|r| serves(&r.uri, &r.server) && !skills.contains(&r.uri));
            resources.extend(upstream.cloned());
            Ok(ListResourcesResult { resources })
        },
    )?;
    api.method(
        method::LIST_RESOURCE_TEMPLATES,
        "The resource templates (RFC 6570) of every MCP server.",
        |host, p: SurfaceListParams| async move {
            let view = View::of(&host, p.profile, p.session_id).await?;
            let serves = view.serves();
            let catalog = host.mcp().surface();
            let templates = catalog.templates.values();
            let templates = templates.filter(|t| serves(&t.uri_template, &t.server));
            Ok(ListResourceTemplatesResult {
                resource_templates: templates.cloned().collect(),
            })
        },
    )?;
    api.method(
        method::READ_RESOURCE,
        "Reads a resource: a skill's file (at most 1 MiB, never outside its folder), else from the server that lists it (or whose template matches it); -32002 when none does. A resource over limits.max_output_bytes is refused.",
        |host, p: ReadResourceParams| async move {
            let view = View::of(&host, p.profile.clone(), p.session_id.clone()).await?;
            let serves = view.serves();
            let session = p.session_id.as_deref();
            if p.uri == crate::code::surface::RESOURCE_URI {
                if let Some(tools) = view.code_tools(&host.registry().snapshot()) {
                    return Ok(crate::code::surface::read_resource(&tools));
                }
            }
            if let Some(skill_file) =
                super::skills::read_resource(&host, &p.uri, session, &serves).await?
            {
                return Ok(skill_file);
            }
            let cap = view.config.limits.max_output_bytes;
            host.mcp().read_resource(p, cap, &serves).await
        },
    )?;
    api.method(
        method::COMPLETE,
        "Completions for a prompt argument or a resource-template variable, from the server that owns it (a command's argument: from its `choices`).",
        |host, mut p: CompleteParams| async move {
            let view = View::of(&host, p.profile.take(), p.session_id.take()).await?;
            let serves = view.serves();
            if let CompletionRef::Prompt { name } = &p.reference {
                if let Some(command) = command_prompt(&host, name, &serves) {
                    return Ok(complete_command(&command, &p.argument));
                }
            }
            host.mcp().complete(p, &serves).await
        },
    )?;
    api.subscription::<ResourceParams, ResourceUri, _, _>(
        [method::SUBSCRIBE_RESOURCE, method::RESOURCE_UPDATED, method::UNSUBSCRIBE_RESOURCE],
        "A resource_updated notification whenever the server that owns the resource says it changed. WebSocket and newline framing only.",
        |host, p: ResourceParams| async move {
            let view = View::of(&host, p.profile, p.session_id).await?;
            if p.uri == crate::code::surface::RESOURCE_URI
                && view.code_tools(&host.registry().snapshot()).is_some()
            {
                return Ok(code_resource_updates(&host));
            }
            // Listening before subscribing upstream: no update after the reply is missed.
            let mut rx = host.mcp().surface_events();
            let interest = host.mcp().subscribe_resource(&p.uri, &view.serves()).await?;
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
        "A notification whenever the live prompts change (a server's list, a reload that adds or removes a server, or a command file added, edited or removed). WebSocket and newline framing only.",
        |host, _: EmptyParams| async move { Ok(prompt_changes(&host)) },
    )?;
    api.subscription::<EmptyParams, ResourcesChanged, _, _>(
        [method::SUBSCRIBE_RESOURCES_CHANGED, method::RESOURCES_CHANGED, method::UNSUBSCRIBE_RESOURCES_CHANGED],
        "A notification whenever the live resources or resource templates change, the skills' included. WebSocket and newline framing only.",
        |host, _: EmptyParams| async move { Ok(resources_changes(&host)) },
    )?;
    Ok(())
}

/// What a caller is served: what the profile it names selects and what its session's own
/// profile selects (the rule of `list_tools`), against the config as it is now.
pub(super) struct View {
    config: Arc<Config>,
    asked: Option<String>,
    own: Option<String>,
    /// The session's meta (its code-mode switch), empty without a session.
    meta: serde_json::Map<String, serde_json::Value>,
    /// The session's workspace, else the host's (whose custom tools a program sees).
    workspace: std::path::PathBuf,
}

impl View {
    /// An unknown `profile` is an error naming the defined ones, as for `list_tools`.
    pub(super) async fn of(
        host: &Host,
        profile: Option<String>,
        session_id: Option<String>,
    ) -> Result<View, Error> {
        let config = host.config();
        if let Some(name) = &profile {
            config
                .profile(name)
                .map_err(|e| Error::InvalidParams(e.to_string()))?;
        }
        let (own, workspace, meta) = match &session_id {
            Some(id) => {
                let session = host.sessions().get(id).await?;
                (session.profile, session.workspace.into(), session.meta)
            }
            None => (None, host.workspace().to_path_buf(), Default::default()),
        };
        Ok(View {
            config,
            asked: profile,
            own,
            workspace,
            meta,
        })
    }

    /// Whether a prompt (by catalog name) or a resource or template (by URI or
    /// `uriTemplate`) of a server is served; the profiles compiled once.
    pub(super) fn serves(&self) -> impl Fn(&str, &str) -> bool + Sync + '_ {
        let asked = self.config.view(self.asked.as_deref());
        let own = self.config.view(self.own.as_deref());
        move |name, server| {
            asked.allows_item(name, Some(server)) && own.allows_item(name, Some(server))
        }
    }
}

impl View {
    /// The tools a code-mode program of this caller may call (`toolhost://code/tools.d.ts`
    /// declares them), or `None` when code mode is off for it.
    fn code_tools<'s>(
        &self,
        snapshot: &'s crate::registry::Snapshot,
    ) -> Option<Vec<&'s Arc<crate::registry::Entry>>> {
        let asked = self.config.view(self.asked.as_deref());
        let own = self.config.session_view(self.own.as_deref(), &self.meta);
        if !(crate::code::registered(snapshot) && asked.code_mode() && own.code_mode()) {
            return None;
        }
        let mut tools = crate::code::surface::session_tools(snapshot, &asked, &self.workspace);
        tools.retain(|e| crate::session::serves(&own, e));
        Some(tools)
    }
}

/// `resource_updated` of `toolhost://code/tools.d.ts`: each change of the live tools.
fn code_resource_updates(host: &Host) -> subscription::Stream {
    let mut rx = host.registry().subscribe();
    subscription::stream(move |sink: Sink| async move {
        subscription::relay(&mut rx, &sink, "code tools", |_| {
            Some(ResourceUri {
                uri: crate::code::surface::RESOURCE_URI.to_owned(),
            })
        })
        .await;
    })
}

/// The command whose prompt is `name`, when the view serves it.
fn command_prompt(
    host: &Host,
    name: &str,
    serves: &impl Fn(&str, &str) -> bool,
) -> Option<Arc<Command>> {
    let catalog = host.commands().catalog();
    catalog
        .by_prompt(name)
        .filter(|_| serves(name, PROMPT_SERVER))
        .cloned()
}

/// The choices of a command's argument that start with what is typed (MCP sends at most
/// 100 values).
fn complete_command(command: &Command, argument: &CompletionArgument) -> CompleteResult {
    const MAX_VALUES: usize = 100;
    let mut values = command.complete(&argument.name, &argument.value);
    let total = values.len();
    values.truncate(MAX_VALUES);
    CompleteResult {
        completion: Completion {
            values,
            total: u32::try_from(total).ok(),
            has_more: Some(total > MAX_VALUES),
        },
    }
}

/// `prompts_changed` from either source of prompts — the MCP servers' catalog and the
/// command folders — each counting both, subscribed before the reply goes out.
fn prompt_changes(host: &Host) -> subscription::Stream {
    let mut servers = host.mcp().surface_events();
    let mut files = host.commands().subscribe();
    let host = host.clone();
    subscription::stream(move |sink: Sink| async move {
        let count = || PromptsChanged {
            prompts: host.mcp().surface().prompts.len() + host.commands().catalog().len(),
        };
        tokio::join!(
            subscription::relay(&mut servers, &sink, "MCP surface", |e| match e {
                Event::Prompts(_) => Some(count()),
                _ => None,
            }),
            subscription::relay(&mut files, &sink, "commands", |_| Some(count())),
        );
    })
}

/// `resources_changed`: the MCP servers' resource lists and the skills (whose files are
/// resources too), both subscribed before the reply goes out. `resources` counts both (the
/// daemon workspace's skills).
fn resources_changes(host: &Host) -> subscription::Stream {
    let mut servers = host.mcp().surface_events();
    let mut skills = host.skills().subscribe();
    let mut tools = host.registry().subscribe();
    // `toolhost://code/tools.d.ts` comes and goes with the code tools.
    let coded =
        std::sync::atomic::AtomicBool::new(crate::code::registered(&host.registry().snapshot()));
    let host = host.clone();
    subscription::stream(move |sink: Sink| async move {
        let count = || {
            let catalog = host.mcp().surface();
            let skills = host.skills().catalog();
            let skill_files: usize = skills.skills().iter().map(|s| s.files.len()).sum();
            let code = usize::from(crate::code::registered(&host.registry().snapshot()));
            ResourcesChanged {
                resources: catalog.resources.len() + skill_files + code,
                templates: catalog.templates.len(),
            }
        };
        tokio::join!(
            subscription::relay(&mut servers, &sink, "MCP surface", |e| match e {
                Event::Resources(_) => Some(count()),
                _ => None,
            }),
            subscription::relay(&mut skills, &sink, "skills", |_| Some(count())),
            subscription::relay(&mut tools, &sink, "code tools", |_| {
                let now = crate::code::registered(&host.registry().snapshot());
                let was = coded.swap(now, std::sync::atomic::Ordering::Relaxed);
                (now != was).then(count)
            }),
        );
    })
}
