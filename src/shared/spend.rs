//! Tokens spent against budgets, counted where every instance sees them, so a budget is not
//! overshot once per instance.
//!
//! A counter per (administrator, period) for the day and the month. A counter that does not
//! exist yet is seeded from the store by the first instance that needs it; spending adds only
//! to counters that exist, so a counter is never started from zero while the store holds more.

use crate::clock::{UtcDay, UtcMonth};
use async_trait::async_trait;

/// The shared counters could not be read: the caller counts on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendUnavailable;

/// The tokens an administrator spent, shared by every instance.
#[async_trait]
pub trait SharedSpend: Send + Sync + std::fmt::Debug {
    /// Tokens spent by `owner_id` in `day` and `month`; `Ok(None)` when not counted yet.
    async fn spent(
        &self,
        owner_id: &str,
        day: UtcDay,
        month: UtcMonth,
    ) -> Result<Option<(u64, u64)>, SpendUnavailable>;
    /// Starts the counters of `owner_id` at what the store holds, unless another instance
    /// already did.
    async fn seed(&self, owner_id: &str, day: UtcDay, month: UtcMonth, spent: (u64, u64));
    /// Adds `tokens` to the counters of each of `spenders` (an administrator, a peer) that
    /// exist, in one call, without waiting.
    fn add(&self, spenders: &[&str], day: UtcDay, month: UtcMonth, tokens: u64);
    /// Whether some counters fell short (an increment Redis did not confirm) and wait to be
    /// dropped by the next [`SharedSpend::spent`]: until then they are not read elsewhere.
    fn has_short_counters(&self) -> bool {
        false
    }
}
