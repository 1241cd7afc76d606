//! The A2A door over real HTTP on 127.0.0.1: discovery, authentication, the JSON-RPC rules,
//! the message and task rules.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn card_is_public_the_same_on_both_paths_and_ignores_host() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .insert("server.public_base_url", "https://gw.example.org")
            .policy(),
    )
    .await;
    let client = reqwest::Client::new();
    let mut bodies = Vec::new();
    for path in ["/.well-known/agent-card.json", "/.well-known/agent.json"] {
        let response = client
            .get(gw.url(path))
            .header("host", "evil.example.net")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        bodies.push(response.text().await.unwrap());
    }
    assert_eq!(bodies[0], bodies[1]);
    assert!(!bodies[0].contains("evil.example.net"));
    let card: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(card["name"], "peergate");
    assert_eq!(card["version"], "0.1.0");
    assert!(card["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(
        card["supportedInterfaces"],
        json!([{"url": "https://gw.example.org/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}])
    );
    assert_eq!(card["capabilities"]["streaming"], false);
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    assert_eq!(
        card["securitySchemes"]["bearerAuth"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    // SDK clients attach credentials only for schemes listed as required.
    assert_eq!(
        card["securityRequirements"][0]["schemes"]["bearerAuth"],
        json!({})
    );
    gw.stop().await;
}

#[tokio::test]
async fn card_falls_back_to_the_listen_address_and_health_answers() {
    let gw = TestGateway::start().await;
    let card: Value = reqwest::Client::new()
        .get(gw.url("/.well-known/agent-card.json"))
        .header("host", "evil.example.net:9999")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("http://{}/a2a/v1", gw.addr)
    );
    let health = reqwest::get(gw.url("/health")).await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.json::<Value>().await.unwrap(),
        json!({"status": "healthy"})
    );
    gw.stop().await;
}

#[tokio::test]
async fn door_refuses_requests_without_a_valid_token() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    let mut typo = token.clone().into_bytes();
    typo[20] = if typo[20] == b'a' { b'b' } else { b'a' };
    let typo = String::from_utf8(typo).unwrap();
    let unknown = peergate::token::issue(peergate::token::CredentialKind::PeerToken)
        .unwrap()
        .token;
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "missing_credentials"),
        (Some("Basic YWxpY2U6cHc=".into()), "scheme_not_enabled"),
        (Some("Bearer".into()), "malformed_authorization"),
        (Some("Bearer not-a-token".into()), "invalid_token"),
        (Some(format!("Bearer {typo}")), "invalid_token"),
        (Some(format!("Bearer {unknown}")), "invalid_token"),
    ];
    let client = reqwest::Client::new();
    for (authorization, code) in cases {
        let mut request = client.post(&gw.door).body(body.clone());
        if let Some(value) = &authorization {
            request = request.header("authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{authorization:?}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            challenge.starts_with("Bearer realm=\"peergate\""),
            "{challenge}"
        );
        // RFC 6750 §3.1: a token that was presented and refused is named invalid_token in the
        // challenge too; a request without one gets no error attribute.
        assert_eq!(
            challenge.ends_with(r#", error="invalid_token""#),
            code == "invalid_token",
            "{authorization:?}: {challenge}"
        );
        let json: Value = response.json().await.unwrap();
        assert_eq!(json["error"]["code"], code, "{authorization:?}");
        assert!(
            !json.to_string().contains(&token[4..16]),
            "echoes the token id"
        );
    }
    // Two Authorization headers: neither is accepted, even though one is valid.
    let response = client
        .post(&gw.door)
        .header("authorization", format!("Bearer {token}"))
        .header("authorization", format!("Bearer {token}"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // The valid token alone works.
    let (status, _) = post_raw(&gw.door, Some(&token), body).await;
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn a_peer_token_opens_only_the_door() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let response = reqwest::Client::new()
        .get(gw.url("/admin"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let response = reqwest::Client::new()
        .get(&gw.door)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    gw.stop().await;
}

#[tokio::test]
async fn envelope_errors_are_json_rpc_errors_inside_http_200() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let cases: Vec<(Vec<u8>, i64, Value)> = vec![
        (b"{not json".to_vec(), -32700, Value::Null),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}".to_vec(),
            -32700,
            Value::Null,
        ),
        (
            br#"[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}]"#.to_vec(),
            -32600,
            Value::Null,
        ),
        (br#"{"id":5,"method":"GetTask"}"#.to_vec(), -32600, json!(5)),
        (
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"GetTask"}"#.to_vec(),
            -32600,
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":"s","method":42}"#.to_vec(),
            -32600,
            json!("s"),
        ),
        (
            br#"{"jsonrpc":"2.0","id":"s","method":"tasks/destroy"}"#.to_vec(),
            -32601,
            json!("s"),
        ),
        (
            br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":[1]}"#.to_vec(),
            -32602,
            json!(7),
        ),
        (
            br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"nope":1}}"#.to_vec(),
            -32602,
            json!(7),
        ),
    ];
    for (body, code, id) in cases {
        let (status, response) = post_raw(&gw.door, Some(&token), body.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            error_code(&response),
            code,
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(response["id"], id, "{}", String::from_utf8_lossy(&body));
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(
            response["error"]["data"][0]["@type"],
            "type.googleapis.com/google.rpc.ErrorInfo"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn ids_are_echoed_with_their_type_and_requests_without_id_are_answered() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    for id in [
        json!("abc"),
        json!(42),
        json!(-1),
        json!(9_007_199_254_740_991_i64),
    ] {
        let response = rpc(
            &gw.door,
            &token,
            json!({"jsonrpc": "2.0", "id": id, "method": "GetTask", "params": {"id": "nope"}}),
        )
        .await;
        assert_eq!(response["id"], id);
    }
    let response = rpc(
        &gw.door,
        &token,
        json!({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "no id"}]}}}),
    )
    .await;
    assert_eq!(response["id"], Value::Null);
    assert_eq!(
        task_of(&response)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    gw.stop().await;
}

