//! Two `peergate serve` processes on one PostgreSQL database and one Redis server, as an
//! operator runs them behind a load balancer. Both are started by the tests (skipped loudly
//! without the packages, failing under CI).

use crate::common::redis::RedisServer;
use crate::common::*;
use peergate::store::{Store, StoreLocation};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct horse battery staple 42";

/// The shared engines and the settings both instances run with.
struct Shared {
    dir: tempfile::TempDir,
    store_url: String,
    redis: RedisServer,
    policy: PathBuf,
}

impl Shared {
    /// A fresh database, a Redis server, a signing key and a policy over `model`; `None` when
    /// the packages are missing (outside CI).
    fn start(model: &FakeModel, edit: impl FnOnce(PolicyEdit) -> PolicyEdit) -> Option<Self> {
        let cluster = postgres::cluster()?;
        let redis = RedisServer::start()?;
        let dir = tempfile::tempdir().unwrap();
        let store_url = cluster.database_for(dir.path());
        let key = dir.path().join("card.pem");
        let (code, _, stderr) = cli(&[
            "keys",
            "generate",
            "--alg",
            "EdDSA",
            "--kid",
            "cluster-1",
            "--out",
            key.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        let policy = PolicyEdit::default()
            .openai(&model.base_url, "test-model")
            .insert("server.public_base_url", "https://door.example")
            .push_table(
                "signing.keys",
                &[
                    ("kid", "cluster-1".into()),
                    ("alg", "EdDSA".into()),
                    ("private_key_file", key.to_str().unwrap().into()),
                ],
            )
            .set("cluster.lease_seconds", 2)
            // Long enough that only a change notification explains a revocation seen at once.
            .set("auth.credential_cache_seconds", 5);
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, edit(policy).text()).unwrap();
        let shared = Self {
            dir,
            store_url,
            redis,
            policy: path,
        };
        let (code, _, stderr) = cli_with_stdin(
            &["admin", "add", "ada", "--store", &shared.store_url],
            &format!("{PASSWORD}\n"),
        );
        assert_eq!(code, 0, "{stderr}");
        Some(shared)
    }

    /// `peergate serve` on the shared store and Redis.
    fn instance(&self) -> ServeProcess {
        self.instance_with(&self.policy)
    }

    /// An instance serving the same store with Redis, on the policy file `policy`.
    fn instance_with(&self, policy: &std::path::Path) -> ServeProcess {
        ServeProcess::start_args(
            self.dir.path(),
            &[
                "--policy",
                policy.to_str().unwrap(),
                "--store",
                &self.store_url,
                "--redis",
                &self.redis.url(),
            ],
            &[],
        )
    }

    /// Runs the CLI on the shared store.
    fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let mut args = args.to_vec();
        args.extend(["--store", &self.store_url]);
        cli_in(self.dir.path(), &args)
    }

    /// A peer of ada's; returns its token.
    fn peer(&self, name: &str, rate: &str) -> String {
        let (code, stdout, stderr) = self.cli(&[
            "peer",
            "add",
            name,
            "--owner",
            "ada",
            "--rate",
            rate,
            "--policy",
            self.policy.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        stdout.trim().to_owned()
    }

    /// Makes the shared database refuse every connection, ending the open ones: the store is
    /// gone for every instance, while the cluster keeps serving the other tests.
    fn cut_off_store(&self) {
        postgres::cluster()
            .expect("the cluster this pair was started on")
            .cut_off(&self.store_url);
    }

    async fn store(&self) -> Store {
        Store::open_at(&StoreLocation::Postgres(self.store_url.clone()))
            .await
            .unwrap()
    }
}

/// Two instances on fresh shared engines, over a model behaving as `behaviour`, and the token
/// of ada's peer alice with quota `rate`.
struct Pair {
    model: FakeModel,
    shared: Shared,
    token: String,
    a: ServeProcess,
    b: ServeProcess,
}

/// A [`Pair`]; `None` when the packages are missing (outside CI).
async fn pair(behaviour: ModelBehaviour, rate: &str) -> Option<Pair> {
    let model = FakeModel::start(behaviour).await;
    let shared = Shared::start(&model, |p| p)?;
    let token = shared.peer("alice", rate);
    let (a, b) = (shared.instance(), shared.instance());
    Some(Pair {
        model,
        shared,
        token,
        a,
        b,
    })
}

/// Revokes alice through `instance`'s admin API.
async fn revoke_alice(instance: &ServeProcess) {
    let (status, body) = admin_post(instance, "/v1/peers/alice/revoke", json!({})).await;
    assert_eq!(status, 200, "{body}");
}

fn get_task_request(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}).to_string()
}

