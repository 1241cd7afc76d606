//! What the telemetry does, typed: the standard `OTEL_*` variables read strictly (a value
//! peergate would not honour stops start-up naming the variable, where the SDK would fall back
//! quietly), and the policy's `[telemetry]` choices handed in by start-up.

use std::time::Duration;

/// Why the telemetry's settings cannot be used: the variable or setting, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {why}")]
pub struct TelemetrySettingError {
    /// The variable or policy setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub why: String,
}

fn wrong(setting: &'static str, why: impl Into<String>) -> TelemetrySettingError {
    TelemetrySettingError {
        setting,
        why: why.into(),
    }
}

/// What a partner's `traceparent` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartnerContext {
    /// A new trace, with a span link to the partner's context; a peer marked as trusted
    /// continues its own trace instead.
    #[default]
    Link,
    /// Ignored, for every peer.
    Drop,
}

/// Which calls are traced: the `OTEL_TRACES_SAMPLER` values peergate honours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// A share of new traces (0.0 to 1.0), by trace id.
    Ratio(f64),
    /// As the parent decided when there is one (a trusted peer's sampled flag); otherwise the
    /// inner choice.
    ParentBased(ParentlessSampling),
}

/// A parent-based sampler's choice for a trace that starts here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentlessSampling {
    /// Every one.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// A share, by trace id.
    Ratio(f64),
}

/// Where and how spans are exported (OTLP over HTTP, protobuf).
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The traces endpoint (`…/v1/traces`).
    pub traces_url: reqwest::Url,
    /// Headers sent with every export (a collector's key).
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// `service.name`.
    pub service_name: String,
    /// The other resource attributes.
    pub resource: Vec<(String, String)>,
    /// Which calls are traced.
    pub sampling: Sampling,
    /// Where the metrics go too, unless `OTEL_METRICS_EXPORTER` is `none`.
    pub metrics: Option<super::metrics::MetricsExport>,
}

/// The telemetry's settings, from the environment and the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Export, when an endpoint is set and the SDK is not disabled; `None` traces nothing.
    pub export: Option<Export>,
    /// What a partner's trace context becomes.
    pub partner_context: PartnerContext,
    /// The prompt's and answer's text on spans, cut to this many bytes (off when `None`).
    pub content_bytes: Option<usize>,
    /// The client's address on spans.
    pub client_address: bool,
    /// Spans waiting for export, at most; past it a span is dropped and counted.
    pub queue: usize,
}

impl TelemetrySettings {
    /// Nothing traced.
    pub fn off() -> Self {
        Self {
            export: None,
            partner_context: PartnerContext::Link,
            content_bytes: None,
            client_address: false,
            queue: 2048,
        }
    }
}

