//! An existing A2A agent behind the door (`backend = "a2a"`).
//!
//! peergate is the guarded door; the agent sits on the private side. At start-up its card is
//! read from the URL the policy fixes and verified with the keys the policy names, and the
//! JSON-RPC interface it advertises must be on that same origin (or the policy names one). The
//! agent's address therefore never comes from anything a peer or a network attacker controls.
//!
//! Each peer message is forwarded once, as `SendMessage` (`SendStreamingMessage` when the peer
//! streams, or may cancel the turn while it runs, and the agent can), with the peer's message
//! id, every part and both metadata as sent (decision 0010). It goes
//! under a context id derived from the peer's identity and its context ([`Prompt::conversation`]),
//! so two peers that both say `ctx-1` hold two conversations upstream, and a peer can never
//! name the agent's context or task ids: those stay in peergate's store.
//!
//! The answer is read within [`MAX_RESPONSE_BYTES`] and the agent's timeout: a message or a
//! task, parts of every kind, every state (a task still working is followed with `GetTask`).
//! A JSON-RPC error becomes [`BackendError::Refused`] with its code only, and an HTTP error its
//! status only: nothing an agent says in an error reaches a peer or the log.

use super::settings::UpstreamSettings;
use super::{
    AgentReply, BackendError, BackendSetupError, Completion, MAX_RESPONSE_BYTES, ModelBackend,
    Pieces, Prompt, Usage, classify,
};
use crate::clock::Clock as _;
use crate::jose::caller::{Caller, CallerAssertions};
use crate::net::event_stream::ServerSentEvents;
use crate::protocol::types::{Artifact, Part, TaskState, parts_text};
use async_trait::async_trait;
use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Largest card read.
const MAX_CARD_BYTES: usize = 256 * 1024;

/// How often a task the agent left working is looked at again.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// An A2A agent peergate forwards messages to.
pub struct UpstreamAgent {
    client: reqwest::Client,
    rpc_url: String,
    /// Where its card is read: what the readiness probe asks.
    card_url: String,
    credential: Option<(HeaderName, HeaderValue)>,
    /// The agent's card says it streams.
    streams: bool,
    name: String,
    /// What its card says of it, for the public card.
    described: super::AgentDescription,
    /// The call's `traceparent` is sent along (`model.a2a.trace_context`).
    trace_context: bool,
    /// The header callers' assertions travel in, when the policy sends them
    /// (`model.a2a.caller_assertion`).
    caller_header: Option<HeaderName>,
    /// What signs them, once start-up has the key.
    assertions: std::sync::OnceLock<Arc<CallerAssertions>>,
}

impl std::fmt::Debug for UpstreamAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamAgent")
            .field("rpc_url", &self.rpc_url)
            .finish_non_exhaustive()
    }
}

/// A `SendMessage` result: a task or a message.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendResult {
    #[serde(default)]
    task: Option<UpstreamTask>,
    #[serde(default)]
    message: Option<UpstreamMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpstreamTask {
    id: String,
    status: UpstreamStatus,
    #[serde(default)]
    artifacts: Vec<Artifact>,
    /// The task as peergate read it, for the receipt's `up` (the stream's task as assembled).
    #[serde(skip)]
    read: Value,
}

#[derive(Deserialize)]
struct UpstreamStatus {
    state: String,
    #[serde(default)]
    message: Option<UpstreamMessage>,
}

#[derive(Deserialize)]
struct UpstreamMessage {
    #[serde(default)]
    parts: Vec<Part>,
    /// The message as peergate read it, for the receipt's `up`.
    #[serde(skip)]
    read: Value,
}

