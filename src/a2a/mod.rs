//! The A2A protocol: its objects, the JSON-RPC envelope, the agent's turn, and the Agent Card.

pub mod agent;
pub mod card;
pub mod jsonrpc;
pub mod types;
