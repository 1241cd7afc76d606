//! The connections peergate makes, never the ones it takes: TLS for outgoing clients, reading a
//! bounded body, reading a Server-Sent Events stream, and what of a URL may be kept. It imports
//! nothing of the gateway, so the model backends, the key-set fetcher, push delivery and
//! `peergate call` all stand on it.

pub mod client;
pub mod event_stream;
pub mod tls;
pub mod url;
