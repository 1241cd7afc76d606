//! `[model]`: the backend that answers.

use super::units::Seconds;
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
    pub timeout_seconds: Seconds<1, 600>,
    /// `[model.openai]`, required when `backend = "openai"`.
    #[serde(default)]
    pub openai: Option<OpenAiPolicy>,
    /// `[model.a2a]`, required when `backend = "a2a"`.
    #[serde(default)]
    pub a2a: Option<A2aPolicy>,
}

fn default_timeout_seconds() -> Seconds<1, 600> {
    const { Seconds::of(60) }
}

/// The backends peergate can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The deterministic demonstration backend.
    Echo,
    /// An OpenAI-compatible chat-completions server.
    Openai,
    /// An existing A2A agent on the private side.
    A2a,
}

impl BackendKind {
    /// The name the policy gives it (`model.backend`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Echo => "echo",
            Self::Openai => "openai",
            Self::A2a => "a2a",
        }
    }
}

/// `[model.a2a]`: an A2A agent peergate stands in front of.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aPolicy {
    /// The agent's base URL; its card is read from `<url>/.well-known/agent-card.json`.
    pub url: String,
    /// The JSON-RPC endpoint to use instead of the one the card names (needed when the card
    /// names an address on another origin, such as the agent's public one).
    #[serde(default)]
    pub rpc_url: Option<String>,
    /// A JWKS file whose keys verify the agent's card.
    #[serde(default)]
    pub card_jwks_file: Option<String>,
    /// The environment variable holding an HS256 key that verifies the card, as KID=BASE64URL.
    #[serde(default)]
    pub card_secret_env: Option<String>,
    /// DANGEROUS: use the agent's card without a verified signature. Anyone who can change
    /// what that URL serves then decides where peergate sends the peers' messages.
    #[serde(default)]
    pub dangerous_accept_unsigned_card: bool,
    /// The environment variable holding the credential peergate presents to the agent.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Send the credential in this header instead of `Authorization: Bearer`.
    #[serde(default)]
    pub api_key_header: Option<String>,
    /// A PEM file of CA certificates trusted for the agent besides the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// How long start-up waits for an agent that is not up yet (its card unreachable, or
    /// answered with a 5xx status), retrying with backoff; 0 does not wait. A card that
    /// answers but does not verify stops start-up at once.
    #[serde(default = "default_startup_wait_seconds")]
    pub startup_wait_seconds: Seconds<0, 3600>,
    /// Send the call's `traceparent` to the agent when traces are exported, so its spans join
    /// the call's trace.
    #[serde(default = "yes")]
    pub trace_context: bool,
    /// Send the agent, with every request, an assertion peergate signs of who is calling (the
    /// peer, how it signed in, its scopes), verifiable offline against peergate's JWKS.
    #[serde(default = "yes")]
    pub caller_assertion: bool,
    /// The header the assertion travels in (never `Authorization`, which keeps the credential
    /// the agent requires).
    #[serde(default = "default_caller_header")]
    pub caller_header: String,
}

fn default_caller_header() -> String {
    "X-Peergate-Caller".to_owned()
}

fn yes() -> bool {
    true
}

/// An agent started beside peergate (the same unit, the same compose file) is given a minute.
fn default_startup_wait_seconds() -> Seconds<0, 3600> {
    const { Seconds::of(60) }
}

impl A2aPolicy {
    fn validate(&self) -> Result<(), Invalid> {
        check_upstream_url("model.a2a.url", &self.url)?;
        let header = self.caller_header.to_ascii_lowercase();
        let credential = self.api_key_header.as_deref().map(str::to_ascii_lowercase);
        if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err()
            || header == "authorization"
            || credential.as_deref() == Some(header.as_str())
        {
            return Err(invalid(
                "model.a2a.caller_header",
                "must be a header name other than Authorization and the agent's own credential header",
            ));
        }
        if let Some(rpc_url) = &self.rpc_url {
            check_upstream_url("model.a2a.rpc_url", rpc_url)?;
            // One client serves both: its checks follow url's scheme.
            let scheme = |url: &str| url.split_once("://").map(|(scheme, _)| scheme.to_owned());
            if scheme(rpc_url) != scheme(&self.url) {
                return Err(invalid(
                    "model.a2a.rpc_url",
                    "must use the same scheme as model.a2a.url",
                ));
            }
        }
        if self.card_jwks_file.is_none()
            && self.card_secret_env.is_none()
            && !self.dangerous_accept_unsigned_card
        {
            return Err(invalid(
                "model.a2a.card_jwks_file",
                "name the keys that verify the agent's card (card_jwks_file or card_secret_env); an unverified card would let whoever serves it redirect every message",
            ));
        }
        if let Some(header) = &self.api_key_header {
            if self.token_env.is_none() {
                return Err(invalid(
                    "model.a2a.api_key_header",
                    "needs token_env, the environment variable holding the key",
                ));
            }
            if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(invalid(
                    "model.a2a.api_key_header",
                    "is not an HTTP header name",
                ));
            }
        }
        Ok(())
    }
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
    /// Send the call's `traceparent` with each request when traces are exported (off: a
    /// hosted model's API is a third party).
    #[serde(default)]
    pub trace_context: bool,
    /// Name the peer in each request's `user` field by a pseudonym (a digest of its id, stable,
    /// never its name), so the model's operator can tell partners apart for abuse monitoring.
    #[serde(default = "yes")]
    pub user: bool,
}

impl ModelPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        match self.backend {
            BackendKind::Openai => match &self.openai {
                None => Err(invalid(
                    "model.openai",
                    "backend = \"openai\" needs a [model.openai] table with base_url and model",
                )),
                Some(openai) => openai.validate(),
            },
            BackendKind::A2a => match &self.a2a {
                None => Err(invalid(
                    "model.a2a",
                    "backend = \"a2a\" needs a [model.a2a] table with the agent's url and the keys that verify its card",
                )),
                Some(a2a) => a2a.validate(),
            },
            BackendKind::Echo => Ok(()),
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
