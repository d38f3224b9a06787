//! `toolhost guards`: the guards' rules with their counters and refusals, and
//! `guards reset RULE [--scope KEY]` (proto-docs/guards.md).

use std::process::ExitCode;

use clap::Subcommand;

use super::render::{emit, print_table, say};
use super::Globals;
use crate::client::ClientError;
use crate::protocol::{GuardCounter, GuardScopeStatus, GuardsResetParams};

#[derive(Subcommand, Debug)]
pub enum GuardsCommand {
    /// Every rule, its refusals and its fullest scopes (the default).
    Status,
    /// Clear a rule's counters: of one scope (a key as `guards` lists it) or of all.
    Reset {
        rule: String,
        #[arg(long)]
        scope: Option<String>,
    },
}

pub async fn run(g: &Globals, command: Option<GuardsCommand>) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    match command {
        None | Some(GuardsCommand::Status) => {}
        Some(GuardsCommand::Reset { rule, scope }) => {
            let r = client
                .guards_reset(&GuardsResetParams {
                    rule: rule.clone(),
                    scope,
                })
                .await?;
            if g.out.json {
                emit(g.out, &r);
            } else {
                say!("{rule}: {} scope(s) cleared", r.cleared);
            }
            return Ok(ExitCode::SUCCESS);
        }
    }
    let status = client.guards_status().await?;
    if g.out.json {
        emit(g.out, &status);
        return Ok(super::success_if(status.errors.is_empty()));
    }
    let now = crate::now_ms();
    let mut rows = vec![[
        "RULE", "SCOPE", "FILL", "RATE", "DAILY", "RUNNING", "LOOP", "REFUSED",
    ]
    .map(str::to_owned)
    .to_vec()];
    for rule in &status.rules {
        let limits: Vec<&str> = rule.limits.iter().map(|l| l.as_str()).collect();
        let name = format!(
            "{}{}{}",
            rule.name,
            if rule.builtin { " (built-in)" } else { "" },
            if rule.enabled { "" } else { " (disabled)" }
        );
        let mut row = vec![name, format!("per {}: {}", rule.scope, limits.join(", "))];
        row.extend(std::iter::repeat_n(String::new(), 5));
        row.push(rule.refusals.to_string());
        rows.push(row);
        for s in &rule.scopes {
            rows.push(scope_row(s, now));
        }
        if rule.more_scopes > 0 {
            rows.push(vec![String::new(), format!("… {} more", rule.more_scopes)]);
        }
    }
    print_table(&rows);
    for e in &status.errors {
        say!("{e}");
    }
    Ok(super::success_if(status.errors.is_empty()))
}

fn scope_row(s: &GuardScopeStatus, now: u64) -> Vec<String> {
    let counter = |c: &Option<GuardCounter>| {
        c.as_ref().map_or("-".to_owned(), |c| {
            let reset = c
                .resets_at_ms
                .map(|t| format!(" ({}s)", t.saturating_sub(now).div_ceil(1000)))
                .unwrap_or_default();
            format!("{}/{}{reset}", c.used, c.allowed)
        })
    };
    vec![
        String::new(),
        s.scope.clone(),
        format!("{:.0}%", s.fill * 100.0),
        counter(&s.rate),
        counter(&s.daily),
        counter(&s.concurrency),
        counter(&s.loop_),
        String::new(),
    ]
}
