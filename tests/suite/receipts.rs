//! Answer receipts over real HTTP: a finished task carries a receipt that verifies against the
//! keys the signed card names, whose digests are those of the message as sent and of the task
//! as `GetTask` returns it, the same on every read, and on every binding for what it was sent.

use crate::common::*;
use peergate::jose::receipt::{self, EXTENSION, Expected};
use peergate::jose::verify::TrustedKeys;
use serde_json::{Value, json};

fn with_receipts(mode: &str) -> peergate::config::Policy {
    PolicyEdit::default()
        .set("capabilities.http_json", true)
        .set("receipts.mode", mode)
        .policy()
}

/// A message with a text part, a data part and metadata, in A2A 1.0's ProtoJSON form.
fn message(id: &str) -> Value {
    json!({
        "messageId": id,
        "role": "ROLE_USER",
        "parts": [{"text": "what is the price?"}, {"data": {"sku": "A-1", "qty": 2}}],
        "metadata": {"order": "o-77"},
    })
}

/// The gateway's published keys, as a partner reads them.
async fn keys_of(gw: &TestGateway) -> TrustedKeys {
    let jwks = reqwest::get(gw.url("/.well-known/jwks.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut keys = TrustedKeys::new();
    keys.add_jwks(&jwks).unwrap();
    keys
}

/// What a partner expects of a receipt from `issuer`, by `gw`'s clock.
fn expected_of<'a>(gw: &TestGateway, issuer: &'a str) -> Expected<'a> {
    Expected {
        issuer,
        audience: None,
        now: peergate::clock::Clock::now(&gw.clock),
    }
}

