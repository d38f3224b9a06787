//! The call pipeline every tool call goes through, whatever the tool's source:
//! lookup → session → argument validation → approval → run under timeout and cancel →
//! result normalisation (control fields, output cap with spill file).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::approval::{self, Decision};
use crate::approvals;
use crate::audit;
use crate::calls::CallRights;
use crate::catalog::ToolSource;
use crate::config::ProfileView;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::inputs::CallInputs;
use crate::metrics::{self, Source};
use crate::protocol::{
    ApprovalClass, ApprovalMode, ApprovalVerdict as Verdict, AuditRecord, CallOutcome, Control,
    ErrorKind, InputKind, InvokeParams, InvokeResult,
};
use crate::registry::{CallContext, Entry, ToolError, ToolResult, UpdateSink};
use crate::sandbox::CallSandbox;

/// A fresh call id for calls whose caller gave none: a random prefix drawn once per
/// daemon (so ids differ across restarts, e.g. in the audit log) and a counter, which
/// costs no system call on the call path the way a random id per call does.
pub fn new_call_id() -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let prefix = PREFIX.get_or_init(|| {
        let mut id = uuid::Uuid::new_v4().simple().to_string();
        id.truncate(16);
        id
    });
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // `format!("call_{prefix}{n:016x}")`, without the formatting machinery (a call's cost).
    let mut digits = [0u8; 16];
    let mut id = String::with_capacity(5 + prefix.len() + digits.len());
    id.push_str("call_");
    id.push_str(prefix);
    if hex::encode_to_slice(n.to_be_bytes(), &mut digits).is_ok() {
        id.extend(digits.iter().map(|&d| char::from(d)));
    }
    id
}

/// The refusal of a call whose `call_id` a call in flight already has.
pub fn call_id_in_use(call_id: &str) -> Error {
    Error::InvalidParams(format!(
        "call_id {call_id:?} is already in use by a call in flight"
    ))
}

/// Runs one call. Tool failures come back as `ok:false` results; only protocol-level
/// problems (an unknown session) are errors. `stream` is the call's `subscribe_invoke`
/// stream, if it has one.
pub async fn invoke(
    host: &Host,
    params: InvokeParams,
    updates: UpdateSink,
    stream: Option<Stream>,
) -> Result<InvokeResult> {
    run_call(host, params, updates, Link::Top(stream)).await
}

/// A call made by a code-mode program (proto-docs/code-mode.md), in the code call's
/// session: the code call is its `parent` in the audit log, cancelling the code call
/// cancels it, and an approval it needs is asked of the code call's frontend.
pub fn invoke_inner<'a>(
    host: &'a Host,
    params: InvokeParams,
    parent: &'a CallContext,
) -> futures::future::BoxFuture<'a, Result<InvokeResult>> {
    Box::pin(run_call(
        host,
        params,
        UpdateSink::default(),
        Link::Inner(parent),
    ))
}

/// Where a call comes from: a client (with its stream, if it streams) or a program.
enum Link<'a> {
    Top(Option<Stream>),
    Inner(&'a CallContext),
}

