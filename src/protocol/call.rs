//! Which A2A operation a request was, over which binding, the task it named and how it ended:
//! what the call pipeline recorded, put on the response for the metrics and the access log, so
//! neither guesses from the path.

use super::jsonrpc::Method;

/// The standard bindings peergate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Binding {
    /// JSON-RPC 2.0 over HTTP.
    JsonRpc,
    /// HTTP+JSON (REST).
    HttpJson,
    /// gRPC.
    Grpc,
}

impl Binding {
    /// Every binding, in declaration order: `ALL[b as usize] == b`.
    pub const ALL: [Self; 3] = [Self::JsonRpc, Self::HttpJson, Self::Grpc];

    /// The label the metrics and the access log show.
    pub fn label(self) -> &'static str {
        match self {
            Self::JsonRpc => "jsonrpc",
            Self::HttpJson => "http_json",
            Self::Grpc => "grpc",
        }
    }

    /// The binding's name in the specification (`protocolBinding`): `JSONRPC`, `HTTP+JSON`,
    /// `GRPC`.
    pub fn protocol_name(self) -> &'static str {
        match self {
            Self::JsonRpc => "JSONRPC",
            Self::HttpJson => "HTTP+JSON",
            Self::Grpc => "GRPC",
        }
    }
}

/// One A2A operation asked, over one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct A2aCall {
    /// The binding it came over.
    pub binding: Binding,
    /// The operation.
    pub method: Method,
}

/// How a call ended, as the pipeline recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The operation answered in one piece.
    Answered,
    /// The operation answered with a stream, open when the call was recorded.
    Streaming,
    /// Refused before the operation ran, or by a stage around it (the protocol version, the
    /// token's scope, an operation that is off, a request that could not be read, a limit).
    Refused,
    /// The operation ran and answered with an error (a task not found, a busy context).
    Failed,
}

impl CallOutcome {
    /// Every outcome, in declaration order: `ALL[o as usize] == o`.
    pub const ALL: [Self; 4] = [Self::Answered, Self::Streaming, Self::Refused, Self::Failed];

    /// The label the access log shows.
    pub fn label(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::Streaming => "streaming",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }
}

/// One A2A call as the pipeline recorded it: a response extension every binding sets from
/// what the pipeline hands back, and the metrics and the access log read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// The binding and the operation.
    pub call: A2aCall,
    /// The task the call named or was answered with, when it has one (a stream's new task is
    /// not known when the stream opens).
    pub task: Option<Box<str>>,
    /// How it ended.
    pub outcome: CallOutcome,
    /// The peer's id, only when the metrics label calls by peer (`telemetry.peer_series`).
    pub peer: Option<std::sync::Arc<str>>,
    /// What else the call named or was answered with, for the access log and the traces.
    pub seen: Option<Box<CallSeen>>,
}

/// What a call named or was answered with besides its task: boxed on the record, so a call
/// that has none of it pays nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSeen {
    /// The context (the peer's `contextId`, or the one its task is in).
    pub context: Option<Box<str>>,
    /// The peer's message id.
    pub message: Option<Box<str>>,
    /// The task's state in the answer.
    pub state: Option<super::types::TaskState>,
}

/// The JSON-RPC error code of an answer that is an error object under HTTP 200: a response
/// extension the JSON-RPC binding sets, for the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonRpcErrorCode(pub i64);

// A binding, method or outcome added without its place in `ALL` fails to compile here.
const _: () = assert!(CallOutcome::Failed as usize + 1 == CallOutcome::ALL.len());
const _: () = assert!(Binding::Grpc as usize + 1 == Binding::ALL.len());
const _: () = assert!(Method::GetExtendedAgentCard as usize + 1 == Method::ALL.len());
