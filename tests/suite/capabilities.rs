//! The parts of A2A 1.0 beyond the narrow door, switched on by `[capabilities]` and refused
//! with the specification's errors while off, over real HTTP against a real model server.

use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A policy over `model` with the given capabilities on.
fn policy(model: &FakeModel, on: &[&str]) -> peergate::config::Policy {
    let mut edit = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("model.timeout_seconds", 20);
    if model.base_url.starts_with("https://") {
        edit = edit.insert("model.openai.ca_file", test_ca_path().to_str().unwrap());
    }
    for capability in on {
        edit = edit.set(&format!("capabilities.{capability}"), true);
    }
    edit.policy()
}

fn send_request(text: &str, context_id: Option<&str>, return_immediately: bool) -> Value {
    let mut message = json!({"messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(context_id) = context_id {
        message["contextId"] = json!(context_id);
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": message, "configuration": {"returnImmediately": return_immediately}}})
}

fn cancel_request(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}})
}

/// The state of the task `GetTask` finds.
async fn state_of(door: &str, token: &str, id: &str) -> String {
    let found = get_task(door, token, id, None).await;
    found["result"]["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Waits until the stored task is in `state` (at most ten seconds).
async fn wait_for_state(door: &str, token: &str, id: &str, state: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if state_of(door, token, id).await == state {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The id of the one working task of the peer, once the model has it.
async fn working_task(door: &str, token: &str) -> String {
    let listed = rpc(
        door,
        token,
        json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks",
            "params": {"status": "TASK_STATE_WORKING"}}),
    )
    .await;
    listed["result"]["tasks"][0]["id"]
        .as_str()
        .expect("a working task")
        .to_owned()
}

#[tokio::test]
async fn with_everything_off_non_blocking_sends_and_cancelling_running_turns_are_refused() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(&model, &[])).await;
    let token = gw.add_peer("alice");
    let refused = rpc(&gw.door, &token, send_request("now", None, true)).await;
    assert_eq!(error_code(&refused), -32004, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("capabilities.non_blocking"),
        "{refused}"
    );
    // A blocking turn is under way; cancelling it is refused, and the turn ends on its own.
    let (door, sender) = (gw.door.clone(), token.clone());
    let blocking =
        tokio::spawn(async move { rpc(&door, &sender, send_request("wait", None, false)).await });
    model.wait_for_arrival().await;
    let id = working_task(&gw.door, &token).await;
    let refused = rpc(&gw.door, &token, cancel_request(&id)).await;
    assert_eq!(error_code(&refused), -32002, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("capabilities.cancel_running"),
        "{refused}"
    );
    model.release_one();
    let answered = blocking.await.unwrap();
    assert_eq!(
        task_of(&answered)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_non_blocking_send_answers_the_working_task_and_the_turn_finishes_without_the_request() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(&model, &["non_blocking"])).await;
    let token = gw.add_peer("alice");
    let answered = rpc(&gw.door, &token, send_request("later", None, true)).await;
    let task = task_of(&answered);
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{answered}");
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();
    model.wait_for_arrival().await;
    assert_eq!(state_of(&gw.door, &token, &id).await, "TASK_STATE_WORKING");
    // The context's turn is still held: a second message waits for the first.
    let (door, sender, ctx) = (gw.door.clone(), token.clone(), context.clone());
    let second = tokio::spawn(async move {
        rpc(&door, &sender, send_request("second", Some(&ctx), false)).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        model.requests().len(),
        1,
        "the second waits for the first turn"
    );
    model.set(ModelBehaviour::Answer);
    model.release_one();
    assert!(wait_for_state(&gw.door, &token, &id, "TASK_STATE_COMPLETED").await);
    let finished = get_task(&gw.door, &token, &id, None).await;
    assert!(
        reply_text(&finished["result"]).contains("model says: later"),
        "{finished}"
    );
    let second = second.await.unwrap();
    assert_eq!(task_of(&second)["status"]["state"], "TASK_STATE_COMPLETED");
    let history = model.requests().last().unwrap().to_string();
    assert!(
        history.contains("model says: later"),
        "the second saw the first: {history}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn cancelling_a_running_turn_stops_it_and_stores_it_canceled() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(&model, &["non_blocking", "cancel_running"])).await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    for return_immediately in [true, false] {
        let (door, sender) = (gw.door.clone(), alice.clone());
        let sending = tokio::spawn(async move {
            rpc(
                &door,
                &sender,
                send_request("stop me", Some("ctx-cancel"), return_immediately),
            )
            .await
        });
        model.wait_for_arrival().await;
        let id = working_task(&gw.door, &alice).await;
        // Another peer cannot cancel it, and learns nothing about it.
        let theirs = rpc(&gw.door, &bob, cancel_request(&id)).await;
        assert_eq!(error_code(&theirs), -32001, "{theirs}");
        let canceled = rpc(&gw.door, &alice, cancel_request(&id)).await;
        assert_eq!(
            canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
            "{canceled}"
        );
        assert_eq!(state_of(&gw.door, &alice, &id).await, "TASK_STATE_CANCELED");
        let sent = sending.await.unwrap();
        if !return_immediately {
            // The blocking request is answered with the canceled task.
            assert_eq!(
                task_of(&sent)["status"]["state"],
                "TASK_STATE_CANCELED",
                "{sent}"
            );
        }
        // A finished task cannot be canceled again.
        let again = rpc(&gw.door, &alice, cancel_request(&id)).await;
        assert_eq!(error_code(&again), -32002, "{again}");
    }
    // The context's turn was given back: the next message is answered, not left waiting.
    model.set(ModelBehaviour::Answer);
    let next = send_text(&gw.door, &alice, "after", Some("ctx-cancel")).await;
    assert_eq!(
        task_of(&next)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{next}"
    );
    gw.stop().await;
}

#[test]
fn a_subscription_without_streaming_stops_start_up_naming_it() {
    // A subscription is a stream.
    let text = PolicyEdit::default()
        .set("capabilities.subscriptions", true)
        .text();
    let refused = peergate::config::Policy::parse(&text, &peergate::config::PolicySource::Embedded)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("needs capabilities.streaming"),
        "{refused}"
    );
}