async fn run_call(
    host: &Host,
    mut params: InvokeParams,
    updates: UpdateSink,
    link: Link<'_>,
) -> Result<InvokeResult> {
    let started = Instant::now();
    // Memory the call freed goes back to the system once the daemon is quiet.
    let _burst = crate::trim::Burst;
    let call_id = params.call_id.clone().unwrap_or_else(new_call_id);
    let config = host.config();

    let (workspace, mode, session_meta, client, session_sandbox, profile) = match &params.session_id
    {
        Some(id) => {
            let s = host.sessions().get(id).await?;
            let client = (
                audit::client_name(&s.meta),
                s.frontend_id().map(str::to_owned),
                s.meta
                    .get(crate::protocol::META_TOKEN)
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            );
            (
                PathBuf::from(&s.workspace),
                s.approval,
                Value::Object(s.meta),
                client,
                s.sandbox,
                s.profile,
            )
        }
        None => (
            host.workspace().to_path_buf(),
            config.approval.mode,
            Value::Object(Map::new()),
            (None, None, None),
            None,
            None,
        ),
    };
    let view = match &session_meta {
        Value::Object(meta) => config.session_view(profile.as_deref(), meta),
        _ => config.view(profile.as_deref()),
    };
    let sandbox = CallSandbox::resolve(&config.sandbox, session_sandbox.as_ref(), params.sandbox);

    let (token, parent) = match &link {
        Link::Top(_) => (host.shutdown_token().child_token(), None),
        Link::Inner(p) => (p.cancel.child_token(), Some(p.call_id.clone())),
    };
    // However the call ends — result, timeout, cancel, or the caller dropping this future
    // (a closed streaming connection) — the token fires, so tools that outlive this future
    // (an MCP request in flight) learn it was abandoned.
    let _abandon = token.clone().drop_guard();
    let inputs = match link {
        Link::Top(stream) => {
            let (events, accepts) =
                stream.map_or((None, Vec::new()), |s| (Some(s.events), s.inputs));
            Arc::new(CallInputs::new(&call_id, accepts, events, token.clone()))
        }
        // A program's call asks what it must ask of the code call's frontend.
        Link::Inner(p) => p.inputs.clone(),
    };
    let _guard = host
        .calls()
        .register(
            &call_id,
            token.clone(),
            inputs.clone(),
            &params.name,
            params.session_id.as_deref(),
            CallRights {
                workspace: workspace.clone(),
                sandbox: sandbox.left.unwrap_or(sandbox.policy),
                network: sandbox.network,
                approval: mode,
            },
        )
        .ok_or_else(|| call_id_in_use(&call_id))?;
    let default_timeout_ms = if params.name == config.code_mode.tool_name {
        config.code_mode.timeout_ms
    } else {
        config.limits.default_timeout_ms
    };
    let timeout_ms = params.timeout_ms.unwrap_or(default_timeout_ms);
    let (client, frontend, session_token) = client;
    let mut facts = Facts {
        client,
        frontend,
        workspace: Some(workspace.display().to_string()),
        token: session_token,
        checkpoints: crate::checkpoint::enabled_for(&config, profile.as_deref(), &session_meta),
        parent,
        ..Facts::default()
    };
    let ctx = CallContext {
        call_id: call_id.clone(),
        workspace,
        session_id: params.session_id.clone(),
        session_meta,
        timeout_ms: Some(timeout_ms),
        cancel: token,
        updates,
        inputs,
        sandbox,
        processes: host.processes().for_call(&call_id),
    };
    let outcome =
        match run_checked(host, &mut params, &mut facts, &view, mode, timeout_ms, ctx).await {
            Err(e) if e.kind == ErrorKind::Cancelled && host.shutdown_token().is_cancelled() => {
                Err(e.with_field(crate::protocol::DAEMON_STOPPING, true))
            }
            other => other,
        };

    let (result, control, output_bytes) = normalise(
        outcome,
        config.limits.max_output_bytes,
        &host.outputs_dir(),
        &call_id,
    );
    let elapsed = started.elapsed();
    facts.output_bytes = output_bytes as u64;
    record_finished(host, &call_id, &params, facts, &result, elapsed);
    Ok(InvokeResult {
        call_id,
        tool: params.name,
        result,
        control,
        duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        revision: host.registry().snapshot().revision(),
    })
}

/// Where a streamed call's input requests and log messages go, and which kinds of
/// question its frontend answers.
pub struct Stream {
    pub events: tokio::sync::mpsc::Sender<crate::protocol::InvokeEvent>,
    pub inputs: Vec<InputKind>,
}

/// What the pipeline learnt about a call, for its metrics and its audit line.
struct Facts {
    source: Source,
    server: Option<String>,
    approval: Option<Verdict>,
    approval_decision: Option<crate::protocol::ApprovalVerdictRecord>,
    args_sha256: Option<String>,
    args_bytes: u64,
    output_bytes: u64,
    client: Option<String>,
    /// The session's frontend id.
    frontend: Option<String>,
    /// The workspace the call ran in (its session's, else the daemon's).
    workspace: Option<String>,
    /// The name of the bearer token its session was made with (`/mcp` over TCP, whose
    /// calls come through the daemon's own connection).
    token: Option<String>,
    /// The guard that refused the call.
    guard: Option<crate::protocol::GuardRefusal>,
    /// Checkpoints are on for the call's session (`checkpoint::enabled_for`).
    checkpoints: bool,
    /// The code call whose program made this call.
    parent: Option<String>,
}

