//! The ids of the peer credentials the store holds, kept in memory, so a flood of made-up tokens
//! (anyone can compute the checksum) is refused without reading the store for each.
//!
//! The set only ever answers "no credential has this id": an id in it goes on to the usual
//! verification (verdict cache, store, secret hash), so a revocation, an expiry or a new secret
//! is decided exactly as without it, and a credential nobody holds never admits anyone.
//!
//! It is read whole at start and then again (the ids added since) when an id is missing from it:
//! at once after a change this process heard of (a credential issued here, or announced by
//! another instance), otherwise as a budget allows: a burst of five rereads, then one per 50 ms
//! (or per credential cache time, when that is shorter). So a quiet gateway finds a credential
//! the command line just wrote on its first use, one under a flood of unknown ids finds it
//! within 50 ms, and the flood costs at most twenty store reads a second.
//!
//! Memory: one id per credential ever issued (revoked ones included), about 64 bytes each.

use crate::clock::Clock;
use crate::store::{CredentialStore, StoreError};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The pace of rereads once their burst is spent.
const REREAD_AT_MOST_EVERY: Duration = Duration::from_millis(50);

/// Rereads allowed back to back before the pace applies.
const REREAD_BURST: i64 = 5;

/// How far back each reread looks beyond the newest id it has seen: other processes' clocks
/// (the command line, other instances) may lag this one's.
const CLOCK_MARGIN_MS: i64 = 60_000;

/// The peer credential ids the store holds.
pub struct KnownCredentialIds {
    ids: RwLock<HashSet<Box<str>>>,
    store: Arc<dyn CredentialStore>,
    clock: Arc<dyn Clock>,
    reread_every: Duration,
    /// Only one reread at a time; the others wait for it and look again.
    reread: tokio::sync::Mutex<Watermark>,
    /// The rereads' budget as a GCRA: the time (on the clock's monotonic scale) at which the
    /// budget is whole again.
    rereads_whole_at: AtomicI64,
    /// A change was heard: the next miss rereads whatever the interval says.
    stale: AtomicBool,
}

/// The newest creation time (epoch ms) the set has read.
struct Watermark(i64);

impl std::fmt::Debug for KnownCredentialIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownCredentialIds")
            .field("ids", &self.len())
            .finish_non_exhaustive()
    }
}

impl KnownCredentialIds {
    /// Reads every credential id in `store`. `cache_ttl` is the credential cache time: rereads
    /// are never spaced further apart than it.
    pub async fn load(
        store: Arc<dyn CredentialStore>,
        clock: Arc<dyn Clock>,
        cache_ttl: Duration,
    ) -> Result<Self, StoreError> {
        let known = Self {
            ids: RwLock::default(),
            store,
            clock,
            reread_every: REREAD_AT_MOST_EVERY.min(cache_ttl),
            reread: tokio::sync::Mutex::new(Watermark(i64::MIN)),
            rereads_whole_at: AtomicI64::new(i64::MIN),
            stale: AtomicBool::new(false),
        };
        // The first read does not spend the rereads' budget.
        let mut watermark = known.reread.lock().await;
        known.read_since(&mut watermark).await?;
        drop(watermark);
        Ok(known)
    }

