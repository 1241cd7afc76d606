//! Which A2A operation a request was, over which binding: what the service call learned, put on
//! the response for the metrics and the access log, so neither guesses from the path.

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
}

/// One A2A operation answered: a response extension the binding's handler sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct A2aCall {
    /// The binding it came over.
    pub binding: Binding,
    /// The operation.
    pub method: Method,
}

/// The JSON-RPC error code of an answer that is an error object under HTTP 200: a response
/// extension the JSON-RPC binding sets, for the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonRpcErrorCode(pub i64);

// A binding or method added without its place in `ALL` fails to compile here.
const _: () = assert!(Binding::Grpc as usize + 1 == Binding::ALL.len());
const _: () = assert!(Method::GetExtendedAgentCard as usize + 1 == Method::ALL.len());