impl UpstreamAgent {
    /// Reads and verifies the agent's card and settles where messages go. Fails, naming the
    /// setting, when the card cannot be read, does not verify, or points elsewhere.
    pub async fn connect(settings: &UpstreamSettings) -> Result<Self, BackendSetupError> {
        let credential = match &settings.token_env {
            None => None,
            Some(var) => {
                let value = std::env::var(var)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| BackendSetupError::MissingVariable {
                        var: var.clone(),
                        setting: "model.a2a.token_env",
                    })?;
                let (name, value) = match &settings.api_key_header {
                    Some(header) => (header.clone(), value),
                    None => ("authorization".to_owned(), format!("Bearer {value}")),
                };
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    upstream("model.a2a.api_key_header", "is not an HTTP header name")
                })?;
                let mut value = HeaderValue::from_str(&value).map_err(|_| {
                    upstream(
                        "model.a2a.token_env",
                        "the credential holds characters a header cannot carry",
                    )
                })?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let client = super::upstream_client(
            &settings.url,
            settings.ca_file.as_deref(),
            "model.a2a.ca_file",
        )?;
        let card_url = format!(
            "{}/.well-known/agent-card.json",
            settings.url.trim_end_matches('/')
        );
        let card_text = read_card(&client, &card_url).await?;
        verify(settings, &card_text)?;
        let card: Value = serde_json::from_str(&card_text)
            .map_err(|_| upstream("model.a2a.url", "the agent's card is not JSON"))?;
        let rpc_url = match &settings.rpc_url {
            Some(url) => url.clone(),
            None => card_rpc_url(&card, &settings.url)?,
        };
        // Logged once: connecting is retried only while the agent is not up, before its card.
        let described = super::AgentDescription::of_card(&card);
        if !described.left_out.is_empty() {
            tracing::warn!(
                left_out = %described.left_out.join("; "),
                "the agent's card held text or links a browser, a terminal or a log would misread; peergate's card leaves them out"
            );
        }
        Ok(Self {
            client,
            rpc_url,
            card_url,
            credential,
            streams: card["capabilities"]["streaming"] == true,
            name: described
                .name
                .clone()
                .unwrap_or_else(|| "an A2A agent".to_owned()),
            described,
            trace_context: settings.trace_context,
            caller_header: settings
                .caller_assertion
                .then(|| HeaderName::from_bytes(settings.caller_header.as_bytes()).ok())
                .flatten(),
            assertions: std::sync::OnceLock::new(),
        })
    }

    /// [`Self::connect`], retried with backoff (1 s, doubling up to 10 s) while the agent is
    /// not up yet, for at most `model.a2a.startup_wait_seconds`; each wait is logged.
    pub async fn connect_waiting(settings: &UpstreamSettings) -> Result<Self, BackendSetupError> {
        let deadline = tokio::time::Instant::now() + settings.startup_wait_seconds.duration();
        let mut pause = Duration::from_secs(1);
        loop {
            match Self::connect(settings).await {
                Err(BackendSetupError::NotUp(reason)) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Err(BackendSetupError::NotUp(format!(
                            "{reason}; waited {} s, model.a2a.startup_wait_seconds",
                            settings.startup_wait_seconds.get()
                        )));
                    }
                    let wait = pause.min(left);
                    tracing::warn!(
                        reason = %reason,
                        retry_in_ms = wait.as_millis() as u64,
                        "the agent at model.a2a.url is not up yet; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
                other => return other,
            }
        }
    }

    /// The message forwarded for `prompt`.
    fn message(prompt: &Prompt) -> Value {
        let mut message = json!({
            // The peer's id with a mark of its conversation: two peers' "msg-1" stay apart at
            // an agent that keys anything on message ids, and a prefix the agent acts on stays.
            "messageId": format!(
                "{}-pg{}",
                prompt.message_id,
                prompt.conversation.get(..8).unwrap_or_default()
            ),
            "role": "ROLE_USER",
            "parts": prompt.parts,
            // Always with the task id too: the Python SDK checks the pair.
            "contextId": prompt.conversation,
        });
        if let Some(task_id) = &prompt.continues {
            message["taskId"] = json!(task_id);
        }
        if let Some(metadata) = &prompt.message_metadata {
            message["metadata"] = metadata.clone();
        }
        if !prompt.extensions.is_empty() {
            message["extensions"] = json!(prompt.extensions);
        }
        message
    }

    /// The params of a `SendMessage` or `SendStreamingMessage` for `prompt`: its message and
    /// the request's metadata as the peer sent them.
    fn params(prompt: &Prompt) -> Value {
        let mut params = json!({"message": Self::message(prompt)});
        if let Some(metadata) = &prompt.request_metadata {
            params["metadata"] = metadata.clone();
        }
        params
    }

    /// POSTs one JSON-RPC request; a non-success status is an error (its body read past,
    /// unseen).
    async fn post(
        &self,
        method: &str,
        params: Value,
        stream: bool,
        (traceparent, caller): (Option<&str>, Option<&Caller>),
    ) -> Result<reqwest::Response, BackendError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut request = self
            .client
            .post(&self.rpc_url)
            .header("A2A-Version", "1.0")
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if stream {
            request = request.header("Accept", "text/event-stream");
        }
        if let Some((name, value)) = &self.credential {
            request = request.header(name, value);
        }
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        if let (Some(header), Some(assertions), Some(caller)) =
            (&self.caller_header, self.assertions.get(), caller)
        {
            // Signed for this request alone: its own id, a minute to live.
            let now = crate::clock::SystemClock.now().as_second();
            let signed = assertions.sign(&self.rpc_url, caller, now);
            if let Ok(mut value) = HeaderValue::from_str(&signed) {
                value.set_sensitive(true);
                request = request.header(header, value);
            }
        }
        let mut response = request.send().await.map_err(|e| classify(&e))?;
        let status = response.status();
        if !status.is_success() {
            crate::net::client::read_rest(&mut response).await;
            return Err(BackendError::Status(status.as_u16()));
        }
        Ok(response)
    }

    /// One JSON-RPC call's `result`. A `GetTask` whose connection broke before its answer came
    /// (a kept connection the agent closed just as it was used) is asked once more, on a new
    /// connection: reading a task twice changes nothing. Nothing else is: a message or a
    /// cancel the agent may have acted on is never sent twice.
    async fn call(
        &self,
        method: &str,
        params: Value,
        caller: Option<&Caller>,
    ) -> Result<Value, BackendError> {
        if method != "GetTask" {
            return self.call_once(method, params, caller).await;
        }
        match self.call_once(method, params.clone(), caller).await {
            Err(BackendError::Unreachable) => self.call_once(method, params, caller).await,
            answered => answered,
        }
    }

    async fn call_once(
        &self,
        method: &str,
        params: Value,
        caller: Option<&Caller>,
    ) -> Result<Value, BackendError> {
        let response = self.post(method, params, false, (None, caller)).await?;
        result_of(read_answer(response).await?)
    }

    /// The `traceparent` a message to the agent carries: its call's span's, when the policy
    /// sends it.
    fn traceparent<'a>(&self, prompt: &'a Prompt) -> Option<&'a str> {
        let span = prompt.trace.as_ref().filter(|_| self.trace_context)?;
        Some(span.traceparent())
    }

    /// Follows a task the agent left working until it is final or waits for the peer.
    async fn follow(
        &self,
        task: UpstreamTask,
        caller: Option<&Caller>,
    ) -> Result<UpstreamTask, BackendError> {
        let mut task = task;
        // Only a task the agent says is still under way is followed; any other state is
        // judged by what it is.
        while matches!(
            task.status.state.as_str(),
            "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
        ) {
            tokio::time::sleep(FOLLOW_EVERY).await;
            let result = self.call("GetTask", json!({"id": task.id}), caller).await?;
            task = read_task(result)?;
        }
        Ok(task)
    }
}

