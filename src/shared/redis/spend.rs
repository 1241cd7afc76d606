//! Budget counters in Redis: one key per (administrator, day) and (administrator, month),
//! expiring once the period is long past.
//!
//! An increment that Redis did not confirm leaves its counters short; they are deleted as soon
//! as Redis answers again, so the next check seeds them afresh from the store, which holds every
//! turn's usage.
//!
//! A turn that held a shared lock adds its tokens with the lock's release
//! ([`super::turns`]), after its usage is stored: a counter started from the store in that
//! instant counts those tokens twice, and the budget refuses that much early for the rest of
//! its period. A turn that finishes in the instant between a seed being read from the store and
//! being set, before its usage is stored, is not counted in Redis (the next seed has it). Both
//! happen only as a counter starts: once a period, or after Redis lost it.

use super::{Degradation, Redis};
use crate::clock::{UtcDay, UtcMonth};
use crate::locks::Locked;
use crate::shared::spend::{SharedSpend, SpendUnavailable};
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::sync::Arc;

/// Adds ARGV[1] to each of KEYS that exists.
const ADD: &str = r"
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, ARGV[1]) end
end
return 0
";

/// Days are kept two days, months 32 days after their counter started.
const DAY_SECONDS: u64 = 2 * 24 * 3600;
const MONTH_SECONDS: u64 = 32 * 24 * 3600;

/// Spend counters shared through Redis.
pub struct RedisSpend {
    connection: ConnectionManager,
    add: Arc<redis::Script>,
    health: Degradation,
    /// Counters an unconfirmed increment left short, to delete once Redis answers.
    short: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl std::fmt::Debug for RedisSpend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSpend").finish_non_exhaustive()
    }
}

impl RedisSpend {
    /// Counters in `redis`.
    pub fn new(redis: &Redis) -> Self {
        Self {
            connection: redis.connection(),
            add: Arc::new(redis::Script::new(ADD)),
            health: redis.degradation("budget spending"),
            short: Arc::default(),
        }
    }

    /// Marks `counters` short: an increment Redis did not confirm (they are deleted once it
    /// answers, and seeded again from the store).
    pub(super) fn left_short(&self, counters: Vec<String>) {
        self.short.locked().extend(counters);
    }

    /// Deletes the counters left short, so they are seeded from the store again.
    async fn forget_short_counters(&self, connection: &mut ConnectionManager) {
        let short = std::mem::take(&mut *self.short.locked());
        if short.is_empty() {
            return;
        }
        let deleted: Result<i64, _> = redis::cmd("DEL").arg(&short).query_async(connection).await;
        if deleted.is_err() {
            self.short.locked().extend(short);
        }
    }
}

/// The counter of `owner_id` (an administrator, or `peer:ID`) for `period`.
pub(super) fn key(owner_id: &str, period: impl std::fmt::Display) -> String {
    format!("peergate:spent:{owner_id}:{period}")
}

#[async_trait]
impl SharedSpend for RedisSpend {
    async fn spent(
        &self,
        owner_id: &str,
        day: UtcDay,
        month: UtcMonth,
    ) -> Result<Option<(u64, u64)>, SpendUnavailable> {
        if self.health.bypassed() {
            return Err(SpendUnavailable);
        }
        let mut connection = self.connection.clone();
        self.forget_short_counters(&mut connection).await;
        let read: Result<(Option<u64>, Option<u64>), _> = redis::cmd("MGET")
            .arg(key(owner_id, day))
            .arg(key(owner_id, month))
            .query_async(&mut connection)
            .await;
        match read {
            Ok((Some(day), Some(month))) => {
                self.health.answered();
                Ok(Some((day, month)))
            }
            Ok(_) => Ok(None),
            Err(error) => {
                self.health.failed(&error);
                Err(SpendUnavailable)
            }
        }
    }

    async fn seed(&self, owner_id: &str, day: UtcDay, month: UtcMonth, spent: (u64, u64)) {
        if self.health.bypassed() {
            return;
        }
        let mut connection = self.connection.clone();
        let seeded: Result<(), _> = redis::pipe()
            .cmd("SET")
            .arg(key(owner_id, day))
            .arg(spent.0)
            .arg("NX")
            .arg("EX")
            .arg(DAY_SECONDS)
            .ignore()
            .cmd("SET")
            .arg(key(owner_id, month))
            .arg(spent.1)
            .arg("NX")
            .arg("EX")
            .arg(MONTH_SECONDS)
            .ignore()
            .query_async(&mut connection)
            .await;
        if let Err(error) = seeded {
            self.health.failed(&error);
        }
    }

    fn has_short_counters(&self) -> bool {
        !self.short.locked().is_empty()
    }

    fn add(&self, spenders: &[&str], day: UtcDay, month: UtcMonth, tokens: u64) {
        let mut connection = self.connection.clone();
        let (add, health, short) = (self.add.clone(), self.health.clone(), self.short.clone());
        let keys: Vec<String> = spenders
            .iter()
            .flat_map(|spender| [key(spender, day), key(spender, month)])
            .collect();
        if health.bypassed() {
            // Not added: the shared counters fall short, and are dropped (then seeded again
            // from the store) when Redis is asked again.
            short.locked().extend(keys);
            return;
        }
        tokio::spawn(async move {
            let mut invocation = add.prepare_invoke();
            for key in &keys {
                invocation.key(key);
            }
            let added: Result<i64, _> = invocation.arg(tokens).invoke_async(&mut connection).await;
            if let Err(error) = added {
                health.failed(&error);
                short.locked().extend(keys);
            }
        });
    }
}
