//! Shared test support: a real peergate on 127.0.0.1 (in this process, or the built binary in
//! a child process), the real CLI, and a real OpenAI-compatible model server on loopback that
//! records what it receives.
#![allow(dead_code)]

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use peergate::clock::{Clock, ManualClock, SystemClock};
use peergate::config::{EMBEDDED_DEFAULT, Policy, PolicySource};
use peergate::http::server::{GatewayOptions, RunningGateway, start};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;
use tokio::sync::Notify;

/// The built `peergate` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_peergate")
}

/// Runs the CLI; returns (status code, stdout, stderr).
pub fn cli(args: &[&str]) -> (i32, String, String) {
    cli_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// Runs the CLI in `cwd`.
pub fn cli_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run peergate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the CLI with `input` on standard input.
pub fn cli_with_stdin(args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run peergate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Adds a peer through the real CLI and returns its token.
pub fn add_peer(data: &Path, name: &str) -> String {
    let (code, stdout, stderr) = cli(&["peer", "add", name, "--data", data.to_str().unwrap()]);
    assert_eq!(code, 0, "peer add failed: {stderr}");
    stdout.trim_end_matches('\n').to_owned()
}

/// The embedded default policy with `edit` applied to its text.
pub fn policy_with(edit: impl FnOnce(String) -> String) -> Policy {
    Policy::parse(&edit(EMBEDDED_DEFAULT.to_owned()), &PolicySource::Embedded).expect("policy")
}

/// Policy text with the credential cache off, so changes written by the CLI apply to the very
/// next request.
pub fn without_credential_cache(policy: String) -> String {
    policy.replace(
        "credential_cache_seconds = 2",
        "credential_cache_seconds = 0",
    )
}

/// A gateway running inside the test process.
pub struct TestGateway {
    pub addr: SocketAddr,
    /// The admin API's base URL.
    pub admin: String,
    pub door: String,
    pub data: TempDir,
    pub clock: ManualClock,
    running: Option<RunningGateway>,
}

impl TestGateway {
    /// Starts on the default policy (echo backend).
    pub async fn start() -> Self {
        Self::start_with(policy_with(|p| p)).await
    }

    /// Starts with `policy` on a fresh data directory, port 0 and a manual clock.
    pub async fn start_with(policy: Policy) -> Self {
        let data = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(SystemClock.now_millis());
        let running = start(GatewayOptions {
            policy,
            policy_source: PolicySource::Embedded,
            data_dir: data.path().to_owned(),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            admin_listen: Some("127.0.0.1:0".parse().unwrap()),
            clock: Arc::new(clock.clone()),
        })
        .await
        .expect("gateway starts");
        Self {
            addr: running.local_addr,
            admin: format!("http://{}", running.admin_addr),
            door: format!("http://{}/a2a/v1", running.local_addr),
            data,
            clock,
            running: Some(running),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Adds a peer with the real CLI against this gateway's store.
    pub fn add_peer(&self, name: &str) -> String {
        add_peer(self.data.path(), name)
    }

    /// Runs a CLI command against this gateway's data directory (`--data` is appended).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let mut args = args.to_vec();
        args.extend(["--data", self.data.path().to_str().unwrap()]);
        cli(&args)
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
        self.running
            .as_ref()
            .unwrap()
            .accounts()
            .revoke(&peergate::admin::Caller::operator(), name)
            .await
            .unwrap();
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
    }
}

/// Posts raw bytes to `url` with an optional bearer token; returns (status, body as JSON).
pub async fn post_raw(
    url: &str,
    token: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A JSON-RPC call that must come back as HTTP 200; returns the response object.
pub async fn rpc(url: &str, token: &str, request: Value) -> Value {
    let (status, body) = post_raw(url, Some(token), request.to_string()).await;
    assert_eq!(status, 200, "HTTP status for {request}: {body}");
    body
}

/// `SendMessage` with text parts; returns the response object.
pub async fn send_text(url: &str, token: &str, text: &str, context_id: Option<&str>) -> Value {
    let mut message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    });
    if let Some(context_id) = context_id {
        message["contextId"] = json!(context_id);
    }
    rpc(
        url,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
    )
    .await
}

/// The task of a successful `SendMessage` response.
pub fn task_of(response: &Value) -> &Value {
    response
        .pointer("/result/task")
        .unwrap_or_else(|| panic!("no task in {response}"))
}

/// The text of the agent's reply in a task.
pub fn reply_text(task: &Value) -> String {
    task.pointer("/status/message/parts/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no reply text in {task}"))
        .to_owned()
}

/// `GetTask`.
pub async fn get_task(url: &str, token: &str, id: &str, history_length: Option<i64>) -> Value {
    let mut params = json!({"id": id});
    if let Some(n) = history_length {
        params["historyLength"] = json!(n);
    }
    rpc(
        url,
        token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": params}),
    )
    .await
}

/// The error code of a JSON-RPC response.
pub fn error_code(response: &Value) -> i64 {
    response
        .pointer("/error/code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no error in {response}"))
}

