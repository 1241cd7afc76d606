//! The HTTP side: the accept loop, the router and its wiring, the one refusal map, the cached
//! documents, and TLS for the connections peergate makes.

pub mod accept;
mod account_changes;
pub mod client;
pub mod document;
pub mod event_stream;
pub mod ready;
pub mod rest;
pub mod server;
pub mod server_tls;
mod sharing;
pub mod sse;
pub mod stalled_writes;
pub mod tls;