    /// How many ids it holds.
    pub fn len(&self) -> usize {
        self.ids.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Something about the accounts changed: the next miss reads the store again at once.
    pub fn changed(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    /// Whether a credential with `token_id` may exist: `false` only when no credential had it
    /// at the latest read of the store.
    pub async fn may_exist(&self, token_id: &str) -> Result<bool, StoreError> {
        if self.holds(token_id) {
            return Ok(true);
        }
        if !self.stale.load(Ordering::SeqCst) && !self.reread_is_due() {
            return Ok(false);
        }
        let mut watermark = self.reread.lock().await;
        // Another request's reread may have found it while this one waited.
        if self.holds(token_id) {
            return Ok(true);
        }
        if !self.stale.swap(false, Ordering::SeqCst) && !self.reread_is_due() {
            return Ok(false);
        }
        self.spend_reread();
        self.read_since(&mut watermark).await?;
        Ok(self.holds(token_id))
    }

    /// Whether no credential has `token_id`, decided from memory alone: `false` when the id is
    /// held, or when a reread is due (then [`KnownCredentialIds::may_exist`] decides).
    pub fn surely_unknown(&self, token_id: &str) -> bool {
        !self.holds(token_id) && !self.stale.load(Ordering::SeqCst) && !self.reread_is_due()
    }

    fn holds(&self, token_id: &str) -> bool {
        self.ids
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(token_id)
    }

    fn every_nanos(&self) -> i64 {
        i64::try_from(self.reread_every.as_nanos()).unwrap_or(i64::MAX)
    }

    /// Whether the budget allows a reread now.
    fn reread_is_due(&self) -> bool {
        let tolerance = self.every_nanos().saturating_mul(REREAD_BURST - 1);
        self.rereads_whole_at.load(Ordering::SeqCst)
            <= self.clock.monotonic_nanos().saturating_add(tolerance)
    }

    /// Spends one reread from the budget.
    fn spend_reread(&self) {
        let now = self.clock.monotonic_nanos();
        let whole_at = self.rereads_whole_at.load(Ordering::SeqCst).max(now);
        self.rereads_whole_at.store(
            whole_at.saturating_add(self.every_nanos()),
            Ordering::SeqCst,
        );
    }

    async fn read_since(&self, watermark: &mut Watermark) -> Result<(), StoreError> {
        let since = watermark.0.saturating_sub(CLOCK_MARGIN_MS);
        let added = self.store.credential_ids_since(since).await?;
        let mut ids = self.ids.write().unwrap_or_else(|e| e.into_inner());
        for (id, created_at) in added {
            watermark.0 = watermark.0.max(created_at);
            ids.insert(id.into_boxed_str());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{AccountDefaults, AccountService, Caller, NewPeer};
    use crate::clock::ManualClock;
    use crate::store::{AdminLogin, CredentialRecord, PeerLogin};
    use crate::token::{CredentialKind, TokenSecretHash};
    use async_trait::async_trait;
    use std::sync::atomic::AtomicUsize;

    /// The real store's credentials, counting the rereads.
    #[derive(Debug)]
    struct Counted(Arc<dyn CredentialStore>, Arc<AtomicUsize>);

    #[async_trait]
    impl CredentialStore for Counted {
        async fn find_credential(
            &self,
            kind: CredentialKind,
            token_id: &str,
        ) -> Result<Option<CredentialRecord>, StoreError> {
            self.0.find_credential(kind, token_id).await
        }
        async fn find_peer_login(&self, name: &str) -> Result<Option<PeerLogin>, StoreError> {
            self.0.find_peer_login(name).await
        }
        async fn find_admin_login(&self, name: &str) -> Result<Option<AdminLogin>, StoreError> {
            self.0.find_admin_login(name).await
        }
        async fn find_admin_token(
            &self,
            token_id: &str,
        ) -> Result<Option<(AdminLogin, TokenSecretHash)>, StoreError> {
            self.0.find_admin_token(token_id).await
        }
        fn record_peer_use(&self, peer_id: &str, now: i64) {
            self.0.record_peer_use(peer_id, now);
        }
        async fn credential_ids_since(&self, since: i64) -> Result<Vec<(String, i64)>, StoreError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.credential_ids_since(since).await
        }
    }

    fn token_id(token: &str) -> String {
        crate::token::parse(CredentialKind::PeerToken, token)
            .unwrap()
            .token_id
            .to_owned()
    }

    #[tokio::test]
    async fn unknown_ids_are_refused_from_memory_and_new_ones_found_after_a_change_or_the_interval()
    {
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
            accounts
                .create_peer(&Caller::operator(), peer)
                .await
                .unwrap()
                .token
        };
        let first = token_id(&add("alice").await);
        let reads = Arc::new(AtomicUsize::new(0));
        let counted: Arc<dyn CredentialStore> =
            Arc::new(Counted(store.credentials(), reads.clone()));
        let known =
            KnownCredentialIds::load(counted, Arc::new(clock.clone()), Duration::from_secs(2))
                .await
                .unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1, "read whole at start");
        assert!(known.may_exist(&first).await.unwrap());
        // A quiet gateway rereads on the first miss: a credential written just after start by
        // another process is found on its first use.
        let early = token_id(&add("dave").await);
        assert!(known.may_exist(&early).await.unwrap());
        assert_eq!(reads.load(Ordering::SeqCst), 2);

        // A flood of unknown ids: the burst of rereads, then none until the pace allows one.
        for n in 0..1_000 {
            assert!(!known.may_exist(&format!("unknown{n:08}")).await.unwrap());
        }
        assert_eq!(reads.load(Ordering::SeqCst), 2 + 4, "the rest of the burst");
        assert!(known.surely_unknown("unknown-x"), "decided from memory");
        assert!(!known.surely_unknown(&first), "held");

        // A credential another process wrote is found once the interval has passed.
        let second = token_id(&add("bob").await);
        assert!(!known.may_exist(&second).await.unwrap(), "not yet reread");
        clock.advance(Duration::from_millis(50));
        assert!(
            !known.surely_unknown(&second),
            "a reread is due: the store decides"
        );
        assert!(known.may_exist(&second).await.unwrap());
        assert_eq!(reads.load(Ordering::SeqCst), 7);

        // One issued here is announced: found on the very next look, without waiting.
        let third = token_id(&add("carol").await);
        known.changed();
        assert!(known.may_exist(&third).await.unwrap());
        assert_eq!(reads.load(Ordering::SeqCst), 8);
        assert_eq!(known.len(), 4);
        store.close().await;
    }
}
