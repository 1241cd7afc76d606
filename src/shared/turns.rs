//! The per-context turn lock: two messages of one conversation are answered one after the
//! other, the second seeing the first in its history.
//!
//! The in-process engine keeps one mutex per (peer, context) while someone holds or waits for
//! it. An engine for several instances holds a shared lock with a fencing token instead; the
//! agent sees only [`TurnLocks`] and the [`Turn`] it holds.

use crate::locks::Locked;
use crate::store::PeerId;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OwnedMutexGuard;

/// Hands out turns per (peer, context).
#[async_trait]
pub trait TurnLocks: Send + Sync + std::fmt::Debug {
    /// Waits at most `wait` for the turn of `context_id` of `peer_id`; `None` when it did not
    /// come in time.
    async fn begin_turn(&self, peer_id: &PeerId, context_id: &str, wait: Duration) -> Option<Turn>;

    /// Prepares the turn of `context_id` to be taken with the request's admission call (see
    /// [`crate::shared::admission`]): this process's turn, when nobody here holds it, and the
    /// shared lock to ask for with it. Nothing to ask by default (turns ordered in process).
    fn prepare_turn(&self, _peer_id: &PeerId, _context_id: &str) -> PreparedTurn {
        PreparedTurn::default()
    }

    /// The turn `prepared` began, given what the admission call said of its lock; waits at
    /// most `wait` for what it still lacks, as [`TurnLocks::begin_turn`] does.
    async fn begin_prepared_turn(
        &self,
        prepared: PreparedTurn,
        said: LockSaid,
        peer_id: &PeerId,
        context_id: &str,
        wait: Duration,
    ) -> Option<Turn> {
        let _ = (prepared, said);
        self.begin_turn(peer_id, context_id, wait).await
    }
}

/// A turn prepared for the admission call: what to ask, and what it holds meanwhile (released
/// when dropped unused, the shared lock too unless [`PreparedTurn::not_taken`] says the call
/// did not take it).
#[derive(Default)]
pub struct PreparedTurn {
    /// The shared lock to ask for (`None`: nothing to ask).
    pub ask: Option<crate::shared::admission::LockAsk>,
    /// What is held meanwhile.
    pub(crate) held: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Cleared when the admission call is known not to have taken the shared lock, so that
    /// dropping the prepared turn sends no release.
    pub(crate) may_hold: Arc<std::sync::atomic::AtomicBool>,
}

impl PreparedTurn {
    /// The admission call did not take the shared lock (it refused, or another turn holds
    /// it): nothing to release.
    pub fn not_taken(&self) {
        self.may_hold
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl std::fmt::Debug for PreparedTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedTurn")
            .field("ask", &self.ask)
            .finish_non_exhaustive()
    }
}

/// What the admission call said of a prepared turn's shared lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockSaid {
    /// Asked, and this is the answer.
    Answered(crate::shared::admission::LockAnswer),
    /// Asked, and Redis did not answer: turns are ordered in process only. `sent` says
    /// whether the call went out (and may have taken the lock, so it is released).
    Unanswered {
        /// The call was sent.
        sent: bool,
    },
    /// Not asked.
    NotAsked,
}

/// The shared budget counters a turn's spending goes to, sent with the turn's release in one
/// call (see [`Turn::spending`]).
#[derive(Debug, Clone, Default)]
pub struct SpendingAfter(Arc<Mutex<Option<Spent>>>);

/// Tokens for the shared counters of `spenders` on `day` (and its month).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    /// The administrator, then the peer (`peer:ID`).
    pub spenders: Vec<String>,
    /// The UTC day.
    pub day: crate::clock::UtcDay,
    /// The tokens.
    pub tokens: u64,
}

impl SpendingAfter {
    /// Adds `spent` to what the turn sends with its release (a second addition counts on the
    /// first one's day: a turn past midnight is seeded again from the store anyway).
    pub fn add(&self, spent: Spent) {
        let mut slot = self.0.locked();
        match slot.as_mut() {
            Some(held) => held.tokens = held.tokens.saturating_add(spent.tokens),
            None => *slot = Some(spent),
        }
    }

