//! What runs once a minute beside the listeners.

use super::documents::{JwksRefresh, build_jwks};
use crate::a2a::agent::Agent;
use crate::admin::budget::Budgets;
use crate::clock::Clock;
use crate::layers::auth::PeerAuthenticator;
use crate::layers::limit::{PerIpLimitLayer, PerPeerLimitLayer};
use crate::locks::ReadWriteLocked;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// What the gateway keeps in memory about clients and owners, bounded and purged periodically.
pub(super) struct Caches {
    pub(super) per_ip: PerIpLimitLayer,
    pub(super) per_peer: PerPeerLimitLayer,
    pub(super) authenticator: Arc<PeerAuthenticator>,
    pub(super) budgets: Arc<Budgets>,
}

impl Caches {
    /// The guards' caches and the budgets'.
    pub(super) fn of(guards: crate::http::door::DoorGuards, budgets: Arc<Budgets>) -> Self {
        Self {
            per_ip: guards.per_ip,
            per_peer: guards.per_peer,
            authenticator: guards.authenticator,
            budgets,
        }
    }

    fn purge(&self) {
        self.per_ip.limiter().forget_rested();
        self.per_peer.limiter().forget_rested();
        self.authenticator.purge();
        self.budgets.purge();
    }
}

/// Once a minute: rebuilds the key set when the day changes, purges the caches, fails the tasks
/// that lost their turn and (on the leading instance) removes expired tasks (`GetTask` already
/// hides them before that).
#[allow(clippy::too_many_arguments)]
pub(super) async fn housekeeping(
    store: Store,
    registry: Option<Arc<dyn crate::store::InstanceRegistry>>,
    clock: Arc<dyn Clock>,
    caches: Caches,
    agent: Arc<Agent>,
    request_timeout: Duration,
    mut jwks: JwksRefresh,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let today = crate::clock::UtcDay::of(clock.now());
        if today != jwks.day {
            match build_jwks(&store, &jwks.published, today, clock.now()).await {
                Ok(document) => {
                    *jwks.document.write_locked() = Arc::new(document);
                    jwks.day = today;
                }
                Err(e) => tracing::warn!(error = %e, "could not rebuild the JWKS"),
            }
        }
        caches.purge();
        // A task still working past the request timeout lost its turn (its answer could not be
        // stored): say so instead of leaving it working until the next start.
        let cutoff = crate::clock::earlier(clock.now(), request_timeout);
        match agent.fail_interrupted_tasks(Some(cutoff)).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                tasks = n,
                "tasks that lost their turn are now failed (interrupted)"
            ),
            Err(e) => tracing::warn!(error = %e, "could not fail interrupted tasks"),
        }
        // Once across the cluster: the instance leading housekeeping removes expired tasks.
        let leading = match &registry {
            Some(registry) => matches!(
                tokio::time::timeout(Duration::from_secs(5), registry.lead_housekeeping()).await,
                Ok(Ok(true))
            ),
            None => true,
        };
        if !leading {
            continue;
        }
        match store.tasks().delete_expired_tasks(clock.now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(removed = n, "expired tasks removed"),
            Err(e) => tracing::warn!(error = %e, "could not remove expired tasks"),
        }
    }
}
