//! The shared-state engines for several instances, against a real Redis server the test starts
//! (skipped loudly without the package, failing under CI).

use crate::common::redis::RedisServer;
use peergate::clock::SystemClock;
use peergate::layers::limit::{Decision, Quota};
use peergate::shared::rate_limit::RateLimiter;
use peergate::shared::redis::Redis;
use peergate::shared::redis::limit::RedisLimiter;
use std::sync::Arc;
use std::time::Duration;

async fn limiter(server: &RedisServer) -> RedisLimiter<String> {
    let redis = Redis::connect(&server.url()).await.expect("Redis answers");
    RedisLimiter::new(&redis, "test", 1_000, Arc::new(SystemClock))
}

#[tokio::test]
async fn a_quota_holds_across_two_instances_sharing_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (limiter(&server).await, limiter(&server).await);
    let quota = Quota::per_minute(5);
    let key = "peer_1".to_owned();
    // Peeking spends nothing.
    for _ in 0..3 {
        assert!(a.peek(&key, quota).await.is_allowed());
    }
    let mut admitted = 0;
    for i in 0..20 {
        let instance = if i % 2 == 0 { &a } else { &b };
        if instance.check(&key, quota).await.is_allowed() {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 5,
        "quota + burst across both instances, not per instance"
    );
    let Decision::Denied { retry_after } = b.check(&key, quota).await else {
        panic!("the budget is spent on both");
    };
    assert!(retry_after > Duration::from_secs(1) && retry_after <= Duration::from_secs(12));
    // Another key has its own budget.
    assert!(a.check(&"peer_2".to_owned(), quota).await.is_allowed());
    assert_eq!(a.local_answers() + b.local_answers(), 0);
}

#[tokio::test]
async fn while_redis_is_away_each_instance_limits_locally_and_shares_again_after() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let instance = limiter(&server).await;
    let quota = Quota::per_minute(3);
    let key = "peer_1".to_owned();
    server.stop();
    // The door keeps answering within the quota, now counted by this instance alone.
    let mut admitted = 0;
    for _ in 0..5 {
        if instance.check(&key, quota).await.is_allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "the full quota, locally");
    assert_eq!(instance.local_answers(), 5);
    server.restart();
    // Once Redis answers again, budgets are Redis's (a fresh server: this key is rested there).
    let mut shared = false;
    for _ in 0..100 {
        let before = instance.local_answers();
        let decision = instance.check(&"peer_2".to_owned(), quota).await;
        if instance.local_answers() == before {
            assert!(decision.is_allowed());
            shared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(shared, "Redis was not used again after it came back");
}

#[tokio::test]
async fn a_gateway_keeps_its_peer_limits_in_redis_and_answers_while_redis_is_away() {
    use crate::common::*;
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = cli_on(data.path(), &["peer", "add", "alice", "--rate", "3/min"]);
    assert_eq!(code, 0, "{stderr}");
    let token = stdout.trim().to_owned();
    let mut options = gateway_options(
        PolicyEdit::default().policy(),
        data.path(),
        Arc::new(SystemClock),
    );
    options.redis_url = Some(server.url());
    let running = peergate::app::start(options).await.unwrap();
    let door = format!("http://{}/a2a/v1", running.local_addr);
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
        "params": {"id": "no-such-task"}})
    .to_string();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(post_raw(&door, Some(&token), body.clone()).await.0);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "the peer's quota, counted in Redis"
    );
    // Redis holds the budget: a fresh Redis is a fresh budget.
    server.restart();
    let mut answered = false;
    for _ in 0..100 {
        if post_raw(&door, Some(&token), body.clone()).await.0 == 200 {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered, "the budget lived in Redis, not in the gateway");
    // Redis away: the door keeps answering a peer within its quota.
    server.stop();
    assert_eq!(post_raw(&door, Some(&token), body.clone()).await.0, 200);
    running.shutdown().await;
}

#[tokio::test]
async fn the_failed_attempt_budget_is_shared_and_a_refund_gives_one_back() {
    use peergate::layers::auth::FailedAttempts;
    use std::net::IpAddr;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let quota = Quota::per_minute(3);
    let instance = || async {
        let redis = Redis::connect(&server.url()).await.unwrap();
        let limiter: RedisLimiter<IpAddr> =
            RedisLimiter::new(&redis, "test-failed", 1_000, Arc::new(SystemClock));
        FailedAttempts::with_limiter(quota, Arc::new(limiter))
    };
    let (a, b) = (instance().await, instance().await);
    let client: IpAddr = "192.0.2.7".parse().unwrap();
    a.spend(client).await.unwrap();
    b.spend(client).await.unwrap();
    // A credential that turned out valid gives its attempt back, for every instance.
    a.refund(client);
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.spend(client).await.unwrap();
    a.spend(client).await.unwrap();
    let refused = b.spend(client).await.unwrap_err();
    assert_eq!(refused.limit.name(), "failed_auth");
}

