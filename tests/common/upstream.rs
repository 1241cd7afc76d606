//! A real A2A agent on loopback, on the official Python SDK (`tests/interop/a2a_python_upstream.py`),
//! for the `a2a` backend to stand in front of.

use super::cli::repo_root;
use super::policy::PolicyEdit;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The credential the agent expects from peergate.
pub const UPSTREAM_TOKEN: &str = "upstream-credential-5d0c";

/// The agent process; killed when dropped.
pub struct UpstreamAgent {
    child: Child,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
}

impl UpstreamAgent {
    /// Starts the agent, its card signed with the key in `tests/data/upstream` when `signed`.
    pub fn start(signed: bool) -> Self {
        Self::start_with(signed, true)
    }

    /// Like [`UpstreamAgent::start`]; the card says the agent streams only when `streams`.
    pub fn start_with(signed: bool, streams: bool) -> Self {
        Self::start_on(signed, streams, 0)
    }

    /// Like [`UpstreamAgent::start_with`], signed, ending each event stream 0.2 s after its
    /// last event, as a stream across a network may end.
    pub fn start_ending_streams_late(streams: bool) -> Self {
        Self::start_ending_streams_after(streams, "0.2")
    }

    /// Like [`UpstreamAgent::start_ending_streams_late`], `seconds` after the last event.
    pub fn start_ending_streams_after(streams: bool, seconds: &str) -> Self {
        Self::start_with_args(true, streams, 0, &["--stream-end-delay", seconds])
    }

    /// Like [`UpstreamAgent::start`], with the agent's own telemetry on: its spans (and the
    /// SDK's) exported to the OTLP/HTTP `endpoint` as service `upstream-agent`, continuing the
    /// trace context of each request it is sent.
    pub fn start_traced(endpoint: &str) -> Self {
        Self::start_with_args(true, true, 0, &["--telemetry", endpoint])
    }

    /// Like [`UpstreamAgent::start_with`], on `port` (0: a free one).
    pub fn start_on(signed: bool, streams: bool, port: u16) -> Self {
        Self::start_with_args(signed, streams, port, &[])
    }

    /// An agent that refuses every JSON-RPC request whose caller assertion does not verify
    /// against the key set in `jwks_file` (read at each request).
    pub fn start_verifying_callers(jwks_file: &std::path::Path) -> Self {
        Self::start_with_args(
            true,
            true,
            0,
            &["--verify-caller", jwks_file.to_str().unwrap()],
        )
    }

    fn start_with_args(signed: bool, streams: bool, port: u16, args: &[&str]) -> Self {
        let python = super::sdk::python_with_sdk();
        let mut command = Command::new(python);
        command
            .arg(repo_root().join("tests/interop/a2a_python_upstream.py"))
            .arg("--port")
            .arg(port.to_string())
            .env("UPSTREAM_TOKEN", UPSTREAM_TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command.args(args);
        if !streams {
            command.arg("--no-streaming");
        }
        if signed {
            command
                .arg("--sign-jwk")
                .arg(repo_root().join("tests/data/upstream/signing.private.jwk.json"));
        }
        let mut child = command.spawn().expect("the upstream agent starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the upstream agent said {line:?}"));
        let url = format!("http://127.0.0.1:{port}");
        // Serving once the card answers.
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Self { child, url }
    }

    /// A policy with this agent as the `a2a` backend, its card verified with its key set and
    /// the credential taken from `PEERGATE_TEST_UPSTREAM_TOKEN`.
    pub fn policy(&self) -> PolicyEdit {
        Self::policy_at(&self.url)
    }

    /// [`UpstreamAgent::policy`] for an agent at `url` (which may not be up yet).
    pub fn policy_at(url: &str) -> PolicyEdit {
        PolicyEdit::default()
            .set("model.backend", "a2a")
            .insert("model.a2a.url", url)
            .insert(
                "model.a2a.card_jwks_file",
                repo_root()
                    .join("tests/data/upstream/signing.jwks.json")
                    .to_str()
                    .unwrap(),
            )
            .insert("model.a2a.token_env", UPSTREAM_TOKEN_ENV)
    }
}

/// The variable the test policies name for the agent's credential.
pub const UPSTREAM_TOKEN_ENV: &str = "PEERGATE_TEST_UPSTREAM_TOKEN";

