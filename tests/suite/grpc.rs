//! The gRPC binding's guard, judged by the official gRPC stubs (`a2a-sdk`'s `a2a_pb2_grpc` over
//! `grpcio`, pinned in `tests/interop/requirements.txt`): the same guard as the door, its
//! refusals as gRPC statuses with their details, another peer's task answered exactly like no
//! task, and health checking as `/ready`. The whole client flow over gRPC is in
//! `tests/python_sdk.rs`.

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn the_grpc_binding_stands_behind_the_same_guard_and_answers_in_grpc_statuses() {
    let full = PolicyEdit::from_text(
        &std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap(),
    )
    .policy();
    let gw = TestGateway::start_with(full).await;
    let (code, _, stderr) = gw.cli_with_stdin(&["admin", "add", "ada"], "ada's admin password 1\n");
    assert_eq!(code, 0, "{stderr}");
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    let (code, limited, stderr) = gw.cli(&["peer", "add", "carol", "--rate", "3/min"]);
    assert_eq!(code, 0, "{stderr}");
    let grpc = gw.grpc.expect("full.toml serves gRPC").to_string();
    let summary = run_interop_script(
        "a2a_python_grpc_guard.py",
        &["--grpc", &grpc, "--token", &alice, "--other-token", &bob]
            .into_iter()
            .chain(["--limited-token", limited.trim()])
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    )
    .await;
    let code_of = |key: &str| summary[key]["code"].as_str().unwrap_or_default().to_owned();
    let reasons = |key: &str| summary[key]["reasons"].clone();

    // gRPC health answers as /ready: SERVING (HealthCheckResponse{status: 1}).
    assert_eq!(summary["health"], "0801", "{summary}");
    assert_eq!(summary["health_a2a"], "0801", "{summary}");
    assert_eq!(code_of("health_other"), "NOT_FOUND");

    // Who: the credential in the authorization metadata, refusals UNAUTHENTICATED with the
    // challenge kept beside them.
    assert_eq!(code_of("no_credential"), "UNAUTHENTICATED");
    assert_eq!(
        reasons("no_credential"),
        json!([["MISSING_CREDENTIALS", "peergate"]])
    );
    assert_eq!(
        summary["no_credential_challenge"],
        json!(["Bearer realm=\"peergate\""])
    );
    assert_eq!(code_of("wrong_credential"), "UNAUTHENTICATED");
    assert_eq!(
        reasons("wrong_credential"),
        json!([["INVALID_TOKEN", "peergate"]])
    );

    // The version from metadata, refused by the same gate in the one table's words.
    assert_eq!(code_of("old_version"), "FAILED_PRECONDITION");
    assert_eq!(
        reasons("old_version"),
        json!([["VERSION_NOT_SUPPORTED", "a2a-protocol.org"]])
    );

    // The turn, a read with its history length, a list filtered by an enum.
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED");
    assert!(
        summary["reply"]
            .as_str()
            .unwrap()
            .starts_with("echo: over grpc")
    );
    assert_eq!(summary["got_history"], 1);
    assert_eq!(summary["listed"], json!([true]));

    // Another peer's task is no task: the same status, message and details.
    assert_eq!(code_of("others_task"), "NOT_FOUND");
    assert_eq!(summary["others_task"], summary["no_task"]);
    assert_eq!(summary["others_cancel"], summary["no_task"]);
    assert_eq!(
        reasons("no_task"),
        json!([["TASK_NOT_FOUND", "a2a-protocol.org"]])
    );

    // The protocol's errors by the one table; what cannot be read, and what is not there.
    assert_eq!(code_of("cancel_finished"), "FAILED_PRECONDITION");
    assert_eq!(
        reasons("cancel_finished"),
        json!([["TASK_NOT_CANCELABLE", "a2a-protocol.org"]])
    );
    assert_eq!(
        summary["card_bindings"],
        json!(["GRPC", "HTTP+JSON", "JSONRPC"])
    );
    assert_eq!(code_of("garbage"), "INVALID_ARGUMENT");
    assert_eq!(code_of("no_method"), "UNIMPLEMENTED");

    // How often: RESOURCE_EXHAUSTED, with when to come back as a RetryInfo and Retry-After.
    assert_eq!(
        summary["limited"]["code"], "RESOURCE_EXHAUSTED",
        "{summary}"
    );
    assert_eq!(
        summary["limited"]["reasons"],
        json!([["RATE_LIMITED", "peergate"]])
    );
    let delay = summary["limited"]["retry_seconds"].as_u64().unwrap();
    assert!(delay > 0, "{summary}");
    assert_eq!(summary["limited_retry_after"], json!([delay.to_string()]));

    // Observed like the other bindings: by binding and method, whatever the path.
    let metrics = gw.metrics_as("ada", "ada's admin password 1").await;
    for line in [
        // Answered once, and once refused as unreadable: the operation was asked twice.
        r#"peergate_a2a_calls_total{binding="grpc",method="SendMessage"} 2"#,
        r#"peergate_a2a_calls_total{binding="grpc",method="CancelTask"} 2"#,
        r#"peergate_a2a_calls_total{binding="grpc",method="GetExtendedAgentCard"} 1"#,
        r#"peergate_a2a_calls_total{binding="jsonrpc",method="SendMessage"} 0"#,
        // Refused in front of the service, counted by reason as on the door.
        r#"peergate_rejections_total{reason="unauthenticated"} 2"#,
        r#"peergate_rejections_total{reason="version_not_supported"} 1"#,
        r#"peergate_requests_total{route="health",status="200"} 3"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    gw.stop().await;
}

/// Over TLS (the door's certificate on the gRPC listener), with an identity provider's access
/// token whose scopes cover reading only, and a message past the body limit.
#[tokio::test(flavor = "multi_thread")]
async fn over_tls_scopes_and_the_body_limit_hold_on_the_grpc_binding() {
    const ISSUER: &str = "https://idp.acme.example";
    const AUDIENCE: &str = "https://gw.example.com/a2a/v1";
    const LIMIT: usize = 4096;
    let tls = |name: &str| {
        repo_root()
            .join("tests/data/tls")
            .join(name)
            .to_str()
            .unwrap()
            .to_owned()
    };
    let key = TestKey::new("acme-1", 71);
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), jwks(&[&key])).unwrap();
    let full = PolicyEdit::from_text(
        &std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap(),
    )
    .set("server.max_body_bytes", LIMIT as i64)
    .insert("server.tls.cert_file", tls("server.pem"))
    .insert("server.tls.key_file", tls("server.key"))
    .set("auth.schemes", ["bearer", "jwt"])
    .push_table(
        "auth.issuers",
        &[
            ("name", "acme".into()),
            ("issuer", ISSUER.into()),
            ("audience", AUDIENCE.into()),
            ("jwks_file", keys.path().to_str().unwrap().into()),
        ],
    );
    let gw = TestGateway::start_with(full.policy()).await;
    let token = gw.add_peer("alice");
    gw.add_peer("reader");
    gw.bind("reader", &["--issuer", "acme", "--subject", "reader-app"]);
    let limited = gw.add_peer("limited");
    let (code, _, stderr) = gw.cli(&["peer", "operations", "limited", "read-only"]);
    assert_eq!(code, 0, "{stderr}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let read_only = key.access_token(ISSUER, AUDIENCE, "reader-app", "a2a:tasks:read", now);
    let grpc = gw.grpc.expect("full.toml serves gRPC").to_string();
    let (ca, limit) = (tls("ca.pem"), LIMIT.to_string());
    let summary = run_interop_script(
        "a2a_python_grpc_tls.py",
        &["--grpc", &grpc, "--ca", &ca, "--token", &token]
            .into_iter()
            .chain(["--read-only-token", &read_only, "--too-large", &limit])
            .chain(["--limited-token", &limited])
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    )
    .await;

    // TLS with the door's certificate; plaintext is not answered.
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED", "{summary}");
    assert!(
        summary["reply"]
            .as_str()
            .unwrap()
            .starts_with("echo: over tls")
    );
    assert_eq!(summary["plaintext"]["code"], "UNAVAILABLE");

    // What the scopes do not cover is PERMISSION_DENIED, with the challenge naming the scope;
    // what they cover is answered (no task, and an empty list: the reader's own tasks).
    assert_eq!(summary["read_only_send"]["code"], "PERMISSION_DENIED");
    assert_eq!(
        summary["read_only_send"]["reasons"],
        json!([["INSUFFICIENT_SCOPE", "peergate"]])
    );
    assert_eq!(
        summary["read_only_send"]["challenge"],
        json!([r#"Bearer realm="peergate", error="insufficient_scope", scope="a2a:message""#])
    );
    assert_eq!(summary["read_only_get"]["code"], "NOT_FOUND");
    assert_eq!(summary["read_only_listed"], 0);

    // A peer its administrator made read-only: every change PERMISSION_DENIED, streaming and
    // a cancel of a task that does not exist too (nothing is read before the refusal); reads
    // answered.
    let limited = &summary["limited"];
    for change in ["send", "stream", "cancel"] {
        assert_eq!(
            limited[change]["code"], "PERMISSION_DENIED",
            "{change}: {summary}"
        );
        assert_eq!(
            limited[change]["reasons"],
            json!([["OPERATION_NOT_ALLOWED", "peergate"]]),
            "{change}: {summary}"
        );
    }
    assert_eq!(limited["listed"], 0, "{summary}");

    // Past the body limit: RESOURCE_EXHAUSTED in the door's words, and the connection serves on.
    assert_eq!(
        summary["too_large"]["code"], "RESOURCE_EXHAUSTED",
        "{summary}"
    );
    assert_eq!(
        summary["too_large"]["reasons"],
        json!([["BODY_TOO_LARGE", "peergate"]])
    );
    assert_eq!(summary["after_too_large"], "TASK_STATE_COMPLETED");
    gw.stop().await;
}