#[async_trait]
impl ModelBackend for UpstreamAgent {
    fn what(&self) -> &'static str {
        "agent"
    }

    fn assert_callers(&self, assertions: Arc<CallerAssertions>) {
        let _ = self.assertions.set(assertions);
    }

    fn asserts_callers(&self) -> bool {
        self.caller_header.is_some() && self.assertions.get().is_some()
    }

    fn traced(&self) -> super::Traced {
        use crate::telemetry::conventions as names;
        let host = reqwest::Url::parse(&self.rpc_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_default();
        super::Traced {
            name: "SendMessage".to_owned(),
            attributes: vec![
                (names::A2A_METHOD, "SendMessage".to_owned()),
                (names::RPC_SYSTEM, "jsonrpc".to_owned()),
                (
                    names::RPC_METHOD,
                    "lf.a2a.v1.A2AService/SendMessage".to_owned(),
                ),
                (names::GEN_AI_OPERATION, "invoke_agent".to_owned()),
                (names::GEN_AI_AGENT_NAME, self.name.clone()),
                (names::SERVER_ADDRESS, host),
            ],
        }
    }

    fn reads_every_part(&self) -> bool {
        true
    }

    fn description(&self) -> Option<&super::AgentDescription> {
        Some(&self.described)
    }

    fn describe(&self) -> String {
        format!(
            "the A2A agent {:?} at {}{}",
            self.name,
            self.rpc_url,
            if self.credential.is_some() {
                ", with a credential"
            } else {
                ""
            }
        )
    }

    /// The card's address answers (any status under 500): the agent's server is up. Its card
    /// is not read again, so nothing it serves now changes where messages go.
    async fn reachable(&self, timeout: Duration) -> Option<bool> {
        let answered = self
            .client
            .get(&self.card_url)
            .timeout(timeout)
            .send()
            .await;
        let up = match answered {
            Ok(mut response) => {
                // Read past, so the probe leaves its connection to the next message.
                crate::net::client::read_rest(&mut response).await;
                !response.status().is_server_error()
            }
            Err(_) => false,
        };
        Some(up)
    }

    /// Through the agent's stream when it streams: its first event names its task, so a cancel
    /// can reach it while it works. Otherwise one blocking `SendMessage`.
    async fn complete(&self, prompt: &Prompt) -> Result<Completion, BackendError> {
        self.answer(prompt).await.map(|c| estimated(prompt, c))
    }

    /// `SendStreamingMessage` when the agent streams: the text of its working updates and of
    /// its artifacts is passed on as it arrives.
    async fn complete_streaming(
        &self,
        prompt: &Prompt,
        pieces: &Pieces,
    ) -> Result<Completion, BackendError> {
        if !self.streams {
            let completion = self.complete(prompt).await?;
            let _ = pieces.send(completion.text.clone());
            return Ok(completion);
        }
        self.streamed(prompt, pieces)
            .await
            .map(|c| estimated(prompt, c))
    }

    async fn cancel(&self, agent_task: &str, caller: Option<&Caller>) -> Result<(), BackendError> {
        self.call("CancelTask", json!({"id": agent_task}), caller)
            .await
            .map(drop)
    }
}

