//! Push notifications (`capabilities.push_notifications`): configs on a peer's own tasks,
//! callbacks checked against the network behind the gateway, secrets encrypted at rest, and
//! at-least-once delivery from the store's queue to a real receiver on loopback.

use crate::common::*;
use peergate::clock::{Clock, ManualClock, SystemClock};
use peergate::config::Policy;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Push on, callbacks to loopback allowed (the receiver is on 127.0.0.1).
fn push_policy() -> PolicyEdit {
    PolicyEdit::default()
        .set("capabilities.push_notifications", true)
        .set("push.dangerous_allow_loopback_callbacks", true)
}

async fn call(gw: &TestGateway, token: &str, method: &str, params: Value) -> Value {
    rpc(
        &gw.door,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
    )
    .await
}

/// `SendMessage` with a push config for the new task; returns the response.
async fn send_config(gw: &TestGateway, token: &str, text: &str, config: Value) -> Value {
    call(
        gw,
        token,
        "SendMessage",
        json!({
            "message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]},
            "configuration": {"taskPushNotificationConfig": config},
        }),
    )
    .await
}

/// `SendMessage` with a push config for the new task; returns the task.
async fn send_with_config(gw: &TestGateway, token: &str, text: &str, config: Value) -> Value {
    task_of(&send_config(gw, token, text, config).await).clone()
}

