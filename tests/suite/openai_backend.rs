//! The openai backend against a real OpenAI-compatible server on 127.0.0.1: what it is sent,
//! the 20-message window, racing messages in one context, and every way it can fail.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn model_receives_instructions_preface_history_and_text() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let gw = TestGateway::start_with(model.policy(10)).await;
    let token = gw.add_peer("acme-agent");
    let first = send_text(&gw.door, &token, "What is 2+2?", None).await;
    let task = task_of(&first);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(reply_text(task), "model says: What is 2+2?");
    let context = task["contextId"].as_str().unwrap();
    send_text(&gw.door, &token, "And 3+3?", Some(context)).await;

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "test-model");
    assert_eq!(requests[0]["stream"], false);
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert_eq!(requests[0]["messages"][0]["role"], "system");
    assert!(
        system.starts_with("You answer questions from partner agents"),
        "{system}"
    );
    assert!(system.contains("partner agent \"acme-agent\""), "{system}");
    assert_eq!(
        requests[0]["messages"][1],
        json!({"role": "user", "content": "What is 2+2?"})
    );
    assert_eq!(requests[0]["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        requests[1]["messages"].as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "What is 2+2?"}),
            json!({"role": "assistant", "content": "model says: What is 2+2?"}),
            json!({"role": "user", "content": "And 3+3?"}),
        ]
    );
    // No API key configured: no Authorization header.
    assert!(model.headers()[0].get("authorization").is_none());
    gw.stop().await;
}

#[tokio::test]
async fn only_the_last_twenty_messages_go_to_the_model() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let gw = TestGateway::start_with(model.policy(10)).await;
    let token = gw.add_peer("alice");
    let context = "window-test";
    for turn in 1..=12 {
        let response = send_text(&gw.door, &token, &format!("turn {turn}"), Some(context)).await;
        assert_eq!(
            task_of(&response)["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
    }
    let requests = model.requests();
    let counts: Vec<usize> = requests
        .iter()
        .map(|r| r["messages"].as_array().unwrap().len() - 2)
        .collect();
    // History grows by two per turn until it stops at 20.
    assert_eq!(counts, vec![0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 20]);
    let last = requests[11]["messages"].as_array().unwrap();
    // Turn 12 sees turns 2..=11: turn 1 fell out of the window.
    assert_eq!(last[1], json!({"role": "user", "content": "turn 2"}));
    assert_eq!(
        last[20],
        json!({"role": "assistant", "content": "model says: turn 11"})
    );
    assert_eq!(last[21], json!({"role": "user", "content": "turn 12"}));
    gw.stop().await;
}

#[tokio::test]
async fn api_key_comes_from_the_named_environment_variable() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let var = "PEERGATE_TEST_MODEL_KEY_8c1";
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "m")
        .insert("model.openai.api_key_env", var);
    // Named but unset: start-up refuses and names the variable, not a value.
    let data = tempfile::tempdir().unwrap();
    let refused = peergate::app::start(gateway_options(
        policy.policy(),
        data.path(),
        std::sync::Arc::new(peergate::clock::SystemClock),
    ))
    .await;
    let message = refused.err().expect("start-up must fail").to_string();
    assert!(message.contains(var), "{message}");
    assert!(message.contains("model.openai.api_key_env"), "{message}");

    // The binary gets the key through its environment.
    let dir = tempfile::tempdir().unwrap();
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy.text()).unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, "alice");
    let server = ServeProcess::start_with(
        dir.path(),
        &data,
        &["--policy", policy_path.to_str().unwrap()],
        &[(var, "sk-test-123")],
    );
    let response = send_text(&server.door(), &token, "hi", None).await;
    assert_eq!(
        task_of(&response)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let auth = model.headers()[0]["authorization"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(auth, "Bearer sk-test-123");
    assert!(
        !server.log_text().contains("sk-test-123"),
        "the key reached the log"
    );
}

async fn failed_task(model: &FakeModel, behaviour: ModelBehaviour, timeout: u64) -> Value {
    model.set(behaviour);
    let gw = TestGateway::start_with(model.policy(timeout)).await;
    let token = gw.add_peer("alice");
    let response = send_text(&gw.door, &token, "please answer", None).await;
    let task = task_of(&response).clone();
    // The failed task is stored and readable like any other.
    let id = task["id"].as_str().unwrap();
    assert_eq!(get_task(&gw.door, &token, id, None).await["result"], task);
    // The failed exchange does not enter the context's history: a retry starts clean.
    model.set(ModelBehaviour::Answer);
    let retry = send_text(&gw.door, &token, "retry", task["contextId"].as_str()).await;
    assert_eq!(task_of(&retry)["status"]["state"], "TASK_STATE_COMPLETED");
    let last = model.requests().pop().unwrap();
    assert_eq!(last["messages"].as_array().unwrap().len(), 2, "{last}");
    gw.stop().await;
    task
}

fn assert_failed_cleanly(task: &Value) {
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    let text = reply_text(task);
    assert!(text.contains("Please retry"), "{text}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    assert!(task.get("artifacts").is_none(), "{task}");
    let whole = task.to_string();
    assert!(
        !whole.contains(UPSTREAM_SECRET),
        "upstream body leaked: {whole}"
    );
    assert!(!whole.contains("127.0.0.1"), "upstream URL leaked: {whole}");
}

#[tokio::test]
async fn slow_model_ends_the_task_failed_after_the_timeout() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let task = failed_task(&model, ModelBehaviour::Slow(Duration::from_secs(30)), 1).await;
    assert_failed_cleanly(&task);
    assert!(reply_text(&task).contains("did not answer in time"));
}

#[tokio::test]
async fn server_error_malformed_empty_and_oversized_answers_fail_the_task() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    for behaviour in [
        ModelBehaviour::ServerError,
        ModelBehaviour::Malformed,
        ModelBehaviour::NoChoices,
        ModelBehaviour::Oversized,
    ] {
        let task = failed_task(&model, behaviour.clone(), 10).await;
        assert_failed_cleanly(&task);
        assert!(
            reply_text(&task).contains("returned an error"),
            "{behaviour:?}"
        );
    }
}