/// Gives the default owner a daily budget of `tokens`, and moves the clock past the budget
/// cache so the gateway reads it.
fn day_budget(gw: &TestGateway, tokens: u32) {
    let tokens = tokens.to_string();
    let (code, _, stderr) = gw.cli(&["admin", "budget", "operator", "--tokens-per-day", &tokens]);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(10));
}

/// Posts `request` and reads the whole event stream: (content type, each event's JSON).
async fn stream(door: &str, token: &str, request: Value) -> (String, Vec<Value>) {
    let response = reqwest::Client::new()
        .post(door)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = response.text().await.unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (content_type, events)
}

fn streaming_request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
}

fn message(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER", "parts": [{"text": text}]}})
}

#[tokio::test]
async fn a_streamed_message_carries_the_task_the_text_as_it_arrives_and_the_final_status() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("capabilities.streaming", true)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let card = gw.card().await;
    assert_eq!(card["capabilities"]["streaming"], true, "the card says so");
    let (content_type, events) = stream(
        &gw.door,
        &token,
        streaming_request("SendStreamingMessage", message("stream me")),
    )
    .await;
    assert_eq!(content_type, "text/event-stream");
    assert!(events.iter().all(|e| e["id"] == "s-1"), "{events:?}");
    let results: Vec<&Value> = events.iter().map(|e| &e["result"]).collect();
    let task = &results[0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{events:?}");
    let id = task["id"].as_str().unwrap();
    // The echo backend streams its answer a line at a time.
    let pieces: Vec<&str> = results[1..]
        .iter()
        .filter(|r| r["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING")
        .map(|r| {
            r["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(pieces.len() > 2, "{events:?}");
    let last = results.last().unwrap();
    assert_eq!(last["statusUpdate"]["taskId"], id);
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let answer = last["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(pieces.concat(), answer, "the pieces make the answer");
    let artifact = &results[results.len() - 2]["artifactUpdate"];
    assert_eq!(artifact["artifact"]["parts"][0]["text"], answer);
    // Stored exactly as a synchronous turn.
    let stored = get_task(&gw.door, &token, id, None).await;
    assert_eq!(stored["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(reply_text(&stored["result"]), answer);
    gw.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_a_stream_does_not_lose_the_answer() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(&model, &["streaming"])).await;
    let token = gw.add_peer("alice");
    let mut response = reqwest::Client::new()
        .post(&gw.door)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(streaming_request("SendStreamingMessage", message("keep it")).to_string())
        .send()
        .await
        .unwrap();
    let first = response.chunk().await.unwrap().unwrap();
    let first = String::from_utf8_lossy(&first).to_string();
    assert!(first.starts_with("data: "), "{first}");
    let event: Value = serde_json::from_str(first.trim().strip_prefix("data: ").unwrap()).unwrap();
    let id = event["result"]["task"]["id"].as_str().unwrap().to_owned();
    model.wait_for_arrival().await;
    drop(response);
    model.set(ModelBehaviour::Answer);
    model.release_one();
    assert!(wait_for_state(&gw.door, &token, &id, "TASK_STATE_COMPLETED").await);
    gw.stop().await;
}

#[tokio::test]
async fn a_subscription_follows_a_working_task_to_its_final_state() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(
        &model,
        &["streaming", "subscriptions", "non_blocking"],
    ))
    .await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    let sent = rpc(&gw.door, &alice, send_request("follow me", None, true)).await;
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    model.wait_for_arrival().await;
    // Another peer's task is not found, as if it did not exist.
    let theirs = rpc(
        &gw.door,
        &bob,
        streaming_request("SubscribeToTask", json!({"id": id})),
    )
    .await;
    assert_eq!(error_code(&theirs), -32001, "{theirs}");
    let (door, token, task) = (gw.door.clone(), alice.clone(), id.clone());
    let following = tokio::spawn(async move {
        stream(
            &door,
            &token,
            streaming_request("SubscribeToTask", json!({"id": task})),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    model.set(ModelBehaviour::Answer);
    model.release_one();
    let (content_type, events) = following.await.unwrap();
    assert_eq!(content_type, "text/event-stream");
    assert_eq!(events[0]["result"]["task"]["id"], id.as_str(), "{events:?}");
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    let last = &events.last().unwrap()["result"]["statusUpdate"];
    assert_eq!(
        last["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    // The answer comes before the final status, as on a streamed turn.
    let artifact = &events[events.len() - 2]["result"]["artifactUpdate"]["artifact"];
    assert_eq!(
        artifact["parts"][0]["text"], "model says: follow me",
        "{events:?}"
    );
    // A finished task cannot be subscribed to.
    let finished = rpc(
        &gw.door,
        &alice,
        streaming_request("SubscribeToTask", json!({"id": id})),
    )
    .await;
    assert_eq!(error_code(&finished), -32004, "{finished}");
    gw.stop().await;
}

#[tokio::test]
async fn subscriptions_need_their_own_switch() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("capabilities.streaming", true)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let sent = send_text(&gw.door, &token, "hi", None).await;
    let id = task_of(&sent)["id"].as_str().unwrap();
    let refused = rpc(
        &gw.door,
        &token,
        streaming_request("SubscribeToTask", json!({"id": id})),
    )
    .await;
    assert_eq!(error_code(&refused), -32004);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("capabilities.subscriptions")
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_openai_backend_streams_with_usage_and_the_budget_counts_it() {
    streams_with_usage_counted(FakeModel::start(ModelBehaviour::Answer).await).await;
}

#[tokio::test]
async fn a_hosted_model_over_tls_streams_with_usage_too() {
    streams_with_usage_counted(FakeModel::start_tls(ModelBehaviour::Answer).await).await;
}

async fn streams_with_usage_counted(model: FakeModel) {
    let gw = TestGateway::start_with(policy(&model, &["streaming"])).await;
    let token = gw.add_peer("alice");
    // Each answer costs 18 tokens (reported in the stream's last chunk): two spend the day.
    day_budget(&gw, 30);
    for round in 0..2 {
        let (_, events) = stream(
            &gw.door,
            &token,
            streaming_request(
                "SendStreamingMessage",
                message(&format!("question {round}")),
            ),
        )
        .await;
        let pieces: Vec<&str> = events
            .iter()
            .map(|e| &e["result"]["statusUpdate"]["status"])
            .filter(|status| status["state"] == "TASK_STATE_WORKING")
            .map(|status| status["message"]["parts"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(pieces.concat(), format!("model says: question {round}"));
        assert!(pieces.len() >= 3, "a piece a word: {pieces:?}");
        let last = &events.last().unwrap()["result"]["statusUpdate"]["status"];
        assert_eq!(last["state"], "TASK_STATE_COMPLETED", "{events:?}");
    }
    let asked = model.requests();
    assert_eq!(asked[0]["stream"], true);
    assert_eq!(asked[0]["stream_options"]["include_usage"], true);
    let (_, events) = stream(
        &gw.door,
        &token,
        streaming_request("SendStreamingMessage", message("one more")),
    )
    .await;
    let rejected = &events[0]["result"]["task"]["status"];
    assert_eq!(rejected["state"], "TASK_STATE_REJECTED", "{events:?}");
    gw.stop().await;
}

#[test]
fn the_full_policy_is_the_default_with_every_capability_on() {
    let read = |name: &str| -> toml_edit::DocumentMut {
        std::fs::read_to_string(repo_root().join("policies").join(name))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (mut default, mut full) = (read("default.toml"), read("full.toml"));
    let capabilities = full["capabilities"].as_table().unwrap().clone();
    for (name, value) in capabilities.iter() {
        assert_eq!(value.as_bool(), Some(true), "capabilities.{name}");
    }
    let on: Vec<&str> = capabilities.iter().map(|(name, _)| name).collect();
    assert_eq!(
        on,
        [
            "non_blocking",
            "cancel_running",
            "streaming",
            "subscriptions",
            "http_json",
            "push_notifications"
        ]
    );
    default.remove("capabilities");
    full.remove("capabilities");
    // The gRPC listener is the full policy's too, and only its.
    assert!(default.get("grpc").is_none());
    assert_eq!(
        full.remove("grpc").unwrap()["listen"].as_str(),
        Some("127.0.0.1:8082")
    );
    let values = |document: &toml_edit::DocumentMut| {
        let text = document.to_string();
        text.lines()
            .filter(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        values(&default),
        values(&full),
        "only [capabilities] and [grpc] differ"
    );
    let policy = peergate::config::Policy::load(Some(&repo_root().join("policies/full.toml")))
        .unwrap()
        .0;
    assert!(policy.capabilities.streaming && policy.capabilities.cancel_running);
}

#[tokio::test]
async fn a_client_that_stops_reading_a_stream_does_not_stall_the_turn() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("capabilities.streaming", true)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    // The echo backend streams a line at a time: tens of thousands of events, far more than
    // the client's socket and the stream's buffer hold unread.
    let text = "x\n".repeat(30_000);
    let mut response = reqwest::Client::new()
        .post(&gw.door)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(streaming_request("SendStreamingMessage", message(&text)).to_string())
        .send()
        .await
        .unwrap();
    // The first event (the working task, which carries the long text) may span chunks.
    let mut first = String::new();
    while !first.contains("\n\n") {
        let chunk = response.chunk().await.unwrap().unwrap();
        first.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = first.split("\n\n").next().unwrap();
    let event: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
    let id = event["result"]["task"]["id"].as_str().unwrap().to_owned();
    // The client holds the connection open and reads nothing more; the turn is stored anyway.
    assert!(
        wait_for_state(&gw.door, &token, &id, "TASK_STATE_COMPLETED").await,
        "the turn waited for a client that stopped reading"
    );
    drop(response);
    gw.stop().await;
}

#[tokio::test]
async fn streamed_text_the_model_did_not_account_for_still_counts_against_the_budget() {
    let model = FakeModel::start(ModelBehaviour::StreamWithoutUsage).await;
    let gw = TestGateway::start_with(policy(&model, &["streaming"])).await;
    let token = gw.add_peer("alice");
    day_budget(&gw, 30);
    // About 160 bytes streamed, no usage reported: about 40 tokens, over the day's 30.
    let question = "why ".repeat(37);
    let (_, events) = stream(
        &gw.door,
        &token,
        streaming_request("SendStreamingMessage", message(&question)),
    )
    .await;
    let last = &events.last().unwrap()["result"]["statusUpdate"]["status"];
    assert_eq!(last["state"], "TASK_STATE_COMPLETED", "{events:?}");
    let (_, events) = stream(
        &gw.door,
        &token,
        streaming_request("SendStreamingMessage", message("again")),
    )
    .await;
    let refused = &events[0]["result"]["task"]["status"];
    assert_eq!(refused["state"], "TASK_STATE_REJECTED", "{events:?}");
    gw.stop().await;
}

/// How long the flood's attempts wait for an answer or a close before failing the test.
const UNANSWERED: Duration = Duration::from_secs(60);

/// An HTTP/1.1 POST of `body` to the door as the peer holding `token`, as bytes.
fn raw_post(gw: &TestGateway, token: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let head = format!(
        "POST /a2a/v1 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n",
        gw.addr,
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

/// What came back on a connection of the flood's.
enum RawAnswer {
    /// A 200: the connection, its stream left unread.
    Stream(tokio::net::TcpStream),
    /// Any other status: the answer's head and its JSON body.
    Refused(String, Value),
}

/// Sends `request` on a new connection from `from` to `door`; what came back, or `None` for a
/// connection the gateway closed before an answer's head.
async fn raw_attempt(
    door: std::net::SocketAddr,
    from: [u8; 4],
    request: &[u8],
) -> Option<RawAnswer> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // Only the gateway's close counts: the test's own socket failing would pass for one.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind((std::net::Ipv4Addr::from(from), 0).into())
        .expect("a local address");
    let mut connection = socket.connect(door).await.expect("a connection");
    connection.write_all(request).await.ok()?;
    let mut read = Vec::new();
    let head_end = loop {
        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 4096];
        match connection.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => read.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&read[..head_end]).to_ascii_lowercase();
    if head.starts_with("http/1.1 200") {
        return Some(RawAnswer::Stream(connection));
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|length| length.trim().parse().ok())
        .expect("a refusal with a length");
    while read.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = connection.read(&mut chunk).await.expect("a refusal's body");
        assert!(n > 0, "a refusal's body cut short");
        read.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&read[head_end..head_end + length]).expect("a JSON body");
    Some(RawAnswer::Refused(head, body))
}

/// A client from `address` (a loopback address of its own), one connection per request.
fn client_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(address))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_peer_opening_1024_streams_leaves_other_peers_streaming_and_sending() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    // No rate limit binds: only the caps on streams and connections are in play.
    let mut edit = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("model.timeout_seconds", 20)
        .set("limits.per_ip_per_minute", 1_000_000_000);
    for capability in ["streaming", "subscriptions", "non_blocking"] {
        edit = edit.set(&format!("capabilities.{capability}"), true);
    }
    let gw = TestGateway::start_with(edit.policy()).await;
    let (mallory, alice) = (gw.add_peer("mallory"), gw.add_peer("alice"));
    gw.cli(&["peer", "limit", "mallory", "100000/min"]);
    let sent = rpc(&gw.door, &mallory, send_request("hold on", None, true)).await;
    let task = task_of(&sent)["id"].as_str().unwrap().to_owned();
    model.wait_for_arrival().await;

    // Mallory, from one address, opens 1,024 subscriptions at once and keeps what it gets
    // (unread, so that its connections stay open and meet the cap on them). Each attempt is a
    // connection of its own with no HTTP client's pool between, and is bounded: a connection
    // the gateway neither answers nor closes fails the test instead of holding it forever.
    let subscribe = streaming_request("SubscribeToTask", json!({"id": task}));
    let request = std::sync::Arc::new(raw_post(&gw, &mallory, &subscribe));
    let attempts: Vec<_> = (0..1024)
        .map(|_| {
            let (door, request) = (gw.addr, request.clone());
            tokio::spawn(async move {
                let attempt = raw_attempt(door, [127, 0, 0, 2], &request);
                tokio::time::timeout(UNANSWERED, attempt).await
            })
        })
        .collect();
    let (mut open, mut capped, mut closed) = (Vec::new(), 0, 0);
    for attempt in attempts {
        let answered = attempt.await.unwrap();
        match answered.expect("a connection neither answered nor closed") {
            Some(RawAnswer::Stream(connection)) => open.push(connection),
            Some(RawAnswer::Refused(head, body)) => {
                assert!(head.starts_with("http/1.1 429"), "{head}");
                assert!(head.contains("\r\nretry-after: 5\r\n"), "{head}");
                assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
                capped += 1;
            }
            None => closed += 1,
        }
    }
    assert_eq!(
        open.len(),
        8,
        "the documented default cap: limits.streams_per_peer"
    );
    assert!(
        capped > 0 && closed > 0,
        "{capped} capped, {closed} closed at the connection cap"
    );

    // Meanwhile Alice, from her own address, sends and streams as usual.
    let own = client_from([127, 0, 0, 3]);
    let mine = rpc(&gw.door, &alice, send_request("mine", None, true)).await;
    let mine = task_of(&mine)["id"].as_str().unwrap().to_owned();
    let mut following = open_stream_with(
        &own,
        &gw.door,
        &alice,
        &streaming_request("SubscribeToTask", json!({"id": mine})),
    )
    .await
    .expect("Alice's connection was refused");
    assert_eq!(following.status(), 200);
    read_until(&mut following, "TASK_STATE_WORKING").await;
    let listed = rpc(
        &gw.door,
        &alice,
        json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {}}),
    )
    .await;
    assert_eq!(
        listed["result"]["tasks"].as_array().unwrap().len(),
        1,
        "{listed}"
    );
    model.set(ModelBehaviour::Answer);
    model.release_one();
    model.release_one();
    read_until(&mut following, "TASK_STATE_COMPLETED").await;

    // Mallory's places come back when its streams close.
    drop(open);
    let flood = client_from([127, 0, 0, 2]);
    let again = async {
        loop {
            if let Some(response) = open_stream_with(
                &flood,
                &gw.door,
                &mallory,
                &streaming_request("SubscribeToTask", json!({"id": mine})),
            )
            .await
                && response.status() != 429
            {
                return response.status();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // Alice's task is not Mallory's: not found, but no longer refused for the cap.
    let status = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .unwrap();
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_reads_nothing_is_closed_and_its_stream_released() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("capabilities.streaming", true)
            .set("server.write_stall_seconds", 1)
            .set("server.max_body_bytes", 4 * 1024 * 1024)
            .set("tasks.max_text_bytes", 1024 * 1024)
            .set("limits.streams_per_peer", 1)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    // About 3 MB of events: the echo backend streams the 1 MiB text a line at a time, then
    // sends it whole as the artifact and in the final status.
    let text = "a line of the question that the echo backend repeats\n".repeat(19_000);
    let request = streaming_request("SendStreamingMessage", message(&text)).to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut silent = socket.connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /a2a/v1 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n",
        gw.addr,
        request.len()
    );
    silent.write_all(head.as_bytes()).await.unwrap();
    silent.write_all(request.as_bytes()).await.unwrap();
    // The answer's head, and not one byte more is read.
    let mut head = [0u8; 12];
    silent.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    // The stream holds the peer's one place while its client reads nothing...
    let probe = message("probe");
    let refused = open_stream(
        &gw.door,
        &token,
        &streaming_request("SendStreamingMessage", probe.clone()),
    )
    .await;
    assert_eq!(
        refused.status(),
        429,
        "the silent stream did not hold its place"
    );
    // ...until the connection is closed for not reading, and its place (with everything the
    // stream buffered) is given back.
    let released = async {
        loop {
            let response = open_stream(
                &gw.door,
                &token,
                &streaming_request("SendStreamingMessage", probe.clone()),
            )
            .await;
            if response.status() == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), released)
        .await
        .expect("a client that read nothing kept its stream");
    // What reached the silent client's buffers is there, then the connection ends: never the
    // whole answer.
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match silent.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the silent client's connection was kept open"
    );
    let got = String::from_utf8_lossy(&got);
    assert!(
        !got.contains("TASK_STATE_COMPLETED"),
        "the whole answer was delivered"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peers_own_stream_cap_replaces_the_policys() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(policy(
        &model,
        &["streaming", "subscriptions", "non_blocking", "http_json"],
    ))
    .await;
    let alice = gw.add_peer("alice");
    let sent = rpc(&gw.door, &alice, send_request("hold on", None, true)).await;
    let task = task_of(&sent)["id"].as_str().unwrap().to_owned();
    model.wait_for_arrival().await;
    let subscribe = streaming_request("SubscribeToTask", json!({"id": task}));
    let (code, _, err) = gw.cli(&["peer", "streams", "alice", "1"]);
    assert_eq!(code, 0, "{err}");
    let first = open_stream(&gw.door, &alice, &subscribe).await;
    assert_eq!(first.status(), 200);
    let second = open_stream(&gw.door, &alice, &subscribe).await;
    assert_eq!(second.status(), 429, "her own cap of one");
    let body: Value = second.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 open streams"),
        "{body}"
    );
    // The HTTP+JSON binding counts against the same cap, and answers the same refusal.
    let rest = reqwest::Client::new()
        .get(gw.url(&format!("/a2a/v1/rest/tasks/{task}:subscribe")))
        .bearer_auth(&alice)
        .header("a2a-version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 429);
    assert_eq!(rest.headers()["retry-after"], "5");
    let body: Value = rest.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    let (code, _, err) = gw.cli(&["peer", "streams", "alice", "default"]);
    assert_eq!(code, 0, "{err}");
    let second = open_stream(&gw.door, &alice, &subscribe).await;
    assert_eq!(second.status(), 200, "the policy's eight again");
    let (code, _, err) = gw.cli(&["peer", "streams", "alice", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("from 1 to 10000"), "{err}");
    drop((first, second));
    model.set(ModelBehaviour::Answer);
    model.release_one();
    gw.stop().await;
}
