//! The commands methods (proto-docs/commands.md): each reads the catalog in force, built
//! when the folders last changed. The same commands are MCP prompts (`surface`).

use std::sync::Arc;

use serde::Serialize;

use super::{forward, Api, Error};
use crate::commands::{self, Catalog};
use crate::protocol::*;

/// The `list_commands` answer, written as the catalog serialised it.
struct ListAnswer(Arc<Catalog>);

impl Serialize for ListAnswer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.list_json().serialize(s)
    }
}

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method_as::<EmptyParams, ListCommandsResult, _, _, _>(
        method::LIST_COMMANDS,
        "The slash commands, sorted by name: name (`mcp status`), MCP prompt name, description, arguments, source, file.",
        |host, _: EmptyParams| async move { Ok(ListAnswer(host.commands().catalog())) },
    )?;
    api.method(
        method::GET_COMMAND,
        "One command expanded with its arguments (checked: -32602 when one is unknown, missing or not one of its choices), as MCP prompt messages. Getting `mcp reload` reloads config.json.",
        |host, p: GetCommandParams| async move {
            let catalog = host.commands().catalog();
            let command = catalog
                .get(&p.name)
                .ok_or_else(|| Error::InvalidParams(format!("no command named '{}'", p.name)))?;
            commands::expand(command, &p.arguments, |b| super::builtin_commands::render(b, &host)).await
        },
    )?;
    api.subscription::<EmptyParams, CommandsChanged, _, _>(
        [
            method::SUBSCRIBE_COMMANDS_CHANGED,
            method::COMMANDS_CHANGED,
            method::UNSUBSCRIBE_COMMANDS_CHANGED,
        ],
        "A notification whenever a command file is added, edited or removed. WebSocket and newline framing only.",
        |host, _: EmptyParams| async move {
            // Subscribed before the reply goes out: no change after it is missed.
            Ok(forward(host.commands().subscribe(), method::COMMANDS_CHANGED))
        },
    )
}
