//! Official A2A SDK clients against the real binary.

use super::cli::add_peer;
use super::process::ServeProcess;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Starts `peergate serve` with a fresh peer, runs an official SDK client
/// (`program script --base-url … --token …`) against it, and returns the client's JSON summary
/// and the server's door URL.
pub fn run_sdk_client(program: &Path, script: &Path, peer: &str) -> (Value, String) {
    run_sdk_client_serving(program, script, peer, &[])
}

/// Like [`run_sdk_client`], with `serve_args` (e.g. `--policy FILE`) for the server.
pub fn run_sdk_client_serving(
    program: &Path,
    script: &Path,
    peer: &str,
    serve_args: &[&str],
) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, peer);
    let server = ServeProcess::start_with(dir.path(), &data, serve_args, &[]);
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
