//! The HTTP side, inbound: the accept loop and TLS, the door's routes and the A2A bindings
//! over HTTP, the admin API's routes, streams of events, and the cached documents.

pub mod accept;
pub mod admin_api;
mod admin_policies;
mod answer_log;
#[cfg(test)]
mod binding_tests;
pub mod content_type;
pub mod document;
pub mod door;
pub mod grpc;
pub mod h2_watch;
pub mod metrics_listener;
pub mod ready;
pub mod rest;
pub mod server_tls;
pub mod sse;
pub mod stalled_writes;
