//! The ids of the peer credentials the store holds, kept in memory and authoritative: a
//! presented token or API key whose id is not here is refused from memory, without touching the
//! store, so a flood of made-up tokens (anyone can compute the checksum) costs the store
//! nothing; an id that is here always goes on to the usual verification (verdict cache, store,
//! secret hash), so a revocation, an expiry or a new secret is decided exactly as without it.
//!
//! It stays current because every credential issued reaches it as a
//! [`crate::shared::changes::Change::CredentialIssued`]: at once from this process's account
//! service (so a token issued through the admin API works on the very next request), within a
//! Redis round trip from another instance, and from the command line through the store's
//! announcements. Nothing is looked up on demand, so nothing an attacker sends can crowd out a
//! new credential. A notification that is lost (a Redis or PostgreSQL connection that dropped
//! while a credential was issued) costs at most [`RECONCILE_EVERY`]: the gateway re-reads every
//! id that often, and at once whenever it may have missed changes.
//!
//! Ids only ever join the set (a revoked credential's id stays, and its verification refuses
//! it), so a re-read racing a notification cannot drop a new id.
//!
//! Memory: one id per credential in the store, revoked ones included, about 64 bytes each.

use crate::locks::ReadWriteLocked;
use crate::store::{CredentialStore, StoreError};
use std::collections::HashSet;
use std::sync::RwLock;
use std::time::Duration;

/// How often every id is read again from the store, bounding what a lost notification costs.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(10);

/// The peer credential ids the store holds.
pub struct KnownCredentialIds {
    ids: RwLock<HashSet<Box<str>>>,
}

impl std::fmt::Debug for KnownCredentialIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownCredentialIds")
            .field("ids", &self.len())
            .finish_non_exhaustive()
    }
}

impl KnownCredentialIds {
    /// Reads every credential id in `store`.
    pub async fn load(store: &dyn CredentialStore) -> Result<Self, StoreError> {
        let ids = store.credential_ids().await?;
        Ok(Self {
            ids: RwLock::new(ids.into_iter().map(String::into_boxed_str).collect()),
        })
    }

    /// How many ids it holds.
    pub fn len(&self) -> usize {
        self.ids.read_locked().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a credential with `token_id` may exist; `false` is final.
    pub fn holds(&self, token_id: &str) -> bool {
        self.ids.read_locked().contains(token_id)
    }

    /// A credential with `token_id` was issued.
    pub fn insert(&self, token_id: &str) {
        if !self.holds(token_id) {
            self.ids.write_locked().insert(token_id.into());
        }
    }

    /// Reads every id in `store` again and adds those it lacked (a lost notification's);
    /// returns how many.
    pub async fn reconcile(&self, store: &dyn CredentialStore) -> Result<usize, StoreError> {
        let stored = store.credential_ids().await?;
        let missing: Vec<String> = stored.into_iter().filter(|id| !self.holds(id)).collect();
        if !missing.is_empty() {
            let mut ids = self.ids.write_locked();
            for id in &missing {
                ids.insert(id.as_str().into());
            }
        }
        Ok(missing.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{AccountDefaults, AccountService, Caller, NewPeer};
    use crate::clock::ManualClock;
    use crate::token::CredentialKind;
    use std::sync::Arc;

    fn token_id(token: &str) -> String {
        crate::token::parse(CredentialKind::PeerToken, token)
            .unwrap()
            .token_id
            .to_owned()
    }

    #[tokio::test]
    async fn ids_are_known_from_the_store_notifications_and_a_re_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path()).await.unwrap();
        let clock = ManualClock::new(crate::clock::from_millis(1_800_000_000_000));
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
                .token
                .unwrap();
            token_id(&token)
        };
        let first = add("alice").await;
        let known = KnownCredentialIds::load(&*store.credentials())
            .await
            .unwrap();
        assert_eq!(known.len(), 1);
        assert!(known.holds(&first));
        assert!(!known.holds("unknown00001"), "never looked up: refused");

        // Issued elsewhere: unknown until its notification, or the re-read.
        let second = add("bob").await;
        let third = add("carol").await;
        assert!(!known.holds(&second) && !known.holds(&third));
        known.insert(&second);
        assert!(known.holds(&second));
        assert_eq!(known.reconcile(&*store.credentials()).await.unwrap(), 1);
        assert!(known.holds(&third));
        assert_eq!(known.len(), 3);
        assert_eq!(known.reconcile(&*store.credentials()).await.unwrap(), 0);
        store.close().await;
    }
}
