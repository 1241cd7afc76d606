#![forbid(unsafe_code)]
//! The `peergate` command.

use clap::Parser;
use peergate::cli::{Cli, run};
use std::process::ExitCode;

/// glibc's allocator spent a fifth of a SendMessage's CPU time in its own locks and
/// bookkeeping when every request allocates on one worker thread and frees on another
/// (BENCHMARKS.md). jemalloc's per-thread caches free across threads without a shared lock,
/// as mimalloc's heaps did, and its background threads (built in as the default) give freed
/// pages back to the system once idle: after ten thousand streams close, the memory they held
/// is returned instead of kept (decision 0009).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                eprintln!("peergate: a subcommand is missing; run `peergate --help`");
                return ExitCode::from(2);
            }
            // One line: what clap says is wrong, with the lines that complete it (the missing
            // arguments, the values allowed, a tip), but without the usage and help pointers.
            let rendered = e.render().to_string();
            let said: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty() && !line.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            let said = said.join(" ");
            let said = said.trim_start_matches("error: ");
            eprintln!(
                "peergate: {}",
                if said.is_empty() {
                    "invalid command line"
                } else {
                    said
                }
            );
            return ExitCode::from(2);
        }
    };
    install_logger(cli.log_format());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("peergate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peergate: {}", bounded(&e.message));
            ExitCode::from(e.exit_code)
        }
    }
}

/// The process's logger: stderr lines in `format`, each naming the request it was written
/// for, at the level `RUST_LOG` sets when it is set, else `info` until the policy's
/// `log.level` is applied (at start-up, and by every reload).
fn install_logger(format_of_lines: peergate::config::LogFormat) {
    // An empty RUST_LOG is no RUST_LOG.
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|directives| !directives.trim().is_empty())
        .and_then(
            |directives| match tracing_subscriber::EnvFilter::try_new(directives) {
                Ok(filter) => Some(filter),
                Err(e) => {
                    eprintln!("peergate: RUST_LOG is not a directive list ({e}): it is not used");
                    None
                }
            },
        );
    let set_by_env = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let (filter, level) = tracing_subscriber::reload::Layer::new(filter);
    // Every line written while a request is served names it (and its trace).
    use peergate::telemetry::logs::WithRequest;
    use tracing_subscriber::fmt::format;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let logs = tracing_subscriber::registry().with(filter);
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format_of_lines {
        peergate::config::LogFormat::Json => logs
            .with(
                lines
                    .json()
                    .event_format(WithRequest::new(format().json().flatten_event(true), true)),
            )
            .init(),
        peergate::config::LogFormat::Text => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            logs.with(
                lines
                    .with_ansi(ansi)
                    .event_format(WithRequest::new(format().with_ansi(ansi), false)),
            )
            .init()
        }
    }
    peergate::telemetry::level::install(level, set_by_env);
}

/// The longest failure line printed: a message that quotes what it was given (a card, a key
/// set, an answer) stays readable, and a hostile document cannot fill a terminal or a log.
const MAX_ERROR_CHARS: usize = 2000;

/// `message` cut to [`MAX_ERROR_CHARS`] characters, marked when cut.
fn bounded(message: &str) -> std::borrow::Cow<'_, str> {
    match message.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}… (cut)", &message[..cut]).into(),
        None => message.into(),
    }
}
