//! The guard layers, outer to inner: the client address, the limits, authentication, the
//! protocol gate; and the metrics layer around them all. Each decides early and answers a
//! refusal through [`crate::http::refusal`].

pub mod auth;
pub mod client_addr;
pub mod gate;
pub mod limit;
pub mod metrics;