/// An agent reports no tokens: what it read and wrote counts at about four bytes a token, so
/// the owners' budgets hold for agents too.
fn estimated(prompt: &Prompt, mut completion: Completion) -> Completion {
    let tokens = |bytes: usize| u64::try_from(bytes).unwrap_or(u64::MAX).div_ceil(4);
    let read: usize = prompt
        .parts
        .iter()
        .map(|part| part.content.readable_text().map_or(0, |text| text.len()))
        .sum();
    completion.usage = Usage {
        prompt_tokens: tokens(read),
        completion_tokens: tokens(completion.text.len()),
    };
    completion
}

impl UpstreamAgent {
    /// One blocking `SendMessage`, as the peer asked; through the agent's stream only when the
    /// peer may cancel the turn while it runs and the agent streams: its first event names its
    /// task, so the cancel can reach it (decision 0011).
    async fn answer(&self, prompt: &Prompt) -> Result<Completion, BackendError> {
        if self.streams && prompt.may_be_canceled {
            // Nobody reads the pieces: they are dropped as they come.
            let (pieces, _) = tokio::sync::mpsc::unbounded_channel();
            return self.streamed(prompt, &pieces).await;
        }
        let traceparent = self.traceparent(prompt);
        let response = self
            .post(
                "SendMessage",
                Self::params(prompt),
                false,
                (traceparent, prompt.caller.as_deref()),
            )
            .await?;
        let result = result_of(read_answer(response).await?)?;
        self.settle(prompt, result).await
    }