/// Moves the gateway's clock on, a few seconds at a time, until `n` notifications arrived.
async fn advance_until(clock: &ManualClock, receiver: &PushReceiver, n: usize) {
    for _ in 0..200 {
        if receiver.received().len() >= n {
            return;
        }
        clock.advance(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{} notifications arrived, {n} expected",
        receiver.received().len()
    );
}

/// Waits (up to 10 s) until the gateway's metrics count `n` attempts to be tried again.
async fn retries_counted(gw: &TestGateway, n: u32) {
    let line = format!(r#"peergate_push_deliveries_total{{outcome="retried"}} {n}"#);
    for _ in 0..100 {
        let metrics = gw.metrics_as("ada", "ada's admin password 1").await;
        if metrics.lines().any(|l| l == line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the gateway never counted {n} retried attempts");
}

fn error_message(response: &Value) -> String {
    response["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn configs_are_created_read_listed_and_deleted_on_the_callers_own_tasks_only() {
    let receiver = PushReceiver::start().await;
    let gw = TestGateway::start_with(push_policy().policy()).await;
    assert_eq!(gw.card().await["capabilities"]["pushNotifications"], true);
    let alice = gw.add_peer("alice");
    let bob = gw.add_peer("bob");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    let task_id = task["id"].as_str().unwrap();

    let created = call(
        &gw,
        &alice,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "cfg-1", "url": receiver.url, "token": "tok-1",
               "authentication": {"scheme": "Bearer", "credentials": "receiver-credential-1"}}),
    )
    .await;
    let config = &created["result"];
    assert_eq!(config["id"], "cfg-1", "{created}");
    assert_eq!(config["taskId"], task_id);
    assert_eq!(config["url"], receiver.url.as_str());
    assert_eq!(config["token"], "tok-1");
    assert_eq!(config["authentication"]["scheme"], "Bearer");
    // Credentials are write-only.
    assert!(
        !created.to_string().contains("receiver-credential-1"),
        "{created}"
    );
    let read = call(
        &gw,
        &alice,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "cfg-1"}),
    )
    .await;
    assert_eq!(&read["result"], config, "{read}");

    // Two more (one without an id: peergate names it), listed two to a page.
    for id in [Some("cfg-2"), None] {
        let mut params = json!({"taskId": task_id, "url": receiver.url});
        if let Some(id) = id {
            params["id"] = json!(id);
        }
        let created = call(&gw, &alice, "CreateTaskPushNotificationConfig", params).await;
        assert!(created["result"]["id"].is_string(), "{created}");
    }
    let first = call(
        &gw,
        &alice,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task_id, "pageSize": 2}),
    )
    .await;
    let configs = first["result"]["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2, "{first}");
    let token = first["result"]["nextPageToken"].as_str().unwrap();
    assert!(!token.is_empty(), "{first}");
    let second = call(
        &gw,
        &alice,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task_id, "pageSize": 2, "pageToken": token}),
    )
    .await;
    assert_eq!(second["result"]["configs"].as_array().unwrap().len(), 1);
    assert_eq!(second["result"]["nextPageToken"], "", "{second}");

    // Bob gets exactly what a task that does not exist gets, whatever he tries.
    for (method, params) in [
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task_id, "url": receiver.url}),
        ),
        (
            "GetTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "cfg-1"}),
        ),
        (
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task_id}),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "cfg-1"}),
        ),
    ] {
        let his = call(&gw, &bob, method, params.clone()).await;
        let mut missing = params.clone();
        missing["taskId"] = json!("no-such-task");
        let none = call(&gw, &alice, method, missing).await;
        assert_eq!(error_code(&his), -32001, "{method}: {his}");
        assert_eq!(his["error"], none["error"], "{method}");
    }
    // The config is still Alice's.
    let still = call(
        &gw,
        &alice,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "cfg-1"}),
    )
    .await;
    assert_eq!(still["result"]["id"], "cfg-1", "{still}");

    // Delete is idempotent; the deleted config is gone.
    for _ in 0..2 {
        let deleted = call(
            &gw,
            &alice,
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "cfg-1"}),
        )
        .await;
        assert_eq!(deleted["result"], Value::Null, "{deleted}");
        assert!(deleted.get("error").is_none(), "{deleted}");
    }
    let gone = call(
        &gw,
        &alice,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": "cfg-1"}),
    )
    .await;
    assert_eq!(error_code(&gone), -32001, "{gone}");
    // The specification's reason for -32001, which the SDKs map back to their task-not-found
    // error: there is no reason of its own for a missing config.
    assert_eq!(
        gone["error"]["data"][0]["reason"], "TASK_NOT_FOUND",
        "{gone}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_task_takes_at_most_the_configured_number_of_configs() {
    let gw =
        TestGateway::start_with(push_policy().set("push.max_configs_per_task", 2).policy()).await;
    let alice = gw.add_peer("alice");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    let url = "http://127.0.0.1:9/hook";
    for id in ["a", "b", "a"] {
        let stored = call(
            &gw,
            &alice,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task["id"], "id": id, "url": url}),
        )
        .await;
        assert!(
            stored.get("error").is_none(),
            "replacing one's own config is fine: {stored}"
        );
    }
    let third = call(
        &gw,
        &alice,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task["id"], "id": "c", "url": url}),
    )
    .await;
    assert_eq!(error_code(&third), -32602, "{third}");
    assert!(
        error_message(&third).contains("2 push notification configs"),
        "{third}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn callbacks_must_be_https_to_public_addresses() {
    // The default rules: no loopback switch.
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("capabilities.push_notifications", true)
            .policy(),
    )
    .await;
    let alice = gw.add_peer("alice");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    for (url, why) in [
        (
            "http://hooks.example.com/a2a?key=s3cr3t-in-query",
            "must be https",
        ),
        (
            "https://127.0.0.1:8443/hook?key=s3cr3t-in-query",
            "not public",
        ),
        ("https://localhost/hook", "not public"),
        ("https://169.254.169.254/latest/meta-data/", "not public"),
        ("https://10.20.30.40/hook", "not public"),
        ("https://[::ffff:192.168.0.1]/hook", "not public"),
        (
            "https://user:s3cr3t-in-query@hooks.example.com/",
            "credentials",
        ),
        ("file:///etc/passwd", "https URL"),
    ] {
        let refused = call(
            &gw,
            &alice,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task["id"], "url": url}),
        )
        .await;
        assert_eq!(error_code(&refused), -32602, "{url}: {refused}");
        let message = error_message(&refused);
        assert!(
            message.contains("url") && message.contains(why),
            "{url}: {message}"
        );
        assert!(!refused.to_string().contains("s3cr3t"), "echoed: {refused}");
        // The same rules for a config sent with a message, which then makes no task.
        let inline = send_config(&gw, &alice, "x", json!({"url": url})).await;
        assert_eq!(error_code(&inline), -32602, "{url}: {inline}");
        assert!(
            error_message(&inline).contains("configuration.taskPushNotificationConfig.url"),
            "{inline}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn with_push_off_every_push_method_and_an_inline_config_answer_32003() {
    let gw = TestGateway::start().await;
    assert_eq!(gw.card().await["capabilities"]["pushNotifications"], false);
    let alice = gw.add_peer("alice");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let refused = call(
            &gw,
            &alice,
            method,
            json!({"taskId": task["id"], "id": "x", "url": "https://hooks.example.com/"}),
        )
        .await;
        assert_eq!(error_code(&refused), -32003, "{method}: {refused}");
    }
    let inline = send_config(
        &gw,
        &alice,
        "x",
        json!({"url": "https://hooks.example.com/"}),
    )
    .await;
    assert_eq!(error_code(&inline), -32003, "{inline}");
    gw.stop().await;
}

