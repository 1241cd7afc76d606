//! Official A2A SDK clients against the real binary.

use super::cli::add_peer;
use super::process::ServeProcess;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Starts `peergate serve` with a fresh peer, runs an official SDK client
/// (`program script --base-url … --token …`) against it, and returns the client's JSON summary
/// and the server's door URL.
pub fn run_sdk_client(program: &Path, script: &Path, peer: &str) -> (Value, String) {
    run_sdk_client_serving(program, script, peer, (&[], &[]))
}

/// Like [`run_sdk_client`], with `serve_args` (e.g. `--policy FILE`) for the server and
/// `client_args` for the client.
pub fn run_sdk_client_serving(
    program: &Path,
    script: &Path,
    peer: &str,
    (serve_args, client_args): (&[&str], &[&str]),
) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, peer);
    let server = ServeProcess::start_with(dir.path(), &data, serve_args, &[]);
    let summary = run_sdk_client_against(program, script, (&server, &token), client_args);
    (summary, server.door())
}

/// Runs an official SDK client `script` with `program` against `server` as the peer holding
/// `token`, with `client_args`; its JSON summary (the server's log in the failure when it fails).
pub fn run_sdk_client_against(
    program: &Path,
    script: &Path,
    (server, token): (&ServeProcess, &str),
    client_args: &[&str],
) -> Value {
    let output = Command::new(program)
        .arg(script)
        .args(["--base-url", &server.base(), "--token", token])
        .args(client_args)
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
    serde_json::from_str(stdout.trim()).expect("JSON summary")
}

/// Runs an official SDK client against `policies/full.toml` and checks what every such client
/// must see: a streamed answer in pieces that make the final text, the task listed, and the
/// errors for cancelling (-32002) and subscribing to (-32004) a finished task, and a push
/// config created, read, listed and deleted. Returns the summary for the client's own checks.
pub fn run_full_policy_client(program: &Path, script: &Path, peer: &str) -> Value {
    run_full_policy_client_with(program, script, peer, &[])
}

/// Like [`run_full_policy_client`], with `client_args` (e.g. `--binding GRPC`) for the client.
pub fn run_full_policy_client_with(
    program: &Path,
    script: &Path,
    peer: &str,
    client_args: &[&str],
) -> Value {
    let full = super::cli::repo_root().join("policies/full.toml");
    let serve_args = ["--policy", full.to_str().unwrap()];
    let (summary, _) = run_sdk_client_serving(program, script, peer, (&serve_args, client_args));
    assert_eq!(
        summary["stream_final_state"], "TASK_STATE_COMPLETED",
        "{summary}"
    );
    assert!(summary["stream_pieces"].as_u64().unwrap() > 2, "{summary}");
    assert_eq!(summary["stream_text_matches"], true, "{summary}");
    assert_eq!(summary["listed_contains_streamed"], true, "{summary}");
    assert_eq!(summary["total_size"], 1, "{summary}");
    assert_eq!(summary["cancel_finished_code"], -32002, "{summary}");
    assert_eq!(summary["subscribe_finished_code"], -32004, "{summary}");
    // Push configs: the token and scheme read back, the credentials never.
    assert_eq!(summary["push_created_id"], "sdk-hook", "{summary}");
    assert_eq!(
        summary["push_read"],
        json!(["https://93.184.215.14/a2a-hook", "sdk-token", "Bearer", ""]),
        "{summary}"
    );
    assert_eq!(summary["push_listed"], json!(["sdk-hook"]), "{summary}");
    assert_eq!(summary["push_deleted_code"], -32001, "{summary}");
    summary
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e} (python3 with venv is required)"));
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A virtual environment with the pinned SDK, rebuilt when the requirements change. The tests
/// of this binary run at once; one of them builds it while the others wait.
pub fn python_with_sdk() -> PathBuf {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let requirements_path = super::cli::repo_root().join("tests/interop/requirements.txt");
    let requirements = std::fs::read_to_string(&requirements_path).unwrap();
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("a2a-python-venv");
    let python = venv.join("bin/python");
    let marker = venv.join("installed-requirements.txt");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(requirements.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements_path),
        "pip install -r tests/interop/requirements.txt",
    );
    std::fs::write(&marker, requirements).unwrap();
    python
}

/// Runs `tests/interop/SCRIPT` with the official SDK's Python and `args`; its JSON summary.
pub async fn run_interop_script(script: &str, args: &[String]) -> Value {
    let python = python_with_sdk();
    let script = super::cli::repo_root().join("tests/interop").join(script);
    let args = args.to_vec();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}
