//! Open streams per peer across instances, in Redis.
//!
//! Each peer's open streams are one sorted set: a member per stream, scored with when its
//! place lapses (on Redis's clock). One atomic script drops lapsed places, and takes a place
//! only if fewer than the cap are left. A stream renews its place every third of the time a
//! place lasts (the instances' lease, `cluster.lease_seconds`) while it is open and removes it
//! when it closes, so a place held by an instance that died lapses with its lease instead of
//! counting forever.
//!
//! While Redis cannot be reached, each instance counts its own streams against the full cap
//! (so a peer may hold up to the cap once per instance), as the rate limits do.

use super::{Degradation, Redis};
use crate::shared::streams::{LocalOpenStreams, OpenStreams, StreamPermit};
use crate::store::PeerId;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

/// KEYS[1]: the peer's set. ARGV: the stream's member, the cap, how long a place lasts (ms).
/// Returns 1 when a place was taken.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
";

/// KEYS[1]: the peer's set. ARGV: the stream's member, how long a place lasts (ms). The place
/// is put back even when it lapsed (Redis restarted, or was away longer than a place lasts):
/// the stream is still open, and must count.
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
";

/// Open streams counted in Redis, shared by every instance on the same Redis.
#[derive(Debug, Clone)]
pub struct RedisOpenStreams {
    connection: ConnectionManager,
    /// How long a place lasts without being renewed: the instances' lease.
    lasts: Duration,
    take: Arc<redis::Script>,
    renew: Arc<redis::Script>,
    fallback: LocalOpenStreams,
    health: Degradation,
}

impl RedisOpenStreams {
    /// Counts in `redis`, each place lasting `lasts` unless renewed (the instances' lease, so
    /// a dead instance's streams stop counting when its lease lapses).
    pub fn new(redis: &Redis, lasts: Duration) -> Self {
        Self {
            connection: redis.connection(),
            lasts,
            take: Arc::new(redis::Script::new(TAKE)),
            renew: Arc::new(redis::Script::new(RENEW)),
            fallback: LocalOpenStreams::default(),
            health: redis.degradation("open stream counts"),
        }
    }
}

fn key(peer_id: &PeerId) -> String {
    format!("peergate:streams:{peer_id}")
}

impl RedisOpenStreams {
    fn lasts_ms(&self) -> u64 {
        u64::try_from(self.lasts.as_millis()).unwrap_or(u64::MAX)
    }
}

#[async_trait]
impl OpenStreams for RedisOpenStreams {
    async fn open(&self, peer_id: &PeerId, cap: u32) -> Option<StreamPermit> {
        if self.health.bypassed() {
            return self.fallback.open_now(peer_id, cap);
        }
        let member = uuid::Uuid::new_v4().simple().to_string();
        let mut connection = self.connection.clone();
        let taken: Result<i64, _> = self
            .take
            .key(key(peer_id))
            .arg(&member)
            .arg(cap)
            .arg(self.lasts_ms())
            .invoke_async(&mut connection)
            .await;
        match taken {
            Ok(1) => {
                self.health.answered();
                Some(StreamPermit::new(RedisPlace::hold(
                    self.clone(),
                    key(peer_id),
                    member,
                )))
            }
            Ok(_) => {
                self.health.answered();
                None
            }
            Err(error) => {
                self.health.failed(&error);
                self.fallback.open_now(peer_id, cap)
            }
        }
    }
}

/// A place in Redis: renewed while held, removed when dropped.
struct RedisPlace {
    streams: RedisOpenStreams,
    key: String,
    member: String,
    renewing: tokio::task::JoinHandle<()>,
}

impl RedisPlace {
    fn hold(streams: RedisOpenStreams, key: String, member: String) -> Self {
        let renewing = tokio::spawn({
            let (streams, key, member) = (streams.clone(), key.clone(), member.clone());
            async move {
                let mut every = tokio::time::interval(streams.lasts / 3);
                every.tick().await;
                loop {
                    every.tick().await;
                    let mut connection = streams.connection.clone();
                    let renewed: Result<i64, _> = streams
                        .renew
                        .key(&key)
                        .arg(&member)
                        .arg(streams.lasts_ms())
                        .invoke_async(&mut connection)
                        .await;
                    if let Err(error) = renewed {
                        streams.health.failed(&error);
                    }
                }
            }
        });
        Self {
            streams,
            key,
            member,
            renewing,
        }
    }
}

impl Drop for RedisPlace {
    fn drop(&mut self) {
        self.renewing.abort();
        let mut connection = self.streams.connection.clone();
        let (key, member) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.member),
        );
        // Given back without waiting; a removal that fails lapses with the place.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _: Result<i64, _> = redis::cmd("ZREM")
                    .arg(key)
                    .arg(member)
                    .query_async(&mut connection)
                    .await;
            });
        }
    }
}
