//! The `toolhost` binary: parse the command line and hand over to the library.

fn main() -> std::process::ExitCode {
    toolhost::daemon::prepare_process();
    toolhost::cli::main()
}