    /// The completion a `SendMessage` result makes: a message as it is, a task once it is
    /// final or waits for the peer.
    async fn settle(&self, prompt: &Prompt, result: Value) -> Result<Completion, BackendError> {
        let parsed: SendResult = serde_json::from_value(result.clone())
            .map_err(|_| BackendError::InvalidResponse("not a task or a message"))?;
        match (parsed.task, parsed.message) {
            (Some(mut task), _) => {
                task.read = result["task"].clone();
                let _ = prompt.agent_task.set(task.id.clone());
                completion_of_task(self.follow(task, prompt.caller.as_deref()).await?)
            }
            (None, Some(mut message)) => {
                message.read = result["message"].clone();
                completion_of_message(message)
            }
            (None, None) => Err(BackendError::InvalidResponse(
                "neither a task nor a message",
            )),
        }
    }

    /// One `SendStreamingMessage`, read to the task's end (followed with `GetTask` if the
    /// stream stops first).
    async fn streamed(&self, prompt: &Prompt, pieces: &Pieces) -> Result<Completion, BackendError> {
        let mut response = self
            .post(
                "SendStreamingMessage",
                Self::params(prompt),
                true,
                (self.traceparent(prompt), prompt.caller.as_deref()),
            )
            .await?;
        // An agent may refuse a stream with one JSON-RPC error, sent as JSON.
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            let answer = read_answer(response).await?;
            return self.settle(prompt, result_of(answer)?).await;
        }
        let mut events = ServerSentEvents::default();
        let mut followed = FollowedTask {
            agent_task: prompt.agent_task.clone(),
            ..FollowedTask::default()
        };
        let mut read = 0usize;
        loop {
            let chunk = response.chunk().await.map_err(|e| classify(&e))?;
            let ended = chunk.is_none();
            let data = match chunk {
                Some(chunk) => {
                    read += chunk.len();
                    if read > MAX_RESPONSE_BYTES {
                        return Err(BackendError::TooLarge);
                    }
                    events.push(&chunk)
                }
                None => events.finish(),
            };
            for event in data {
                if let Some(done) = followed.take(&event, pieces)? {
                    // The stream's end follows its last event: read to it, so the connection
                    // carries the next message.
                    crate::net::client::read_rest(&mut response).await;
                    return Ok(done);
                }
            }
            if ended {
                break;
            }
        }
        // The stream ended before the task did: follow it.
        let task_id = followed.task_id.ok_or(BackendError::InvalidResponse(
            "the stream ended before any task",
        ))?;
        let caller = prompt.caller.as_deref();
        let result = self.call("GetTask", json!({"id": task_id}), caller).await?;
        completion_of_task(self.follow(read_task(result)?, caller).await?)
    }
}

/// A streamed task as its events arrive.
#[derive(Default)]
struct FollowedTask {
    task_id: Option<String>,
    /// Where the task's id goes as soon as it is known.
    agent_task: std::sync::Arc<std::sync::OnceLock<String>>,
    artifacts: Vec<Artifact>,
}

impl FollowedTask {
    /// Takes one event; `Some` once the answer is complete.
    fn take(&mut self, data: &str, pieces: &Pieces) -> Result<Option<Completion>, BackendError> {
        let answer = strict_json(data, "a streamed event is not JSON")?;
        let result = result_of(answer)?;
        if let Some(message) = result.get("message") {
            let mut message: UpstreamMessage = serde_json::from_value(message.clone())
                .map_err(|_| BackendError::InvalidResponse("a streamed message is malformed"))?;
            message.read = result["message"].clone();
            let _ = pieces.send(parts_text(&message.parts));
            return completion_of_message(message).map(Some);
        }
        if let Some(task) = result.get("task") {
            let mut task: UpstreamTask = serde_json::from_value(task.clone())
                .map_err(|_| BackendError::InvalidResponse("a streamed task is malformed"))?;
            task.read = result["task"].clone();
            self.task_id = Some(task.id.clone());
            let _ = self.agent_task.set(task.id.clone());
            self.artifacts = task.artifacts.clone();
            if settled(&task.status.state) {
                return completion_of_task(task).map(Some);
            }
            return Ok(None);
        }
        if let Some(update) = result.get("artifactUpdate") {
            let artifact: Artifact = serde_json::from_value(update["artifact"].clone())
                .map_err(|_| BackendError::InvalidResponse("a streamed artifact is malformed"))?;
            let _ = pieces.send(parts_text(&artifact.parts));
            let append = update["append"] == true;
            match self
                .artifacts
                .iter_mut()
                .find(|a| a.artifact_id == artifact.artifact_id)
            {
                Some(known) if append => known.parts.extend(artifact.parts),
                Some(known) => *known = artifact,
                None => self.artifacts.push(artifact),
            }
            return Ok(None);
        }
        if let Some(update) = result.get("statusUpdate") {
            let status: UpstreamStatus = serde_json::from_value(update["status"].clone())
                .map_err(|_| BackendError::InvalidResponse("a streamed status is malformed"))?;
            if self.task_id.is_none() {
                self.task_id = update["taskId"].as_str().map(str::to_owned);
                if let Some(id) = &self.task_id {
                    let _ = self.agent_task.set(id.clone());
                }
            }
            if !settled(&status.state) {
                if let Some(message) = &status.message {
                    let text = parts_text(&message.parts);
                    if !text.is_empty() {
                        let _ = pieces.send(text);
                    }
                }
                return Ok(None);
            }
            let id = self.task_id.clone().filter(|id| !id.is_empty()).ok_or(
                BackendError::InvalidResponse("the stream never named its task"),
            )?;
            let artifacts = std::mem::take(&mut self.artifacts);
            let mut read = json!({"id": id, "status": update["status"], "artifacts": artifacts});
            if let Some(context) = update.get("contextId") {
                read["contextId"] = context.clone();
            }
            let task = UpstreamTask {
                id,
                status,
                artifacts,
                read,
            };
            return completion_of_task(task).map(Some);
        }
        Err(BackendError::InvalidResponse("an unknown streamed event"))
    }
}

