//! `toolhost mcp`: the facade over stdio, for MCP clients that start their servers as
//! child processes. It is a client of the running daemon like any other frontend.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};

use super::manifest::Declaring;
use super::upstream::Upstream;
use super::{Changes, Facade, Link, Workspace};
use crate::client::ClientError;

/// Serves MCP on stdin/stdout until the client closes stdin or stops us with SIGTERM,
/// SIGINT or SIGHUP; the host session this connection made goes with it. The daemon may
/// be away at first or go away later: the bridge keeps answering and reconnects
/// (`upstream.rs`).
/// `profile` names the config profile to serve; an unknown one fails here, at start.
/// `workspace` is the session's until the client's roots (if any) replace it.
/// `reconnect_wait`: how long a request waits for a daemon that went away (`None`: the
/// default, [`Upstream::open`]).
pub async fn run_stdio(
    sockets: &[PathBuf],
    session: Option<String>,
    profile: Option<String>,
    workspace: Workspace,
    reconnect_wait: Option<std::time::Duration>,
) -> Result<(), ClientError> {
    // First: a signal that comes once the client may have talked to us must be ours.
    let mut stop = StopSignals::install()
        .map_err(|e| ClientError::Io(format!("cannot handle stop signals: {e}")))?;
    let changes = Arc::new(Changes::new());
    let upstream = Upstream::open(sockets.to_vec(), changes.clone(), reconnect_wait).await;
    // Fail now, not at the client's first request, when the profile is not in the
    // daemon's config (a daemon not there yet is waited for instead).
    if let (Some(client), Some(_)) = (upstream.current(), &profile) {
        let params = crate::protocol::ListToolsParams {
            profile: profile.clone(),
            ..Default::default()
        };
        client.list_tools(&params).await?;
    }
    let facade = Facade::with_link(
        Link::Bridge(upstream.clone(), changes),
        session,
        profile,
        workspace,
    );
    let state = facade.state.clone();
    // Before `server/discover` can come, which declares them: as the daemon said at the
    // connect above (no round trip of its own).
    state.manifest_offered.store(
        upstream.tool_manifest(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let (reader, writer) = streams();
    let transport = Declaring {
        inner: rmcp::transport::async_rw::AsyncRwTransport::new_server(reader, writer),
        offered: state.manifest_offered.clone(),
    };
    // Through every restart of the daemon, for as long as the client is there.
    let kept = tokio::spawn(upstream.keep(state.clone()));
    let served = tokio::select! {
        served = facade.serve(transport) => Some(served),
        () = stop.first() => None,
    };
    match served {
        Some(Ok(running)) => {
            let ct = running.cancellation_token();
            let stopped = tokio::spawn(async move {
                stop.first().await;
                ct.cancel();
            });
            let _ = running.waiting().await;
            stopped.abort();
        }
        Some(Err(e)) => tracing::warn!(%e, "the MCP client did not complete the handshake"),
        None => tracing::debug!("stopped by a signal during the handshake"),
    }
    kept.abort();
    // Bounded: the daemon may be gone.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), state.end()).await;
    Ok(())
}

/// SIGTERM, SIGINT and SIGHUP, handled from [`StopSignals::install`] on.
struct StopSignals([tokio::signal::unix::Signal; 3]);

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals([
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
        ]))
    }

    /// Resolves on the first of them.
    async fn first(&mut self) {
        let [term, int, hup] = &mut self.0;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        tracing::debug!("stopped by a signal: ending the MCP session");
    }
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout as the event loop's own non-blocking streams when they are pipes or
/// sockets (as MCP clients start their servers), else tokio's stdio.
///
/// Why: tokio's stdin/stdout run every read and write on a blocking-pool thread, so each
/// message crossed two threads more each way; that was most of this process's CPU per call.
fn streams() -> (Reader, Writer) {
    let reader = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| {
            if is_socket(&fd) {
                socket(fd).map(|s| Box::new(s) as Reader)
            } else {
                // Only a pipe or FIFO is taken; anything else (a terminal, a file) is refused.
                tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map(|r| Box::new(r) as Reader)
            }
        });
    let writer = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| {
            if is_socket(&fd) {
                socket(fd).map(|s| Box::new(s) as Writer)
            } else {
                tokio::net::unix::pipe::Sender::from_owned_fd(fd).map(|w| Box::new(w) as Writer)
            }
        });
    (
        reader.unwrap_or_else(|_| Box::new(tokio::io::stdin())),
        writer.unwrap_or_else(|_| Box::new(tokio::io::stdout())),
    )
}

fn is_socket(fd: &OwnedFd) -> bool {
    use nix::sys::stat::{fstat, SFlag};
    fstat(fd).is_ok_and(|st| {
        SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFSOCK
    })
}

/// A connected stream socket (libuv, so Node, gives its children socketpairs for stdio).
fn socket(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(s)
}
