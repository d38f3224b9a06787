//! The WebSocket handshake (an HTTP upgrade); the messages then run as on any message
//! connection (`connection`).

use std::sync::Arc;

use futures::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use super::admission::Ticket;
use super::connection::{run_messages, Source, Wire, READ_BUFFER};
use super::http::plain;
use super::ws_limit::{FrameLimit, Oversized};
use super::Shared;
use crate::audit::Caller;
use crate::metrics::Framing;

/// A server-side WebSocket over an upgraded HTTP connection, its messages size-checked
/// by `FrameLimit`.
pub(super) type WsServer = WebSocketStream<FrameLimit<TokioIo<hyper::upgrade::Upgraded>>>;

/// Accepts a WebSocket upgrade and serves JSON-RPC messages on it, holding the
/// connection's `ticket` (its slot) until the WebSocket closes.
pub(super) fn upgrade(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    caller: Option<Arc<Caller>>,
    ticket: Option<Ticket>,
) -> HttpResponse {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    let headers = req.headers();
    let version_ok = headers
        .get(hyper::header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v == "13");
    let Some(key) = headers.get(hyper::header::SEC_WEBSOCKET_KEY) else {
        return plain(400, "a WebSocket upgrade needs Sec-WebSocket-Key\n");
    };
    if req.method() != hyper::Method::GET || !version_ok {
        return plain(
            400,
            "a WebSocket upgrade is a GET with Sec-WebSocket-Version: 13\n",
        );
    }
    let accept = derive_accept_key(key.as_bytes());
    let max = shared.max_request_bytes;
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(%e, "websocket upgrade failed");
                return;
            }
        };
        // Client frames must be masked (RFC 6455 §5.1; tungstenite's default refuses
        // unmasked ones and closes). `FrameLimit` cuts messages over the limit before
        // tungstenite sees them, so tungstenite's own limit (the same) is never reached.
        let cfg = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
            .accept_unmasked_frames(false);
        let oversized = Arc::new(Oversized::default());
        let share = shared.frame_budget.share();
        let io = FrameLimit::new(
            TokioIo::new(upgraded),
            max,
            oversized.clone(),
            share,
            shared.frame_timeout,
        );
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(cfg)).await;
        let _open = shared.host.metrics().connection(Framing::websocket);
        let (tx, rx) = ws.split();
        let source = Source::Ws {
            rx,
            oversized,
            messages: 0,
            max,
        };
        run_messages(shared, source, Wire::Ws(tx), caller).await;
        drop(ticket);
    });
    let mut r = HttpResponse::new(HttpBody::default());
    *r.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&accept) {
        h.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}