async fn text_of(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

fn receipt_of(task: &Value) -> &str {
    task["metadata"][EXTENSION]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt in {task}"))
}

async fn sent_over_rest(gw: &TestGateway, token: &str, message: Value) -> Value {
    let response = reqwest::Client::new()
        .post(gw.url("/a2a/v1/rest/message:send"))
        .header("a2a-version", "1.0")
        .bearer_auth(token)
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()["task"].clone()
}

#[tokio::test]
async fn a_finished_task_carries_a_receipt_that_verifies_and_digests_what_was_asked_and_answered() {
    let gw = TestGateway::start_with(with_receipts("always")).await;
    let token = gw.add_peer("alice");
    // The card declares the extension and the keys that verify receipts.
    let card = gw.card().await;
    let declared = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == EXTENSION)
        .unwrap_or_else(|| panic!("the card declares no receipts: {card}"))
        .clone();
    let kid = declared["params"]["kids"][0].as_str().unwrap().to_owned();
    assert_eq!(declared["params"]["typ"], receipt::TYP);
    assert_ne!(declared["required"], true, "{declared}");

    let sent = message("m-receipt-1");
    let request =
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": sent}});
    let task = task_of(&rpc(&gw.door, &token, request.clone()).await).clone();
    let keys = keys_of(&gw).await;
    let origin = format!("http://{}", gw.addr);
    let now = peergate::clock::Clock::now(&gw.clock);
    let expected = Expected {
        issuer: &origin,
        audience: None,
        now,
    };
    let claims = receipt::verify(receipt_of(&task), &keys, expected).unwrap();
    let header = receipt_of(&task).split('.').next().unwrap();
    assert!(
        String::from_utf8(base64_url(header))
            .unwrap()
            .contains(&kid),
        "signed with the key the card names"
    );
    // What it states: the call, who asked (the token's public id, never the token), when.
    assert_eq!(claims["a2a"]["binding"], "JSONRPC");
    assert_eq!(claims["a2a"]["method"], "SendMessage");
    assert_eq!(claims["a2a"]["task"], task["id"]);
    assert_eq!(claims["a2a"]["context"], task["contextId"]);
    assert_eq!(claims["a2a"]["message"], "m-receipt-1");
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(claims["cred"]["scheme"], "bearer");
    let credential = claims["cred"]["id"].as_str().unwrap();
    assert!(token.contains(credential) && token != credential);
    assert_eq!(claims["aud"], claims["sub"]);
    // The digests: the message as sent, the task as read back, the card as served.
    assert_eq!(
        claims["dig"]["req"],
        receipt::message_digest(&sent).unwrap()
    );
    let answer = receipt::answer_digest(&task).unwrap();
    assert_eq!(claims["dig"]["ans"], answer);
    let card_bytes = reqwest::get(gw.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(claims["card"], receipt::sha256_b64url(&card_bytes));

    // GetTask answers the same receipt, and the same answer.
    let id = task["id"].as_str().unwrap();
    let read = get_task(&gw.door, &token, id, None).await["result"].clone();
    assert_eq!(receipt_of(&read), receipt_of(&task));
    let read_answer = receipt::answer_digest(&read).unwrap();
    assert_eq!(read_answer, answer);
    // An answer changed after the fact no longer matches what the receipt states.
    let mut changed = task.clone();
    changed["status"]["message"]["parts"][0]["text"] = json!("a different answer");
    let tampered = receipt::answer_digest(&changed).unwrap();
    assert_ne!(tampered, answer);

    gw.stop().await;
}

#[tokio::test]
async fn the_command_line_verifies_a_receipt_offline_and_refuses_a_changed_answer_request_or_peer()
{
    let gw = TestGateway::start_with(with_receipts("always")).await;
    let token = gw.add_peer("alice");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("m-cli")}});
    let task = task_of(&rpc(&gw.door, &token, request.clone()).await).clone();
    let mut changed = task.clone();
    changed["status"]["message"]["parts"][0]["text"] = json!("a different answer");
    // Offline: the card and the key set saved, as a partner keeps them.
    let card_text = text_of(&gw.url("/.well-known/agent-card.json")).await;
    let jwks_text = text_of(&gw.url("/.well-known/jwks.json")).await;
    gw.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (card_file, jwks_file) = (
        write("card.json", &card_text),
        write("jwks.json", &jwks_text),
    );
    let file = |name: &str, value: &Value| write(name, &value.to_string());
    // A partner checks it all offline with the command line: the card, the receipt, both
    // digests; and a changed answer, a changed request or another peer's id is refused.
    let (task_file, request_file) = (file("task.json", &task), file("request.json", &request));
    let (changed_file, other_request) = (
        file("changed.json", &changed),
        file("other.json", &message("m-other")),
    );
    let verify = |task: &str, request: &str, peer: Option<&str>| {
        let extra = peer.map(|peer| ["--peer-id", peer]);
        let extra: &[&str] = extra.as_ref().map_or(&[], |e| e.as_slice());
        verify_receipt((task, request), (&card_file, &jwks_file), extra)
    };
    let (code, out, err) = verify(&task_file, &request_file, None);
    assert_eq!(code, 0, "{out}{err}");
    for line in [
        "card: verified",
        "receipt: verified",
        "request: digest matches",
        "answer: digest matches",
        "card: the one in force",
        "audience: not checked",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let (code, _, err) = verify(&changed_file, &request_file, None);
    assert_ne!(code, 0);
    assert!(
        err.contains("answer: the receipt states another digest"),
        "{err}"
    );
    let (code, _, err) = verify(&task_file, &other_request, None);
    assert_ne!(code, 0);
    assert!(
        err.contains("request: the receipt states another digest"),
        "{err}"
    );
    let (code, _, err) = verify(&task_file, &request_file, Some("peer_someone_else"));
    assert_ne!(code, 0);
    assert!(err.contains("aud"), "{err}");
}

#[tokio::test]
async fn each_binding_states_itself_and_digests_what_it_was_sent() {
    let gw = TestGateway::start_with(with_receipts("always")).await;
    let token = gw.add_peer("alice");
    let keys = keys_of(&gw).await;
    let origin = format!("http://{}", gw.addr);
    // The HTTP+JSON binding: its receipt states its binding and digests what it was sent.
    let sent = message("m-receipt-2");
    let task = sent_over_rest(&gw, &token, sent.clone()).await;
    let claims = receipt::verify(receipt_of(&task), &keys, expected_of(&gw, &origin)).unwrap();
    assert_eq!(claims["a2a"]["binding"], "HTTP+JSON");
    assert_eq!(
        claims["dig"]["req"],
        receipt::message_digest(&sent).unwrap()
    );
    gw.stop().await;
}

