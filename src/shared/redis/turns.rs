//! One turn at a time per context across instances: a lock per (peer, context) in Redis.
//!
//! A waiter first takes the context's turn in this process (so waiters on one instance queue
//! in memory, not on Redis), then the Redis lock: `SET NX PX` with a random token, retried with
//! a growing pause until the wait runs out. The lock is released by a script that deletes it
//! only while it still holds this turn's token, so a turn that outlived its lock never frees
//! the next one's. The lock expires by itself after `hold` (longer than any turn: the backend
//! timeout bounds it), so a context locked by an instance that died is free again after that.
//!
//! While Redis is away, turns are ordered within each instance only.

use super::{Degradation, Redis};
use crate::shared::turns::{LocalTurnLocks, Turn, TurnLocks};
use crate::store::PeerId;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

/// Deletes KEYS[1] only while it holds ARGV[1].
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Turn locks shared by every instance on one Redis.
pub struct RedisTurnLocks {
    connection: ConnectionManager,
    local: LocalTurnLocks,
    release: Arc<redis::Script>,
    hold: Duration,
    health: Degradation,
}

impl std::fmt::Debug for RedisTurnLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTurnLocks")
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

impl RedisTurnLocks {
    /// Locks in `redis` that expire after `hold` (longer than any turn).
    pub fn new(redis: &Redis, hold: Duration) -> Self {
        Self {
            connection: redis.connection(),
            local: LocalTurnLocks::default(),
            release: Arc::new(redis::Script::new(RELEASE)),
            hold,
            health: redis.degradation("turn order"),
        }
    }

    /// Turns given without Redis.
    pub fn local_answers(&self) -> u64 {
        self.health.local_answers()
    }
}

/// The Redis side of a turn, from before its `SET` is sent until released: dropped at any
/// point (taken, refused, timed out, or the waiting future cancelled mid-request), it deletes
/// the lock if it still holds this turn's token, so a `SET` that landed without its answer
/// never blocks the context until the lock expires. The in-process turn it carries ends only
/// after that delete, so the next waiter here does not find the lock still set.
struct RedisTurn {
    local: Option<Turn>,
    key: String,
    token: String,
    connection: ConnectionManager,
    release: Arc<redis::Script>,
}

impl Drop for RedisTurn {
    fn drop(&mut self) {
        let (key, token) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.token),
        );
        let (mut connection, release) = (self.connection.clone(), self.release.clone());
        let local = self.local.take();
        if key.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Unreleased, the lock still expires after its hold time.
                let _: Result<i64, _> = release
                    .key(key)
                    .arg(token)
                    .invoke_async(&mut connection)
                    .await;
                drop(local);
            });
        }
    }
}

#[async_trait]
impl TurnLocks for RedisTurnLocks {
    async fn begin_turn(&self, peer_id: &PeerId, context_id: &str, wait: Duration) -> Option<Turn> {
        let deadline = tokio::time::Instant::now() + wait;
        let local = self.local.begin_turn(peer_id, context_id, wait).await?;
        let mut turn = RedisTurn {
            local: Some(local),
            key: format!("peergate:turn:{peer_id}:{context_id}"),
            token: uuid::Uuid::new_v4().simple().to_string(),
            connection: self.connection.clone(),
            release: self.release.clone(),
        };
        let hold_ms = u64::try_from(self.hold.as_millis()).unwrap_or(u64::MAX);
        let mut pause = Duration::from_millis(5);
        loop {
            if self.health.bypassed() {
                // Ordered here only, without waiting on a Redis that does not answer; nothing
                // was set there, so nothing is released.
                turn.key.clear();
                return turn.local.take();
            }
            let taken: Result<Option<String>, _> = redis::cmd("SET")
                .arg(&turn.key)
                .arg(&turn.token)
                .arg("NX")
                .arg("PX")
                .arg(hold_ms)
                .query_async(&mut turn.connection)
                .await;
            match taken {
                Ok(Some(_)) => {
                    self.health.answered();
                    return Some(Turn::new(turn));
                }
                Ok(None) => {}
                Err(error) => {
                    self.health.failed(&error);
                    // Ordered here only; `turn` releases whatever the SET may have taken.
                    let local = turn.local.take();
                    return local;
                }
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return None;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}