#[tokio::test]
async fn method_table_with_aliases() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let sent = send_text(&gw.door, &token, "hello", None).await;
    let task_id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    let call = |method: &str, params: Value| {
        rpc(
            &gw.door,
            &token,
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
    };
    // 0.3 names work like the 1.0 names.
    let legacy = call(
        "message/send",
        json!({"message": {"kind": "message", "messageId": "m2", "role": "user", "parts": [{"kind": "text", "text": "legacy"}]}}),
    )
    .await;
    assert_eq!(task_of(&legacy)["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(reply_text(task_of(&legacy)).starts_with("echo: legacy"));
    let got = call("tasks/get", json!({"id": task_id})).await;
    assert_eq!(got["result"]["id"], task_id);
    // Cancel: own task → -32002; unknown → -32001; both names.
    for method in ["CancelTask", "tasks/cancel"] {
        assert_eq!(
            error_code(&call(method, json!({"id": task_id})).await),
            -32002
        );
        assert_eq!(
            error_code(&call(method, json!({"id": "unknown"})).await),
            -32001
        );
    }
    // Streaming is off in the narrow door: the specification's UnsupportedOperationError.
    for method in [
        "SendStreamingMessage",
        "message/stream",
        "SubscribeToTask",
        "tasks/resubscribe",
    ] {
        let response = call(method, json!({"id": task_id})).await;
        assert_eq!(error_code(&response), -32004, "{method}");
        assert_eq!(
            response["error"]["data"][0]["reason"],
            "UNSUPPORTED_OPERATION"
        );
        assert_eq!(response["error"]["data"][0]["domain"], "a2a-protocol.org");
    }
    // Push notifications are off: PushNotificationNotSupportedError for all four, both names.
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
        "tasks/pushNotificationConfig/delete",
    ] {
        let response = call(method, json!({"taskId": task_id})).await;
        assert_eq!(error_code(&response), -32003, "{method}");
        assert_eq!(
            response["error"]["data"][0]["reason"],
            "PUSH_NOTIFICATION_NOT_SUPPORTED"
        );
    }
    // ListTasks is a core method, in every policy, under both names.
    for method in ["ListTasks", "tasks/list"] {
        let listed = call(method, json!({})).await;
        let tasks = listed["result"]["tasks"].as_array().unwrap();
        assert!(
            tasks.iter().any(|t| t["id"] == task_id),
            "{method}: {listed}"
        );
    }
    assert_eq!(error_code(&call("sendmessage", json!({})).await), -32601);
    gw.stop().await;
}

/// `ListTasks` as `token` with `params`; the whole response.
async fn list_tasks(door: &str, token: &str, params: Value) -> Value {
    rpc(
        door,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}),
    )
    .await
}

