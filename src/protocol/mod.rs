//! The A2A 1.0 protocol's objects, its JSON-RPC envelope and the strict JSON reader, with
//! nothing of the gateway in them: the lowest folder of the
//! request path, which every part that speaks the protocol (the agent, the backends, the
//! cluster's event bus) can import without importing each other.

pub mod bytes;
pub mod call;
pub mod error;
pub mod grpc;
pub mod grpc_generated;
pub mod ids;
pub mod json;
pub mod jsonrpc;
pub mod operations;
pub mod request_id;
pub mod shown_text;
pub mod types;

/// The A2A protocol version this gateway speaks.
pub const VERSION: &str = "1.0";
