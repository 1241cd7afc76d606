//! An OpenAI-compatible `/chat/completions` client (vLLM, llama.cpp server, Ollama, …).

use super::settings::OpenAiSettings;
use super::{
    BackendError, BackendSetupError, Completion, MAX_RESPONSE_BYTES, ModelBackend, Pieces, Prompt,
    Usage,
};
use crate::net::event_stream::ServerSentEvents;
use crate::store::ConversationRole;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

/// An OpenAI-compatible `/chat/completions` client.
#[derive(Clone)]
pub struct OpenAi {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    max_tokens: Option<u32>,
    /// The call's `traceparent` is sent along (`model.openai.trace_context`).
    trace_context: bool,
    /// The peer's pseudonym goes in `user` (`model.openai.user`).
    names_users: bool,
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
    /// A server that fails mid-stream says so here (never passed on).
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: ChunkDelta,
    #[serde(default)]
    finish_reason: Option<String>,
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
    /// A client for the server `settings` names. The agent's timeout bounds each call; the
    /// client bounds only the connection attempt.
    pub fn new(settings: &OpenAiSettings) -> Result<Self, BackendSetupError> {
        let api_key = match &settings.api_key_env {
            Some(var) => Some(
                std::env::var(var)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| BackendSetupError::MissingApiKey(var.clone()))?,
            ),
            None => None,
        };
        let client = super::upstream_client(
            &settings.base_url,
            settings.ca_file.as_deref(),
            "model.openai.ca_file",
        )?;
        Ok(Self {
            client,
            url: format!("{}/chat/completions", settings.base_url),
            model: settings.model.clone(),
            api_key,
            max_tokens: settings.max_tokens,
            trace_context: settings.trace_context,
            names_users: settings.user,
        })
    }
}

#[async_trait]
impl ModelBackend for OpenAi {
    fn names_users(&self) -> bool {
        self.names_users
    }

    fn traced(&self) -> super::Traced {
        use crate::telemetry::conventions as names;
        let host = reqwest::Url::parse(&self.url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_default();
        super::Traced {
            name: format!("chat {}", self.model),
            attributes: vec![
                (names::GEN_AI_OPERATION, "chat".to_owned()),
                (names::GEN_AI_PROVIDER, "openai".to_owned()),
                (names::GEN_AI_REQUEST_MODEL, self.model.clone()),
                (names::SERVER_ADDRESS, host),
            ],
        }
    }

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
        let bytes = super::read_answer_body(&mut response).await?;
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
        Ok(Completion {
            text,
            usage,
            reply: None,
        })
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
        let mut answer = StreamedAnswer::default();
        let mut read = 0usize;
        loop {
            let Some(chunk) = response.chunk().await.map_err(classify)? else {
                // A last event without its blank line still counts.
                for data in events.finish() {
                    answer.take(&data, pieces)?;
                }
                break;
            };
            read += chunk.len();
            if read > MAX_RESPONSE_BYTES {
                return Err(BackendError::TooLarge);
            }
            for data in events.push(&chunk) {
                answer.take(&data, pieces)?;
            }
            if answer.done {
                break;
            }
        }
        // The stream's end follows `[DONE]`: read to it, so the connection carries the next
        // question.
        crate::net::client::read_rest(&mut response).await;
        // A stream cut off before the model finished is no answer, however much text came.
        if !(answer.done || answer.finished) {
            return Err(BackendError::InvalidResponse(
                "the stream ended before the answer did",
            ));
        }
        if answer.text.trim().is_empty() {
            return Err(BackendError::InvalidResponse(
                "the stream held no answer text",
            ));
        }
        Ok(Completion {
            text: answer.text,
            usage: answer.usage,
            reply: None,
        })
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
                // Never in a history (the store leaves it out).
                ConversationRole::Agent | ConversationRole::Withheld => "assistant",
            };
            messages.push(json!({"role": role, "content": message.text}));
        }
        messages.push(json!({"role": "user", "content": prompt.text}));
        let mut body = json!({"model": self.model, "messages": messages, "stream": stream});
        if let Some(user) = &prompt.user {
            body["user"] = json!(user);
        }
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
        // A hosted model's API is a third party: the trace goes only where the policy sends it.
        if let Some(span) = prompt.trace.as_ref().filter(|_| self.trace_context) {
            request = request.header("traceparent", span.traceparent());
        }
        let mut response = request.send().await.map_err(classify)?;
        let status = response.status();
        if !status.is_success() {
            // Read past unseen: the status is what the error says.
            crate::net::client::read_rest(&mut response).await;
            return Err(BackendError::Status(status.as_u16()));
        }
        Ok(response)
    }
}

/// A streamed answer as its chunks arrive.
#[derive(Default)]
struct StreamedAnswer {
    text: String,
    usage: Usage,
    /// `[DONE]` came.
    done: bool,
    /// A choice said why it finished.
    finished: bool,
}

impl StreamedAnswer {
    /// Takes one event's data, passing new text on to `pieces`.
    fn take(&mut self, data: &str, pieces: &Pieces) -> Result<(), BackendError> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: ChatChunk = serde_json::from_str(data).map_err(|_| {
            BackendError::InvalidResponse("a stream chunk is not chat-completions JSON")
        })?;
        if chunk.error.is_some() {
            return Err(BackendError::InvalidResponse("the stream carried an error"));
        }
        if let Some(reported) = chunk.usage {
            self.usage = Usage {
                prompt_tokens: reported.prompt_tokens,
                completion_tokens: reported.completion_tokens,
            };
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            self.finished |= choice.finish_reason.is_some();
            let piece = choice.delta.content.unwrap_or_default();
            if !piece.is_empty() {
                self.text.push_str(&piece);
                let _ = pieces.send(piece);
            }
        }
        Ok(())
    }
}

fn classify(e: reqwest::Error) -> BackendError {
    super::classify(&e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_that_errs_or_stops_short_is_no_answer() {
        let (pieces, _arriving) = tokio::sync::mpsc::unbounded_channel();
        let mut answer = StreamedAnswer::default();
        answer
            .take(r#"{"choices":[{"delta":{"content":"half"}}]}"#, &pieces)
            .unwrap();
        assert!(
            !(answer.done || answer.finished),
            "no [DONE], no finish_reason"
        );
        assert_eq!(
            answer.take(r#"{"error":{"message":"overloaded"}}"#, &pieces),
            Err(BackendError::InvalidResponse("the stream carried an error"))
        );
        answer
            .take(
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
                &pieces,
            )
            .unwrap();
        assert!(answer.finished);
    }
}
