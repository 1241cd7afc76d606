//! The HTTP side: the accept loop, the router and its wiring, and the cached documents.

pub mod accept;
mod account_changes;
pub mod document;
pub mod ready;
pub mod rest;
pub mod server;
pub mod server_tls;
mod sharing;
pub mod sse;
pub mod stalled_writes;
