//! toolhost: one shared tool host for AI coding agents.
//!
//! The parts, each with one home (ARCHITECTURE.md is the map):
//! - [`daemon`]: `toolhost serve` — bind, serve, shut down in order; `run` is injectable;
//! - `host`: the shared state handle; `reload`: the one config reload path;
//!   `calls`: the calls in flight;
//! - `rpc`: the JSON-RPC server (listeners, framing, methods, OpenRPC), the only module
//!   that knows jsonrpsee;
//! - [`protocol`]: the wire types, both directions; [`client`]: the one Rust client;
//! - `registry`: the `Tool` trait and the live registry (revision, etag, atomic swap);
//! - `invoke`: the call pipeline (validation, approval, timeout, cancel, output cap);
//! - `tools`: built-in tools; `custom`: custom tool programs and (`custom::modules`) JS/TS
//!   tool modules run by Node module hosts; `process`: process groups and their kill guard;
//! - `mcp`: MCP servers (the rmcp client side); `facade`: toolhost as an MCP server
//!   (the rmcp server side);
//! - `metrics`, `audit`: what the host is doing (`/metrics`, the call audit log);
//! - `session`: persisted sessions; `config`: config.json; `approval`: the policy;
//! - `ui`: the operator's page (`GET /ui`): its files, page tokens, the event framing;
//! - [`cli`]: the command line.
//!
//! Only the client side (protocol, client, CLI) and the daemon's entry points are public:
//! nothing outside this crate links the daemon's internals.

mod approval;
mod approvals;
mod atomic_file;
mod audit;
mod bounded_lines;
mod calls;
mod catalog;
mod checkpoint;
pub mod cli;
pub mod client;
mod code;
mod commands;
mod config;
mod custom;
pub mod daemon;
mod error;
mod facade;
mod fds;
mod fleet;
mod front_matter;
mod frontends;
mod guards;
mod host;
mod import;
mod inputs;
mod invoke;
mod logging;
mod mcp;
mod metrics;
mod notice;
mod outputs;
mod process;
mod procfs;
pub mod protocol;
mod registry;
mod reload;
mod rpc;
mod safe_read;
mod sandbox;
mod secrets;
mod session;
mod skills;
mod source;
mod text_diff;
mod tools;
mod trim;
mod trust;
mod ui;

#[doc(hidden)]
pub use guards::bench_check as guards_bench_check;
#[doc(hidden)]
pub use sandbox::bench_setup as sandbox_bench_setup;

/// Locks a std mutex, ignoring poisoning: a panic in one task must not wedge every later
/// caller of the daemon. (No std lock in this crate is held across an `.await`.)
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
