//! One request's admission across instances: the shared checks it meets on its way in,
//! gathered and asked in one call.
//!
//! With several instances, the per-address limit, the per-peer limit, the failed-attempt budget,
//! a message's budget read and its turn lock all live in Redis. Asked where each is met they
//! cost a round trip each before the answer. Instead the per-address layer opens an
//! [`Admission`], each later check adds its limit to it ([`Admission::defer`]), and the first
//! place that must know the answer settles it ([`Admission::settle`]) with whatever it adds.
//! The per-address layer checks in process first, with the whole quota, so a flood from one
//! address on this instance is refused without asking anyone.
//!
//! - a failed authentication settles it with the failed-attempt budget: a 401 or 429 costs one
//!   call;
//! - the call pipeline ([`crate::a2a::pipeline`]) settles it for every A2A call before anything
//!   is answered, a refusal too, and a message with its budget read and turn lock (for the usual
//!   message, everything before the model is one call; the exceptions are in decision 0008);
//! - every other route behind the guard (the cards, the key set) settles it in its innermost
//!   layer ([`crate::layers::limit::settle`]) before its handler.
//!
//! Those two places decide, and a limit's refusal is their answer, so a request over a limit is
//! answered 429 exactly as when each check asked on its own. The guard layers only add the
//! `RateLimit` headers on the way out, and settle what a request answered before either place
//! left pending (a body past the limit) without changing its answer. A refusal is kept: every
//! later settle returns it. The limits are counted in the order the request met them and the
//! first that refuses stops the rest, as before. When Redis does not answer, each pending limit
//! is checked in this process (those checked there first already were), as the limit engines
//! do. One settle runs at a time: a second waits for the first one's answer. A request dropped before
//! its limits were asked (a client that hung up) has them counted in a call nobody waits for.

use crate::guard::limited::{Limit, RateLimited};
use crate::locks::Locked;
use crate::shared::admission::{
    Answer, Ask, LimitAsk, LockAnswer, LockAsk, SharedAdmission, SpendAsk,
};
use crate::shared::gcra::{Decision, Quota};
use crate::shared::rate_limit::{LocalLimiter, RateLimiter};
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
    /// Already counted in this process, where it passed with this decision.
    counted_here: Option<Decision>,
}

#[derive(Default)]
struct Ticket {
    pending: Vec<Pending>,
    refused: Option<RateLimited>,
    /// Each limit passed, with its quota and decision (for the `RateLimit` headers).
    passed: Vec<(Limit, Quota, Decision)>,
    /// What became of the last call.
    last: Asked,
}

/// The ticket and its engine; a request dropped before its limits were asked (a client that
/// hung up) still has them counted, in a call nobody waits for.
struct Shared {
    engine: Arc<dyn SharedAdmission>,
    ticket: Mutex<Ticket>,
    /// Held across a settle's call, so a second settle waits for the first one's answer
    /// instead of asking without the limits the first one took.
    settling: tokio::sync::Mutex<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let ticket = self.ticket.get_mut().unwrap_or_else(|e| e.into_inner());
        if ticket.pending.is_empty() || ticket.refused.is_some() {
            return;
        }
        let ask = Ask {
            limits: ticket.pending.iter().map(|p| p.ask.clone()).collect(),
            ..Ask::default()
        };
        let engine = self.engine.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = engine.ask(ask).await;
            });
        }
    }
}

/// One request's shared checks: see the [module docs](self). Cheap to clone; every clone is
/// the same ticket.
#[derive(Clone)]
pub struct Admission {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admission(…)")
    }
}

/// What became of a settle's call to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Asked {
    /// Nothing needed asking (or nothing was asked yet).
    #[default]
    Nothing,
    /// Redis answered.
    Answered,
    /// Not sent (the breaker is open): nothing was counted, read or taken there.
    NotSent,
    /// Sent, and no answer came: it may have counted and taken what it asked.
    Unanswered,
}

/// What a settled admission says beyond the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    /// What became of the call.
    pub asked: Asked,
    /// The budget counters read, when asked and answered.
    pub counters: Option<[Option<u64>; 4]>,
    /// The turn lock, when asked and answered.
    pub lock: Option<LockAnswer>,
}

