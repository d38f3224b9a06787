//! `toolhost invoke|cancel|call`: calling a tool, cancelling a call, and sending any
//! JSON-RPC method raw.

use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};

use super::render::{emit, print_json, say, say_err, wire};
use super::{parse_json_object, success_if, Globals};
use crate::client::ClientError;
use crate::protocol::{ErrorKind, InvokeParams};

#[derive(Args, Debug)]
pub struct InvokeArgs {
    name: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    #[arg(long)]
    session: Option<String>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Approve a write/command tool in a strict session.
    #[arg(long)]
    approved: bool,
}

/// `toolhost invoke NAME`: exit 0 when the tool answered `ok`, 1 when it failed.
pub async fn invoke(g: &Globals, a: InvokeArgs) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let arguments = match parse_json_object("--args", &a.args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let params = InvokeParams {
        session_id: a.session,
        timeout_ms: a.timeout_ms,
        approved: a.approved,
        ..InvokeParams::new(a.name.clone(), arguments)
    };
    let r = client.invoke(&params).await?;
    let ok = r.result.ok;
    if g.out.json {
        emit(g.out, &r);
    } else if ok {
        // The main text prints bare, the facts beside it as JSON.
        let shown = r.result.output.shown();
        match shown.main_text {
            Some(text) => say!("{}", text.strip_suffix('\n').unwrap_or(text)),
            None => print_json(&r.result.output.fields),
        }
        if shown.main_text.is_some() && !shown.facts.is_empty() {
            print_json(&shown.facts);
        }
    } else {
        let kind = r.result.error_kind;
        say_err!(
            "{} ({}): {}",
            a.name,
            kind.map_or_else(|| "failed".to_owned(), |k| wire(&k)),
            r.result.error.as_deref().unwrap_or("")
        );
        if kind == Some(ErrorKind::ApprovalRequired) {
            // The daemon speaks protocol (`"approved": true`); say it in CLI terms.
            say_err!("toolhost: once the user agrees, run the same command with --approved");
        }
    }
    Ok(success_if(ok))
}

/// `toolhost cancel CALL_ID`: exit 1 when no such call is in flight.
pub async fn cancel(g: &Globals, call_id: &str) -> Result<ExitCode, ClientError> {
    let r = g.connect().await?.cancel(call_id).await?;
    if g.out.json {
        emit(g.out, &r);
    } else if r.cancelled {
        say!("cancelled {call_id}");
    } else {
        say_err!("toolhost: no call {call_id} in flight");
    }
    Ok(success_if(r.cancelled))
}

/// `toolhost call METHOD [PARAMS]`: the result as the daemon sent it.
pub async fn call(
    g: &Globals,
    method: &str,
    params: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let client = g.connect().await?;
    let params = match params.map(|p| parse_json_object("PARAMS", p)) {
        Some(Ok(p)) => p,
        Some(Err(code)) => return Ok(code),
        None => Map::new(),
    };
    let params =
        serde_json::value::to_raw_value(&params).map_err(|e| ClientError::Decode(e.to_string()))?;
    let r = client.call_raw(method, &params).await?;
    match serde_json::from_str::<Value>(&r) {
        Ok(v) => emit(g.out, &v),
        Err(_) => say!("{r}"),
    }
    Ok(ExitCode::SUCCESS)
}