impl Default for Facts {
    fn default() -> Self {
        Facts {
            source: Source::unknown,
            server: None,
            approval: None,
            approval_decision: None,
            args_sha256: None,
            args_bytes: 0,
            output_bytes: 0,
            client: None,
            frontend: None,
            workspace: None,
            token: None,
            guard: None,
            checkpoints: false,
            parent: None,
        }
    }
}

/// Counts a finished call, adds it to its session's history and queues its audit line
/// (written off the call path).
fn record_finished(
    host: &Host,
    call_id: &str,
    params: &InvokeParams,
    facts: Facts,
    result: &CallOutcome,
    elapsed: Duration,
) {
    let outcome = if result.ok {
        metrics::outcome(None)
    } else {
        metrics::outcome(Some(result.error_kind.unwrap_or(ErrorKind::Failed)))
    };
    host.metrics().call_finished(
        &params.name,
        facts.source,
        facts.server.as_deref().unwrap_or(""),
        outcome,
        elapsed.as_secs_f64(),
    );
    let caller = audit::current_caller();
    let record = AuditRecord {
        time_ms: crate::now_ms(),
        call_id: call_id.to_owned(),
        session: params.session_id.clone(),
        peer_uid: caller.as_ref().and_then(|c| c.uid),
        // Through the MCP facade (the daemon's own connection), the token its session names.
        peer_token: match &caller {
            Some(c) if c.is_daemon() => facts.token,
            Some(c) => c.token.clone(),
            None => None,
        },
        peer_pid: caller.as_ref().and_then(|c| c.pid),
        peer_process: caller.as_ref().and_then(|c| c.process.clone()),
        client: facts
            .client
            .or_else(|| caller.as_ref().and_then(|c| c.agent.clone())),
        frontend: facts.frontend,
        workspace: facts.workspace,
        tool: params.name.clone(),
        source: facts.source.as_str().to_owned(),
        server: facts.server,
        approval: facts.approval,
        approval_decision: facts.approval_decision,
        approved: params.approved,
        ok: result.ok,
        error_kind: result.error_kind,
        duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        output_bytes: facts.output_bytes,
        args_sha256: facts.args_sha256,
        args_bytes: facts.args_bytes,
        guard: facts.guard,
        parent: facts.parent,
    };
    if let Some(session) = &record.session {
        host.sessions().history().record(
            session,
            crate::session::CallRecord {
                call_id: record.call_id.clone(),
                tool: record.tool.clone(),
                ok: record.ok,
                error_kind: record.error_kind,
                started_ms: record.time_ms.saturating_sub(record.duration_ms),
                duration_ms: record.duration_ms,
                args_bytes: record.args_bytes,
            },
        );
    }
    if !host.audit().record(record) {
        host.metrics().audit_dropped();
    }
}

