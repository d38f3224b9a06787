//! `toolhost mcp`: the facade over stdio, for MCP clients that start their servers as
//! child processes. It is a client of the running daemon like any other frontend.

use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt;

use super::{Facade, Link};
use crate::client::{Client, ClientError};

/// Serves MCP on stdin/stdout until the client closes stdin or the daemon goes away.
/// `Err` only when no daemon answers at first (the CLI exits 3).
pub async fn run_stdio(socket: &Path, session: Option<String>) -> Result<(), ClientError> {
    let client = Arc::new(Client::connect(socket).await?);
    // Fail now, not at the client's first request, when the socket is not a live daemon.
    client.health().await?;
    let facade = Facade::with_link(Link::Client(client.clone()), session);
    let state = facade.state.clone();
    let running = match facade.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%e, "the MCP client did not complete the handshake");
            return Ok(());
        }
    };
    let ct = running.cancellation_token();
    // Stop when the daemon goes away: nothing could be served any more.
    let watch = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            if client.health().await.is_err() {
                tracing::warn!("the toolhost daemon went away; ending the MCP session");
                ct.cancel();
                return;
            }
        }
    });
    let _ = running.waiting().await;
    watch.abort();
    // The client closed stdin: its own host session goes with it (bounded: the daemon may
    // be gone).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), state.end()).await;
    Ok(())
}
