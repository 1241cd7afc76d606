//! A turn's second half: the task stored as working, the backend asked, its outcome stored
//! and told (the first half, admission and the plan, is `turn`).

use super::cancel::canceled_text;
use super::message::{conversation_id, failure_text, preface};
use super::recovery::{Sealed, UNFINISHED_TEXT, UnfinishedTask};
use super::turn::Turns;
use super::turn_task::{Outcome, TurnPlan};
use super::{internal, store_unavailable};
use crate::backend::{BackendError, Prompt};
use crate::layers::metrics::FinalState;
use crate::layers::metrics::GenAiOperation;
use crate::protocol::error::A2aError;
use crate::protocol::types::{self as a2a, TaskState};
use crate::store::{ConversationMessage, ConversationRole};
use crate::telemetry::call_span::ChildSpan;
use crate::telemetry::conventions as names;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use std::sync::Arc;
use std::time::Duration;

impl Turns {
    /// Stores the task as working and reads what the model will be asked. The returned guard
    /// fails the stored task if the turn ends before its final state is stored.
    pub(super) async fn store_working(
        &self,
        turn: &TurnPlan,
        fresh_context: bool,
    ) -> Result<(Prompt, UnfinishedTask, String), A2aError> {
        let peer = &turn.peer;
        // Stored before the model is asked: a store that cannot take it refuses the message
        // with nothing spent, and a crash from here on leaves a task that reads as failed
        // (interrupted) after the restart instead of one that never existed.
        let now = self.clock.now();
        let working = turn.task(TaskState::Working, &working_text(self.backend.what()), now);
        let working_json = serde_json::to_string(&working).map_err(internal)?;
        // Ready before the task is stored: whatever ends this turn early from here on (an
        // error, a panic, the future dropped) turns the stored task failed instead of leaving
        // it working.
        let failed_json =
            serde_json::to_string(&turn.task(TaskState::Failed, UNFINISHED_TEXT, now))
                .map_err(internal)?;
        let heard = self
            .news
            .event(peer, &turn.task_id, TaskState::Working, &working_json);
        let mut exchange = turn.exchange(self, TaskState::Working, working_json.clone(), now);
        exchange.push_config = turn.push_config.clone();
        // What the receipt will state of the call, kept with the working state: a task failed
        // without this turn (a crash, this instance gone) is sealed from it.
        let sealed = match (&self.receipts, &turn.sealing) {
            (Some(receipts), Some(sealing)) => receipts
                .kept(sealing, peer)
                .map(|kept| Sealed::new(receipts.clone(), kept)),
            _ => None,
        };
        exchange.sealing = sealed.as_ref().map(|s| s.kept.clone());
        let writing = turn.child_span(names::STORE_WRITE, SpanKind::Internal, Vec::new());
        let saved = self.store.save_exchange(exchange).await;
        finish_span(writing, saved.is_err().then_some("store_unavailable"));
        saved.map_err(store_unavailable)?;
        self.news.announce(heard);
        self.news.wake_deliveries(turn);
        let unfinished = UnfinishedTask {
            store: self.store.clone(),
            clock: self.clock.clone(),
            task_id: turn.task_id.to_string(),
            failed_json,
            events: self.news.events().clone(),
            peer_id: turn.peer.id().clone(),
            sealed,
        };
        // A context peergate just named has no history yet: skip the read.
        let history = if fresh_context {
            Vec::new()
        } else {
            self.store
                .context_history(peer.id(), &turn.context_id, self.settings.context_messages)
                .await
                .map_err(internal)?
        };
        let prompt = Prompt {
            instructions: self.settings.instructions.clone(),
            preface: preface(peer.name()),
            history,
            text: turn.text.clone(),
            message_id: turn.message_id.to_string(),
            parts: turn.parts.clone(),
            message_metadata: turn.sent.message_metadata.clone(),
            request_metadata: turn.sent.request_metadata.clone(),
            extensions: turn.sent.extensions.clone(),
            conversation: conversation_id(peer.id(), &turn.context_id),
            continues: turn
                .continues
                .as_ref()
                .and_then(|c| c.upstream_task_id.clone()),
            agent_task: Arc::default(),
            may_be_canceled: self.settings.cancel_running,
            trace: self.backend_span(turn),
            caller: self
                .backend
                .asserts_callers()
                .then(|| Arc::new(caller_of(peer))),
            user: self
                .backend
                .names_users()
                .then(|| super::message::peer_pseudonym(peer.id())),
        };
        Ok((prompt, unfinished, working_json))
    }