#[tokio::test]
async fn every_state_is_posted_in_order_with_what_lets_the_receiver_authenticate_it() {
    let receiver = PushReceiver::start().await;
    receiver.hold(Duration::from_millis(300));
    let gw = TestGateway::start_with(push_policy().policy()).await;
    let alice = gw.add_peer("alice");
    let task = send_with_config(
        &gw,
        &alice,
        "ping",
        json!({"url": receiver.url, "token": "notification-token-1",
               "authentication": {"scheme": "Bearer", "credentials": "receiver-credential-1"}}),
    )
    .await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let received = receiver.wait_for(2).await;
    // Held a while each, they still came one at a time: a config's next state waits for the
    // one before it, on the connection the one before it came on.
    assert_eq!(receiver.peak_in_flight(), 1);
    assert_eq!(
        receiver.connections(),
        1,
        "each delivery opened a connection"
    );
    let states: Vec<&Value> = received
        .iter()
        .map(|n| &n.body["task"]["status"]["state"])
        .collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "in order"
    );
    for notification in &received {
        let header = |name: &str| notification.headers[name].to_str().unwrap().to_owned();
        assert_eq!(header("content-type"), "application/a2a+json");
        assert_eq!(header("authorization"), "Bearer receiver-credential-1");
        assert_eq!(header("x-a2a-notification-token"), "notification-token-1");
        assert_eq!(notification.body["task"]["id"], task["id"]);
    }
    // The answer travels with the final state.
    assert_eq!(
        received[1].body["task"]["artifacts"][0]["parts"][0]["text"],
        task["artifacts"][0]["parts"][0]["text"]
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().len(), 2, "each state once");
    gw.stop().await;
}