#[tokio::test]
async fn list_tasks_shows_the_callers_tasks_newest_first_a_page_at_a_time() {
    let gw = TestGateway::start().await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    let mut mine = Vec::new();
    for i in 0..5 {
        // Distinct status times, one second apart.
        gw.clock.advance(Duration::from_secs(1));
        let context = (i % 2 == 0).then_some("ctx-even");
        let sent = send_text(&gw.door, &alice, &format!("message {i}"), context).await;
        mine.push(task_of(&sent)["id"].as_str().unwrap().to_owned());
    }
    let theirs = send_text(&gw.door, &bob, "bob's", None).await;
    let theirs = task_of(&theirs)["id"].as_str().unwrap().to_owned();
    let newest_first: Vec<String> = mine.iter().rev().cloned().collect();

    // Without params: every own task, newest status first, artifacts left out.
    let all = list_tasks(&gw.door, &alice, json!({})).await;
    let result = &all["result"];
    let ids: Vec<&str> = result["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, newest_first, "{all}");
    assert_eq!(result["totalSize"], 5);
    assert_eq!(result["pageSize"], 50);
    assert_eq!(
        result["nextPageToken"], "",
        "always present, empty on the last page"
    );
    assert!(result["tasks"][0].get("artifacts").is_none(), "{all}");
    assert!(result["tasks"][0]["history"].as_array().unwrap().len() == 2);
    let with_artifacts = list_tasks(&gw.door, &alice, json!({"includeArtifacts": true})).await;
    assert!(with_artifacts["result"]["tasks"][0]["artifacts"].is_array());
    let no_history = list_tasks(&gw.door, &alice, json!({"historyLength": 0})).await;
    assert!(no_history["result"]["tasks"][0].get("history").is_none());

    // Pages of two, followed by their tokens, list each task once, in order.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = list_tasks(&gw.door, &alice, json!({"pageSize": 2, "pageToken": token})).await;
        for task in page["result"]["tasks"].as_array().unwrap() {
            paged.push(task["id"].as_str().unwrap().to_owned());
        }
        assert_eq!(page["result"]["totalSize"], 5);
        token = page["result"]["nextPageToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
        assert!(!token.contains(&mine[0]), "the token is opaque");
    }
    assert_eq!(paged, newest_first);

    // Protobuf's defaults, as some clients send every field, filter nothing.
    let defaults = list_tasks(
        &gw.door,
        &alice,
        json!({"contextId": "", "status": "TASK_STATE_UNSPECIFIED", "pageToken": ""}),
    )
    .await;
    assert_eq!(defaults["result"]["totalSize"], 5, "{defaults}");

    // Filters: the context, the state, the status time.
    let even = list_tasks(&gw.door, &alice, json!({"contextId": "ctx-even"})).await;
    assert_eq!(even["result"]["totalSize"], 3, "{even}");
    let completed = list_tasks(&gw.door, &alice, json!({"status": "TASK_STATE_COMPLETED"})).await;
    assert_eq!(completed["result"]["totalSize"], 5);
    let failed = list_tasks(&gw.door, &alice, json!({"status": "TASK_STATE_FAILED"})).await;
    assert_eq!(failed["result"]["totalSize"], 0);
    assert_eq!(failed["result"]["tasks"], json!([]));
    // ProtoJSON allows an enum's number: 3 is COMPLETED, 4 FAILED, 0 the unspecified state.
    for (number, total) in [(3, 5), (4, 0), (0, 5)] {
        let listed = list_tasks(&gw.door, &alice, json!({"status": number})).await;
        assert_eq!(listed["result"]["totalSize"], total, "{number}: {listed}");
    }
    for wrong in [
        json!(9),
        json!(-1),
        json!(2.5),
        json!("TASK_STATE_DONE"),
        json!(true),
    ] {
        let refused = list_tasks(&gw.door, &alice, json!({"status": wrong})).await;
        assert_eq!(refused["error"]["code"], -32602, "{wrong}: {refused}");
    }
    let since = peergate::clock::rfc3339_millis(peergate::clock::earlier(
        peergate::clock::Clock::now(&gw.clock),
        Duration::from_millis(1_500),
    ));
    let recent = list_tasks(&gw.door, &alice, json!({"statusTimestampAfter": since})).await;
    assert_eq!(recent["result"]["totalSize"], 2, "{recent}");

    // Bob sees only his own, whatever he sends: filters and a token made from Alice's list.
    let first_page = list_tasks(&gw.door, &alice, json!({"pageSize": 1})).await;
    let alices_token = first_page["result"]["nextPageToken"].as_str().unwrap();
    for params in [
        json!({}),
        json!({"contextId": "ctx-even"}),
        json!({"pageToken": alices_token}),
    ] {
        let listed = list_tasks(&gw.door, &bob, params.clone()).await;
        let ids: Vec<&str> = listed["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert!(ids.iter().all(|id| *id == theirs), "{params}: {listed}");
    }

    // Bad values name the field.
    for (params, field) in [
        (json!({"pageSize": 0}), "pageSize"),
        (json!({"pageSize": 101}), "pageSize"),
        (json!({"status": "DONE"}), "status"),
        (json!({"historyLength": -1}), "historyLength"),
        (json!({"pageToken": "not a token"}), "pageToken"),
        (
            json!({"statusTimestampAfter": "yesterday"}),
            "statusTimestampAfter",
        ),
    ] {
        let refused = list_tasks(&gw.door, &alice, params.clone()).await;
        assert_eq!(error_code(&refused), -32602, "{params}");
        assert_eq!(
            refused["error"]["data"][1]["fieldViolations"][0]["field"], field,
            "{refused}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_body_not_sent_as_json_is_refused_with_its_id() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let body = json!({"jsonrpc": "2.0", "id": "req-7", "method": "ListTasks", "params": {}});
    let post = |content_type: Option<&'static str>| {
        let mut request = reqwest::Client::new()
            .post(&gw.door)
            .bearer_auth(&token)
            .header("a2a-version", "1.0")
            .body(body.to_string());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let (status, refused) = post(content_type).await;
        assert_eq!(status, 200, "a JSON-RPC error, in HTTP 200");
        assert_eq!(error_code(&refused), -32005, "{content_type:?}: {refused}");
        assert_eq!(refused["id"], "req-7");
        assert_eq!(
            refused["error"]["data"][0]["reason"],
            "CONTENT_TYPE_NOT_SUPPORTED"
        );
    }
    for content_type in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/a2a+json",
    ] {
        let (_, answered) = post(Some(content_type)).await;
        assert!(
            answered["result"]["tasks"].is_array(),
            "{content_type}: {answered}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn trailing_slash_is_the_same_door() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let response = send_text(&format!("{}/", gw.door), &token, "slash", None).await;
    assert_eq!(
        task_of(&response)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_context_id_beside_the_message_is_refused_not_ignored() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    for id in ["contextId", "taskId"] {
        let response = rpc(
            &gw.door,
            &token,
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                id: "ctx-1",
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}),
        )
        .await;
        assert_eq!(error_code(&response), -32602, "{response}");
        let violation = &response["error"]["data"][1]["fieldViolations"][0];
        assert_eq!(violation["field"], id, "{response}");
        assert!(
            violation["description"]
                .as_str()
                .unwrap()
                .contains(&format!("params.message.{id}")),
            "{response}"
        );
    }
    // Inside the message it continues the conversation, as before.
    let response = rpc(
        &gw.door,
        &token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m", "role": "ROLE_USER", "contextId": "ctx-1", "parts": [{"text": "hi"}]}}}),
    )
    .await;
    assert_eq!(task_of(&response)["contextId"], "ctx-1");
    gw.stop().await;
}

#[tokio::test]
async fn completed_task_has_the_spec_shape() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let response = rpc(
        &gw.door,
        &token,
        json!({"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "contextId": "ctx.1:a-b_c",
        "parts": [
            {"text": "first line"},
            {"url": "https://example.com/ignored.pdf", "mediaType": "application/pdf"},
            {"data": {"b": [1, 2], "a": "x"}},
            {"raw": "aWdub3JlZA==", "filename": "ignored.bin"},
                {"kind": "file", "file": {"uri": "https://example.com/ignored.txt", "mimeType": "text/plain"}},
            {"text": "last line"}
        ]}}}),
    )
    .await;
    let task = task_of(&response);
    let task_id = task["id"].as_str().unwrap();
    assert_eq!(task["contextId"], "ctx.1:a-b_c");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let timestamp = task["status"]["timestamp"].as_str().unwrap();
    assert_eq!(timestamp.len(), 24, "{timestamp}");
    assert!(timestamp.ends_with('Z'));
    let reply = &task["status"]["message"];
    assert_eq!(reply["role"], "ROLE_AGENT");
    assert_eq!(reply["contextId"], "ctx.1:a-b_c");
    assert_eq!(reply["taskId"], task_id);
    assert!(reply["messageId"].as_str().is_some_and(|m| !m.is_empty()));
    let text = reply_text(task);
    // Text parts joined by newlines, data as compact JSON in the partner's member order,
    // url/raw ignored.
    assert!(
        text.starts_with("echo: first line\n{\"b\":[1,2],\"a\":\"x\"}\nlast line\n---"),
        "{text}"
    );
    assert!(!text.contains("ignored"));
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], text.as_str());
    assert!(task["artifacts"][0]["artifactId"].is_string());
    let history = task["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["messageId"], "m-1");
    assert_eq!(history[1], *reply);
    // The parts the model did not read are named in the task's metadata.
    assert_eq!(
        task["metadata"],
        json!({"peergate": {"unreadParts": [
            {"index": 1, "content": "url"},
            {"index": 3, "content": "raw"},
            {"index": 4, "content": "file"},
        ]}})
    );
    // No 0.3 `kind` anywhere.
    assert!(!response.to_string().contains("\"kind\""));
    gw.stop().await;
}

