//! A real OTLP/HTTP receiver for the telemetry tests: `tests/interop/otlp_receiver.py`, which
//! decodes what an exporter sends with the official `opentelemetry-proto` messages and serves
//! back the spans it received as JSON. Started in the SDK's virtual environment (its
//! requirements hold the OpenTelemetry packages).

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running receiver; stopped when dropped.
pub struct OtlpReceiver {
    child: Child,
    /// Its base URL (`http://127.0.0.1:<port>`), what `OTEL_EXPORTER_OTLP_ENDPOINT` names.
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// A receiver that answers; with `hang`, one that reads every export and never answers.
    pub fn start(hang: bool) -> Self {
        let python = super::python_with_sdk();
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let script = super::repo_root().join("tests/interop/otlp_receiver.py");
        let mut command = Command::new(python);
        command.arg(script).arg(&port_file);
        if hang {
            command.arg("--hang");
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the OTLP receiver starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "the OTLP receiver did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self {
            child,
            endpoint: format!("http://127.0.0.1:{}", port.trim()),
            _dir: dir,
        }
    }

    /// Every span received so far.
    pub async fn spans(&self) -> Vec<Value> {
        self.received("spans").await
    }

    /// The spans received once `done` holds for them, waiting at most 20 s (spans leave in
    /// batches, a second apart at most).
    pub async fn spans_when(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.received_when("spans", done).await
    }

    /// Every metric received so far (name, unit, resource, histogram points).
    pub async fn metrics(&self) -> Vec<Value> {
        self.received("metrics-received").await
    }

    /// The metrics received once `done` holds for them, waiting at most 20 s.
    pub async fn metrics_when(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.received_when("metrics-received", done).await
    }

    /// What the receiver serves at `/path`: what it received so far.
    async fn received(&self, path: &str) -> Vec<Value> {
        let url = format!("{}/{path}", self.endpoint);
        let body = reqwest::get(url).await.unwrap().text().await.unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// What it received at `/path`, once `done` holds for it or 20 s passed.
    async fn received_when(&self, path: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let received = self.received(path).await;
            if done(&received) || Instant::now() > deadline {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The span attribute `key` of `span`.
pub fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}
