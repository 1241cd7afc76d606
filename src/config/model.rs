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
    /// Base URL ending before `/chat/completions`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// Name of the environment variable holding the API key, if the server needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upper bound on the answer's tokens, if set.
    #[serde(default)]
    pub max_tokens: Option<u32>,
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
        if self.base_url.starts_with("https://") {
            return Err(invalid(
                "model.openai.base_url",
                "https to the model is not supported yet; reach the model over http on a private network or loopback",
            ));
        }
        // Credentials belong in api_key_env, never in a URL that gets logged.
        let authority = self.base_url.trim_start_matches("http://");
        let authority = authority.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err(invalid(
                "model.openai.base_url",
                "must not carry credentials; name an environment variable in api_key_env",
            ));
        }
        if !self.base_url.starts_with("http://") || self.base_url.ends_with('/') {
            return Err(invalid(
                "model.openai.base_url",
                "must be an http URL without a trailing `/`, e.g. http://127.0.0.1:8000/v1",
            ));
        }
        if self.model.trim().is_empty() {
            return Err(invalid("model.openai.model", "must not be empty"));
        }
        Ok(())
    }
}