#[tokio::test]
async fn message_validation() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let send = |message: Value| {
        rpc(
            &gw.door,
            &token,
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
        )
    };
    let cases = vec![
        (
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "https://x"}]}),
            -32005,
            "",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "  "}]}),
            -32005,
            "",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "parts": []}),
            -32602,
            "message.parts",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}),
            -32602,
            "message.role",
        ),
        (
            json!({"messageId": "", "role": "ROLE_USER", "parts": [{"text": "x"}]}),
            -32602,
            "message.messageId",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "data": 1}]}),
            -32602,
            "message.parts[0]",
        ),
        (
            json!({"role": "ROLE_USER", "parts": [{"text": "x"}]}),
            -32602,
            "messageId",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "contextId": "", "parts": [{"text": "x"}]}),
            -32602,
            "message.contextId",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "contextId": "a/b", "parts": [{"text": "x"}]}),
            -32602,
            "message.contextId",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "contextId": "x".repeat(129), "parts": [{"text": "x"}]}),
            -32602,
            "message.contextId",
        ),
        (
            json!({"messageId": "m", "role": "ROLE_USER", "taskId": "unknown", "parts": [{"text": "x"}]}),
            -32001,
            "",
        ),
    ];
    for (message, code, mentions) in cases {
        let response = send(message.clone()).await;
        assert_eq!(error_code(&response), code, "{message}");
        let text = response["error"].to_string();
        assert!(text.contains(mentions), "{message}: {text}");
    }
    // A 128-character contextId is fine.
    let ok = send(json!({"messageId": "m", "role": "ROLE_USER", "contextId": "c".repeat(128), "parts": [{"text": "x"}]})).await;
    assert_eq!(task_of(&ok)["contextId"], "c".repeat(128));
    // Negative historyLength in the configuration.
    let response = rpc(
        &gw.door,
        &token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"historyLength": -1}}}),
    )
    .await;
    assert_eq!(error_code(&response), -32602);
    gw.stop().await;
}

