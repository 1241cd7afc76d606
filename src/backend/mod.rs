//! The model behind the door, asked once per message.
//!
//! A backend is one [`ModelBackend`] implementation: it gets a [`Prompt`] (the operator's
//! instructions, a preface naming the peer, the context's recent history and the new text) and
//! returns a [`Completion`] or a [`BackendError`]. Nothing a backend returns on failure reaches
//! the peer: the agent turns every error into a short `TASK_STATE_FAILED` message. The agent
//! owns the one timeout (`model.timeout_seconds`) around every call, whatever the backend.
//!
//! * [`echo`]: deterministic, for the first run and the tests, labelled as a demonstration;
//! * [`openai`]: any OpenAI-compatible chat-completions server;
//! * [`upstream`]: an existing A2A agent on the private side, which answers with a message or
//!   a task of its own ([`AgentReply`]).

pub mod agent_card;
pub mod echo;
pub mod openai;
pub mod settings;
pub mod upstream;

use crate::store::ConversationMessage;
pub use agent_card::AgentDescription;
use async_trait::async_trait;
use settings::{BackendKind, ModelSettings};
use std::sync::Arc;

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
    /// The peer's message id, as sent.
    pub message_id: String,
    /// The peer's message as the backend gets it: every part as sent for an agent, the text
    /// alone for a model (which reads `text`).
    pub parts: Vec<crate::protocol::types::Part>,
    /// The message's `metadata`, as sent (relayed to an agent).
    pub message_metadata: Option<serde_json::Value>,
    /// The request's `metadata`, as sent (relayed to an agent).
    pub request_metadata: Option<serde_json::Value>,
    /// The message's `extensions`, as sent (relayed to an agent).
    pub extensions: Vec<String>,
    /// A stable id for the peer's conversation that names neither the peer nor the context id
    /// it chose, so an agent behind the door cannot be steered into another peer's context.
    pub conversation: String,
    /// The agent's own id of the task this message answers (a task waiting for input).
    pub continues: Option<String>,
    /// Where an agent backend records its own id of the task as soon as it learns it, so a
    /// cancel or a timeout can reach the task on the agent's side.
    pub agent_task: Arc<std::sync::OnceLock<String>>,
    /// Whether the peer may cancel the turn while it runs (`capabilities.cancel_running`): an
    /// agent is then asked in a way that names its task at once (its stream), else with the
    /// plain call the peer's own was (decision 0011).
    pub may_be_canceled: bool,
    /// The span of this call to the backend, when traces are exported: a backend whose policy
    /// says so sends its context (`traceparent`) along (`model.*.trace_context`).
    pub trace: Option<Arc<crate::telemetry::call_span::ChildSpan>>,
    /// Who is calling, when the backend hands the agent a signed assertion of it
    /// ([`ModelBackend::asserts_callers`]).
    pub caller: Option<Arc<crate::jose::caller::Caller>>,
    /// The peer's pseudonym, when the backend names its users ([`ModelBackend::names_users`]).
    pub user: Option<String>,
}