impl Admission {
    /// A ticket asked of `engine`.
    pub fn new(engine: Arc<dyn SharedAdmission>) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                ticket: Mutex::default(),
                settling: tokio::sync::Mutex::new(()),
            }),
        }
    }

    fn ticket(&self) -> std::sync::MutexGuard<'_, Ticket> {
        self.shared.ticket.locked()
    }

    /// Adds `limit` (its shared key and quota) to the next settle; `local` answers for it when
    /// Redis does not, unless it was already counted there (`counted_here`, the decision it
    /// passed with).
    pub fn defer(
        &self,
        limit: Limit,
        ask: LimitAsk,
        local: impl LocalCheck + 'static,
        counted_here: Option<Decision>,
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

    /// What became of the last settle's call (after a refusal: whether Redis itself refused,
    /// so nothing after the refusing limit was taken there).
    pub fn last_asked(&self) -> Asked {
        self.ticket().last
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
        let _settling = self.shared.settling.lock().await;
        let pending = {
            let mut ticket = self.ticket();
            if let Some(refused) = ticket.refused {
                ticket.last = Asked::Nothing;
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
            self.ticket().last = Asked::Nothing;
            return Ok(Settled::default());
        }
        match self.shared.engine.ask(ask).await {
            Ok(Answer::Refused { index, retry_after }) => {
                let Some(refusing) = pending.get(index) else {
                    return self.settle_here(pending, Asked::Unanswered);
                };
                // What was counted here but not there (the refusing limit and those after it)
                // is given back here, so this process's count follows the shared one.
                for later in &pending[index..] {
                    if later.counted_here.is_some() {
                        later.local.refund();
                    }
                }
                let refused = RateLimited {
                    limit: refusing.limit,
                    retry_after,
                    quota: refusing.ask.quota,
                };
                let mut ticket = self.ticket();
                ticket.refused = Some(refused);
                ticket.last = Asked::Answered;
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
                ticket.last = Asked::Answered;
                Ok(Settled {
                    asked: Asked::Answered,
                    counters,
                    lock,
                })
            }
            Err(unavailable) => {
                let asked = if unavailable.sent {
                    Asked::Unanswered
                } else {
                    Asked::NotSent
                };
                self.settle_here(pending, asked)
            }
        }
    }

    /// Redis did not answer: each pending limit decided in this process, in order.
    fn settle_here(&self, pending: Vec<Pending>, asked: Asked) -> Result<Settled, RateLimited> {
        let mut ticket = self.ticket();
        ticket.last = asked;
        for pending in &pending {
            // Passed here already when it was met, or checked here now.
            let decision = pending
                .counted_here
                .unwrap_or_else(|| pending.local.check());
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
        Ok(Settled {
            asked,
            ..Settled::default()
        })
    }

    /// Settles what a request left pending when it was answered before it reached either
    /// place that decides (a body past the limit by its `Content-Length`, a timeout while the
    /// body arrived): counted before the answer leaves, which it does not change (no layer
    /// replaces an answer an inner service made).
    pub async fn settle_left(&self) {
        if self.is_pending() {
            let _ = self.settle(None, None).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::admission::AdmissionUnavailable;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Redis's side as the script would answer: refuses the first limit, or is away, after a
    /// pause; counts the calls.
    #[derive(Debug, Default)]
    struct Engine {
        calls: AtomicUsize,
        away: Option<bool>,
    }

    #[async_trait::async_trait]
    impl SharedAdmission for Engine {
        async fn ask(&self, ask: Ask) -> Result<Answer, AdmissionUnavailable> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            match self.away {
                Some(sent) => Err(AdmissionUnavailable { sent }),
                None if ask.limits.is_empty() => Ok(Answer::Admitted {
                    limits: Vec::new(),
                    counters: None,
                    lock: None,
                }),
                None => Ok(Answer::Refused {
                    index: 0,
                    retry_after: Duration::from_secs(3),
                }),
            }
        }
    }

    /// A local limiter key that always answers `decision`.
    struct Fixed(Decision, Arc<AtomicUsize>);

    impl LocalCheck for Fixed {
        fn check(&self) -> Decision {
            self.0
        }
        fn refund(&self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn limit(key: &str) -> LimitAsk {
        LimitAsk {
            key: key.into(),
            quota: Quota::per_minute(1),
        }
    }

    const ALLOWED: Decision = Decision::Allowed {
        remaining: 0,
        reset: Duration::ZERO,
    };

    #[tokio::test]
    async fn a_second_settle_waits_for_the_first_and_gets_its_refusal() {
        let engine = Arc::new(Engine::default());
        let admission = Admission::new(engine.clone());
        let refunds = Arc::new(AtomicUsize::new(0));
        let local = Fixed(ALLOWED, refunds.clone());
        admission.defer(Limit::PerPeer, limit("peer"), local, Some(ALLOWED));
        let (first, second) =
            tokio::join!(admission.settle(None, None), admission.settle(None, None));
        assert_eq!(first.unwrap_err().limit, Limit::PerPeer);
        // Not admitted by asking without the limit the first one took.
        assert_eq!(second.unwrap_err().limit, Limit::PerPeer);
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
        // Counted here, refused there: given back here.
        assert_eq!(refunds.load(Ordering::SeqCst), 1);
        assert_eq!(admission.last_asked(), Asked::Nothing);
    }

    #[tokio::test]
    async fn without_redis_each_limit_is_decided_here_and_says_whether_the_call_went_out() {
        for sent in [true, false] {
            let engine = Arc::new(Engine {
                away: Some(sent),
                ..Engine::default()
            });
            let admission = Admission::new(engine);
            let refunds = Arc::new(AtomicUsize::new(0));
            // Passed here when met; the next one is checked here now, and refuses.
            admission.defer(
                Limit::PerIp,
                limit("ip"),
                Fixed(ALLOWED, refunds.clone()),
                Some(ALLOWED),
            );
            let denied = Decision::Denied {
                retry_after: Duration::from_secs(7),
            };
            admission.defer(Limit::PerPeer, limit("peer"), Fixed(denied, refunds), None);
            let refused = admission.settle(None, None).await.unwrap_err();
            assert_eq!(
                (refused.limit, refused.retry_after),
                (Limit::PerPeer, Duration::from_secs(7))
            );
            let expected = if sent {
                Asked::Unanswered
            } else {
                Asked::NotSent
            };
            assert_eq!(admission.last_asked(), expected);
        }
    }

    #[tokio::test]
    async fn limits_left_pending_by_a_dropped_request_are_still_counted() {
        let engine = Arc::new(Engine::default());
        let admission = Admission::new(engine.clone());
        let local = Fixed(ALLOWED, Arc::default());
        admission.defer(Limit::PerIp, limit("ip"), local, Some(ALLOWED));
        drop(admission);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
    }
}
