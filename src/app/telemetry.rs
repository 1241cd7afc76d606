//! Start-up of the telemetry: the export the `OTEL_*` variables asked for (read by `serve`)
//! with the policy's `[telemetry]` choices, over an HTTP client of the project's own.

use super::{GatewayOptions, StartError, config};
use crate::config::PartnerContextPolicy;
use crate::telemetry::{PartnerContext, Telemetry, TelemetrySettings};

/// The telemetry `options` ask for; nothing exported without an endpoint.
pub(super) fn start(options: &GatewayOptions) -> Result<Telemetry, StartError> {
    let policy = &options.policy.telemetry;
    let settings = TelemetrySettings {
        export: options.telemetry.clone(),
        partner_context: match policy.partner_context {
            PartnerContextPolicy::Link => PartnerContext::Link,
            PartnerContextPolicy::Drop => PartnerContext::Drop,
        },
        content_bytes: policy.content.then_some(policy.content_max_bytes),
        client_address: policy.client_address,
        queue: policy.queue,
    };
    if settings.export.is_none() {
        return Ok(Telemetry::off());
    }
    let tls = crate::net::tls::default_client_config().map_err(|e| config(&e))?;
    let client = crate::net::tls::client_builder(&tls)
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|e| config(&e))?;
    let telemetry = Telemetry::start(&settings, client, &options.policy.card.name)
        .map_err(|e| StartError::Config(format!("the OTLP exporter: {e}")))?;
    if let Some(export) = &settings.export {
        tracing::info!(endpoint = %export.traces_url, "traces are exported over OTLP/HTTP");
    }
    Ok(telemetry)
}
