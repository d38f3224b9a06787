//! The WebSocket handshake (an HTTP upgrade); the messages then run as on any message
//! connection (`connection`).

use std::sync::Arc;

use futures::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use super::connection::{run_messages, Source, Wire, READ_BUFFER};
use super::http::plain;
use super::Shared;
use crate::audit::Caller;
use crate::metrics::Framing;

/// A server-side WebSocket over an upgraded HTTP connection.
pub(super) type WsServer = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Accepts a WebSocket upgrade and serves JSON-RPC messages on it.
pub(super) fn upgrade(
    req: HttpRequest<Incoming>,
    shared: Arc<Shared>,
    caller: Option<Arc<Caller>>,
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
        // unmasked ones and closes); one message is at most one request's worth.
        let cfg = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
            .accept_unmasked_frames(false);
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(cfg)).await;
        let _open = shared.host.metrics().connection(Framing::websocket);
        let (tx, rx) = ws.split();
        run_messages(shared, Source::Ws(rx), Wire::Ws(tx), caller).await;
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
