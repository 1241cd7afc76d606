//! The failed-attempt budget per client address, one implementation for the door and the admin
//! API: a password is counted before its Argon2 work and given back when it verifies, so
//! guessing (and the work it causes) stays bounded, concurrent guesses too; a generated token is
//! counted only when it fails. It tracks at most `limits.tracked_addresses` addresses; past
//! that, a new address takes the place of the one closest to rested.

use crate::clock::Clock;
use crate::guard::admission::{Admission, LocalKey};
use crate::layers::limit::{Decision, Limit, LimitConfigError, Quota, RateLimited, check_config};
use crate::shared::admission::LimitAsk;
use crate::shared::rate_limit::{LocalLimiter, RateLimiter};
use std::net::IpAddr;
use std::sync::Arc;

/// Failed attempts counted across instances: the shared limiter, and the in-process one that
/// answers for attempts counted in a request's admission while Redis does not.
pub type SharedAttempts = (Arc<dyn RateLimiter<IpAddr>>, Arc<LocalLimiter<IpAddr>>);

/// Failed attempts per client address.
#[derive(Debug, Clone)]
pub struct FailedAttempts {
    limiter: Arc<dyn RateLimiter<IpAddr>>,
    quota: Quota,
    /// Across instances: the in-process limiter that answers while Redis does not, for
    /// attempts counted in a request's [`Admission`].
    admitted: Option<Arc<LocalLimiter<IpAddr>>>,
}

impl FailedAttempts {
    /// `quota` attempts per address, counted by `limiter` (an engine shared by instances).
    pub fn with_limiter(quota: Quota, limiter: Arc<dyn RateLimiter<IpAddr>>) -> Self {
        Self {
            limiter,
            quota,
            admitted: None,
        }
    }

    /// `quota` attempts per address across instances: counted by `limiter`, or, for a
    /// request whose shared checks wait in an [`Admission`], in the same call as they are
    /// (`local` answering while Redis does not).
    pub fn admitted(
        quota: Quota,
        limiter: Arc<dyn RateLimiter<IpAddr>>,
        local: Arc<LocalLimiter<IpAddr>>,
    ) -> Self {
        Self {
            limiter,
            quota,
            admitted: Some(local),
        }
    }

    /// `quota` attempts per address, tracking at most about `tracked_addresses` addresses.
    pub fn new(
        quota: Quota,
        tracked_addresses: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LimitConfigError> {
        check_config(quota, tracked_addresses)?;
        Ok(Self {
            limiter: Arc::new(LocalLimiter::new(tracked_addresses, clock)),
            quota,
            admitted: None,
        })
    }

    /// Counts one attempt from `client`; refuses when its budget is spent.
    pub async fn spend(&self, client: IpAddr) -> Result<(), RateLimited> {
        self.spend_admitted(client, None).await
    }

    /// [`FailedAttempts::spend`], counted in the request's `admission` when there is one: in
    /// the same call as the limits waiting there (its address's), whose refusal it may be.
    pub async fn spend_admitted(
        &self,
        client: IpAddr,
        admission: Option<&Admission>,
    ) -> Result<(), RateLimited> {
        if let (Some(local), Some(admission)) = (&self.admitted, admission) {
            let ask = LimitAsk {
                key: format!("peergate:failed-auth:{client}"),
                quota: self.quota,
            };
            let local = LocalKey::new(local.clone(), client, self.quota);
            admission.defer(Limit::FailedAuth, ask, local, None);
            return admission.settle(None, None).await.map(|_| ());
        }
        match self.limiter.check(&client, self.quota).await {
            Decision::Allowed { .. } => Ok(()),
            Decision::Denied { retry_after } => Err(RateLimited {
                limit: Limit::FailedAuth,
                retry_after,
                quota: self.quota,
            }),
        }
    }

    /// Gives back the attempt of a credential that turned out valid.
    pub fn refund(&self, client: IpAddr) {
        self.limiter.refund(&client, self.quota);
    }

    /// Forgets addresses whose budget is whole again.
    pub fn forget_rested(&self) {
        self.limiter.forget_rested();
    }
}