async fn run_checked(
    host: &Host,
    params: &mut InvokeParams,
    facts: &mut Facts,
    view: &ProfileView<'_>,
    mode: ApprovalMode,
    timeout_ms: u64,
    mut ctx: CallContext,
) -> ToolResult {
    let snapshot = host.registry().snapshot();
    // A tool the session's profile does not serve is, to that session, no tool at all.
    let served = |e: &Arc<Entry>| crate::session::serves(view, e);
    let Some(entry) = snapshot.get(&params.name).filter(|e| served(e)) else {
        if let Some((_, q)) = snapshot
            .quarantined(&params.name)
            .filter(|(e, _)| served(e))
        {
            return Err(ToolError::new(ErrorKind::Quarantined, q.message.clone())
                .with_field("quarantine", serde_json::to_value(q).unwrap_or(Value::Null)));
        }
        if let Some(w) = host.trust().waiting_tool(&params.name) {
            return Err(ToolError::new(
                ErrorKind::Quarantined,
                format!(
                    "Tool '{}' waits for workspace trust: {} {} of {} is new or changed, and nothing a workspace brings runs before the user approves it. Approve it with `toolhost trust approve {}` (or `toolhost tools approve {}`), or trust the folder with `toolhost trust {}`.",
                    params.name, w.kind.as_str(), w.item, w.workspace, w.path, params.name, w.workspace
                ),
            ));
        }
        return Err(ToolError::new(
            ErrorKind::UnknownTool,
            format!("Unknown tool: {}", params.name),
        ));
    };
    (facts.source, facts.server) = match &entry.tool.spec().source {
        ToolSource::Builtin => (Source::builtin, None),
        ToolSource::Custom { .. } => (Source::custom, None),
        ToolSource::Mcp { server, .. } => (Source::mcp, Some(server.clone())),
    };
    // The arguments go to the tool, not copied: the audit line keeps only their digest
    // and size.
    let args = params.arguments.take().unwrap_or_default();
    let validator = entry.validator().map_err(ToolError::failed)?;
    let args_value = Value::Object(args);
    (facts.args_sha256, facts.args_bytes) = audit::digest_args(&args_value);
    // The yes/no check costs far less than collecting every violation, which only a
    // refused call needs.
    if !validator.is_valid(&args_value) {
        if let Some(err) = validator.iter_errors(&args_value).next() {
            return Err(ToolError::invalid(format!(
                "Invalid arguments for {}: {}",
                params.name,
                describe_violation(&err)
            )));
        }
    }
    let Value::Object(args) = args_value else {
        return Err(ToolError::invalid("arguments must be an object"));
    };

    let sandboxed = entry.tool.sandboxed();
    let sandboxing = approval::Sandboxing {
        confined: sandboxed && ctx.sandbox.enforced(),
        leaves: sandboxed && ctx.sandbox.left.is_some(),
        commands: host.config().approval.sandboxed_commands,
    };
    let decision = approval::decide_sandboxed(
        mode,
        entry.approval,
        params.approved,
        &params.name,
        &entry.tool.spec().source,
        sandboxing,
    );
    facts.approval = Some(match &decision {
        Decision::Allow => Verdict::Allow,
        Decision::NeedsApproval => Verdict::NeedsApproval,
        Decision::Deny(_) => Verdict::Deny,
    });
    // The guards: after the policy (a denied call is not counted), before approval is asked
    // (a call over its limits never bothers the user), and before anything runs. The
    // admission holds the call's concurrency slots until the call ends.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let _admitted = match &decision {
        Decision::Deny(_) => None,
        _ => match guard(host, &params.name, entry, &args, &ctx, facts, deadline).await {
            Ok(admitted) => Some(admitted),
            Err(refused) => {
                let record = serde_json::to_value(&refused.refusal).unwrap_or(Value::Null);
                facts.guard = Some(refused.refusal);
                return Err(
                    ToolError::new(ErrorKind::Limited, refused.message).with_field("guard", record)
                );
            }
        },
    };
    // A call that waited for a concurrency slot has that much less of its deadline left.
    let timeout_ms = if _admitted
        .as_ref()
        .is_some_and(crate::guards::Admission::queued)
    {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let left = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
        ctx.timeout_ms = Some(left);
        left
    } else {
        timeout_ms
    };
    match decision {
        Decision::Allow => {}
        // A tool allowed for the rest of the session (`allow_session`) runs without asking;
        // leaving the sandbox is asked every time.
        Decision::NeedsApproval
            if !sandboxing.leaves
                && ctx.session_id.as_deref().is_some_and(|session| {
                    host.approvals().allowed_in_session(session, &params.name)
                }) =>
        {
            facts.approval_decision = Some(crate::protocol::ApprovalVerdictRecord {
                outcome: crate::protocol::ApprovalOutcome::AllowSession,
                by: None,
                reason: None,
                waited_ms: 0,
            });
        }
        Decision::NeedsApproval => {
            let mut summary = match entry.tool.approval_details(&args).await {
                Some(details) => details,
                None => approval_summary(&params.name, entry.approval, &args),
            };
            let refusal = match ctx.sandbox.left.filter(|_| sandboxing.leaves) {
                Some(left) => {
                    summary.push_str(&format!(" — OUTSIDE THE SANDBOX (sandbox: \"off\"; the session's policy is {})", left.as_str()));
                    format!("Tool '{}' asks to run outside the sandbox (sandbox: \"off\"), which always needs approval; repeat the call with \"approved\": true once the user agrees.", params.name)
                }
                None => format!("Tool '{}' needs approval in strict mode; repeat the call with \"approved\": true once the user agrees.", params.name),
            };
            // The call's own frontend is asked (if it answers elicitation) and the call
            // waits in the approval queue (if `approval.wait_s` allows); the first answer wins.
            let ask = approvals::Ask {
                tool: &params.name,
                class: entry.approval,
                summary: crate::protocol::ApprovalSummary::new(summary),
                refusal,
                arguments: &args,
                client: facts
                    .client
                    .clone()
                    .or_else(|| audit::current_caller().and_then(|c| c.agent.clone())),
                wait_s: host.config().approval.wait_s,
                timeout_ms,
            };
            let (allowed, verdict) = approvals::settle(host.approvals(), &ctx, ask).await;
            facts.approval_decision = verdict;
            allowed?;
        }
        Decision::Deny(msg) => return Err(ToolError::new(ErrorKind::Denied, msg)),
    }

    if crate::registry::is_search_tool(&entry.tool) {
        return tool_search(host, &snapshot, &args, ctx.session_id.as_deref(), view).await;
    }

    let cancel = ctx.cancel.clone();
    let tool = entry.tool.clone();
    let checkpoint = checkpoint(host, entry, &ctx, facts).await;
    drop(snapshot);
    let result = if tool.keeps_deadline() {
        call_tool(host, &tool, view, args, ctx).await
    } else {
        tokio::select! {
            r = call_tool(host, &tool, view, args, ctx) => r,
            _ = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
                cancel.cancel();
                Err(ToolError::timed_out(&params.name, timeout_ms))
            }
            _ = cancel.cancelled() => Err(ToolError::cancelled(&params.name)),
        }
    };
    if let Some(c) = checkpoint {
        c.finish().await;
    }
    result
}

