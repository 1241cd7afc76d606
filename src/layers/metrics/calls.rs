//! The series OpenTelemetry's semantic conventions name, beside peergate's own, so a standard
//! dashboard finds them (the dots of a convention's name are underscores in Prometheus's, its
//! unit a suffix): a call's duration by binding, operation and outcome; a model's or an agent's
//! call by operation, and the tokens it used; a stream's time to its first event. Every label
//! comes from a fixed list.

use super::histogram::{Histogram, SECONDS, TOKENS};
use super::peers::PeerCalls;
use crate::protocol::call::{Binding, CallOutcome, CallRecord};
use crate::protocol::jsonrpc::Method;
use crate::telemetry::metrics::Instruments;
use std::time::Duration;

/// What a backend's call was, as the GenAI conventions name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenAiOperation {
    /// A model's chat completion.
    Chat,
    /// An agent behind the door asked.
    InvokeAgent,
}

impl GenAiOperation {
    const ALL: [Self; 2] = [Self::Chat, Self::InvokeAgent];

    fn label(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::InvokeAgent => "invoke_agent",
        }
    }
}

const CALLS: usize = Binding::ALL.len() * Method::ALL.len() * CallOutcome::ALL.len();

/// The conventions' series.
#[derive(Debug)]
pub struct CallMetrics {
    /// `rpc.server.call.duration`, to the answer (a stream's: to its opening).
    calls: Vec<Histogram>,
    /// `gen_ai.client.operation.duration`, by operation.
    operations: [Histogram; 2],
    /// `gen_ai.client.token.usage`, by operation and token type (input, output).
    tokens: [[Histogram; 2]; 2],
    /// `a2a.server.stream.time_to_first_event`.
    first_event: Histogram,
    /// The calls by peer, when the policy asks for them.
    peers: std::sync::OnceLock<PeerCalls>,
    /// The same observations over OTLP, when metrics are exported.
    exported: std::sync::OnceLock<std::sync::Arc<Instruments>>,
}

impl Default for CallMetrics {
    fn default() -> Self {
        Self {
            calls: (0..CALLS).map(|_| Histogram::new(&SECONDS)).collect(),
            operations: std::array::from_fn(|_| Histogram::new(&SECONDS)),
            tokens: std::array::from_fn(|_| std::array::from_fn(|_| Histogram::new(&TOKENS))),
            first_event: Histogram::new(&SECONDS),
            peers: std::sync::OnceLock::new(),
            exported: std::sync::OnceLock::new(),
        }
    }
}

fn index(binding: Binding, method: Method, outcome: CallOutcome) -> usize {
    ((binding as usize * Method::ALL.len()) + method as usize) * CallOutcome::ALL.len()
        + outcome as usize
}

impl CallMetrics {
    /// A call answered after `took`.
    pub fn call(&self, record: &CallRecord, took: Duration) {
        let at = index(record.call.binding, record.call.method, record.outcome);
        if let Some(series) = self.calls.get(at) {
            series.observe(took.as_secs_f64());
        }
        if let (Some(peers), Some(peer)) = (self.peers.get(), &record.peer) {
            peers.call(peer, record, took);
        }
        if let Some(exported) = self.exported.get() {
            exported.call(record.call, record.outcome, took);
        }
    }

    /// Records every observation into `instruments` too, from now on.
    pub fn export_to(&self, instruments: std::sync::Arc<Instruments>) {
        let _ = self.exported.set(instruments);
    }

    /// Labels calls by peer from now on, the first `cap` peers with series of their own.
    pub fn label_peers(&self, cap: usize) {
        let _ = self.peers.set(PeerCalls::new(cap));
    }

    /// Whether calls are labelled by peer: a call's record then names its peer.
    pub fn by_peer(&self) -> bool {
        self.peers.get().is_some()
    }

    /// A backend's call of `operation` that took `took`, and the tokens it used when it
    /// answered (`(input, output)`).
    pub fn operation(&self, operation: GenAiOperation, took: Duration, tokens: Option<(u64, u64)>) {
        let at = operation as usize;
        self.operations[at].observe(took.as_secs_f64());
        if let Some(exported) = self.exported.get() {
            exported.operation(operation.label(), took, tokens);
        }
        if let Some((input, output)) = tokens {
            self.tokens[at][0].observe(input as f64);
            self.tokens[at][1].observe(output as f64);
        }
    }

    /// A stream's first event, `took` after its request arrived.
    pub fn first_event(&self, took: Duration) {
        self.first_event.observe(took.as_secs_f64());
        if let Some(exported) = self.exported.get() {
            exported.first_event(took);
        }
    }

    /// The series that counted anything.
    pub fn write(&self, out: &mut String) {
        out.push_str("# HELP rpc_server_call_duration_seconds A2A calls' duration to their answer (a stream's to its opening), by binding, operation and outcome.\n# TYPE rpc_server_call_duration_seconds histogram\n");
        for binding in Binding::ALL {
            for method in Method::ALL {
                for outcome in CallOutcome::ALL {
                    let labels = format!(
                        "a2a_protocol_binding=\"{}\",rpc_method=\"lf.a2a.v1.A2AService/{}\",outcome=\"{}\"",
                        binding.label(),
                        method.name(),
                        outcome.label()
                    );
                    self.calls[index(binding, method, outcome)].write(
                        out,
                        "rpc_server_call_duration_seconds",
                        &labels,
                    );
                }
            }
        }
        out.push_str("# HELP gen_ai_client_operation_duration_seconds The model's or the agent's time per call.\n# TYPE gen_ai_client_operation_duration_seconds histogram\n");
        out.push_str("# HELP gen_ai_client_token_usage Tokens per call, by type.\n# TYPE gen_ai_client_token_usage histogram\n");
        for operation in GenAiOperation::ALL {
            let labels = format!("gen_ai_operation_name=\"{}\"", operation.label());
            let at = operation as usize;
            self.operations[at].write(out, "gen_ai_client_operation_duration_seconds", &labels);
            for (kind, series) in ["input", "output"].iter().zip(&self.tokens[at]) {
                let labels = format!("{labels},gen_ai_token_type=\"{kind}\"");
                series.write(out, "gen_ai_client_token_usage", &labels);
            }
        }
        out.push_str("# HELP a2a_server_stream_time_to_first_event_seconds Time from a stream's request to its first event.\n# TYPE a2a_server_stream_time_to_first_event_seconds histogram\n");
        self.first_event
            .write(out, "a2a_server_stream_time_to_first_event_seconds", "");
        if let Some(peers) = self.peers.get() {
            peers.write(out);
        }
    }
}
