//! The call pipeline: every A2A call, over every binding, passes [`Pipeline::call`] between
//! the binding's decoding and its encoding, and only there is decided what is decided about one
//! call (as a2a-python's `RequestHandler` is the one handler its transports adapt to).
//!
//! ```text
//! binding: bytes → (Method, Result<A2aRequest, A2aError>)
//!   admit      the protocol version and required extensions (read by the gate, carried by
//!              the caller), the token's scope, the operation offered, the request readable,
//!              the shared admission settled (a turn settles it itself, with its lock and spend)
//!   authorize  stages::authorize
//!   inspect    stages::inspect_request
//!   run        the operation, in a task of its own; a panic is an internal error
//!   inspect    stages::inspect_response, and each streamed event (stages::inspect_event)
//!   seal       stages::seal, on the answer that brings a task to a final state
//!   observe    stages::observe, once, with the outcome
//! binding: Result<A2aResponse, CallRefused> → bytes
//! ```

use crate::a2a::events::{EventTap, StreamEvent};
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::service::{A2aService, Caller};
use crate::a2a::stages::{CallStages, CallView, Outcome};
use crate::guard::refusal::Refusal;
use crate::protocol::call::{A2aCall, Binding};
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::Method;
use std::sync::Arc;

/// The service every binding calls, with the stages every call passes.
#[derive(Clone)]
pub struct Pipeline {
    service: Arc<dyn A2aService>,
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
            stages: None,
        }
    }

    /// The same pipeline with `stages`.
    pub fn with_stages(mut self, stages: Arc<dyn CallStages>) -> Self {
        self.stages = Some(stages);
        self
    }

    /// Answers one call from `caller`.
    pub async fn call(&self, caller: Caller, asked: Asked) -> Result<A2aResponse, CallRefused> {
        let Some(stages) = &self.stages else {
            // No stage attached: admit and run, and nothing is built for stages.
            let request = self.admit(&caller, asked).await?;
            return self.run(caller, request).await;
        };
        let view = CallView {
            call: A2aCall {
                binding: asked.binding,
                method: asked.method,
            },
            peer: caller.peer.clone(),
        };
        let answered = self.answer(stages, caller, &view, asked).await;
        let outcome = match &answered {
            Ok(A2aResponse::Events(_)) => Outcome::Streaming,
            Ok(_) => Outcome::Answered,
            Err(refused) => Outcome::Refused(refused),
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
    ) -> Result<A2aResponse, CallRefused> {
        let mut request = self.admit(&caller, asked).await?;
        stages.authorize(view, &request).await?;
        stages.inspect_request(view, &mut request).await?;
        let mut response = self.run(caller, request).await?;
        stages.inspect_response(view, &mut response).await?;
        if let Some(task) = response.final_task(view.call.method) {
            stages.seal(view, task.json());
        }
        Ok(match response {
            A2aResponse::Events(events) => A2aResponse::Events(events.tapped(Arc::new(Tap {
                stages: stages.clone(),
                view: view.clone(),
            }))),
            other => other,
        })
    }

    /// The protocol version and required extensions, the token's scope, the operation
    /// offered, the request read, then (for any operation but a turn, which settles it with
    /// its lock and spend) the shared admission.
    async fn admit(&self, caller: &Caller, asked: Asked) -> Result<A2aRequest, CallRefused> {
        if let Some(refused) = &caller.protocol.refused {
            return Err(CallRefused::Protocol(refused.clone()));
        }
        if let Some(scope) = asked.method.scope()
            && !caller.peer.may(scope)
        {
            return Err(CallRefused::Guard(Refusal::InsufficientScope { scope }));
        }
        self.service.offered(asked.method)?;
        let request = asked.request?;
        if request.message().is_none() {
            caller.admit(None, None).await?;
        }
        Ok(request)
    }

    /// The operation, in a task of its own: a client that hangs up (or a request timeout)
    /// cannot cut a turn between storing the task and storing its answer. A panic is logged
    /// under a request id and answered as an internal error naming it.
    async fn run(&self, caller: Caller, request: A2aRequest) -> Result<A2aResponse, CallRefused> {
        let service = self.service.clone();
        tokio::spawn(async move { request.run(service.as_ref(), &caller).await })
            .await
            .unwrap_or_else(|_| Err(A2aError::internal(&"a panic", "an operation panicked").into()))
    }
}

/// A stream's events through *inspect_event* and *seal* as the binding reads them.
struct Tap {
    stages: Arc<dyn CallStages>,
    view: CallView,
}

impl EventTap for Tap {
    fn event(&self, event: StreamEvent) -> StreamEvent {
        let event = self.stages.inspect_event(&self.view, event);
        if let Some(json) = event.final_response()
            && self.view.call.method == Method::SendStreamingMessage
        {
            self.stages.seal(&self.view, json);
        }
        event
    }
}