fn send_request(text: &str, context_id: Option<&str>) -> Value {
    let mut message = json!({"role": "ROLE_USER", "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{"text": text}]});
    if let Some(context_id) = context_id {
        message["contextId"] = json!(context_id);
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
}

/// The state of the task a `GetTask` answered.
fn found_state(response: &Value) -> String {
    response["result"]["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn state_of(response: &Value) -> String {
    task_of(response)["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_peers_quota_holds_across_both_instances() {
    let Some(Pair {
        model: _model,
        shared: _shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Answer, "5/min").await
    else {
        return;
    };
    let mut admitted = 0;
    for i in 0..20 {
        let door = if i % 2 == 0 { a.door() } else { b.door() };
        if post_raw(&door, Some(&token), get_task_request("none"))
            .await
            .0
            == 200
        {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 5,
        "quota + burst across both instances, not per instance"
    );
}

/// The commands clients sent while `monitor` watched (a script's own commands left out), but
/// the instances' presence announcements, which run on their own clock.
fn client_commands(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|line| !line.contains(" lua]") && !line.contains("\"PUBLISH\""))
        .collect()
}

#[tokio::test]
async fn a_message_asks_redis_once_before_its_answer_once_after_and_a_refusal_once() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p.set("capabilities.http_json", true)) else {
        return;
    };
    let alice = shared.peer("alice", "600/min");
    let bob = shared.peer("bob", "1/min");
    let a = shared.instance();
    // The scripts loaded and the budget's counters started.
    for _ in 0..2 {
        let answer = rpc(&a.door(), &alice, send_request("warm up", None)).await;
        assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    }
    let answer = rpc(&a.door(), &bob, send_request("bob's one", None)).await;
    assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let monitor = shared.redis.monitor();
    let context = uuid::Uuid::new_v4().to_string();
    for i in 0..10 {
        // Half in a context of their own, half continuing one.
        let named = (i % 2 == 1).then_some(context.as_str());
        let answer = rpc(&a.door(), &alice, send_request("hello", named)).await;
        assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = monitor.stop();
    let sent = client_commands(&lines);
    let before: Vec<_> = sent
        .iter()
        .filter(|l| l.contains("peergate:ip:") && l.contains("peergate:peer:"))
        .collect();
    let after: Vec<_> = sent
        .iter()
        .filter(|l| {
            l.contains("\"EVALSHA\"")
                && l.split('"')
                    .nth(7)
                    .is_some_and(|k| k.starts_with("peergate:turn:"))
        })
        .collect();
    assert_eq!(
        sent.len(),
        20,
        "two calls per message, one before its answer and one after: {sent:#?}"
    );
    // Before: both limits, four budget counters and the context's lock, in one script.
    assert_eq!(before.len(), 10, "{sent:#?}");
    for line in &before {
        assert!(line.contains("\"EVALSHA\""), "{line}");
        assert!(
            line.contains("peergate:spent:") && line.contains("peergate:turn:"),
            "{line}"
        );
    }
    // After: the lock's release with the tokens spent, in one script.
    assert_eq!(after.len(), 10, "{sent:#?}");
    assert!(
        after.iter().all(|l| l.contains("peergate:spent:")),
        "the release carries the spending: {after:#?}"
    );

    // A Redis that lost its scripts (a restart, a flush) is given them again, and the message
    // is answered.
    assert_eq!(shared.redis.command("SCRIPT FLUSH"), "+OK");
    let monitor = shared.redis.monitor();
    let answer = rpc(&a.door(), &alice, send_request("after a flush", None)).await;
    assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = monitor.stop();
    let loads = client_commands(&lines)
        .into_iter()
        .filter(|l| l.contains("\"SCRIPT\" \"LOAD\"") || l.contains("\"script\" \"load\""))
        .count();
    assert_eq!(
        loads, 2,
        "the admission and the release loaded again: {lines:#?}"
    );

    // Bob's one request of the minute went through this instance: the other learns that he
    // is past his quota from Redis, in the one call.
    let b = shared.instance();
    let monitor = shared.redis.monitor();
    let again = send_request("again", None).to_string();
    let (status, body) = post_raw(&b.door(), Some(&bob), again).await;
    assert_eq!(status, 429, "{body}");
    let (status, body) = post_raw(
        &a.door(),
        Some(&made_up_token()),
        send_request("who?", None).to_string(),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = monitor.stop();
    let sent = client_commands(&lines);
    assert_eq!(sent.len(), 2, "one call per refusal: {sent:#?}");
    assert!(
        sent[0].contains("peergate:ip:") && sent[0].contains("peergate:peer:"),
        "the address's limit and the peer's in one call: {}",
        sent[0]
    );
    assert!(
        sent[1].contains("peergate:ip:") && sent[1].contains("peergate:failed-auth:"),
        "the address's limit and its failed attempt in one call: {}",
        sent[1]
    );
}

/// Posts `body` to the door as `token` naming protocol `version`: (status, body).
async fn post_version(door: &str, token: &str, version: &str, body: String) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(door)
        .header("content-type", "application/json")
        .header("a2a-version", version)
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_peer_past_its_quota_hears_429_for_any_call_its_admission_refuses_in_one_call() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p.set("capabilities.http_json", true)) else {
        return;
    };
    let alice = shared.peer("alice", "600/min");
    let bob = shared.peer("bob", "1/min");
    let a = shared.instance();
    let answer = rpc(&a.door(), &bob, send_request("bob's one", None)).await;
    assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let monitor = shared.redis.monitor();
    // Refused before any operation runs (a body that is not a request, a version the gate
    // refused) and an operation that settles it itself: the limit's 429 each time, decided
    // in the pipeline, with no layer replacing an answer.
    let get = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}});
    for (version, body) in [
        ("1.0", "{not json-rpc".to_owned()),
        ("0.2", get.to_string()),
        ("1.0", get.to_string()),
    ] {
        let (status, text) = post_version(&a.door(), &bob, version, body).await;
        assert_eq!(status, 429, "{text}");
        assert!(text.contains("rate_limited"), "the guard's refusal: {text}");
    }
    // The same over HTTP+JSON: a body its binding cannot read is refused by the limit first.
    let rest_send = format!("{}/rest/message:send", a.door());
    let (status, text) = post_version(&rest_send, &bob, "1.0", "{not a message".into()).await;
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("rate_limited"), "the guard's refusal: {text}");
    // A body past the limit by its Content-Length is refused by the body limit before the
    // pipeline reads anything: its answer stays (no layer replaces an inner answer), and its
    // admission is still asked before it leaves.
    let (status, text) = post_version(&a.door(), &bob, "1.0", "x".repeat(1_048_577)).await;
    assert_eq!(status, 413, "{text}");
    // Alice is within hers: the version's own refusal, after its admission.
    let (status, text) = post_version(&a.door(), &alice, "0.2", get.to_string()).await;
    assert_ne!(status, 429, "{text}");
    assert!(
        text.contains("VERSION_NOT_SUPPORTED") || text.contains("-32009"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = monitor.stop();
    let sent = client_commands(&lines);
    assert_eq!(
        sent.len(),
        6,
        "one call per request, before its answer: {sent:#?}"
    );
    assert!(
        sent.iter().all(|l| l.contains("peergate:peer:")),
        "{sent:#?}"
    );
}

#[tokio::test]
async fn a_revocation_through_one_instance_is_refused_on_the_other_within_a_second() {
    let Some(Pair {
        model: _model,
        shared: _shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Answer, "600/min").await
    else {
        return;
    };
    // A has verified the token and caches the verdict for five seconds.
    assert_eq!(
        post_raw(&a.door(), Some(&token), get_task_request("none"))
            .await
            .0,
        200
    );
    revoke_alice(&b).await;
    assert!(
        refused_within_a_second(&a, &token).await,
        "the other instance still admitted a revoked peer after a second"
    );
}

/// A peer made read-only through one instance's admin API is refused a message on the other
/// within a second, although that instance had admitted it and keeps verdicts for five; what
/// it may still do, it does.
#[tokio::test]
async fn operations_limited_through_one_instance_hold_on_the_other_within_a_second() {
    let Some(Pair {
        model: _model,
        shared: _shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Answer, "600/min").await
    else {
        return;
    };
    let send = || {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
            {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
             "parts": [{"text": "hello"}]}}})
        .to_string()
    };
    assert_eq!(post_raw(&a.door(), Some(&token), send()).await.0, 200);
    let response = reqwest::Client::new()
        .put(format!("http://{}/v1/peers/alice/operations", b.admin_addr))
        .basic_auth("ada", Some(PASSWORD))
        .json(&json!({"operations": ["read-only"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let since = Instant::now();
    while post_raw(&a.door(), Some(&token), send()).await.0 != 403 {
        assert!(
            since.elapsed() < Duration::from_secs(1),
            "the other instance still let a read-only peer send after a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read = post_raw(&a.door(), Some(&token), get_task_request("none")).await;
    assert_eq!(read.0, 200, "{:?}", read.1);
}

/// Whether `instance` refuses `token` (401) within a second of now.
async fn refused_within_a_second(instance: &ServeProcess, token: &str) -> bool {
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(1) {
        if post_raw(&instance.door(), Some(token), get_task_request("none"))
            .await
            .0
            == 401
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// `POST` to an instance's admin API as ada; returns (status, body).
async fn admin_post(instance: &ServeProcess, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", instance.admin_addr))
        .basic_auth("ada", Some(PASSWORD))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A credential of ada's issued by `issue` (run on a blocking thread, as the command line is a
/// process of its own), then asked for at `door` until it is admitted: how long that took, from
/// the moment the issuing returned.
async fn issued_then_admitted(
    door: &str,
    issue: impl FnOnce() -> String + Send + 'static,
) -> (String, Option<Duration>) {
    let token = tokio::task::spawn_blocking(issue).await.unwrap();
    let took = admitted_within(door, &token, Duration::from_secs(1)).await;
    (token, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_made_up_ids_never_delays_a_new_credential_nor_reaches_the_store() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    // No address runs out of failed attempts: the flood reaches the credential check at full
    // speed, as from a botnet.
    let Some(shared) = Shared::start(&model, |p| {
        p.set("limits.failed_auth_per_ip_per_minute", 1_000_000_000)
            .set("limits.per_ip_per_minute", 1_000_000_000)
    }) else {
        return;
    };
    let cluster = postgres::cluster().unwrap();
    cluster.log_statements_of(&shared.store_url);
    let (a, b) = (shared.instance(), shared.instance());
    let flood = Flood::start(&a.door(), 16, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A peer added on the command line (announced through PostgreSQL).
    let cli = Arc::new(shared);
    let on_cli = cli.clone();
    let (added, took) =
        issued_then_admitted(&a.door(), move || on_cli.peer("carol", "600/min")).await;
    assert!(
        took.is_some(),
        "a peer added on the command line was not admitted within a second"
    );
    // A peer created through the other instance's admin API (announced through Redis).
    let (status, body) = admin_post(&b, "/v1/peers", json!({"name": "dave"})).await;
    assert_eq!(status, 201, "{body}");
    let created = body["token"].as_str().unwrap().to_owned();
    let took = admitted_within(&a.door(), &created, Duration::from_secs(1)).await;
    assert!(
        took.is_some(),
        "a peer created on the other instance was not admitted within a second"
    );
    // A rotation on the command line.
    let on_cli = cli.clone();
    let (rotated, took) = issued_then_admitted(&a.door(), move || {
        let (code, stdout, stderr) = on_cli.cli(&["peer", "rotate", "carol"]);
        assert_eq!(code, 0, "{stderr}");
        stdout.trim().to_owned()
    })
    .await;
    assert!(
        took.is_some(),
        "a rotated token was not admitted within a second"
    );
    assert_ne!(rotated, added);
    // A reinstatement through the other instance.
    let (status, body) = admin_post(&b, "/v1/peers/dave/revoke", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = admin_post(&b, "/v1/peers/dave/reinstate", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let reinstated = body["token"].as_str().unwrap().to_owned();
    let took = admitted_within(&a.door(), &reinstated, Duration::from_secs(1)).await;
    assert!(
        took.is_some(),
        "a reinstated peer was not admitted within a second"
    );

    let refused = flood.stop().await;
    assert!(refused > 200, "the flood hardly ran: {refused} refusals");
    // The store was asked about the real credentials, and never about a made-up one.
    let log = cluster.log();
    let rotated_id = &rotated[4..16];
    assert!(
        log.contains(rotated_id),
        "the statement log does not show the look-up of a real credential"
    );
    assert!(
        !log.contains(MADE_UP_ID_PREFIX),
        "a made-up credential id reached the store"
    );
}

#[tokio::test]
async fn account_changes_made_at_once_through_both_instances_stay_consistent() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p.set("auth.schemes", ["bearer", "api_key"]))
    else {
        return;
    };
    let (a, b) = (shared.instance(), shared.instance());
    for round in 0..5 {
        // The same new name through both at once: one is created, the other is told it exists.
        let name = format!("race-{round}");
        let body = json!({"name": name, "ratePerMinute": 600});
        let (first, second) = tokio::join!(
            admin_post(&a, "/v1/peers", body.clone()),
            admin_post(&b, "/v1/peers", body.clone())
        );
        let mut statuses = [first.0, second.0];
        statuses.sort();
        assert_eq!(statuses, [201, 409], "{first:?} {second:?}");
        // A new API key stops the earlier ones: issued through both at once, one works after.
        let path = format!("/v1/peers/{name}/api-key");
        let (first, second) = tokio::join!(
            admin_post(&a, &path, json!({})),
            admin_post(&b, &path, json!({}))
        );
        assert_eq!((first.0, second.0), (200, 200));
        let mut working = 0;
        for key in [&first.1["apiKey"], &second.1["apiKey"]] {
            let status = reqwest::Client::new()
                .post(a.door())
                .header("x-api-key", key.as_str().unwrap())
                .header("content-type", "application/json")
                .header("a2a-version", "1.0")
                .body(get_task_request("none"))
                .send()
                .await
                .unwrap()
                .status();
            working += usize::from(status == 200);
        }
        assert_eq!(working, 1, "exactly one of two keys issued at once works");
    }
}

/// How many times `process` logged `line`.
fn logged(process: &ServeProcess, line: &str) -> usize {
    process.log_text().matches(line).count()
}

#[tokio::test]
async fn a_revocation_made_while_redis_was_away_is_refused_everywhere_once_it_is_back() {
    let Some(Pair {
        model: _model,
        mut shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Answer, "600/min").await
    else {
        return;
    };
    assert_eq!(
        post_raw(&a.door(), Some(&token), get_task_request("none"))
            .await
            .0,
        200
    );
    // A now trusts the token for five seconds.
    let cached_at = Instant::now();
    shared.redis.stop();
    // The admin API works while Redis is away.
    revoke_alice(&b).await;
    shared.redis.restart();
    let restored = "Redis subscription restored";
    let deadline = Instant::now() + Duration::from_secs(4);
    while logged(&a, restored) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(logged(&a, restored), 1, "{}", a.log_text());
    let status = post_raw(&a.door(), Some(&token), get_task_request("none"))
        .await
        .0;
    assert!(
        cached_at.elapsed() < Duration::from_secs(5),
        "too slow to tell the restored subscription from the cache's expiry"
    );
    assert_eq!(
        status, 401,
        "the restored subscription dropped what A had cached"
    );
}

#[tokio::test]
async fn a_budget_spent_through_one_instance_is_refused_on_the_other_and_tasks_are_found_on_both() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p) else {
        return;
    };
    // Each answer costs 18 tokens: two answers spend the day.
    let (code, _, stderr) = shared.cli(&["admin", "budget", "ada", "--tokens-per-day", "30"]);
    assert_eq!(code, 0, "{stderr}");
    let token = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    // B sees ada's spending first (nothing yet), then A spends.
    let first = rpc(&b.door(), &token, send_request("one", None)).await;
    assert_eq!(state_of(&first), "TASK_STATE_COMPLETED", "{first}");
    let second = rpc(&a.door(), &token, send_request("two", None)).await;
    assert_eq!(state_of(&second), "TASK_STATE_COMPLETED", "{second}");
    let third = rpc(&b.door(), &token, send_request("three", None)).await;
    assert_eq!(
        state_of(&third),
        "TASK_STATE_REJECTED",
        "B counted only its own spending: {third}"
    );
    // Each instance finds the tasks made on the other.
    for (made, other) in [(&first, &a), (&second, &b)] {
        let id = task_of(made)["id"].as_str().unwrap();
        let found = get_task(&other.door(), &token, id, None).await;
        assert_eq!(found_state(&found), "TASK_STATE_COMPLETED", "{found}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spending_redis_missed_while_it_hung_is_counted_once_it_answers() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p) else {
        return;
    };
    // Each answer costs 18 tokens: two answers spend the day.
    let (code, _, stderr) = shared.cli(&["admin", "budget", "ada", "--tokens-per-day", "30"]);
    assert_eq!(code, 0, "{stderr}");
    let token = shared.peer("alice", "600/min");
    let a = shared.instance();
    let first = rpc(&a.door(), &token, send_request("one", None)).await;
    assert_eq!(state_of(&first), "TASK_STATE_COMPLETED", "{first}");

    // Redis hangs; three requests at once time out together and open the breaker.
    shared.redis.pause();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let (door, token) = (a.door(), token.clone());
            tokio::spawn(
                async move { post_raw(&door, Some(&token), get_task_request("none")).await },
            )
        })
        .collect();
    for request in waiting {
        request.await.unwrap();
    }
    assert!(
        a.log_with("the circuit breaker is open")
            .contains("the circuit breaker is open")
    );
    // Answered and counted here; its tokens never reach the shared counters.
    let second = rpc(&a.door(), &token, send_request("two", None)).await;
    assert_eq!(state_of(&second), "TASK_STATE_COMPLETED", "{second}");

    shared.redis.resume();
    assert!(
        a.log_with("the circuit breaker is closed")
            .contains("the circuit breaker is closed")
    );
    // The counters Redis holds miss the second answer: they are dropped and started again
    // from the store, which has both.
    let third = rpc(&a.door(), &token, send_request("three", None)).await;
    assert_eq!(
        state_of(&third),
        "TASK_STATE_REJECTED",
        "the shared counters missed what was spent while Redis hung: {third}"
    );
}

#[tokio::test]
async fn a_peers_own_budget_spent_through_one_instance_is_refused_on_the_other() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p) else {
        return;
    };
    let token = shared.peer("bob", "600/min");
    // Each answer costs 18 tokens: bob's own 30 a day allow two; its owner's budget is larger.
    let (code, _, stderr) = shared.cli(&["peer", "budget", "bob", "--tokens-per-day", "30"]);
    assert_eq!(code, 0, "{stderr}");
    let (a, b) = (shared.instance(), shared.instance());
    let first = rpc(&b.door(), &token, send_request("one", None)).await;
    assert_eq!(state_of(&first), "TASK_STATE_COMPLETED", "{first}");
    let second = rpc(&a.door(), &token, send_request("two", None)).await;
    assert_eq!(state_of(&second), "TASK_STATE_COMPLETED", "{second}");
    let third = rpc(&b.door(), &token, send_request("three", None)).await;
    assert_eq!(
        state_of(&third),
        "TASK_STATE_REJECTED",
        "B counted only its own spending: {third}"
    );
    assert!(
        third
            .to_string()
            .contains("This peer's daily model budget of 30 tokens")
    );
}

#[tokio::test]
async fn two_messages_of_one_context_through_both_instances_are_answered_in_turn() {
    let Some(Pair {
        model,
        shared: _shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Slow(Duration::from_millis(400)), "600/min").await
    else {
        return;
    };
    let context = "ctx-shared-1";
    let (door_a, door_b, token_b) = (a.door(), b.door(), token.clone());
    let first = tokio::spawn(async move {
        rpc(
            &door_a,
            &token,
            send_request("first question", Some(context)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = tokio::spawn(async move {
        rpc(
            &door_b,
            &token_b,
            send_request("second question", Some(context)),
        )
        .await
    });
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(state_of(&first), "TASK_STATE_COMPLETED", "{first}");
    assert_eq!(state_of(&second), "TASK_STATE_COMPLETED", "{second}");
    assert_eq!(model.max_in_flight(), 1, "the second waited for the first");
    let requests = model.requests();
    let last = requests.last().unwrap().to_string();
    assert!(
        last.contains("first question") && last.contains("model says: first question"),
        "the second turn saw the first in its history: {last}"
    );
}

/// The working tasks in the store, by id: the instance answering each.
async fn working(store: &Store) -> Vec<(String, Option<String>)> {
    let mut working: Vec<_> = store
        .tasks()
        .working_tasks(None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.id.to_string(), t.instance))
        .collect();
    working.sort();
    working
}

#[tokio::test]
async fn a_killed_instances_working_task_is_failed_by_the_survivor_and_the_survivors_are_not() {
    let Some(Pair {
        model,
        shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Gated, "600/min").await
    else {
        return;
    };
    let store = shared.store().await;
    let (door_a, token_a) = (a.door(), token.clone());
    let _orphaned = tokio::spawn(async move {
        post_raw(
            &door_a,
            Some(&token_a),
            send_request("on a", None).to_string(),
        )
        .await
    });
    model.wait_for_arrival().await;
    let (door_b, token_b) = (b.door(), token.clone());
    let survivor_turn =
        tokio::spawn(async move { rpc(&door_b, &token_b, send_request("on b", None)).await });
    model.wait_for_arrival().await;
    let before = working(&store).await;
    assert_eq!(before.len(), 2, "{before:?}");
    // An instance that starts now fails no live instance's turn.
    let c = shared.instance();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        working(&store).await,
        before,
        "a starting instance failed a live one's turn"
    );
    drop(c);
    a.kill();
    // The lease is 2 s, renewed every 2/3 s: the survivor fails the task within about 3 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut left = before.clone();
    while left.len() != 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = working(&store).await;
    }
    assert_eq!(
        left.len(),
        1,
        "the killed instance's task is no longer working"
    );
    let (orphan_id, _) = before.iter().find(|t| !left.contains(t)).unwrap();
    let orphan = get_task(&b.door(), &token, orphan_id, None).await;
    assert_eq!(found_state(&orphan), "TASK_STATE_FAILED", "{orphan}");
    assert!(orphan.to_string().contains("interrupted"), "{orphan}");
    // The survivor's own turn was left alone and completes.
    model.set(ModelBehaviour::Answer);
    model.release_one();
    model.release_one();
    let answered = tokio::time::timeout(Duration::from_secs(10), survivor_turn)
        .await
        .expect("the survivor's turn finished")
        .unwrap();
    assert_eq!(state_of(&answered), "TASK_STATE_COMPLETED", "{answered}");
    store.close().await;
}

#[tokio::test]
async fn restarting_redis_mid_run_loses_no_answered_task() {
    let Some(Pair {
        model: _model,
        mut shared,
        token,
        a,
        b,
    }) = pair(ModelBehaviour::Answer, "6000/min").await
    else {
        return;
    };
    let mut answered = Vec::new();
    for i in 0..40 {
        if i == 10 {
            shared.redis.stop();
        }
        if i == 25 {
            shared.redis.restart();
        }
        let door = if i % 2 == 0 { a.door() } else { b.door() };
        let response = rpc(&door, &token, send_request(&format!("message {i}"), None)).await;
        assert_eq!(state_of(&response), "TASK_STATE_COMPLETED", "{response}");
        answered.push(task_of(&response)["id"].as_str().unwrap().to_owned());
    }
    for (i, id) in answered.iter().enumerate() {
        let door = if i % 2 == 0 { b.door() } else { a.door() };
        let found = get_task(&door, &token, id, None).await;
        assert_eq!(found_state(&found), "TASK_STATE_COMPLETED", "{id}: {found}");
    }
}

#[tokio::test]
async fn both_instances_serve_the_same_card_and_key_set() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p) else {
        return;
    };
    let (a, b) = (shared.instance(), shared.instance());
    for path in ["/.well-known/agent-card.json", "/.well-known/jwks.json"] {
        let mut seen = Vec::new();
        for instance in [&a, &b] {
            let response = reqwest::get(format!("http://{}{path}", instance.addr))
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
            };
            let validators = (header("etag"), header("last-modified"));
            seen.push((validators, response.bytes().await.unwrap()));
        }
        assert!(seen[0].0.0.is_some(), "{path} has an ETag");
        assert_eq!(seen[0], seen[1], "{path} differs between instances");
    }
}

/// `peergate serve` that must refuse to start; returns its stderr.
fn refused_start(cwd: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    all.extend(args);
    let (code, _, stderr) = cli_in(cwd, &all);
    assert_ne!(code, 0, "{stderr}");
    stderr
}

#[tokio::test]
async fn instances_that_would_serve_differently_refuse_to_start() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p) else {
        return;
    };
    let (store, redis) = (shared.store_url.as_str(), shared.redis.url());
    let cwd = shared.dir.path();
    // Without the card's URL or keys, instances would serve different cards.
    for (missing, setting) in [
        (
            "server.public_base_url",
            "server.public_base_url must be set",
        ),
        ("signing.keys", "[[signing.keys]] must be set"),
    ] {
        let text = std::fs::read_to_string(&shared.policy).unwrap();
        let path = cwd.join("refused.toml");
        std::fs::write(&path, PolicyEdit::from_text(&text).remove(missing).text()).unwrap();
        let stderr = refused_start(
            cwd,
            &[
                "--policy",
                path.to_str().unwrap(),
                "--store",
                store,
                "--redis",
                &redis,
            ],
        );
        assert!(stderr.contains(setting), "{stderr}");
    }
    // With push notifications on, without a shared push key: a key generated per data
    // directory would seal configs one instance cannot open on the other.
    let text = std::fs::read_to_string(&shared.policy).unwrap();
    let path = cwd.join("refused.toml");
    let push_on = PolicyEdit::from_text(&text).set("capabilities.push_notifications", true);
    std::fs::write(&path, push_on.text()).unwrap();
    let stderr = refused_start(
        cwd,
        &[
            "--policy",
            path.to_str().unwrap(),
            "--store",
            store,
            "--redis",
            &redis,
        ],
    );
    assert!(
        stderr.contains("push.key_env or push.key_file must be set"),
        "{stderr}"
    );
    // One instance with Redis serves; one without is refused, and the other way round.
    let policy = shared.policy.to_str().unwrap();
    let with_redis = shared.instance();
    let stderr = refused_start(cwd, &["--policy", policy, "--store", store]);
    assert!(
        stderr.contains("only when each runs with --redis"),
        "{stderr}"
    );
    drop(with_redis);
    let alone = ServeProcess::start_args(cwd, &["--policy", policy, "--store", store], &[]);
    let stderr = refused_start(
        cwd,
        &["--policy", policy, "--store", store, "--redis", &redis],
    );
    assert!(
        stderr.contains("served by a peergate instance without --redis"),
        "{stderr}"
    );
    drop(alone);
}

#[tokio::test]
async fn a_turn_answered_by_one_instance_is_canceled_through_the_other() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let Some(shared) = Shared::start(&model, |p| p.set("capabilities.cancel_running", true)) else {
        return;
    };
    let token = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let store = shared.store().await;
    let (door_a, sender) = (a.door(), token.clone());
    let sending =
        tokio::spawn(async move { rpc(&door_a, &sender, send_request("stop me", None)).await });
    model.wait_for_arrival().await;
    let working = working(&store).await;
    let (id, _) = &working[0];
    let canceled = rpc(
        &b.door(),
        &token,
        json!({"jsonrpc": "2.0", "id": 7, "method": "CancelTask", "params": {"id": id}}),
    )
    .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let sent = sending.await.unwrap();
    assert_eq!(state_of(&sent), "TASK_STATE_CANCELED", "{sent}");
    store.close().await;
}

/// `GET /ready` on `instance`'s admin listener, which names the parts: its status and body.
async fn readiness(instance: &ServeProcess) -> (u16, Value) {
    let response = reqwest::get(format!("http://{}/ready", instance.admin_addr))
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Polls `/ready` until its status is `want` (answers are reused for a second).
/// The admin listener's `/ready` body once `check` holds for it (within 15 s).
async fn readiness_until(instance: &ServeProcess, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = readiness(instance).await;
        if check(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "/ready stayed {status}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn readiness_becomes(instance: &ServeProcess, want: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = readiness(instance).await;
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "/ready stayed {status}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn ready_stays_200_degraded_while_redis_is_away_and_503_without_the_store() {
    let Some(mut pair) = pair(ModelBehaviour::Answer, "600/min").await else {
        return;
    };
    let body = readiness_becomes(&pair.a, 200).await;
    assert_eq!(
        body,
        json!({"status": "ready", "store": "ok", "redis": "ok", "backend": "openai"})
    );
    pair.shared.redis.stop();
    // The door keeps answering without Redis (limits kept locally): a load balancer must keep
    // the instance, so /ready stays 200 and says what is missing.
    let body = readiness_until(&pair.a, |body| body["redis"] == "unreachable").await;
    assert_eq!(
        body,
        json!({"status": "degraded", "store": "ok", "redis": "unreachable", "backend": "openai"})
    );
    // The door, which anyone reaches, says only that it is degraded.
    let door = reqwest::get(format!("http://{}/ready", pair.a.addr))
        .await
        .unwrap();
    assert_eq!(door.status(), 200);
    assert_eq!(
        door.json::<Value>().await.unwrap(),
        json!({"status": "degraded"})
    );
    assert!(
        !body.to_string().contains("127.0.0.1"),
        "names an address: {body}"
    );
    let answered = send_text(&pair.a.door(), &pair.token, "without redis", None).await;
    assert_eq!(state_of(&answered), "TASK_STATE_COMPLETED");
    // Liveness is not readiness: the process is alive all along.
    let health = reqwest::get(format!("http://{}/health", pair.a.addr))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    pair.shared.redis.restart();
    let body = readiness_until(&pair.a, |body| body["status"] == "ready").await;
    assert_eq!(body["redis"], "ok", "{body}");

    // Without the store it cannot serve anyone: 503, with Retry-After.
    pair.shared.cut_off_store();
    let body = readiness_becomes(&pair.a, 503).await;
    assert_eq!(body["status"], "not_ready", "{body}");
    assert_eq!(body["store"], "unreachable", "{body}");
    let door = reqwest::get(format!("http://{}/ready", pair.a.addr))
        .await
        .unwrap();
    assert_eq!(door.status(), 503);
    assert_eq!(door.headers()["retry-after"], "1");
}

/// A SubscribeToTask request for a task the (gated) model holds working, sent through `door`.
async fn subscription_to_a_held_task(door: &str, token: &str) -> Value {
    let (status, sent) = post_raw(
        door,
        Some(token),
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hold"}]},
            "configuration": {"returnImmediately": true}}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let task = task_of(&sent)["id"].as_str().unwrap().to_owned();
    json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task}})
}

/// The first stream `door` opens for `token` within `within`, asked again every 50 ms while
/// it is refused.
async fn a_stream_opens(
    door: &str,
    token: &str,
    subscribe: &Value,
    within: Duration,
) -> Result<reqwest::Response, tokio::time::error::Elapsed> {
    let again = async {
        loop {
            let response = open_stream(door, token, subscribe).await;
            if response.status() == 200 {
                return response;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(within, again).await
}

/// Streams, subscriptions and non-blocking sends on, two streams a peer.
fn streams_capped_at_two(p: PolicyEdit) -> PolicyEdit {
    p.set("capabilities.streaming", true)
        .set("capabilities.subscriptions", true)
        .set("capabilities.non_blocking", true)
        .set("limits.streams_per_peer", 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peers_stream_cap_holds_across_both_instances() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let Some(shared) = Shared::start(&model, streams_capped_at_two) else {
        return;
    };
    let token = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let subscribe = subscription_to_a_held_task(&a.door(), &token).await;
    let first = open_stream(&a.door(), &token, &subscribe).await;
    assert_eq!(first.status(), 200);
    let second = open_stream(&b.door(), &token, &subscribe).await;
    assert_eq!(second.status(), 200);
    // Two open, one on each: a third is refused on either.
    for door in [a.door(), b.door()] {
        let third = open_stream(&door, &token, &subscribe).await;
        assert_eq!(third.status(), 429, "{door}");
    }
    // One closes on A: B admits one again.
    drop(first);
    let _third = a_stream_opens(&b.door(), &token, &subscribe, Duration::from_secs(10))
        .await
        .expect("a closed stream's place never came back");
    drop(second);
    model.set(ModelBehaviour::Answer);
    model.release_one();
}

/// Adds peer alice and binds acme's subject agent-a to it, with the real CLI.
fn bind_alice_to_acme(shared: &Shared) {
    shared.peer("alice", "600/min");
    let policy = shared.policy.to_str().unwrap().to_owned();
    let (code, _, stderr) = shared.cli(&[
        "peer",
        "bind",
        "alice",
        "--issuer",
        "acme",
        "--subject",
        "agent-a",
        "--policy",
        &policy,
    ]);
    assert_eq!(code, 0, "{stderr}");
}

/// A binding removed through one instance refuses the identity's still-valid token on the other
/// within a second, although that instance had verified it and keeps verdicts for five.
#[tokio::test]
async fn unbinding_through_one_instance_is_refused_on_the_other_within_a_second() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let key = TestKey::new("acme-1", 51);
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), jwks(&[&key])).unwrap();
    let issuer = "https://idp.acme.example";
    let audience = "https://door.example/a2a/v1";
    let keys_path = keys.path().to_str().unwrap().to_owned();
    let Some(shared) = Shared::start(&model, |policy| {
        policy.set("auth.schemes", ["bearer", "jwt"]).push_table(
            "auth.issuers",
            &[
                ("name", "acme".into()),
                ("issuer", issuer.into()),
                ("audience", audience.into()),
                ("jwks_file", keys_path.as_str().into()),
            ],
        )
    }) else {
        return;
    };
    bind_alice_to_acme(&shared);
    let (a, b) = (shared.instance(), shared.instance());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = key.access_token(issuer, audience, "agent-a", "a2a:tasks:read", now);
    assert_eq!(
        post_raw(&a.door(), Some(&token), get_task_request("none"))
            .await
            .0,
        200
    );
    let (status, body) = admin_post(
        &b,
        "/v1/peers/alice/identities/unbind",
        json!({"issuer": "acme", "subject": "agent-a"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        refused_within_a_second(&a, &token).await,
        "the other instance still took the unbound identity after a second"
    );
}

/// A policy reload through one instance's admin API removes an identity provider on the
/// other within a second: it hears of the reload, reads its own file again, and refuses the
/// provider's still-valid token it had verified a moment before.
#[tokio::test]
async fn a_reload_through_one_instance_removes_a_provider_on_the_other_within_a_second() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let (acme_key, other_key) = (TestKey::new("acme-1", 52), TestKey::new("other-1", 53));
    let files: Vec<tempfile::NamedTempFile> = [&acme_key, &other_key]
        .iter()
        .map(|key| {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), jwks(&[key])).unwrap();
            file
        })
        .collect();
    let audience = "https://door.example/a2a/v1";
    let issuers = [
        ("acme", "https://idp.acme.example"),
        ("other", "https://idp.other.example"),
    ];
    let Some(shared) = Shared::start(&model, |mut policy| {
        policy = policy
            .set("auth.schemes", ["bearer", "jwt"])
            .set("admin.reloaders", ["ada"]);
        for ((name, issuer), file) in issuers.iter().zip(&files) {
            policy = policy.push_table(
                "auth.issuers",
                &[
                    ("name", (*name).into()),
                    ("issuer", (*issuer).into()),
                    ("audience", audience.into()),
                    ("jwks_file", file.path().to_str().unwrap().into()),
                ],
            );
        }
        policy
    }) else {
        return;
    };
    bind_alice_to_acme(&shared);
    let policy_path = shared.policy.to_str().unwrap().to_owned();
    let (code, _, stderr) = shared.cli(&[
        "peer",
        "add",
        "bob",
        "--issuer",
        "other",
        "--subject",
        "agent-b",
        "--policy",
        &policy_path,
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Each instance reads its own file, as on two hosts.
    let b_policy = shared.dir.path().join("b-policy.toml");
    std::fs::copy(&shared.policy, &b_policy).unwrap();
    let (a, b) = (shared.instance(), shared.instance_with(&b_policy));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = acme_key.access_token(issuers[0].1, audience, "agent-a", "a2a:tasks:read", now);
    let other = other_key.access_token(issuers[1].1, audience, "agent-b", "a2a:tasks:read", now);
    for token in [&token, &other] {
        let asked = post_raw(&b.door(), Some(token), get_task_request("none")).await;
        assert_eq!(asked.0, 200);
    }

    // Both files lose acme (configuration management reached both hosts); only instance a is
    // asked to reload, and b follows within a second.
    let mut file: toml_edit::DocumentMut = std::fs::read_to_string(&shared.policy)
        .unwrap()
        .parse()
        .unwrap();
    file["auth"]["issuers"]
        .as_array_of_tables_mut()
        .unwrap()
        .remove(0);
    std::fs::write(&shared.policy, file.to_string()).unwrap();
    std::fs::write(&b_policy, file.to_string()).unwrap();
    let (status, body) = admin_post(&a, "/v1/policy/reload", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["applied"], json!(["auth.issuers"]), "{body}");
    assert!(
        refused_within_a_second(&b, &token).await,
        "the other instance still took the removed provider's token after a second"
    );

    // Now the other provider goes, and b's file arrives later than a's: b, told of a's reload
    // while its file was still the old one, keeps reading it and applies it when it comes.
    file["auth"]["issuers"]
        .as_array_of_tables_mut()
        .unwrap()
        .remove(0);
    file["auth"]["schemes"] = toml_edit::value(toml_edit::Array::from_iter(["bearer"]));
    std::fs::write(&shared.policy, file.to_string()).unwrap();
    let (status, body) = admin_post(&a, "/v1/policy/reload", json!({})).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        post_raw(&b.door(), Some(&other), get_task_request("none"))
            .await
            .0,
        200,
        "b applied a file it did not have yet"
    );
    std::fs::write(&b_policy, file.to_string()).unwrap();
    let since = Instant::now();
    while post_raw(&b.door(), Some(&other), get_task_request("none"))
        .await
        .0
        != 401
    {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the other instance never read its changed file again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn haproxy_checking_ready_keeps_both_instances_without_redis_and_drops_them_without_the_store()
 {
    let Some(mut pair) = pair(ModelBehaviour::Answer, "600/min").await else {
        return;
    };
    let Some(haproxy) = crate::common::haproxy::Haproxy::start(&[pair.a.addr, pair.b.addr]) else {
        return;
    };
    haproxy.until(&["UP", "UP"]).await;
    let door = format!("http://127.0.0.1:{}/a2a/v1", haproxy.port);
    let answered = send_text(&door, &pair.token, "through haproxy", None).await;
    assert_eq!(state_of(&answered), "TASK_STATE_COMPLETED");

    // Redis goes away: both instances see it (degraded), haproxy keeps both, and partners are
    // answered through it, by each instance in turn.
    pair.shared.redis.stop();
    for instance in [&pair.a, &pair.b] {
        readiness_until(instance, |body| body["redis"] == "unreachable").await;
    }
    // Several checks (every 300 ms, down after two failures) have seen the degraded answer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(haproxy.states().await, ["UP", "UP"]);
    for i in 0..6 {
        let answered = send_text(&door, &pair.token, &format!("without redis {i}"), None).await;
        assert_eq!(state_of(&answered), "TASK_STATE_COMPLETED", "{answered}");
    }

    // The store goes away: neither instance can serve, and haproxy takes both out.
    pair.shared.cut_off_store();
    haproxy.until(&["DOWN", "DOWN"]).await;
    let (status, _) = post_raw(&door, Some(&pair.token), "{}".to_owned()).await;
    assert_eq!(status, 503, "haproxy answers for the instances it took out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_that_hangs_is_cut_off_by_the_breaker_and_taken_back_once_it_answers() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    // Every sender is 127.0.0.1: the per-address limit must not be what answers them.
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, |p| p.set("limits.per_ip_per_minute", 10_000_000))
    else {
        return;
    };
    let token = shared.peer("alice", "10000000/min");
    let bob = shared.peer("bob", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let pair = Pair {
        model,
        shared,
        token,
        a,
        b,
    };
    // Load on both instances throughout: four senders each, counting what they get.
    let (stop, answered, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(std::sync::Mutex::new(Vec::<String>::new())),
    );
    let mut senders = Vec::new();
    for door in [pair.a.door(), pair.b.door()] {
        for _ in 0..4 {
            let (door, token) = (door.clone(), pair.token.clone());
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            senders.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let body = send_request("under load", None).to_string();
                    let (status, response) = post_raw(&door, Some(&token), body).await;
                    if status == 200 && state_of(&response) == "TASK_STATE_COMPLETED" {
                        answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.lock().unwrap().push(format!("{status} {response}"));
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = answered.load(Ordering::Relaxed);

    // Stopped, not gone: connections stay open and nothing answers.
    pair.shared.redis.pause();
    for instance in [&pair.a, &pair.b] {
        instance.log_with("the circuit breaker is open");
        let body = readiness_until(instance, |body| body["redis"] == "unreachable").await;
        assert_eq!(body["status"], "degraded", "{body}");
    }
    let during = answered.load(Ordering::Relaxed);
    // A revocation made while Redis hangs still holds on both instances: the store says so,
    // and each instance reads it again within the credential cache time.
    let (status, body) = admin_post(&pair.a, "/v1/peers/bob/revoke", json!({})).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_secs(6)).await;
    for door in [pair.a.door(), pair.b.door()] {
        let body = send_request("revoked", None).to_string();
        let (status, _) = post_raw(&door, Some(&bob), body).await;
        assert_eq!(
            status, 401,
            "a revoked credential was admitted while Redis hung"
        );
    }
    let while_stopped = answered.load(Ordering::Relaxed) - during;

    pair.shared.redis.resume();
    for instance in [&pair.a, &pair.b] {
        instance.log_with("the circuit breaker is closed");
        readiness_until(instance, |body| body["status"] == "ready").await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        sender.await.unwrap();
    }
    let failed = failed.lock().unwrap();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(before > 0, "nothing answered before");
    assert!(
        while_stopped > 100,
        "the door kept answering while Redis hung: {while_stopped}"
    );
    // Each change said once per instance.
    for instance in [&pair.a, &pair.b] {
        let log = instance.log_text();
        assert_eq!(
            log.matches("the circuit breaker is open").count(),
            1,
            "{log}"
        );
        assert_eq!(
            log.matches("the circuit breaker is closed").count(),
            1,
            "{log}"
        );
    }
}

/// A streamed message takes its place among the peer's streams before it asks for its
/// context's lock: one refused at the stream cap (429) asks for no lock at all, and one under
/// the cap asks for it only after its place.
#[tokio::test]
async fn a_streamed_message_asks_for_its_lock_after_its_stream_place() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let Some(shared) = Shared::start(&model, |p| {
        p.set("capabilities.streaming", true)
            .set("capabilities.subscriptions", true)
            .set("capabilities.non_blocking", true)
            .set("limits.streams_per_peer", 1)
    }) else {
        return;
    };
    let token = shared.peer("alice", "600/min");
    let a = shared.instance();
    let subscribe = subscription_to_a_held_task(&a.door(), &token).await;
    let holding = open_stream(&a.door(), &token, &subscribe).await;
    assert_eq!(holding.status(), 200);
    let streamed = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage", "params": {
            "message": {"role": "ROLE_USER", "messageId": uuid::Uuid::new_v4().to_string(),
                "parts": [{"text": text}]}}})
    };

    // At the cap: refused, and no lock asked for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let monitor = shared.redis.monitor();
    let refused = open_stream(&a.door(), &token, &streamed("one too many")).await;
    assert_eq!(refused.status(), 429);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = monitor.stop();
    let sent = client_commands(&lines);
    assert!(
        sent.iter().any(|l| l.contains("peergate:streams:")),
        "the stream cap was asked: {sent:#?}"
    );
    assert!(
        !sent.iter().any(|l| l.contains("peergate:turn:")),
        "a message refused at the stream cap asked for a lock: {sent:#?}"
    );

    // Under the cap: the place first, then the lock.
    drop(holding);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let monitor = shared.redis.monitor();
    let opened = open_stream(&a.door(), &token, &streamed("under the cap")).await;
    assert_eq!(opened.status(), 200);
    model.wait_for_arrival().await;
    let lines = monitor.stop();
    let sent = client_commands(&lines);
    let first = |key: &str| sent.iter().position(|l| l.contains(key));
    let (place, lock) = (first("peergate:streams:"), first("peergate:turn:"));
    assert!(
        matches!((place, lock), (Some(place), Some(lock)) if place < lock),
        "the place ({place:?}) before the lock ({lock:?}): {sent:#?}"
    );
    model.release_one();
    model.release_one();
}

/// A killed instance's stream places stop counting when its lease lapses (two seconds here),
/// not after a fixed half-minute: the peer may open its streams on the survivor.
#[tokio::test]
async fn a_killed_instances_stream_places_lapse_with_its_lease() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let Some(shared) = Shared::start(&model, streams_capped_at_two) else {
        return;
    };
    let token = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let subscribe = subscription_to_a_held_task(&a.door(), &token).await;
    let held: Vec<_> = [
        open_stream(&a.door(), &token, &subscribe).await,
        open_stream(&a.door(), &token, &subscribe).await,
    ]
    .into();
    assert!(held.iter().all(|stream| stream.status() == 200));
    assert_eq!(
        open_stream(&b.door(), &token, &subscribe).await.status(),
        429
    );
    a.kill();
    let _admitted = a_stream_opens(&b.door(), &token, &subscribe, Duration::from_secs(15))
        .await
        .expect("the killed instance's places still count");
    drop(held);
    model.set(ModelBehaviour::Answer);
    model.release_one();
}

/// The Cedar policies change on every host; one instance is asked to reload, and the other,
/// whose policy file did not change, reads its Cedar files again and holds to the new set
/// within a second.
#[tokio::test(flavor = "multi_thread")]
async fn authorization_policies_reloaded_through_one_instance_hold_on_the_other_within_a_second() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let cedar = tempfile::NamedTempFile::new().unwrap();
    let everyone = "@id(\"everyone\") permit (principal, action, resource);\n";
    std::fs::write(cedar.path(), everyone).unwrap();
    let path = cedar.path().to_str().unwrap().to_owned();
    let Some(shared) = Shared::start(&model, |policy| {
        policy
            .set("admin.reloaders", ["ada"])
            .insert("authorization.policies", path.as_str())
    }) else {
        return;
    };
    let alice = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let status = |instance: &ServeProcess| {
        let door = instance.door();
        let alice = alice.clone();
        async move {
            post_raw(&door, Some(&alice), get_task_request("none"))
                .await
                .0
        }
    };
    assert_eq!(status(&b).await, 200);

    let reads_nothing = format!(
        "{everyone}@id(\"no-reads\") forbid (principal is Peergate::Peer, action == Peergate::Action::\"GetTask\", resource);\n"
    );
    std::fs::write(cedar.path(), reads_nothing).unwrap();
    let (code, body) = admin_post(&a, "/v1/policy/reload", json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["applied"], json!(["authorization.policies"]), "{body}");
    assert_eq!(status(&a).await, 403);
    let since = Instant::now();
    let mut held = false;
    while since.elapsed() < Duration::from_secs(1) && !held {
        held = status(&b).await == 403;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        held,
        "the other instance still answered GetTask after a second"
    );
}

/// The receipt in a SendMessage answer.
fn receipt_in(response: &Value) -> String {
    task_of(response)["metadata"][peergate::jose::receipt::EXTENSION]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt in {response}"))
        .to_owned()
}

/// `receipt`'s proof from the log that `instance` serves, once appended.
async fn logged_proof(instance: &ServeProcess, receipt: &str) -> peergate::tlog::note::TlogProof {
    let claims = jws_claims(receipt);
    let url = instance.door().replace(
        "/a2a/v1",
        &format!("/a2a-receipts/proof/{}", claims["jti"].as_str().unwrap()),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = reqwest::get(&url).await.unwrap();
        if response.status() == 200 {
            let text = response.text().await.unwrap();
            return peergate::tlog::note::TlogProof::parse(&text).unwrap();
        }
        assert!(Instant::now() < deadline, "no proof within 30 s from {url}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Receipts on every finished task, signed with a receipt key and logged under a log key both
/// generated in `keys`, as a shared store requires.
fn logged_receipts(keys: &Path) -> impl FnOnce(PolicyEdit) -> PolicyEdit {
    let (receipt_key, log_key) = (
        generated_key(keys, "EdDSA", "receipt-1"),
        generated_key(keys, "EdDSA", "log-1"),
    );
    move |p| {
        p.set("receipts.mode", "always")
            .insert("receipts.log_key_file", log_key.as_str())
            .push_table(
                "signing.receipt_keys",
                &[
                    ("kid", "receipt-1".into()),
                    ("alg", "EdDSA".into()),
                    ("private_key_file", receipt_key.as_str().into()),
                ],
            )
    }
}

#[tokio::test]
async fn both_instances_append_their_receipts_to_one_dense_log_and_the_survivor_goes_on_alone() {
    use peergate::tlog::note::{Checkpoint, NoteVerifier};
    use sha2::{Digest, Sha256};
    let keys = tempfile::tempdir().unwrap();
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let Some(shared) = Shared::start(&model, logged_receipts(keys.path())) else {
        return;
    };
    let token = shared.peer("alice", "6000/min");
    let (a, b) = (shared.instance(), shared.instance());
    // Both cards name the one log key.
    let vkey = |card: &Value| {
        let extension = card["capabilities"]["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["uri"] == peergate::jose::receipt::EXTENSION)
            .unwrap()
            .clone();
        extension["params"]["log"]["vkey"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let vkey_a = vkey(&a.card().await);
    assert_eq!(vkey_a, vkey(&b.card().await));
    let log = NoteVerifier::parse(&vkey_a).unwrap();
    // Receipts issued at once through both instances.
    let mut calls = Vec::new();
    for i in 0..24 {
        let (door, token) = (if i % 2 == 0 { a.door() } else { b.door() }, token.clone());
        calls.push(tokio::spawn(async move {
            rpc(&door, &token, send_request(&format!("q{i}"), None)).await
        }));
    }
    let mut receipts = Vec::new();
    for call in calls {
        receipts.push(receipt_in(&call.await.unwrap()));
    }
    let mut indices = Vec::new();
    for (i, receipt) in receipts.iter().enumerate() {
        let proof = logged_proof(if i % 2 == 0 { &b } else { &a }, receipt).await;
        let checkpoint = Checkpoint::open(&proof.checkpoint, &log).unwrap();
        let leaf = peergate::tlog::leaf_hash(&Sha256::digest(receipt.as_bytes()));
        peergate::tlog::proof::verify_inclusion(
            proof.index,
            checkpoint.size,
            &leaf,
            &proof.hashes,
            &checkpoint.root,
        )
        .unwrap();
        indices.push(proof.index);
    }
    indices.sort_unstable();
    assert_eq!(
        indices,
        (0..24).collect::<Vec<u64>>(),
        "one dense log: no index twice, none skipped"
    );
    // One instance dies; the survivor integrates alone.
    a.kill();
    let receipt = receipt_in(&rpc(&b.door(), &token, send_request("after", None)).await);
    assert_eq!(logged_proof(&b, &receipt).await.index, 24);
    // The operator's audit agrees with every checkpoint either instance signed.
    let (code, out, err) =
        shared.cli(&["log", "audit", "--policy", shared.policy.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("answer log: consistent (25 receipts"), "{out}");
}

#[tokio::test]
async fn a_killed_instances_task_failed_by_the_survivor_is_sealed_from_what_its_working_state_kept()
{
    let keys = tempfile::tempdir().unwrap();
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let Some(shared) = Shared::start(&model, logged_receipts(keys.path())) else {
        return;
    };
    let token = shared.peer("alice", "600/min");
    let (a, b) = (shared.instance(), shared.instance());
    let request = send_request("never answered", None);
    let (door_a, token_a, sent) = (a.door(), token.clone(), request.to_string());
    let _orphaned = tokio::spawn(async move { post_raw(&door_a, Some(&token_a), sent).await });
    model.wait_for_arrival().await;
    let store = shared.store().await;
    let [(orphan_id, _)]: [(String, Option<String>); 1] = working(&store).await.try_into().unwrap();
    a.kill();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !working(&store).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the survivor never failed the task"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.close().await;
    let task = get_task(&b.door(), &token, &orphan_id, None).await["result"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    // Sealed by the survivor, from what the killed instance kept with the working state.
    let receipt = task["metadata"][peergate::jose::receipt::EXTENSION]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt in {task}"));
    let claims = jws_claims(receipt);
    let a2a = &claims["a2a"];
    assert_eq!(
        (&a2a["state"], &a2a["method"], &a2a["binding"], &a2a["task"]),
        (
            &json!("TASK_STATE_FAILED"),
            &json!("SendMessage"),
            &json!("JSONRPC"),
            &json!(orphan_id)
        ),
        "{claims}"
    );
    assert_eq!(a2a["message"], request["params"]["message"]["messageId"]);
    assert_eq!(claims["cred"]["scheme"], "bearer", "{claims}");
    assert!(claims["dig"].get("evt").is_none(), "{claims}");
    // It verifies like any other: the card, the signature, the request as sent, the task as read.
    let (code, out, err) = verify_served_receipt(&b.base(), (&task, &request), &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("request: digest matches") && out.contains("answer: digest matches"),
        "{out}"
    );
    // And it is in the log.
    logged_proof(&b, receipt).await;
}