#[tokio::test]
async fn long_text_is_cut_on_a_character_boundary_with_a_marker() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    // 65,535 ASCII bytes then a 3-byte character: the cut must not split it.
    let text = format!("{}€tail", "a".repeat(65_535));
    let response = send_text(&gw.door, &token, &text, None).await;
    let task = task_of(&response);
    let sent = task["history"][0]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(
        sent,
        format!(
            "{}\n[peergate: message truncated from {} to 65535 bytes]",
            "a".repeat(65_535),
            text.len()
        )
    );
    // Exactly at the limit nothing is cut.
    let exact = "b".repeat(65_536);
    let response = send_text(&gw.door, &token, &exact, None).await;
    assert_eq!(
        task_of(&response)["history"][0]["parts"][0]["text"],
        exact.as_str()
    );
    gw.stop().await;
}

#[tokio::test]
async fn contexts_continue_with_history_and_belong_to_their_peer() {
    let gw = TestGateway::start().await;
    let alice = gw.add_peer("alice");
    let bob = gw.add_peer("bob");
    let first = send_text(&gw.door, &alice, "the password is swordfish", None).await;
    let context = task_of(&first)["contextId"].as_str().unwrap().to_owned();
    assert_eq!(context.len(), 36, "generated contextId is a UUID");
    let reply = reply_text(task_of(&first));
    assert!(reply.contains("history: 0 earlier messages"));
    assert!(reply.contains("preface: You are answering the partner agent \"alice\""));

    let second = send_text(&gw.door, &alice, "what was it?", Some(&context)).await;
    assert_eq!(task_of(&second)["contextId"], context.as_str());
    let reply = reply_text(task_of(&second));
    assert!(reply.contains("history: 2 earlier messages"), "{reply}");
    assert!(reply.contains("peer: the password is swordfish"), "{reply}");

    // Bob sends the same contextId: a conversation of his own, nothing of Alice's.
    let intruder = send_text(&gw.door, &bob, "continue", Some(&context)).await;
    let reply = reply_text(task_of(&intruder));
    assert!(reply.contains("history: 0 earlier messages"), "{reply}");
    assert!(!reply.contains("swordfish"));
    assert!(reply.contains("partner agent \"bob\""));
    // And Alice's context is untouched by Bob's message.
    let third = send_text(&gw.door, &alice, "again", Some(&context)).await;
    assert!(reply_text(task_of(&third)).contains("history: 4 earlier messages"));
    gw.stop().await;
}

