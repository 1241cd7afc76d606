//! The official Python client (`a2a-sdk`, pinned in `tests/interop/requirements.txt`) against
//! the real `peergate serve` binary: discover, send, get, follow up, unknown task.
//!
//! The client lives in its own virtual environment under the target directory, created and
//! filled from PyPI on first use (python3 with the `venv` module is required; on Debian:
//! `apt-get install python3-venv`).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

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
fn python_with_sdk() -> PathBuf {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let requirements_path = repo_root().join("tests/interop/requirements.txt");
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

#[test]
fn official_python_client_discovers_sends_gets_and_follows_up() {
    let python = python_with_sdk();
    let (summary, door) = run_sdk_client(
        &python,
        &repo_root().join("tests/interop/a2a_python_client.py"),
        "python-sdk",
    );
    assert_eq!(summary["card_name"], "peergate");
    assert_eq!(summary["interface"]["url"], door);
    assert_eq!(summary["first_state"], "TASK_STATE_COMPLETED");
    assert_eq!(summary["get_task_state"], "TASK_STATE_COMPLETED");
    assert_eq!(summary["followup_same_context"], true);
    assert_ne!(summary["first_task"], summary["followup_task"]);
    assert_eq!(summary["unknown_task_error_code"], -32001);
    assert!(
        summary["followup_reply"]
            .as_str()
            .is_some_and(|r| r.contains("history: 2 earlier messages")),
        "{summary}"
    );
}

#[test]
fn official_python_client_streams_lists_sends_without_waiting_and_meets_the_errors() {
    let python = python_with_sdk();
    let summary = run_full_policy_client(
        &python,
        &repo_root().join("tests/interop/a2a_python_full.py"),
        "python-sdk",
    );
    assert_eq!(summary["next_page_token"], "", "{summary}");
    assert_eq!(
        summary["non_blocking_first_state"], "TASK_STATE_WORKING",
        "answered before the model: {summary}"
    );
    assert_eq!(
        summary["non_blocking_final_state"], "TASK_STATE_COMPLETED",
        "{summary}"
    );
}
