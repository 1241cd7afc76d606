//! The A2A protocol: its objects, the JSON-RPC envelope, the agent's turn, and the Agent Card.

pub mod agent;
pub mod card;
pub mod jsonrpc;
/// The protocol's objects, which live below everything that speaks them.
pub use crate::protocol::types;