#[tokio::test]
async fn on_request_a_receipt_comes_only_to_a_call_that_activates_the_extension() {
    let gw = TestGateway::start_with(with_receipts("on_request")).await;
    let token = gw.add_peer("alice");
    let plain = task_of(&send_text(&gw.door, &token, "no receipt", None).await).clone();
    assert!(plain["metadata"][EXTENSION].is_null(), "{plain}");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("m-asked")}});
    let response = reqwest::Client::new()
        .post(&gw.door)
        .header("a2a-version", "1.0")
        .header("a2a-extensions", EXTENSION)
        .bearer_auth(&token)
        .json(&request)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let task = task_of(&response);
    let keys = keys_of(&gw).await;
    let origin = format!("http://{}", gw.addr);
    let expected = Expected {
        issuer: &origin,
        audience: None,
        now: peergate::clock::Clock::now(&gw.clock),
    };
    receipt::verify(receipt_of(task), &keys, expected).unwrap();
    gw.stop().await;
}

fn base64_url(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

/// Posts a streaming request and reads every event's `result`.
async fn streamed(door: &str, token: &str, message: Value) -> Vec<Value> {
    let request = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
        "params": {"message": message}});
    stream_events(door, token, &request)
        .await
        .into_iter()
        .map(|event| event["result"].clone())
        .collect()
}

fn chain_of(events: &[Value]) -> Value {
    let mut chain = receipt::EventChain::default();
    for event in events {
        chain.add(event).unwrap();
    }
    chain.claim().unwrap()
}

#[tokio::test]
async fn a_stream_ends_with_one_receipt_that_covers_every_event_in_order() {
    let policy = PolicyEdit::default()
        .set("capabilities.streaming", true)
        .set("receipts.mode", "always")
        .policy();
    let gw = TestGateway::start_with(policy).await;
    let token = gw.add_peer("alice");
    let sent = message("m-stream");
    let events = streamed(&gw.door, &token, sent.clone()).await;
    assert!(events.len() > 3, "{events:?}");
    // Only the final event carries the receipt.
    let last = &events.last().unwrap()["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED");
    let jws = last["metadata"][EXTENSION].as_str().unwrap();
    let carrying = events
        .iter()
        .filter(|e| e.to_string().contains(jws))
        .count();
    assert_eq!(carrying, 1);
    let origin = format!("http://{}", gw.addr);
    let expected = Expected {
        issuer: &origin,
        audience: None,
        now: peergate::clock::Clock::now(&gw.clock),
    };
    let claims = receipt::verify(jws, &keys_of(&gw).await, expected).unwrap();
    assert_eq!(claims["a2a"]["method"], "SendStreamingMessage");
    assert_eq!(
        claims["dig"]["req"],
        receipt::message_digest(&sent).unwrap()
    );
    // The events as received give the receipt's chain; one dropped, repeated or swapped does
    // not.
    assert_eq!(claims["dig"]["evt"], chain_of(&events), "{events:?}");
    let mut dropped = events.clone();
    dropped.remove(1);
    assert_ne!(claims["dig"]["evt"], chain_of(&dropped));
    let mut repeated = events.clone();
    repeated.insert(1, events[1].clone());
    assert_ne!(claims["dig"]["evt"], chain_of(&repeated));
    let mut swapped = events.clone();
    swapped.swap(1, 2);
    assert_ne!(claims["dig"]["evt"], chain_of(&swapped));
    // GetTask afterwards: the same receipt, and the answer it states.
    let id = claims["a2a"]["task"].as_str().unwrap();
    let read = get_task(&gw.door, &token, id, None).await["result"].clone();
    assert_eq!(receipt_of(&read), jws);
    let answer = receipt::answer_digest(&read).unwrap();
    assert_eq!(claims["dig"]["ans"], answer);
    // The command line checks the chain from the events as kept; a dropped one is refused.
    let card = text_of(&gw.url("/.well-known/agent-card.json")).await;
    let jwks = text_of(&gw.url("/.well-known/jwks.json")).await;
    gw.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (card, jwks) = (write("card.json", card), write("jwks.json", jwks));
    let (task, request) = (
        write("task.json", read.to_string()),
        write("request.json", sent.to_string()),
    );
    let verify =
        |events: &str| verify_receipt((&task, &request), (&card, &jwks), &["--events", events]);
    let (code, out, err) = verify(&write(
        "events.json",
        Value::from(events.clone()).to_string(),
    ));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("events: the {} events chain", events.len())),
        "{out}"
    );
    let (code, _, err) = verify(&write("dropped.json", Value::from(dropped).to_string()));
    assert_ne!(code, 0);
    assert!(
        err.contains("events: the receipt states another chain"),
        "{err}"
    );
}

