//! `[telemetry]`: what the traces may carry and how they treat a partner's trace context. Where
//! spans go is the standard `OTEL_*` variables' (`OTEL_EXPORTER_OTLP_ENDPOINT` and the rest):
//! without an endpoint nothing is traced, whatever this section says.

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[telemetry]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryPolicy {
    /// What a partner's `traceparent` becomes: `"link"` (a trace of peergate's own, linked to
    /// the partner's; a peer marked as trusted continues its trace) or `"drop"` (ignored, for
    /// every peer).
    #[serde(default)]
    pub partner_context: PartnerContextPolicy,
    /// Put the prompt's and the answer's text on the model call's span (off: they can hold
    /// anything a partner or a model wrote).
    #[serde(default)]
    pub content: bool,
    /// The most of each text `content` puts on a span, in bytes.
    #[serde(default = "default_content_max_bytes")]
    pub content_max_bytes: usize,
    /// Put the client's address on spans (off: it is personal data).
    #[serde(default)]
    pub client_address: bool,
    /// Spans waiting for export, at most; past it a span is dropped and counted.
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// Label the calls' duration by peer (`peergate_peer_call_duration_seconds`), the first
    /// this many peers each with series of their own and the rest as `other`; 0 (the default):
    /// no series by peer, whatever is exported.
    #[serde(default)]
    pub peer_series: usize,
}

impl Default for TelemetryPolicy {
    fn default() -> Self {
        Self {
            partner_context: PartnerContextPolicy::default(),
            content: false,
            content_max_bytes: default_content_max_bytes(),
            client_address: false,
            queue: default_queue(),
            peer_series: 0,
        }
    }
}

/// `telemetry.partner_context`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartnerContextPolicy {
    /// A trace of peergate's own, linked to the partner's.
    #[default]
    Link,
    /// Ignored.
    Drop,
}

fn default_content_max_bytes() -> usize {
    4096
}

fn default_queue() -> usize {
    2048
}

impl TelemetryPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !(1..=65_536).contains(&self.content_max_bytes) {
            return Err(invalid(
                "telemetry.content_max_bytes",
                "must be between 1 and 65536",
            ));
        }
        if !(64..=1_000_000).contains(&self.queue) {
            return Err(invalid(
                "telemetry.queue",
                "must be between 64 and 1000000 spans",
            ));
        }
        if self.peer_series > 1_000 {
            return Err(invalid(
                "telemetry.peer_series",
                "must be at most 1000 peers: every peer multiplies the series /metrics writes",
            ));
        }
        Ok(())
    }
}
