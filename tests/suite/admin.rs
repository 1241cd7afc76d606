//! Administrators over HTTP: the admin API on its own listener, ownership, budgets turning tasks
//! REJECTED, conversations, rotation, the audit log, `/metrics` and the OpenAPI document.

use crate::common::*;
use peergate::clock::{Clock, Timestamp, later, parse_rfc3339, rfc3339_millis};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const PASSWORD_A: &str = "ada's admin password 1";
const PASSWORD_B: &str = "bob's admin password 22";

/// How a test signs in to the admin API.
#[derive(Clone)]
enum Credentials {
    Basic(String, String),
    Bearer(String),
    None,
}

#[derive(Clone)]
pub(crate) struct AdminClient {
    base: String,
    credentials: Credentials,
}

impl AdminClient {
    pub(crate) fn basic(gw: &TestGateway, name: &str, password: &str) -> Self {
        Self {
            base: gw.admin.clone(),
            credentials: Credentials::Basic(name.to_owned(), password.to_owned()),
        }
    }

    fn bearer(base: &str, token: &str) -> Self {
        Self {
            base: base.to_owned(),
            credentials: Credentials::Bearer(token.to_owned()),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let changes = method != Method::GET;
        let mut request = reqwest::Client::new().request(method, format!("{}{path}", self.base));
        request = match &self.credentials {
            Credentials::Basic(name, password) => request.basic_auth(name, Some(password)),
            Credentials::Bearer(token) => request.bearer_auth(token),
            Credentials::None => request,
        };
        // Every change is sent as JSON, with a body or without.
        if changes {
            request = request.header("content-type", "application/json");
        }
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        let response = request.send().await.expect("admin request");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, None).await
    }
    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(body)).await
    }
    pub(crate) async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::PUT, path, Some(body)).await
    }
    async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(Method::DELETE, path, None).await
    }

    /// Creates a peer; returns its token.
    async fn create_peer(&self, name: &str) -> String {
        let (status, body) = self.post("/v1/peers", json!({"name": name})).await;
        assert_eq!(status, 201, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }

    /// The audit records of the caller's account.
    pub(crate) async fn audit(&self) -> Vec<Value> {
        let (status, body) = self.get("/v1/audit").await;
        assert_eq!(status, 200, "{body}");
        body["records"].as_array().unwrap().clone()
    }
}

/// `peergate admin add NAME` with the password on standard input.
pub(crate) fn add_admin(data: &Path, name: &str, password: &str) {
    let (code, _, stderr) =
        cli_with_stdin_on(data, &["admin", "add", name], &format!("{password}\n"));
    assert_eq!(code, 0, "admin add failed: {stderr}");
}

/// A gateway with administrators `ada` and `bob`.
async fn gateway_with_admins(
    policy: peergate::config::Policy,
) -> (TestGateway, AdminClient, AdminClient) {
    let gw = TestGateway::start_with(policy).await;
    add_admin(gw.data.path(), "ada", PASSWORD_A);
    add_admin(gw.data.path(), "bob", PASSWORD_B);
    let ada = AdminClient::basic(&gw, "ada", PASSWORD_A);
    let bob = AdminClient::basic(&gw, "bob", PASSWORD_B);
    (gw, ada, bob)
}

/// `peergate admin budget ada ARGS`, then the clock moved past the budget cache, so the running
/// server reads what the command line wrote.
fn set_ada_budget(gw: &TestGateway, args: &[&str]) {
    let mut command = vec!["admin", "budget", "ada"];
    command.extend_from_slice(args);
    let (code, _, stderr) = gw.cli(&command);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(3));
}

/// The one audit record with this action and target, most recent first.
fn find_record<'a>(records: &'a [Value], action: &str, target: &str) -> &'a Value {
    records
        .iter()
        .rev()
        .find(|r| r["action"] == action && r["target"] == target)
        .unwrap_or_else(|| panic!("no {action} record for {target} in {records:#?}"))
}

fn task_state(response: &Value) -> String {
    task_of(response)["status"]["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// From `now` to one second past the next UTC midnight.
fn to_next_day(now: Timestamp) -> Duration {
    let day = 86_400_000;
    let now = now.as_millisecond();
    Duration::from_millis(u64::try_from(day - now.rem_euclid(day) + 1000).unwrap())
}

/// From `now` to one second into the next UTC month.
fn to_next_month(now: Timestamp) -> Duration {
    let today = rfc3339_millis(now);
    let (year, month): (i64, u32) = (today[..4].parse().unwrap(), today[5..7].parse().unwrap());
    let (year, month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let start = parse_rfc3339(&format!("{year:04}-{month:02}-01")).unwrap();
    Duration::try_from(start.duration_since(now)).unwrap() + Duration::from_secs(1)
}

#[tokio::test]
async fn a_spent_budget_rejects_tasks_without_asking_the_model_until_the_day_renews() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let (gw, ada, _) = gateway_with_admins(model.policy(5)).await;
    let token = ada.create_peer("ada-agent").await;
    // Each answer of the fake model reports 18 tokens: 40 a day allows three answers.
    set_ada_budget(&gw, &["--tokens-per-day", "40"]);

    for _ in 0..3 {
        let response = send_text(&gw.door, &token, "hello", None).await;
        assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    }
    assert_eq!(model.requests().len(), 3);
    let rejected = send_text(&gw.door, &token, "one more", None).await;
    let task = task_of(&rejected);
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{rejected}");
    let why = reply_text(task);
    assert!(
        why.contains("daily model budget of 40 tokens is spent"),
        "{why}"
    );
    assert_eq!(why.matches(". ").count() + 1, 1, "one sentence: {why}");
    assert_eq!(model.requests().len(), 3, "the model was not asked");
    // The rejected task is stored like any other.
    let id = task["id"].as_str().unwrap();
    let stored = get_task(&gw.door, &token, id, None).await;
    assert_eq!(stored["result"]["status"]["state"], "TASK_STATE_REJECTED");

    // Usage is visible to the administrator, per peer.
    let (status, usage) = ada.get("/v1/usage").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["tokensToday"], 54);
    assert_eq!(usage["tokensPerDay"], 40);
    assert_eq!(usage["peersToday"][0]["peer"], "ada-agent");
    assert_eq!(usage["peersToday"][0]["requests"], 3);
    // The operator sees it too.
    let (_, list, _) = gw.cli(&["admin", "list"]);
    let line = list.lines().find(|l| l.starts_with("ada ")).unwrap();
    assert_eq!(line.split_whitespace().nth(6), Some("54"), "{list}");
    // The refusal is in the owner's audit log.
    let records = ada.audit().await;
    let refusal = find_record(&records, "peer.refused_by_quota", "peer:ada-agent");
    assert_eq!(refusal["outcome"], "refused: daily_budget_spent");
    assert_eq!(refusal["actor"], "peer:ada-agent");
    assert_eq!(refusal["client"], "127.0.0.1");

    // Past midnight UTC the budget renews.
    gw.clock.advance(to_next_day(gw.clock.now()));
    let response = send_text(&gw.door, &token, "a new day", None).await;
    assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    assert_eq!(model.requests().len(), 4);
    gw.stop().await;
}

#[tokio::test]
async fn a_peers_own_budget_stops_that_peer_only_and_counts_what_it_spent_before() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let (gw, ada, _) = gateway_with_admins(model.policy(5)).await;
    let (small, other) = (
        ada.create_peer("small-partner").await,
        ada.create_peer("other-partner").await,
    );
    // Each answer reports 18 tokens. small-partner spends 36 before it has a budget of its own;
    // the 30 it is then given are spent already: what it spent today is read from the store.
    for _ in 0..2 {
        let response = send_text(&gw.door, &small, "hello", None).await;
        assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    }
    let (status, peer) = ada
        .put(
            "/v1/peers/small-partner/budget",
            json!({"tokensPerDay": 30}),
        )
        .await;
    assert_eq!(status, 200, "{peer}");
    assert_eq!(peer["tokensPerDay"], 30);
    let asked = model.requests().len();
    let rejected = send_text(&gw.door, &small, "one more", None).await;
    assert_eq!(task_state(&rejected), "TASK_STATE_REJECTED", "{rejected}");
    let why = reply_text(task_of(&rejected));
    assert!(
        why.contains("This peer's daily model budget of 30 tokens is spent"),
        "{why}"
    );
    assert_eq!(model.requests().len(), asked, "the model was not asked");
    let refusal = find_record(
        &ada.audit().await,
        "peer.refused_by_quota",
        "peer:small-partner",
    )
    .clone();
    assert_eq!(refusal["outcome"], "refused: peer_daily_budget_spent");
    // The owner's other peer, and the owner's budget, are untouched.
    let response = send_text(&gw.door, &other, "hello", None).await;
    assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");

    // A budget counts what the peer spends from then on: 100 allows 64 more tokens.
    let (status, _) = ada
        .put(
            "/v1/peers/small-partner/budget",
            json!({"tokensPerDay": 100}),
        )
        .await;
    assert_eq!(status, 200);
    let mut answered = 0;
    while task_state(&send_text(&gw.door, &small, "again", None).await) == "TASK_STATE_COMPLETED" {
        answered += 1;
        assert!(answered < 10, "the budget never ran out");
    }
    assert_eq!(answered, 4, "36 + 4 x 18 = 108 >= 100");

    // Not zero, not missing; null leaves it only its owner's (the operator's command line too).
    for wrong in [json!({"tokensPerDay": 0}), json!({})] {
        let (status, body) = ada
            .put("/v1/peers/small-partner/budget", wrong.clone())
            .await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }
    let (code, _, stderr) = gw.cli(&[
        "peer",
        "budget",
        "small-partner",
        "--tokens-per-day",
        "none",
    ]);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(3));
    let response = send_text(&gw.door, &small, "free again", None).await;
    assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    let (_, peer) = ada.get("/v1/peers/small-partner").await;
    assert_eq!(peer["tokensPerDay"], Value::Null);
    let (code, _, stderr) = gw.cli(&["peer", "budget", "small-partner", "--tokens-per-day", "40"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, list, _) = gw.cli(&["peer", "list"]);
    assert!(list.contains("  budget: 40 tokens a day"), "{list}");
    assert!(
        ada.audit().await.iter().any(|r| r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("tokens per day 30 -> 100"))),
        "the change is audited"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_peers_budget_counts_turns_that_outlast_the_settings_cache() {
    // Each answer takes 1.5 s, longer than the budgets' settings stay cached (1 s with the
    // credential cache off): what a turn spent still counts when it ends.
    let model = FakeModel::start(ModelBehaviour::Slow(Duration::from_millis(1500))).await;
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("model.timeout_seconds", 5)
        .without_credential_cache();
    let (gw, ada, _) = gateway_with_admins(policy.policy()).await;
    let token = ada.create_peer("slow-partner").await;
    let (status, _) = ada
        .put("/v1/peers/slow-partner/budget", json!({"tokensPerDay": 30}))
        .await;
    assert_eq!(status, 200);
    for _ in 0..2 {
        let response = send_text(&gw.door, &token, "hello", None).await;
        assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    }
    let rejected = send_text(&gw.door, &token, "one more", None).await;
    assert_eq!(task_state(&rejected), "TASK_STATE_REJECTED", "{rejected}");
    gw.stop().await;
}

#[tokio::test]
async fn a_monthly_budget_outlasts_the_day_and_renews_with_the_month() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let (gw, ada, _) = gateway_with_admins(model.policy(5)).await;
    let token = ada.create_peer("ada-agent").await;
    set_ada_budget(&gw, &["--tokens-per-month", "30"]);
    for _ in 0..2 {
        let response = send_text(&gw.door, &token, "hello", None).await;
        assert_eq!(task_state(&response), "TASK_STATE_COMPLETED", "{response}");
    }
    let rejected = send_text(&gw.door, &token, "more", None).await;
    assert!(reply_text(task_of(&rejected)).contains("monthly model budget of 30 tokens"));
    // A new day is not enough when the month's budget is spent, unless the month changed too.
    let now = gw.clock.now();
    if to_next_day(now) < to_next_month(now) {
        gw.clock.advance(to_next_day(now));
        let still = send_text(&gw.door, &token, "next day", None).await;
        assert_eq!(task_state(&still), "TASK_STATE_REJECTED", "{still}");
    }
    gw.clock.advance(to_next_month(gw.clock.now()));
    let renewed = send_text(&gw.door, &token, "next month", None).await;
    assert_eq!(task_state(&renewed), "TASK_STATE_COMPLETED", "{renewed}");
    assert_eq!(model.requests().len(), 3);
    gw.stop().await;
}

