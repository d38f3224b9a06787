//! The daemon's and the CLI's log: plain text or JSON lines on stderr.

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

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
    // Read before the filter moves into the layer.
    let debug_wanted = filter
        .max_level_hint()
        .is_some_and(|max| max >= LevelFilter::DEBUG);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // A broken stderr (its reader gone) must not turn every log line into a panic:
        // tracing's fallback report is an eprintln!, which panics on EPIPE.
        .log_internal_errors(false);
    let lines = match format {
        // Colours only on a terminal: journald, Docker and log files get plain text.
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => lines.json().with_ansi(false).boxed(),
    };
    let routine = filter_fn(move |meta| debug_wanted || !is_answered_error(meta));
    // The level filter is global, not the layer's own: a span it leaves out (rmcp's
    // info-level `serve_inner`, around every read of a server's answers) is then never
    // made, where a per-layer filter has the registry make it and enter it on every poll.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(lines.with_filter(routine))
        .try_init();
}

/// rmcp's `WARN response error`: a request its handler answered with an error (an unknown
/// tool, a cancelled call). The client has the error; for the facade that is ordinary
/// traffic, so it is shown only when debug logging is on. Told apart by its fields, since
/// rmcp logs it at WARN and a filter cannot lower a level.
fn is_answered_error(meta: &Metadata<'_>) -> bool {
    meta.is_event()
        && *meta.level() == Level::WARN
        && meta.target() == "rmcp::service"
        && meta.fields().field("id").is_some()
        && meta.fields().field("error").is_some()
}