/// Runs `tool`: the code tool here (its program's calls come back to the pipeline), any
/// other through its own `call`.
fn call_tool<'a>(
    host: &'a Host,
    tool: &'a Arc<dyn crate::registry::Tool>,
    view: &ProfileView<'_>,
    args: Map<String, Value>,
    ctx: CallContext,
) -> futures::future::BoxFuture<'a, ToolResult> {
    let Some(code) = crate::code::as_code_tool(tool) else {
        return tool.call(args, ctx);
    };
    let config = host.config();
    let snapshot = host.registry().snapshot();
    let tools = crate::code::surface::session_tools(&snapshot, view, &ctx.workspace);
    if code.is_api() {
        let apis = crate::code::surface::apis(&tools);
        return Box::pin(std::future::ready(code.api(&args, &apis)));
    }
    let run = crate::code::Run {
        key: crate::code::RunnerKey {
            node: config.custom_tools.node.clone(),
            network: ctx.sandbox.network,
            sandbox: config.sandbox.clone(),
            max_memory_mb: config.code_mode.max_memory_mb,
        },
        settings: config.code_mode.clone(),
        tools: tools.iter().map(|e| e.tool.spec().name.clone()).collect(),
    };
    Box::pin(async move {
        let pipeline = Inner { host, parent: &ctx };
        code.run(args, &ctx, run, &pipeline).await
    })
}

/// The pipeline as a code-mode program reaches it.
struct Inner<'a> {
    host: &'a Host,
    parent: &'a CallContext,
}