#[tokio::test]
async fn a_forbidden_model_or_a_disabled_owner_rejects_every_task() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let (gw, ada, bob) = gateway_with_admins(model.policy(5)).await;
    let ada_token = ada.create_peer("ada-agent").await;
    let bob_token = bob.create_peer("bob-agent").await;
    let (code, _, stderr) = gw.cli(&["admin", "budget", "ada", "--model", "forbid"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = gw.cli(&["admin", "disable", "bob"]);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(3));

    let refused = send_text(&gw.door, &ada_token, "hi", None).await;
    assert_eq!(task_state(&refused), "TASK_STATE_REJECTED");
    assert_eq!(
        reply_text(task_of(&refused)),
        "The administrator responsible for this peer is not allowed to use the model."
    );
    let refused = send_text(&gw.door, &bob_token, "hi", None).await;
    assert_eq!(task_state(&refused), "TASK_STATE_REJECTED");
    assert!(reply_text(task_of(&refused)).contains("is disabled"));
    assert!(model.requests().is_empty(), "the model was never asked");
    // A disabled administrator cannot sign in either.
    let (status, body) = bob.get("/v1/peers").await;
    assert_eq!(status, 401, "{body}");

    let (code, _, stderr) = gw.cli(&["admin", "budget", "ada", "--model", "allow"]);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(3));
    let answered = send_text(&gw.door, &ada_token, "hi again", None).await;
    assert_eq!(task_state(&answered), "TASK_STATE_COMPLETED");
    gw.stop().await;
}

#[tokio::test]
async fn the_echo_backend_reports_an_estimate_that_counts_against_the_budget() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("ada-agent").await;
    let short = send_text(&gw.door, &token, "count me", None).await;
    assert_eq!(task_state(&short), "TASK_STATE_COMPLETED");
    let (_, usage) = ada.get("/v1/usage").await;
    let after_short = usage["tokensToday"].as_u64().unwrap();
    // 4,000 bytes in, echoed back out: 2,000 tokens at four bytes a token, plus the instructions,
    // preface and labels around them (about 150).
    let long = send_text(&gw.door, &token, &"x".repeat(4000), None).await;
    assert_eq!(task_state(&long), "TASK_STATE_COMPLETED");
    let (_, usage) = ada.get("/v1/usage").await;
    let long_cost = usage["tokensToday"].as_u64().unwrap() - after_short;
    assert!(
        (2000..2300).contains(&long_cost),
        "{long_cost} tokens for 8,000 bytes and the prompt around them"
    );
    assert!(after_short > 0);
    gw.stop().await;
}

