//! The guards' methods (proto-docs/guards.md): their counters and refusals, and the
//! operator's reset. Both are admin methods (`rpc/peer.rs`): a process the host started
//! may not lift the limits of the calls it runs in.

use super::Api;
use crate::error::Error;
use crate::protocol::*;

pub(super) fn register(api: &mut Api) -> anyhow::Result<()> {
    api.method(
        method::GUARDS_STATUS,
        "Every guard rule in force (the built-in loop breaker included): its limits, its refusals since start, and its counters per scope, fullest first, with when each refills; and damage of the stored daily counters.",
        |host, _: EmptyParams| async move { Ok(host.guards().status()) },
    )?;
    api.method(
        method::GUARDS_RESET,
        "Clears a rule's counters, of one scope (a key as guards.status lists it) or of all (and its refusal count then), including its stored daily counters and any damage recorded for them.",
        |host, p: GuardsResetParams| async move {
            let Some((cleared, keys)) = host.guards().reset(&p.rule, p.scope.as_deref()) else {
                let known: Vec<String> = host.guards().status().rules.into_iter().map(|r| r.name).collect();
                let hint = crate::config::suggest(&p.rule, known.iter().map(String::as_str).collect())
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_default();
                return Err(Error::InvalidParams(format!(
                    "no guard rule named {:?}{hint}; guards.status lists them",
                    p.rule
                )));
            };
            if !keys.is_empty() {
                let writes = keys.into_iter().map(|k| (k, None)).collect::<Vec<_>>();
                host.sessions()
                    .write_counters(move |write| write(&writes))
                    .await?;
            }
            Ok(GuardsResetResult { cleared })
        },
    )
}