impl crate::code::Pipeline for Inner<'_> {
    fn call(
        &self,
        tool: String,
        args: Map<String, Value>,
    ) -> futures::future::BoxFuture<'_, InvokeResult> {
        let params = InvokeParams {
            name: tool.clone(),
            arguments: Some(args),
            session_id: self.parent.session_id.clone(),
            ..InvokeParams::default()
        };
        Box::pin(async move {
            match invoke_inner(self.host, params, self.parent).await {
                Ok(r) => r,
                // A protocol-level failure (the session is gone) is the call's failure.
                Err(e) => InvokeResult {
                    call_id: String::new(),
                    tool,
                    result: CallOutcome {
                        ok: false,
                        error: Some(e.to_string()),
                        error_kind: Some(ErrorKind::Failed),
                        approval: None,
                        output: Default::default(),
                    },
                    control: None,
                    duration_ms: 0,
                    revision: 0,
                },
            }
        })
    }
}

/// The checkpoint step (proto-docs/checkpoints.md): a call that can change its workspace —
/// a built-in, custom tool or module of class `write` or `command`, or a tool (not
/// `read_only`) of an MCP server with `checkpoint` on — is recorded by a scan before and
/// after it.
async fn checkpoint(
    host: &Host,
    entry: &Entry,
    ctx: &CallContext,
    facts: &Facts,
) -> Option<crate::checkpoint::Pending> {
    if !facts.checkpoints {
        return None;
    }
    let config = host.config();
    let acts = match &entry.tool.spec().source {
        ToolSource::Mcp { server, .. } => {
            entry.approval != Some(ApprovalClass::ReadOnly)
                && config
                    .mcp_servers
                    .get(server)
                    .is_some_and(|s| s.checkpointed())
        }
        _ => matches!(
            entry.approval,
            Some(ApprovalClass::Write | ApprovalClass::Command)
        ),
    };
    if !acts {
        return None;
    }
    let caller = crate::checkpoint::Caller {
        call_id: Some(ctx.call_id.clone()),
        tool: Some(entry.tool.spec().name.clone()),
        frontend: facts
            .client
            .clone()
            .or_else(|| audit::current_caller().and_then(|c| c.agent.clone())),
        session: ctx.session_id.clone(),
        restores: None,
    };
    host.checkpoints()
        .before(&config, &ctx.workspace, caller)
        .await
}

/// Checks the call against the guards (waiting for a concurrency slot within the call's
/// deadline), and stores what it counted against `daily` limits before it runs: a count
/// that cannot be stored refuses the call (a budget fails closed).
async fn guard(
    host: &Host,
    name: &str,
    entry: &Entry,
    args: &Map<String, Value>,
    ctx: &CallContext,
    facts: &Facts,
    deadline: tokio::time::Instant,
) -> std::result::Result<crate::guards::Admission, crate::guards::Refused> {
    use crate::guards::{self, GuardSource};
    let source = match &entry.tool.spec().source {
        ToolSource::Builtin => GuardSource::Builtin,
        ToolSource::Custom { .. } if entry.tool.is_module() => GuardSource::Module,
        ToolSource::Custom { .. } => GuardSource::Custom,
        ToolSource::Mcp { .. } => GuardSource::Mcp,
    };
    let caller = audit::current_caller();
    let client = facts.client.as_deref().or_else(|| {
        let c = caller.as_ref()?;
        c.agent.as_deref().or(c.process.as_deref())
    });
    let frontend = guards::frontend_key(
        facts.frontend.as_deref(),
        client,
        caller.as_ref().and_then(|c| c.uid),
    );
    let call = guards::Call {
        target: guards::Target {
            tool: name,
            source,
            server: facts.server.as_deref(),
            approval: entry.approval,
        },
        args,
        session: ctx.session_id.as_deref(),
        frontend: &frontend,
        workspace: &ctx.workspace,
    };
    let g = host.guards();
    let admitted = g.check(&call)?;
    let admitted = g.wait(admitted, deadline, &ctx.cancel).await?;
    if admitted.counted_daily().is_empty() {
        return Ok(admitted);
    }
    if let Some(fleet) = host.fleet() {
        // The budget is the fleet's: charged there, atomically, before the call runs.
        let charges = g.daily_charges(&admitted);
        return match fleet.charge(&charges).await {
            Ok(charged) => g.settle(admitted, charged),
            Err(e) => Err(g.unpersisted(admitted, &e)),
        };
    }
    let counted = admitted.counted_daily().to_vec();
    let writer = g.clone();
    let stored = host
        .sessions()
        .write_counters(move |write| writer.persist(&counted, write))
        .await;
    match stored {
        Ok(()) => Ok(admitted),
        Err(e) => Err(g.unpersisted(admitted, &e.to_string())),
    }
}