#[tokio::test]
async fn the_owner_reads_every_part_a_task_a_page_of_conversations_and_usage_by_period() {
    let (gw, ada, bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("ada-agent").await;
    // Text, data and two files: the echo model reads the text and the data, the conversation
    // keeps everything.
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m-parts", "role": "ROLE_USER", "contextId": "ctx-parts",
            "parts": [{"text": "see attached"}, {"data": {"order": 7}},
                      {"raw": "aGVsbG8gYnl0ZXM=", "filename": "hello.txt", "mediaType": "text/plain"},
                      {"url": "https://files.example/a.pdf", "filename": "a.pdf"}]}}});
    let answer = rpc(&gw.door, &token, message).await;
    let task = task_of(&answer).clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let (status, conversation) = ada.get("/v1/conversations/ada-agent/ctx-parts").await;
    assert_eq!(status, 200, "{conversation}");
    let parts = &conversation["messages"][0]["parts"];
    assert_eq!(parts[0], json!({"kind": "text", "text": "see attached"}));
    assert_eq!(parts[1], json!({"kind": "data", "data": {"order": 7}}));
    assert_eq!(parts[2]["size"], 11, "{conversation:#}");
    assert_eq!(
        parts[2]["sha256"],
        "5608b71da2b2228faf1aa9fcfdfca682607045d650b3a984b4c752991f97b86d"
    );
    assert_eq!(parts[3]["url"], "https://files.example/a.pdf");
    assert_eq!(conversation["messages"][1]["parts"][0]["kind"], "text");

    // The task, as GetTask answers its peer; another owner's, or a missing one, is not found.
    let task_path = format!("/v1/peers/ada-agent/tasks/{}", task["id"].as_str().unwrap());
    let (status, read) = ada.get(&task_path).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["id"], task["id"]);
    assert_eq!(read["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(bob.get(&task_path).await.0, 404);
    assert_eq!(
        ada.get("/v1/peers/ada-agent/tasks/no-such-task").await.0,
        404
    );

    // Two more conversations: pages of two, then one; filters by peer and time.
    for context in ["ctx-b", "ctx-c"] {
        send_text(&gw.door, &token, "more", Some(context)).await;
    }
    let (status, first) = ada.get("/v1/conversations?limit=2").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["conversations"].as_array().unwrap().len(),
        2,
        "{first}"
    );
    let cursor = first["next"].as_str().expect("a next page");
    let (_, second) = ada
        .get(&format!("/v1/conversations?limit=2&cursor={cursor}"))
        .await;
    let rest = second["conversations"].as_array().unwrap();
    assert_eq!(rest.len(), 1, "{second}");
    assert!(second.get("next").is_none(), "{second}");
    // Latest first, then by peer and context (two answered in the same millisecond tie):
    // every conversation once across the pages.
    let mut seen: Vec<&str> = first["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest)
        .map(|c| c["contextId"].as_str().unwrap())
        .collect();
    assert_eq!(seen.pop(), Some("ctx-parts"));
    seen.sort_unstable();
    assert_eq!(seen, ["ctx-b", "ctx-c"]);
    for (filter, found) in [
        ("peer=ada-agent", 3),
        ("peer=bob-agent", 0),
        ("until=1h", 0),
        ("since=1h", 3),
    ] {
        let (status, list) = ada.get(&format!("/v1/conversations?{filter}")).await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(
            list["conversations"].as_array().unwrap().len(),
            found,
            "{filter}"
        );
    }
    for wrong in ["limit=0", "limit=501", "cursor=nonsense", "since=someday"] {
        let (status, body) = ada.get(&format!("/v1/conversations?{wrong}")).await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }

    // Usage in any day or month: this month's, a month long gone, and a period that is none.
    let (_, now) = ada.get("/v1/usage").await;
    let month = now["month"].as_str().unwrap().to_owned();
    let (status, usage) = ada.get(&format!("/v1/usage?period={month}")).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["period"], json!(month));
    assert_eq!(usage["peersInPeriod"][0]["peer"], "ada-agent", "{usage}");
    assert_eq!(usage["peersInPeriod"][0]["requests"], 3, "{usage}");
    assert_eq!(usage["tokensInPeriod"], usage["tokensThisMonth"]);
    let (_, old) = ada.get("/v1/usage?period=1999-01").await;
    assert_eq!(old["tokensInPeriod"], 0);
    assert_eq!(old["peersInPeriod"], json!([]));
    for wrong in ["last-week", "2026-13", "2026-12-32", "2026-1-05"] {
        let (status, body) = ada.get(&format!("/v1/usage?period={wrong}")).await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn an_owner_limits_a_peers_operations_and_the_next_call_is_held_to_them() {
    let (gw, ada, bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("ops").await;
    let path = "/v1/peers/ops/operations";
    let (status, view) = ada.put(path, json!({"operations": ["read-only"]})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["operations"],
        json!([
            "GetTask",
            "ListTasks",
            "SubscribeToTask",
            "GetExtendedAgentCard"
        ])
    );
    // At once: the server's own change drops what it remembered of the peer.
    let (status, refused) = post_raw(
        &gw.door,
        Some(&token),
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
            {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["code"], "operation_not_allowed");
    // Another owner's peer is not found; a name that is no operation, or no member, is 400.
    assert_eq!(bob.put(path, json!({"operations": null})).await.0, 404);
    for wrong in [
        json!({"operations": ["Teleport"]}),
        json!({}),
        json!({"operations": []}),
    ] {
        let (status, body) = ada.put(path, wrong.clone()).await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }
    let (status, view) = ada.put(path, json!({"operations": null})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["operations"], Value::Null);
    let sent = send_text(&gw.door, &token, "all again", None).await;
    assert_eq!(task_state(&sent), "TASK_STATE_COMPLETED");
    let records = ada.audit().await;
    let details: Vec<&str> = records
        .iter()
        .filter(|r| r["action"] == "peer.operations_changed" && r["target"] == "peer:ops")
        .map(|r| r["detail"].as_str().unwrap())
        .collect();
    let read_only = "GetTask,ListTasks,SubscribeToTask,GetExtendedAgentCard";
    assert_eq!(
        details,
        [
            format!("operations all -> {read_only}"),
            format!("operations {read_only} -> all")
        ],
        "{records:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_auditor_reads_what_its_peers_did_and_every_changing_route_refuses_it() {
    let (gw, ada, _bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("watched").await;
    send_text(&gw.door, &token, "hello", Some("ctx-a")).await;
    let (code, _, stderr) = gw.cli(&["admin", "role", "ada", "auditor"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, listed, _) = gw.cli(&["admin", "list", "--json"]);
    assert_eq!(code, 0);
    assert!(listed.contains(r#""role":"auditor""#), "{listed}");
    // Past the credential cache, the running server reads the new role.
    gw.clock.advance(Duration::from_secs(3));

    for path in [
        "/v1/peers",
        "/v1/peers/watched",
        "/v1/usage",
        "/v1/audit",
        "/v1/conversations",
        "/v1/conversations/watched/ctx-a",
    ] {
        let (status, body) = ada.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    // Every documented route that is not a read refuses it, before its handler runs.
    let committed = std::fs::read_to_string(repo_root().join("openapi.json")).unwrap();
    let document: Value = serde_json::from_str(&committed).unwrap();
    let mut refused = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{name}", "watched")
            .replace("{peer}", "watched")
            .replace("{context_id}", "ctx-a");
        for method in item.as_object().unwrap().keys().filter(|m| *m != "get") {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, body) = ada.call(method.clone(), &concrete, Some(json!({}))).await;
            assert_eq!(status, 403, "{method} {path}: {body}");
            assert_eq!(body["error"]["code"], "forbidden", "{body}");
            refused.push(format!("{method} {path}"));
        }
    }
    assert!(refused.len() >= 15, "{refused:?}");
    // And nothing changed: the peer still answers, its conversation is still there.
    let sent = send_text(&gw.door, &token, "still here", Some("ctx-a")).await;
    assert_eq!(task_state(&sent), "TASK_STATE_COMPLETED");
    let (status, _) = ada.get("/v1/conversations/watched/ctx-a").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn a_peer_view_lists_the_kinds_of_credential_it_holds() {
    let (gw, ada, _bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    ada.create_peer("kinds").await;
    let held = async || ada.get("/v1/peers/kinds").await.1["credentials"].clone();
    assert_eq!(held().await, json!(["token"]));
    let (status, body) = ada
        .put(
            "/v1/peers/kinds/password",
            json!({"password": "a long enough password"}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = ada.post("/v1/peers/kinds/api-key", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(held().await, json!(["api_key", "password", "token"]));
    // Revoked: every credential stops, the password too.
    let (status, view) = ada.post("/v1/peers/kinds/revoke", json!({})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["credentials"], json!([]), "{view}");
    assert_eq!(view["status"], "revoked");
    let (status, created) = ada
        .post("/v1/peers", json!({"name": "bare", "issueToken": false}))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["peer"]["credentials"], json!([]), "{created}");
    let (_, list) = ada.get("/v1/peers").await;
    let names: Vec<(&Value, &Value)> = list["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["name"], &p["credentials"]))
        .collect();
    assert!(names.contains(&(&json!("bare"), &json!([]))), "{list}");
    gw.stop().await;
}

#[tokio::test]
async fn conversations_are_visible_to_their_owner_only_and_can_be_deleted() {
    let (gw, ada, bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("ada-agent").await;
    let bob_token = bob.create_peer("bob-agent").await;
    let first = send_text(&gw.door, &token, "first question", Some("ctx-1")).await;
    send_text(&gw.door, &token, "second question", Some("ctx-1")).await;
    send_text(&gw.door, &bob_token, "bob's own", Some("ctx-1")).await;

    let (status, list) = ada.get("/v1/conversations").await;
    assert_eq!(status, 200, "{list}");
    let conversations = list["conversations"].as_array().unwrap();
    assert_eq!(conversations.len(), 1, "{list}");
    assert_eq!(conversations[0]["peer"], "ada-agent");
    assert_eq!(conversations[0]["contextId"], "ctx-1");
    assert_eq!(conversations[0]["messages"], 4);
    assert!(
        conversations[0]["createdAt"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    let (status, conversation) = ada.get("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 200, "{conversation}");
    let messages = conversation["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0]["role"], "peer");
    assert_eq!(messages[0]["text"], "first question");
    assert_eq!(messages[1]["role"], "agent");
    assert!(
        messages[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: first question")
    );
    assert_eq!(messages[0]["taskId"], task_of(&first)["id"]);

    // Bob sees only his own, and Ada's is "not found" to him, read or delete.
    let (_, list) = bob.get("/v1/conversations").await;
    let theirs = list["conversations"].as_array().unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0]["peer"], "bob-agent");
    let (status, body) = bob.get("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = bob.delete("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 404);
    let (status, _) = ada.get("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 200, "Bob's attempt deleted nothing");

    // Ada deletes it: its text is gone, from the conversation and from the tasks.
    let (status, body) = ada.delete("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 204, "{body}");
    let (status, _) = ada.get("/v1/conversations/ada-agent/ctx-1").await;
    assert_eq!(status, 404);
    let task_id = task_of(&first)["id"].as_str().unwrap();
    let gone = get_task(&gw.door, &token, task_id, None).await;
    assert_eq!(error_code(&gone), -32001, "{gone}");
    let records = ada.audit().await;
    let record = find_record(&records, "conversation.deleted", "peer:ada-agent");
    assert_eq!(record["detail"], "context ctx-1");
    // Bob's conversation with the same contextId is untouched.
    let (status, _) = bob.get("/v1/conversations/bob-agent/ctx-1").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn every_api_action_works_and_leaves_its_audit_record() {
    let (gw, ada, _) = gateway_with_admins(
        PolicyEdit::default()
            .set("auth.schemes", ["bearer", "basic", "api_key"])
            .policy(),
    )
    .await;
    // Create: the token is in the response, and works.
    let (status, created) = ada
        .post(
            "/v1/peers",
            json!({"name": "partner", "ratePerMinute": 45, "expiresAt": "2099-01-01"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    assert_eq!(created["peer"]["owner"], "ada");
    assert_eq!(created["peer"]["ratePerMinute"], 45);
    assert_eq!(created["peer"]["expiresAt"], "2099-01-01T00:00:00.000Z");
    assert!(created["peer"].get("token").is_none());
    assert_eq!(
        task_state(&send_text(&gw.door, &token, "hi", None).await),
        "TASK_STATE_COMPLETED"
    );
    // List and show never carry a secret.
    let (status, list) = ada.get("/v1/peers").await;
    assert_eq!(status, 200);
    assert_eq!(list["peers"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(&token));
    let (status, shown) = ada.get("/v1/peers/partner").await;
    assert_eq!(status, 200);
    assert_eq!(shown["name"], "partner");
    assert!(!shown.to_string().contains(&token));

    let (status, body) = ada
        .put("/v1/peers/partner/limit", json!({"ratePerMinute": 7}))
        .await;
    assert_eq!(
        (status, body["ratePerMinute"].clone()),
        (200, json!(7)),
        "{body}"
    );
    let (status, body) = ada
        .put("/v1/peers/partner/expiry", json!({"expiresAt": null}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["expiresAt"].is_null());
    let (status, body) = ada
        .put(
            "/v1/peers/partner/password",
            json!({"password": "partner password 123"}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = ada.post("/v1/peers/partner/api-key", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let api_key = body["apiKey"].as_str().unwrap().to_owned();
    assert!(api_key.starts_with("pgk_"));
    let (status, body) = post_with(&gw.door, &[("x-api-key", &api_key)]).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ada
        .post("/v1/peers/partner/rotate", json!({"graceSeconds": 0}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ada.post("/v1/peers/partner/revoke", json!({})).await;
    assert_eq!(
        (status, body["status"].clone()),
        (200, json!("revoked")),
        "{body}"
    );

    // Bad input is named without echoing it.
    let (status, body) = ada
        .put(
            "/v1/peers/partner/limit",
            json!({"ratePerMinute": "s3cr3t-value"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(!body.to_string().contains("s3cr3t-value"), "{body}");
    let (status, body) = ada
        .post("/v1/peers", json!({"name": "x", "colour": 1}))
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`")
    );
    let (status, body) = ada.post("/v1/peers", json!({"name": "partner"})).await;
    assert_eq!(status, 409, "{body}");

    let records = ada.audit().await;
    let succeeded: Vec<Value> = records
        .iter()
        .filter(|r| r["outcome"] == "ok")
        .cloned()
        .collect();
    for (action, detail) in [
        ("peer.created", "owner ada, rate 45/min"),
        ("peer.limit_changed", "rate 45 -> 7/min"),
        (
            "peer.expiry_changed",
            "expiry 2099-01-01T00:00:00.000Z -> never",
        ),
        ("credential.rotated", "new token id "),
        (
            "credential.revoked",
            "peer revoked with all its credentials",
        ),
    ] {
        let record = find_record(&succeeded, action, "peer:partner");
        assert_eq!(record["actor"], "admin:ada", "{record}");
        assert_eq!(record["outcome"], "ok", "{record}");
        assert_eq!(record["client"], "127.0.0.1", "{record}");
        assert!(record["at"].as_str().unwrap().ends_with('Z'));
        assert!(
            record["detail"].as_str().unwrap().starts_with(detail),
            "{record}"
        );
    }
    let issued: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "credential.issued")
        .collect();
    assert_eq!(issued.len(), 3, "token, password, API key: {issued:#?}");
    let conflict = find_record(&records, "peer.created", "peer:partner");
    assert_eq!(
        conflict["outcome"],
        "refused: a peer named \"partner\" already exists"
    );
    // The operator's log (the CLI) shows the same records.
    let (code, printed, _) = gw.cli(&["audit"]);
    assert_eq!(code, 0);
    assert!(printed.contains("admin:ada") && printed.contains("credential.rotated"));
    gw.stop().await;
}

/// A `GetTask` probe with extra headers and no bearer token.
async fn post_with(url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    let response = request.body(probe.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn rotation_stops_the_old_token_at_once_or_after_the_grace_period() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let first = ada.create_peer("partner").await;
    let probe = |token: String| {
        let door = gw.door.clone();
        async move {
            let probe =
                json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
            post_raw(&door, Some(&token), probe.to_string()).await.0
        }
    };
    assert_eq!(probe(first.clone()).await, 200);

    // No grace: the very next request with the old token is refused, though it was cached.
    let (status, rotated) = ada.post("/v1/peers/partner/rotate", json!({})).await;
    assert_eq!(status, 200, "{rotated}");
    assert!(rotated["previousTokenValidUntil"].is_null());
    let second = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(probe(first.clone()).await, 401);
    assert_eq!(probe(second.clone()).await, 200);

    // With a grace period both work until it ends, by the gateway's clock.
    let (status, rotated) = ada
        .post("/v1/peers/partner/rotate", json!({"graceSeconds": 3600}))
        .await;
    assert_eq!(status, 200, "{rotated}");
    let third = rotated["token"].as_str().unwrap().to_owned();
    let until = parse_rfc3339(rotated["previousTokenValidUntil"].as_str().unwrap()).unwrap();
    assert_eq!(until, later(gw.clock.now(), Duration::from_secs(3_600)));
    assert_eq!(probe(second.clone()).await, 200);
    assert_eq!(probe(third.clone()).await, 200);
    gw.clock.advance(Duration::from_secs(3599));
    assert_eq!(
        probe(second.clone()).await,
        200,
        "still inside the grace period"
    );
    gw.clock.advance(Duration::from_secs(2));
    assert_eq!(probe(second.clone()).await, 401, "the grace period ended");
    assert_eq!(probe(third.clone()).await, 200);
    let records = ada.audit().await;
    let record = find_record(&records, "credential.rotated", "peer:partner");
    assert!(
        record["detail"]
            .as_str()
            .unwrap()
            .contains("old tokens work until"),
        "{record}"
    );

    // The grace period is bounded, and the CLI rotates the same way.
    let (status, body) = ada
        .post(
            "/v1/peers/partner/rotate",
            json!({"graceSeconds": 31 * 86400}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (code, stdout, stderr) = gw.cli(&["peer", "rotate", "partner"]);
    assert_eq!(code, 0, "{stderr}");
    let fourth = stdout.trim().to_owned();
    assert_eq!(probe(fourth).await, 200);
    gw.stop().await;
}

#[tokio::test]
async fn an_administrator_cannot_see_or_touch_another_administrators_peers() {
    let (gw, ada, bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("ada-agent").await;
    let (_, before) = ada.get("/v1/peers/ada-agent").await;

    let (_, list) = bob.get("/v1/peers").await;
    assert_eq!(list["peers"], json!([]));
    let attempts: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::GET, "/v1/peers/ada-agent", None),
        (
            Method::PUT,
            "/v1/peers/ada-agent/limit",
            Some(json!({"ratePerMinute": 1})),
        ),
        (
            Method::PUT,
            "/v1/peers/ada-agent/expiry",
            Some(json!({"expiresAt": "2099-01-01"})),
        ),
        (
            Method::PUT,
            "/v1/peers/ada-agent/password",
            Some(json!({"password": "bob sets a password"})),
        ),
        (Method::POST, "/v1/peers/ada-agent/api-key", None),
        (Method::POST, "/v1/peers/ada-agent/rotate", None),
        (Method::POST, "/v1/peers/ada-agent/revoke", None),
    ];
    for (method, path, body) in attempts {
        let (status, answer) = bob.call(method.clone(), path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["message"], "no peer named \"ada-agent\"");
    }
    // Nothing changed, and Ada's peer still works with its token.
    let (_, after) = ada.get("/v1/peers/ada-agent").await;
    assert_eq!(before, after);
    assert_eq!(
        task_state(&send_text(&gw.door, &token, "still mine", None).await),
        "TASK_STATE_COMPLETED"
    );
    // Bob cannot create a peer in Ada's name either.
    let (status, _) = bob
        .post("/v1/peers", json!({"name": "sneaky", "owner": "ada"}))
        .await;
    assert_eq!(status, 400, "no owner field in the API");
    // Each refusal is in Bob's audit log, none in Ada's.
    let bob_records = bob.audit().await;
    let denied: Vec<&Value> = bob_records
        .iter()
        .filter(|r| r["target"] == "peer:ada-agent")
        .collect();
    assert_eq!(denied.len(), 7, "reads too: {bob_records:#?}");
    assert!(
        denied
            .iter()
            .all(|r| r["outcome"].as_str().unwrap().starts_with("denied: "))
    );
    assert!(
        ada.audit()
            .await
            .iter()
            .all(|r| !r["actor"].as_str().unwrap().contains("bob"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn peer_credentials_and_bad_logins_open_nothing_on_the_admin_api() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let token = ada.create_peer("partner").await;
    let (status, body) = AdminClient::bearer(&gw.admin, &token)
        .get("/v1/peers")
        .await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "peer_credential");
    let (status, body) = ada.post("/v1/peers/partner/api-key", json!({})).await;
    assert_eq!(status, 200);
    let key = body["apiKey"].as_str().unwrap();
    let (status, body) = AdminClient::bearer(&gw.admin, key).get("/v1/peers").await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("peer_credential"))
    );
    let (status, _) = AdminClient {
        base: gw.admin.clone(),
        credentials: Credentials::None,
    }
    .get("/v1/peers")
    .await;
    assert_eq!(status, 401);
    let (status, _) = AdminClient::basic(&gw, "ada", "not ada's password")
        .get("/v1/peers")
        .await;
    assert_eq!(status, 401);
    // The door's port does not serve the admin API.
    let (status, _) = AdminClient {
        base: format!("http://{}", gw.addr),
        credentials: Credentials::Basic("ada".into(), PASSWORD_A.into()),
    }
    .get("/v1/peers")
    .await;
    assert_eq!(status, 404);

    // An administrator token works, until its administrator is disabled.
    let (code, admin_token, stderr) = gw.cli(&["admin", "token", "ada"]);
    assert_eq!(code, 0, "{stderr}");
    let admin_token = admin_token.trim();
    assert!(admin_token.starts_with("pga_"));
    let by_token = AdminClient::bearer(&gw.admin, admin_token);
    let (status, body) = by_token.get("/v1/peers").await;
    assert_eq!(status, 200, "{body}");
    // It opens nothing on the door.
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    assert_eq!(
        post_raw(&gw.door, Some(admin_token), probe.to_string())
            .await
            .0,
        401
    );

    let records = ada.audit().await;
    let failed: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "admin.login_failed")
        .collect();
    assert_eq!(failed.len(), 1, "the wrong password for ada: {records:#?}");
    assert_eq!(failed[0]["outcome"], "denied: invalid_credentials");
    assert_eq!(failed[0]["client"], "127.0.0.1");
    let (code, printed, _) = gw.cli(&["audit", "--since", "1h"]);
    assert_eq!(code, 0);
    assert_eq!(
        printed.matches("admin.login_failed").count(),
        3,
        "two peer credentials and one wrong password; no credentials at all is not a login: {printed}"
    );

    let (code, _, _) = gw.cli(&["admin", "disable", "ada"]);
    assert_eq!(code, 0);
    let (status, _) = by_token.get("/v1/peers").await;
    assert_eq!(status, 401);
    gw.stop().await;
}

/// A counter's value in a Prometheus exposition, 0 when absent.
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn metrics_move_with_traffic_and_hold_no_secret_or_text() {
    let (gw, ada, _) = gateway_with_admins(
        PolicyEdit::default()
            .set("peers.default_rate_per_minute", 2)
            .policy(),
    )
    .await;
    let token = ada.create_peer("metered-peer").await;
    let scrape = || async {
        let (status, body) = ada.get("/metrics").await;
        assert_eq!(status, 200);
        body.as_str().unwrap().to_owned()
    };
    let before = scrape().await;

    let answered = send_text(&gw.door, &token, "secret message text", None).await;
    assert_eq!(task_state(&answered), "TASK_STATE_COMPLETED");
    assert_eq!(post_raw(&gw.door, Some("pgt_wrong"), "{}").await.0, 401);
    let version = reqwest::Client::new()
        .post(&gw.door)
        .bearer_auth(&token)
        .header("a2a-version", "0.3")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(version.status(), 200);
    // The third request within the minute trips the per-peer limit of 2/min.
    assert_eq!(post_raw(&gw.door, Some(&token), "{}").await.0, 429);
    let (status, _) = AdminClient {
        base: gw.admin.clone(),
        credentials: Credentials::None,
    }
    .get("/metrics")
    .await;
    assert_eq!(status, 401, "metrics need an administrator");

    let after = scrape().await;
    let moved = |series: &str| counter(&after, series) - counter(&before, series);
    assert_eq!(
        moved(r#"peergate_requests_total{route="door",status="200"}"#),
        2,
        "{after}"
    );
    assert_eq!(
        moved(r#"peergate_requests_total{route="door",status="401"}"#),
        1
    );
    assert_eq!(
        moved(r#"peergate_requests_total{route="door",status="429"}"#),
        1
    );
    assert_eq!(
        moved(r#"peergate_rejections_total{reason="unauthenticated"}"#),
        1
    );
    assert_eq!(moved(r#"peergate_rejections_total{reason="per_peer"}"#), 1);
    assert_eq!(
        moved(r#"peergate_rejections_total{reason="version_not_supported"}"#),
        1
    );
    assert_eq!(moved(r#"peergate_tasks_total{state="completed"}"#), 1);
    assert_eq!(moved("peergate_backend_latency_seconds_count"), 1);
    assert!(moved(r#"peergate_requests_total{route="admin",status="200"}"#) >= 1);
    assert!(moved(r#"peergate_requests_total{route="admin",status="401"}"#) >= 1);
    for forbidden in [token.as_str(), "metered-peer", "secret message text", "ada"] {
        assert!(!after.contains(forbidden), "{forbidden} in /metrics");
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_openapi_document_is_generated_committed_and_matches_the_routes() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let committed = std::fs::read_to_string(repo_root().join("openapi.json")).unwrap();
    let (code, printed, _) = cli(&["admin", "openapi"]);
    assert_eq!(code, 0);
    assert_eq!(
        printed.trim_end(),
        committed.trim_end(),
        "openapi.json is stale: run `cargo run -- admin openapi > openapi.json`"
    );
    // Served without credentials, equal to the committed document.
    let served: Value = reqwest::get(format!("{}/openapi.json", gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let document: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(served, document);
    // The admin listener answers a liveness probe as the door does, without credentials.
    let health = reqwest::get(format!("{}/health", gw.admin)).await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.json::<Value>().await.unwrap(),
        json!({"status": "healthy"})
    );

    // Every documented operation is routed (an unrouted one answers "no such route").
    let (_, unrouted) = ada.get("/v1/nothing-here").await;
    assert_eq!(unrouted["error"]["message"], "no such route");
    let mut operations = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{name}", "nobody")
            .replace("{peer}", "nobody")
            .replace("{context_id}", "ctx");
        for method in item.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, body) = ada.call(method.clone(), &concrete, Some(json!({}))).await;
            assert_ne!(status, 405, "{method} {path} is documented but not routed");
            assert_ne!(body["error"]["message"], "no such route", "{method} {path}");
            operations += 1;
        }
    }
    assert_eq!(operations, 28, "{document:#}");
    gw.stop().await;
}

#[tokio::test]
async fn no_secret_reaches_the_log_or_the_audit_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        PolicyEdit::default()
            .set("auth.schemes", ["bearer", "basic", "api_key"])
            .text(),
    )
    .unwrap();
    let admin_password = "operator password never logged";
    let peer_password = "peer password never logged";
    let api_peer_password = "api peer password never logged";
    let mut secrets: Vec<String> = vec![
        admin_password.into(),
        peer_password.into(),
        api_peer_password.into(),
    ];

    // The command line.
    add_admin(&data, "ops", admin_password);
    let (code, token, stderr) = cli_on(&data, &["peer", "add", "p1", "--owner", "ops"]);
    assert_eq!(code, 0, "{stderr}");
    let token = token.trim().to_owned();
    let (code, key, _) = cli_on(&data, &["peer", "key", "p1"]);
    assert_eq!(code, 0);
    let key = key.trim().to_owned();
    let (code, _, _) = cli_with_stdin_on(
        &data,
        &["peer", "password", "p1"],
        &format!("{peer_password}\n"),
    );
    assert_eq!(code, 0);
    let (code, admin_token, _) = cli_on(&data, &["admin", "token", "ops"]);
    assert_eq!(code, 0);
    let admin_token = admin_token.trim().to_owned();
    secrets.extend([token.clone(), key.clone(), admin_token.clone()]);

    let server = ServeProcess::start_with(
        dir.path(),
        &data,
        &["--policy", policy.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let base = format!("http://{}", server.admin_addr);
    let ops = AdminClient {
        base: base.clone(),
        credentials: Credentials::Basic("ops".into(), admin_password.into()),
    };
    // The API: every kind of credential issued, and failed sign-ins of every kind.
    let created = ops.create_peer("p2").await;
    let (_, rotated) = ops
        .post("/v1/peers/p2/rotate", json!({"graceSeconds": 60}))
        .await;
    let rotated = rotated["token"].as_str().unwrap().to_owned();
    let (_, api_key) = ops.post("/v1/peers/p2/api-key", json!({})).await;
    let api_key = api_key["apiKey"].as_str().unwrap().to_owned();
    let (status, _) = ops
        .put(
            "/v1/peers/p2/password",
            json!({"password": api_peer_password}),
        )
        .await;
    assert_eq!(status, 204);
    let wrong_password = "a wrong guess at the password";
    let password_as_name = "typed-the-password-as-the-name";
    secrets.extend([
        created,
        rotated.clone(),
        api_key.clone(),
        wrong_password.into(),
        password_as_name.into(),
    ]);
    for credentials in [
        Credentials::Basic("ops".into(), wrong_password.into()),
        Credentials::Basic(password_as_name.into(), wrong_password.into()),
        Credentials::Bearer(token.clone()),
        // The token with its last character changed (to another one: a token can end in x).
        Credentials::Bearer(format!(
            "{}{}",
            &admin_token[..admin_token.len() - 1],
            if admin_token.ends_with('x') { 'y' } else { 'x' }
        )),
    ] {
        let client = AdminClient {
            base: base.clone(),
            credentials,
        };
        let (status, body) = client.get("/v1/peers").await;
        assert_eq!(status, 401, "{body}\n{}", server.log_text());
    }
    assert_eq!(
        AdminClient::bearer(&base, &admin_token)
            .get("/v1/peers")
            .await
            .0,
        200
    );
    // The door, with each credential and a wrong one.
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}});
    for token in [&token, &rotated] {
        assert_eq!(
            post_raw(&server.door(), Some(token), probe.to_string())
                .await
                .0,
            200
        );
    }
    assert_eq!(
        post_with(&server.door(), &[("x-api-key", &api_key)])
            .await
            .0,
        200
    );
    assert_eq!(
        post_with(&server.door(), &[("x-api-key", &key)]).await.0,
        200
    );
    let basic = format!("Basic {}", base64_encode(&format!("p1:{peer_password}")));
    assert_eq!(
        post_with(&server.door(), &[("authorization", &basic)])
            .await
            .0,
        200
    );
    let wrong = format!("Basic {}", base64_encode(&format!("p1:{wrong_password}")));
    assert_eq!(
        post_with(&server.door(), &[("authorization", &wrong)])
            .await
            .0,
        401
    );

    let (code, audit, _) = cli_on(&data, &["audit"]);
    assert_eq!(code, 0);
    for action in [
        "admin.created",
        "peer.created",
        "credential.issued",
        "credential.rotated",
        "admin.login_failed",
        "admin.token_issued",
    ] {
        assert!(audit.contains(action), "{action} missing from:\n{audit}");
    }
    let log = server.log_text();
    assert!(log.contains("admin API on http://"), "{log}");
    server.kill();
    for secret in &secrets {
        assert!(!log.contains(secret.as_str()), "the log holds {secret}");
        assert!(
            !audit.contains(secret.as_str()),
            "the audit log holds {secret}"
        );
    }
    if skip_unless_sqlite("the store's bytes are read from SQLite's files") {
        return;
    }
    // Everything the store holds, the WAL included, byte for byte.
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(&data).unwrap() {
        stored.extend(std::fs::read(entry.unwrap().path()).unwrap_or_default());
    }
    let stored = String::from_utf8_lossy(&stored);
    for secret in &secrets {
        assert!(
            !stored.contains(secret.as_str()),
            "the store holds {secret}"
        );
    }
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn a_peer_stops_at_its_expiry_by_the_gateway_clock() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let in_an_hour = rfc3339_millis(later(gw.clock.now(), Duration::from_secs(3_600)));
    let (status, created) = ada
        .post(
            "/v1/peers",
            json!({"name": "temp", "expiresAt": in_an_hour}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    let probe =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    assert_eq!(post_raw(&gw.door, Some(&token), probe.clone()).await.0, 200);
    gw.clock.advance(Duration::from_secs(3599));
    assert_eq!(post_raw(&gw.door, Some(&token), probe.clone()).await.0, 200);
    gw.clock.advance(Duration::from_secs(2));
    let (status, body) = post_raw(&gw.door, Some(&token), probe.clone()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "invalid_token");
    // Moving the expiry applies to the next request; a past expiry is refused.
    let (status, _) = ada
        .put("/v1/peers/temp/expiry", json!({"expiresAt": null}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(post_raw(&gw.door, Some(&token), probe).await.0, 200);
    let (status, body) = ada
        .put("/v1/peers/temp/expiry", json!({"expiresAt": "2001-01-01"}))
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must be in the future")
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_admin_api_and_the_door_share_one_argon2_pool() {
    // The door's policy enables no Basic: the pool is the gateway's, not the door scheme's.
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let before = gw.password_verifications();
    assert_eq!(ada.get("/v1/peers").await.0, 200);
    let wrong = AdminClient::basic(&gw, "ada", "not the password at all");
    assert_eq!(wrong.get("/v1/peers").await.0, 401);
    // One verification each, counted by the one pool both listeners use.
    assert_eq!(gw.password_verifications(), before + 2);
    gw.stop().await;
}

#[tokio::test]
async fn a_token_issued_through_the_api_admits_at_once_even_during_a_flood_of_unknown_ids() {
    let (gw, ada, _) = gateway_with_admins(
        PolicyEdit::default()
            .set("limits.failed_auth_per_ip_per_minute", 1_000_000)
            .policy(),
    )
    .await;
    // Well-formed tokens no credential has: after a few look-ups they are refused from memory.
    for n in 0..50u32 {
        let unknown = peergate::token::issue(peergate::token::CredentialKind::PeerToken)
            .unwrap()
            .token;
        let (status, _) = post_raw(&gw.door, Some(&unknown), format!("{{\"n\":{n}}}")).await;
        assert_eq!(status, 401);
    }
    // A peer made through the admin API is announced: its token admits on its first use.
    let token = ada.create_peer("fresh").await;
    let answer = send_text(&gw.door, &token, "hello", None).await;
    assert_eq!(task_of(&answer)["status"]["state"], "TASK_STATE_COMPLETED");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scrape_token_opens_metrics_and_nothing_else() {
    const SECRET: &str = "scrape-token-for-the-test-0123456789abcdef";
    let policy = PolicyEdit::default().insert("server.metrics_token_env", "PEERGATE_TEST_SCRAPE");
    let served = ServedPolicy::start(&policy, &["alice"], &[("PEERGATE_TEST_SCRAPE", SECRET)]);
    let admin = format!("http://{}", served.server.admin_addr);
    let client = reqwest::Client::new();
    let with = |request: reqwest::RequestBuilder, token: &str| {
        request.header("authorization", format!("Bearer {token}"))
    };
    let response = with(client.get(format!("{admin}/metrics")), SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("peergate_"));
    // Anywhere else on the admin API, or with another method, it is no credential at all.
    for path in ["/v1/peers", "/v1/usage", "/v1/audit", "/v1/conversations"] {
        let response = with(client.get(format!("{admin}{path}")), SECRET)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    let response = with(client.post(format!("{admin}/v1/peers")), SECRET)
        .json(&json!({"name": "mallory"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // Nor at the door.
    let response = with(client.post(served.server.door()), SECRET)
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // A near miss opens nothing.
    let response = with(client.get(format!("{admin}/metrics")), &SECRET[1..])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // Fail closed: a variable that is unset or short stops start-up, naming the setting.
    let ServedPolicy {
        dir, data, server, ..
    } = served;
    drop(server);
    let policy_path = dir.path().join("policy.toml");
    for env in [vec![], vec![("PEERGATE_TEST_SCRAPE", "short")]] {
        let output = std::process::Command::new(bin())
            .args(["serve", "--policy", policy_path.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(store_args(&data))
            .env_remove("PEERGATE_TEST_SCRAPE")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains("server.metrics_token_env"), "{stderr}");
        assert!(!stderr.contains("short"), "echoes the secret: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_listener_serves_metrics_on_any_address_to_the_scrape_token_only() {
    const SECRET: &str = "scrape-token-for-the-test-0123456789abcdef";
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let policy = PolicyEdit::default()
        .insert("server.metrics_token_env", "PEERGATE_TEST_SCRAPE")
        .insert("server.metrics_listen", format!("0.0.0.0:{port}").as_str());
    let served = ServedPolicy::start(&policy, &["alice"], &[("PEERGATE_TEST_SCRAPE", SECRET)]);
    let metrics = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let get = |path: &str, authorization: Option<String>| {
        let mut request = client.get(format!("{metrics}{path}"));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };
    let scraped = get("/metrics", Some(format!("Bearer {SECRET}")))
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(scraped.text().await.unwrap().contains("peergate_"));
    // A real administrator's password opens /metrics on the admin listener, never here (it
    // would cross the network in clear).
    use base64::Engine as _;
    add_admin(&served.data, "ada", PASSWORD_A);
    let ada = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("ada:{PASSWORD_A}"))
    );
    let on_admin = client
        .get(format!("http://{}/metrics", served.server.admin_addr))
        .header("authorization", &ada)
        .send()
        .await
        .unwrap();
    assert_eq!(on_admin.status(), 200, "the password is right");
    for authorization in [None, Some(format!("Bearer {}", &SECRET[1..])), Some(ada)] {
        let refused = get("/metrics", authorization.clone()).await.unwrap();
        assert_eq!(refused.status(), 401, "{authorization:?}");
        let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
    }
    // Nothing of the admin API is here, whatever the credential.
    for path in ["/v1/peers", "/openapi.json", "/ready"] {
        let response = get(path, Some(format!("Bearer {SECRET}"))).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    drop(served);

    // Without the scrape token it does not start, and names both settings.
    let served = ServedPolicy::start(&PolicyEdit::default(), &["alice"], &[]);
    let ServedPolicy {
        dir, data, server, ..
    } = served;
    drop(server);
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(
        &policy_path,
        PolicyEdit::default()
            .insert("server.metrics_listen", "0.0.0.0:9464")
            .text(),
    )
    .unwrap();
    let output = std::process::Command::new(bin())
        .args(["serve", "--policy", policy_path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(store_args(&data))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("server.metrics_listen") && stderr.contains("server.metrics_token_env"),
        "{stderr}"
    );
}

#[tokio::test]
async fn one_time_syntax_on_the_api_and_the_command_line() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let now = gw.clock.now();
    let day = Duration::from_secs(86_400);
    // An age is from now for an expiry, an offset is honoured, a date is midnight UTC.
    let (status, created) = ada
        .post("/v1/peers", json!({"name": "weekly", "expiresAt": "7d"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let at = parse_rfc3339(created["peer"]["expiresAt"].as_str().unwrap()).unwrap();
    assert_eq!(at, later(now, 7 * day));
    let (status, body) = ada
        .put(
            "/v1/peers/weekly/expiry",
            json!({"expiresAt": "2099-01-31T10:00:00+01:00"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["expiresAt"], "2099-01-31T09:00:00.000Z");
    let (status, body) = ada
        .put("/v1/peers/weekly/expiry", json!({"expiresAt": "next week"}))
        .await;
    assert_eq!(status, 400);
    assert!(body.to_string().contains("30m, 24h, 7d"), "{body}");
    // An age is back from now for `since`.
    for since in ["24h", "30m", "2000-01-01", "2000-01-01T00:00:00-08:00"] {
        let (status, body) = ada
            .get(&format!("/v1/audit?since={}", since.replace('+', "%2B")))
            .await;
        assert_eq!(status, 200, "{since}: {body}");
        assert!(
            !body["records"].as_array().unwrap().is_empty(),
            "{since}: {body}"
        );
    }
    let (status, body) = ada.get("/v1/audit?since=2099-01-01").await;
    assert_eq!(
        (status, body["records"].as_array().unwrap().len()),
        (200, 0)
    );
    // The command line reads the same.
    let (code, _, err) = gw.cli(&["peer", "expire", "weekly", "30d"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = gw.cli(&["audit", "--since", "2000-01-01T01:00:00+01:00"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("weekly"), "{out}");
    let (code, _, err) = gw.cli(&["audit", "--since", "yesterday"]);
    assert_ne!(code, 0);
    assert!(err.contains("RFC 3339 with any offset"), "{err}");
    // Past its expiry a peer is shown as expired, not active.
    let (status, body) = ada
        .put("/v1/peers/weekly/expiry", json!({"expiresAt": "1h"}))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("active")),
        "{body}"
    );
    gw.clock.advance(std::time::Duration::from_secs(2 * 3600));
    let (_, shown) = ada.get("/v1/peers/weekly").await;
    assert_eq!(shown["status"], "expired", "{shown}");
    let (_, list) = ada.get("/v1/peers").await;
    assert_eq!(list["peers"][0]["status"], "expired", "{list}");
    gw.stop().await;
}

#[tokio::test]
async fn a_revoked_peer_is_reinstated_with_a_new_token_and_its_old_ones_stay_dead() {
    let (gw, ada, bob) = gateway_with_admins(
        PolicyEdit::default()
            .set("auth.schemes", ["bearer", "basic"])
            .policy(),
    )
    .await;
    let (status, created) = ada.post("/v1/peers", json!({"name": "partner"})).await;
    assert_eq!(status, 201, "{created}");
    let old = created["token"].as_str().unwrap().to_owned();
    let (status, _) = ada
        .put(
            "/v1/peers/partner/password",
            json!({"password": "partner password 123"}),
        )
        .await;
    assert_eq!(status, 204);
    let basic = format!("Basic {}", base64_encode("partner:partner password 123"));
    assert_eq!(
        post_with(&gw.door, &[("authorization", &basic)]).await.0,
        200
    );
    // Only a revoked peer is reinstated.
    let (status, body) = ada.post("/v1/peers/partner/reinstate", json!({})).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = ada.post("/v1/peers/partner/revoke", json!({})).await;
    assert_eq!(status, 200);
    // Another administrator's peer is not theirs to reinstate.
    let (status, _) = bob.post("/v1/peers/partner/reinstate", json!({})).await;
    assert_eq!(status, 404);
    let (status, body) = ada.post("/v1/peers/partner/reinstate", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["peer"]["status"], "active");
    let new = body["token"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    assert_eq!(
        post_raw(&gw.door, Some(&new), probe.to_string()).await.0,
        200
    );
    assert_eq!(
        post_raw(&gw.door, Some(&old), probe.to_string()).await.0,
        401
    );
    // Nor does its old password: revoking took it away too.
    assert_eq!(
        post_with(&gw.door, &[("authorization", &basic)]).await.0,
        401
    );
    // The command line does the same, and the audit log keeps both turns.
    let (code, _, _) = gw.cli(&["peer", "revoke", "partner"]);
    assert_eq!(code, 0);
    let (code, token, err) = gw.cli(&["peer", "reinstate", "partner"]);
    assert_eq!(code, 0, "{err}");
    // A change made by another process reaches the server within the credential cache time.
    gw.clock.advance(Duration::from_secs(3));
    assert_eq!(
        post_raw(&gw.door, Some(token.trim()), probe.to_string())
            .await
            .0,
        200
    );
    assert_eq!(
        post_raw(&gw.door, Some(&new), probe.to_string()).await.0,
        401
    );
    let (_, audit) = ada.get("/v1/audit").await;
    let reinstated = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "peer.reinstated" && r["outcome"] == "ok")
        .count();
    assert_eq!(reinstated, 2, "{audit}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_web_page_could_make_a_browser_send_changes_nothing() {
    let (gw, ada, _) = gateway_with_admins(
        PolicyEdit::default()
            .set("server.admin_allowed_origins", ["https://console.example"])
            .policy(),
    )
    .await;
    let token = ada.create_peer("alice").await;
    let audited = ada.audit().await.len();
    let client = reqwest::Client::new();
    let as_ada = |method: Method, path: &str| {
        client
            .request(method, format!("{}{path}", gw.admin))
            .basic_auth("ada", Some(PASSWORD_A))
    };
    let json = "application/json";
    // (method, path, content type, body, extra header, status)
    type Attempt<'a> = (
        Method,
        &'a str,
        Option<&'a str>,
        &'a str,
        Option<(&'a str, &'a str)>,
        u16,
    );
    let attempts: [Attempt<'_>; 10] = [
        (
            Method::POST,
            "/v1/peers",
            Some("text/plain"),
            r#"{"name":"mallory"}"#,
            None,
            415,
        ),
        (
            Method::POST,
            "/v1/peers",
            Some("application/x-www-form-urlencoded"),
            "name=mallory",
            None,
            415,
        ),
        (
            Method::POST,
            "/v1/peers",
            Some("multipart/form-data; boundary=b"),
            "--b--",
            None,
            415,
        ),
        (Method::POST, "/v1/peers/alice/revoke", None, "", None, 415),
        (
            Method::POST,
            "/v1/peers/alice/api-key",
            Some("text/plain"),
            "",
            None,
            415,
        ),
        (
            Method::PUT,
            "/v1/peers/alice/limit",
            Some("text/plain"),
            r#"{"ratePerMinute":1}"#,
            None,
            415,
        ),
        (
            Method::POST,
            "/v1/peers/alice/rotate",
            Some(json),
            "{}",
            Some(("origin", "https://evil.example")),
            403,
        ),
        (
            Method::POST,
            "/v1/peers/alice/rotate",
            Some(json),
            "{}",
            Some(("origin", "null")),
            403,
        ),
        (
            Method::POST,
            "/v1/peers",
            Some(json),
            r#"{"name":"mallory"}"#,
            Some(("sec-fetch-site", "cross-site")),
            403,
        ),
        (
            Method::DELETE,
            "/v1/conversations/alice/ctx",
            None,
            "",
            None,
            415,
        ),
    ];
    for (method, path, content_type, body, extra, want) in attempts {
        let mut request = as_ada(method.clone(), path).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        if let Some((name, value)) = extra {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status().as_u16(),
            want,
            "{method} {path} {content_type:?} {extra:?}"
        );
        let body: Value = response.json().await.unwrap();
        let code = if want == 415 {
            "unsupported_media_type"
        } else {
            "cross_site_request"
        };
        assert_eq!(body["error"]["code"], code, "{method} {path}");
    }
    // Nothing changed: no peer, no rotation, no revocation, no audit record.
    let (_, peers) = ada.get("/v1/peers").await;
    let names: Vec<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice"]);
    assert_eq!(peers["peers"][0]["status"], "active");
    assert_eq!(peers["peers"][0]["ratePerMinute"], 30);
    assert_eq!(ada.audit().await.len(), audited, "an attempt left a change");
    let answer = send_text(&gw.door, &token, "still mine", None).await;
    assert_eq!(task_of(&answer)["status"]["state"], "TASK_STATE_COMPLETED");

    // A page of an origin the operator allowed may call it.
    let response = as_ada(Method::POST, "/v1/peers")
        .header("content-type", json)
        .header("origin", "https://console.example")
        .header("sec-fetch-site", "cross-site")
        .body(r#"{"name":"from-console"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);

    // The challenge names no scheme a browser would prompt for.
    let response = client
        .get(format!("{}/v1/peers", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let challenges: Vec<&str> = response
        .headers()
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(!challenges.is_empty());
    for challenge in &challenges {
        let scheme = challenge.split(' ').next().unwrap();
        assert!(!scheme.eq_ignore_ascii_case("basic"), "{challenges:?}");
    }
    // Programs still sign in with Basic without being asked.
    assert_eq!(ada.get("/v1/peers").await.0, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_announced_past_the_admin_limit_is_refused_at_once() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (gw, _, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let address = gw.admin.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/peers HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // No byte of the body is sent: the answer must not wait for it.
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("the admin API waited for a body it will refuse")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large"), "{answer}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn names_that_pass_for_ids_or_other_peers_and_endless_expiries_are_refused() {
    let (gw, ada, bob) = gateway_with_admins(PolicyEdit::default().policy()).await;
    ada.create_peer("Alice").await;
    // Another administrator, or the same one, cannot take the name in another case.
    for (admin, name) in [(&bob, "alice"), (&ada, "ALICE"), (&bob, "Alice")] {
        let (status, body) = admin.post("/v1/peers", json!({"name": name})).await;
        assert_eq!(status, 409, "{name}: {body}");
    }
    let (status, body) = bob
        .post(
            "/v1/peers",
            json!({"name": "peer_0123456789abcdef0123456789abcdef"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("peer id"),
        "{body}"
    );
    // The same rules on the command line.
    let (code, _, stderr) = gw.cli(&["peer", "add", "aLiCe"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("differ only in case"), "{stderr}");
    let (code, _, stderr) = gw.cli(&["peer", "add", "peer_0123456789abcdef0123456789abcdef"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("peer id"), "{stderr}");

    // An expiry past a hundred years is a mistake, not "never".
    for far in ["2999-01-01T00:00:00Z", "1000000d", "9000-01-01"] {
        let (status, body) = ada
            .put("/v1/peers/Alice/expiry", json!({"expiresAt": far}))
            .await;
        assert_eq!(status, 400, "{far}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("100 years"),
            "{body}"
        );
        let (status, body) = ada
            .post("/v1/peers", json!({"name": "far", "expiresAt": far}))
            .await;
        assert_eq!(status, 400, "{far}: {body}");
    }
    let (code, _, stderr) = gw.cli(&["peer", "expire", "Alice", "1000000d"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("100 years"), "{stderr}");
    let (status, body) = ada
        .put("/v1/peers/Alice/expiry", json!({"expiresAt": "2090-01-01"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, peer) = ada.get("/v1/peers/Alice").await;
    assert_eq!(peer["expiresAt"], "2090-01-01T00:00:00.000Z");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peers_stream_cap_is_set_shown_and_reset_through_the_api() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    ada.create_peer("alice").await;
    let (_, peer) = ada.get("/v1/peers/alice").await;
    assert_eq!(peer["maxStreams"], Value::Null, "the policy's cap");
    let (status, peer) = ada
        .put("/v1/peers/alice/streams", json!({"maxStreams": 3}))
        .await;
    assert_eq!(status, 200, "{peer}");
    assert_eq!(peer["maxStreams"], 3);
    for wrong in [
        json!({"maxStreams": 0}),
        json!({"maxStreams": 10001}),
        json!({}),
    ] {
        let (status, body) = ada.put("/v1/peers/alice/streams", wrong.clone()).await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }
    let (status, peer) = ada
        .put("/v1/peers/alice/streams", json!({"maxStreams": null}))
        .await;
    assert_eq!(status, 200, "{peer}");
    assert_eq!(peer["maxStreams"], Value::Null);
    let audit = ada.audit().await;
    assert!(
        audit.iter().any(|r| r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("open streams 3 -> the policy's"))),
        "{audit:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_peer_created_with_issue_token_false_is_given_no_token() {
    let (gw, ada, _) = gateway_with_admins(PolicyEdit::default().policy()).await;
    let (status, body) = ada
        .post(
            "/v1/peers",
            json!({"name": "by-password", "issueToken": false}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["peer"]["name"], "by-password");
    assert!(body.get("token").is_none(), "{body}");
    let (status, body) = ada.post("/v1/peers", json!({"name": "with-token"})).await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("pgt_")),
        "{body}"
    );
    gw.stop().await;
}
