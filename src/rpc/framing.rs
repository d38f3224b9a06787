//! The framing of a Unix-socket connection, read from its first byte (peeked, not
//! consumed): `{`, `[` or whitespace start newline-delimited JSON, anything else HTTP (which
//! may upgrade to a WebSocket, see `websocket`).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::net::UnixStream;

use super::admission::Ticket;
use super::connection::{run_messages, Source, Wire, READ_BUFFER};
use super::http::serve_http;
use super::Shared;
use crate::audit::Caller;
use crate::metrics::Framing;

/// Serves a Unix-socket connection in whichever framing its first byte announces. An
/// accepted connection holds its `ticket` while open and must send its first byte within
/// the ticket's handshake time; the daemon's own in-process connection has no ticket.
pub(super) async fn serve_unix(stream: UnixStream, shared: Arc<Shared>, ticket: Option<Ticket>) {
    let first = match &ticket {
        Some(t) => tokio::time::timeout(t.handshake(), first_byte(&stream))
            .await
            .unwrap_or_else(|_| {
                tracing::debug!("a unix client sent nothing in time; closing");
                None
            }),
        None => first_byte(&stream).await,
    };
    let Some(first) = first else {
        return;
    };
    let caller = Caller::of_unix(&stream);
    if let Some(t) = &ticket {
        if !t.admit_peer(&shared.host, caller.as_deref()) {
            return;
        }
    }
    match first {
        b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n' => {
            serve_newline(stream, shared, ticket, caller).await
        }
        _ => serve_http(stream, shared, ticket, None, caller).await,
    }
}

/// Peeks (without consuming) the first byte the client sends; `None` on EOF or error.
async fn first_byte(stream: &UnixStream) -> Option<u8> {
    let mut buf = [0u8; 1];
    loop {
        stream.readable().await.ok()?;
        let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
            nix::sys::socket::recv(
                stream.as_raw_fd(),
                &mut buf,
                nix::sys::socket::MsgFlags::MSG_PEEK,
            )
            .map_err(std::io::Error::from)
        });
        match peeked {
            Ok(0) => return None,
            Ok(_) => return Some(buf[0]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

/// Newline-delimited JSON-RPC. The `ticket` (the slot) is held until the connection ends.
async fn serve_newline(
    stream: UnixStream,
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    caller: Option<Arc<Caller>>,
) {
    let _open = shared.host.metrics().connection(Framing::newline);
    let (rd, wr) = stream.into_split();
    let source = Source::Lines {
        rd: BufReader::with_capacity(READ_BUFFER, rd),
        line: Vec::new(),
        max: shared.max_request_bytes,
        frame_timeout: shared.frame_timeout,
        share: shared.frame_budget.share(),
        refused: None,
        quiet_until: Some(tokio::time::Instant::now() + shared.frame_timeout),
        ticket,
    };
    run_messages(shared, source, Wire::Lines(wr), caller).await;
}
