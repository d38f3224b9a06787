//! Session lifecycle events (the seed's `onSession`): tools with `session_events: true`
//! are run with `TOOLHOST_EVENT=session` and `{"event", "session_id"}` on stdin when a
//! session starts, resumes or is deleted, and when the daemon shuts down.
//!
//! A workspace tool's runs (only once it is approved, see [`super::trust`]) are confined
//! like a call under the config's default sandbox; the user's own tools run as they always
//! did.
//!
//! Tool modules with an `onSession` hear the same events through the module host
//! ([`crate::custom::modules::Modules::session_event`]).
//!
//! These runs never sit on the session call's path: they are spawned after it answered,
//! bounded by [`EVENT_TIMEOUT`], and a failure is logged and kept for `host.health`.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{CustomTool, CustomTools};
use crate::config::SandboxConfig;
use crate::process::runner::{self, End};
use crate::process::Processes;
use crate::sandbox::{CallSandbox, Plan};

/// The longest a session-event run may take (or the tool's `timeout_ms`, when smaller);
/// then its group is killed.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A session lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    Start,
    Resume,
    Delete,
    Shutdown,
}

impl SessionEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEvent::Start => "start",
            SessionEvent::Resume => "resume",
            SessionEvent::Delete => "delete",
            SessionEvent::Shutdown => "shutdown",
        }
    }
}

impl CustomTools {
    /// Runs every listening tool for `event` in the background (on `tracker`, so shutdown
    /// waits for them) and returns at once.
    pub fn session_event(
        &self,
        tracker: &tokio_util::task::TaskTracker,
        event: SessionEvent,
        session_id: Option<&str>,
        workspace: &Path,
    ) {
        self.modules()
            .session_event(event.as_str(), session_id, workspace);
        for tool in self.event_listeners() {
            let me = self.clone();
            let id = session_id.map(str::to_owned);
            let ws = workspace.to_path_buf();
            tracker.spawn(async move {
                let sandbox = me.0.sandbox.load_full();
                let run = run_event(&me.0.processes, &sandbox, &tool, event, id.as_deref(), &ws);
                if let Err(e) = run.await {
                    me.record_event_failure(format!(
                        "{} ({} event{}): {e}",
                        tool.manifest.name,
                        event.as_str(),
                        id.map(|i| format!(" of session {i}")).unwrap_or_default()
                    ));
                }
            });
        }
    }

    /// Runs the `shutdown` event of every listening tool and waits for them (each bounded).
    pub async fn shutdown_event(&self, workspace: &Path) {
        let runs = self.event_listeners().into_iter().map(|tool| {
            let me = self.clone();
            async move {
                let sandbox = me.0.sandbox.load_full();
                let run = run_event(
                    &me.0.processes,
                    &sandbox,
                    &tool,
                    SessionEvent::Shutdown,
                    None,
                    workspace,
                );
                if let Err(e) = run.await {
                    me.record_event_failure(format!(
                        "{} (shutdown event): {e}",
                        tool.manifest.name
                    ));
                }
            }
        });
        let modules = self.modules().shutdown_event(workspace);
        futures::future::join(futures::future::join_all(runs), modules).await;
    }
}

async fn run_event(
    processes: &Processes,
    sandbox: &SandboxConfig,
    tool: &Arc<CustomTool>,
    event: SessionEvent,
    session_id: Option<&str>,
    workspace: &Path,
) -> Result<(), String> {
    let mut stdin = json!({"event": event.as_str(), "session_id": session_id})
        .to_string()
        .into_bytes();
    stdin.push(b'\n');
    let env: Vec<(OsString, OsString)> = vec![
        ("TOOLHOST_EVENT".into(), "session".into()),
        (
            "TOOLHOST_SESSION_ID".into(),
            session_id.unwrap_or_default().into(),
        ),
        ("TOOLHOST_WORKSPACE".into(), workspace.into()),
    ];
    let mut spec = tool.process_spec(env, stdin);
    if workspace.is_dir() {
        spec.cwd = workspace.to_path_buf();
    }
    let limit = tool.manifest.timeout_ms.map_or(EVENT_TIMEOUT, |ms| {
        EVENT_TIMEOUT.min(Duration::from_millis(ms))
    });
    spec.timeout = Some(limit);
    if tool.workspace_digest().is_some() {
        let call = CallSandbox::resolve(sandbox, None, None);
        let plan = crate::sandbox::plan(&call, workspace, &tool.sandbox_extras(sandbox))
            .map_err(|r| r.message)?;
        if let Plan::Confined(c) = plan {
            spec.confine = Some(c);
        }
    }
    // Kept for the run (a workspace tool's approved copy, when it runs unconfined).
    let _copy = tool
        .pin_to_approved(&mut spec)
        .await
        .map_err(|e| e.message)?;
    let outcome = runner::run(
        processes,
        spec,
        &CancellationToken::new(),
        &mut runner::Discard,
    )
    .await
    .map_err(|e| format!("could not start the program: {e}"))?;
    let tail = outcome.stderr.tail_lines(5);
    let with_tail = |m: String| {
        if tail.is_empty() {
            m
        } else {
            format!("{m}: {tail}")
        }
    };
    match outcome.end {
        End::Exited(s) | End::ExitedPipesHeld(s) if s.success() => Ok(()),
        End::Exited(s) | End::ExitedPipesHeld(s) => Err(with_tail(format!("exited with {s}"))),
        End::TimedOut => Err(with_tail(format!(
            "did not finish within {} ms and was killed",
            limit.as_millis()
        ))),
        End::Cancelled => Err("cancelled".into()),
        // `Discard` never answers; an event has no answer to wait for.
        End::Answered => Ok(()),
    }
}
