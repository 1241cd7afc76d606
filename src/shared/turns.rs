//! The per-context turn lock: two messages of one conversation are answered one after the
//! other, the second seeing the first in its history.
//!
//! The in-process engine keeps one mutex per (peer, context) while someone holds or waits for
//! it. An engine for several instances holds a shared lock with a fencing token instead; the
//! agent sees only [`TurnLocks`] and the [`Turn`] it holds.

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
}

/// A turn being held; the next waiter's turn begins when it drops.
pub struct Turn {
    _held: Box<dyn Send + Sync>,
}

impl Turn {
    /// A turn that ends when `held` drops.
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(held),
        }
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
        self.locks.lock().unwrap_or_else(|e| e.into_inner()).len()
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
        let key = (peer_id.clone(), context_id.to_owned());
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let mut turn = LocalTurn {
            locks: self.locks.clone(),
            key,
            lock: lock.clone(),
            guard: None,
        };
        // On timeout `turn` drops here and tidies the map like a finished turn.
        turn.guard = Some(tokio::time::timeout(wait, lock.lock_owned()).await.ok()?);
        Some(Turn::new(turn))
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
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
