//! The HTTP+JSON binding over real HTTP: the same methods as the JSON-RPC door under REST
//! routes, errors as `google.rpc.Status` with the binding's HTTP statuses, streams of bare
//! `StreamResponse` objects, behind the same guards.

use crate::common::*;
use serde_json::{Value, json};

fn full() -> peergate::config::Policy {
    PolicyEdit::default()
        .set("capabilities.http_json", true)
        .set("capabilities.streaming", true)
        .policy()
}

/// A request to the binding as `token`; (status, body as JSON or text).
async fn call(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, gw.url(&format!("/a2a/v1/rest{path}")))
        .header("a2a-version", "1.0");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn message(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// A raw request to the binding as `token` with `headers`.
async fn raw(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .request(method, gw.url(&format!("/a2a/v1/rest{path}")))
        .bearer_auth(token);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    request.send().await.unwrap()
}

/// The `google.rpc.Status` of an error body: (code, status, reason).
fn status_of(body: &Value) -> (i64, &str, &str) {
    let error = &body["error"];
    (
        error["code"].as_i64().unwrap_or(0),
        error["status"].as_str().unwrap_or(""),
        error["details"][0]["reason"].as_str().unwrap_or(""),
    )
}

#[tokio::test]
async fn the_binding_is_not_routed_unless_switched_on() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let (status, _) = call(
        &gw,
        reqwest::Method::POST,
        "/message:send",
        Some(&token),
        Some(message("hi")),
    )
    .await;
    assert_eq!(status, 404);
    let card = gw.card().await;
    assert_eq!(card["supportedInterfaces"].as_array().unwrap().len(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn the_rest_routes_answer_as_the_json_rpc_door_does() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    let card = gw.card().await;
    let rest = &card["supportedInterfaces"][1];
    assert_eq!(rest["protocolBinding"], "HTTP+JSON");
    assert!(
        rest["url"].as_str().unwrap().ends_with("/a2a/v1/rest"),
        "{card}"
    );

    // Send, then read back by id and in the list.
    let (status, sent) = call(
        &gw,
        Method::POST,
        "/message:send",
        Some(&alice),
        Some(message("over rest")),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let id = task["id"].as_str().unwrap();
    let (status, got) = call(
        &gw,
        Method::GET,
        &format!("/tasks/{id}?historyLength=1"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["id"], id);
    assert_eq!(got["history"].as_array().unwrap().len(), 1);
    let (status, listed) = call(
        &gw,
        Method::GET,
        "/tasks?pageSize=10&includeArtifacts=true",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["tasks"][0]["id"], id);
    assert!(listed["tasks"][0]["artifacts"].is_array());
    assert_eq!(listed["nextPageToken"], "");
    // The state filter by name or by its ProtoJSON number, as a query parameter.
    for query in ["status=TASK_STATE_COMPLETED", "status=3"] {
        let (status, listed) = call(
            &gw,
            Method::GET,
            &format!("/tasks?{query}"),
            Some(&alice),
            None,
        )
        .await;
        assert_eq!(
            (status, listed["totalSize"].clone()),
            (200, json!(1)),
            "{query}: {listed}"
        );
    }
    let (status, listed) = call(&gw, Method::GET, "/tasks?status=4", Some(&alice), None).await;
    assert_eq!(
        (status, listed["totalSize"].clone()),
        (200, json!(0)),
        "{listed}"
    );

    // Another peer's task is not found, with the binding's 404.
    let (status, theirs) = call(&gw, Method::GET, &format!("/tasks/{id}"), Some(&bob), None).await;
    assert_eq!(status, 404, "{theirs}");
    assert_eq!(status_of(&theirs), (404, "NOT_FOUND", "TASK_NOT_FOUND"));
    let (status, listed) = call(&gw, Method::GET, "/tasks", Some(&bob), None).await;
    assert_eq!((status, listed["totalSize"].clone()), (200, json!(0)));

    // A finished task cannot be canceled; push is off; bad values name themselves.
    let (status, refused) = call(
        &gw,
        Method::POST,
        &format!("/tasks/{id}:cancel"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        status_of(&refused),
        (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")
    );
    let (status, refused) = call(
        &gw,
        Method::POST,
        &format!("/tasks/{id}/pushNotificationConfigs"),
        Some(&alice),
        Some(json!({"url": "https://example.com"})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(status_of(&refused).2, "PUSH_NOTIFICATION_NOT_SUPPORTED");
    let (status, refused) =
        call(&gw, Method::GET, "/tasks?pageSize=many", Some(&alice), None).await;
    assert_eq!(
        (status, status_of(&refused).1),
        (400, "INVALID_ARGUMENT"),
        "{refused}"
    );
    let (status, refused) = call(&gw, Method::GET, "/tasks?pageSize=500", Some(&alice), None).await;
    assert_eq!(
        (status, status_of(&refused).2),
        (400, "INVALID_PARAMS"),
        "{refused}"
    );

    // The extended card, for an authenticated caller.
    let (status, extended) = call(&gw, Method::GET, "/extendedAgentCard", Some(&alice), None).await;
    assert_eq!(status, 200);
    assert_eq!(extended["name"], card["name"]);
    gw.stop().await;
}

#[tokio::test]
async fn a_rest_stream_carries_bare_stream_responses() {
    let gw = TestGateway::start_with(full()).await;
    let token = gw.add_peer("alice");
    let response = raw(
        &gw,
        reqwest::Method::POST,
        "/message:stream",
        &token,
        &[("content-type", "application/json")],
        Some(message("stream over rest").to_string()),
    )
    .await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(events[0]["task"]["id"].is_string(), "{events:?}");
    assert!(
        events.iter().all(|e| e.get("jsonrpc").is_none()),
        "bare, not JSON-RPC"
    );
    let last = &events.last().unwrap()["statusUpdate"]["status"];
    assert_eq!(last["state"], "TASK_STATE_COMPLETED");
    gw.stop().await;
}

#[tokio::test]
async fn the_rest_routes_sit_behind_the_same_guards() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let token = gw.add_peer("alice");
    // No credential: 401, as on the JSON-RPC door.
    let (status, _) = call(&gw, Method::GET, "/tasks", None, None).await;
    assert_eq!(status, 401);
    // A version this door does not speak: the gate, in this binding's shape.
    let response = raw(
        &gw,
        Method::GET,
        "/tasks",
        &token,
        &[("a2a-version", "0.3")],
        None,
    )
    .await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        status_of(&body),
        (400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")
    );
    // A body not sent as JSON.
    let response = raw(
        &gw,
        Method::POST,
        "/message:send",
        &token,
        &[("content-type", "text/plain")],
        Some(message("hi").to_string()),
    )
    .await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(status_of(&body).2, "CONTENT_TYPE_NOT_SUPPORTED");
    // A repeated member name is refused, as on the JSON-RPC door.
    let response = raw(
        &gw,
        Method::POST,
        "/message:send",
        &token,
        &[("content-type", "application/json")],
        Some(r#"{"message": {}, "message": {}}"#.to_owned()),
    )
    .await;
    assert_eq!(response.status().as_u16(), 400);
    gw.stop().await;
}

#[tokio::test]
async fn a_query_parameter_named_twice_is_refused_not_resolved() {
    let gw = TestGateway::start_with(full()).await;
    let token = gw.add_peer("alice");
    let (status, sent) = call(
        &gw,
        reqwest::Method::POST,
        "/message:send",
        Some(&token),
        Some(message("hi")),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let id = sent["task"]["id"].as_str().unwrap().to_owned();
    for path in [
        "/tasks?pageSize=1&pageSize=50".to_owned(),
        format!("/tasks/{id}?historyLength=0&historyLength=5"),
        format!("/tasks/{id}/pushNotificationConfigs?pageSize=1&pageSize=2"),
    ] {
        let (status, body) = call(&gw, reqwest::Method::GET, &path, Some(&token), None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("named more than once"),
            "{path}: {body}"
        );
    }
    // Named once, each is read.
    let (status, body) = call(
        &gw,
        reqwest::Method::GET,
        "/tasks?pageSize=1",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn answers_and_errors_are_sent_as_application_a2a_json() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let alice = gw.add_peer("alice");
    let media_type = |response: &reqwest::Response| {
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let json = [("content-type", "application/json"), ("a2a-version", "1.0")];
    let sent = raw(
        &gw,
        Method::POST,
        "/message:send",
        &alice,
        &json,
        Some(message("typed").to_string()),
    )
    .await;
    assert_eq!(sent.status(), 200);
    assert_eq!(media_type(&sent), "application/a2a+json");
    let missing = raw(&gw, Method::GET, "/tasks/none-such", &alice, &json, None).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(media_type(&missing), "application/a2a+json");
    // The gate's refusal, in this binding's shape and type.
    let old = [("a2a-version", "0.3")];
    let refused = raw(&gw, Method::GET, "/tasks", &alice, &old, None).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(media_type(&refused), "application/a2a+json");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(status_of(&body).2, "VERSION_NOT_SUPPORTED", "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn every_route_is_served_under_a_tenant_too() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    let (status, sent) = call(
        &gw,
        Method::POST,
        "/acme/message:send",
        Some(&alice),
        Some(message("under a tenant")),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let id = sent["task"]["id"].as_str().unwrap();
    // The same task with and without the tenant: it names nothing here.
    for path in [format!("/acme/tasks/{id}"), format!("/tasks/{id}")] {
        let (status, got) = call(&gw, Method::GET, &path, Some(&alice), None).await;
        assert_eq!(
            (status, got["id"].as_str()),
            (200, Some(id)),
            "{path}: {got}"
        );
    }
    let (status, listed) = call(
        &gw,
        Method::GET,
        "/other/tasks?status=3",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(
        (status, listed["totalSize"].clone()),
        (200, json!(1)),
        "{listed}"
    );
    // Still only the caller's own tasks.
    let (status, theirs) = call(
        &gw,
        Method::GET,
        &format!("/acme/tasks/{id}"),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(
        status_of(&theirs),
        (404, "NOT_FOUND", "TASK_NOT_FOUND"),
        "{status}"
    );
    let (status, cancel) = call(
        &gw,
        Method::POST,
        &format!("/acme/tasks/{id}:cancel"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(
        status_of(&cancel).2,
        "TASK_NOT_CANCELABLE",
        "{status}: {cancel}"
    );
    let (status, _) = call(
        &gw,
        Method::GET,
        "/acme/extendedAgentCard",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn metrics_count_each_operation_by_its_binding_and_method_not_its_path() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let (code, _, stderr) = gw.cli_with_stdin(&["admin", "add", "ada"], "ada's admin password 1\n");
    assert_eq!(code, 0, "{stderr}");
    let alice = gw.add_peer("alice");
    let sent = send_text(&gw.door, &alice, "over json-rpc", None).await;
    let id = task_of(&sent)["id"].as_str().unwrap().to_owned();
    for path in [format!("/tasks/{id}"), "/acme/tasks/none-such".to_owned()] {
        call(&gw, Method::GET, &path, Some(&alice), None).await;
    }
    let metrics = gw.metrics_as("ada", "ada's admin password 1").await;
    for line in [
        r#"peergate_a2a_calls_total{binding="jsonrpc",method="SendMessage"} 1"#,
        // An answer and an error alike: the operation was asked.
        r#"peergate_a2a_calls_total{binding="http_json",method="GetTask"} 2"#,
        r#"peergate_a2a_calls_total{binding="http_json",method="SendMessage"} 0"#,
        r#"peergate_a2a_calls_total{binding="jsonrpc",method="GetTask"} 0"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    gw.stop().await;
}

/// The HTTP+JSON binding stops at the depth JSON-RPC stops at: a body nesting past 64 levels is
/// refused with the same words, one within it is served.
#[tokio::test]
async fn a_body_nesting_past_the_json_rpc_depth_is_refused_alike() {
    let gw = TestGateway::start_with(full()).await;
    let alice = gw.add_peer("alice");
    let nested = |levels: usize| {
        let data = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        let data: Value = serde_json::from_str(&data).unwrap();
        json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(),
            "role": "ROLE_USER", "parts": [{"data": {"deep": data}}]}})
    };
    // The body's object, the message, its parts, a part, its data object: five levels around.
    let (status, refused) = call(
        &gw,
        reqwest::Method::POST,
        "/message:send",
        Some(&alice),
        Some(nested(65)),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let words = refused.to_string();
    assert!(words.contains("nest deeper than 64 levels"), "{words}");
    let (status, served) = call(
        &gw,
        reqwest::Method::POST,
        "/message:send",
        Some(&alice),
        Some(nested(55)),
    )
    .await;
    assert_eq!(status, 200, "{served}");
    gw.stop().await;
}

/// A peer its administrator made read-only reads its tasks and is refused every change, on
/// the JSON-RPC door and the HTTP+JSON binding alike (the gRPC binding in `grpc.rs`), before
/// anything is read: a task it may not cancel answers as "not allowed" whether it exists or not.
#[tokio::test]
async fn a_read_only_peer_reads_and_is_refused_every_change_on_json_rpc_and_http_json() {
    use reqwest::Method;
    let gw = TestGateway::start_with(full()).await;
    let alice = gw.add_peer("alice");
    let reader = gw.add_peer("reader");
    let (code, _, stderr) = gw.cli(&["peer", "operations", "reader", "read-only"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, list, _) = gw.cli(&["peer", "list", "--json"]);
    assert_eq!(code, 0);
    assert!(
        list.contains(
            r#""operations":["GetTask","ListTasks","SubscribeToTask","GetExtendedAgentCard"]"#
        ),
        "{list}"
    );
    let alices = task_of(&send_text(&gw.door, &alice, "mine", None).await)["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // JSON-RPC: every change refused with 403, in the same words; reads answered.
    let refused = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let changes = [
        refused("SendMessage", message("hello")),
        refused("SendStreamingMessage", message("hello")),
        refused("CancelTask", json!({"id": alices})),
        refused("CancelTask", json!({"id": "no-such-task"})),
        refused(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": alices, "url": "https://hooks.example/a2a"}),
        ),
    ];
    for change in changes {
        let (status, body) = post_raw(&gw.door, Some(&reader), change.to_string()).await;
        assert_eq!(status, 403, "{change}: {body}");
        assert_eq!(body["error"]["code"], "operation_not_allowed", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(change["method"].as_str().unwrap()),
            "{message}"
        );
    }
    let listed = rpc(
        &gw.door,
        &reader,
        json!({"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}),
    )
    .await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let other = get_task(&gw.door, &reader, &alices, None).await;
    assert_eq!(
        error_code(&other),
        -32001,
        "another peer's task is no task: {other}"
    );

    // A peer's extended card shows what it may do: one that may neither stream a message nor
    // follow a task reads no streaming (where alice reads it), signed like every card; the
    // same card over HTTP with its credential.
    let lister = gw.add_peer("lister");
    let (code, _, stderr) = gw.cli(&[
        "peer",
        "operations",
        "lister",
        "GetTask,ListTasks,GetExtendedAgentCard",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let extended = json!({"jsonrpc": "2.0", "id": 3, "method": "GetExtendedAgentCard"});
    let narrowed = rpc(&gw.door, &lister, extended.clone()).await["result"].clone();
    assert_eq!(narrowed["capabilities"]["streaming"], false, "{narrowed}");
    let alices_card = rpc(&gw.door, &alice, extended).await["result"].clone();
    assert_eq!(alices_card["capabilities"]["streaming"], true);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), narrowed.to_string()).unwrap();
    let jwks = gw.url("/.well-known/jwks.json");
    let (code, _, stderr) = cli(&[
        "card",
        "verify",
        file.path().to_str().unwrap(),
        "--jwks",
        &jwks,
        "--dangerous-allow-http-loopback",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let served: Value = reqwest::Client::new()
        .get(gw.url("/.well-known/agent-card.json"))
        .bearer_auth(&lister)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, narrowed);

    // HTTP+JSON: the same refusal, in the guard's words as every guard refusal is.
    let (status, body) = call(
        &gw,
        Method::POST,
        "/message:send",
        Some(&reader),
        Some(message("hi")),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "operation_not_allowed", "{body}");
    let cancel = format!("/tasks/{alices}:cancel");
    let (status, body) = call(&gw, Method::POST, &cancel, Some(&reader), Some(json!({}))).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = call(&gw, Method::GET, "/tasks", Some(&reader), None).await;
    assert_eq!(status, 200, "{body}");

    // All again: it sends.
    let (code, _, stderr) = gw.cli(&["peer", "operations", "reader", "all"]);
    assert_eq!(code, 0, "{stderr}");
    let sent = send_text(&gw.door, &reader, "now I may", None).await;
    assert_eq!(
        task_of(&sent)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{sent}"
    );
    gw.stop().await;
}