    /// Asks the model once, within the one backend timeout, unless the peer cancels first;
    /// says how the turn ended.
    pub(super) async fn run_model(
        &self,
        turn: &TurnPlan,
        prompt: &Prompt,
        cancel: Option<tokio::sync::oneshot::Receiver<()>>,
        pieces: Option<&crate::backend::Pieces>,
    ) -> Outcome {
        let started = std::time::Instant::now();
        let asked = async {
            match pieces {
                Some(pieces) => self.backend.complete_streaming(prompt, pieces).await,
                None => self.backend.complete(prompt).await,
            }
        };
        let call = tokio::time::timeout(self.settings.backend_timeout, asked);
        let answer = match cancel {
            None => Some(call.await),
            // A sender dropped without a word is no cancellation: only `Ok` stops the call.
            Some(canceled) => tokio::select! {
                answer = call => Some(answer),
                Ok(()) = canceled => None,
            },
        };
        let took = started.elapsed();
        self.metrics.backend_latency(took);
        let operation = match self.backend.what() {
            "agent" => GenAiOperation::InvokeAgent,
            _ => GenAiOperation::Chat,
        };
        let tokens = match &answer {
            Some(Ok(Ok(completion))) => Some((
                completion.usage.prompt_tokens,
                completion.usage.completion_tokens,
            )),
            _ => None,
        };
        self.metrics.calls().operation(operation, took, tokens);
        if let Some(span) = &prompt.trace {
            // With outbound content rules, the answer as the backend wrote it is not what may
            // leave: the span carries no text of it.
            let shown = self.content.is_none();
            finish_backend_span(span, (turn, shown), answer.as_ref());
        }
        // Stopped, timed out or failed: the agent's task (the one it named, or the one this
        // message continued) is canceled, so it does not go on for nobody.
        if !matches!(answer, Some(Ok(Ok(_)))) {
            let agent_task = prompt.agent_task.get().or(prompt.continues.as_ref());
            self.cancel_agent_task(turn, agent_task.map(String::as_str))
                .await;
        }
        let Some(answer) = answer else {
            // Dropping the call stopped it; what it cost is unknown, so the turn counts as a
            // request with no tokens.
            return Outcome {
                state: TaskState::Canceled,
                reply: canceled_text(self.backend.what()),
                messages: Vec::new(),
                usage: Some(self.spent(turn, 0)),
                audit: None,
                agent_reply: None,
                withheld: false,
            };
        };
        self.outcome_of(turn, answer.unwrap_or(Err(BackendError::Timeout)))
            .await
    }

    /// The client span of this turn's call to the backend, when traces are exported (with the
    /// prompt's text when the operator opted in).
    fn backend_span(&self, turn: &TurnPlan) -> Option<Arc<ChildSpan>> {
        let trace = turn.trace.as_ref()?;
        let traced = self.backend.traced();
        let mut attributes: Vec<KeyValue> = traced
            .attributes
            .into_iter()
            .map(|(key, value)| KeyValue::new(key, value))
            .collect();
        if let Some(text) = trace.content(&turn.text) {
            attributes.push(KeyValue::new(names::GEN_AI_INPUT_MESSAGES, text));
        }
        Some(Arc::new(trace.child(
            traced.name,
            SpanKind::Client,
            attributes,
        )))
    }

    /// How a turn ended, from the model's answer or failure.
    async fn outcome_of(
        &self,
        turn: &TurnPlan,
        answer: Result<crate::backend::Completion, BackendError>,
    ) -> Outcome {
        match answer {
            Ok(mut completion) => {
                let tokens = completion
                    .usage
                    .prompt_tokens
                    .saturating_add(completion.usage.completion_tokens);
                if self.inspected(turn, &mut completion).await {
                    return self.withheld(turn, completion, tokens);
                }
                Outcome {
                    state: completion
                        .reply
                        .as_ref()
                        .map_or(TaskState::Completed, |reply| reply.state),
                    agent_reply: completion.reply.clone(),
                    withheld: false,
                    messages: vec![
                        peer_message(turn),
                        ConversationMessage {
                            role: ConversationRole::Agent,
                            text: completion.text.clone(),
                            parts: Some(answer_kept(&completion)),
                        },
                    ],
                    reply: completion.text,
                    usage: Some(self.spent(turn, tokens)),
                    audit: None,
                }
            }
            Err(error) => {
                let said = error.of(self.backend.what());
                tracing::warn!(task_id = %turn.task_id, peer = %turn.peer.name(), error = said, "backend gave no answer");
                Outcome {
                    state: TaskState::Failed,
                    reply: failure_text(self.backend.what(), &error),
                    messages: Vec::new(),
                    usage: None,
                    audit: None,
                    agent_reply: None,
                    withheld: false,
                }
            }
        }
    }

