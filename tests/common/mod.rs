//! Shared test support: a real peergate on 127.0.0.1 (in this process, or the built binary in
//! a child process), the real CLI, a real OpenAI-compatible model server on loopback that
//! records what it receives, policies edited as TOML, and the store engine the suites run on.
//!
//! Every test binary includes this module and uses only part of it, so unused items and
//! re-exports are expected.
#![allow(dead_code)]

mod cli;
mod flood;
mod gateway;
pub mod haproxy;
mod idp;
mod model;
mod otlp;
mod pki;
mod policy;
pub mod postgres;
mod process;
mod receiver;
pub mod redis;
mod rpc;
mod sdk;
mod store;
mod tls;
mod upstream;
mod watchdog;

#[allow(unused_imports)]
pub use self::{
    cli::*, flood::*, gateway::*, idp::*, model::*, otlp::*, pki::*, policy::*, process::*,
    receiver::*, rpc::*, sdk::*, store::*, tls::*, upstream::*, watchdog::*,
};

/// Says that a test skips what it cannot check here, and why, on a line `cargo test` shows
/// even for a test that passes (written to the process's standard error, past the test
/// harness's capture of `eprintln!`); under CI (`CI=true`) a skip is a failure instead.
pub fn skipped(why: &str) {
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{why}; CI must not skip it"
    );
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// Raises this process's soft open-files limit to its hard one, once. A test process holds
/// the gateways it starts and their clients, so both ends of every loopback connection, where
/// a deployed gateway holds one end and raises its own limit for it (`app::open_files`, to
/// what the policy's connections need, 1,280 by default). A flood of 1,024 connections, its
/// answers and a test running beside it can pass that: an `accept` short of a descriptor then
/// leaves its connection waiting in the backlog while the clients holding the descriptors
/// wait for answers, and nothing ends.
pub fn raise_open_files_limit() {
    static RAISED: std::sync::Once = std::sync::Once::new();
    RAISED.call_once(|| {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if limit.current != limit.maximum && setrlimit(Resource::Nofile, raised).is_err() {
            eprintln!("could not raise the open-files limit to its hard limit");
        }
    });
}

/// Installs the process-wide rustls provider for the tests' own HTTP clients
/// (`reqwest::Client::new()`). peergate never installs one: each of its clients is built on an
/// explicit configuration.
pub fn install_test_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A loopback listener for a test's outside server that counts the connections it accepts (a
/// good client keeps its connection: the count says how many it opened).
pub async fn counting_listener() -> (
    impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    let listener = listener.tap_io(move |_| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    (listener, addr, accepted)
}
