//! What the backend is told by the policy's `[model]`: which backend answers, and how to reach
//! it. The policy reads these types as they are (config checks them once they are read); the
//! backend is handed them, never the whole policy.

use crate::units::Seconds;
use serde::Deserialize;

/// `[model]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Which backend answers.
    pub backend: BackendKind,
    /// The operator's base instructions, sent first on every call.
    pub instructions: String,
    /// How long one backend call may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: Seconds<1, 600>,
    /// `[model.openai]`, required when `backend = "openai"`.
    #[serde(default)]
    pub openai: Option<OpenAiSettings>,
    /// `[model.a2a]`, required when `backend = "a2a"`.
    #[serde(default)]
    pub a2a: Option<UpstreamSettings>,
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
pub struct UpstreamSettings {
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

/// `[model.openai]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiSettings {
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