/// Whether a task in `state` (as the agent names it) needs no more following.
fn settled(state: &str) -> bool {
    TaskState::from_name(state).is_some_and(|s| s.is_final() || s.is_interrupted())
}

/// A task as `GetTask` answered it, kept as read.
fn read_task(result: Value) -> Result<UpstreamTask, BackendError> {
    let mut task: UpstreamTask = serde_json::from_value(result.clone())
        .map_err(|_| BackendError::InvalidResponse("GetTask did not answer a task"))?;
    task.read = result;
    Ok(task)
}

/// What a receipt states of the agent's answer: the digest of what peergate read (as a
/// receipt digests an answer, or a message), and of the agent's own receipt if it sent one.
/// `None` when the answer is not in A2A 1.0's form, so it cannot be digested as one.
fn evidence(read: &Value, task: bool) -> Option<super::UpstreamEvidence> {
    use crate::jose::receipt::{EXTENSION, answer_digest, message_digest, sha256_b64url};
    let answer = if task {
        answer_digest(read)
    } else {
        message_digest(read)
    };
    Some(super::UpstreamEvidence {
        answer: answer.ok()?,
        receipt: read["metadata"][EXTENSION]
            .as_str()
            .map(|r| sha256_b64url(r.as_bytes())),
    })
}

fn completion_of_task(task: UpstreamTask) -> Result<Completion, BackendError> {
    let state = TaskState::from_name(&task.status.state)
        .filter(|s| s.is_final() || s.is_interrupted())
        .ok_or(BackendError::InvalidResponse(
            "the task's state is not one peergate knows",
        ))?;
    // Each part holds exactly one kind of content: the typed part cannot be read otherwise.
    let parts = task.status.message.map(|m| m.parts).unwrap_or_default();
    let text = super::reply_text(&parts, &task.artifacts);
    Ok(Completion {
        text,
        usage: Usage::default(),
        reply: Some(AgentReply {
            state,
            parts,
            evidence: evidence(&task.read, true),
            artifacts: task.artifacts,
            as_message: false,
            task_id: Some(task.id),
        }),
    })
}

fn completion_of_message(message: UpstreamMessage) -> Result<Completion, BackendError> {
    if message.parts.is_empty() {
        return Err(BackendError::InvalidResponse(
            "the agent's message holds no part",
        ));
    }
    Ok(Completion {
        text: parts_text(&message.parts),
        usage: Usage::default(),
        reply: Some(AgentReply {
            state: TaskState::Completed,
            evidence: evidence(&message.read, false),
            parts: message.parts,
            artifacts: Vec::new(),
            as_message: true,
            task_id: None,
        }),
    })
}

