//! An OpenAI-compatible `/chat/completions` client (vLLM, llama.cpp server, Ollama, …).

use super::{
    BackendError, BackendSetupError, Completion, MAX_RESPONSE_BYTES, ModelBackend, Prompt, Usage,
};
use crate::config::OpenAiPolicy;
use crate::store::ConversationRole;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// An OpenAI-compatible `/chat/completions` client.
#[derive(Clone)]
pub struct OpenAi {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
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

impl OpenAi {
    /// A client for the server `policy` names. The agent's timeout bounds each call; the
    /// client bounds only the connection attempt.
    pub fn new(policy: &OpenAiPolicy) -> Result<Self, BackendSetupError> {
        let api_key = match &policy.api_key_env {
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
            .build()
            .map_err(|e| BackendSetupError::Client(e.to_string()))?;
        Ok(Self {
            client,
            url: format!("{}/chat/completions", policy.base_url),
            model: policy.model.clone(),
            api_key,
            max_tokens: policy.max_tokens,
        })
    }
}

#[async_trait]
impl ModelBackend for OpenAi {
    fn describe(&self) -> String {
        format!(
            "openai-compatible chat completions at {} (model {}{})",
            self.url,
            self.model,
            if self.api_key.is_some() {
                ", with an API key"
            } else {
                ""
            }
        )
    }

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