#[tokio::test]
async fn unreachable_model_fails_the_task() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let policy = PolicyEdit::default()
        .openai(&format!("http://127.0.0.1:{port}/v1"), "m")
        .policy();
    let gw = TestGateway::start_with(policy).await;
    let token = gw.add_peer("alice");
    let response = send_text(&gw.door, &token, "anyone there?", None).await;
    assert_failed_cleanly(task_of(&response));
    gw.stop().await;
}

#[tokio::test]
async fn racing_messages_in_one_context_are_answered_in_turn() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(model.policy(20)).await;
    let token = gw.add_peer("alice");
    let door = gw.door.clone();
    let (t1, d1) = (token.clone(), door.clone());
    let first = tokio::spawn(async move { send_text(&d1, &t1, "first", Some("race")).await });
    model.wait_for_arrival().await;
    let (t2, d2) = (token.clone(), door.clone());
    let second = tokio::spawn(async move { send_text(&d2, &t2, "second", Some("race")).await });
    // Another context is not held up by the busy one.
    let (t3, d3) = (token.clone(), door.clone());
    let other = tokio::spawn(async move { send_text(&d3, &t3, "elsewhere", Some("other")).await });
    model.wait_for_arrival().await;
    model.release_one();
    model.release_one();
    model.wait_for_arrival().await;
    model.release_one();
    let first = first.await.unwrap();
    let second = second.await.unwrap();
    other.await.unwrap();
    assert_eq!(task_of(&first)["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task_of(&second)["status"]["state"], "TASK_STATE_COMPLETED");
    let race: Vec<Value> = model
        .requests()
        .into_iter()
        .filter(|r| {
            r["messages"].to_string().contains("first")
                || r["messages"].to_string().contains("second")
        })
        .collect();
    assert_eq!(race.len(), 2);
    // The second saw the first's full exchange: they did not interleave.
    let second_request = &race[1]["messages"];
    assert_eq!(
        second_request[1],
        json!({"role": "user", "content": "first"})
    );
    assert_eq!(
        second_request[2],
        json!({"role": "assistant", "content": "model says: first"})
    );
    assert_eq!(
        second_request[3],
        json!({"role": "user", "content": "second"})
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_message_that_waits_longer_than_the_backend_timeout_is_refused_busy() {
    // The model never answers; each call ends at the 1 s timeout. Three messages race in one
    // context: the first and the next in line each time out at the model, the third waits longer
    // than the timeout for its turn and is refused without asking the model.
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(model.policy(1)).await;
    let token = gw.add_peer("alice");
    let send = |text: &'static str| {
        let (door, token) = (gw.door.clone(), token.clone());
        tokio::spawn(async move { send_text(&door, &token, text, Some("busy")).await })
    };
    let first = send("one");
    model.wait_for_arrival().await;
    let (second, third) = (send("two"), send("three"));
    let mut outcomes = Vec::new();
    for handle in [first, second, third] {
        let response = handle.await.unwrap();
        outcomes.push(match response.get("result") {
            Some(_) => task_of(&response)["status"]["state"]
                .as_str()
                .unwrap()
                .to_owned(),
            None => response["error"]["data"][0]["reason"]
                .as_str()
                .unwrap()
                .to_owned(),
        });
    }
    assert_eq!(outcomes[0], "TASK_STATE_FAILED");
    let mut rest = outcomes[1..].to_vec();
    rest.sort();
    assert_eq!(rest, ["CONTEXT_BUSY", "TASK_STATE_FAILED"], "{outcomes:?}");
    assert_eq!(
        model.requests().len(),
        2,
        "the refused message never reached the model"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_hosted_model_over_tls_is_trusted_through_the_policy_ca_file_only() {
    let model = FakeModel::start_tls(ModelBehaviour::Answer).await;
    assert!(model.base_url.starts_with("https://localhost:"));
    let trusted = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .insert("model.openai.ca_file", test_ca_path().to_str().unwrap());
    let gw = TestGateway::start_with(trusted.policy()).await;
    let token = gw.add_peer("alice");
    let response = send_text(&gw.door, &token, "over tls", None).await;
    assert_eq!(reply_text(task_of(&response)), "model says: over tls");
    gw.stop().await;

    // The same server without its CA: the certificate is refused, the request never sent.
    let untrusted = PolicyEdit::default().openai(&model.base_url, "test-model");
    let gw = TestGateway::start_with(untrusted.policy()).await;
    let token = gw.add_peer("alice");
    let response = send_text(&gw.door, &token, "over tls", None).await;
    assert_failed_cleanly(task_of(&response));
    assert_eq!(
        model.requests().len(),
        1,
        "a request passed an unchecked certificate"
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_system_roots_are_the_default_trust() {
    // SSL_CERT_FILE is how an operator (or this test) points the system's roots elsewhere.
    let model = FakeModel::start_tls(ModelBehaviour::Answer).await;
    let policy = PolicyEdit::default().openai(&model.base_url, "test-model");
    let ca = test_ca_path();
    let trusting = ServedPolicy::start(
        &policy,
        &["alice"],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let response = send_text(
        &trusting.server.door(),
        &trusting.tokens[0],
        "system roots",
        None,
    )
    .await;
    assert_eq!(reply_text(task_of(&response)), "model says: system roots");

    // Without it the certificate is refused, and the log says so (the peer hears only that
    // the model could not answer).
    let refusing = ServedPolicy::start(
        &policy,
        &["alice"],
        &[("SSL_CERT_FILE", "/nonexistent/roots.pem")],
    );
    let response = send_text(
        &refusing.server.door(),
        &refusing.tokens[0],
        "system roots",
        None,
    )
    .await;
    assert_failed_cleanly(task_of(&response));
    // The reason is the real one: the issuer, not an expiry or a host name.
    let log = refusing.server.log_with("TLS certificate was not accepted");
    assert!(log.contains("its issuer is not trusted"), "{log}");

    // The same server dialled by an address its certificate does not name (the IPv4-mapped
    // form of 127.0.0.1 reaches the same listener): the host name is the reason.
    let elsewhere = model.base_url.replace("localhost", "[::ffff:127.0.0.1]");
    let misnamed = ServedPolicy::start(
        &PolicyEdit::default().openai(&elsewhere, "test-model"),
        &["alice"],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let response = send_text(&misnamed.server.door(), &misnamed.tokens[0], "host", None).await;
    assert_failed_cleanly(task_of(&response));
    let log = misnamed.server.log_with("TLS certificate was not accepted");
    assert!(log.contains("not valid for the host name dialled"), "{log}");
}

#[tokio::test]
async fn model_urls_and_ca_files_that_cannot_be_used_stop_start_up_naming_the_setting() {
    for (url, why) in [
        (
            "http://8.8.8.8/v1",
            "plain http is allowed only to loopback and private addresses",
        ),
        ("ftp://127.0.0.1/v1", "must be an https URL"),
        (
            "https://key:secret@api.example.com/v1",
            "must not carry credentials",
        ),
        (
            "https://api.example.com/v1?key=secret",
            "must not carry a query",
        ),
    ] {
        let text = PolicyEdit::default().openai(url, "m").text();
        let error =
            peergate::config::Policy::parse(&text, &peergate::config::PolicySource::Embedded)
                .expect_err(url)
                .to_string();
        assert!(error.contains("model.openai.base_url"), "{error}");
        assert!(error.contains(why), "{url}: {error}");
        assert!(!error.contains("secret"), "{error}");
    }
    // Private addresses stay reachable over plain http.
    for url in [
        "http://10.1.2.3:8000/v1",
        "http://[fd00::1]/v1",
        "http://localhost:8000/v1",
    ] {
        let text = PolicyEdit::default().openai(url, "m").text();
        peergate::config::Policy::parse(&text, &peergate::config::PolicySource::Embedded)
            .expect(url);
    }

    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.txt");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    for ca_file in [not_pem, dir.path().join("missing.pem")] {
        let policy = PolicyEdit::default()
            .openai("https://localhost:1/v1", "m")
            .insert("model.openai.ca_file", ca_file.to_str().unwrap());
        let data = tempfile::tempdir().unwrap();
        let started = peergate::app::start(gateway_options(
            policy.policy(),
            data.path(),
            std::sync::Arc::new(peergate::clock::SystemClock),
        ))
        .await;
        let message = started.err().expect("start-up must fail").to_string();
        assert!(
            message.contains("cannot use the CA file named by model.openai.ca_file"),
            "{message}"
        );
        assert!(!message.contains(dir.path().to_str().unwrap()), "{message}");
    }
}

/// A hosted model is asked over one TLS session, not one per message: twenty messages one after
/// another cost one handshake (a client per message, or a connection dropped before its answer
/// was read to the end, would cost one each), and go as HTTP/2, which the server offers.
#[tokio::test]
async fn twenty_messages_in_a_row_cost_the_hosted_model_one_tls_handshake() {
    let model = FakeModel::start_tls(ModelBehaviour::Answer).await;
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .insert("model.openai.ca_file", test_ca_path().to_str().unwrap());
    let gw = TestGateway::start_with(policy.policy()).await;
    let token = gw.add_peer("alice");
    for n in 0..20 {
        let response = send_text(&gw.door, &token, &format!("message {n}"), None).await;
        assert_eq!(
            reply_text(task_of(&response)),
            format!("model says: message {n}")
        );
    }
    assert_eq!(model.requests().len(), 20);
    assert_eq!(model.versions(), vec![axum::http::Version::HTTP_2; 20]);
    assert_eq!(
        model.connections(),
        1,
        "twenty messages took {} TLS handshakes",
        model.connections()
    );
    gw.stop().await;
}

/// A model reads text and data parts only: for each file and URL part a peer sends, the model
/// gets the text alone, and the task's metadata and the access log name the part it did not
/// read; under `tasks.unread_parts = "refuse"` the message is refused with -32005 naming the
/// part, and the model is not asked.
#[tokio::test]
async fn parts_a_model_does_not_read_are_named_or_refused() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let policy = || {
        PolicyEdit::default()
            .openai(&model.base_url, "test-model")
            .set("model.timeout_seconds", 10)
            .set("log.access", true)
    };
    let unread = [
        ("raw", json!({"raw": "aGVsbG8=", "filename": "hello.txt"})),
        ("url", json!({"url": "https://files.example/a.pdf"})),
        (
            "file",
            json!({"kind": "file", "file": {"uri": "https://files.example/b.txt"}}),
        ),
    ];
    let send = |door: String, token: String, part: Value| async move {
        let message = json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
            "parts": [{"text": "read this"}, part]});
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message}});
        rpc(&door, &token, request).await
    };

    let telling = ServedPolicy::start(&policy(), &["alice"], &[]);
    let (door, token) = (telling.server.door(), telling.tokens[0].clone());
    for (i, (kind, part)) in unread.iter().enumerate() {
        let answer = send(door.clone(), token.clone(), part.clone()).await;
        let task = task_of(&answer);
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
        assert_eq!(
            task["metadata"],
            json!({"peergate": {"unreadParts": [{"index": 1, "content": kind}]}}),
            "{kind}"
        );
        let asked = &model.requests()[i]["messages"];
        let last = &asked[asked.as_array().unwrap().len() - 1];
        assert_eq!(last["content"], "read this", "{kind}");
        let noted = format!("unread_parts=\"{kind}@1\"");
        let log = telling.server.log_with(&noted);
        assert!(log.contains(&noted), "{log}");
    }
    assert_eq!(model.requests().len(), 3);

    let refusing = ServedPolicy::start(
        &policy().set("tasks.unread_parts", "refuse"),
        &["alice"],
        &[],
    );
    let (door, token) = (refusing.server.door(), refusing.tokens[0].clone());
    for (kind, part) in &unread {
        let answer = send(door.clone(), token.clone(), part.clone()).await;
        assert_eq!(answer["error"]["code"], -32005, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("message.parts[1] is a {kind} part")),
            "{message}"
        );
    }
    assert_eq!(model.requests().len(), 3, "the model was asked");
    let readable = send(door, token, json!({"data": {"a": "b"}})).await;
    assert_eq!(
        task_of(&readable)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[tokio::test]
async fn the_model_hears_each_peer_by_a_stable_pseudonym_unless_the_policy_says_not() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let gw = TestGateway::start_with(model.policy(10)).await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    for token in [&alice, &alice, &bob] {
        send_text(&gw.door, token, "hi", None).await;
    }
    let users: Vec<String> = model
        .requests()
        .iter()
        .map(|request| request["user"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users[0], users[1], "stable for one peer");
    assert_ne!(users[0], users[2], "one per peer");
    for user in &users {
        // A digest (32 hex digits), never the peer's name or its id (`peer_…`).
        let digest = user.strip_prefix("peer-").unwrap();
        assert!(
            digest.len() == 32 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{user}"
        );
    }
    gw.stop().await;

    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .insert("model.openai.user", false);
    let gw = TestGateway::start_with(policy.policy()).await;
    let token = gw.add_peer("alice");
    send_text(&gw.door, &token, "hi", None).await;
    assert!(model.requests()[0].get("user").is_none());
    gw.stop().await;
}