/// A JSON-RPC response object, read within [`MAX_RESPONSE_BYTES`].
async fn read_answer(mut response: reqwest::Response) -> Result<Value, BackendError> {
    let bytes = super::read_answer_body(&mut response).await?;
    strict_json(
        std::str::from_utf8(&bytes).unwrap_or("\u{0}"),
        "not a JSON-RPC response",
    )
}

/// `text` read as the project reads any JSON it is given: a member twice is refused, not
/// read last-wins (two readers of the same answer must not see two different answers).
fn strict_json(text: &str, not_json: &'static str) -> Result<Value, BackendError> {
    use crate::protocol::json::{Integers, StrictError, parse};
    parse(text, Integers::Any).map_err(|e| match e {
        StrictError::Repeated(_) => BackendError::InvalidResponse("a member appears twice"),
        _ => BackendError::InvalidResponse(not_json),
    })
}

/// The `result` of a JSON-RPC response; an error keeps its code only.
fn result_of(mut answer: Value) -> Result<Value, BackendError> {
    if let Some(error) = answer.get("error") {
        return Err(BackendError::Refused(error["code"].as_i64().unwrap_or(0)));
    }
    match answer.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(BackendError::InvalidResponse(
            "neither a result nor an error",
        )),
    }
}

fn upstream(setting: &'static str, reason: impl Into<String>) -> BackendSetupError {
    BackendSetupError::Upstream {
        setting,
        reason: reason.into(),
    }
}

/// Why the card could not be fetched, in words for the operator.
fn unreachable_reason(error: &reqwest::Error) -> String {
    match classify(error) {
        BackendError::Timeout => "no answer within 10 s".to_owned(),
        BackendError::Certificate(problem) => format!(
            "its TLS certificate was not accepted: {problem} (trusted: the system's roots and model.a2a.ca_file)"
        ),
        _ => "the connection failed".to_owned(),
    }
}

async fn read_card(client: &reqwest::Client, url: &str) -> Result<String, BackendSetupError> {
    let mut response = client
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| match classify(&e) {
            // A certificate is a setting to fix, not an agent still starting.
            BackendError::Certificate(_) => upstream(
                "model.a2a.url",
                format!("its card could not be read ({})", unreachable_reason(&e)),
            ),
            _ => BackendSetupError::NotUp(unreachable_reason(&e)),
        })?;
    if response.status().is_server_error() {
        return Err(BackendSetupError::NotUp(format!(
            "its card was answered with HTTP status {}",
            response.status().as_u16()
        )));
    }
    if response.status() != reqwest::StatusCode::OK {
        return Err(upstream(
            "model.a2a.url",
            format!(
                "its card could not be read (HTTP status {})",
                response.status().as_u16()
            ),
        ));
    }
    let bytes = crate::net::client::read_bounded(&mut response, MAX_CARD_BYTES)
        .await
        .map_err(|e| match e {
            crate::net::client::BodyError::TooLarge => upstream(
                "model.a2a.url",
                format!("its card is larger than {MAX_CARD_BYTES} bytes"),
            ),
            crate::net::client::BodyError::Broken(e) => upstream(
                "model.a2a.url",
                format!("its card broke off ({})", unreachable_reason(&e)),
            ),
        })?;
    String::from_utf8(bytes).map_err(|_| upstream("model.a2a.url", "its card is not UTF-8"))
}

