//! The model behind the door, asked once per message.
//!
//! A [`Backend`] gets a [`Prompt`] (the operator's instructions, a preface naming the peer, the
//! context's recent history and the new text) and returns a [`Completion`] or a
//! [`BackendError`]. Nothing a backend returns on failure reaches the peer: the agent turns every
//! error into a short `TASK_STATE_FAILED` message.

use crate::config::{BackendKind, ModelPolicy};
use crate::store::{ConversationMessage, ConversationRole};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// Largest response body read from a model server; anything longer fails the task.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// What the model is asked.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// The operator's base instructions.
    pub instructions: String,
    /// A short preface naming the peer.
    pub preface: String,
    /// Earlier messages of the same context, oldest first.
    pub history: Vec<ConversationMessage>,
    /// The peer's new text.
    pub text: String,
}

/// Token counts as reported by the backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens read.
    pub prompt_tokens: u64,
    /// Tokens written.
    pub completion_tokens: u64,
}

/// The model's answer.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The answer text.
    pub text: String,
    /// What it cost.
    pub usage: Usage,
}

/// Why the backend gave no answer. Carries no upstream text, so nothing from an upstream body
/// can leak into a task or a log line by accident.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// No answer within the configured timeout.
    #[error("the model did not answer in time")]
    Timeout,
    /// The connection failed or broke.
    #[error("the model server could not be reached")]
    Unreachable,
    /// The server answered with a non-success HTTP status.
    #[error("the model server answered with HTTP status {0}")]
    Status(u16),
    /// The body was not the expected JSON, or held no answer.
    #[error("the model server's answer was not usable: {0}")]
    InvalidResponse(&'static str),
    /// The body exceeded [`MAX_RESPONSE_BYTES`].
    #[error("the model server's answer was too large")]
    TooLarge,
}

/// The configured backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Backend {
    /// Deterministic demonstration backend.
    Echo,
    /// An OpenAI-compatible chat-completions server.
    OpenAi(OpenAiBackend),
}

/// Why the backend could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendSetupError {
    /// The policy names an API-key variable that is not set.
    #[error(
        "the environment variable {0} named by model.openai.api_key_env is not set or not valid UTF-8"
    )]
    MissingApiKey(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for the model: {0}")]
    Client(String),
}

impl Backend {
    /// Builds the backend the policy names.
    pub fn from_policy(model: &ModelPolicy) -> Result<Self, BackendSetupError> {
        match (model.backend, &model.openai) {
            (BackendKind::Openai, Some(openai)) => {
                let api_key = match &openai.api_key_env {
                    Some(var) => Some(
                        std::env::var(var)
                            .ok()
                            .filter(|v| !v.is_empty())
                            .ok_or_else(|| BackendSetupError::MissingApiKey(var.clone()))?,
                    ),
                    None => None,
                };
                crate::http::tls::ensure_provider();
                let client = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(Duration::from_secs(model.timeout_seconds))
                    .build()
                    .map_err(|e| BackendSetupError::Client(e.to_string()))?;
                Ok(Self::OpenAi(OpenAiBackend {
                    client,
                    url: format!("{}/chat/completions", openai.base_url),
                    model: openai.model.clone(),
                    api_key,
                    max_tokens: openai.max_tokens,
                }))
            }
            _ => Ok(Self::Echo),
        }
    }

    /// A one-line description for the start-up log. Never includes the API key.
    pub fn describe(&self) -> String {
        match self {
            Self::Echo => {
                "echo — a DEMONSTRATION backend: it repeats the prompt and asks no model".to_owned()
            }
            Self::OpenAi(b) => format!(
                "openai-compatible chat completions at {} (model {}{})",
                b.url,
                b.model,
                if b.api_key.is_some() {
                    ", with an API key"
                } else {
                    ""
                }
            ),
        }
    }

    /// Asks the model once.
    pub async fn complete(&self, prompt: &Prompt) -> Result<Completion, BackendError> {
        match self {
            Self::Echo => Ok(echo(prompt)),
            Self::OpenAi(backend) => backend.complete(prompt).await,
        }
    }
}

/// The echo backend's deterministic answer: the new text, then what the prompt carried, so a
/// reader (or a test) can see the preface and the history arrive.
fn echo(prompt: &Prompt) -> Completion {
    let mut text = format!("echo: {}\n---\n", prompt.text);
    text.push_str("[peergate echo backend: a demonstration, no model was asked]\n");
    text.push_str(&format!("preface: {}\n", prompt.preface));
    text.push_str(&format!(
        "history: {} earlier messages\n",
        prompt.history.len()
    ));
    for message in &prompt.history {
        let who = match message.role {
            ConversationRole::Peer => "peer",
            ConversationRole::Agent => "agent",
        };
        // Only a bounded excerpt: echoing whole answers would grow every turn.
        let first_line = message.text.lines().next().unwrap_or("");
        let excerpt: String = first_line.chars().take(60).collect();
        text.push_str(&format!("  {who}: {excerpt}\n"));
    }
    let prompt_bytes = prompt.instructions.len()
        + prompt.preface.len()
        + prompt.text.len()
        + prompt.history.iter().map(|m| m.text.len()).sum::<usize>();
    // About four bytes per token, the usual rule of thumb for English text.
    let usage = Usage {
        prompt_tokens: (prompt_bytes as u64).div_ceil(4),
        completion_tokens: (text.len() as u64).div_ceil(4),
    };
    Completion { text, usage }
}

/// An OpenAI-compatible `/chat/completions` client.
#[derive(Clone)]
pub struct OpenAiBackend {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for OpenAiBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiBackend")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<ChatChoice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
struct ChatChoice {
    message: ChatMessage,
}

#[derive(Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl OpenAiBackend {
    async fn complete(&self, prompt: &Prompt) -> Result<Completion, BackendError> {
        let mut messages = vec![json!({
            "role": "system",
            "content": format!("{}\n\n{}", prompt.instructions, prompt.preface),
        })];
        for message in &prompt.history {
            let role = match message.role {
                ConversationRole::Peer => "user",
                ConversationRole::Agent => "assistant",
            };
            messages.push(json!({"role": role, "content": message.text}));
        }
        messages.push(json!({"role": "user", "content": prompt.text}));
        let mut body = json!({"model": self.model, "messages": messages, "stream": false});
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = request.send().await.map_err(classify)?;
        let status = response.status();
        if !status.is_success() {
            return Err(BackendError::Status(status.as_u16()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(BackendError::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        let parsed: ChatResponse = serde_json::from_slice(&bytes)
            .map_err(|_| BackendError::InvalidResponse("not a chat-completions JSON object"))?;
        let text = parsed
            .choices
            .into_iter()
            .next()
            .and_then(|choice| choice.message.content)
            .filter(|text| !text.trim().is_empty())
            .ok_or(BackendError::InvalidResponse(
                "no answer text in choices[0]",
            ))?;
        let usage = parsed.usage.map_or_else(Usage::default, |u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        });
        Ok(Completion { text, usage })
    }
}

fn classify(e: reqwest::Error) -> BackendError {
    if e.is_timeout() {
        BackendError::Timeout
    } else {
        BackendError::Unreachable
    }
}
