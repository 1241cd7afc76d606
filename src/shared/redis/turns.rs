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
use crate::shared::admission::{LockAnswer, LockAsk};
use crate::shared::turns::{
    LocalTurnLocks, LockSaid, PreparedTurn, SpendingAfter, Turn, TurnLocks,
};
use crate::store::PeerId;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

/// Adds ARGV[2] to each of KEYS[2..] that exists (the turn's spending, see
/// [`super::spend`]), then deletes KEYS[1] only while it holds ARGV[1]: what a turn sends after
/// its answer, in one call.
const RELEASE: &str = r"
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBY', KEYS[i], ARGV[2]) end
end
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
    /// The budget counters a turn's spending is added to with its release.
    spend: Option<Arc<super::spend::RedisSpend>>,
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
            spend: None,
        }
    }

    /// Sends each turn's spending to `spend`'s counters with the turn's release, in one call.
    pub fn with_spend(mut self, spend: Arc<super::spend::RedisSpend>) -> Self {
        self.spend = Some(spend);
        self
    }

    fn key(peer_id: &PeerId, context_id: &str) -> String {
        format!("peergate:turn:{peer_id}:{context_id}")
    }

    fn shared_turn(&self, local: Turn, key: String, token: String) -> RedisTurn {
        RedisTurn {
            local: Some(local),
            key,
            token,
            connection: self.connection.clone(),
            release: self.release.clone(),
            spending: SpendingAfter::default(),
            spend: self.spend.clone(),
            may_hold: None,
            health: self.health.clone(),
        }
    }

    /// The turn, once its shared lock is taken: asked until `deadline`.
    async fn take_shared(
        &self,
        mut turn: RedisTurn,
        deadline: tokio::time::Instant,
    ) -> Option<Turn> {
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
                    return Some(turn.into_turn());
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
    /// What the turn spent, added to the counters in the release's call.
    spending: SpendingAfter,
    spend: Option<Arc<super::spend::RedisSpend>>,
    /// Prepared for an admission call: whether that call may have taken the lock (no release
    /// is sent when it did not).
    may_hold: Option<Arc<std::sync::atomic::AtomicBool>>,
    health: Degradation,
}

impl RedisTurn {
    /// The held turn, its spending sent with its release.
    fn into_turn(self) -> Turn {
        let spending = self.spending.clone();
        Turn::sending_spending(self, spending)
    }
}

impl Drop for RedisTurn {
    fn drop(&mut self) {
        let (key, token) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.token),
        );
        let (mut connection, release) = (self.connection.clone(), self.release.clone());
        let local = self.local.take();
        let spent = self.spending.take();
        let spend = self.spend.clone();
        let health = self.health.clone();
        let taken = self
            .may_hold
            .as_ref()
            .is_none_or(|may| may.load(std::sync::atomic::Ordering::Relaxed));
        if key.is_empty() || !taken {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let counters: Vec<String> = spent
                    .as_ref()
                    .map(|spent| {
                        spent
                            .spenders
                            .iter()
                            .flat_map(|s| {
                                [
                                    super::spend::key(s, spent.day),
                                    super::spend::key(s, spent.day.month()),
                                ]
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut invocation = release.key(key);
                for counter in &counters {
                    invocation.key(counter);
                }
                let tokens = spent.as_ref().map_or(0, |spent| spent.tokens);
                // Unreleased, the lock still expires after its hold time.
                let released: Result<i64, _> = invocation
                    .arg(token)
                    .arg(tokens)
                    .invoke_async(&mut connection)
                    .await;
                if let Err(error) = released {
                    // A release that times out counts toward the breaker like any call.
                    health.failed(&error);
                    if let Some(spend) = spend {
                        spend.left_short(counters);
                    }
                }
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
        let token = uuid::Uuid::new_v4().simple().to_string();
        let turn = self.shared_turn(local, Self::key(peer_id, context_id), token);
        self.take_shared(turn, deadline).await
    }

    fn prepare_turn(&self, peer_id: &PeerId, context_id: &str) -> PreparedTurn {
        // Held here by another message: the shared lock is asked once this process's turn
        // comes, after the admission.
        let Some(local) = self.local.try_begin_turn(peer_id, context_id) else {
            return PreparedTurn::default();
        };
        let ask = LockAsk {
            key: Self::key(peer_id, context_id),
            token: uuid::Uuid::new_v4().simple().to_string(),
            hold: self.hold,
        };
        // Dropped unused, it releases the lock if the admission call took it.
        let mut turn = self.shared_turn(local, ask.key.clone(), ask.token.clone());
        let may_hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
        turn.may_hold = Some(may_hold.clone());
        PreparedTurn {
            ask: Some(ask),
            held: Some(Box::new(turn)),
            may_hold,
        }
    }

    async fn begin_prepared_turn(
        &self,
        prepared: PreparedTurn,
        said: LockSaid,
        peer_id: &PeerId,
        context_id: &str,
        wait: Duration,
    ) -> Option<Turn> {
        let held = prepared
            .held
            .and_then(|held| held.downcast::<RedisTurn>().ok());
        let Some(mut turn) = held.map(|held| *held) else {
            return self.begin_turn(peer_id, context_id, wait).await;
        };
        match said {
            LockSaid::Answered(LockAnswer::Taken) => {
                self.health.answered();
                Some(turn.into_turn())
            }
            // Ordered here only, as when a `SET` finds Redis away; `turn` releases whatever
            // the call may have taken (nothing, when the breaker kept it from being sent).
            LockSaid::Unanswered { sent } => {
                if !sent {
                    turn.key.clear();
                }
                turn.local.take()
            }
            LockSaid::Answered(LockAnswer::Held | LockAnswer::NotTried) | LockSaid::NotAsked => {
                // From here it is released whenever its `SET` may have landed.
                turn.may_hold = None;
                let deadline = tokio::time::Instant::now() + wait;
                self.take_shared(turn, deadline).await
            }
        }
    }
}
