//! A real peergate on 127.0.0.1, running inside the test process on a runtime of its own (as
//! a server runs on its own, whatever the test's thread is doing: a test that blocks on the
//! command line, which waits for the server to apply its change, does not stop the server).

use super::cli::{add_peer, cli_on, cli_with_stdin_on};
use super::policy::PolicyEdit;
use super::store::TestStore;
use peergate::app::{GatewayOptions, RunningGateway, start};
use peergate::clock::{Clock, ManualClock, SystemClock};
use peergate::config::{Policy, PolicySource};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tempfile::TempDir;

/// Options for a gateway on `policy` with its state under `data` (in the suite's store
/// engine), listening on port 0 on loopback, on `clock`.
pub fn gateway_options(policy: Policy, data: &Path, clock: Arc<dyn Clock>) -> GatewayOptions {
    // The tests' own clients need a provider; peergate's clients bring their own.
    crate::common::install_test_crypto();
    crate::common::raise_open_files_limit();
    // A policy serving gRPC gets a port of its own too.
    let grpc_listen = policy.grpc.as_ref().map(|_| "127.0.0.1:0".parse().unwrap());
    GatewayOptions {
        policy,
        policy_source: PolicySource::Embedded,
        data_dir: TestStore::from_env().data_dir(data),
        store_url: TestStore::from_env().store_url(data),
        redis_url: None,
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        grpc_listen,
        clock,
        telemetry: None,
    }
}

/// A gateway running inside the test process.
pub struct TestGateway {
    pub addr: SocketAddr,
    /// The admin API's base URL.
    pub admin: String,
    pub door: String,
    /// The gRPC listener's address, when the policy serves gRPC.
    pub grpc: Option<SocketAddr>,
    /// The data directory; the store is in it or derived from it (see `store.rs`).
    pub data: TempDir,
    pub clock: ManualClock,
    running: Option<RunningGateway>,
    /// The runtime the gateway runs on.
    runtime: Option<tokio::runtime::Runtime>,
    /// Names the test to the watchdog while the gateway runs.
    _live: super::watchdog::Live,
}

impl TestGateway {
    /// Starts on the default policy (echo backend).
    pub async fn start() -> Self {
        Self::start_with(PolicyEdit::default().policy()).await
    }

    /// Starts with `policy` on a fresh store, port 0 and a manual clock.
    pub async fn start_with(policy: Policy) -> Self {
        let data = tempfile::tempdir().unwrap();
        std::fs::write(
            data.path().join("test-policy.toml"),
            policy.effective_text(),
        )
        .unwrap();
        let clock = ManualClock::new(SystemClock.now());
        let options = gateway_options(policy, data.path(), Arc::new(clock.clone()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = runtime
            .spawn(start(options))
            .await
            .unwrap()
            .expect("gateway starts");
        Self {
            addr: running.local_addr,
            admin: format!("http://{}", running.admin_addr),
            door: format!("http://{}/a2a/v1", running.local_addr),
            grpc: running.grpc_addr,
            data,
            clock,
            running: Some(running),
            runtime: Some(runtime),
            _live: super::watchdog::Live::new("a gateway in process"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The public Agent Card it serves, as JSON.
    pub async fn card(&self) -> serde_json::Value {
        reqwest::get(self.url("/.well-known/agent-card.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Adds a peer with the real CLI against this gateway's store.
    pub fn add_peer(&self, name: &str) -> String {
        add_peer(self.data.path(), name)
    }

    /// Binds an identity to a peer with the real CLI (`peer bind NAME ARGS… --policy` the
    /// gateway's policy), asserting it worked.
    pub fn bind(&self, peer: &str, identity: &[&str]) {
        let policy = self.policy_file();
        let mut args = vec!["peer", "bind", peer];
        args.extend_from_slice(identity);
        args.extend_from_slice(&["--policy", policy.to_str().unwrap()]);
        let (code, _, stderr) = self.cli(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }

    /// `/metrics` on the admin listener, as administrator `name`.
    pub async fn metrics_as(&self, name: &str, password: &str) -> String {
        reqwest::Client::new()
            .get(format!("{}/metrics", self.admin))
            .basic_auth(name, Some(password))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The gateway's policy as a file (written at start), for commands that read it.
    pub fn policy_file(&self) -> std::path::PathBuf {
        self.data.path().join("test-policy.toml")
    }

    /// Runs a CLI command against this gateway's store.
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        cli_on(self.data.path(), args)
    }

    /// Runs a CLI command against this gateway's store with `input` on standard input.
    pub fn cli_with_stdin(&self, args: &[&str], input: &str) -> (i32, String, String) {
        cli_with_stdin_on(self.data.path(), args, input)
    }

    /// Argon2 verifications so far.
    pub fn password_verifications(&self) -> u64 {
        self.running.as_ref().unwrap().password_verifications()
    }

    /// The most Argon2 verifications that ran at once.
    pub fn password_peak_concurrency(&self) -> usize {
        self.running.as_ref().unwrap().password_peak_concurrency()
    }

    /// Revokes a peer through the running server.
    pub async fn revoke_through_server(&self, name: &str) {
        let accounts = self.running.as_ref().unwrap().accounts().clone();
        let name = name.to_owned();
        self.runtime
            .as_ref()
            .unwrap()
            .spawn(async move {
                accounts
                    .change_peer(
                        &peergate::admin::Caller::operator(),
                        &name,
                        peergate::admin::PeerChange::Revoke,
                    )
                    .await
            })
            .await
            .unwrap()
            .unwrap();
    }

    pub async fn stop(mut self) {
        if let (Some(running), Some(runtime)) = (self.running.take(), self.runtime.as_ref()) {
            runtime.spawn(running.shutdown()).await.unwrap();
        }
    }

    /// Stops, keeping the data directory for what the test does next.
    pub async fn stop_keeping_data(mut self) -> TempDir {
        if let (Some(running), Some(runtime)) = (self.running.take(), self.runtime.as_ref()) {
            runtime.spawn(running.shutdown()).await.unwrap();
        }
        let data = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data, data)
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        // Dropped inside the test's runtime, which may not block.
        if let Some(runtime) = self.runtime.take() {
            drop(self.running.take());
            runtime.shutdown_background();
        }
    }
}
