//! Our rmcp client handler: routes progress to the waiting call, reports
//! `tools/list_changed`, `prompts/list_changed`, `resources/list_changed` and
//! `resources/updated` to the server's supervisor, and hands the server's own requests
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) and log messages to the
//! frontend of the call that caused them (`origin.rs` says which). `roots/list` outside any
//! call, or from a call whose frontend does not answer it, gets the server's own roots
//! ([`roots_of`]).
// Roots, sampling and logging are deprecated by SEP-2577, but servers still use them.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
    Implementation, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProtocolVersion, ResourceUpdatedNotificationParam, Root, SamplingCapability,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::origin::{Origins, Owner};
use crate::protocol::{codes, InputKind};

/// A notification of the server that belongs to one call in flight.
pub enum Note {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// What a connection tells its supervisor.
#[derive(Debug)]
pub enum Notice {
    ToolListChanged,
    /// `prompts/list_changed` or `resources/list_changed`.
    ListChanged(super::surface::Kind),
    /// `resources/updated` for this URI.
    ResourceUpdated(String),
}

#[derive(Clone)]
pub struct Client {
    pub progress: ProgressDispatcher,
    notices: mpsc::UnboundedSender<Notice>,
    /// The roots offered (`file://` URIs, [`roots_of`]).
    roots: Vec<String>,
    /// The calls in flight to this server, whose frontends its requests go to.
    origins: Arc<Origins>,
}

impl Client {
    pub fn new(
        progress: ProgressDispatcher,
        notices: mpsc::UnboundedSender<Notice>,
        roots: Vec<String>,
        origins: Arc<Origins>,
    ) -> Self {
        Client {
            progress,
            notices,
            roots,
            origins,
        }
    }

    /// Where notices for the supervisor go (also those of a `subscriptions/listen`).
    pub fn notices(&self) -> mpsc::UnboundedSender<Notice> {
        self.notices.clone()
    }

    /// Puts the server's request to the frontend of the call it belongs to. `None`: it
    /// belongs to no call whose frontend answers `kind` (the caller decides what then).
    async fn ask<T: DeserializeOwned>(
        &self,
        kind: InputKind,
        params: serde_json::Value,
        ctx: &RequestContext<RoleClient>,
    ) -> Option<Result<T, ErrorData>> {
        let inputs = match self
            .origins
            .owner(ctx.extensions.get::<InboundStreamOrigin>())
        {
            Owner::Call(inputs) if inputs.accepts(kind) => inputs,
            Owner::Call(_) | Owner::Nobody => return None,
            Owner::Ambiguous(n) => {
                tracing::debug!(
                    method = kind.method(),
                    calls = n,
                    "an MCP server's request could belong to any of its calls in flight"
                );
                return None;
            }
        };
        Some(match inputs.ask(kind, params).await {
            Ok(answer) => serde_json::from_value(answer).map_err(|e| {
                ErrorData::internal_error(format!("the frontend's answer: {e}"), None)
            }),
            Err(e) => Err(ErrorData::new(
                rmcp::model::ErrorCode(i32::try_from(e.code).unwrap_or(codes::INTERNAL_ERROR)),
                e.message,
                e.data,
            )),
        })
    }
}

/// Passes a server's log message on to the frontend of the call it belongs to.
pub(super) fn log_to(inputs: &crate::inputs::CallInputs, m: LoggingMessageNotificationParam) {
    let level = serde_json::to_value(m.level)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "info".to_owned());
    inputs.log(&level, m.logger, m.data);
}

/// The answer to an `elicitation/create` or `sampling/createMessage` no frontend can take.
fn no_frontend(kind: InputKind) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(codes::METHOD_NOT_FOUND),
        format!(
            "{}: no frontend of a call in flight to this server answers it",
            kind.method()
        ),
        None,
    )
}

/// `path` as a `file://` URI (RFC 8089), any bytes a URI cannot hold percent-encoded, so
/// a path that is not UTF-8 is named exactly too. A relative path is taken from the
/// daemon's working directory.
pub fn file_uri(path: &std::path::Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    url::Url::from_file_path(abs).map_or_else(|()| "file:///".to_owned(), String::from)
}

/// The roots a server is answered with, as `file://` URIs: its config's `roots`, else the
/// directories its `args` name (absolute ones that exist, canonical), else the directory it
/// runs in (`cwd`, else `home`). A server given directories on its command line (such as
/// server-filesystem, which replaces them with the roots it is told) must not be told
/// another directory, or it refuses the very ones it was started for. `cfg` is the config
/// the server was launched with (a scoped instance's, `${WORKSPACE}` expanded).
pub fn roots_of(cfg: &crate::config::McpServer, home: &std::path::Path) -> Vec<String> {
    use std::path::Path;
    if !cfg.roots.is_empty() {
        return cfg.roots.iter().map(|r| file_uri(Path::new(r))).collect();
    }
    let mut named: Vec<String> = Vec::new();
    let dirs = cfg
        .args
        .iter()
        .map(Path::new)
        .filter(|a| a.is_absolute())
        .filter_map(|a| a.canonicalize().ok())
        .filter(|a| a.is_dir());
    for dir in dirs {
        let uri = file_uri(&dir);
        if !named.contains(&uri) {
            named.push(uri);
        }
    }
    if named.is_empty() {
        named.push(file_uri(cfg.cwd.as_deref().unwrap_or(home)));
    }
    named
}

