//! The call pipeline's named stages ([`CallStages`]): where the capabilities that decide about
//! or record one call attach, once for every binding. Each has a default that does nothing
//! ([`NoStages`] is every default); a pipeline with no stages attached skips them whole, so
//! they cost nothing without a capability (BENCHMARKS, "One call pipeline: A/B"). Attached,
//! each call pays three boxed futures and one [`CallView`] (a clone of the caller's peer, its
//! address, activated extensions and access note) before the stages' own work. The first to
//! fill one, the authorization policies' *authorize*, measured all of it with its decision:
//! +4.4 % on GetTask and +1.0 % on SendMessage with fifty policies (BENCHMARKS,
//! "Authorization policies: A/B"). The content guard's *inspect_request*, with the whole
//! starting pack: +1.0 % on GetTask and +3.3 % on SendMessage (BENCHMARKS, "The content
//! guard"). Several capabilities attach through [`Stacked`], each stage in their order.
//!
//! | stage | when | may |
//! |---|---|---|
//! | [`authorize`](CallStages::authorize) | after authentication and admission, before the operation | refuse |
//! | [`inspect_request`](CallStages::inspect_request) | the inbound request, before the operation | refuse, change |
//! | [`inspect_response`](CallStages::inspect_response) | the outbound answer | refuse, change |
//! | [`inspect_event`](CallStages::inspect_event) | each streamed event, as the binding reads it | change |
//! | [`seal`](CallStages::seal) | the answer that brings a task to a final state, as delivered | record |
//! | [`observe`](CallStages::observe) | once the call is answered, refused or its stream opened | record |

use crate::a2a::events::StreamEvent;
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::call::A2aCall;
use serde_json::value::RawValue;

/// What a stage knows of the call it sees: the binding and operation, who asks, from where,
/// with which extensions.
#[derive(Debug, Clone)]
pub struct CallView {
    /// The binding and the operation.
    pub call: A2aCall,
    /// The authenticated peer.
    pub peer: AuthenticatedPeer,
    /// Its address, when the listener knows it.
    pub client: Option<std::net::IpAddr>,
    /// The extensions the request activated.
    pub extensions: Vec<String>,
    /// What the access log writes of the request, when it is on.
    pub note: Option<std::sync::Arc<crate::layers::access_log::AccessNote>>,
    /// The request's span, when traces are exported.
    pub trace: Option<std::sync::Arc<crate::telemetry::CallSpan>>,
}

/// How a call ended, as *observe* sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// Answered in one piece.
    Answered,
    /// A stream opened; its events follow through *inspect_event*.
    Streaming,
    /// Refused, before or by the operation.
    Refused(&'a CallRefused),
}

/// The pipeline's stages. Every method has a default that lets the call through unchanged.
#[async_trait::async_trait]
pub trait CallStages: Send + Sync + 'static {
    /// May this peer do this operation with this request? Before the operation runs, so a
    /// refusal here reveals nothing about the tasks it names.
    async fn authorize(&self, _call: &CallView, _request: &A2aRequest) -> Result<(), CallRefused> {
        Ok(())
    }

    /// The inbound request (its message's parts) against the content rules.
    async fn inspect_request(
        &self,
        _call: &CallView,
        _request: &mut A2aRequest,
    ) -> Result<(), CallRefused> {
        Ok(())
    }

    /// The outbound answer, before the binding encodes it.
    async fn inspect_response(
        &self,
        _call: &CallView,
        _response: &mut A2aResponse,
    ) -> Result<(), CallRefused> {
        Ok(())
    }

    /// One streamed event, as the binding reads it to send.
    fn inspect_event(&self, _call: &CallView, event: StreamEvent) -> StreamEvent {
        event
    }

    /// The answer that brings a task to a final state, as the partner is sent it (the task's
    /// ProtoJSON for a blocking send or a cancel; the final `StreamResponse` of a stream).
    fn seal(&self, _call: &CallView, _delivered: &RawValue) {}

    /// The call's outcome, once.
    fn observe(&self, _call: &CallView, _outcome: Outcome<'_>) {}
}

/// Every stage as its default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStages;

impl CallStages for NoStages {}

/// Several capabilities' stages, each stage run in the order they are listed (authorization's
/// before the content guard's, so a denied call is never inspected).
pub struct Stacked(pub Vec<std::sync::Arc<dyn CallStages>>);

#[async_trait::async_trait]
impl CallStages for Stacked {
    async fn authorize(&self, call: &CallView, request: &A2aRequest) -> Result<(), CallRefused> {
        for stages in &self.0 {
            stages.authorize(call, request).await?;
        }
        Ok(())
    }

    async fn inspect_request(
        &self,
        call: &CallView,
        request: &mut A2aRequest,
    ) -> Result<(), CallRefused> {
        for stages in &self.0 {
            stages.inspect_request(call, request).await?;
        }
        Ok(())
    }

    async fn inspect_response(
        &self,
        call: &CallView,
        response: &mut A2aResponse,
    ) -> Result<(), CallRefused> {
        for stages in &self.0 {
            stages.inspect_response(call, response).await?;
        }
        Ok(())
    }

    fn inspect_event(&self, call: &CallView, event: StreamEvent) -> StreamEvent {
        (self.0.iter()).fold(event, |event, stages| stages.inspect_event(call, event))
    }

    fn seal(&self, call: &CallView, delivered: &RawValue) {
        for stages in &self.0 {
            stages.seal(call, delivered);
        }
    }

    fn observe(&self, call: &CallView, outcome: Outcome<'_>) {
        for stages in &self.0 {
            stages.observe(call, outcome);
        }
    }
}
