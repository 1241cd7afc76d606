//! `[log]`: how the gateway logs.

use serde::Deserialize;

/// `[log]`
#[derive(Debug, Clone, Default, Deserialize)]
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
