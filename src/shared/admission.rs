//! What a request asks of the state instances share before it is answered, as one question.
//!
//! A request on the door passes the per-address limit, the per-peer limit and, for a message,
//! the budget read and the context's turn lock before the model is asked. Across instances each
//! of those lives in Redis; asked one by one they cost a round trip each. The guard gathers
//! them as the request passes (see `crate::guard::admission`) and asks them here in one [`Ask`]:
//! the limits in order (the first that refuses ends the question, so nothing after it is
//! counted), then the budget's counters, then the turn lock, taken only when every limit passed
//! and no counter read shows its budget spent.
//!
//! Only an engine for several instances implements [`SharedAdmission`]; in one process each
//! check answers at once where it is made.

use crate::shared::gcra::{Decision, Quota};
use async_trait::async_trait;
use std::time::Duration;

/// One limit to count a request against: the shared key and its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitAsk {
    /// The key, with its limit's prefix (`peergate:ip:192.0.2.1`).
    pub key: String,
    /// The quota the key is counted against.
    pub quota: Quota,
}

/// The budget counters to read, with the caps that say whether a budget is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendAsk {
    /// Whose counters: the administrator, then the peer (`peer:ID`).
    pub spenders: [String; 2],
    /// The UTC day.
    pub day: crate::clock::UtcDay,
    /// The UTC month.
    pub month: crate::clock::UtcMonth,
    /// The caps of the counters in the order read (owner's day, owner's month, peer's day,
    /// peer's month); `None` is no cap.
    pub caps: [Option<u64>; 4],
}

/// A turn lock to take: `SET key token NX PX hold`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockAsk {
    /// The context's lock key.
    pub key: String,
    /// This turn's token, which its release must hold.
    pub token: String,
    /// How long the lock lasts if never released.
    pub hold: Duration,
}

/// One request's question to the shared state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// The limits, in the order the request met them.
    pub limits: Vec<LimitAsk>,
    /// The budget counters, for a message.
    pub spend: Option<SpendAsk>,
    /// The turn lock, for a message.
    pub lock: Option<LockAsk>,
}

impl Ask {
    /// Whether there is nothing to ask.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.spend.is_none() && self.lock.is_none()
    }
}

/// Whether the turn lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockAnswer {
    /// Taken for this turn.
    Taken,
    /// Another turn holds it.
    Held,
    /// Not tried: a counter read shows a budget spent, so no turn will run.
    NotTried,
}

/// The shared state's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The limit at `index` refused; the limits before it were counted, none after it, and
    /// nothing else was read or taken.
    Refused {
        /// The refusing limit's place in [`Ask::limits`].
        index: usize,
        /// Until one request of its key passes.
        retry_after: Duration,
    },
    /// Every limit passed (and was counted).
    Admitted {
        /// One decision per limit, in order (each `Allowed`).
        limits: Vec<Decision>,
        /// The counters read, in [`SpendAsk::caps`]'s order; `None` for one not started yet.
        counters: Option<[Option<u64>; 4]>,
        /// The lock, when asked.
        lock: Option<LockAnswer>,
    },
}

/// The shared state did not answer (Redis away, or its breaker open): every check is made in
/// this process instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionUnavailable {
    /// Whether the call was sent (and may have counted and taken what it asked) or not sent
    /// at all (the breaker is open).
    pub sent: bool,
}

/// Asks the shared state one request's question in one call.
#[async_trait]
pub trait SharedAdmission: Send + Sync + std::fmt::Debug {
    /// The answer to `ask`, in one round trip.
    async fn ask(&self, ask: Ask) -> Result<Answer, AdmissionUnavailable>;
}