/// The published vectors (`tests/data/receipts/vectors.json`, computed by `make-vectors.py`
/// with the official Python SDK's protobuf types): the digests peergate computes are theirs,
/// and the message read as any binding reads it digests the same.
#[test]
fn the_published_vectors_hold() {
    let text =
        std::fs::read_to_string(repo_root().join("tests/data/receipts/vectors.json")).unwrap();
    let vectors: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        receipt::message_digest(&vectors["message"]).unwrap(),
        vectors["req"]
    );
    let read: peergate::protocol::types::IncomingMessage =
        serde_json::from_value(vectors["message"].clone()).unwrap();
    let form = peergate::a2a::receipts::message_form(&read);
    assert_eq!(receipt::message_digest(&form).unwrap(), vectors["req"]);
    let projection = receipt::answer_projection(&vectors["task"]);
    assert_eq!(projection, vectors["answer_projection"]);
    assert_eq!(
        receipt::answer_digest(&vectors["task"]).unwrap(),
        vectors["ans"]
    );
    let events = vectors["events"].as_array().unwrap();
    assert_eq!(chain_of(events), vectors["evt"]);
}

#[tokio::test]
async fn a_task_refused_by_its_owners_budget_is_proven_too() {
    let gw = TestGateway::start_with(with_receipts("always")).await;
    let token = gw.add_peer("alice");
    let (code, _, err) = gw.cli(&["admin", "budget", "operator", "--model", "forbid"]);
    assert_eq!(code, 0, "{err}");
    let task = task_of(&send_text(&gw.door, &token, "refused?", None).await).clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    let origin = format!("http://{}", gw.addr);
    let expected = Expected {
        issuer: &origin,
        audience: None,
        now: peergate::clock::Clock::now(&gw.clock),
    };
    let claims = receipt::verify(receipt_of(&task), &keys_of(&gw).await, expected).unwrap();
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_REJECTED");
    let answer = receipt::answer_digest(&task).unwrap();
    assert_eq!(claims["dig"]["ans"], answer);
    gw.stop().await;
}

/// The official Python SDK client, over JSON-RPC and gRPC, blocking and streaming: the receipt
/// it receives verifies against the key set, and its digests are those of the message as the
/// SDK sent it and the task and events as the SDK received them, each as the SDK's own
/// protobuf prints them.
#[test]
fn the_official_python_client_receives_receipts_it_can_check_on_every_binding() {
    let python = python_with_sdk();
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap();
    let policy = dir.path().join("receipts.toml");
    let on = full.replacen("[receipts]\n", "[receipts]\nmode = \"always\"\n", 1);
    std::fs::write(&policy, on.replacen("mode = \"off\"\n", "", 1)).unwrap();
    let script = repo_root().join("tests/interop/a2a_python_receipt.py");
    for binding in ["JSONRPC", "GRPC"] {
        let serve = ["--policy", policy.to_str().unwrap()];
        let (summary, door) = run_sdk_client_serving(
            &python,
            &script,
            "python-sdk",
            (&serve, &["--binding", binding]),
        );
        let mut keys = TrustedKeys::new();
        keys.add_jwks(&summary["jwks"].to_string()).unwrap();
        let origin = reqwest::Url::parse(&door)
            .unwrap()
            .origin()
            .ascii_serialization();
        let expected = Expected {
            issuer: &origin,
            audience: None,
            now: peergate::clock::Clock::now(&peergate::clock::SystemClock),
        };
        let jws = summary["receipt"].as_str().unwrap();
        let claims = receipt::verify(jws, &keys, expected).unwrap();
        assert_eq!(claims["a2a"]["binding"], binding, "{claims}");
        let sent = receipt::message_digest(&summary["message"]).unwrap();
        assert_eq!(claims["dig"]["req"], sent, "{binding}: {summary}");
        let answer = receipt::answer_digest(&summary["task"]).unwrap();
        assert_eq!(claims["dig"]["ans"], answer, "{binding}: {summary}");
        let jws = summary["stream_receipt"].as_str().unwrap();
        let claims = receipt::verify(jws, &keys, expected).unwrap();
        let events = summary["stream_events"].as_array().unwrap();
        assert_eq!(
            claims["dig"]["evt"],
            chain_of(events),
            "{binding}: {summary}"
        );
        let sent = receipt::message_digest(&summary["stream_message"]).unwrap();
        assert_eq!(claims["dig"]["req"], sent, "{binding}");
    }
}

