//! The one Rust client of the daemon (placeholder while the typed client lands).
