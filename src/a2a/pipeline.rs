//! The call pipeline: every A2A call, over every binding, passes [`Pipeline::call`] between
//! the binding's decoding and its encoding, and only there is decided what is decided about one
//! call (as a2a-python's `RequestHandler` is the one handler its transports adapt to).
//!
//! ```text
//! binding: bytes → (Method, Result<A2aRequest, A2aError>)
//!   admit      the protocol version and required extensions (read by the gate, carried by
//!              the caller), the token's scope, the operation offered, the request readable,
//!              then the shared admission settled, before any refusal too (a turn settles it
//!              itself, with its lock and spend): a limit's refusal is the answer
//!   authorize  stages::authorize
//!   inspect    stages::inspect_request
//!   run        the operation, in a task of its own; a panic is an internal error
//!   inspect    stages::inspect_response, and each streamed event (stages::inspect_event)
//!   seal       stages::seal, on the answer that brings a task to a final state
//!   observe    stages::observe, once, with the outcome
//!   record     the call's binding, operation, task and outcome, for the metrics and the log
//! binding: Called { record, answer: Result<A2aResponse, CallRefused> } → bytes
//! ```

use crate::a2a::events::{EventTap, StreamEvent};
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::service::{A2aService, Caller};
use crate::a2a::stages::{CallStages, CallView, Outcome};
use crate::guard::admission::Admission;
use crate::guard::refusal::Refusal;
use crate::layers::metrics::Metrics;
use crate::protocol::call::{A2aCall, Binding, CallOutcome, CallRecord, CallSeen};
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::Method;
use crate::protocol::types::TaskState;
use std::sync::Arc;

/// The service every binding calls, with the stages every call passes.
#[derive(Clone)]
pub struct Pipeline {
    service: Arc<dyn A2aService>,
    /// Where a stream's time to its first event is counted.
    metrics: Option<Arc<Metrics>>,
    /// `None` while no capability has attached a stage; a call then pays nothing for them.
    stages: Option<Arc<dyn CallStages>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pipeline(…)")
    }
}

/// A call as a binding hands it over: the operation its request names, and the typed request
/// or why it could not be read (answered only once the caller may ask the operation at all).
#[derive(Debug)]
pub struct Asked {
    /// The binding it came over.
    pub binding: Binding,
    /// The operation.
    pub method: Method,
    /// The request, or why it could not be read.
    pub request: Result<A2aRequest, A2aError>,
}

impl Pipeline {
    /// Calls go to `service`, with no stage attached.
    pub fn new(service: Arc<dyn A2aService>) -> Self {
        Self {
            service,
            metrics: None,
            stages: None,
        }
    }

    /// The same pipeline, counting each stream's time to its first event in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same pipeline with `stages`.
    pub fn with_stages(mut self, stages: Arc<dyn CallStages>) -> Self {
        self.stages = Some(stages);
        self
    }

    /// Answers one call from `caller`, with the record of it the binding puts on its response.
    pub async fn call(&self, mut caller: Caller, asked: Asked) -> Called {
        let call = A2aCall {
            binding: asked.binding,
            method: asked.method,
        };
        caller.call = Some(call);
        let request = asked.request.as_ref().ok();
        let named = request.and_then(A2aRequest::task_id).map(Box::from);
        let mut seen = request
            .and_then(A2aRequest::message_ids)
            .map(|(message, context)| {
                Box::new(CallSeen {
                    context: context.map(Box::from),
                    message: Some(message.into()),
                    state: None,
                })
            });
        let peer = self
            .metrics
            .as_ref()
            .filter(|metrics| metrics.calls().by_peer())
            .map(|_| std::sync::Arc::from(caller.peer.id().as_str()));
        let answered = match &self.stages {
            // No stage attached: admit and run, and nothing is built for stages.
            None => self.plain(caller, asked).await,
            Some(stages) => self.staged(stages, caller, call, asked).await,
        };
        let (outcome, answer) = match answered {
            Ok(response @ A2aResponse::Events(_)) => (CallOutcome::Streaming, Ok(response)),
            Ok(response) => (CallOutcome::Answered, Ok(response)),
            Err((outcome, refused)) => (outcome, Err(refused)),
        };
        let answered_task = answer.as_ref().ok().and_then(A2aResponse::task_seen);
        let mut outcome = outcome;
        if let Some((context, state)) = answered_task {
            let seen = seen.get_or_insert_default();
            seen.context = Some(context.into());
            seen.state = Some(state);
            // A task answered as failed (the backend gave no answer, the agent failed it) is a
            // failure, however plain its 200.
            if state == TaskState::Failed && method_ran_a_turn(call.method) {
                outcome = CallOutcome::Failed;
            }
        }
        let task = answer.as_ref().ok().and_then(A2aResponse::task_id);
        Called {
            record: CallRecord {
                call,
                task: task.map(Box::from).or(named),
                outcome,
                peer,
                seen,
            },
            answer,
        }
    }