impl Drop for UpstreamAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A misbehaving A2A agent on loopback: a real HTTP server with an unsigned card whose
/// JSON-RPC endpoint misbehaves as the message's text says ("redirect", "huge", "hang",
/// "repeated", "rpc-error", "break": the connection is broken instead of answered; "follow": a
/// working task, whose first `GetTask` breaks its connection and whose next one finds it
/// completed; anything else gets a completed task). It counts what it receives.
pub struct MisbehavingAgent {
    pub url: String,
    posts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    redirected: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// The words a misbehaving agent puts in its errors; they must never reach a peer.
pub const AGENT_SECRET: &str = "agent-internal-detail-91c2";

impl MisbehavingAgent {
    pub async fn start() -> Self {
        Self::start_with_card(serde_json::json!({})).await
    }

    /// Like [`MisbehavingAgent::start`], its card's members replaced by `card`'s.
    pub async fn start_with_card(extra: serde_json::Value) -> Self {
        use axum::routing::{get, post};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (posts, redirected) = (
            std::sync::Arc::new(AtomicUsize::new(0)),
            std::sync::Arc::new(AtomicUsize::new(0)),
        );
        let card = serde_json::json!({
            "name": "misbehaving", "description": "d", "version": "1",
            "supportedInterfaces": [{"url": format!("{url}/"), "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0"}],
            "capabilities": {"streaming": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [],
        });
        let mut card = card;
        for (member, value) in extra.as_object().cloned().unwrap_or_default() {
            card[member] = value;
        }
        let counted = posts.clone();
        let elsewhere = redirected.clone();
        let gets = std::sync::Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route(
                "/.well-known/agent-card.json",
                get(move || async move { axum::Json(card) }),
            )
            .route(
                "/elsewhere",
                post(move || async move {
                    elsewhere.fetch_add(1, Ordering::SeqCst);
                    "redirected"
                }),
            )
            .route(
                "/",
                post(move |body: axum::Json<serde_json::Value>| async move {
                    use axum::response::IntoResponse;
                    counted.fetch_add(1, Ordering::SeqCst);
                    // A body that fails before its first byte: the server drops the connection
                    // with no answer on it.
                    let broken = || {
                        axum::body::Body::from_stream(futures_util::stream::once(async {
                            Err::<axum::body::Bytes, _>(std::io::Error::other("broken on purpose"))
                        }))
                        .into_response()
                    };
                    if body["method"] == "GetTask" {
                        if gets.fetch_add(1, Ordering::SeqCst) == 0 {
                            return broken();
                        }
                        return axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": 1,
                            "result": {"id": "agent-task-follow", "contextId": "c",
                                "status": {"state": "TASK_STATE_COMPLETED"},
                                "artifacts": [{"artifactId": "a", "parts": [{"text": "followed to its end"}]}]}}))
                        .into_response();
                    }
                    let text = body["params"]["message"]["parts"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    match text.as_str() {
                        "break" => broken(),
                        "follow" => axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": 1,
                            "result": {"task": {"id": "agent-task-follow", "contextId": "c",
                                "status": {"state": "TASK_STATE_WORKING"}}}}))
                        .into_response(),
                        "redirect" => (
                            axum::http::StatusCode::TEMPORARY_REDIRECT,
                            [("location", "/elsewhere")],
                        )
                            .into_response(),
                        "huge" => "x".repeat(5 * 1024 * 1024).into_response(),
                        "hang" => {
                            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                            "late".into_response()
                        }
                        // A member twice: read last-wins, the task would be a completed one.
                        "repeated" => (
                            [("content-type", "application/json")],
                            r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"agent-task-1","contextId":"c","status":{"state":"TASK_STATE_FAILED"},"status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"text":"read last-wins"}]}]}}}"#,
                        )
                            .into_response(),
                        "rpc-error" => axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": 1,
                            "error": {"code": -32603, "message": AGENT_SECRET,
                                "data": {"trace": AGENT_SECRET}}}))
                        .into_response(),
                        _ => axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": 1,
                            "result": {"task": {"id": "agent-task-1", "contextId": "c",
                                "status": {"state": "TASK_STATE_COMPLETED"},
                                "artifacts": [{"artifactId": "a", "parts": [{"text": format!("agent says: {text}")}]}]}}}))
                        .into_response(),
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            posts,
            redirected,
        }
    }

    /// JSON-RPC requests received.
    pub fn posts(&self) -> usize {
        self.posts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests that followed its redirect.
    pub fn redirected(&self) -> usize {
        self.redirected.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A policy with this agent as the `a2a` backend, its unsigned card accepted, and
    /// `timeout_seconds` for each call.
    pub fn policy(&self, timeout_seconds: u64) -> PolicyEdit {
        PolicyEdit::default()
            .set("model.backend", "a2a")
            .set("model.timeout_seconds", timeout_seconds)
            .insert("model.a2a.url", self.url.as_str())
            .insert("model.a2a.dangerous_accept_unsigned_card", true)
    }
}