/// `tool_search` called as a tool: the matches go to the model, and to the session's loaded
/// tools when the call has a session.
async fn tool_search(
    host: &Host,
    snapshot: &crate::registry::Snapshot,
    args: &Map<String, Value>,
    session_id: Option<&str>,
    view: &ProfileView<'_>,
) -> ToolResult {
    let query = args.get("query").and_then(Value::as_str).unwrap_or("");
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok());
    let result = snapshot.search(query, limit, crate::protocol::ToolFormat::Openai, |e| {
        crate::session::serves(view, e)
    });
    if let Some(id) = session_id {
        let found = result.matches.iter().map(|m| m.name.clone()).collect();
        crate::session::remember_loaded(host.sessions(), id, found)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
    }
    Ok(crate::registry::search_tool_result(result))
}

/// Names the offending field as `arguments.<path>` — for a missing or unexpected property,
/// the property itself rather than the object holding it.
fn describe_violation(err: &jsonschema::ValidationError) -> String {
    use jsonschema::error::ValidationErrorKind;
    let base = format!(
        "arguments{}",
        err.instance_path().to_string().replace('/', ".")
    );
    match err.kind() {
        ValidationErrorKind::Required { property } => {
            format!(
                "{base}.{}: missing required field",
                property.as_str().unwrap_or("?")
            )
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let fields: Vec<String> = unexpected.iter().map(|u| format!("{base}.{u}")).collect();
            format!(
                "{}: unexpected field (not in the tool's schema)",
                fields.join(", ")
            )
        }
        _ => format!("{base}: {err}"),
    }
}

/// A readable line saying what a call would do, shown to the user before approving.
fn approval_summary(name: &str, class: Option<ApprovalClass>, args: &Map<String, Value>) -> String {
    let class = class.map_or("unclassified", |c| c.as_str());
    let detail = ["command", "path"]
        .iter()
        .find_map(|k| {
            args.get(*k)
                .and_then(Value::as_str)
                .map(|v| format!(" {k}={v:?}"))
        })
        .unwrap_or_default();
    format!("{name} ({class}){detail}")
}

/// Turns a tool outcome into the envelope's `result` and `control`, the result held to
/// `max_output` bytes. Also returns the size in bytes of the result as the tool produced it
/// (before the cap).
pub fn normalise(
    outcome: ToolResult,
    max_output: usize,
    outputs_dir: &Path,
    call_id: &str,
) -> (CallOutcome, Option<Control>, usize) {
    let mut result = match outcome {
        Ok(output) => CallOutcome {
            ok: true,
            error: None,
            error_kind: None,
            approval: None,
            output,
        },
        Err(e) => CallOutcome {
            ok: false,
            error: Some(e.message),
            error_kind: Some(e.kind),
            approval: e.approval,
            output: *e.output,
        },
    };
    let control = std::mem::take(&mut result.output.control);
    let size = cap_output(&mut result, max_output, outputs_dir, call_id);
    (result, (!control.is_empty()).then_some(control), size)
}

/// A text of a result that the output cap may cut.
#[derive(Debug, Clone, PartialEq)]
enum Text {
    /// One of the tool's own fields.
    Field(String),
    /// The error message.
    Error,
}

impl Text {
    fn name(&self) -> &str {
        match self {
            Text::Field(k) => k,
            Text::Error => "error",
        }
    }
    fn get_mut<'a>(&self, result: &'a mut CallOutcome) -> Option<&'a mut String> {
        let value = match self {
            Text::Field(k) => result.output.fields.get_mut(k),
            Text::Error => return result.error.as_mut(),
        };
        match value {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }
}