/// How a call to a backend is named on a trace: its client span's name and attributes (the
/// conventions' names, [`crate::telemetry::conventions`]).
#[derive(Debug, Clone, Default)]
pub struct Traced {
    /// The span's name (`chat <model>`, the A2A method asked).
    pub name: String,
    /// Its attributes.
    pub attributes: Vec<(&'static str, String)>,
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
    /// An agent's answer as the agent gave it; `None` from a model, whose text becomes a
    /// completed task.
    pub reply: Option<AgentReply>,
}

/// The readable text of an agent's answer: its artifacts' text when they have any, else its
/// message's.
pub fn reply_text(
    parts: &[crate::protocol::types::Part],
    artifacts: &[crate::protocol::types::Artifact],
) -> String {
    use crate::protocol::types::parts_text;
    let from_artifacts: Vec<String> = (artifacts.iter())
        .map(|a| parts_text(&a.parts))
        .filter(|t| !t.is_empty())
        .collect();
    if from_artifacts.is_empty() {
        parts_text(parts)
    } else {
        from_artifacts.join("\n")
    }
}

/// What an agent behind the door answered, beyond its text.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    /// The state it reported: final, or waiting for the peer.
    pub state: crate::protocol::types::TaskState,
    /// Its message: a direct answer's parts, or the task's status message.
    pub parts: Vec<crate::protocol::types::Part>,
    /// The task's artifacts.
    pub artifacts: Vec<crate::protocol::types::Artifact>,
    /// It answered with a message rather than a task.
    pub as_message: bool,
    /// The agent's own id of its task, to continue or cancel it.
    pub task_id: Option<String>,
    /// What a receipt states of the answer as peergate read it.
    pub evidence: Option<UpstreamEvidence>,
}

/// The agent's answer as a receipt states it (`up`): digests, never content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamEvidence {
    /// The digest of its answer as read: a task's as a receipt digests an answer (`ans`), a
    /// message's as a receipt digests a message (`req`).
    pub answer: String,
    /// SHA-256 of the agent's own receipt, if its answer carried one.
    pub receipt: Option<String>,
}

/// Why the backend gave no answer. Carries no upstream text, so nothing from an upstream body
/// can leak into a task or a log line by accident. Written as a model's ([`Self::of`] names an
/// agent instead).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// No answer within the configured timeout.
    Timeout,
    /// The connection failed or broke.
    Unreachable,
    /// The server's TLS certificate did not check out: expired, for another host, from an
    /// issuer neither the system's roots nor the policy's CA file hold.
    Certificate(crate::net::tls::CertificateProblem),
    /// The server answered with a non-success HTTP status.
    Status(u16),
    /// The body was not the expected JSON, or held no answer.
    InvalidResponse(&'static str),
    /// The body exceeded [`MAX_RESPONSE_BYTES`].
    TooLarge,
    /// An agent answered with a JSON-RPC error (its message is not kept).
    Refused(i64),
}

impl BackendError {
    /// What went wrong, naming the backend as `what` (`"model"` or `"agent"`): the log line an
    /// operator reads should say which one failed.
    pub fn of(&self, what: &'static str) -> String {
        let server = match what {
            "agent" => "agent",
            _ => "model server",
        };
        match self {
            Self::Timeout => format!("the {what} did not answer in time"),
            Self::Unreachable => format!("the {server} could not be reached"),
            Self::Certificate(problem) => {
                format!("the {server}'s TLS certificate was not accepted: {problem}")
            }
            Self::Status(status) => format!("the {server} answered with HTTP status {status}"),
            Self::InvalidResponse(why) => format!("the {server}'s answer was not usable: {why}"),
            Self::TooLarge => format!("the {server}'s answer was too large"),
            Self::Refused(code) => format!("the agent answered with JSON-RPC error {code}"),
        }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.of("model"))
    }
}

impl std::error::Error for BackendError {}

/// A model the agent asks.
#[async_trait]
pub trait ModelBackend: Send + Sync + std::fmt::Debug {
    /// A one-line description for the start-up log. Never includes a secret.
    fn describe(&self) -> String;

