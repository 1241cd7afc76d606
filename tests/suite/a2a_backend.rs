//! The `a2a` backend: peergate as the guarded door in front of a real A2A agent on loopback
//! (the official Python SDK's server, `tests/interop/a2a_python_upstream.py`), reached by the
//! built binary over HTTP.

use crate::common::*;
use serde_json::{Value, json};

/// A peergate in front of the agent `policy` names, holding its credential, with `peers`.
fn door(policy: PolicyEdit, peers: &[&str]) -> ServedPolicy {
    ServedPolicy::start(&policy, peers, &[(UPSTREAM_TOKEN_ENV, UPSTREAM_TOKEN)])
}

/// `peergate serve` with `policy` that must fail to start; its stderr.
fn refused_start(policy: PolicyEdit, env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy.text()).unwrap();
    let output = std::process::Command::new(bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--policy")
        .arg(&policy_path)
        .arg("--data")
        .arg(dir.path().join("data"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!output.status.success(), "peergate started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn send(door: &str, token: &str, message: Value) -> Value {
    rpc(
        door,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
    )
    .await
}

fn text_message(text: &str) -> Value {
    json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "parts": [{"text": text}]})
}

fn artifact_text(task: &Value) -> String {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no artifact text in {task}"))
        .to_owned()
}

#[tokio::test]
async fn a_peer_reaches_the_agent_under_peergates_own_ids() {
    let upstream = UpstreamAgent::start(true);
    let door = door(upstream.policy(), &["alice", "bob"]);
    let (alice, bob) = (&door.tokens[0], &door.tokens[1]);
    let url = door.server.door();

    let answer = send_text(&url, alice, "hello", None).await;
    let task = task_of(&answer);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(artifact_text(task), "upstream says: hello");
    // The stored copy is what GetTask serves, under peergate's id.
    let id = task["id"].as_str().unwrap();
    assert_eq!(get_task(&url, alice, id, None).await["result"], *task);
    assert_eq!(error_code(&get_task(&url, bob, id, None).await), -32001);

    // The agent knows the peer's context under an id of its own: stable for the pair, never
    // the peer's own, and a different one for another peer saying the same contextId.
    let seen_by_agent = async |token: &str| {
        let answer = send_text(&url, token, "context", Some("shared-name")).await;
        artifact_text(task_of(&answer))
    };
    let alice_upstream = seen_by_agent(alice).await;
    assert_ne!(alice_upstream, "shared-name");
    assert_eq!(seen_by_agent(alice).await, alice_upstream);
    assert_ne!(seen_by_agent(bob).await, alice_upstream);
}