    /// A call with no stage attached: admitted, then run (a stream's events counted on the
    /// call's span when traces are exported).
    async fn plain(&self, caller: Caller, asked: Asked) -> Ended {
        let started = std::time::Instant::now();
        let request = self.admit(&caller, asked).await.map_err(refused)?;
        let trace = caller.trace.clone();
        let ran = self.run(caller, request).await;
        match (ran, self.watched(started, trace)) {
            (Ok(A2aResponse::Events(events)), Some(watched)) => {
                Ok(A2aResponse::Events(events.tapped(Arc::new(watched))))
            }
            (ran, _) => ran,
        }
    }

    /// What watches a stream's events, when anything does: its span counts them, the metrics
    /// count the time to the first.
    fn watched(
        &self,
        started: std::time::Instant,
        trace: Option<Arc<crate::telemetry::CallSpan>>,
    ) -> Option<Watched> {
        if trace.is_none() && self.metrics.is_none() {
            return None;
        }
        Some(Watched {
            trace,
            first: self.metrics.clone().map(|metrics| (started, metrics)),
            seen: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A call through the stages, *observe* last.
    async fn staged(
        &self,
        stages: &Arc<dyn CallStages>,
        caller: Caller,
        call: A2aCall,
        asked: Asked,
    ) -> Ended {
        let view = CallView {
            call,
            peer: caller.peer.clone(),
            client: caller.client,
            extensions: caller.protocol.activated.clone(),
            note: caller.note.clone(),
            trace: caller.trace.clone(),
        };
        let answered = self.answer(stages, caller, &view, asked).await;
        let outcome = match &answered {
            Ok(A2aResponse::Events(_)) => Outcome::Streaming,
            Ok(_) => Outcome::Answered,
            Err((_, refused)) => Outcome::Refused(refused),
        };
        stages.observe(&view, outcome);
        answered
    }

    /// The stages from *admit* to *seal*.
    async fn answer(
        &self,
        stages: &Arc<dyn CallStages>,
        caller: Caller,
        view: &CallView,
        asked: Asked,
    ) -> Ended {
        let started = std::time::Instant::now();
        let mut request = self.admit(&caller, asked).await.map_err(refused)?;
        let watched = self.watched(started, caller.trace.clone());
        if let Err(denied) = stages.authorize(view, &request).await {
            // A message's admission is its turn's to settle, and a denial never reaches the
            // turn: settled here, so a caller past its limit hears 429 as for any refusal.
            if request.message().is_some() {
                self.settled(&caller).await.map_err(refused)?;
            }
            return Err(refused(denied));
        }
        let inspected = stages.inspect_request(view, &mut request).await;
        inspected.map_err(refused)?;
        let mut response = self.run(caller, request).await?;
        let inspected = stages.inspect_response(view, &mut response).await;
        inspected.map_err(refused)?;
        if let Some(task) = response.final_task(view.call.method) {
            stages.seal(view, task.json());
        }
        Ok(match response {
            A2aResponse::Events(events) => A2aResponse::Events(events.tapped(Arc::new(Tap {
                stages: stages.clone(),
                view: view.clone(),
                watched,
            }))),
            other => other,
        })
    }

    /// The protocol version and required extensions, the token's scope and the operations the
    /// peer was given, the operation offered, the request read; then the shared admission, for a refusal too, so a caller
    /// past its limit hears 429 whatever else was wrong (a turn settles it itself, with its
    /// lock and spend, in the same one call).
    async fn admit(&self, caller: &Caller, asked: Asked) -> Result<A2aRequest, CallRefused> {
        match self.checked(caller, asked) {
            Ok(request) if request.message().is_some() => Ok(request),
            Ok(request) => self.settled(caller).await.map(|()| request),
            Err(refused) => Err(self.settled(caller).await.err().unwrap_or(refused)),
        }
    }

    /// What is decided about a call before its admission: see [`Self::admit`].
    fn checked(&self, caller: &Caller, asked: Asked) -> Result<A2aRequest, CallRefused> {
        if let Some(refused) = &caller.protocol.refused {
            return Err(CallRefused::Protocol(refused.clone()));
        }
        if let Some(scope) = asked.method.scope()
            && !caller.peer.may(scope)
        {
            return Err(CallRefused::Guard(Refusal::InsufficientScope { scope }));
        }
        // What its administrator gave the peer, like its token's scopes: decided before the
        // operation reads anything, so another peer's task cannot be told from none.
        if !caller.peer.may_call(asked.method) {
            let method = asked.method.name();
            return Err(CallRefused::Guard(Refusal::OperationNotAllowed { method }));
        }
        self.service.offered(asked.method)?;
        Ok(asked.request?)
    }

    /// The caller's shared admission settled (nothing to do in one process, where every
    /// limit was decided in front): the guard's 429 when a limit refuses.
    async fn settled(&self, caller: &Caller) -> Result<(), CallRefused> {
        let Some(admission) = &caller.admission else {
            return Ok(());
        };
        match admission.settle(None, None).await {
            Ok(_) => Ok(()),
            Err(limited) => Err(CallRefused::Guard(Refusal::RateLimited(limited))),
        }
    }

    /// A call its binding could not read as far as an operation (a JSON-RPC body that is not
    /// a request, a gRPC message that does not decode, a path with no operation): the guard's
    /// 429 when the caller's admission, settled now, refuses it; otherwise `None`, and the
    /// binding answers with what was wrong. Either way the admission is settled before the
    /// answer, as for every call.
    pub async fn unread(&self, caller: &Caller) -> Option<Refusal> {
        match self.settled(caller).await {
            Err(CallRefused::Guard(refusal)) => Some(refusal),
            _ => None,
        }
    }

    /// The operation, in a task of its own: a client that hangs up (or a request timeout)
    /// cannot cut a turn between storing the task and storing its answer. A panic is logged
    /// under a request id and answered as an internal error naming it.
    async fn run(&self, caller: Caller, request: A2aRequest) -> Ended {
        let service = self.service.clone();
        let admission = caller.admission.clone();
        let ran = crate::protocol::request_id::RequestId::spawn(async move {
            request.run(service.as_ref(), &caller).await
        })
        .await
        .unwrap_or_else(|_| Err(A2aError::internal(&"a panic", "an operation panicked").into()));
        // A turn settles the admission inside the service, which speaks the protocol's
        // errors only: the limit that refused is the guard's to answer, with its headers.
        if let Err(CallRefused::Protocol(A2aError::RateLimited { .. })) = &ran
            && let Some(limited) = admission.as_ref().and_then(Admission::refusal)
        {
            return Err(refused(CallRefused::Guard(Refusal::RateLimited(limited))));
        }
        ran.map_err(|failure| (CallOutcome::Failed, failure))
    }
}

/// A call as the pipeline ends it: the answer, or why there is none and how the call ended.
type Ended = Result<A2aResponse, (CallOutcome, CallRefused)>;

/// Refused before the operation ran, or by a stage.
fn refused(refused: CallRefused) -> (CallOutcome, CallRefused) {
    (CallOutcome::Refused, refused)
}

/// A call answered: what the binding encodes, and the record it puts on its response.
#[derive(Debug)]
pub struct Called {
    /// The call's record.
    pub record: CallRecord,
    /// The answer, or why there is none.
    pub answer: Result<A2aResponse, CallRefused>,
}

/// A stream's events, as the binding reads them: counted on the call's span, the first one's
/// time counted in the metrics.
struct Watched {
    trace: Option<Arc<crate::telemetry::CallSpan>>,
    first: Option<(std::time::Instant, Arc<Metrics>)>,
    seen: std::sync::atomic::AtomicBool,
}

impl EventTap for Watched {
    fn event(&self, event: StreamEvent) -> StreamEvent {
        if let Some(trace) = &self.trace {
            trace.stream_event();
        }
        if let Some((started, metrics)) = &self.first
            && !self.seen.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            metrics.calls().first_event(started.elapsed());
        }
        event
    }
}

/// A stream's events through *inspect_event* and *seal* as the binding reads them.
struct Tap {
    stages: Arc<dyn CallStages>,
    view: CallView,
    /// The span's event count and the first event's time, as on a call with no stage.
    watched: Option<Watched>,
}

impl EventTap for Tap {
    fn event(&self, event: StreamEvent) -> StreamEvent {
        let event = match &self.watched {
            Some(watched) => watched.event(event),
            None => event,
        };
        let event = self.stages.inspect_event(&self.view, event);
        if let Some(json) = event.final_response()
            && self.view.call.method == Method::SendStreamingMessage
        {
            self.stages.seal(&self.view, json);
        }
        event
    }
}

/// Whether `method`'s answer is the task a turn just ended (a read of a failed task is not a
/// failure of the read).
fn method_ran_a_turn(method: Method) -> bool {
    matches!(method, Method::SendMessage | Method::SendStreamingMessage)
}
