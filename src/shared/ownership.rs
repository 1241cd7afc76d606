//! Task ownership: which running instance is answering a working task, so that an instance
//! that starts fails only the leftovers of instances that are gone, never a live one's turns.
//!
//! Every working task is stored with the id of the instance answering it. The in-process
//! engine knows one live instance, this process, whose id is new at every start: whatever an
//! earlier process left working is a leftover. The engine for several instances,
//! [`LeasedInstances`], asks the store's registry whether an instance's lease is current.

use crate::store::InstanceRegistry;
use async_trait::async_trait;
use std::sync::Arc;

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
/// current. This instance renews its own (see [`LeasedInstances::renew`]).
#[derive(Debug)]
pub struct LeasedInstances {
    id: String,
    registry: Arc<dyn InstanceRegistry>,
}

impl LeasedInstances {
    /// A new instance id, with leases kept in `registry`.
    pub fn new(registry: Arc<dyn InstanceRegistry>) -> Self {
        Self {
            id: SingleInstance::default().id,
            registry,
        }
    }

    /// Renews this instance's lease for `lease`.
    pub async fn renew(&self, lease: std::time::Duration) -> Result<(), crate::store::StoreError> {
        self.registry.renew_lease(&self.id, lease).await
    }

    /// Ends this instance's lease (a clean stop).
    pub async fn end(&self) {
        let _ = self.registry.end_lease(&self.id).await;
    }
}

#[async_trait]
impl TaskOwnership for LeasedInstances {
    fn instance(&self) -> &str {
        &self.id
    }

    async fn is_live(&self, instance: &str) -> bool {
        // In doubt (the store did not answer), live: a live instance's turn is never failed.
        instance == self.id || self.registry.holds_lease(instance).await.unwrap_or(true)
    }
}
