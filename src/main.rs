//! The `toolhost` binary: parse the command line and hand over to the library.

fn main() -> std::process::ExitCode {
    let args = toolhost::cli::parse();
    if args.is_daemon() {
        // First: it may execute the binary again, with the environment as it was given.
        toolhost::daemon::exec_without_thread_cache();
    }
    toolhost::daemon::prepare_process();
    toolhost::cli::main(args)
}
