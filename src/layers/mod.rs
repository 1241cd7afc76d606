//! The guard layers, outer to inner: the client address, the limits, authentication, the
//! protocol gate; and the metrics layer around them all. Each decides early; an HTTP refusal
//! is answered through [`crate::guard::refusal`], the gate's protocol errors as JSON-RPC errors
//! from [`crate::protocol::jsonrpc`]'s one table.

pub mod access_log;
pub mod auth;
pub mod client_addr;
pub mod cross_site;
pub mod gate;
pub mod limit;
pub mod metrics;
pub mod request_id;
pub mod trace;
