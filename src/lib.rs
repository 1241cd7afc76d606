#![forbid(unsafe_code)]
#![doc = "peergate: a security-focused edge gateway for A2A 1.0 partner agents."]

pub mod a2a;
pub mod accept;
pub mod admin;
pub mod agent;
pub mod auth;
pub mod backend;
pub mod budget;
pub mod card;
pub mod cli;
pub mod client_addr;
pub mod clock;
pub mod document;
pub mod fetch;
pub mod fuzzing;
pub mod gate;
pub mod http;
pub mod jsonrpc;
pub mod jws;
pub mod keys;
pub mod limit;
pub mod metrics;
pub mod policy;
pub mod server;
pub mod shared;
pub mod store;
pub mod tls;
pub mod token;
pub mod verify;
