//! `toolhost-bridge`: the stdio MCP bridge (`toolhost mcp`) as a small binary of its own.
//! `toolhost mcp` runs it when it is installed beside `toolhost`; one runs per frontend, so
//! its private memory counts once per frontend (see ARCHITECTURE.md, the stdio bridge).

fn main() -> std::process::ExitCode {
    toolhost::daemon::prepare_process();
    toolhost::cli::bridge_main()
}