#[test]
fn a_bad_redis_url_stops_start_up_without_echoing_it() {
    let data = tempfile::tempdir().unwrap();
    let (code, _, stderr) = crate::common::cli(&[
        "serve",
        "--data",
        data.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--redis",
        "http://alice:s3cret-pw@cache.example",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr
            .contains("--redis / PEERGATE_REDIS_URL: the Redis URL is not a redis://host:port URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
}

/// Waits up to `within` for `done`, polling.
async fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// Two instances' ends of the bus on `server`, both subscribed.
async fn two_buses(
    server: &RedisServer,
) -> (
    peergate::shared::redis::bus::RedisBus,
    peergate::shared::redis::bus::RedisBus,
) {
    use peergate::shared::redis::bus::RedisBus;
    let redis = Redis::connect(&server.url()).await.unwrap();
    let (a, b) = (
        RedisBus::start(&redis, "ins_a"),
        RedisBus::start(&redis, "ins_b"),
    );
    assert!(eventually(Duration::from_secs(5), || a.subscribed() && b.subscribed()).await);
    (a, b)
}

#[derive(Default)]
struct Heard(std::sync::Mutex<Vec<peergate::shared::changes::Change>>);

impl peergate::shared::changes::ChangeListener for Heard {
    fn changed(&self, change: &peergate::shared::changes::Change) {
        self.0.lock().unwrap().push(change.clone());
    }
}

#[tokio::test]
async fn a_change_on_one_instance_reaches_the_other_and_a_lost_subscription_forgets_everything() {
    use peergate::shared::changes::Change;
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (a, b) = two_buses(&server).await;
    let (heard_a, heard_b) = (Arc::new(Heard::default()), Arc::new(Heard::default()));
    a.changes().subscribe(heard_a.clone());
    b.changes().subscribe(heard_b.clone());
    a.changes().publish(Change::Peer("peer_1".into()));
    // The publishing instance hears it at once, in the publishing thread.
    assert_eq!(*heard_a.0.lock().unwrap(), [Change::Peer("peer_1".into())]);
    assert!(
        eventually(Duration::from_secs(1), || !heard_b
            .0
            .lock()
            .unwrap()
            .is_empty())
        .await,
        "the other instance heard the change within a second"
    );
    assert_eq!(*heard_b.0.lock().unwrap(), [Change::Peer("peer_1".into())]);
    // An instance does not hear its own change twice.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(heard_a.0.lock().unwrap().len(), 1);
    // Redis away and back: the subscription comes back and everything cached is forgotten.
    server.stop();
    assert!(eventually(Duration::from_secs(5), || !b.subscribed()).await);
    server.restart();
    assert!(
        eventually(Duration::from_secs(10), || {
            heard_b.0.lock().unwrap().last() == Some(&Change::Everyone)
        })
        .await,
        "{:?}",
        heard_b.0.lock().unwrap()
    );
}

#[tokio::test]
async fn a_task_event_stored_on_one_instance_is_heard_by_a_subscriber_on_the_other() {
    use peergate::shared::events::TaskEvent;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = two_buses(&server).await;
    let (events_a, events_b) = (a.events(), b.events());
    // Nobody subscribes anywhere: task contents stay off Redis.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!events_a.listening(), "no subscriber on any instance");
    let mut subscription = events_b.subscribe(&"alice".into(), "t1");
    assert!(
        eventually(Duration::from_secs(2), || events_a.listening()).await,
        "the other instance heard that someone listens"
    );
    let task_json =
        r#"{"id":"t1","status":{"message":{"parts":[{"text":"a \"quoted\" reply\n"}]}}}"#;
    for (peer, task) in [("bob", "t1"), ("alice", "t2"), ("alice", "t1")] {
        events_a.publish(TaskEvent {
            peer_id: peer.into(),
            task_id: task.into(),
            state: peergate::protocol::types::TaskState::from_name("TASK_STATE_COMPLETED").unwrap(),
            task_json: task_json.into(),
        });
    }
    let event = tokio::time::timeout(Duration::from_secs(2), subscription.next())
        .await
        .expect("heard within two seconds")
        .unwrap();
    assert_eq!((&*event.peer_id, &*event.task_id), ("alice", "t1"));
    assert_eq!(event.state.as_str(), "TASK_STATE_COMPLETED");
    assert_eq!(
        &*event.task_json, task_json,
        "the task as stored, unchanged"
    );
    // Every final state crosses, a canceled task's too.
    events_a.publish(TaskEvent {
        peer_id: "alice".into(),
        task_id: "t1".into(),
        state: peergate::protocol::types::TaskState::from_name("TASK_STATE_CANCELED").unwrap(),
        task_json: task_json.into(),
    });
    let canceled = tokio::time::timeout(Duration::from_secs(2), subscription.next())
        .await
        .expect("heard within two seconds")
        .unwrap();
    assert_eq!(canceled.state.as_str(), "TASK_STATE_CANCELED");
    // And the states of a task waiting for the peer.
    for state in ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"] {
        events_a.publish(TaskEvent {
            peer_id: "alice".into(),
            task_id: "t1".into(),
            state: peergate::protocol::types::TaskState::from_name(state).unwrap(),
            task_json: task_json.into(),
        });
        let heard = tokio::time::timeout(Duration::from_secs(2), subscription.next())
            .await
            .expect("heard within two seconds")
            .unwrap();
        assert_eq!(heard.state.as_str(), state);
    }
}

#[tokio::test]
async fn a_context_takes_one_turn_at_a_time_across_instances_and_redis_away_orders_locally() {
    use peergate::shared::redis::turns::RedisTurnLocks;
    use peergate::shared::turns::TurnLocks;
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let redis = Redis::connect(&server.url()).await.unwrap();
    let hold = Duration::from_secs(30);
    let (a, b) = (
        RedisTurnLocks::new(&redis, hold),
        RedisTurnLocks::new(&redis, hold),
    );
    let wait = Duration::from_secs(2);
    let turn = a
        .begin_turn(&"alice".into(), "ctx", wait)
        .await
        .expect("free");
    assert!(
        b.begin_turn(&"alice".into(), "ctx", Duration::from_millis(200))
            .await
            .is_none(),
        "held on the other instance"
    );
    assert!(
        b.begin_turn(&"bob".into(), "ctx", wait).await.is_some(),
        "contexts are per peer"
    );
    let waiter =
        tokio::spawn(async move { b.begin_turn(&"alice".into(), "ctx", wait).await.is_some() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(turn);
    assert!(
        waiter.await.unwrap(),
        "the other instance's turn begins when this one ends"
    );
    // Redis away: turns are still given, ordered within this instance.
    server.stop();
    let first = a
        .begin_turn(&"carol".into(), "ctx", wait)
        .await
        .expect("given locally");
    assert!(
        a.begin_turn(&"carol".into(), "ctx", Duration::from_millis(100))
            .await
            .is_none()
    );
    drop(first);
    assert!(a.local_answers() >= 1);
}

#[tokio::test]
async fn spending_on_one_instance_is_counted_on_the_other() {
    use peergate::shared::redis::spend::RedisSpend;
    use peergate::shared::spend::SharedSpend;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = Redis::connect(&server.url()).await.unwrap();
    let (a, b) = (RedisSpend::new(&redis), RedisSpend::new(&redis));
    let day = peergate::clock::UtcDay::parse("2026-11-30").unwrap();
    let month = day.month();
    assert_eq!(
        a.spent("adm_1", day, month).await,
        Ok(None),
        "not counted yet"
    );
    // Adding to counters that do not exist starts nothing from zero.
    a.add(&["adm_1"], day, month, 5);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(b.spent("adm_1", day, month).await, Ok(None));
    // Seeded from the store once; a second seed does not overwrite.
    a.seed("adm_1", day, month, (100, 1_000)).await;
    b.seed("adm_1", day, month, (0, 0)).await;
    a.add(&["adm_1"], day, month, 7);
    b.add(&["adm_1"], day, month, 3);
    let mut seen = None;
    for _ in 0..100 {
        seen = b.spent("adm_1", day, month).await.unwrap();
        if seen == Some((110, 1_010)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        seen,
        Some((110, 1_010)),
        "both instances' spending, on the seed"
    );
}