    /// What the turn spent, taken.
    pub fn take(&self) -> Option<Spent> {
        self.0.locked().take()
    }
}

/// A turn being held; the next waiter's turn begins when it drops.
pub struct Turn {
    _held: Box<dyn Send + Sync>,
    spending: Option<SpendingAfter>,
}

impl Turn {
    /// A turn that ends when `held` drops.
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(held),
            spending: None,
        }
    }

    /// A turn whose release also sends what was added to `spending`.
    pub fn sending_spending(held: impl Send + Sync + 'static, spending: SpendingAfter) -> Self {
        Self {
            _held: Box::new(held),
            spending: Some(spending),
        }
    }

    /// Where the turn's spending goes to be sent with its release (`None`: sent on its own).
    pub fn spending(&self) -> Option<&SpendingAfter> {
        self.spending.as_ref()
    }
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Turn")
    }
}

/// A conversation's key: contexts are namespaced by peer.
type ContextKey = (PeerId, String);
type LockMap = Mutex<HashMap<ContextKey, Arc<tokio::sync::Mutex<()>>>>;

/// One lock per (peer, context) in this process, kept only while someone holds or waits for it.
#[derive(Debug, Default)]
pub struct LocalTurnLocks {
    locks: Arc<LockMap>,
}

impl LocalTurnLocks {
    /// Contexts with a turn held or awaited (for tests).
    pub fn contexts_in_use(&self) -> usize {
        self.locks.locked().len()
    }
}

struct LocalTurn {
    locks: Arc<LockMap>,
    key: ContextKey,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

#[async_trait]
impl TurnLocks for LocalTurnLocks {
    async fn begin_turn(&self, peer_id: &PeerId, context_id: &str, wait: Duration) -> Option<Turn> {
        let (mut turn, lock) = self.waiting_turn(peer_id, context_id);
        // On timeout `turn` drops here and tidies the map like a finished turn.
        turn.guard = Some(tokio::time::timeout(wait, lock.lock_owned()).await.ok()?);
        Some(Turn::new(turn))
    }
}

impl LocalTurnLocks {
    /// The turn of `context_id` now, if nobody in this process holds or awaits it.
    pub fn try_begin_turn(&self, peer_id: &PeerId, context_id: &str) -> Option<Turn> {
        let (mut turn, lock) = self.waiting_turn(peer_id, context_id);
        // When held, `turn` drops here and tidies the map like a finished turn.
        turn.guard = Some(lock.try_lock_owned().ok()?);
        Some(Turn::new(turn))
    }

    /// A turn of `context_id` not held yet (registered as waiting), and its lock.
    fn waiting_turn(
        &self,
        peer_id: &PeerId,
        context_id: &str,
    ) -> (LocalTurn, Arc<tokio::sync::Mutex<()>>) {
        let key = (peer_id.clone(), context_id.to_owned());
        let lock = {
            let mut locks = self.locks.locked();
            locks.entry(key.clone()).or_default().clone()
        };
        let turn = LocalTurn {
            locks: self.locks.clone(),
            key,
            lock: lock.clone(),
            guard: None,
        };
        (turn, lock)
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = self.locks.locked();
        // Two references left (the map's and ours): nobody else holds or waits for it.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_context_takes_one_turn_at_a_time_and_is_forgotten_when_free() {
        let locks = LocalTurnLocks::default();
        {
            let _turn = locks
                .begin_turn(&"p".into(), "c", Duration::from_secs(1))
                .await
                .unwrap();
            assert!(
                locks
                    .begin_turn(&"p".into(), "c", Duration::from_millis(10))
                    .await
                    .is_none()
            );
            assert!(
                locks
                    .begin_turn(&"p".into(), "other", Duration::from_millis(10))
                    .await
                    .is_some()
            );
            assert_eq!(locks.contexts_in_use(), 1);
        }
        assert_eq!(locks.contexts_in_use(), 0);
    }
}
