#![forbid(unsafe_code)]
#![doc = "peergate: a security-focused edge gateway for A2A 1.0 partner agents."]

pub mod a2a;
pub mod admin;
pub mod app;
pub mod authz;
pub mod backend;
pub mod cli;
pub mod clock;
pub mod config;
pub mod content;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod guard;
pub mod http;
pub mod jose;
pub mod layers;
pub mod locks;
pub mod net;
pub mod protocol;
pub mod push;
pub mod shared;
pub mod store;
pub mod telemetry;
pub mod tlog;
pub mod token;
pub mod units;
