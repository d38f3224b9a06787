//! `/ui`: the operator's page on the daemon's own listeners. Its files are open to anyone
//! who reaches the listener (they hold no data); its data and actions need a page token
//! (`crate::ui`) and a request from no browser page or one on this machine:
//!
//! - `POST /ui/login`: a page token, for nothing on the Unix socket, on TCP for the
//!   listener's bearer token (`Authorization`) or a login code (`X-Toolhost-Login`);
//! - `POST /ui/rpc`: JSON-RPC as on `POST /`, the page token in `X-Toolhost-Page`;
//! - `GET /ui/events`: the page's server-sent events, the page token likewise.
//!
//! A process the host started gets none of it (as with `/mcp`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tokio::sync::{broadcast, mpsc};

use super::http::{plain, post, Bearer, BoxError};
use super::Shared;
use crate::audit::Caller;
use crate::host::Host;
use crate::protocol::{
    method, ui_event, ApprovalEvent, McpInstanceStatus, McpServerStatus, McpStatusResult, UiCalls,
    UiMetrics,
};
use crate::ui::sse::Batch;

/// The header that carries the page token.
const PAGE_HEADER: &str = "x-toolhost-page";
/// The frontend the page's actions are recorded under (checkpoint entries, audit lines),
/// in place of the browser's `User-Agent`.
const PAGE_FRONTEND: &str = "operator page";
/// The header that carries a login code from `toolhost ui`.
const LOGIN_HEADER: &str = "x-toolhost-login";

/// How long the event stream gathers events after a change before one write. The timer
/// exists only after a change: an idle host's open page wakes for its metrics alone.
const BATCH: Duration = Duration::from_millis(100);
/// How often the stream carries the metrics for the charts. Each metrics write is also
/// the stream's keep-alive (a write to a reader that went away fails, and ends the
/// stream), and compares the servers, whose state changes ring no notice of their own
/// unless their tools change.
const METRICS_EVERY: Duration = Duration::from_secs(1);
/// Batches a reader may leave unread; one more and the stream ends (a slow page is
/// dropped and reconnects, rather than the daemon buffering for it without end).
const MAX_UNREAD: usize = 16;

/// Answers a request for a `/ui` path. `bearer` is the TCP listener's token check.
pub(super) fn serve(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    bearer: Option<&Bearer>,
    caller: Option<Arc<Caller>>,
) -> BoxFuture<'static, Result<HttpResponse, BoxError>> {
    let answer = |r| futures::future::ready(Ok(r)).boxed();
    if super::peer::limits(&shared.host, caller.as_deref()).is_some() {
        return answer(plain(
            403,
            "the operator's page is not open to processes the host started\n",
        ));
    }
    let path = req.uri().path();
    if req.method() == hyper::Method::GET {
        if let Some(asset) = crate::ui::asset(path) {
            return answer(with_page_headers(
                HttpResponse::new(HttpBody::from(asset.body)),
                asset.content_type,
            ));
        }
    }
    let origin = req
        .headers()
        .get(hyper::header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("?"));
    if !crate::ui::origin_allowed(origin) {
        return answer(plain(403, "the operator's page refuses other origins\n"));
    }
    let route = (req.method().clone(), path);
    if route == (hyper::Method::POST, "/ui/login") {
        return answer(login(&req, &shared, bearer));
    }
    let known = matches!(
        (&route.0, route.1),
        (&hyper::Method::POST, "/ui/rpc") | (&hyper::Method::GET, "/ui/events")
    );
    if !known {
        return answer(plain(404, "no such page\n"));
    }
    let Some(login) = header(&req, PAGE_HEADER).and_then(|token| shared.ui.page(token)) else {
        return answer(plain(401, "missing or stale page token: log in again\n"));
    };
    if let Some(bearer) = bearer {
        bearer.let_in();
    }
    if route.0 == hyper::Method::GET {
        return answer(events(shared.host.clone()));
    }
    // What the page does (a restore, an approval) is the page's, whichever browser shows
    // it, done as the holder of the token it logged in with (a fleet user and its roles).
    let caller = Caller::of_page(caller.as_deref(), login, PAGE_FRONTEND);
    post(req, shared, caller).map(Ok).boxed()
}

/// `POST /ui/login`: a fresh page token for whoever may have one.
fn login(req: &HttpRequest<Incoming>, shared: &Shared, bearer: Option<&Bearer>) -> HttpResponse {
    let mut presented = None;
    if let Some(bearer) = bearer {
        let code = header(req, LOGIN_HEADER).is_some_and(|c| shared.ui.redeem(c));
        // A login code comes from the operator (`toolhost ui`); a token names its holder.
        let token = bearer.token_of(req);
        if !code && token.is_none() {
            return plain(
                401,
                "give the TCP token or a login code from `toolhost ui`\n",
            );
        }
        bearer.let_in();
        presented = token.filter(|_| !code);
    }
    let body = serde_json::json!({ "page_token": shared.ui.new_page(presented) }).to_string();
    let mut r = HttpResponse::new(HttpBody::from(body));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    no_store(r)
}