/// The client capabilities we declare where the frontend answers the kinds `answers`
/// says: roots always (without `listChanged`: the root of a connection never changes; a
/// frontend that does not answer gets the server's own roots), form elicitation and
/// sampling when the frontend answers them. The connection declares every kind on behalf
/// of all frontends (`get_info`: a call whose frontend cannot answer gets `-32601` for its
/// request). A tool call to a server of the 2026-07-28 era declares its own frontend's
/// (`tool.rs`), as a relay must: the server then answers `-32021` for a capability the
/// frontend lacks, or asks only what it can answer (SEP-2575, SEP-2322).
pub fn capabilities(answers: impl Fn(InputKind) -> bool) -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    caps.roots = Some(Default::default());
    if answers(InputKind::Elicitation) {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::new());
        caps.elicitation = Some(elicitation);
    }
    if answers(InputKind::Sampling) {
        caps.sampling = Some(SamplingCapability::default());
    }
    caps
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = capabilities(|_| true);
        // The version offered in `initialize`, to a server that refused `server/discover`
        // (`era.rs`): the newest revision that still has the handshake.
        ClientConfig::new(
            caps,
            Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn list_roots(
        &self,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let params = serde_json::Value::Object(Default::default());
        match self.ask(InputKind::Roots, params, &ctx).await {
            Some(answer) => answer,
            None => Ok(ListRootsResult::new(
                self.roots.iter().cloned().map(Root::new).collect(),
            )),
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.ask(InputKind::Elicitation, params, &ctx)
            .await
            .unwrap_or_else(|| Err(no_frontend(InputKind::Elicitation)))
    }

    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let params = serde_json::to_value(request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.ask(InputKind::Sampling, params, &ctx)
            .await
            .unwrap_or_else(|| Err(no_frontend(InputKind::Sampling)))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        ctx: NotificationContext<RoleClient>,
    ) {
        match self
            .origins
            .owner(ctx.extensions.get::<InboundStreamOrigin>())
        {
            Owner::Call(inputs) => log_to(&inputs, params),
            Owner::Nobody | Owner::Ambiguous(_) => {
                tracing::info!(level = ?params.level, logger = ?params.logger, data = %params.data, "MCP server log message");
            }
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::ToolListChanged);
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self
            .notices
            .send(Notice::ListChanged(super::surface::Kind::Prompts));
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self
            .notices
            .send(Notice::ListChanged(super::surface::Kind::Resources));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let _ = self.notices.send(Notice::ResourceUpdated(params.uri));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn roots_are_the_configs_else_the_directories_in_args_else_where_it_runs() {
        use crate::config::McpServer;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(dir.join("f"), "").unwrap();
        let home = std::path::Path::new("/home/h");
        let uri = |p: &std::path::Path| super::file_uri(p);
        let server = |args: Vec<String>| McpServer {
            args,
            ..McpServer::default()
        };
        let s = |p: &std::path::Path| p.display().to_string();
        // Directories named on the command line, canonical, each once; files, relative
        // paths and flags are not directories it was given.
        let cfg = server(vec![
            "-y".into(),
            s(&a),
            s(&dir.join("f")),
            "b".into(),
            s(&dir.join("a/../b")),
            s(&a),
        ]);
        assert_eq!(super::roots_of(&cfg, home), vec![uri(&a), uri(&b)]);
        // None: where it runs.
        let mut cfg = server(vec!["--stdio".into(), s(&dir.join("missing"))]);
        assert_eq!(super::roots_of(&cfg, home), vec![uri(home)]);
        cfg.cwd = Some(b.clone());
        assert_eq!(super::roots_of(&cfg, home), vec![uri(&b)]);
        // The config's own, as given.
        cfg.roots = vec!["/srv/data".into()];
        cfg.args.push(s(&a));
        assert_eq!(super::roots_of(&cfg, home), vec!["file:///srv/data"]);
    }

    #[test]
    fn file_uris_encode_what_a_uri_cannot_hold() {
        assert_eq!(
            super::file_uri(std::path::Path::new("/home/a b/ü-x_1.~")),
            "file:///home/a%20b/%C3%BC-x_1.~"
        );
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = std::ffi::OsStr::from_bytes(b"/tmp/a\xff%b#?");
        assert_eq!(
            super::file_uri(std::path::Path::new(not_utf8)),
            "file:///tmp/a%FF%25b%23%3F"
        );
        let back = url::Url::parse(&super::file_uri(std::path::Path::new(not_utf8)))
            .unwrap()
            .to_file_path()
            .unwrap();
        assert_eq!(back.as_os_str(), not_utf8);
    }
}
