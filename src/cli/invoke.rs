//! `toolhost invoke|cancel|call`: calling a tool, cancelling a call, and sending any
//! JSON-RPC method raw.

use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};

use super::render::{emit, print_json, say, say_err, wire};
use super::{parse_json_object, success_if, Globals};
use crate::client::ClientError;
use crate::protocol::{
    ContentBlock, ErrorKind, InvokeEvent, InvokeLog, InvokeParams, InvokeUpdate,
};

#[derive(Args, Debug)]
pub struct InvokeArgs {
    name: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    #[arg(long)]
    session: Option<String>,
    /// Run in this directory (default: the current one, unless it is `/` or the home
    /// directory; then the daemon's workspace). Not with `--session`, which has its own.
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    workspace: Option<std::path::PathBuf>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Approve a write/command tool in a strict session.
    #[arg(long)]
    approved: bool,
    /// The call's id (for `toolhost cancel`, the audit log); a fresh one when not given.
    #[arg(long)]
    call_id: Option<String>,
    /// Do not print the call's updates on stderr as they come.
    #[arg(long, short)]
    quiet: bool,
}

/// The exit status of a call interrupted by SIGINT or SIGTERM (the shell's 128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// `toolhost invoke NAME`: exit 0 when the tool answered `ok`, 1 when it failed, 130 when
/// interrupted (the call is cancelled first). The call's updates go to stderr as they come.
pub async fn invoke(g: &Globals, a: InvokeArgs) -> Result<ExitCode, ClientError> {
    // First: from here on, Ctrl-C must cancel the call rather than leave it running.
    let mut interrupted = Interrupt::install()
        .map_err(|e| ClientError::Io(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    let arguments = match parse_json_object("--args", &a.args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let workspace = match a.session {
        Some(_) => None,
        None => match super::workspace::resolve(a.workspace.as_deref()) {
            Ok(w) => Some(w),
            Err(e) => {
                say_err!("toolhost: {e}");
                return Ok(ExitCode::from(2));
            }
        },
    };
    let client = g.connect().await?;
    let session = match &workspace {
        Some(ws) => super::workspace::call_session(&client, ws).await?,
        None => a.session.clone(),
    };
    let call_id = a
        .call_id
        .clone()
        .unwrap_or_else(|| format!("cli_{}", uuid::Uuid::new_v4().simple()));
    let params = InvokeParams {
        session_id: session,
        timeout_ms: a.timeout_ms,
        approved: a.approved,
        call_id: Some(call_id.clone()),
        ..InvokeParams::new(a.name.clone(), arguments)
    };
    let wait = client.invoke_wait(&params);
    let gave_up = tokio::time::sleep(wait);
    tokio::pin!(gave_up);
    let mut events = client.subscribe_invoke(&params).await?;
    let mut streamed = Streamed::default();
    let r = loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = &mut gave_up => {
                return Err(ClientError::Timeout { method: crate::protocol::method::INVOKE.into(), after: wait });
            }
            () = interrupted.recv() => {
                if let Err(e) = client.cancel(&call_id).await {
                    say_err!("toolhost: cannot cancel {call_id}: {e}");
                } else {
                    say_err!("toolhost: interrupted; cancelled {call_id}");
                }
                return Ok(ExitCode::from(INTERRUPTED));
            }
        };
        match event {
            Some(Ok(InvokeEvent::Update(u))) if !a.quiet => {
                show_update(g, &u);
                streamed.add(&u);
            }
            Some(Ok(InvokeEvent::Log(l))) if !a.quiet => show_log(g, &l),
            // Questions come only to a subscriber that offered to answer them; this one did not.
            Some(Ok(
                InvokeEvent::Update(_) | InvokeEvent::Log(_) | InvokeEvent::InputRequest(_),
            )) => {}
            Some(Ok(InvokeEvent::Result(r))) => break r,
            Some(Err(e)) => return Err(e),
            None => {
                return Err(ClientError::Io(
                    "the daemon ended the call without a result".into(),
                ))
            }
        }
    };
    let ok = r.result.ok;
    if g.out.json {
        emit(g.out, &r);
    } else if ok {
        // The main text prints bare, the facts beside it as JSON; what the updates already
        // showed on the same screen (stdout and stderr one file) is not shown again.
        let mut shown = r.result.output.shown();
        if same_output() {
            streamed.remove_shown(&mut shown);
        }
        match shown.main_text {
            Some(text) => say!("{}", text.strip_suffix('\n').unwrap_or(text)),
            None if shown.facts.is_empty() && !streamed.0.is_empty() => {}
            None => print_json(&shown.facts),
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

/// The text the updates of a call showed, by the stream they name (`details.stream`, as
/// `bash` streams `stdout` and `stderr`; `""` when none).
#[derive(Default)]
struct Streamed(std::collections::BTreeMap<String, String>);

impl Streamed {
    fn add(&mut self, u: &InvokeUpdate) {
        let stream = u
            .details
            .as_ref()
            .and_then(|d| d.get("stream"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let text = self.0.entry(stream.to_owned()).or_default();
        for block in &u.content {
            if let ContentBlock::Text { text: t } = block {
                text.push_str(t);
            }
        }
    }

    /// Drops from `shown` the main text and the facts the updates already showed whole.
    fn remove_shown(&self, shown: &mut crate::protocol::Shown<'_>) {
        let same = |a: &str, b: &str| a.trim_end_matches('\n') == b.trim_end_matches('\n');
        if shown
            .main_text
            .is_some_and(|main| self.0.values().any(|s| same(s, main)))
        {
            shown.main_text = None;
        }
        shown.facts.retain(
            |k, v| !matches!((self.0.get(k), v.as_str()), (Some(s), Some(v)) if same(s, v)),
        );
    }
}

/// Whether stdout and stderr are one file (a terminal, or `>out 2>&1`).
fn same_output() -> bool {
    use std::os::fd::AsFd;
    let (out, err) = (std::io::stdout(), std::io::stderr());
    match (
        nix::sys::stat::fstat(out.as_fd()),
        nix::sys::stat::fstat(err.as_fd()),
    ) {
        (Ok(x), Ok(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => false,
    }
}

/// One update of a call in flight, on stderr: with `--json` the update as the protocol
/// has it (one line each), else its progress and text.
fn show_update(g: &Globals, u: &InvokeUpdate) {
    if g.out.json {
        if let Ok(line) = serde_json::to_string(u) {
            eprintln!("{line}");
        }
        return;
    }
    let mut texts = u.content.iter().filter_map(|block| match block {
        ContentBlock::Text { text } => Some(text.strip_suffix('\n').unwrap_or(text)),
        _ => None,
    });
    if let Some(p) = &u.progress {
        let of = p.total.map(|t| format!("/{t}")).unwrap_or_default();
        // Progress without a message of its own reads as the update's first text.
        let message = p.message.as_deref().or_else(|| texts.next()).unwrap_or("");
        say_err!("[{}{of}] {message}", p.progress);
    }
    for text in texts {
        say_err!("{text}");
    }
}

/// A log message of the call's MCP server, on stderr like an update.
fn show_log(g: &Globals, l: &InvokeLog) {
    if g.out.json {
        if let Ok(line) = serde_json::to_string(l) {
            eprintln!("{line}");
        }
        return;
    }
    let text = match &l.data {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    say_err!("[{}] {text}", l.level);
}

/// SIGINT and SIGTERM, handled from [`Interrupt::install`] on.
struct Interrupt {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn install() -> std::io::Result<Interrupt> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Interrupt {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
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

/// `toolhost call METHOD [PARAMS]`: the result as the daemon sent it. An `invoke` that
/// names no session runs in the current directory's workspace and a `session.create` that
/// names none gets it, as `toolhost invoke` does (`workspace` names another).
pub async fn call(
    g: &Globals,
    method: &str,
    params: Option<&str>,
    workspace: Option<&std::path::Path>,
) -> Result<ExitCode, ClientError> {
    let mut params = match params.map(|p| parse_json_object("PARAMS", p)) {
        Some(Ok(p)) => p,
        Some(Err(code)) => return Ok(code),
        None => Map::new(),
    };
    let ws = match super::workspace::resolve(workspace) {
        Ok(w) => w,
        Err(e) => {
            say_err!("toolhost: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let client = g.connect().await?;
    match method {
        crate::protocol::method::INVOKE if !params.contains_key("session_id") => {
            if let Some(id) = super::workspace::call_session(&client, &ws).await? {
                params.insert("session_id".into(), id.into());
            }
        }
        crate::protocol::method::SESSION_CREATE if !params.contains_key("workspace") => {
            if let Some(path) = ws.path {
                params.insert("workspace".into(), path.into());
            }
        }
        _ => {}
    }
    let params =
        serde_json::value::to_raw_value(&params).map_err(|e| ClientError::Decode(e.to_string()))?;
    let r = client.call_raw(method, &params).await?;
    match serde_json::from_str::<Value>(&r) {
        Ok(v) => emit(g.out, &v),
        Err(_) => say!("{r}"),
    }
    Ok(ExitCode::SUCCESS)
}