fn header<'a>(req: &'a HttpRequest<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A page file's headers: its type, no caching (a new binary serves a new page), no
/// framing by other pages, scripts and styles only from itself, no referrer.
fn with_page_headers(mut r: HttpResponse, content_type: &'static str) -> HttpResponse {
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    h.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert(
        hyper::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    h.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        hyper::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    no_store(r)
}

fn no_store(mut r: HttpResponse) -> HttpResponse {
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    r
}

/// `GET /ui/events`: the stream's response; its producer runs until the reader goes away,
/// falls behind, or the daemon shuts down.
fn events(host: Host) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Bytes>(MAX_UNREAD);
    tokio::spawn(produce(host, tx));
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        let bytes = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Frame::data(bytes)), rx))
    });
    let mut r = HttpResponse::new(HttpBody::new(http_body_util::StreamBody::new(frames)));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    no_store(r)
}

/// What the stream last told its reader, to send only what changed.
struct Told {
    /// The config's revision and last error.
    config: (u64, Option<String>),
    calls: u64,
    servers: Vec<McpServerStatus>,
}

/// Writes the host's changes to the page, waiting on them rather than looking: tools
/// changed and the approval queue's events as they come, the calls in flight, the
/// servers and the config's status when a change notice (`crate::notice`) or a tools
/// change says they may have changed, all gathered for [`BATCH`] after the first change
/// into one write; the metrics (and a look at the servers) every second.
async fn produce(host: Host, tx: mpsc::Sender<Bytes>) {
    let mut tools = host.registry().subscribe();
    let mut notices = crate::notice::subscribe();
    // The first tick is now: the first write tells the calls and metrics at once.
    let mut metrics = tokio::time::interval(METRICS_EVERY);
    metrics.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let flush = tokio::time::sleep(BATCH);
    tokio::pin!(flush);
    let mut armed = false;
    let state = host.config_state();
    let mut told = Told {
        config: (state.revision, state.last_error),
        calls: u64::MAX,
        servers: Vec::new(),
    };
    let (waiting, mut approvals) = host.approvals().subscribe();
    let mut batch = Batch::default();
    // The first batch tells the servers even when there are none, so the page knows, and
    // each call waiting for approval now (as `subscribe_approvals` does).
    batch.push(
        ui_event::SERVERS,
        &McpStatusResult {
            servers: Vec::new(),
        },
    );
    for entry in waiting {
        batch.push(
            method::APPROVAL_EVENT,
            &ApprovalEvent::ApprovalPending(entry),
        );
    }
    loop {
        let with_metrics = tokio::select! {
            _ = host.shutdown_token().cancelled() => return,
            _ = tx.closed() => return,
            change = tools.recv() => {
                match change {
                    Ok(change) => batch.push(method::TOOLS_CHANGED, &change),
                    Err(broadcast::error::RecvError::Lagged(_)) => batch.push(ui_event::RESYNC, &serde_json::json!({})),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                arm(&mut flush, &mut armed);
                continue;
            },
            event = approvals.recv() => {
                match event {
                    Ok(event) => batch.push(method::APPROVAL_EVENT, &event),
                    Err(broadcast::error::RecvError::Lagged(_)) => batch.push(ui_event::RESYNC, &serde_json::json!({})),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                arm(&mut flush, &mut armed);
                continue;
            },
            // While the timer runs the gather to come sees every change anyway.
            noticed = notices.changed(), if !armed => {
                if noticed.is_err() {
                    return;
                }
                arm(&mut flush, &mut armed);
                continue;
            },
            _ = &mut flush, if armed => false,
            _ = metrics.tick() => true,
        };
        armed = false;
        notices.mark_unchanged();
        gather(&host, &mut told, &mut batch);
        if with_metrics {
            batch.push(
                ui_event::METRICS,
                &UiMetrics {
                    exposition: super::ops::metrics_peek(&host),
                },
            );
        }
        if batch.is_empty() {
            continue;
        }
        if tx.try_send(Bytes::from(batch.take())).is_err() {
            tracing::debug!("an operator page fell behind its event stream; ending the stream");
            return;
        }
    }
}

/// Starts the batch timer unless it runs already.
fn arm(flush: &mut std::pin::Pin<&mut tokio::time::Sleep>, armed: &mut bool) {
    if !*armed {
        flush.as_mut().reset(tokio::time::Instant::now() + BATCH);
        *armed = true;
    }
}

/// Adds to `batch` what changed since `told`.
fn gather(host: &Host, told: &mut Told, batch: &mut Batch) {
    let state = host.config_state();
    let config = (state.revision, state.last_error);
    if config != told.config {
        told.config = config;
        batch.push(ui_event::CONFIG, &crate::reload::status(host));
    }
    let calls = host.calls().changes();
    if calls != told.calls {
        told.calls = calls;
        batch.push(
            ui_event::CALLS,
            &UiCalls {
                calls: host.calls().list(),
            },
        );
    }
    let servers = host.mcp().status(None);
    // Calls running and queued and the last use change with every call (the calls event
    // tells of them), and memory all the time (the page reads it with the status).
    let steady = |s: &[McpServerStatus]| -> Vec<McpServerStatus> {
        s.iter()
            .map(|s| McpServerStatus {
                in_flight: 0,
                queued: 0,
                rss_kib: None,
                last_used: None,
                instances: s
                    .instances
                    .iter()
                    .map(|i| McpInstanceStatus {
                        in_flight: 0,
                        rss_bytes: None,
                        last_used: None,
                        ..i.clone()
                    })
                    .collect(),
                ..s.clone()
            })
            .collect()
    };
    if steady(&servers) != steady(&told.servers) {
        told.servers = servers.clone();
        batch.push(ui_event::SERVERS, &McpStatusResult { servers });
    }
}
