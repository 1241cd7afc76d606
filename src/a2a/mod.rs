//! The A2A agent: the agent's turn and the Agent Card, over the protocol's objects and envelope
//! (`crate::protocol`).

pub mod agent;
pub mod answer_log;
pub mod authorize;
pub mod card;
pub mod card_settings;
pub mod denial_audit;
pub mod events;
pub mod inspect;
pub mod inspector;
pub mod jsonrpc_binding;
pub mod log_audit;
pub mod operation;
pub mod peer_card;
pub mod pipeline;
pub mod receipts;
pub mod resource_metadata;
pub mod service;
pub mod stages;
/// The protocol's objects, which live below everything that speaks them.
pub use crate::protocol::types;