    /// The answer through the content guard's outbound rules, masked in place (an agent's
    /// text read again from what its parts became); whether it is withheld.
    async fn inspected(
        &self,
        turn: &TurnPlan,
        completion: &mut crate::backend::Completion,
    ) -> bool {
        let Some(guard) = &self.content else {
            return false;
        };
        let client = turn
            .client
            .map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        let noted = crate::a2a::inspect::Noted {
            peer: &turn.peer,
            note: turn.note.as_deref(),
            trace: turn.trace.as_deref(),
            client: &client,
        };
        let inspected = match &mut completion.reply {
            Some(reply) => {
                let answer = (None, &mut reply.parts[..], &mut reply.artifacts[..]);
                let inspected = guard.outbound(noted, answer).await;
                if inspected.verdict.masked() {
                    completion.text = crate::backend::reply_text(&reply.parts, &reply.artifacts);
                }
                inspected
            }
            None => {
                let answer = (Some(&mut completion.text), &mut [][..], &mut [][..]);
                guard.outbound(noted, answer).await
            }
        };
        inspected.withheld
    }

    /// A turn whose answer the content rules deny: FAILED with a neutral message, its tokens
    /// counted, and the answer kept out of the conversation unless the operator keeps evidence.
    fn withheld(
        &self,
        turn: &TurnPlan,
        completion: crate::backend::Completion,
        tokens: u64,
    ) -> Outcome {
        let mut messages = vec![peer_message(turn)];
        if self
            .content
            .as_ref()
            .is_some_and(|guard| guard.keeps_denied_answers())
        {
            messages.push(ConversationMessage {
                role: ConversationRole::Withheld,
                text: completion.text.clone(),
                parts: Some(answer_kept(&completion)),
            });
        }
        Outcome {
            state: TaskState::Failed,
            reply: WITHHELD_TEXT.to_owned(),
            messages,
            usage: Some(self.spent(turn, tokens)),
            audit: None,
            agent_reply: None,
            withheld: true,
        }
    }

    /// `tokens` the turn spent, counted against its owner's and peer's budgets.
    fn spent(&self, turn: &TurnPlan, tokens: u64) -> crate::store::ExchangeUsage {
        let peer = &turn.peer;
        (self.budgets).record(peer.owner_id(), peer.id(), tokens, turn.spending.as_ref())
    }

    /// Stops the agent's side of a turn that was canceled or timed out, if the agent behind the
    /// door said which task it is (bounded: the peer's answer does not wait long for it).
    pub(super) async fn cancel_agent_task(&self, turn: &TurnPlan, agent_task: Option<&str>) {
        let Some(agent_task) = agent_task else {
            return;
        };
        // Bounded by the backend's timeout too, so the request timeout (more than 2.5 times
        // it) still covers the call, the cancel and storing the answer.
        let wait = Duration::from_secs(5).min(self.settings.backend_timeout);
        let caller = self
            .backend
            .asserts_callers()
            .then(|| caller_of(&turn.peer));
        let cancel = self.backend.cancel(agent_task, caller.as_ref());
        let canceled = tokio::time::timeout(wait, cancel).await;
        if !matches!(canceled, Ok(Ok(()))) {
            tracing::warn!(task_id = %turn.task_id, "the agent behind the door did not confirm the cancel");
        }
    }

    /// Stores the task's final state with what the turn adds (messages, usage, an audit record),
    /// then answers with it.
    pub(super) async fn finish(
        &self,
        turn: &TurnPlan,
        outcome: Outcome,
        unfinished: Option<UnfinishedTask>,
    ) -> Result<a2a::StoredTask, A2aError> {
        let state = outcome.state;
        let now = self.clock.now();
        let task = match &outcome.agent_reply {
            // An agent's answer as it gave it; a direct message is kept as a completed task
            // whose artifact is that message.
            Some(reply) => {
                let parts = if reply.parts.is_empty() {
                    let text = if outcome.reply.is_empty() {
                        format!("The agent behind this gateway answered {}.", state.as_str())
                    } else {
                        outcome.reply.clone()
                    };
                    vec![a2a::Part::text(text)]
                } else {
                    reply.parts.clone()
                };
                let artifacts = (!reply.as_message).then(|| reply.artifacts.clone());
                turn.task_with(state, parts, artifacts, now)
            }
            None => turn.task(state, &outcome.reply, now),
        };
        let mut task = task;
        let mut receipt = None;
        if let (Some(receipts), Some(sealing)) = (&self.receipts, &turn.sealing)
            && state.is_final()
        {
            // Sealed before it is written: the receipt is stored with the state it proves.
            let upstream = (outcome.agent_reply.as_ref())
                .map(|reply| (reply.task_id.as_deref(), reply.evidence.as_ref()));
            receipt = receipts.seal(sealing, (&turn.peer, upstream), &mut task, now)?;
        }
        // Encoded once: the stored copy is also the answer.
        let task_json = serde_json::to_string(&task).map_err(internal)?;
        let answer = a2a::StoredTask::new(task, task_json.clone()).map_err(internal)?;
        let heard = self
            .news
            .event(&turn.peer, &turn.task_id, state, &task_json);
        let mut finished = turn.exchange(self, state, task_json, now);
        finished.messages = outcome.messages;
        finished.usage = outcome.usage;
        finished.audit = outcome.audit;
        finished.receipt = receipt;
        finished.upstream_task_id = outcome.agent_reply.and_then(|reply| reply.task_id);
        if let Some(agent_task) = &finished.upstream_task_id {
            turn.note_agent_task(agent_task);
        }
        if unfinished.is_none() {
            // Refused before a working state was stored: this is the task's first state.
            finished.push_config = turn.push_config.clone();
        }
        let writing = turn.child_span(names::STORE_WRITE, SpanKind::Internal, Vec::new());
        let saved = self.store.save_exchange(finished).await;
        finish_span(writing, saved.is_err().then_some("store_unavailable"));
        saved.map_err(internal)?;
        self.news.announce(heard);
        self.news.wake_deliveries(turn);
        if let Some(mut stored) = unfinished {
            stored.finished();
        }
        if state.is_final() {
            self.metrics.task_finished(match state {
                TaskState::Completed => FinalState::Completed,
                TaskState::Rejected => FinalState::Rejected,
                TaskState::Canceled => FinalState::Canceled,
                _ => FinalState::Failed,
            });
        }
        Ok(answer)
    }
}

