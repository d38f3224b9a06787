//! The daemon's and the CLI's log: plain text or JSON lines on stderr.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for journald/Docker log pipelines.
    Json,
}

/// Installs the global subscriber. `RUST_LOG` overrides the default level; sled's debug
/// chatter stays out unless `RUST_LOG` names sled itself.
pub fn init(daemon: bool, format: LogFormat) {
    let default = if daemon {
        "info,rmcp=warn"
    } else {
        "warn,rmcp=warn"
    };
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let mut filter = from_env
        .as_deref()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    if !from_env.as_deref().is_some_and(|v| v.contains("sled")) {
        if let Ok(d) = "sled=info".parse() {
            filter = filter.add_directive(d);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A broken stderr (its reader gone) must not turn every log line into a panic:
        // tracing's fallback report is an eprintln!, which panics on EPIPE.
        .log_internal_errors(false);
    let _ = match format {
        // Colours only on a terminal: journald, Docker and log files get plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
