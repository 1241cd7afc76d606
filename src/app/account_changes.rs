//! The account changes a running gateway hears, and what they keep current: the cached
//! verdicts and budgets they make stale, and the set of known credential ids
//! ([`KnownCredentialIds`]) that refuses made-up tokens from memory.
//!
//! Changes arrive three ways: from this process's account service (the admin API) at once,
//! from other instances over the change notifier (Redis), and from the command line through
//! the store's announcements ([`crate::store::StoreEngine::announce`]). All three end in
//! [`ForgetOnChange`]. Every [`RECONCILE_EVERY`], and at once (at most once a second) when
//! changes may have been missed, the known ids are read again from the store, so a lost
//! notification delays a new credential by that much at most and never admits anyone.

use crate::admin::budget::Budgets;
use crate::layers::auth::PeerAuthenticator;
use crate::layers::auth::known_ids::{KnownCredentialIds, RECONCILE_EVERY};
use crate::shared::changes::{Change, ChangeListener};
use crate::store::{Announcements, CredentialStore, Heard};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The shortest time between two re-reads of the known ids asked for by missed changes.
const REREAD_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// Drops what the running gateway cached about a peer or an administrator when it changes,
/// and adds each credential issued to the known ids.
pub(super) struct ForgetOnChange {
    pub(super) authenticator: Arc<PeerAuthenticator>,
    pub(super) budgets: Arc<Budgets>,
    /// Wakes the re-read of the known ids.
    pub(super) reread: Arc<Notify>,
}

impl ChangeListener for ForgetOnChange {
    fn changed(&self, change: &Change) {
        match change {
            Change::Peer(peer_id) => {
                self.authenticator.forget_peer(peer_id);
                self.budgets.forget_peer(peer_id);
            }
            Change::CredentialIssued { peer_id, token_id } => {
                self.authenticator.credential_issued(peer_id, token_id);
            }
            Change::Admin(admin_id) => self.budgets.forget(admin_id),
            Change::Everyone => {
                self.authenticator.forget_everyone();
                self.budgets.forget_everyone();
                self.reread.notify_one();
            }
            // The policy's own listener reloads ([`super::reload::ReloadOnChange`]).
            Change::Policy => {}
        }
    }
}

/// Hears the command line's announcements (when the store has them) and re-reads the known
/// ids periodically and when woken, until aborted.
pub(super) fn keep_current(
    store: Arc<dyn CredentialStore>,
    known: Arc<KnownCredentialIds>,
    mut announcements: Option<Announcements>,
    listener: Arc<ForgetOnChange>,
) -> tokio::task::JoinHandle<()> {
    let reread = listener.reread.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(RECONCILE_EVERY);
        every.tick().await;
        // Once at once: a credential issued elsewhere between the ids' first reading and this
        // listener's subscription to the other instances' changes was heard by nobody.
        let mut due = true;
        let mut allowed_at = tokio::time::Instant::now();
        loop {
            let heard = async {
                match &mut announcements {
                    Some(announcements) => announcements.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                heard = heard => match heard {
                    Some(Heard::Note(note)) => {
                        if let Some((_, change)) = Change::from_wire(&note) {
                            listener.changed(&change);
                        }
                    }
                    Some(Heard::Missed) => listener.changed(&Change::Everyone),
                    Some(Heard::Applied(done)) => {
                        let _ = done.send(());
                    }
                    // The store stopped hearing (it closed): the periodic re-read goes on.
                    None => announcements = None,
                },
                () = reread.notified() => due = true,
                _ = every.tick() => due = true,
                () = tokio::time::sleep_until(allowed_at), if due => {}
            }
            if !due || tokio::time::Instant::now() < allowed_at {
                continue;
            }
            due = false;
            allowed_at = tokio::time::Instant::now() + REREAD_AT_MOST_EVERY;
            match known.reconcile(&*store).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    credentials = n,
                    "credentials issued without a notification reaching this gateway are known now"
                ),
                Err(e) => tracing::warn!(error = %e, "could not re-read the credential ids"),
            }
        }
    })
}
