//! The shared-state engines for several instances, against a real Redis server the test starts
//! (skipped loudly without the package, failing under CI).

mod common;

use common::redis::RedisServer;
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
    use common::*;
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
    let running = peergate::http::server::start(options).await.unwrap();
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
    let (code, _, stderr) = common::cli(&[
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
        stderr.contains(
            "--redis / PEERGATE_REDIS_URL: the Redis URL is not a redis:// or rediss:// URL"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
}
