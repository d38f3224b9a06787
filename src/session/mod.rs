//! Sessions persisted across daemon restarts (proto-docs/sessions.md).
//!
//! `store` keeps records durably; `views` holds the protocol semantics that tie a session
//! to the registry (the stable tool view, resume, refresh).

mod backend;
mod history;
mod recover;
mod sled_store;
mod store;
mod views;
mod workspaces;

pub use backend::{Counter, CounterWrite, Page, Record, RecordKind, RecordWrite, SessionStore};
pub use history::{CallRecord, History};
pub use recover::cli as recover_cli;
pub use recover::resolve_data_dir;
pub use store::Sessions;
pub use views::{
    create, lists, refresh_tools, remember_loaded, resume, serves, tools, update, workspace_of,
    workspaces, Scope,
};
pub use workspaces::{Holder, SessionWorkspaces};