#[tokio::test]
async fn get_task_shows_only_own_tasks_and_honours_history_length() {
    let gw = TestGateway::start().await;
    let alice = gw.add_peer("alice");
    let bob = gw.add_peer("bob");
    let sent = send_text(&gw.door, &alice, "mine", None).await;
    let task = task_of(&sent).clone();
    let id = task["id"].as_str().unwrap();

    let full = get_task(&gw.door, &alice, id, None).await;
    assert_eq!(full["result"], task);
    let none = get_task(&gw.door, &alice, id, Some(0)).await;
    assert!(none["result"].get("history").is_none(), "{none}");
    assert_eq!(none["result"]["status"], task["status"]);
    let one = get_task(&gw.door, &alice, id, Some(1)).await;
    assert_eq!(one["result"]["history"], json!([task["history"][1]]));
    let many = get_task(&gw.door, &alice, id, Some(50)).await;
    assert_eq!(many["result"]["history"], task["history"]);
    assert_eq!(
        error_code(&get_task(&gw.door, &alice, id, Some(-1)).await),
        -32602
    );

    // Bob asking for Alice's task gets exactly what he gets for a task that never existed.
    let theirs = get_task(&gw.door, &bob, id, None).await;
    let nothing = get_task(&gw.door, &bob, "11111111-2222-4333-8444-555555555555", None).await;
    assert_eq!(error_code(&theirs), -32001);
    assert_eq!(theirs["error"], nothing["error"]);
    assert_eq!(theirs["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    // Nor can he cancel it or refer to it.
    let cancel = rpc(
        &gw.door,
        &bob,
        json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    assert_eq!(error_code(&cancel), -32001);
    let refer = rpc(
        &gw.door,
        &bob,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "x"}]}}}),
    )
    .await;
    assert_eq!(error_code(&refer), -32001);
    // A taskId with a contextId of another conversation is refused.
    let mismatch = rpc(&gw.door, &alice, json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "taskId": id, "contextId": "another", "parts": [{"text": "x"}]}}})).await;
    assert_eq!(error_code(&mismatch), -32602);
    assert!(
        mismatch["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message.contextId")
    );
    // Alice referring to her own finished task is told it is terminal.
    let refer = rpc(
        &gw.door,
        &alice,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "x"}]}}}),
    )
    .await;
    assert_eq!(error_code(&refer), -32004);
    gw.stop().await;
}

#[tokio::test]
async fn send_message_honours_configuration_history_length() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let response = rpc(
        &gw.door,
        &token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"historyLength": 0}}}),
    )
    .await;
    assert!(task_of(&response).get("history").is_none());
    // The stored task still holds the whole history.
    let id = task_of(&response)["id"].as_str().unwrap();
    let got = get_task(&gw.door, &token, id, None).await;
    assert_eq!(got["result"]["history"].as_array().unwrap().len(), 2);
    gw.stop().await;
}

#[tokio::test]
async fn tasks_expire_after_the_retention_period() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let sent = send_text(&gw.door, &token, "remember me", None).await;
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    gw.clock.advance(Duration::from_secs(24 * 3600 - 1));
    assert_eq!(
        get_task(&gw.door, &token, &id, None).await["result"]["id"],
        id.as_str()
    );
    gw.clock.advance(Duration::from_secs(1));
    let expired = get_task(&gw.door, &token, &id, None).await;
    assert_eq!(error_code(&expired), -32001);
    gw.stop().await;
}