#[tokio::test]
async fn every_kind_of_answer_comes_back_as_the_agent_gave_it() {
    let upstream = UpstreamAgent::start(true);
    let door = door(upstream.policy(), &["alice"]);
    let (token, url) = (&door.tokens[0], door.server.door());

    // A direct message stays a message, in the peer's context.
    let answer = send(&url, token, text_message("message")).await;
    let message = &answer["result"]["message"];
    assert_eq!(message["role"], "ROLE_AGENT", "{answer}");
    assert_eq!(
        message["parts"],
        json!([{"text": "a direct message answer"}])
    );
    assert!(answer["result"].get("task").is_none());

    // Every part kind, as sent.
    let answer = send_text(&url, token, "parts", None).await;
    let task = task_of(&answer);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let artifacts = task["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 2, "{task}");
    assert_eq!(artifacts[0]["name"], "mixed");
    let parts = &artifacts[0]["parts"];
    assert_eq!(parts[0], json!({"text": "plain text part"}));
    assert_eq!(parts[1]["data"]["key"], "value");
    assert_eq!(parts[1]["data"]["nested"], json!({"ok": true}));
    assert_eq!(
        parts[2],
        json!({"url": "https://example.com/report.pdf", "filename": "report.pdf",
            "mediaType": "application/pdf"})
    );
    assert_eq!(
        artifacts[1]["parts"][0],
        json!({"raw": "aGVsbG8gYnl0ZXM=", "filename": "hello.txt", "mediaType": "text/plain"})
    );
    // The conversation keeps every part of the answer, not its text alone: the data as JSON,
    // the files by name, type, size and digest with their bytes or URL.
    let context = task["contextId"].as_str().unwrap();
    let (code, out, stderr) = cli_on(
        &door.data,
        &["conversations", "show", "alice", context, "--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let kept: Value = serde_json::from_str(&out).unwrap();
    let answer = &kept["messages"][1]["parts"];
    assert_eq!(answer[1]["data"]["nested"], json!({"ok": true}), "{kept:#}");
    assert_eq!(answer[2]["url"], "https://example.com/report.pdf");
    assert_eq!(
        answer[3],
        json!({"kind": "file", "raw": "aGVsbG8gYnl0ZXM=", "filename": "hello.txt",
               "mediaType": "text/plain", "size": 11, "artifactId": artifacts[1]["artifactId"],
               "sha256": "5608b71da2b2228faf1aa9fcfdfca682607045d650b3a984b4c752991f97b86d"}),
        "{kept:#}"
    );

    // Failed and rejected, with the agent's own words.
    let failed = send_text(&url, token, "fail", None).await;
    assert_eq!(task_of(&failed)["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(reply_text(task_of(&failed)), "it failed on purpose");
    let rejected = send_text(&url, token, "reject", None).await;
    assert_eq!(task_of(&rejected)["status"]["state"], "TASK_STATE_REJECTED");
}

#[tokio::test]
async fn a_task_waiting_for_input_goes_on_when_the_peer_names_it() {
    let upstream = UpstreamAgent::start(true);
    let door = door(upstream.policy(), &["alice", "bob"]);
    let (alice, bob, url) = (&door.tokens[0], &door.tokens[1], door.server.door());

    let asked = send_text(&url, alice, "input", None).await;
    let task = task_of(&asked).clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    let (id, context) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );

    // Another peer cannot answer it: the task does not exist for it.
    let mut intruding = text_message("from bob");
    intruding["taskId"] = json!(id);
    assert_eq!(error_code(&send(&url, bob, intruding).await), -32001);

    let mut more = text_message("here is more");
    more["taskId"] = json!(id);
    more["contextId"] = json!(context);
    let answered = send(&url, alice, more.clone()).await;
    let done = task_of(&answered);
    assert_eq!(done["id"], id);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(artifact_text(done), "you said: here is more");
    // The history holds both turns.
    let texts: Vec<&str> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], "input");
    assert_eq!(texts[2], "here is more");

    // Finished now: naming it again is refused.
    more["messageId"] = json!(uuid::Uuid::new_v4().to_string());
    let again = send(&url, alice, more).await;
    assert_eq!(error_code(&again), -32004, "{again}");
}

#[tokio::test]
async fn the_agents_streamed_updates_reach_the_peer_as_they_come() {
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream.policy().set("capabilities.streaming", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let request = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
        "params": {"message": text_message("slow")}});
    let text = open_stream(&url, token, &request)
        .await
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let pieces: Vec<&str> = events
        .iter()
        .filter_map(|e| {
            e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"].as_str()
        })
        .collect();
    for step in ["step 1", "step 2", "step 3"] {
        assert!(pieces.contains(&step), "{step} missing from {pieces:?}");
    }
    let last = &events.last().unwrap()["result"]["statusUpdate"]["status"];
    assert_eq!(last["state"], "TASK_STATE_COMPLETED", "{events:?}");
    let artifact = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .expect("the artifact");
    assert_eq!(artifact["artifact"]["parts"][0]["text"], "slow work done");
}

#[tokio::test]
async fn a_card_that_does_not_verify_stops_start_up_unless_dangerously_accepted() {
    let signed = UpstreamAgent::start(true);
    let other_keys = repo_root().join("tests/data/upstream/other.jwks.json");
    let env = [(UPSTREAM_TOKEN_ENV, UPSTREAM_TOKEN)];
    let stderr = refused_start(
        signed
            .policy()
            .set("model.a2a.card_jwks_file", other_keys.to_str().unwrap()),
        &env,
    );
    assert!(stderr.contains("model.a2a.url"), "{stderr}");
    assert!(stderr.contains("not verified"), "{stderr}");

    let unsigned = UpstreamAgent::start(false);
    let stderr = refused_start(unsigned.policy(), &env);
    assert!(stderr.contains("carries no signatures"), "{stderr}");
    // Even the dangerous switch does not take a signature that fails.
    let stderr = refused_start(
        signed
            .policy()
            .set("model.a2a.card_jwks_file", other_keys.to_str().unwrap())
            .insert("model.a2a.dangerous_accept_unsigned_card", true),
        &env,
    );
    assert!(stderr.contains("not verified"), "{stderr}");
    // It does take a card without signatures, and says so.
    let door = door(
        unsigned
            .policy()
            .insert("model.a2a.dangerous_accept_unsigned_card", true),
        &["alice"],
    );
    let answer = send_text(&door.server.door(), &door.tokens[0], "hi", None).await;
    assert_eq!(artifact_text(task_of(&answer)), "upstream says: hi");
    assert!(door.server.log_text().contains("used unverified"));

    // A key set that holds no key verifies nothing.
    let empty = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(empty.path(), r#"{"keys": []}"#).unwrap();
    let stderr = refused_start(
        signed
            .policy()
            .set("model.a2a.card_jwks_file", empty.path().to_str().unwrap()),
        &env,
    );
    assert!(stderr.contains("hold no usable key"), "{stderr}");
    // The JSON-RPC endpoint named instead of the card's must keep the URL's scheme.
    let stderr = refused_start(
        signed
            .policy()
            .insert("model.a2a.rpc_url", "https://agent.example/"),
        &env,
    );
    assert!(stderr.contains("model.a2a.rpc_url"), "{stderr}");
    assert!(stderr.contains("same scheme"), "{stderr}");

    // No keys and no switch: the policy itself is refused.
    let stderr = refused_start(signed.policy().remove("model.a2a.card_jwks_file"), &env);
    assert!(stderr.contains("model.a2a.card_jwks_file"), "{stderr}");
}

#[tokio::test]
async fn the_agents_credential_and_its_errors_stay_behind_the_door() {
    let upstream = UpstreamAgent::start(true);
    // Named but unset: start-up refuses, naming the variable.
    let stderr = refused_start(upstream.policy(), &[]);
    assert!(stderr.contains(UPSTREAM_TOKEN_ENV), "{stderr}");
    assert!(stderr.contains("model.a2a.token_env"), "{stderr}");

    // A credential the agent refuses: the task fails without the agent's words.
    let door = ServedPolicy::start(
        &upstream.policy(),
        &["alice"],
        &[(UPSTREAM_TOKEN_ENV, "not-the-agents-credential")],
    );
    let answer = send_text(&door.server.door(), &door.tokens[0], "hi", None).await;
    let task = task_of(&answer);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
    let whole = task.to_string();
    assert!(!whole.contains("unauthorized"), "{whole}");
    assert!(!whole.contains("127.0.0.1"), "{whole}");
    let log = door.server.log_with("HTTP status 401");
    assert!(log.contains("HTTP status 401"), "{log}");
    assert!(
        !log.contains("not-the-agents-credential"),
        "the credential reached the log"
    );
}

#[tokio::test]
async fn a_cancel_reaches_the_agents_task_while_it_works_and_while_it_waits() {
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream
            .policy()
            .set("capabilities.streaming", true)
            .set("capabilities.cancel_running", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let cancels = async || artifact_text(task_of(&send_text(&url, token, "cancels", None).await));
    assert_eq!(cancels().await, "cancels: 0");

    // A working task: canceled once the agent has said which task it is working on.
    let request = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
        "params": {"message": text_message("slow")}});
    let mut response = open_stream(&url, token, &request).await;
    let seen = read_until(&mut response, "step 1").await;
    let first: Value = serde_json::from_str(
        seen.split("\n\n")
            .next()
            .and_then(|e| e.strip_prefix("data: "))
            .unwrap(),
    )
    .unwrap();
    let id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    let canceled = rpc(
        &url,
        token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    assert_eq!(cancels().await, "cancels: 1");

    // A task waiting for input.
    let waiting = send_text(&url, token, "input", None).await;
    let id = task_of(&waiting)["id"].as_str().unwrap().to_owned();
    let canceled = rpc(
        &url,
        token,
        json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    assert_eq!(cancels().await, "cancels: 2");
    let stored = get_task(&url, token, &id, None).await;
    assert_eq!(stored["result"]["status"]["state"], "TASK_STATE_CANCELED");
}

#[tokio::test]
async fn a_subscription_to_a_task_waiting_for_input_follows_it_to_its_end() {
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream
            .policy()
            .set("capabilities.streaming", true)
            .set("capabilities.subscriptions", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let waiting = send_text(&url, token, "input", None).await;
    let task = task_of(&waiting).clone();
    let id = task["id"].as_str().unwrap().to_owned();
    let request = json!({"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask",
        "params": {"id": id}});
    let mut subscription = open_stream(&url, token, &request).await;
    let mut seen = read_until(&mut subscription, "\n\n").await;
    assert!(seen.contains("TASK_STATE_INPUT_REQUIRED"), "{seen}");

    let mut more = text_message("the rest");
    more["taskId"] = json!(id);
    more["contextId"] = task["contextId"].clone();
    let done = send(&url, token, more).await;
    assert_eq!(task_of(&done)["status"]["state"], "TASK_STATE_COMPLETED");
    while let Some(chunk) = subscription.chunk().await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("you said: the rest"), "{seen}");
    let last: Value = serde_json::from_str(
        seen.trim_end()
            .rsplit("\n\n")
            .next()
            .and_then(|e| e.strip_prefix("data: "))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_misbehaving_agent_is_asked_once_and_bounded_and_its_words_stay_behind() {
    let agent = MisbehavingAgent::start().await;
    let door = ServedPolicy::start(&agent.policy(2), &["alice"], &[]);
    let (token, url) = (&door.tokens[0], door.server.door());

    // Each message reaches the agent exactly once.
    let answer = send_text(&url, token, "hello", None).await;
    assert_eq!(artifact_text(task_of(&answer)), "agent says: hello");
    assert_eq!(agent.posts(), 1);

    for (text, why) in [
        ("redirect", "a redirect is not followed"),
        ("huge", "an answer over 4 MiB is cut off"),
        ("hang", "an agent that does not answer is given up on"),
        ("rpc-error", "a JSON-RPC error"),
        (
            "repeated",
            "an answer with a member twice is refused, not read last-wins",
        ),
        (
            "break",
            "a connection broken before the answer: the message is not sent again",
        ),
    ] {
        let before = agent.posts();
        let answer = send_text(&url, token, text, None).await;
        let task = task_of(&answer);
        assert_eq!(
            task["status"]["state"], "TASK_STATE_FAILED",
            "{why}: {task}"
        );
        assert!(!task.to_string().contains(AGENT_SECRET), "{why}: {task}");
        assert_eq!(agent.posts(), before + 1, "{why}: asked once");
    }
    assert_eq!(agent.redirected(), 0, "the redirect was followed");
    let log = door.server.log_with("JSON-RPC error -32603");
    assert!(
        !log.contains(AGENT_SECRET),
        "the agent's words reached the log"
    );
    assert!(log.contains("JSON-RPC error -32603"), "{log}");
}

/// Reading a task is safe to repeat: a `GetTask` whose connection broke before its answer is
/// asked once more on a new connection, and the task is followed to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_read_whose_connection_broke_is_read_again_once() {
    let agent = MisbehavingAgent::start().await;
    let door = ServedPolicy::start(&agent.policy(10), &["alice"], &[]);
    let (token, url) = (&door.tokens[0], door.server.door());
    let answer = send_text(&url, token, "follow", None).await;
    let task = task_of(&answer);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(artifact_text(task), "followed to its end");
    assert_eq!(
        agent.posts(),
        3,
        "the message once, the broken read, the read again"
    );
}

#[tokio::test]
async fn an_agent_that_does_not_stream_is_asked_with_send_message_and_canceled_by_its_task() {
    let upstream = UpstreamAgent::start_with(true, false);
    let door = door(
        upstream
            .policy()
            .set("capabilities.streaming", true)
            .set("capabilities.cancel_running", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let answer = send_text(&url, token, "slow", None).await;
    assert_eq!(artifact_text(task_of(&answer)), "slow work done");
    // A streaming peer still gets the answer, in one piece.
    let request = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
        "params": {"message": text_message("hello")}});
    let events = open_stream(&url, token, &request)
        .await
        .text()
        .await
        .unwrap();
    assert!(events.contains("upstream says: hello"), "{events}");
    // A task waiting for input is canceled on the agent's side too.
    let waiting = send_text(&url, token, "input", None).await;
    let id = task_of(&waiting)["id"].as_str().unwrap().to_owned();
    let canceled = rpc(
        &url,
        token,
        json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(
        artifact_text(task_of(&send_text(&url, token, "cancels", None).await)),
        "cancels: 1"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_an_agent_reads_and_writes_is_charged_to_the_owners_budget() {
    let agent = MisbehavingAgent::start().await;
    // About seven tokens a message: "hello" read, "agent says: hello" written.
    let door = ServedPolicy::start(
        &agent.policy(10).set("budgets.tokens_per_day", 10),
        &["alice"],
        &[],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    for _ in 0..2 {
        let answer = send_text(&url, token, "hello", None).await;
        assert_eq!(task_of(&answer)["status"]["state"], "TASK_STATE_COMPLETED");
    }
    let refused = send_text(&url, token, "hello", None).await;
    assert_eq!(
        task_of(&refused)["status"]["state"],
        "TASK_STATE_REJECTED",
        "{refused}"
    );
    assert_eq!(
        agent.posts(),
        2,
        "the refused message never reached the agent"
    );
}

#[tokio::test]
async fn a_continuation_refused_by_the_budget_rejects_the_task_and_cancels_the_agents() {
    let upstream = UpstreamAgent::start(true);
    let spent = door(
        upstream.policy().set("budgets.tokens_per_day", 10),
        &["alice"],
    );
    let (token, url) = (&spent.tokens[0], spent.server.door());
    // Asking for input spends the day's budget (its question is over 40 bytes).
    let waiting = send_text(&url, token, "input", None).await;
    let task = task_of(&waiting).clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let mut more = text_message("more");
    more["taskId"] = task["id"].clone();
    let refused = send(&url, token, more).await;
    let rejected = task_of(&refused);
    assert_eq!(rejected["id"], task["id"]);
    assert_eq!(
        rejected["status"]["state"], "TASK_STATE_REJECTED",
        "{rejected}"
    );
    assert_eq!(
        rejected["history"].as_array().unwrap().len(),
        4,
        "{rejected}"
    );
    let stored = get_task(&url, token, task["id"].as_str().unwrap(), None).await;
    assert_eq!(stored["result"]["status"]["state"], "TASK_STATE_REJECTED");
    // The agent's task was canceled: nobody will answer it now. (Counting needs a message,
    // which the budget refuses, so the count is read through a second peergate.)
    let counting = door(upstream.policy(), &["bob"]);
    let count = send_text(
        &counting.server.door(),
        &counting.tokens[0],
        "cancels",
        None,
    )
    .await;
    assert_eq!(artifact_text(task_of(&count)), "cancels: 1");
}

#[tokio::test]
async fn the_agent_sees_message_ids_apart_per_peer_and_text_within_the_limit() {
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream.policy().set("tasks.max_text_bytes", 1024),
        &["alice", "bob"],
    );
    let url = door.server.door();
    // The same messageId from two peers reaches the agent as two ids, each keeping its prefix.
    let mut seen = Vec::new();
    for token in &door.tokens {
        let mut message = text_message("message-id");
        message["messageId"] = json!("tck-shared-1");
        let answer = send(&url, token, message).await;
        seen.push(artifact_text(task_of(&answer)));
    }
    assert!(
        seen.iter().all(|id| id.starts_with("tck-shared-1-")),
        "{seen:?}"
    );
    assert_ne!(seen[0], seen[1]);
    // Text over the limit reaches the agent cut, with the mark a model would see.
    let long = "y".repeat(4096);
    let answer = send_text(&url, &door.tokens[0], &long, None).await;
    let echoed = artifact_text(task_of(&answer));
    assert!(
        echoed.contains("[peergate: message truncated"),
        "{}",
        &echoed[..80.min(echoed.len())]
    );
    assert!(
        echoed.len() < 1200,
        "{} bytes reached the agent",
        echoed.len()
    );
}

/// The admin listener's `/ready` once `check` holds for its body, or a failure after 20 s.
async fn admin_ready_until(
    server: &ServeProcess,
    check: impl Fn(u16, &Value) -> bool,
) -> (u16, Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let response = reqwest::get(format!("http://{}/ready", server.admin_addr))
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        if check(status, &body) {
            return (status, body);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/ready stayed {status}: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_not_up_yet_is_waited_for_and_one_that_goes_away_leaves_the_door_open() {
    const SCRAPE: &str = "scrape-token-for-the-agent-probe-0123456789";
    let port = crate::common::postgres::free_port();
    // The agent comes up two seconds after peergate starts: start-up waits for it.
    let late = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(2));
        UpstreamAgent::start_on(true, true, port)
    });
    let policy = UpstreamAgent::policy_at(&format!("http://127.0.0.1:{port}"))
        .insert("model.a2a.startup_wait_seconds", 25)
        .insert("server.metrics_token_env", "PEERGATE_TEST_SCRAPE");
    let door = ServedPolicy::start(
        &policy,
        &["alice"],
        &[
            (UPSTREAM_TOKEN_ENV, UPSTREAM_TOKEN),
            ("PEERGATE_TEST_SCRAPE", SCRAPE),
        ],
    );
    let agent = late.join().unwrap();
    let log = door.server.log_text();
    assert!(
        log.contains("the agent at model.a2a.url is not up yet; retrying"),
        "{log}"
    );
    let answer = send_text(&door.server.door(), &door.tokens[0], "hi", None).await;
    assert_eq!(artifact_text(task_of(&answer)), "upstream says: hi");
    let (status, body) = admin_ready_until(&door.server, |_, body| body["agent"] == "ok").await;
    assert_eq!(
        (status, body["status"].clone()),
        (200, json!("ready")),
        "{body}"
    );

    // The agent goes away: the instance still serves (a load balancer keeps it), says it is
    // degraded and why, and the peer is told the agent could not be reached.
    drop(agent);
    let (status, body) =
        admin_ready_until(&door.server, |_, body| body["agent"] == "unreachable").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"status": "degraded", "store": "ok", "redis": "not_configured",
            "backend": "a2a", "agent": "unreachable"})
    );
    let door_ready = reqwest::get(format!("http://{}/ready", door.server.addr))
        .await
        .unwrap();
    assert_eq!(door_ready.status(), 200);
    assert_eq!(
        door_ready.json::<Value>().await.unwrap(),
        json!({"status": "degraded"})
    );
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", door.server.admin_addr))
        .bearer_auth(SCRAPE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("peergate_part_up{part=\"agent\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("peergate_part_up{part=\"store\"} 1"),
        "{metrics}"
    );
    let answer = send_text(&door.server.door(), &door.tokens[0], "hi again", None).await;
    let task = task_of(&answer);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "The agent behind this gateway could not be reached. Please retry later."
    );
    // The operator's log names the agent, not a model server.
    let log = door.server.log_with("the agent could not be reached");
    assert!(log.contains("the agent could not be reached"), "{log}");
    assert!(!log.contains("model server"), "{log}");

    // Back on the same port: ready again.
    let _agent = UpstreamAgent::start_on(true, true, port);
    let (status, body) = admin_ready_until(&door.server, |_, body| body["agent"] == "ok").await;
    assert_eq!(
        (status, body["status"].clone()),
        (200, json!("ready")),
        "{body}"
    );
    // The operator's log says each change once: the agent went away, and came back.
    let log = door.server.log_with("answers again");
    let lines = |needle: &str| log.lines().filter(|line| line.contains(needle)).count();
    assert_eq!(lines("does not answer; serving degraded"), 1, "{log}");
    assert_eq!(lines("answers again"), 1, "{log}");
    assert!(log.contains("agent"), "{log}");
}

#[tokio::test]
async fn an_agent_still_down_after_the_wait_stops_start_up_naming_the_setting() {
    let port = crate::common::postgres::free_port();
    let policy = PolicyEdit::default()
        .set("model.backend", "a2a")
        .insert("model.a2a.url", format!("http://127.0.0.1:{port}").as_str())
        .insert("model.a2a.dangerous_accept_unsigned_card", true)
        .insert("model.a2a.startup_wait_seconds", 1);
    let stderr = refused_start(policy, &[]);
    assert!(stderr.contains("model.a2a.url"), "{stderr}");
    assert!(stderr.contains("not up"), "{stderr}");
    assert!(
        stderr.contains("waited 1 s, model.a2a.startup_wait_seconds"),
        "{stderr}"
    );
    assert!(stderr.contains("not up yet; retrying"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_public_card_is_the_agents_own_where_the_policy_does_not_say_otherwise() {
    install_test_crypto();
    let upstream = UpstreamAgent::start(true);
    let agents: Value = reqwest::get(format!("{}/.well-known/agent-card.json", upstream.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let served = door(upstream.policy(), &["alice"]);
    let card = served.server.card().await;
    for member in [
        "name",
        "description",
        "version",
        "skills",
        "defaultInputModes",
        "defaultOutputModes",
        "provider",
    ] {
        assert_eq!(card[member], agents[member], "{member}: {card}");
    }
    assert_eq!(card["name"], "SDK upstream");
    // The door's own: its interface, its schemes, its capabilities, its signature.
    assert_ne!(card["supportedInterfaces"], agents["supportedInterfaces"]);
    assert!(
        card["supportedInterfaces"][0]["url"]
            .as_str()
            .unwrap()
            .contains(&served.server.addr.to_string()),
        "{card}"
    );
    // The agent's card says it takes push configs; the narrow door does not.
    assert_eq!(agents["capabilities"]["pushNotifications"], true);
    assert_ne!(card["capabilities"]["pushNotifications"], true, "{card}");
    assert!(card["securitySchemes"].get("bearer").is_none(), "{card}");
    assert!(card["signatures"].is_array(), "{card}");
    // The extended card's own skill says what answers behind the door.
    let extended: Value = reqwest::Client::new()
        .get(format!(
            "http://{}/.well-known/agent-card.json",
            served.server.addr
        ))
        .bearer_auth(&served.tokens[0])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ask = extended["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|skill| skill["id"] == "ask")
        .unwrap_or_else(|| panic!("{extended}"));
    assert_eq!(ask["name"], "Ask the agent", "{ask}");
    drop(served);

    // What the policy's [card] sets wins, member by member.
    let served = door(
        upstream
            .policy()
            .set("card.name", "Example Corp front door")
            .set("card.description", "Our agent, through our door."),
        &[],
    );
    let card = served.server.card().await;
    assert_eq!(card["name"], "Example Corp front door");
    assert_eq!(card["description"], "Our agent, through our door.");
    assert_eq!(card["version"], agents["version"]);
    assert_eq!(card["skills"], agents["skills"]);
}

/// The connections the agent says it was asked over (card, probes and messages together).
async fn connections_seen(door: &str, token: &str) -> usize {
    let answer = send(door, token, text_message("connections")).await;
    let text = artifact_text(&answer["result"]["task"]);
    text.strip_prefix("connections: ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a count: {text}"))
}

/// A good HTTP client keeps its connection: twenty messages one after another reach the agent
/// over one or two connections, whether the agent streams or not. When it streams, each message
/// goes as a `SendStreamingMessage`, and the agent ends each stream 0.2 s after its last event:
/// a client that stops at the last event and drops the stream loses the connection every time
/// (21 connections before this was fixed).
#[tokio::test]
async fn twenty_messages_in_a_row_reach_the_agent_over_one_connection() {
    for streams in [true, false] {
        let upstream = UpstreamAgent::start_ending_streams_late(streams);
        let door = door(upstream.policy(), &["alice"]);
        let (token, url) = (&door.tokens[0], door.server.door());
        for n in 0..20 {
            let answer = send(&url, token, text_message(&format!("message {n}"))).await;
            assert_eq!(
                answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{answer}"
            );
        }
        let seen = connections_seen(&url, token).await;
        assert!(
            seen <= 2,
            "the agent (streams: {streams}) was asked over {seen} connections for 21 messages"
        );
    }
}

/// What follows an answer is read for a bounded time only: an agent that keeps its stream open
/// after the task's final event does not hold the answer until the backend's timeout (which
/// would fail the task); after a second its connection is dropped and the answer goes out.
#[tokio::test]
async fn an_agent_that_keeps_its_stream_open_after_the_answer_does_not_hold_it() {
    let upstream = UpstreamAgent::start_ending_streams_after(true, "60");
    let door = door(
        upstream.policy().set("model.timeout_seconds", 10),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    for n in 0..2 {
        let answer = send(&url, token, text_message(&format!("message {n}"))).await;
        assert_eq!(
            answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{answer}"
        );
    }
}

/// Every part a peer sends reaches the agent as sent, each kind alone and all together, with
/// its filename, media type and metadata, the message's metadata and extensions and the
/// request's metadata; over a blocking send and a streaming one (both asked upstream as the
/// agent's card allows). The agent answers with what it received (the SDK's own reading).
#[tokio::test]
async fn every_part_and_both_metadata_reach_the_agent_as_sent() {
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream.policy().set("capabilities.streaming", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let kinds = [
        json!({"text": "hello", "metadata": {"p": "text"}}),
        json!({"data": {"a": ["x", "y"]}}),
        json!({"raw": "aGVsbG8=", "filename": "hello.txt", "mediaType": "text/plain"}),
        json!({"url": "https://files.example/a.pdf", "mediaType": "application/pdf"}),
    ];
    // 0.3's file part arrives in 1.0's shape.
    let legacy = json!({"kind": "file", "file": {"uri": "https://files.example/b.txt",
        "mimeType": "text/plain", "name": "b.txt"}});
    let legacy_as_sent = json!({"url": "https://files.example/b.txt", "filename": "b.txt",
        "mediaType": "text/plain"});
    let mut cases: Vec<(Vec<Value>, Vec<Value>)> = kinds
        .iter()
        .map(|p| (vec![p.clone()], vec![p.clone()]))
        .collect();
    cases.push((vec![legacy.clone()], vec![legacy_as_sent.clone()]));
    let mut all: Vec<Value> = kinds.to_vec();
    all.push(legacy);
    let mut all_as_sent: Vec<Value> = kinds.to_vec();
    all_as_sent.push(legacy_as_sent);
    cases.push((all, all_as_sent));
    for (streaming, (sent, expected)) in [false, true]
        .into_iter()
        .flat_map(|s| cases.iter().map(move |case| (s, case)))
    {
        let message = json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
            "parts": sent, "metadata": {"m": "message"},
            "extensions": ["https://extensions.example/v1"]});
        let params =
            json!({"message": message, "metadata": {"script": "received", "r": "request"}});
        let received = received_by_the_agent(&url, token, params, streaming).await;
        let what = format!("{sent:?}, streaming: {streaming}");
        assert_eq!(received["message"]["parts"], json!(expected), "{what}");
        assert_eq!(
            received["message"]["metadata"],
            json!({"m": "message"}),
            "{what}"
        );
        assert_eq!(
            received["message"]["extensions"],
            json!(["https://extensions.example/v1"]),
            "{what}"
        );
        assert_eq!(
            received["metadata"],
            json!({"script": "received", "r": "request"}),
            "{what}"
        );
    }
}

/// What the agent says it received, from the data part of its answer (the `received` script).
async fn received_by_the_agent(url: &str, token: &str, params: Value, streaming: bool) -> Value {
    let method = if streaming {
        "SendStreamingMessage"
    } else {
        "SendMessage"
    };
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    if !streaming {
        let answer = rpc(url, token, request).await;
        let task = task_of(&answer);
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
        return task["artifacts"][0]["parts"][0]["data"].clone();
    }
    let events = stream_events(url, token, &request).await;
    events
        .iter()
        .find_map(|e| {
            let data = &e["result"]["artifactUpdate"]["artifact"]["parts"][0]["data"];
            (!data.is_null()).then(|| data.clone())
        })
        .unwrap_or_else(|| panic!("no data part in {events:?}"))
}

/// The agent's card is cleaned before peergate signs it: what a browser, a terminal or a log
/// would misread is left out (and said once in the log), each skill id comes once, and the card
/// stays within what peergate's own client reads; a newline in the agent's name forges no log
/// line.
#[tokio::test(flavor = "multi_thread")]
async fn the_agents_card_is_cleaned_before_peergate_signs_it() {
    let forged = "2031-01-01T00:00:00.000000Z  INFO peergate: forged";
    let skill = |id: String, description: String| json!({"id": id, "name": "n", "description": description, "tags": ["t"]});
    let mut skills = vec![
        skill("a".into(), "<script>alert(1)</script>".into()),
        skill("b".into(), "kept".into()),
        skill("b".into(), "a second b".into()),
    ];
    skills.extend((0..200).map(|i| skill(format!("s{i}"), "x".repeat(1000))));
    let agent = MisbehavingAgent::start_with_card(json!({
        "name": format!("evil\n{forged}"),
        "description": "plain \u{202e}reversed\u{9b}",
        "provider": {"organization": "Acme", "url": "http://169.254.169.254/latest"},
        "documentationUrl": "javascript:alert(1)",
        "iconUrl": "data:image/svg+xml,<svg/>",
        "skills": skills,
    }))
    .await;
    let door = door(agent.policy(10), &["alice"]);
    let card = door.server.card().await;
    assert_eq!(card["description"], "plain reversed", "{card}");
    assert!(
        card.get("provider").is_none() && card.get("iconUrl").is_none(),
        "{card}"
    );
    assert!(card.get("documentationUrl").is_none(), "{card}");
    let ids: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids.iter().filter(|id| **id == "b").count(), 1, "{ids:?}");
    assert!(!ids.contains(&"a"), "{ids:?}");
    // Within what peergate's own client reads: it verifies.
    let base = format!("http://{}", door.server.addr);
    let (code, _, stderr) = cli(&[
        "card",
        "verify",
        &format!("{base}/.well-known/agent-card.json"),
        "--jwks",
        &format!("{base}/.well-known/jwks.json"),
        "--dangerous-allow-http-loopback",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let log = door.server.log_with("would misread");
    assert_eq!(log.matches("would misread").count(), 1, "{log}");
    assert!(
        !log.lines().any(|line| line.starts_with("2031-")),
        "a forged line: {log}"
    );
}

/// The agent is asked no more than the partner asked: a blocking send reaches it as
/// `SendMessage`, a streaming one as `SendStreamingMessage`; only when a peer may cancel a
/// running turn (`capabilities.cancel_running`) is a blocking send asked through the agent's
/// stream, whose first event names the task a cancel must reach.
#[tokio::test]
async fn the_agent_is_asked_as_the_partner_asked() {
    let upstream = UpstreamAgent::start(true);
    let counted = |door: &ServedPolicy| {
        let (url, token) = (door.server.door(), door.tokens[0].clone());
        async move { artifact_text(task_of(&send_text(&url, &token, "methods", None).await)) }
    };
    let plain = door(
        upstream.policy().set("capabilities.streaming", true),
        &["alice"],
    );
    assert_eq!(
        counted(&plain).await,
        "SendMessage=1 SendStreamingMessage=0"
    );
    let (token, url) = (&plain.tokens[0], plain.server.door());
    let request = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
        "params": {"message": text_message("streamed")}});
    open_stream(&url, token, &request)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        counted(&plain).await,
        "SendMessage=2 SendStreamingMessage=1"
    );
    drop(plain);
    let cancelable = door(
        upstream.policy().set("capabilities.cancel_running", true),
        &["bob"],
    );
    assert_eq!(
        counted(&cancelable).await,
        "SendMessage=2 SendStreamingMessage=2"
    );
}

/// The claims of a receipt (the signature is checked in `receipts.rs`; here, what it states).
fn receipt_claims(task: &Value) -> Value {
    let receipt = task["metadata"][peergate::jose::receipt::EXTENSION]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt in {task}"));
    jws_claims(receipt)
}

#[tokio::test]
async fn a_receipt_in_front_of_an_agent_names_its_task_and_digests_its_answer_as_read() {
    use peergate::jose::receipt::answer_digest;
    let upstream = UpstreamAgent::start(true);
    let door = door(upstream.policy().set("receipts.mode", "always"), &["alice"]);
    let (token, url) = (&door.tokens[0], door.server.door());
    let answer = send_text(&url, token, "hello", None).await;
    let claims = receipt_claims(task_of(&answer));
    let up = &claims["up"];
    let agent_task = up["task"].as_str().unwrap_or_else(|| panic!("{claims}"));
    assert_ne!(agent_task, claims["a2a"]["task"], "the agent's own task id");
    // The agent's task as the agent itself serves it has the digest the receipt states.
    let theirs = rpc(
        &format!("{}/", upstream.url),
        UPSTREAM_TOKEN,
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": agent_task}}),
    )
    .await;
    assert_eq!(
        up["ans"],
        answer_digest(&theirs["result"]).unwrap(),
        "{theirs}"
    );
    assert!(up.get("rcpt").is_none(), "this agent sends no receipt");
    // An answer given as a message: no agent task, the message's digest.
    let answer = send(&url, token, text_message("message")).await;
    let task = answer["result"]["task"].clone();
    let up = &receipt_claims(&task)["up"];
    assert!(up.get("task").is_none(), "{up}");
    // (The agent's message id is its own, so the test cannot recompute it: a digest is there.)
    assert_eq!(up["ans"].as_str().map(str::len), Some(43), "{up}");
}

#[tokio::test]
async fn a_task_waiting_for_input_that_the_peer_cancels_gets_its_receipt() {
    use peergate::jose::receipt::{EXTENSION, answer_digest, digest, protojson};
    let upstream = UpstreamAgent::start(true);
    let door = door(
        upstream
            .policy()
            .set("receipts.mode", "always")
            .set("capabilities.cancel_running", true),
        &["alice"],
    );
    let (token, url) = (&door.tokens[0], door.server.door());
    let waiting = task_of(&send_text(&url, token, "input", None).await).clone();
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert!(
        waiting["metadata"].get(EXTENSION).is_none(),
        "not final: no receipt yet"
    );
    let id = waiting["id"].as_str().unwrap();
    let canceled = rpc(
        &url,
        token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    let task = &canceled["result"];
    assert_eq!(task["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let claims = receipt_claims(task);
    assert_eq!(claims["a2a"]["method"], "CancelTask");
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_CANCELED");
    let request = protojson(&json!({"id": id}), "lf.a2a.v1.CancelTaskRequest").unwrap();
    assert_eq!(claims["dig"]["req"], digest(&request).unwrap());
    assert_eq!(claims["dig"]["ans"], answer_digest(task).unwrap());
    // The same receipt on every read.
    let read = get_task(&url, token, id, None).await;
    assert_eq!(
        read["result"]["metadata"][EXTENSION],
        task["metadata"][EXTENSION]
    );
}
