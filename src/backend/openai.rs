//! An OpenAI-compatible `/chat/completions` client (vLLM, llama.cpp server, Ollama, …).

use super::{
    BackendError, BackendSetupError, Completion, MAX_RESPONSE_BYTES, ModelBackend, Pieces, Prompt,
    Usage,
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

/// One `chat.completion.chunk` of a streamed answer.
#[derive(Deserialize)]
struct ChatChunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: ChunkDelta,
}

#[derive(Deserialize, Default)]
struct ChunkDelta {
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
        let mut response = self.ask(prompt, false).await?;
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

    /// `stream: true`, asking for the usage in the last chunk: each chunk's text is passed on
    /// as it arrives, and the whole answer and its usage returned at the end.
    async fn complete_streaming(
        &self,
        prompt: &Prompt,
        pieces: &Pieces,
    ) -> Result<Completion, BackendError> {
        let mut response = self.ask(prompt, true).await?;
        let mut events = ServerSentEvents::default();
        let (mut text, mut usage, mut read) = (String::new(), Usage::default(), 0usize);
        'reading: while let Some(chunk) = response.chunk().await.map_err(classify)? {
            read += chunk.len();
            if read > MAX_RESPONSE_BYTES {
                return Err(BackendError::TooLarge);
            }
            for data in events.push(&chunk) {
                if data == "[DONE]" {
                    break 'reading;
                }
                let chunk: ChatChunk = serde_json::from_str(&data).map_err(|_| {
                    BackendError::InvalidResponse("a stream chunk is not chat-completions JSON")
                })?;
                if let Some(reported) = chunk.usage {
                    usage = Usage {
                        prompt_tokens: reported.prompt_tokens,
                        completion_tokens: reported.completion_tokens,
                    };
                }
                let piece = chunk
                    .choices
                    .into_iter()
                    .next()
                    .and_then(|choice| choice.delta.content)
                    .unwrap_or_default();
                if !piece.is_empty() {
                    text.push_str(&piece);
                    let _ = pieces.send(piece);
                }
            }
        }
        if text.trim().is_empty() {
            return Err(BackendError::InvalidResponse(
                "the stream held no answer text",
            ));
        }
        Ok(Completion { text, usage })
    }
}

impl OpenAi {
    /// Sends the chat-completions request for `prompt`; a non-success status is an error (its
    /// body is not read: nothing from it may reach a peer).
    async fn ask(&self, prompt: &Prompt, stream: bool) -> Result<reqwest::Response, BackendError> {
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
        let mut body = json!({"model": self.model, "messages": messages, "stream": stream});
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(classify)?;
        let status = response.status();
        if !status.is_success() {
            return Err(BackendError::Status(status.as_u16()));
        }
        Ok(response)
    }
}

/// Splits a Server-Sent Events byte stream into the `data` of each event, whatever the chunk
/// boundaries.
#[derive(Default)]
struct ServerSentEvents {
    pending: Vec<u8>,
}

impl ServerSentEvents {
    /// Takes `chunk`; returns the data of the events it completed.
    fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(chunk);
        let mut complete = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(data) = line.strip_prefix("data:") {
                complete.push(data.trim_start().to_owned());
            }
        }
        complete
    }
}

fn classify(e: reqwest::Error) -> BackendError {
    if e.is_timeout() {
        BackendError::Timeout
    } else {
        BackendError::Unreachable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_data_is_found_across_chunk_boundaries() {
        let mut events = ServerSentEvents::default();
        assert!(events.push(b"data: {\"a\"").is_empty());
        assert_eq!(
            events.push(b":1}\r\n\n: comment\ndata:[DONE]\n"),
            ["{\"a\":1}", "[DONE]"]
        );
    }
}