#[tokio::test]
async fn retention_is_configurable() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("tasks.retention_hours", 1)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let sent = send_text(&gw.door, &token, "short-lived", None).await;
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    gw.clock.advance(Duration::from_secs(3599));
    assert!(
        get_task(&gw.door, &token, &id, None)
            .await
            .get("result")
            .is_some()
    );
    gw.clock.advance(Duration::from_secs(1));
    assert_eq!(
        error_code(&get_task(&gw.door, &token, &id, None).await),
        -32001
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_revoked_or_expired_token_is_challenged_with_invalid_token() {
    let gw = TestGateway::start().await;
    let revoked = gw.add_peer("revoked");
    let expired = gw.add_peer("expired");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    for token in [&revoked, &expired] {
        let (status, _) = post_raw(&gw.door, Some(token), body.to_string()).await;
        assert_eq!(status, 200, "admitted before the change");
    }
    gw.revoke_through_server("revoked").await;
    let tomorrow = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24);
    let (code, _, err) = gw.cli(&["peer", "expire", "expired", &tomorrow.to_string()]);
    assert_eq!(code, 0, "{err}");
    gw.clock
        .advance(std::time::Duration::from_secs(2 * 24 * 3600));
    for token in [&revoked, &expired] {
        let response = reqwest::Client::new()
            .post(&gw.door)
            .bearer_auth(token)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        // RFC 6750 §3.1: the presented token is named invalid, whatever made it so.
        let challenge = response.headers()["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.starts_with("Bearer ") && challenge.ends_with(r#"error="invalid_token""#),
            "{challenge}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "invalid_token");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_method_a_route_does_not_take_is_refused_in_json_with_allow() {
    let gw = TestGateway::start().await;
    for path in [
        "/.well-known/agent-card.json",
        "/health",
        "/.well-known/jwks.json",
    ] {
        let response = reqwest::Client::new()
            .delete(gw.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{path}");
        let allow = response.headers()["allow"].to_str().unwrap().to_owned();
        assert!(allow.contains("GET"), "{path}: {allow}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "method_not_allowed", "{path}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_json_rpc_id_past_256_bytes_is_refused_not_echoed() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let at_bound = "i".repeat(256);
    let body =
        json!({"jsonrpc": "2.0", "id": at_bound, "method": "GetTask", "params": {"id": "x"}});
    let (_, answer) = post_raw(&gw.door, Some(&token), body.to_string()).await;
    assert_eq!(answer["id"], at_bound.as_str(), "{answer}");
    let long = "i".repeat(512 * 1024);
    let body = json!({"jsonrpc": "2.0", "id": long, "method": "GetTask", "params": {"id": "x"}});
    let (status, answer) = post_raw(&gw.door, Some(&token), body.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(answer["id"].is_null());
    assert!(answer.to_string().len() < 2048, "the id came back");
    gw.stop().await;
}

#[tokio::test]
async fn oversized_body_is_refused_before_the_handler() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let body = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":{{\"message\":{{\"messageId\":\"m\",\"role\":\"ROLE_USER\",\"parts\":[{{\"text\":\"{}\"}}]}}}}}}",
        "a".repeat(1024 * 1024)
    );
    let (status, answer) = post_raw(&gw.door, Some(&token), body).await;
    assert_eq!(status, 413);
    // The same JSON shape as every other refusal, not the body-limit layer's plain text.
    assert_eq!(answer["error"]["code"], "body_too_large", "{answer}");
    gw.stop().await;
}

#[tokio::test]
async fn malformed_and_bad_checksum_tokens_never_reach_the_store() {
    use axum::http::{HeaderMap, HeaderValue};
    use peergate::layers::auth::{AuthError, AuthRefusal, AuthSettings, PeerAuthenticator};
    let dir = tempfile::tempdir().unwrap();
    let store = peergate::store::Store::open(dir.path()).await.unwrap();
    let auth = PeerAuthenticator::new(
        store.credentials(),
        std::sync::Arc::new(peergate::clock::SystemClock),
        AuthSettings::default(),
    )
    .unwrap();
    // With the store closed, any look-up fails as `Unavailable`.
    store.close().await;
    let headers = |token: &str| {
        let mut map = HeaderMap::new();
        map.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        map
    };
    let client = "192.0.2.1".parse().unwrap();
    let refusal = |error| AuthRefusal::Unauthenticated(error);
    let good = peergate::token::issue(peergate::token::CredentialKind::PeerToken)
        .unwrap()
        .token;
    assert_eq!(
        auth.authenticate(&headers(&good), client)
            .await
            .unwrap_err(),
        refusal(AuthError::Unavailable)
    );
    let mut typo = good.clone().into_bytes();
    typo[30] = if typo[30] == b'Z' { b'Y' } else { b'Z' };
    let typo = String::from_utf8(typo).unwrap();
    assert_eq!(
        auth.authenticate(&headers(&typo), client)
            .await
            .unwrap_err(),
        refusal(AuthError::MalformedToken)
    );
    assert_eq!(
        auth.authenticate(&headers("pgt_short"), client)
            .await
            .unwrap_err(),
        refusal(AuthError::MalformedToken)
    );
}

#[tokio::test]
async fn unknown_wrong_secret_and_revoked_tokens_get_the_same_answer() {
    // No credential cache, so a revocation written by the CLI applies to the very next request.
    let gw =
        TestGateway::start_with(PolicyEdit::default().without_credential_cache().policy()).await;
    let alice = gw.add_peer("alice");
    let bob = gw.add_peer("bob");
    let probe =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    let parsed =
        peergate::token::parse(peergate::token::CredentialKind::PeerToken, &alice).unwrap();
    let other_secret = &peergate::token::issue(peergate::token::CredentialKind::PeerToken)
        .unwrap()
        .token[17..49];
    let wrong_secret = peergate::token::assemble(
        peergate::token::CredentialKind::PeerToken,
        parsed.token_id,
        other_secret,
    );
    assert!(
        peergate::token::parse(peergate::token::CredentialKind::PeerToken, &wrong_secret).is_ok(),
        "checksum must pass"
    );
    let unknown = peergate::token::issue(peergate::token::CredentialKind::PeerToken)
        .unwrap()
        .token;

    assert_eq!(post_raw(&gw.door, Some(&alice), probe.clone()).await.0, 200);
    let (status, wrong) = post_raw(&gw.door, Some(&wrong_secret), probe.clone()).await;
    assert_eq!(status, 401, "a wrong secret for a real token id must fail");
    let (_, unknown) = post_raw(&gw.door, Some(&unknown), probe.clone()).await;
    let (code, _, stderr) = gw.cli(&["peer", "revoke", "bob"]);
    assert_eq!(code, 0, "{stderr}");
    let (status, revoked) = post_raw(&gw.door, Some(&bob), probe.clone()).await;
    assert_eq!(status, 401, "revocation applies to the next request");
    assert_eq!(wrong, unknown);
    assert_eq!(revoked, unknown);
    assert_eq!(unknown["error"]["code"], "invalid_token");
    // Alice is unaffected.
    assert_eq!(post_raw(&gw.door, Some(&alice), probe).await.0, 200);
    gw.stop().await;
}

#[tokio::test]
async fn no_answer_without_persistence_and_internal_errors_reveal_nothing() {
    if skip_unless_sqlite("the store is broken through its SQLite file") {
        return;
    }
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let gw = TestGateway::start_with(model.policy(5)).await;
    let token = gw.add_peer("alice");
    let first = send_text(&gw.door, &token, "stored", None).await;
    let stored_id = task_of(&first)["id"].as_str().unwrap().to_owned();
    assert_eq!(model.requests().len(), 1);
    // Break the store from outside: the tasks table disappears under the running server.
    let database = gw.data.path().join("peergate.sqlite3");
    let sql = |statement: &str| {
        let status = std::process::Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()",
            ])
            .arg(&database)
            .arg(statement)
            .status()
            .expect("python3 runs");
        assert!(status.success());
    };
    sql("ALTER TABLE tasks RENAME TO tasks_gone");
    let response = send_text(&gw.door, &token, "cannot be stored", None).await;
    assert!(
        response.get("result").is_none(),
        "answered without persisting: {response}"
    );
    assert_eq!(error_code(&response), -32603);
    assert_eq!(
        response["error"]["message"],
        "Internal error: the gateway cannot store this message right now, so the model was not asked; retry later"
    );
    assert_eq!(model.requests().len(), 1, "the model was not asked");
    let request_id = response["error"]["data"][0]["metadata"]["requestId"]
        .as_str()
        .unwrap();
    assert_eq!(request_id.len(), 36);
    let text = response.to_string().to_lowercase();
    for leak in [
        "sqlite",
        "tasks",
        "insert",
        "table",
        "/tmp",
        "peergate.sqlite3",
        "sqlx",
    ] {
        assert!(!text.contains(leak), "{leak} leaked: {text}");
    }
    // Once the store recovers, what it held is readable and new messages are answered.
    sql("ALTER TABLE tasks_gone RENAME TO tasks");
    let stored = get_task(&gw.door, &token, &stored_id, None).await;
    assert_eq!(
        stored["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{stored}"
    );
    let again = send_text(&gw.door, &token, "stored again", None).await;
    assert_eq!(task_of(&again)["status"]["state"], "TASK_STATE_COMPLETED");
    gw.stop().await;
}

#[tokio::test]
async fn the_door_path_is_configurable() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("server.a2a_path", "/agents/door")
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let card: Value = reqwest::get(gw.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let door = gw.url("/agents/door");
    assert_eq!(card["supportedInterfaces"][0]["url"], door.as_str());
    let response = send_text(&door, &token, "hi", None).await;
    assert_eq!(
        task_of(&response)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let (status, _) = post_raw(&gw.door, Some(&token), "{}").await;
    assert_eq!(status, 404, "the default path is not served");
    gw.stop().await;
}

#[tokio::test]
async fn the_sweeper_removes_expired_tasks_from_the_store() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    send_text(&gw.door, &token, "one", None).await;
    send_text(&gw.door, &token, "two", None).await;
    let store = TestStore::from_env().open(gw.data.path()).await;
    let now = peergate::clock::Clock::now(&gw.clock);
    assert_eq!(store.tasks().delete_expired_tasks(now).await.unwrap(), 0);
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(
        store
            .tasks()
            .delete_expired_tasks(peergate::clock::later(now, day))
            .await
            .unwrap(),
        2
    );
    store.close().await;
    gw.stop().await;
}

#[tokio::test]
async fn concurrent_messages_are_all_committed_and_readable() {
    let gw = TestGateway::start().await;
    let (_, token, _) = gw.cli(&["peer", "add", "alice", "--rate", "1000/min"]);
    let token = token.trim().to_owned();
    let mut handles = Vec::new();
    for i in 0..40 {
        let (door, token) = (gw.door.clone(), token.clone());
        handles.push(tokio::spawn(async move {
            send_text(&door, &token, &format!("message {i}"), None).await
        }));
    }
    let mut ids = Vec::new();
    for handle in handles {
        let response = handle.await.unwrap();
        ids.push(task_of(&response)["id"].as_str().unwrap().to_owned());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40);
    for id in &ids {
        let got = get_task(&gw.door, &token, id, None).await;
        assert_eq!(got["result"]["id"], id.as_str());
    }
    gw.stop().await;
}
