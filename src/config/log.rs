//! `[log]`: how the gateway logs.

use serde::Deserialize;

/// `[log]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogPolicy {
    /// `text` (one human-readable line per event) or `json` (one JSON object per line, for a
    /// log shipper). `--log-format` overrides it.
    #[serde(default)]
    pub format: LogFormat,
    /// One line per request on the door's listener (target `peergate::access`): time, request
    /// id, client address, peer id and name or none, method, route, binding and A2A method,
    /// status, the JSON-RPC error code of an error answered 200, refusal reason, latency.
    /// Never a credential, a body, a prompt or a query string.
    #[serde(default)]
    pub access: bool,
    /// Which lines are written, as `RUST_LOG` directives (`info`, `warn`,
    /// `info,peergate=debug`); `RUST_LOG`, when set, decides instead. A reload applies a new
    /// value at once.
    #[serde(default = "default_level")]
    pub level: String,
}

fn default_level() -> String {
    "info".to_owned()
}

impl LogPolicy {
    pub(super) fn validate(&self) -> Result<(), super::Invalid> {
        tracing_subscriber::EnvFilter::builder()
            .parse(&self.level)
            .map(drop)
            .map_err(|e| {
                super::invalid("log.level", format!("not a RUST_LOG directive list ({e})"))
            })
    }
}

impl Default for LogPolicy {
    fn default() -> Self {
        Self {
            format: LogFormat::default(),
            access: false,
            level: default_level(),
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}