/// How the fake model server behaves.
#[derive(Clone, Debug)]
pub enum ModelBehaviour {
    /// Answers `model says: <last user text>`.
    Answer,
    /// Waits this long before answering.
    Slow(Duration),
    /// Answers HTTP 500 with a body that must never reach a peer.
    ServerError,
    /// Answers 200 with a body that is not JSON.
    Malformed,
    /// Answers 200 with JSON that holds no choices.
    NoChoices,
    /// Answers 200 with a body over peergate's 4 MiB cap.
    Oversized,
    /// Holds each request until `release` is notified.
    Gated,
}

/// The secret the fake model puts in every failure body; it must never reach a peer.
pub const UPSTREAM_SECRET: &str = "upstream-internal-detail-7f3a";

#[derive(Clone)]
struct ModelState {
    behaviour: Arc<Mutex<ModelBehaviour>>,
    received: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    release: Arc<Notify>,
    arrived: Arc<Notify>,
    in_flight: Arc<Mutex<(usize, usize)>>,
}

/// A real HTTP server on loopback speaking the OpenAI chat-completions API.
pub struct FakeModel {
    pub base_url: String,
    state: ModelState,
}

impl FakeModel {
    pub async fn start(behaviour: ModelBehaviour) -> Self {
        peergate::http::tls::ensure_provider();
        let state = ModelState {
            behaviour: Arc::new(Mutex::new(behaviour)),
            received: Arc::default(),
            release: Arc::new(Notify::new()),
            arrived: Arc::new(Notify::new()),
            in_flight: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    pub fn set(&self, behaviour: ModelBehaviour) {
        *self.state.behaviour.lock().unwrap() = behaviour;
    }

    /// Request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Headers of the requests received so far.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.state
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Waits until a request has arrived (for `Gated`).
    pub async fn wait_for_arrival(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.state.arrived.notified())
            .await
            .expect("no request reached the model");
    }

    /// Lets one gated request answer.
    pub fn release_one(&self) {
        self.state.release.notify_one();
    }

    /// A policy using this server as the openai backend.
    pub fn policy(&self, timeout_seconds: u64) -> Policy {
        let base_url = self.base_url.clone();
        policy_with(move |p| {
            p.replace("backend = \"echo\"", "backend = \"openai\"")
                .replace(
                    "timeout_seconds = 60",
                    &format!("timeout_seconds = {timeout_seconds}"),
                )
                + &format!("\n[model.openai]\nbase_url = \"{base_url}\"\nmodel = \"test-model\"\n")
        })
    }
}

async fn chat(
    State(state): State<ModelState>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    state.received.lock().unwrap().push((headers, body.clone()));
    {
        let mut in_flight = state.in_flight.lock().unwrap();
        in_flight.0 += 1;
        in_flight.1 = in_flight.1.max(in_flight.0);
    }
    state.arrived.notify_one();
    let behaviour = state.behaviour.lock().unwrap().clone();
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let answer = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("model says: {last_user}")}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    });
    let response = match behaviour {
        ModelBehaviour::Answer => Json(answer).into_response(),
        ModelBehaviour::Slow(delay) => {
            tokio::time::sleep(delay).await;
            Json(answer).into_response()
        }
        ModelBehaviour::Gated => {
            state.release.notified().await;
            Json(answer).into_response()
        }
        ModelBehaviour::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{{\"error\":\"{UPSTREAM_SECRET}\"}}"),
        )
            .into_response(),
        ModelBehaviour::Malformed => {
            (StatusCode::OK, format!("{{\"choices\": [{UPSTREAM_SECRET}")).into_response()
        }
        ModelBehaviour::NoChoices => {
            Json(json!({"choices": [], "detail": UPSTREAM_SECRET})).into_response()
        }
        ModelBehaviour::Oversized => {
            let filler = "x".repeat(5 * 1024 * 1024);
            Json(json!({"choices": [{"message": {"content": filler}}]})).into_response()
        }
    };
    state.in_flight.lock().unwrap().0 -= 1;
    response
}

