//! Task ownership: which running instance is answering a working task, so that an instance
//! that starts fails only the leftovers of instances that are gone, never a live one's turns.
//!
//! Every working task is stored with the id of the instance answering it. The in-process
//! engine knows one live instance, this process, whose id is new at every start: whatever an
//! earlier process left working is a leftover. The engine for several instances,
//! [`LeasedInstances`], asks the store's registry whether an instance's lease is current.

use crate::locks::Locked;
use crate::store::InstanceRegistry;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// Who is answering what.
#[async_trait]
pub trait TaskOwnership: Send + Sync + std::fmt::Debug {
    /// This instance's id, stored with every task it starts.
    fn instance(&self) -> &str;
    /// Whether `instance` is still running (so its working tasks are still being answered).
    async fn is_live(&self, instance: &str) -> bool;
}

/// The in-process engine: this process is the only live instance.
#[derive(Debug)]
pub struct SingleInstance {
    id: String,
}

impl Default for SingleInstance {
    fn default() -> Self {
        Self {
            id: format!("ins_{}", uuid::Uuid::now_v7().simple()),
        }
    }
}

#[async_trait]
impl TaskOwnership for SingleInstance {
    fn instance(&self) -> &str {
        &self.id
    }

    async fn is_live(&self, instance: &str) -> bool {
        instance == self.id
    }
}

/// The engine for several instances: an instance is live while its lease in the store is
/// current, or lapsed less than one lease ago.
///
/// Two rules keep a live instance's turns from being failed when leases lapse for reasons other
/// than death (a store that was away, a saturated pool): another instance counts as gone only
/// after its lease lapsed a whole lease ago, and this instance judges others only after renewing
/// its own without a break for a whole lease, so that every live instance that reaches the store
/// has renewed meanwhile. In doubt (the store does not answer in time), an instance is live.
#[derive(Debug)]
pub struct LeasedInstances {
    id: String,
    registry: Arc<dyn InstanceRegistry>,
    lease: Duration,
    /// Since when renewals have succeeded without a break.
    renewing_since: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl LeasedInstances {
    /// A new instance id, with leases of `lease` kept in `registry`.
    pub fn new(registry: Arc<dyn InstanceRegistry>, lease: Duration) -> Self {
        Self {
            id: SingleInstance::default().id,
            registry,
            lease,
            renewing_since: std::sync::Mutex::new(None),
        }
    }

    /// Renews this instance's lease, waiting at most a third of it.
    pub async fn renew(&self) -> Result<(), crate::store::StoreError> {
        let renewed = tokio::time::timeout(
            self.lease / 3,
            self.registry.renew_lease(&self.id, self.lease),
        )
        .await
        .unwrap_or(Err(crate::store::StoreError::TimedOut));
        let mut since = self.renewing_since.locked();
        match &renewed {
            Ok(()) => {
                since.get_or_insert_with(tokio::time::Instant::now);
            }
            Err(_) => *since = None,
        }
        renewed
    }

    /// Whether this instance may call others gone: it has renewed without a break for a whole
    /// lease.
    pub fn may_judge(&self) -> bool {
        self.renewing_since
            .locked()
            .is_some_and(|since| since.elapsed() >= self.lease)
    }

    /// Ends this instance's lease (a clean stop).
    pub async fn end(&self) {
        let _ = tokio::time::timeout(self.lease / 3, self.registry.end_lease(&self.id)).await;
    }
}

#[async_trait]
impl TaskOwnership for LeasedInstances {
    fn instance(&self) -> &str {
        &self.id
    }

    async fn is_live(&self, instance: &str) -> bool {
        if instance == self.id || !self.may_judge() {
            return true;
        }
        let asked = self.registry.holds_lease(instance, self.lease);
        match tokio::time::timeout(self.lease / 3, asked).await {
            Ok(Ok(live)) => live,
            // In doubt, live: a live instance's turn is never failed on a guess.
            _ => true,
        }
    }
}