/// The agent's message of a task whose backend call is under way; `what` the backend is
/// ("model", or "agent").
pub(super) fn working_text(what: &str) -> String {
    format!("The {what} is being asked.")
}

/// Ends the backend's span with what its call came to: the tokens, the answer's text when the
/// operator opted in (and it may be `shown`: no outbound content rule reads it), or why there
/// was none.
fn finish_backend_span(
    span: &ChildSpan,
    (turn, shown): (&TurnPlan, bool),
    answer: Option<
        &Result<Result<crate::backend::Completion, BackendError>, tokio::time::error::Elapsed>,
    >,
) {
    let failure = match answer {
        None => Some("canceled"),
        Some(Err(_)) => Some("timeout"),
        Some(Ok(Err(_))) => Some("backend_failed"),
        Some(Ok(Ok(completion))) => {
            let usage = completion.usage;
            let mut attributes = vec![
                KeyValue::new(names::GEN_AI_INPUT_TOKENS, usage.prompt_tokens as i64),
                KeyValue::new(names::GEN_AI_OUTPUT_TOKENS, usage.completion_tokens as i64),
            ];
            let content = (turn.trace.as_ref())
                .filter(|_| shown)
                .and_then(|t| t.content(&completion.text));
            if let Some(text) = content {
                attributes.push(KeyValue::new(names::GEN_AI_OUTPUT_MESSAGES, text));
            }
            span.note(attributes);
            None
        }
    };
    span.finish(failure);
}

/// Ends a child span, as failed with `failure` when given.
fn finish_span(span: Option<ChildSpan>, failure: Option<&'static str>) {
    if let Some(span) = span {
        span.finish(failure);
    }
}

/// Who is calling, as the assertion the agent behind the door gets states it.
pub(super) fn caller_of(
    peer: &crate::layers::auth::AuthenticatedPeer,
) -> crate::jose::caller::Caller {
    use crate::guard::scopes::OperationScope;
    crate::jose::caller::Caller {
        peer_id: peer.id().to_string(),
        peer_name: peer.name().to_owned(),
        owner: peer.owner_id().to_string(),
        scheme: peer.scheme().policy_name(),
        identity: peer
            .issuer()
            .zip(peer.subject())
            .map(|(issuer, subject)| (issuer.to_owned(), subject.to_owned())),
        scopes: OperationScope::ALL
            .into_iter()
            .filter(|scope| peer.may(*scope))
            .map(OperationScope::as_str)
            .collect(),
    }
}

/// The answer as the conversation keeps it: an agent's parts and artifacts, or a model's text.
fn answer_kept(completion: &crate::backend::Completion) -> String {
    match &completion.reply {
        Some(reply) => super::kept::kept_answer(&reply.parts, &reply.artifacts),
        None => super::kept::kept_text(&completion.text),
    }
}

/// The agent's message of a task whose answer the content rules withheld: neutral, naming no
/// rule (the partner did not write the answer, and the rules are the operator's).
const WITHHELD_TEXT: &str =
    "The answer could not be delivered: it did not pass the gateway's content rules.";

/// The partner's message as the conversation keeps it (every part, as the backend read it).
fn peer_message(turn: &TurnPlan) -> ConversationMessage {
    ConversationMessage {
        role: ConversationRole::Peer,
        text: turn.text.clone(),
        parts: Some(turn.kept.clone()),
    }
}
