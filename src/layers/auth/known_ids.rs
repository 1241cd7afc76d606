//! The ids of the peer credentials the store holds, kept in memory, so a flood of made-up tokens
//! (anyone can compute the checksum) is refused without reading the store for each.
//!
//! The set only ever answers "no credential has this id": an id in it goes on to the usual
//! verification (verdict cache, store, secret hash), so a revocation, an expiry or a new secret
//! is decided exactly as without it, and a credential nobody holds never admits anyone.
//!
//! It is read whole at start. An id missing from it is not refused outright: the store is asked
//! for that one id, as before, while a budget allows (a burst of 64, then one every 50 ms, or
//! every credential cache time when that is shorter) and for a second after any change this
//! process hears of (a credential issued here, or announced by another instance). An id the store
//! has is added. So a quiet gateway finds a credential the command line just wrote on its first
//! use, a busy one within 50 ms, and a flood of unknown ids costs at most twenty point reads a
//! second. Nothing depends on the clocks of whoever wrote the rows.
//!
//! Memory: one id per credential issued since start-up or found in the store (revoked ones
//! included), about 64 bytes each.

use crate::clock::Clock;
use crate::store::{CredentialStore, StoreError};
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The pace of store look-ups for missing ids once their burst is spent.
const LOOKUP_AT_MOST_EVERY: Duration = Duration::from_millis(50);

/// Look-ups allowed back to back before the pace applies: enough for the concurrent first
/// uses of a credential just written by another process.
const LOOKUP_BURST: i64 = 64;

/// After a change is heard, every missing id is looked up for this long.
const OPEN_AFTER_CHANGE: Duration = Duration::from_secs(1);

/// The peer credential ids the store holds.
pub struct KnownCredentialIds {
    ids: RwLock<HashSet<Box<str>>>,
    clock: Arc<dyn Clock>,
    lookup_every: Duration,
    /// The look-ups' budget as a GCRA: when (on the clock's monotonic scale) it is whole again.
    whole_at: AtomicI64,
    /// Until when (same scale) every missing id is looked up, after a change.
    open_until: AtomicI64,
}

impl std::fmt::Debug for KnownCredentialIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownCredentialIds")
            .field("ids", &self.len())
            .finish_non_exhaustive()
    }
}

impl KnownCredentialIds {
    /// Reads every credential id in `store`. `cache_ttl` is the credential cache time: look-ups
    /// of missing ids are never spaced further apart than it (none at all when it is zero).
    pub async fn load(
        store: &dyn CredentialStore,
        clock: Arc<dyn Clock>,
        cache_ttl: Duration,
    ) -> Result<Self, StoreError> {
        let ids = store.credential_ids().await?;
        Ok(Self {
            ids: RwLock::new(ids.into_iter().map(String::into_boxed_str).collect()),
            clock,
            lookup_every: LOOKUP_AT_MOST_EVERY.min(cache_ttl),
            whole_at: AtomicI64::new(i64::MIN),
            open_until: AtomicI64::new(i64::MIN),
        })
    }

    /// How many ids it holds.
    pub fn len(&self) -> usize {
        self.ids.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Something about the accounts changed: missing ids are looked up for a while.
    pub fn changed(&self) {
        let until = self
            .clock
            .monotonic_nanos()
            .saturating_add(i64::try_from(OPEN_AFTER_CHANGE.as_nanos()).unwrap_or(i64::MAX));
        self.open_until.fetch_max(until, Ordering::SeqCst);
    }

    /// Whether no credential has `token_id`, decided from memory: `false` when the id is held,
    /// or when the store may be asked (then the caller asks it, and reports what it found with
    /// [`KnownCredentialIds::found`]).
    pub fn surely_unknown(&self, token_id: &str) -> bool {
        if self.holds(token_id) {
            return false;
        }
        let now = self.clock.monotonic_nanos();
        if now < self.open_until.load(Ordering::SeqCst) {
            return false;
        }
        !self.spend_lookup(now)
    }

    /// The store has a credential with `token_id`.
    pub fn found(&self, token_id: &str) {
        if !self.holds(token_id) {
            self.ids
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(token_id.into());
        }
    }

    fn holds(&self, token_id: &str) -> bool {
        self.ids
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(token_id)
    }

    /// Takes one look-up from the budget, if it has one.
    fn spend_lookup(&self, now: i64) -> bool {
        let every = i64::try_from(self.lookup_every.as_nanos()).unwrap_or(i64::MAX);
        if every == 0 {
            return true;
        }
        let tolerance = every.saturating_mul(LOOKUP_BURST - 1);
        let mut whole_at = self.whole_at.load(Ordering::SeqCst);
        loop {
            let base = whole_at.max(now);
            if base.saturating_sub(now) > tolerance {
                return false;
            }
            match self.whole_at.compare_exchange_weak(
                whole_at,
                base.saturating_add(every),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(current) => whole_at = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{AccountDefaults, AccountService, Caller, NewPeer};
    use crate::clock::ManualClock;
    use crate::token::CredentialKind;

    fn token_id(token: &str) -> String {
        crate::token::parse(CredentialKind::PeerToken, token)
            .unwrap()
            .token_id
            .to_owned()
    }

    #[tokio::test]
    async fn unknown_ids_are_refused_from_memory_within_a_budget_of_look_ups() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path()).await.unwrap();
        let clock = ManualClock::new(1_800_000_000_000);
        let accounts = AccountService::new(
            store.clone(),
            Arc::new(clock.clone()),
            AccountDefaults {
                default_owner: Some("operator".to_owned()),
                rate_per_minute: 60,
            },
        );
        let add = async |name: &str| {
            let peer = NewPeer {
                name: name.to_owned(),
                ..NewPeer::default()
            };
            let token = accounts
                .create_peer(&Caller::operator(), peer)
                .await
                .unwrap()
                .token;
            token_id(&token)
        };
        let first = add("alice").await;
        let known = KnownCredentialIds::load(
            &*store.credentials(),
            Arc::new(clock.clone()),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
        assert_eq!(known.len(), 1);
        assert!(!known.surely_unknown(&first), "held");

        // A flood of unknown ids: a burst may be looked up, then none until the pace allows one.
        let looked_up = (0..1_000)
            .filter(|n| !known.surely_unknown(&format!("unknown{n:08}")))
            .count();
        assert_eq!(looked_up, 64);
        assert!(known.surely_unknown("unknown-x"));
        clock.advance(Duration::from_millis(50));
        assert!(!known.surely_unknown("unknown-y"), "the pace allows one");
        assert!(known.surely_unknown("unknown-z"));

        // After a change, every missing id is looked up for a second; one found is held.
        let second = add("bob").await;
        known.changed();
        assert!(!known.surely_unknown("junk-1"));
        assert!(!known.surely_unknown(&second));
        known.found(&second);
        clock.advance(OPEN_AFTER_CHANGE);
        let looked_up = (0..1_000)
            .filter(|n| !known.surely_unknown(&format!("junk-{n}")))
            .count();
        assert_eq!(
            looked_up, 20,
            "the window closed: what the pace refilled in that second"
        );
        assert!(!known.surely_unknown(&second), "held from now on");
        assert_eq!(known.len(), 2);

        // With no credential cache, every missing id is looked up: nothing is decided from a
        // stale memory.
        let uncached = KnownCredentialIds::load(
            &*store.credentials(),
            Arc::new(clock.clone()),
            Duration::ZERO,
        )
        .await
        .unwrap();
        assert!((0..100).all(|n| !uncached.surely_unknown(&format!("unknown{n}"))));
        store.close().await;
    }
}
