//! One request's admission across instances: the shared checks it meets on its way in,
//! gathered and asked in one call.
//!
//! With several instances, the per-address limit, the per-peer limit, the failed-attempt budget,
//! a message's budget read and its turn lock all live in Redis. Asked where each is met they
//! cost a round trip each before the answer. Instead the per-address layer opens an
//! [`Admission`] (after its in-process check, which refuses a flood on this instance without
//! asking anyone), each later check adds its limit to it ([`Admission::defer`]), and the first
//! place that must know the answer settles it ([`Admission::settle`]) with whatever it adds:
//!
//! - a failed authentication settles it with the failed-attempt budget: a 401 or 429 costs one
//!   call;
//! - the typed A2A service settles it first thing in every operation, a message with its budget
//!   read and turn lock: everything before the model is one call;
//! - whatever is still pending when the answer passes the per-peer and per-address layers on its
//!   way out (a card, a refusal of the protocol gate) is settled there, before the answer
//!   leaves.
//!
//! A refusal is kept: every later settle returns it, and the layers answer with it whatever the
//! inner service said, so a request over a limit is answered 429 exactly as when each check
//! asked on its own. The limits are counted in the order the request met them and the first that
//! refuses stops the rest, as before. When Redis does not answer, each pending limit is checked
//! in this process (the per-address one already was), as the limit engines do.

use crate::guard::limited::{Limit, RateLimited};
use crate::shared::admission::{
    Answer, Ask, LimitAsk, LockAnswer, LockAsk, SharedAdmission, SpendAsk,
};
use crate::shared::gcra::{Decision, Quota};
use crate::shared::rate_limit::{LocalLimiter, RateLimiter};
use axum::response::{IntoResponse, Response};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// A limit counted in requests' admissions: its in-process limiter (which answers while
/// Redis does not) and the engine the admissions ask.
pub struct Admitting<K> {
    /// The in-process limiter.
    pub local: Arc<LocalLimiter<K>>,
    /// The engine.
    pub engine: Arc<dyn SharedAdmission>,
}

/// The in-process side of a deferred limit: its answer when Redis is away, and its refund.
pub trait LocalCheck: Send + Sync {
    /// Counts the request here.
    fn check(&self) -> Decision;
    /// Gives back a request counted here.
    fn refund(&self);
}

/// A key of an in-process limiter.
pub struct LocalKey<K> {
    limiter: Arc<LocalLimiter<K>>,
    key: K,
    quota: Quota,
}

impl<K> LocalKey<K> {
    /// `key` of `limiter`, against `quota`.
    pub fn new(limiter: Arc<LocalLimiter<K>>, key: K, quota: Quota) -> Self {
        Self {
            limiter,
            key,
            quota,
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> LocalCheck for LocalKey<K> {
    fn check(&self) -> Decision {
        self.limiter
            .check(&self.key, self.quota)
            .ready()
            .unwrap_or(Decision::Denied {
                retry_after: std::time::Duration::from_secs(1),
            })
    }

    fn refund(&self) {
        self.limiter.refund(&self.key, self.quota);
    }
}

struct Pending {
    limit: Limit,
    ask: LimitAsk,
    local: Box<dyn LocalCheck>,
    /// Already counted in this process (and passed there).
    counted_here: bool,
}

#[derive(Default)]
struct Ticket {
    pending: Vec<Pending>,
    refused: Option<RateLimited>,
    /// Each limit passed, with its quota and decision (for the `RateLimit` headers).
    passed: Vec<(Limit, Quota, Decision)>,
}

/// One request's shared checks: see the [module docs](self). Cheap to clone; every clone is
/// the same ticket.
#[derive(Clone)]
pub struct Admission {
    engine: Arc<dyn SharedAdmission>,
    ticket: Arc<Mutex<Ticket>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admission(…)")
    }
}

/// What a settled admission says beyond the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    /// Redis answered (else everything was checked in this process).
    pub answered: bool,
    /// The budget counters read, when asked and answered.
    pub counters: Option<[Option<u64>; 4]>,
    /// The turn lock, when asked and answered.
    pub lock: Option<LockAnswer>,
}

impl Admission {
    /// A ticket asked of `engine`.
    pub fn new(engine: Arc<dyn SharedAdmission>) -> Self {
        Self {
            engine,
            ticket: Arc::default(),
        }
    }

