//! The echo backend: deterministic, for the first run and the tests. It repeats the prompt
//! and asks no model, and says so in every answer.

use super::{BackendError, Completion, ModelBackend, Pieces, Prompt, Usage};
use crate::store::ConversationRole;
use async_trait::async_trait;

/// The demonstration backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[async_trait]
impl ModelBackend for Echo {
    fn describe(&self) -> String {
        "echo — a DEMONSTRATION backend: it repeats the prompt and asks no model".to_owned()
    }

    async fn complete(&self, prompt: &Prompt) -> Result<Completion, BackendError> {
        Ok(echo(prompt))
    }

    /// The same answer, a line at a time, as a model would stream it.
    async fn complete_streaming(
        &self,
        prompt: &Prompt,
        pieces: &Pieces,
    ) -> Result<Completion, BackendError> {
        let completion = echo(prompt);
        for line in completion.text.split_inclusive('\n') {
            let _ = pieces.send(line.to_owned());
            // Lets the stream carry each piece before the next, as a model's would.
            tokio::task::yield_now().await;
        }
        Ok(completion)
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
            // Never in a history (the store leaves it out).
            ConversationRole::Agent | ConversationRole::Withheld => "agent",
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
    Completion {
        text,
        usage,
        reply: None,
    }
}