/// Verifies the card with the policy's keys, unless the policy dangerously accepts it
/// unsigned. A signature that fails against the keys given is refused in every case.
fn verify(settings: &UpstreamSettings, card_text: &str) -> Result<(), BackendSetupError> {
    let mut keys = crate::jose::verify::TrustedKeys::new();
    if let Some(path) = &settings.card_jwks_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            upstream(
                "model.a2a.card_jwks_file",
                format!("the key set cannot be read ({})", e.kind()),
            )
        })?;
        keys.add_jwks(&text)
            .map_err(|e| upstream("model.a2a.card_jwks_file", e.to_string()))?;
    }
    if let Some(var) = &settings.card_secret_env {
        let secret = std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| BackendSetupError::MissingVariable {
                var: var.clone(),
                setting: "model.a2a.card_secret_env",
            })?;
        keys.add_secret_arg(&secret).map_err(|_| {
            upstream(
                "model.a2a.card_secret_env",
                "must hold KID=BASE64URL with a key of at least 32 bytes",
            )
        })?;
    }
    if keys.is_empty() {
        if !settings.dangerous_accept_unsigned_card {
            return Err(upstream(
                "model.a2a.card_jwks_file",
                "the keys named hold no usable key, so the agent's card cannot be verified",
            ));
        }
        tracing::warn!(
            "model.a2a.dangerous_accept_unsigned_card is on and no keys are named: the agent's card is used unverified"
        );
        return Ok(());
    }
    match crate::jose::verify::verify_card(card_text, &keys) {
        Ok(verified) => {
            tracing::info!(kid = %verified.kid, alg = %verified.alg, "the upstream agent's card is verified");
            Ok(())
        }
        Err(crate::jose::verify::VerifyError::NoSignature)
            if settings.dangerous_accept_unsigned_card =>
        {
            tracing::warn!(
                "the upstream agent's card carries no signature; used unverified (model.a2a.dangerous_accept_unsigned_card)"
            );
            Ok(())
        }
        Err(e) => Err(upstream(
            "model.a2a.url",
            format!("its card is not verified by the keys the policy names: {e}"),
        )),
    }
}

/// The card's JSON-RPC interface, which must be on the policy's origin.
fn card_rpc_url(card: &Value, base: &str) -> Result<String, BackendSetupError> {
    let interface = card["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["protocolBinding"] == "JSONRPC")
        .ok_or_else(|| {
            upstream(
                "model.a2a.url",
                "its card advertises no JSON-RPC interface (supportedInterfaces)",
            )
        })?;
    if let Some(version) = interface["protocolVersion"].as_str()
        && !version.starts_with("1.")
    {
        return Err(upstream(
            "model.a2a.url",
            format!("its JSON-RPC interface speaks A2A {version:?}; the a2a backend speaks 1.0"),
        ));
    }
    let url = interface["url"]
        .as_str()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .ok_or_else(|| upstream("model.a2a.url", "its JSON-RPC interface URL is not a URL"))?;
    let base = reqwest::Url::parse(base).map_err(|_| upstream("model.a2a.url", "is not a URL"))?;
    if url.origin() != base.origin() {
        return Err(upstream(
            "model.a2a.rpc_url",
            format!(
                "the card's JSON-RPC interface is on another origin ({}); name the endpoint to use in model.a2a.rpc_url",
                url.origin().ascii_serialization()
            ),
        ));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interface_on_another_origin_is_refused() {
        let card = json!({"supportedInterfaces": [
            {"url": "https://public.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let error = card_rpc_url(&card, "http://10.0.0.7:9999").unwrap_err();
        assert!(error.to_string().contains("model.a2a.rpc_url"), "{error}");
        let same = json!({"supportedInterfaces": [
            {"url": "http://10.0.0.7:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        assert_eq!(
            card_rpc_url(&same, "http://10.0.0.7:9999").unwrap(),
            "http://10.0.0.7:9999/"
        );
        let old = json!({"supportedInterfaces": [
            {"url": "http://10.0.0.7:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert!(card_rpc_url(&old, "http://10.0.0.7:9999").is_err());
    }

    #[test]
    fn an_agent_error_keeps_its_code_only() {
        let answer = json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32001, "message": "internal detail", "data": {"secret": 1}}});
        assert_eq!(result_of(answer), Err(BackendError::Refused(-32001)));
    }

    #[test]
    fn parts_with_no_or_two_kinds_of_content_are_refused() {
        let answer = |part: Value| {
            serde_json::from_value::<SendResult>(json!({"message": {"parts": [part]}}))
        };
        for bad in [
            json!({"mediaType": "text/plain"}),
            json!({"text": "a", "url": "https://x"}),
            json!({"data": null}),
        ] {
            assert!(answer(bad.clone()).is_err(), "{bad}");
        }
        let fine = answer(json!({"text": "fine"})).unwrap().message.unwrap();
        assert_eq!(fine.parts, [Part::text("fine")]);
    }
}
