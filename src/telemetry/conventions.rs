//! Every span, attribute and metric name peergate's telemetry writes, in one place, with the
//! convention each follows. The A2A names are a draft and may still change: when they do, this
//! file is the one to edit.
//!
//! - A2A: the draft of `open-telemetry/semantic-conventions-genai` pull request 195
//!   (`model/a2a/`, as reviewed in June 2026), where `a2a.context.id` gave way to
//!   `gen_ai.conversation.id`.
//! - GenAI: OpenTelemetry's GenAI semantic conventions (development status), the client span of
//!   a model call and the agent attributes.
//! - RPC and HTTP: OpenTelemetry's RPC (`rpc.system.name`, development status) and HTTP (stable)
//!   semantic conventions, and `error.type` (stable).
//! - `peergate.*`: peergate's own, for what no convention names.

/// The conventions' version this file follows, written on every span's scope.
pub const SCHEMA: &str = "a2a-draft-pr195;gen_ai-development;rpc-development;http-1.26";

/// The instrumentation scope's name.
pub const SCOPE: &str = "peergate";

// A2A (draft).
/// The A2A operation (`SendMessage`).
pub const A2A_METHOD: &str = "a2a.method.name";
/// The protocol version the request named (`A2A-Version`).
pub const A2A_PROTOCOL_VERSION: &str = "a2a.protocol.version";
/// The binding: `jsonrpc`, `http_json` or `grpc`.
pub const A2A_BINDING: &str = "a2a.protocol.binding";
/// The extensions the request asked for (`A2A-Extensions`).
pub const A2A_REQUESTED_EXTENSIONS: &str = "a2a.protocol.requested_extensions";
/// The message's id.
pub const A2A_MESSAGE_ID: &str = "a2a.message.id";
/// The task's id.
pub const A2A_TASK_ID: &str = "a2a.task.id";
/// The task's state in the answer (`TASK_STATE_COMPLETED`).
pub const A2A_TASK_STATE: &str = "a2a.task.state";

// GenAI.
/// The context id (A2A's `contextId`).
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The agent's name, as its card names it.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// The operation: `chat` for a model call, `invoke_agent` for an agent's.
pub const GEN_AI_OPERATION: &str = "gen_ai.operation.name";
/// Who serves the model (`openai`).
pub const GEN_AI_PROVIDER: &str = "gen_ai.provider.name";
/// The model asked for.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Tokens in.
pub const GEN_AI_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Tokens out.
pub const GEN_AI_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// The prompt's text, only when the operator opts in (capped).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The answer's text, only when the operator opts in (capped).
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";

// RPC, HTTP, errors.
/// `jsonrpc` or `grpc` (the HTTP+JSON binding has none).
pub const RPC_SYSTEM: &str = "rpc.system.name";
/// `lf.a2a.v1.A2AService/SendMessage`, alike on every binding.
pub const RPC_METHOD: &str = "rpc.method";
/// The JSON-RPC request's id.
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// The JSON-RPC error code, or the gRPC status code, as a string.
pub const RPC_STATUS_CODE: &str = "rpc.response.status_code";
/// The HTTP status.
pub const HTTP_STATUS: &str = "http.response.status_code";
/// The HTTP method.
pub const HTTP_METHOD: &str = "http.request.method";
/// The route's template (`/a2a`), never a path with ids in it.
pub const HTTP_ROUTE: &str = "http.route";
/// Why it did not succeed: the refusal's reason, the A2A error's name, or the status.
pub const ERROR_TYPE: &str = "error.type";
/// The host a client span asked.
pub const SERVER_ADDRESS: &str = "server.address";
/// The client's address, only when the operator opts in.
pub const CLIENT_ADDRESS: &str = "client.address";

// peergate's own.
/// The peer's id (pseudonymous; never its name).
pub const PEER_ID: &str = "peergate.peer.id";
/// How it signed in: `peer_token`, `jwt`, `mtls`, ….
pub const AUTH_SCHEME: &str = "peergate.auth.scheme";
/// The refusal's stable reason (`/metrics`'s label).
pub const REFUSAL_REASON: &str = "peergate.refusal.reason";
/// The request id the answer's `X-Request-Id` carries (peergate's own).
pub const REQUEST_ID: &str = "peergate.request.id";
/// The request id the partner sent in its own `X-Request-Id`.
pub const PARTNER_REQUEST_ID: &str = "peergate.partner.request_id";
/// Events a stream carried.
pub const STREAM_EVENTS: &str = "peergate.stream.events";
/// The event name of a stream's first event.
pub const FIRST_EVENT: &str = "peergate.stream.first_event";
/// The partner's trace, when it was linked rather than continued.
pub const PARTNER_CONTEXT: &str = "peergate.partner_context";
/// The agent's own task id behind the door.
pub const UPSTREAM_TASK_ID: &str = "peergate.upstream.task.id";
/// The content guard's verdict on what the partner sent (`rule:action,…`, never what matched).
pub const CONTENT_INBOUND: &str = "peergate.content.inbound";
/// The content guard's verdict on the answer (`rule:action,…`).
pub const CONTENT_OUTBOUND: &str = "peergate.content.outbound";

// Span names other than the call's (which is the A2A method's name).
/// A push notification's delivery.
pub const PUSH_DELIVER: &str = "peergate.push.deliver";
/// Which attempt a push delivery's span is (1 for the first).
pub const PUSH_ATTEMPT: &str = "peergate.push.attempt";
/// The turn's write to the store.
pub const STORE_WRITE: &str = "peergate.store.write";
/// A round trip to the shared state (Redis).
pub const SHARED_ASK: &str = "peergate.shared.ask";

// Metrics, by the conventions' names (Prometheus spells the dots as underscores).
/// A call's duration, in seconds.
pub const METRIC_CALL_DURATION: &str = "rpc.server.call.duration";
/// A model call's duration, in seconds.
pub const METRIC_GEN_AI_DURATION: &str = "gen_ai.client.operation.duration";
/// Tokens a model call used, by `gen_ai.token.type`.
pub const METRIC_GEN_AI_TOKENS: &str = "gen_ai.client.token.usage";
/// Seconds from a stream's request to its first event.
pub const METRIC_FIRST_EVENT: &str = "a2a.server.stream.time_to_first_event";
/// A token count's type on `gen_ai.client.token.usage`: `input` or `output`.
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
/// How a call ended on `rpc.server.call.duration`: answered, streaming, refused, failed.
pub const CALL_OUTCOME: &str = "peergate.call.outcome";
/// The buckets of the duration histograms, in seconds (the Prometheus exposition's too).
pub const SECONDS_BOUNDARIES: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// The buckets of `gen_ai.client.token.usage`: the GenAI conventions' own.
pub const TOKEN_BOUNDARIES: [f64; 13] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
];