#[tokio::test]
async fn a_rotated_receipt_key_stays_published_and_old_receipts_verify_until_it_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let key = |alg: &str, kid: &str| generated_key(dir.path(), alg, kid);
    let (old, new) = (key("EdDSA", "receipts-2026"), key("ES256", "receipts-2027"));
    let entry = |kid: &str, alg: &str, file: &str| -> Vec<(&'static str, toml_edit::Value)> {
        vec![
            ("kid", kid.into()),
            ("alg", alg.into()),
            ("private_key_file", file.into()),
        ]
    };
    let served = |keys: Vec<Vec<(&'static str, toml_edit::Value)>>| {
        let mut policy = PolicyEdit::default().set("receipts.mode", "always");
        for key in &keys {
            policy = policy.push_table("signing.receipt_keys", key);
        }
        TestGateway::start_with(policy.policy())
    };
    // Signed with the 2026 key.
    let first = served(vec![entry("receipts-2026", "EdDSA", &old)]).await;
    let token = first.add_peer("alice");
    let task = task_of(&send_text(&first.door, &token, "before", None).await).clone();
    let before = receipt_of(&task).to_owned();
    let first_origin = format!("http://{}", first.addr);
    first.stop().await;

    // Rotated: 2027 signs, 2026 retires but stays published; the card names both.
    let mut retiring = entry("receipts-2026", "EdDSA", &old);
    retiring.push(("retiring_until", "2999-01-01".into()));
    let rotated = served(vec![entry("receipts-2027", "ES256", &new), retiring]).await;
    let declared = rotated.card().await["capabilities"]["extensions"].clone();
    let declared = declared
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == EXTENSION)
        .unwrap()
        .clone();
    assert_eq!(
        declared["params"]["kids"],
        json!(["receipts-2027", "receipts-2026"])
    );
    let keys = keys_of(&rotated).await;
    let claims = receipt::verify(&before, &keys, expected_of(&rotated, &first_origin)).unwrap();
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_COMPLETED");
    let token = rotated.add_peer("alice");
    let task = task_of(&send_text(&rotated.door, &token, "after", None).await).clone();
    let header = receipt_of(&task).split('.').next().unwrap().to_owned();
    let header: Value = serde_json::from_slice(&base64_url(&header)).unwrap();
    assert_eq!(
        (header["kid"].as_str(), header["alg"].as_str()),
        (Some("receipts-2027"), Some("ES256"))
    );
    rotated.stop().await;

    // Dropped from the list: receipts it signed no longer verify (keep it while they are kept).
    let dropped = served(vec![entry("receipts-2027", "ES256", &new)]).await;
    let keys = keys_of(&dropped).await;
    assert_eq!(
        receipt::verify(&before, &keys, expected_of(&dropped, &first_origin)),
        Err(receipt::ReceiptError::UnknownKey("receipts-2026".into()))
    );
    dropped.stop().await;
}

#[tokio::test]
async fn a_task_answered_before_it_finished_gets_its_receipt_when_it_does() {
    let policy = PolicyEdit::default()
        .set("capabilities.non_blocking", true)
        .set("receipts.mode", "always")
        .policy();
    let gw = TestGateway::start_with(policy).await;
    let token = gw.add_peer("alice");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": message("m-later"), "configuration": {"returnImmediately": true}}});
    let working = task_of(&rpc(&gw.door, &token, request).await).clone();
    assert_eq!(working["status"]["state"], "TASK_STATE_WORKING");
    assert!(working["metadata"][EXTENSION].is_null(), "{working}");
    let id = working["id"].as_str().unwrap().to_owned();
    let mut finished = Value::Null;
    for _ in 0..100 {
        finished = get_task(&gw.door, &token, &id, None).await["result"].clone();
        if finished["status"]["state"] == "TASK_STATE_COMPLETED" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let origin = format!("http://{}", gw.addr);
    let keys = keys_of(&gw).await;
    let claims = receipt::verify(receipt_of(&finished), &keys, expected_of(&gw, &origin)).unwrap();
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        claims["dig"]["ans"],
        receipt::answer_digest(&finished).unwrap()
    );
    gw.stop().await;
}