/// Keeps the result under `max` bytes: the longest string fields are cut with a visible
/// marker and the whole text is saved to a file the model can page through with `read_file`.
/// Returns the result's size before cutting.
fn cap_output(result: &mut CallOutcome, max: usize, outputs_dir: &Path, call_id: &str) -> usize {
    let size = crate::protocol::json_len(result);
    if size <= max {
        return size;
    }
    let own = result
        .output
        .fields
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|s| (Text::Field(k.clone()), s.len())));
    let error = result.error.as_ref().map(|e| (Text::Error, e.len()));
    let mut fields: Vec<(Text, usize)> = own.chain(error).filter(|(_, len)| *len > 256).collect();
    fields.sort_by_key(|(_, len)| std::cmp::Reverse(*len));
    if fields.is_empty() {
        return size;
    }
    // Unique per call: ids that sanitise alike (`job.1`, `job/1`) never share a file.
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let path = outputs_dir.join(format!(
        "{}-{}.txt",
        sanitize_file_name(call_id),
        &unique[..12]
    ));
    let mut full = String::new();
    for (k, _) in &fields {
        if let Some(s) = k.get_mut(result) {
            if fields.len() > 1 {
                full.push_str(&format!("===== {} =====\n", k.name()));
            }
            full.push_str(s);
            if !s.ends_with('\n') {
                full.push('\n');
            }
        }
    }
    let saved = write_private(outputs_dir, &path, full.as_bytes()).is_ok();
    // Share the budget between the long fields, keeping headroom for the other fields.
    let others = size.saturating_sub(fields.iter().map(|(_, l)| l).sum::<usize>());
    let budget = max.saturating_sub(others + 512) / fields.len();
    for (k, len) in &fields {
        if let Some(s) = k.get_mut(result) {
            let keep = floor_char_boundary(s, budget.min(*len));
            let dropped = s.len() - keep;
            s.truncate(keep);
            s.push_str(&format!(
                "\n…[truncated {dropped} bytes; the full output is in full_output_path]"
            ));
        }
    }
    result.output.insert("truncated", true);
    if saved {
        result
            .output
            .insert("full_output_path", path.display().to_string());
    } else {
        tracing::warn!(path = %path.display(), "could not save the full output");
    }
    size
}

/// Writes a spill file readable by the daemon's user only (outputs may hold secrets).
fn write_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    // create_new: never follows or overwrites whatever already sits at the path.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(bytes)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn sanitize_file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolOutput;
    use serde_json::json;

    /// An output of `fields` as a tool gives them.
    fn output(fields: Value) -> ToolOutput {
        let Value::Object(mut fields) = fields else {
            panic!("not an object")
        };
        let mut out = ToolOutput::default();
        out.control.split_from(&mut fields);
        out.fields = fields;
        out
    }

    #[test]
    fn control_fields_are_split_out() {
        let ok = output(json!({"text": "hi", "_multimodal": true}));
        let (r, c, _) = normalise(Ok(ok), 1 << 20, Path::new("/nonexistent"), "c1");
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"ok": true, "text": "hi"})
        );
        assert_eq!(
            c.map(|c| serde_json::to_value(c).unwrap()),
            Some(json!({"_multimodal": true}))
        );
    }

    #[test]
    fn big_output_is_truncated_and_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let ok = output(json!({"output": "x".repeat(10_000)}));
        let (r, _, _) = normalise(Ok(ok), 2_000, dir.path(), "c/2");
        let r = serde_json::to_value(&r).unwrap();
        assert_eq!(r["truncated"], json!(true));
        assert!(serde_json::to_string(&r).unwrap().len() <= 2_000);
        let path = r["full_output_path"].as_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(path).unwrap().trim_end().len(),
            10_000
        );
    }

    #[test]
    fn call_ids_that_sanitise_alike_spill_to_different_files() {
        let dir = tempfile::tempdir().unwrap();
        let spill = |id: &str, text: &str| {
            let ok = output(json!({"output": text.repeat(5_000)}));
            let (r, _, _) = normalise(Ok(ok), 2_000, dir.path(), id);
            r.output.fields["full_output_path"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (a, b) = (spill("job.1", "a"), spill("job/1", "b"));
        assert_ne!(a, b);
        assert!(std::fs::read_to_string(&a).unwrap().starts_with("aaaa"));
        assert!(std::fs::read_to_string(&b).unwrap().starts_with("bbbb"));
    }
}
