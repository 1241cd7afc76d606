//! One request's question to Redis in one script: the limits (the same GCRA as
//! [`super::limit`], on Redis's clock), the budget counters, the turn lock.
//!
//! The script is loaded once and called by its digest; a Redis that lost it (a restart, a
//! `SCRIPT FLUSH`) answers `NOSCRIPT` and the client loads it again and retries, in the same
//! call from the caller's side. Every key it touches is named in `KEYS`: one per limit, four
//! counters, one lock; nothing scans.

use super::{Degradation, Redis};
use crate::shared::admission::{AdmissionUnavailable, Answer, Ask, LockAnswer, SharedAdmission};
use crate::shared::gcra::Decision;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

/// KEYS: the limits' keys (ARGV[1] of them), then the counters (ARGV[2] of them), then the lock
/// (when ARGV[3] is 1). ARGV from 4: each limit's interval and burst (µs); each counter's cap
/// (0: none); the lock's token and hold (ms).
///
/// Returns {0, index, wait} when limit `index` (from 1) refuses, else {1, then each limit's
/// remaining and reset (µs), then each counter (-1: not started), then the lock (1 taken, 0
/// held by another turn, -1 not tried because a budget is spent)}.
const ADMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limits, counters, lock = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local a = 4
local answer = {1}
for i = 1, limits do
  local interval, burst = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - burst
  if now < allow_at then
    return {0, i, allow_at - now}
  end
  redis.call('SET', KEYS[i], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
  answer[#answer + 1] = math.floor((now + burst - new_tat) / interval)
  answer[#answer + 1] = new_tat - now
end
local spent = false
for j = 1, counters do
  local value = redis.call('GET', KEYS[limits + j])
  local cap = tonumber(ARGV[a])
  a = a + 1
  if value then
    value = tonumber(value)
    if cap > 0 and value >= cap then spent = true end
    answer[#answer + 1] = value
  else
    answer[#answer + 1] = -1
  end
end
if lock == 1 then
  if spent then
    answer[#answer + 1] = -1
  elseif redis.call('SET', KEYS[limits + counters + 1], ARGV[a], 'NX', 'PX', ARGV[a + 1]) then
    answer[#answer + 1] = 1
  else
    answer[#answer + 1] = 0
  end
end
return answer
";

/// Requests' questions asked of Redis, one script call each.
pub struct RedisAdmission {
    connection: ConnectionManager,
    script: Arc<redis::Script>,
    health: Degradation,
}

impl std::fmt::Debug for RedisAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAdmission").finish_non_exhaustive()
    }
}

impl RedisAdmission {
    /// Asks `redis`.
    pub fn new(redis: &Redis) -> Self {
        Self {
            connection: redis.connection(),
            script: Arc::new(redis::Script::new(ADMIT)),
            health: redis.degradation("admission (limits, budgets, turn order)"),
        }
    }

    /// Questions answered without Redis.
    pub fn local_answers(&self) -> u64 {
        self.health.local_answers()
    }
}

fn micros(value: i64) -> Duration {
    Duration::from_micros(u64::try_from(value).unwrap_or(0))
}

/// Reads the script's answer (see [`ADMIT`]).
fn answer_of(ask: &Ask, reply: &[i64]) -> Option<Answer> {
    if reply.first() == Some(&0) {
        let index = usize::try_from(*reply.get(1)?).ok()?.checked_sub(1)?;
        return Some(Answer::Refused {
            index,
            retry_after: micros(*reply.get(2)?),
        });
    }
    if reply.first() != Some(&1) {
        return None;
    }
    let expected = 1
        + 2 * ask.limits.len()
        + if ask.spend.is_some() { 4 } else { 0 }
        + usize::from(ask.lock.is_some());
    if reply.len() != expected {
        return None;
    }
    let mut values = reply.get(1..)?.iter().copied();
    let mut limits = Vec::with_capacity(ask.limits.len());
    for _ in &ask.limits {
        let (remaining, reset) = (values.next()?, values.next()?);
        limits.push(Decision::Allowed {
            remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
            reset: micros(reset),
        });
    }
    let counters = match &ask.spend {
        Some(_) => {
            let mut read = [None; 4];
            for slot in &mut read {
                *slot = u64::try_from(values.next()?).ok();
            }
            Some(read)
        }
        None => None,
    };
    let lock = match &ask.lock {
        Some(_) => Some(match values.next()? {
            1 => LockAnswer::Taken,
            0 => LockAnswer::Held,
            _ => LockAnswer::NotTried,
        }),
        None => None,
    };
    Some(Answer::Admitted {
        limits,
        counters,
        lock,
    })
}

#[async_trait]
impl SharedAdmission for RedisAdmission {
    async fn ask(&self, ask: Ask) -> Result<Answer, AdmissionUnavailable> {
        if self.health.bypassed() {
            return Err(AdmissionUnavailable { sent: false });
        }
        let mut invocation = self.script.prepare_invoke();
        for limit in &ask.limits {
            invocation.key(&limit.key);
        }
        if let Some(spend) = &ask.spend {
            for spender in &spend.spenders {
                invocation.key(super::spend::key(spender, spend.day));
                invocation.key(super::spend::key(spender, spend.month));
            }
        }
        if let Some(lock) = &ask.lock {
            invocation.key(&lock.key);
        }
        invocation
            .arg(ask.limits.len())
            .arg(if ask.spend.is_some() { 4 } else { 0 })
            .arg(u8::from(ask.lock.is_some()));
        for limit in &ask.limits {
            let quota = limit.quota;
            let interval = (quota.period.as_micros() / u128::from(quota.count.max(1))).max(1);
            let interval = i64::try_from(interval).unwrap_or(i64::MAX);
            invocation
                .arg(interval)
                .arg(interval.saturating_mul(i64::from(quota.burst.max(1))));
        }
        if let Some(spend) = &ask.spend {
            for cap in spend.caps {
                invocation.arg(cap.unwrap_or(0));
            }
        }
        if let Some(lock) = &ask.lock {
            invocation
                .arg(&lock.token)
                .arg(u64::try_from(lock.hold.as_millis()).unwrap_or(u64::MAX));
        }
        let mut connection = self.connection.clone();
        match invocation.invoke_async::<Vec<i64>>(&mut connection).await {
            Ok(reply) => {
                self.health.answered();
                // A reply of another shape is a Redis this build does not understand:
                // answered here, as when Redis is away.
                answer_of(&ask, &reply).ok_or(AdmissionUnavailable { sent: true })
            }
            Err(error) => {
                self.health.failed(&error);
                Err(AdmissionUnavailable { sent: true })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::admission::{LimitAsk, LockAsk, SpendAsk};
    use crate::shared::gcra::Quota;

    fn ask() -> Ask {
        Ask {
            limits: vec![
                LimitAsk {
                    key: "ip".into(),
                    quota: Quota::per_minute(60),
                },
                LimitAsk {
                    key: "peer".into(),
                    quota: Quota::per_minute(60),
                },
            ],
            spend: Some(SpendAsk {
                spenders: ["o".into(), "peer:p".into()],
                day: crate::clock::UtcDay::parse("2026-12-03").unwrap(),
                month: crate::clock::UtcMonth::parse("2026-12").unwrap(),
                caps: [Some(10), None, None, None],
            }),
            lock: Some(LockAsk {
                key: "turn".into(),
                token: "t".into(),
                hold: Duration::from_secs(1),
            }),
        }
    }

    #[test]
    fn a_refusal_names_the_limit_that_refused() {
        assert_eq!(
            answer_of(&ask(), &[0, 2, 1_500_000]),
            Some(Answer::Refused {
                index: 1,
                retry_after: Duration::from_millis(1500)
            })
        );
    }

    #[test]
    fn an_admission_reads_each_limit_each_counter_and_the_lock() {
        let answer = answer_of(&ask(), &[1, 59, 1_000_000, 58, 2_000_000, 7, -1, 3, 4, 1]);
        let Some(Answer::Admitted {
            limits,
            counters,
            lock,
        }) = answer
        else {
            panic!("{answer:?}");
        };
        assert_eq!(
            limits[1],
            Decision::Allowed {
                remaining: 58,
                reset: Duration::from_secs(2)
            }
        );
        assert_eq!(counters, Some([Some(7), None, Some(3), Some(4)]));
        assert_eq!(lock, Some(LockAnswer::Taken));
    }

    #[test]
    fn a_short_reply_is_no_answer() {
        assert_eq!(answer_of(&ask(), &[1, 59, 1_000_000]), None);
        assert_eq!(answer_of(&ask(), &[0, 0, 5]), None);
        // Too long, or not an admission.
        let long = [1, 59, 1_000_000, 58, 2_000_000, 7, -1, 3, 4, 1, 9];
        assert_eq!(answer_of(&ask(), &long), None);
        let odd = [2, 59, 1_000_000, 58, 2_000_000, 7, -1, 3, 4, 1];
        assert_eq!(answer_of(&ask(), &odd), None);
    }
}
