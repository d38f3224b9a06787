//! The only place that knows jsonrpsee: listeners, framing, methods, subscriptions, OpenRPC.
//!
//! Architecture Invariant: handlers convert between `protocol` types and the host; no
//! jsonrpsee type leaks out of this module.

mod connection;
mod listener;
mod methods;
mod openrpc;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
use jsonrpsee::server::{
    stop_channel, BatchRequestConfig, Methods, Server, ServerConfig, ServerHandle, StopHandle,
    TowerServiceBuilder,
};

use crate::host::Host;

pub use listener::Listeners;

type ServiceBuilder =
    TowerServiceBuilder<tower::layer::util::Identity, tower::layer::util::Identity>;
/// The same service for plain HTTP POST, where subscriptions get a clear refusal.
type PostServiceBuilder = TowerServiceBuilder<
    tower::layer::util::Stack<connection::CallsOnlyLayer, tower::layer::util::Identity>,
    tower::layer::util::Identity,
>;

/// What every connection needs, shared.
pub(crate) struct Shared {
    host: Host,
    methods: Methods,
    service: ServiceBuilder,
    post_service: PostServiceBuilder,
    stop: StopHandle,
    max_request_bytes: usize,
}

/// A running server: stop accepting, then wait for connections to drain.
pub struct RunningServer {
    handle: ServerHandle,
    accept: tokio_util::sync::CancellationToken,
    socket_to_remove: Option<PathBuf>,
}

impl RunningServer {
    /// Stops accepting connections and removes the socket file we created.
    pub fn stop_accepting(&self) {
        self.accept.cancel();
        if let Some(p) = &self.socket_to_remove {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Tells open connections to close and waits for them at most `grace`.
    pub async fn stopped(self, grace: Duration) {
        let _ = self.handle.stop();
        if tokio::time::timeout(grace, self.handle.stopped())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the shutdown grace; closing anyway");
        }
    }
}

/// Starts serving on `listeners`; returns at once.
pub fn start(host: Host, listeners: Listeners) -> anyhow::Result<RunningServer> {
    let cfg = host.config();
    let max_request = cfg.limits.max_request_bytes;
    let server_cfg = ServerConfig::builder()
        .max_request_body_size(u32::try_from(max_request).unwrap_or(u32::MAX))
        .max_response_body_size(u32::MAX)
        .max_connections(4096)
        .max_subscriptions_per_connection(1024)
        .set_batch_request_config(BatchRequestConfig::Limit(1000))
        .build();
    let service = Server::builder()
        .set_config(server_cfg.clone())
        .to_service_builder();
    let post_service = Server::builder()
        .set_config(server_cfg)
        .set_rpc_middleware(RpcServiceBuilder::new().layer(connection::CallsOnlyLayer))
        .to_service_builder();
    let methods: Methods = methods::module(host.clone())?.into();
    let (stop, handle) = stop_channel();
    let shared = Arc::new(Shared {
        host: host.clone(),
        methods,
        service,
        post_service,
        stop,
        max_request_bytes: max_request,
    });
    let accept = host.shutdown_token().child_token();

    let Listeners {
        unix,
        owned_path,
        tcp,
        ..
    } = listeners;
    {
        let (shared, accept) = (shared.clone(), accept.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = unix.accept() => match r {
                        Ok((s, _)) => s,
                        Err(e) => { tracing::warn!(%e, "accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue }
                    },
                    _ = accept.cancelled() => break,
                };
                tokio::spawn(connection::serve_unix(stream, shared.clone()));
            }
        });
    }
    if let Some((tcp, token)) = tcp {
        let token: Arc<str> = token.into();
        let (shared, accept) = (shared.clone(), accept.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok((s, _)) => s,
                        Err(e) => { tracing::warn!(%e, "tcp accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue }
                    },
                    _ = accept.cancelled() => break,
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection::serve_http(
                    stream,
                    shared.clone(),
                    Some(token.clone()),
                ));
            }
        });
    }
    Ok(RunningServer {
        handle,
        accept,
        socket_to_remove: owned_path,
    })
}
