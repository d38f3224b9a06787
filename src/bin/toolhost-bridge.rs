//! `toolhost-bridge`: the stdio MCP bridge (`toolhost mcp`) as a small binary of its own.
//!
//! `toolhost mcp` resolves the daemon's sockets and then `exec`s this binary from its own
//! directory (same pid, same stdio: the frontend sees no difference); without it (a lone
//! copied `toolhost`) it bridges in its own process with the same code
//! (`cli/mcp.rs::Bridge`). One bridge runs per frontend, so its private memory is paid once
//! per frontend, and most of that was not the bridge's work but the size of the program it
//! runs: a position-independent executable's relocated read-only data (`.data.rel.ro`:
//! vtables, string tables, tracing's callsites) is written by the loader at start, so every
//! process holds a private copy of all of it — 0.9 MiB for the whole `toolhost`, 0.37 MiB
//! for a binary that links only the relay (client, facade, rmcp's server side).
//!
//! Measured (`benches/sharing.rs`, release without LTO, 10 frontends calling 4 servers):
//! 1.5 MiB private per bridge (2.1 MiB in-process), PSS 2.2 MiB; an idle bridge 0.9 MiB
//! against 1.5 MiB. Weighed and refused: a non-PIE build (keeps the data shared but gives up
//! address randomisation of the one process that reads what the frontend sends), and
//! trimming the in-process path (it cannot touch the relocated data). The bridge runs on a
//! current-thread runtime: it relays one connection each way, and every thread would cost
//! each bridge a stack and a malloc arena.

fn main() -> std::process::ExitCode {
    toolhost::daemon::prepare_process();
    toolhost::cli::bridge_main()
}
