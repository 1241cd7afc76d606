//! The official Python client (`a2a-sdk`, pinned in `tests/interop/requirements.txt`) against
//! the real `peergate serve` binary: discover, send, get, follow up, unknown task; and with
//! `policies/full.toml` over JSON-RPC and over gRPC, the same answers and the same errors.
//!
//! The client lives in its own virtual environment under the target directory, created and
//! filled from PyPI on first use (python3 with the `venv` module is required; on Debian:
//! `apt-get install python3-venv`).

use crate::common::*;

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

#[test]
fn official_python_client_over_grpc_and_http_json_gets_the_same_answers_and_errors() {
    let python = python_with_sdk();
    let script = repo_root().join("tests/interop/a2a_python_full.py");
    // The same expectations as over JSON-RPC (streams, lists, non-blocking sends, the errors
    // by their ErrorInfo reasons, push configs), over the card's other interfaces.
    for binding in ["GRPC", "HTTP+JSON"] {
        let args = ["--binding", binding];
        let summary = run_full_policy_client_with(&python, &script, "python-sdk", &args);
        assert_eq!(
            summary["non_blocking_final_state"], "TASK_STATE_COMPLETED",
            "{binding}: {summary}"
        );
        let interface = summary["interface"][0].as_str().unwrap_or_default();
        let expected = match binding {
            // A gRPC interface names host:port; the bound one, not the policy's port 0.
            "GRPC" => interface.starts_with("127.0.0.1:") && !interface.ends_with(":0"),
            _ => interface.ends_with("/a2a/v1/rest"),
        };
        assert!(expected, "{binding}: {summary}");
    }
}