    fn ticket(&self) -> std::sync::MutexGuard<'_, Ticket> {
        self.ticket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `limit` (its shared key and quota) to the next settle; `local` answers for it when
    /// Redis does not, and was already counted (and passed) when `counted_here`.
    pub fn defer(
        &self,
        limit: Limit,
        ask: LimitAsk,
        local: impl LocalCheck + 'static,
        counted_here: bool,
    ) {
        self.ticket().pending.push(Pending {
            limit,
            ask,
            local: Box::new(local),
            counted_here,
        });
    }

    /// Whether a limit waits to be asked.
    pub fn is_pending(&self) -> bool {
        !self.ticket().pending.is_empty()
    }

    /// The refusal, when a settle refused.
    pub fn refusal(&self) -> Option<RateLimited> {
        self.ticket().refused
    }

    /// The decision of `limit`, once it passed.
    pub fn passed(&self, limit: Limit) -> Option<(Quota, Decision)> {
        self.ticket()
            .passed
            .iter()
            .find(|(passed, ..)| *passed == limit)
            .map(|(_, quota, decision)| (*quota, *decision))
    }

    /// Asks the pending limits, then `spend` and `lock`, in one call: the refusal of the first
    /// limit that refuses (kept for every later settle), or what was read and taken.
    pub async fn settle(
        &self,
        spend: Option<SpendAsk>,
        lock: Option<LockAsk>,
    ) -> Result<Settled, RateLimited> {
        let pending = {
            let mut ticket = self.ticket();
            if let Some(refused) = ticket.refused {
                return Err(refused);
            }
            std::mem::take(&mut ticket.pending)
        };
        let ask = Ask {
            limits: pending.iter().map(|p| p.ask.clone()).collect(),
            spend,
            lock,
        };
        if ask.is_empty() {
            return Ok(Settled {
                answered: true,
                ..Settled::default()
            });
        }
        match self.engine.ask(ask).await {
            Ok(Answer::Refused { index, retry_after }) => {
                let Some(refusing) = pending.get(index) else {
                    return self.settle_here(pending);
                };
                // What was counted here but not there (the refusing limit and those after it)
                // is given back here, so this process's count follows the shared one.
                for later in &pending[index..] {
                    if later.counted_here {
                        later.local.refund();
                    }
                }
                let refused = RateLimited {
                    limit: refusing.limit,
                    retry_after,
                    quota: refusing.ask.quota,
                };
                self.ticket().refused = Some(refused);
                Err(refused)
            }
            Ok(Answer::Admitted {
                limits,
                counters,
                lock,
            }) => {
                let mut ticket = self.ticket();
                for (pending, decision) in pending.iter().zip(limits) {
                    ticket
                        .passed
                        .push((pending.limit, pending.ask.quota, decision));
                }
                Ok(Settled {
                    answered: true,
                    counters,
                    lock,
                })
            }
            Err(_) => self.settle_here(pending),
        }
    }

    /// Redis did not answer: each pending limit decided in this process, in order.
    fn settle_here(&self, pending: Vec<Pending>) -> Result<Settled, RateLimited> {
        let mut ticket = self.ticket();
        for pending in &pending {
            let decision = if pending.counted_here {
                // Passed here already when it was met.
                Decision::Allowed {
                    remaining: 0,
                    reset: std::time::Duration::ZERO,
                }
            } else {
                pending.local.check()
            };
            match decision {
                Decision::Allowed { .. } => {
                    ticket
                        .passed
                        .push((pending.limit, pending.ask.quota, decision));
                }
                Decision::Denied { retry_after } => {
                    let refused = RateLimited {
                        limit: pending.limit,
                        retry_after,
                        quota: pending.ask.quota,
                    };
                    ticket.refused = Some(refused);
                    return Err(refused);
                }
            }
        }
        Ok(Settled::default())
    }

    /// The answer as it leaves a guard layer: what is still pending asked first, and a refusal
    /// answering instead of `response`.
    pub async fn answer(self, response: Response) -> Response {
        let refused = if self.is_pending() {
            self.settle(None, None).await.err()
        } else {
            self.refusal()
        };
        match refused {
            Some(refused) => refused.into_response(),
            None => response,
        }
    }
}