    /// What it is, in what a peer reads: "model", or "agent" for an agent behind the door.
    fn what(&self) -> &'static str {
        "model"
    }

    /// What an agent behind the door says of itself, for the public card where `[card]` does
    /// not say otherwise; `None` for a model.
    fn description(&self) -> Option<&AgentDescription> {
        None
    }

    /// Whether it reads every part of a message as sent (an agent behind the door); a model
    /// reads text and data parts only.
    fn reads_every_part(&self) -> bool {
        false
    }

    /// Signs an assertion of who is calling with `assertions` for every request it sends, when
    /// it is an agent whose policy asks for them (start-up calls it once).
    fn assert_callers(&self, _assertions: Arc<crate::jose::caller::CallerAssertions>) {}

    /// Whether a prompt should name its caller ([`Prompt::caller`]).
    fn asserts_callers(&self) -> bool {
        false
    }

    /// Whether a prompt should carry the peer's pseudonym ([`Prompt::user`]).
    fn names_users(&self) -> bool {
        false
    }

    /// How a call to it is named on a trace.
    fn traced(&self) -> Traced {
        Traced {
            name: self.what().to_owned(),
            attributes: Vec::new(),
        }
    }

    /// Asks the model once.
    async fn complete(&self, prompt: &Prompt) -> Result<Completion, BackendError>;

    /// Stops the agent's task `agent_task` (an id recorded in [`Prompt::agent_task`]) after the
    /// peer canceled, or the call timed out, as `caller` (an agent told who calls is told for
    /// the cancel too). A model has nothing to stop: dropping the call did.
    async fn cancel(
        &self,
        agent_task: &str,
        caller: Option<&crate::jose::caller::Caller>,
    ) -> Result<(), BackendError> {
        let _ = (agent_task, caller);
        Ok(())
    }

    /// Asks the model once, passing the answer's text on to `pieces` as it arrives (each piece
    /// is new text, in order; together they are the answer), and returns the whole answer. A
    /// backend that cannot stream sends its answer as one piece.
    async fn complete_streaming(
        &self,
        prompt: &Prompt,
        pieces: &Pieces,
    ) -> Result<Completion, BackendError> {
        let completion = self.complete(prompt).await?;
        let _ = pieces.send(completion.text.clone());
        Ok(completion)
    }

    /// Whether the backend answers now, asked in the background for `/ready` (within
    /// `timeout`); `None` for a backend that is not probed, whose calls say so themselves.
    async fn reachable(&self, timeout: std::time::Duration) -> Option<bool> {
        let _ = timeout;
        None
    }
}

/// Where a streaming backend passes the answer's text as it arrives.
pub type Pieces = tokio::sync::mpsc::UnboundedSender<String>;

/// Why the backend could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendSetupError {
    /// The policy names an API-key variable that is not set.
    #[error(
        "the environment variable {0} named by model.openai.api_key_env is not set or not valid UTF-8"
    )]
    MissingApiKey(String),
    /// The policy names a backend without its section.
    #[error("the policy names this backend but has no [{0}] section")]
    MissingSection(&'static str),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for the model: {0}")]
    Client(String),
    /// The TLS configuration could not be built (a CA file, no roots).
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsSetupError),
    /// The upstream agent's card could not be read, verified or used.
    #[error("cannot use the agent at {setting}: {reason}")]
    Upstream {
        /// The setting involved.
        setting: &'static str,
        /// What was wrong, without any of the agent's words.
        reason: String,
    },
    /// The upstream agent is not up yet: its card could not be fetched (no connection, no
    /// answer in time, a 5xx status). Start-up retries this one, within
    /// `model.a2a.startup_wait_seconds`.
    #[error("cannot use the agent at model.a2a.url: it is not up ({0})")]
    NotUp(String),
    /// A variable the policy names is not set.
    #[error("the environment variable {var} named by {setting} is not set or not valid UTF-8")]
    MissingVariable {
        /// The variable.
        var: String,
        /// The setting naming it.
        setting: &'static str,
    },
}

/// A client for an upstream the policy fixes at `url`. Its TLS is an explicit configuration
/// checked against the system's roots and the CA file `ca_file` (named by `ca_setting`);
/// plain `http` resolves only to the private side; redirects are not followed, no proxy is
/// used, and connecting is bounded at 5 s (the agent bounds each whole call). Connections are
/// kept for the next request, a bounded number of them for a bounded time.
pub(crate) fn upstream_client(
    url: &str,
    ca_file: Option<&str>,
    ca_setting: &'static str,
) -> Result<reqwest::Client, BackendSetupError> {
    upstream_client_resolving(
        url,
        ca_file,
        ca_setting,
        Arc::new(crate::jose::fetch::SystemLookup),
    )
}