/// The export the `OTEL_*` variables ask for, read through `var`: `None` when no endpoint is
/// set or `OTEL_SDK_DISABLED` is `true`.
pub fn export_from_env(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Export>, TelemetrySettingError> {
    match var("OTEL_SDK_DISABLED").as_deref().map(str::trim) {
        None | Some("") => {}
        Some(value) if value.eq_ignore_ascii_case("true") => return Ok(None),
        Some(value) if value.eq_ignore_ascii_case("false") => {}
        Some(_) => return Err(wrong("OTEL_SDK_DISABLED", "must be true or false")),
    }
    let Some(traces_url) = endpoint(var, TRACES)? else {
        return Ok(None);
    };
    protocol(var)?;
    let headers = match first(
        var,
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ) {
        Some((setting, list)) => headers(setting, &list)?,
        None => Vec::new(),
    };
    if !headers.is_empty() && traces_url.scheme() == "http" && !is_loopback(&traces_url) {
        return Err(wrong(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "would be sent in clear text to a collector that is not on this host: use an https:// endpoint",
        ));
    }
    let resource = match var("OTEL_RESOURCE_ATTRIBUTES") {
        Some(list) => pairs("OTEL_RESOURCE_ATTRIBUTES", &list)?,
        None => Vec::new(),
    };
    let service_name = var("OTEL_SERVICE_NAME")
        .filter(|name| !name.trim().is_empty())
        .or_else(|| {
            resource
                .iter()
                .find(|(key, _)| key == "service.name")
                .map(|(_, value)| value.clone())
        })
        .unwrap_or_else(|| "peergate".to_owned());
    Ok(Some(Export {
        traces_url,
        headers,
        timeout: timeout(var)?,
        service_name,
        resource: resource
            .into_iter()
            .filter(|(key, _)| key != "service.name")
            .collect(),
        sampling: sampling(var)?,
        metrics: metrics(var)?,
    }))
}

/// The metrics' export: to the metrics endpoint (or the general one's `/v1/metrics`) every
/// `OTEL_METRIC_EXPORT_INTERVAL` milliseconds, unless `OTEL_METRICS_EXPORTER` is `none`.
fn metrics(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<super::metrics::MetricsExport>, TelemetrySettingError> {
    match var("OTEL_METRICS_EXPORTER").as_deref().map(str::trim) {
        None | Some("" | "otlp") => {}
        Some("none") => return Ok(None),
        Some(_) => {
            return Err(wrong(
                "OTEL_METRICS_EXPORTER",
                "must be otlp or none: peergate's other metrics are on /metrics",
            ));
        }
    }
    let Some(url) = endpoint(var, METRICS)? else {
        return Ok(None);
    };
    let interval = match var("OTEL_METRIC_EXPORT_INTERVAL").as_deref().map(str::trim) {
        None | Some("") => Duration::from_secs(60),
        Some(text) => match text.parse::<u64>() {
            Ok(millis @ 100..=3_600_000) => Duration::from_millis(millis),
            _ => {
                return Err(wrong(
                    "OTEL_METRIC_EXPORT_INTERVAL",
                    "must be milliseconds between 100 and 3600000",
                ));
            }
        },
    };
    Ok(Some(super::metrics::MetricsExport { url, interval }))
}

/// A signal's endpoint variables: its own, the general one, and the path the general one gets.
struct Signal {
    specific: &'static str,
    path: &'static str,
}

const TRACES: Signal = Signal {
    specific: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    path: "/v1/traces",
};

const METRICS: Signal = Signal {
    specific: "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    path: "/v1/metrics",
};

/// The first of two variables that is set, by name.
fn first(
    var: &dyn Fn(&str) -> Option<String>,
    specific: &'static str,
    general: &'static str,
) -> Option<(&'static str, String)> {
    let set = |name: &'static str| {
        var(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    };
    set(specific).or_else(|| set(general))
}

/// A signal's endpoint: its own variable as it is, or the general one with the signal's path.
fn endpoint(
    var: &dyn Fn(&str) -> Option<String>,
    signal: Signal,
) -> Result<Option<reqwest::Url>, TelemetrySettingError> {
    let (setting, text) = match first(var, signal.specific, "OTEL_EXPORTER_OTLP_ENDPOINT") {
        Some((setting, text)) if setting == "OTEL_EXPORTER_OTLP_ENDPOINT" => (
            setting,
            format!("{}{}", text.trim().trim_end_matches('/'), signal.path),
        ),
        Some((setting, text)) => (setting, text.trim().to_owned()),
        None => return Ok(None),
    };
    let url = reqwest::Url::parse(&text).map_err(|_| wrong(setting, "is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(wrong(
            setting,
            "must be an http:// or https:// URL with a host",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(wrong(
            setting,
            "must not hold credentials: send them with OTEL_EXPORTER_OTLP_HEADERS",
        ));
    }
    Ok(Some(url))
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn protocol(var: &dyn Fn(&str) -> Option<String>) -> Result<(), TelemetrySettingError> {
    match first(
        var,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        None => Ok(()),
        Some((_, protocol)) if protocol.trim() == "http/protobuf" => Ok(()),
        Some((setting, _)) => Err(wrong(
            setting,
            "must be http/protobuf: peergate exports OTLP over HTTP with protobuf only",
        )),
    }
}

fn timeout(var: &dyn Fn(&str) -> Option<String>) -> Result<Duration, TelemetrySettingError> {
    let Some((setting, text)) = first(
        var,
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) else {
        return Ok(Duration::from_secs(10));
    };
    match text.trim().parse::<u64>() {
        Ok(millis @ 1..=60_000) => Ok(Duration::from_millis(millis)),
        _ => Err(wrong(setting, "must be milliseconds between 1 and 60000")),
    }
}

fn sampling(var: &dyn Fn(&str) -> Option<String>) -> Result<Sampling, TelemetrySettingError> {
    let ratio = || -> Result<f64, TelemetrySettingError> {
        match var("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(text) => match text.trim().parse::<f64>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
                _ => Err(wrong(
                    "OTEL_TRACES_SAMPLER_ARG",
                    "must be a number between 0 and 1",
                )),
            },
        }
    };
    let name = var("OTEL_TRACES_SAMPLER").unwrap_or_default();
    Ok(match name.trim() {
        "always_on" => Sampling::AlwaysOn,
        "always_off" => Sampling::AlwaysOff,
        "traceidratio" => Sampling::Ratio(ratio()?),
        "" | "parentbased_always_on" => Sampling::ParentBased(ParentlessSampling::AlwaysOn),
        "parentbased_always_off" => Sampling::ParentBased(ParentlessSampling::AlwaysOff),
        "parentbased_traceidratio" => Sampling::ParentBased(ParentlessSampling::Ratio(ratio()?)),
        _ => {
            return Err(wrong(
                "OTEL_TRACES_SAMPLER",
                "must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
            ));
        }
    })
}

/// `key=value,…` with percent-encoded values, as the OTLP variables write headers.
fn headers(
    setting: &'static str,
    list: &str,
) -> Result<Vec<(String, String)>, TelemetrySettingError> {
    let pairs = pairs(setting, list)?;
    for (name, value) in &pairs {
        let valid = axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && axum::http::HeaderValue::from_str(value).is_ok();
        if !valid {
            return Err(wrong(
                setting,
                "holds a header that is not a valid HTTP header",
            ));
        }
    }
    Ok(pairs)
}

/// `key=value,…`, values percent-decoded; an entry without `=` or with an empty key is refused
/// (named by its position, never by its text: it may hold a secret).
fn pairs(
    setting: &'static str,
    list: &str,
) -> Result<Vec<(String, String)>, TelemetrySettingError> {
    let mut pairs = Vec::new();
    for (index, entry) in list.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = entry.split_once('=') else {
            return Err(wrong(setting, format!("entry {} has no `=`", index + 1)));
        };
        let key = key.trim();
        let value = percent_decoded(value.trim()).ok_or_else(|| {
            wrong(
                setting,
                format!("entry {} is not percent-encoded UTF-8", index + 1),
            )
        })?;
        if key.is_empty() {
            return Err(wrong(setting, format!("entry {} has no key", index + 1)));
        }
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<Option<Export>, TelemetrySettingError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        export_from_env(&|name| vars.get(name).cloned())
    }

    #[test]
    fn no_endpoint_or_a_disabled_sdk_exports_nothing() {
        assert_eq!(read(&[]), Ok(None));
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(read(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]), Ok(None));
        assert!(
            read(&[endpoint, ("OTEL_SDK_DISABLED", "false")])
                .unwrap()
                .is_some()
        );
        let refused = read(&[endpoint, ("OTEL_SDK_DISABLED", "yes")]).unwrap_err();
        assert_eq!(refused.setting, "OTEL_SDK_DISABLED");
    }

    #[test]
    fn the_endpoints_resource_headers_and_sampler_are_read_as_the_specification_writes_them() {
        let export = read(&[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://collector.example:4318/",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=s%3Dcret,x-team = door",
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=edge,deployment.environment=prod",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            export.traces_url.as_str(),
            "https://collector.example:4318/v1/traces"
        );
        assert_eq!(
            export.headers,
            [
                ("api-key".into(), "s=cret".into()),
                ("x-team".into(), "door".into())
            ]
        );
        assert_eq!(export.service_name, "edge");
        assert_eq!(
            export.resource,
            [("deployment.environment".into(), "prod".into())]
        );
        assert_eq!(
            export.sampling,
            Sampling::ParentBased(ParentlessSampling::Ratio(0.1))
        );
        // The specific endpoint is taken as it is, and wins.
        let export = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/custom",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(export.traces_url.as_str(), "http://127.0.0.1:4318/custom");
        // Metrics go to the general endpoint's path, every minute unless told otherwise.
        let metrics = export.metrics.unwrap();
        assert_eq!(metrics.url.as_str(), "http://127.0.0.1:1/v1/metrics");
        assert_eq!(metrics.interval, Duration::from_secs(60));
        assert_eq!(export.service_name, "peergate");
        assert_eq!(
            export.sampling,
            Sampling::ParentBased(ParentlessSampling::AlwaysOn)
        );
    }

    #[test]
    fn metrics_follow_their_own_variables_and_can_be_turned_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let metrics = |extra: &[(&'static str, &'static str)]| {
            let mut vars = vec![endpoint];
            vars.extend_from_slice(extra);
            read(&vars).map(|export| export.unwrap().metrics)
        };
        let own = metrics(&[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://127.0.0.1:9/m",
            ),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(own.url.as_str(), "http://127.0.0.1:9/m");
        assert_eq!(own.interval, Duration::from_millis(500));
        assert_eq!(metrics(&[("OTEL_METRICS_EXPORTER", "none")]).unwrap(), None);
        for (name, value) in [
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "ftp://x"),
        ] {
            assert_eq!(metrics(&[(name, value)]).unwrap_err().setting, name);
        }
    }

    #[test]
    fn a_value_peergate_would_not_honour_is_refused_by_its_name() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        for (vars, setting) in [
            (
                vec![endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![endpoint, ("OTEL_TRACES_SAMPLER", "xray")],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                vec![
                    endpoint,
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                vec![endpoint, ("OTEL_EXPORTER_OTLP_TIMEOUT", "0")],
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "https://user:pw@collector.example",
                )],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "secret")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                vec![
                    (
                        "OTEL_EXPORTER_OTLP_ENDPOINT",
                        "http://collector.example:4318",
                    ),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=secret"),
                ],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
        ] {
            let refused = read(&vars).unwrap_err();
            assert_eq!(refused.setting, setting, "{vars:?}");
            assert!(!refused.to_string().contains("secret"), "{refused}");
        }
    }
}