/// The `peergate serve` binary in a child process.
pub struct ServeProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin API's address.
    pub admin_addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl ServeProcess {
    /// Starts `peergate serve --listen 127.0.0.1:0 <extra>` in `cwd`, and waits for it to listen.
    pub fn start(cwd: &Path, extra: &[&str]) -> Self {
        Self::start_with_env(cwd, extra, &[])
    }

    /// Like [`ServeProcess::start`], with extra environment variables for the child only.
    pub fn start_with_env(cwd: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in_shell(cwd, "", extra, env)
    }

    /// Like [`ServeProcess::start_with_env`], with `setup` run by bash in the same process
    /// first (e.g. `ulimit -f 2048;`); the server then replaces the shell.
    pub fn start_in_shell(cwd: &Path, setup: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        peergate::http::tls::ensure_provider();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("{setup} exec \"$0\" \"$@\""))
            .arg(bin())
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(extra)
            .current_dir(cwd)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn peergate serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut admin_addr = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Logged before the address is handed over, so a test that has the address
                // also sees the line.
                let address_after = |marker: &str| {
                    line.split(marker).nth(1).map(|rest| {
                        rest.chars()
                            .take_while(|c| !matches!(c, ';' | ' '))
                            .collect::<String>()
                    })
                };
                let admin = address_after("admin API on http://");
                let addr = address_after("listening on http://");
                sink.lock().unwrap().push(line);
                if let Some(admin) = admin {
                    admin_addr = Some(admin);
                }
                if let Some(addr) = addr
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send((addr, admin_addr.take().unwrap_or_default()));
                }
            }
        });
        let (addr, admin_addr) = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("peergate did not start: {:?}", log.lock().unwrap()));
        Self {
            child,
            addr: addr.parse().unwrap(),
            admin_addr: admin_addr.parse().expect("admin API address in the log"),
            log,
        }
    }

    pub fn door(&self) -> String {
        format!("http://{}/a2a/v1", self.addr)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGKILL: nothing gets a chance to flush.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Starts `peergate serve` with a fresh peer, runs an official SDK client
/// (`program script --base-url … --token …`) against it, and returns the client's JSON summary
/// and the server's door URL.
pub fn run_sdk_client(program: &Path, script: &Path, peer: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, peer);
    let server = ServeProcess::start(dir.path(), &["--data", data.to_str().unwrap()]);
    let output = Command::new(program)
        .arg(script)
        .args([
            "--base-url",
            &format!("http://{}", server.addr),
            "--token",
            &token,
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} failed: {}\n{stdout}\nserver log:\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
    let summary = serde_json::from_str(stdout.trim()).expect("JSON summary");
    (summary, server.door())
}