/// [`upstream_client`] resolving names through `lookup`.
fn upstream_client_resolving(
    url: &str,
    ca_file: Option<&str>,
    ca_setting: &'static str,
    lookup: Arc<dyn crate::jose::fetch::Lookup>,
) -> Result<reqwest::Client, BackendSetupError> {
    let https = url.starts_with("https://");
    let tls = crate::net::tls::client_config(ca_file.map(std::path::Path::new), ca_setting, https)?;
    let mut builder =
        crate::net::client::keeping_connections(crate::net::tls::client_builder(&tls))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(std::time::Duration::from_secs(5));
    if !https {
        builder = builder.dns_resolver(Arc::new(crate::jose::fetch::GuardedResolver {
            lookup,
            reach: crate::jose::fetch::Reach::PrivateSide,
        }));
    }
    builder
        .build()
        .map_err(|e| BackendSetupError::Client(e.to_string()))
}

/// Reads an upstream's answer within [`MAX_RESPONSE_BYTES`].
pub(crate) async fn read_answer_body(
    response: &mut reqwest::Response,
) -> Result<Vec<u8>, BackendError> {
    crate::net::client::read_bounded(response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| match e {
            crate::net::client::BodyError::TooLarge => BackendError::TooLarge,
            crate::net::client::BodyError::Broken(e) => classify(&e),
        })
}

/// What a failed request to an upstream was, without any of the upstream's words.
pub(crate) fn classify(error: &reqwest::Error) -> BackendError {
    if error.is_timeout() {
        return BackendError::Timeout;
    }
    if let Some(problem) = crate::net::tls::certificate_problem(error) {
        return BackendError::Certificate(problem);
    }
    BackendError::Unreachable
}

/// Builds the backend the settings name: the one place backends are registered. An upstream
/// agent's card is read and verified here, so a card that does not verify stops start-up.
pub async fn from_settings(
    model: &ModelSettings,
) -> Result<Arc<dyn ModelBackend>, BackendSetupError> {
    match model.backend {
        BackendKind::A2a => {
            let settings = model
                .a2a
                .as_ref()
                .ok_or(BackendSetupError::MissingSection("model.a2a"))?;
            Ok(Arc::new(
                upstream::UpstreamAgent::connect_waiting(settings).await?,
            ))
        }
        BackendKind::Echo => Ok(Arc::new(echo::Echo)),
        BackendKind::Openai => {
            let settings = model
                .openai
                .as_ref()
                .ok_or(BackendSetupError::MissingSection("model.openai"))?;
            Ok(Arc::new(openai::OpenAi::new(settings)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::pin::Pin;

    /// Resolves every name to one address.
    struct Always(IpAddr);

    impl crate::jose::fetch::Lookup for Always {
        fn lookup(
            &self,
            _host: String,
        ) -> Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        {
            let ip = self.0;
            Box::pin(async move { Ok(vec![ip]) })
        }
    }

    #[tokio::test]
    async fn plain_http_by_name_reaches_the_private_side_only() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
        });
        let url = format!("http://model.internal:{port}/v1");
        let ask = |ip: &str| {
            let client = upstream_client_resolving(
                &url,
                None,
                "model.openai.ca_file",
                Arc::new(Always(ip.parse().unwrap())),
            )
            .unwrap();
            let url = url.clone();
            async move { client.get(url).send().await }
        };
        assert!(
            ask("127.0.0.1").await.is_ok(),
            "a private-side name is reached"
        );
        let refused = ask("8.8.8.8").await.unwrap_err();
        let reason = crate::net::client::innermost_reason(&refused);
        assert!(
            reason.contains("resolves to no loopback or private address"),
            "{reason}"
        );
    }
}