#[tokio::test]
async fn a_failing_receiver_is_retried_with_backoff_then_kept_as_a_dead_letter_for_its_administrator()
 {
    let receiver = PushReceiver::start().await;
    receiver.answer(503);
    let gw = TestGateway::start_with(push_policy().set("push.max_attempts", 3).policy()).await;
    let (code, _, stderr) = gw.cli_with_stdin(&["admin", "add", "ada"], "ada's admin password 1\n");
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) =
        gw.cli_with_stdin(&["admin", "add", "bob"], "bob's admin password 22\n");
    assert_eq!(code, 0, "{stderr}");
    let (code, alice, stderr) = gw.cli(&["peer", "add", "alice", "--owner", "ada"]);
    assert_eq!(code, 0, "{stderr}");
    let alice = alice.trim().to_owned();
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    let created = call(
        &gw,
        &alice,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task["id"], "id": "hook", "url": format!("{}?key=s3cr3t", receiver.url)}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    // That task is final already, so its config hears nothing more. A config sent along with
    // a message hears the new task's states.
    let failing = send_with_config(
        &gw,
        &alice,
        "again",
        json!({"url": receiver.url, "id": "inline"}),
    )
    .await;
    // The working state is attempted once, then waits 1 s of the gateway's clock. The clock
    // moves only once the gateway has counted the failed attempt: it reads the clock for the
    // retry's time before counting, so moving it earlier would push the retry back.
    receiver.wait_for(1).await;
    retries_counted(&gw, 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        receiver.received().len(),
        1,
        "no second attempt before its time"
    );
    gw.clock.advance(Duration::from_millis(1_000));
    receiver.wait_for(2).await;
    retries_counted(&gw, 2).await;
    gw.clock.advance(Duration::from_millis(2_000));
    receiver.wait_for(3).await;
    // Given up after the third attempt; the final state (queued behind it) now goes, and fails
    // three times as well.
    advance_until(&gw.clock, &receiver, 6).await;
    let admin = |name: &'static str, password: &'static str| {
        let url = format!("{}/v1/push/failed", gw.admin);
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .basic_auth(name, Some(password))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let mut failed = Value::Null;
    for _ in 0..100 {
        failed = admin("ada", "ada's admin password 1").await;
        if failed["deliveries"].as_array().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deliveries = failed["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2, "{failed}");
    for dead in deliveries {
        assert_eq!(dead["peer"], "alice");
        assert_eq!(dead["taskId"], failing["id"]);
        assert_eq!(dead["configId"], "inline");
        assert_eq!(dead["attempts"], 3);
        assert_eq!(
            dead["lastError"], "the receiver answered HTTP 503",
            "{dead}"
        );
    }
    // Another administrator's view holds none of Alice's.
    let theirs = admin("bob", "bob's admin password 22").await;
    assert_eq!(theirs["deliveries"], json!([]), "{theirs}");
    // Operators count the attempts: two given up after two retries each.
    let metrics = gw.metrics_as("ada", "ada's admin password 1").await;
    for line in [
        r#"peergate_push_deliveries_total{outcome="delivered"} 0"#,
        r#"peergate_push_deliveries_total{outcome="retried"} 4"#,
        r#"peergate_push_deliveries_total{outcome="given_up"} 2"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn at_most_the_configured_deliveries_are_in_flight_at_once() {
    let receiver = PushReceiver::start().await;
    receiver.hold(Duration::from_millis(200));
    let gw =
        TestGateway::start_with(push_policy().set("push.deliveries_at_once", 2).policy()).await;
    let alice = gw.add_peer("alice");
    // Six tasks, two states each: twelve notifications, all due at once.
    let sends = (0..6).map(|i| {
        let (gw, alice, url) = (&gw, &alice, receiver.url.clone());
        async move { send_with_config(gw, alice, &format!("n{i}"), json!({"url": url})).await }
    });
    futures_util::future::join_all(sends).await;
    receiver.wait_for(12).await;
    assert_eq!(
        receiver.peak_in_flight(),
        2,
        "two at a time, and both slots used"
    );
    gw.stop().await;
}

#[tokio::test]
async fn one_peer_holds_at_most_its_share_of_the_delivery_slots() {
    let slow = PushReceiver::start().await;
    slow.hold(Duration::from_millis(300));
    let quick = PushReceiver::start().await;
    let gw = TestGateway::start_with(
        push_policy()
            .set("push.deliveries_at_once", 3)
            .set("push.deliveries_per_peer", 1)
            .policy(),
    )
    .await;
    let (alice, bob) = (gw.add_peer("alice"), gw.add_peer("bob"));
    // Alice's four tasks could take all three slots; she gets one.
    let sends = (0..4).map(|i| {
        let (gw, alice, url) = (&gw, &alice, slow.url.clone());
        async move { send_with_config(gw, alice, &format!("s{i}"), json!({"url": url})).await }
    });
    futures_util::future::join_all(sends).await;
    send_with_config(&gw, &bob, "b", json!({"url": quick.url})).await;
    advance_until(&gw.clock, &quick, 2).await;
    assert!(
        slow.received().len() < 8,
        "Bob's went before Alice's backlog drained"
    );
    advance_until(&gw.clock, &slow, 8).await;
    assert_eq!(slow.peak_in_flight(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_queued_notification_survives_a_restart_and_secrets_are_not_stored_in_the_clear() {
    let receiver = PushReceiver::start().await;
    receiver.answer(500);
    let data = tempfile::tempdir().unwrap();
    let policy: Policy = push_policy().policy();
    let clock = ManualClock::new(SystemClock.now());
    // Added before the server starts: this test's thread runs the server too, so it could not
    // apply a change the command line announces while the thread waits for the command.
    let alice = add_peer(data.path(), "alice");
    let gw = peergate::app::start(gateway_options(
        policy.clone(),
        data.path(),
        Arc::new(clock.clone()),
    ))
    .await
    .unwrap();
    let door = format!("http://{}/a2a/v1", gw.local_addr);
    let response = rpc(
        &door,
        &alice,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "keep me"}]},
            "configuration": {"taskPushNotificationConfig": {"url": receiver.url,
                "token": "notification-token-SECRET",
                "authentication": {"scheme": "Basic", "credentials": "credential-SECRET"}}}}}),
    )
    .await;
    let task_id = task_of(&response)["id"].as_str().unwrap().to_owned();
    receiver.wait_for(1).await;
    gw.shutdown().await;

    // At rest: the URL is there, the token and credentials are not.
    let suite = TestStore::from_env();
    let store = match suite.store_url(data.path()) {
        Some(url) => {
            peergate::store::Store::open_at(&peergate::store::StoreLocation::Postgres(url)).await
        }
        None => peergate::store::Store::open(&suite.data_dir(data.path())).await,
    }
    .unwrap();
    let alice_id = store
        .accounts()
        .find_peer("alice")
        .await
        .unwrap()
        .unwrap()
        .id;
    let rows = store
        .push()
        .push_configs(&alice_id, &task_id.as_str().into(), None, 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].url, receiver.url);
    assert!(!rows[0].sealed.contains("SECRET"), "{:?}", rows[0].sealed);
    store.close().await;
    if suite == TestStore::Sqlite {
        let mut stored = Vec::new();
        for entry in std::fs::read_dir(data.path()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("peergate.sqlite3")
            {
                stored.extend(std::fs::read(&path).unwrap());
            }
        }
        let stored = String::from_utf8_lossy(&stored);
        assert!(stored.contains(&receiver.url), "the store was read");
        assert!(!stored.contains("notification-token-SECRET"));
        assert!(!stored.contains("credential-SECRET"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let key = data.path().join("push-notification.key");
            let mode = std::fs::metadata(key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    // Started again on the same store (and key), with the receiver back: every state is
    // delivered, the one that failed before the stop included.
    receiver.answer(200);
    let clock = ManualClock::new(clock.now());
    // Past the claim of an attempt the stop may have cut short (the timeout and 15 s).
    clock.advance(Duration::from_secs(60));
    let gw = peergate::app::start(gateway_options(policy, data.path(), Arc::new(clock)))
        .await
        .unwrap();
    let received = receiver.wait_for(3).await;
    let delivered: Vec<(&Value, &Value)> = received
        .iter()
        .map(|n| (&n.body["task"]["id"], &n.body["task"]["status"]["state"]))
        .collect();
    assert!(delivered.iter().all(|(id, _)| **id == task_id));
    assert!(
        delivered.iter().any(|(_, s)| *s == "TASK_STATE_COMPLETED"),
        "{delivered:?}"
    );
    let last = received.last().unwrap();
    assert_eq!(last.headers["authorization"], "Basic credential-SECRET");
    assert_eq!(
        last.headers["x-a2a-notification-token"],
        "notification-token-SECRET"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn push_configs_over_the_http_json_binding() {
    let receiver = PushReceiver::start().await;
    let gw =
        TestGateway::start_with(push_policy().set("capabilities.http_json", true).policy()).await;
    let alice = gw.add_peer("alice");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    let base = format!(
        "{}/rest/tasks/{}/pushNotificationConfigs",
        gw.door,
        task["id"].as_str().unwrap()
    );
    let client = reqwest::Client::new();
    let created: Value = client
        .post(&base)
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body(json!({"id": "rest-1", "url": receiver.url}).to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["id"], "rest-1", "{created}");
    let read: Value = client
        .get(format!("{base}/rest-1"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read, created);
    let listed: Value = client
        .get(&base)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["configs"][0]["id"], "rest-1", "{listed}");
    let deleted = client
        .delete(format!("{base}/rest-1"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let gone = client
        .get(format!("{base}/rest-1"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let gone: Value = gone.json().await.unwrap();
    assert_eq!(gone["error"]["status"], "NOT_FOUND", "{gone}");
    assert_eq!(
        gone["error"]["details"][0]["reason"], "TASK_NOT_FOUND",
        "{gone}"
    );
    gw.stop().await;
}

/// Answers each lookup with the next of its scripted answers, then with the last one forever.
struct ScriptedDns(std::sync::Mutex<std::collections::VecDeque<&'static str>>);

impl peergate::jose::fetch::Lookup for ScriptedDns {
    fn lookup(
        &self,
        _: String,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<std::net::IpAddr>>> + Send>,
    > {
        let mut script = self.0.lock().unwrap();
        let answer = if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script[0]
        };
        let ip = answer.parse().unwrap();
        Box::pin(async move { Ok(vec![ip]) })
    }
}

/// A delivery loop over a fresh store whose callback host `hooks.test` resolves as `script`
/// says; queues one task's working and final states for a fresh receiver at
/// `http://hooks.test:PORT/hook`, and returns the receiver and the dead letters' reasons once
/// both states are settled.
async fn deliver_under_dns(script: &[&'static str]) -> (PushReceiver, Vec<String>) {
    let receiver = PushReceiver::start().await;
    let port = receiver
        .url
        .rsplit_once(':')
        .unwrap()
        .1
        .trim_end_matches("/hook");
    let url = format!("http://hooks.test:{port}/hook");
    let url = url.as_str();
    use peergate::push::{Push, PushSettings, callback::CallbackPolicy, seal::SealingKey};
    use peergate::store::{Exchange, PushConfigRecord, Store};
    let data = tempfile::tempdir().unwrap();
    let suite = TestStore::from_env();
    let store = match suite.store_url(data.path()) {
        Some(url) => Store::open_at(&peergate::store::StoreLocation::Postgres(url)).await,
        None => Store::open(&suite.data_dir(data.path())).await,
    }
    .unwrap();
    add_peer(data.path(), "alice");
    let peer_id = store
        .accounts()
        .find_peer("alice")
        .await
        .unwrap()
        .unwrap()
        .id;
    let push = Arc::new(Push::new(
        store.push(),
        SealingKey::from_bytes(&[9u8; 32]).unwrap(),
        CallbackPolicy {
            dangerous_allow_loopback: true,
            lookup: Arc::new(ScriptedDns(std::sync::Mutex::new(
                script.iter().copied().collect(),
            ))),
        },
        PushSettings {
            max_configs_per_task: 10,
            max_attempts: 1,
            deliveries_at_once: 1,
            deliveries_per_peer: 1,
            timeout: Duration::from_secs(5),
        },
        Arc::new(SystemClock),
        Arc::default(),
    ));
    let config = PushConfigRecord {
        task_id: "t1".into(),
        id: "c1".into(),
        peer_id: peer_id.clone(),
        url: url.to_owned(),
        sealed: push.key.seal("t1", "c1", &Default::default()),
        created_at: peergate::clock::from_millis(1),
    };
    let delivering = peergate::push::deliver::spawn(push.clone()).unwrap();
    for (state, with) in [
        ("TASK_STATE_WORKING", Some(config)),
        ("TASK_STATE_COMPLETED", None),
    ] {
        let now = SystemClock.now();
        store
            .tasks()
            .save_exchange(Exchange {
                expires_at: peergate::clock::later(now, Duration::from_secs(60)),
                notify: true,
                push_config: with,
                ..bare_exchange(
                    ("t1", &peer_id, "ctx"),
                    peergate::protocol::types::TaskState::from_name(state).unwrap(),
                    now,
                )
            })
            .await
            .unwrap();
    }
    push.wake();
    for _ in 0..200 {
        let dead = store.push().failed_deliveries(None, 10).await.unwrap();
        if dead.len() + receiver.received().len() >= 2 {
            delivering.abort();
            return (receiver, dead.into_iter().map(|d| d.last_error).collect());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the deliveries did not settle");
}

#[tokio::test]
async fn a_callback_is_checked_again_before_every_delivery_and_connects_only_where_checked() {
    // The name moves to an internal address after the first delivery: the second is refused
    // by the check before it.
    let (receiver, dead) = deliver_under_dns(&["127.0.0.1", "127.0.0.1", "10.0.0.7"]).await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].contains("the callback URL may use http only to a loopback address"),
        "{dead:?}"
    );

    // The name moves between the check and the connection (DNS rebinding): the client only
    // ever connects to addresses that pass, so nothing reaches the receiver. Plain http (only
    // under the dangerous switch) goes to loopback alone, so a name rebound to a public address
    // does not carry the credentials there in clear text either.
    for rebound in ["169.254.169.254", "93.184.215.14"] {
        let (receiver, dead) = deliver_under_dns(&["127.0.0.1", rebound]).await;
        assert!(receiver.received().is_empty(), "{rebound}");
        assert_eq!(dead.len(), 2, "{dead:?}");
        // Newest first: the working state passed its check and found no address to use.
        assert!(
            dead[1].contains("hooks.test resolves to no loopback address"),
            "{rebound}: {dead:?}"
        );
    }
}

#[tokio::test]
async fn a_push_key_the_policy_names_but_cannot_be_read_stops_start_up_naming_the_setting() {
    let data = tempfile::tempdir().unwrap();
    let policy = push_policy()
        .insert("push.key_env", "PEERGATE_TEST_UNSET_PUSH_KEY")
        .policy();
    let refused = peergate::app::start(gateway_options(policy, data.path(), Arc::new(SystemClock)))
        .await
        .err()
        .expect("start-up stops")
        .to_string();
    assert!(
        refused.contains("push.key_env") && refused.contains("PEERGATE_TEST_UNSET_PUSH_KEY"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_config_made_on_a_task_still_being_answered_hears_its_final_state() {
    let receiver = PushReceiver::start().await;
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(
        push_policy()
            .openai(&model.base_url, "test-model")
            .set("capabilities.non_blocking", true)
            .policy(),
    )
    .await;
    let alice = gw.add_peer("alice");
    let working = call(
        &gw,
        &alice,
        "SendMessage",
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "later"}]},
               "configuration": {"returnImmediately": true}}),
    )
    .await;
    let task = task_of(&working).clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    model.wait_for_arrival().await;
    let created = call(
        &gw,
        &alice,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task["id"], "url": receiver.url, "token": "later-token"}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    model.release_one();
    // The working state was stored before the config: only the final one is heard, found by
    // the delivery loop's own look at the queue.
    let received = receiver.wait_for(1).await;
    assert_eq!(received[0].body["task"]["id"], task["id"]);
    assert_eq!(
        received[0].body["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(
        received[0].headers["x-a2a-notification-token"],
        "later-token"
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_0_3_method_names_and_shapes_reach_the_same_configs() {
    let gw = TestGateway::start_with(push_policy().policy()).await;
    let alice = gw.add_peer("alice");
    let task = task_of(&send_text(&gw.door, &alice, "hello", None).await).clone();
    // 0.3 nests the config and lists the schemes; get names the task `id`.
    let set = call(
        &gw,
        &alice,
        "tasks/pushNotificationConfig/set",
        json!({"taskId": task["id"], "pushNotificationConfig": {
            "id": "old-shape", "url": "http://127.0.0.1:9/hook",
            "authentication": {"schemes": ["Bearer"], "credentials": "c"}}}),
    )
    .await;
    assert_eq!(set["result"]["id"], "old-shape", "{set}");
    let got = call(
        &gw,
        &alice,
        "tasks/pushNotificationConfig/get",
        json!({"id": task["id"], "pushNotificationConfigId": "old-shape"}),
    )
    .await;
    assert_eq!(got["result"]["authentication"]["scheme"], "Bearer", "{got}");
    let listed = call(
        &gw,
        &alice,
        "tasks/pushNotificationConfig/list",
        json!({"id": task["id"]}),
    )
    .await;
    assert_eq!(
        listed["result"]["configs"][0]["id"], "old-shape",
        "{listed}"
    );
    let deleted = call(
        &gw,
        &alice,
        "tasks/pushNotificationConfig/delete",
        json!({"id": task["id"], "pushNotificationConfigId": "old-shape"}),
    )
    .await;
    assert!(deleted.get("error").is_none(), "{deleted}");
    gw.stop().await;
}

#[tokio::test]
async fn a_pushed_final_state_carries_the_receipt_get_task_returns() {
    use peergate::jose::receipt::{EXTENSION, answer_digest};
    let receiver = PushReceiver::start().await;
    let gw = TestGateway::start_with(push_policy().set("receipts.mode", "always").policy()).await;
    let alice = gw.add_peer("alice");
    let task = send_with_config(
        &gw,
        &alice,
        "sealed",
        json!({"url": receiver.url, "token": "notification-token-2"}),
    )
    .await;
    let received = receiver.wait_for(2).await;
    let pushed = &received[1].body["task"];
    assert_eq!(pushed["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        received[0].body["task"]["metadata"]
            .get(EXTENSION)
            .is_none(),
        "working: none"
    );
    let receipt = pushed["metadata"][EXTENSION]
        .as_str()
        .unwrap_or_else(|| panic!("{pushed}"));
    assert_eq!(receipt, task["metadata"][EXTENSION].as_str().unwrap());
    let read = call(&gw, &alice, "GetTask", json!({"id": task["id"]})).await;
    assert_eq!(read["result"]["metadata"][EXTENSION], receipt);
    // What the receiver got is what the receipt digests.
    let claims = jws_claims(receipt);
    assert_eq!(claims["dig"]["ans"], answer_digest(pushed).unwrap());
    gw.stop().await;
}
