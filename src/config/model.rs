//! `[model]`: the backend that answers.

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[model]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPolicy {
    /// Which backend answers.
    pub backend: BackendKind,
    /// The operator's base instructions, sent first on every call.
    pub instructions: String,
    /// How long one backend call may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
    /// `[model.openai]`, required when `backend = "openai"`.
    #[serde(default)]
    pub openai: Option<OpenAiPolicy>,
}

fn default_timeout_seconds() -> u64 {
    60
}

/// The backends peergate can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The deterministic demonstration backend.
    Echo,
    /// An OpenAI-compatible chat-completions server.
    Openai,
}

/// `[model.openai]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiPolicy {
    /// Base URL ending before `/chat/completions`: `https://api.example.com/v1`, or
    /// `http://127.0.0.1:8000/v1` on the private side.
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// Name of the environment variable holding the API key, if the server needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upper bound on the answer's tokens, if set.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A PEM file of CA certificates trusted for this server besides the system's roots
    /// (relative to the working directory).
    #[serde(default)]
    pub ca_file: Option<String>,
}

impl ModelPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !(1..=600).contains(&self.timeout_seconds) {
            return Err(invalid(
                "model.timeout_seconds",
                "must be between 1 and 600",
            ));
        }
        match (self.backend, &self.openai) {
            (BackendKind::Openai, None) => Err(invalid(
                "model.openai",
                "backend = \"openai\" needs a [model.openai] table with base_url and model",
            )),
            (BackendKind::Openai, Some(openai)) => openai.validate(),
            (BackendKind::Echo, _) => Ok(()),
        }
    }
}

impl OpenAiPolicy {
    fn validate(&self) -> Result<(), Invalid> {
        check_upstream_url("model.openai.base_url", &self.base_url)?;
        if self.base_url.ends_with('/') {
            return Err(invalid(
                "model.openai.base_url",
                "must not end with `/`, e.g. https://api.example.com/v1",
            ));
        }
        if self.model.trim().is_empty() {
            return Err(invalid("model.openai.model", "must not be empty"));
        }
        Ok(())
    }
}

/// Checks the URL of something peergate calls on the operator's behalf (a model, an upstream
/// agent): `https`, or plain `http` to the private side only, and no credentials in it.
///
/// A plain-http address written as an IP must be loopback or private here; a plain-http name
/// is checked when it is resolved, by the only resolver that client uses.
pub(crate) fn check_upstream_url(setting: &'static str, url: &str) -> Result<(), Invalid> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Err(invalid(setting, "is not a URL"));
    };
    // Credentials belong in an environment variable, never in a URL that gets logged.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            setting,
            "must not carry credentials; name an environment variable for the key instead",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(setting, "must not carry a query or a fragment"));
    }
    let Some(host) = parsed.host_str() else {
        return Err(invalid(setting, "has no host"));
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let literal: Option<std::net::IpAddr> = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .ok();
            if literal.is_some_and(|ip| !crate::jose::fetch::is_private_side(ip)) {
                return Err(invalid(
                    setting,
                    "plain http is allowed only to loopback and private addresses; use https for anything else",
                ));
            }
            Ok(())
        }
        _ => Err(invalid(
            setting,
            "must be an https URL (or http on the private side), e.g. https://api.example.com/v1",
        )),
    }
}
