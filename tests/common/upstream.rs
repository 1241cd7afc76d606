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
        let python = super::sdk::python_with_sdk();
        let mut command = Command::new(python);
        command
            .arg(repo_root().join("tests/interop/a2a_python_upstream.py"))
            .env("UPSTREAM_TOKEN", UPSTREAM_TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
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
        PolicyEdit::default()
            .set("model.backend", "a2a")
            .insert("model.a2a.url", self.url.as_str())
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
