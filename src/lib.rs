//! toolhost: one shared tool host for AI coding agents.
//!
//! The parts, each with one home (see ARCHITECTURE.md):
//! - [`host`]: the daemon — builds the parts, serves, shuts down in order;
//! - [`rpc`]: the only place that knows jsonrpsee (listeners, framing, methods, OpenRPC);
//! - [`protocol`]: the wire types; [`error`]: protocol-level errors;
//! - [`registry`]: the `Tool` trait and the live registry (revision, etag, atomic swap);
//! - [`invoke`]: the call pipeline (validation, approval, timeout, cancel, output cap);
//! - [`tools`]: built-in tools; [`process`]: process groups and their kill guard;
//! - [`session`]: persisted sessions; [`config`]: config.json;
//! - [`approval`]: approval classes and the policy decision;
//! - [`cli`]: the thin client subcommands.

pub mod approval;
pub mod bounded_lines;
pub mod cli;
pub mod config;
pub mod error;
pub mod host;
pub mod invoke;
pub mod mcp;
pub mod process;
pub mod protocol;
pub mod registry;
pub mod rpc;
pub mod session;
pub mod tools;

pub use host::{serve, Host, ServeOptions};

/// Locks a std mutex, ignoring poisoning: a panic in one task must not wedge every later
/// caller of the daemon. (No std lock in this crate is held across an `.await`.)
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
