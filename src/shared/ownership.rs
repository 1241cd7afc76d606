//! Task ownership: which running instance is answering a working task, so that an instance
//! that starts fails only the leftovers of instances that are gone, never a live one's turns.
//!
//! Every working task is stored with the id of the instance answering it. The in-process
//! engine knows one live instance, this process, whose id is new at every start: whatever an
//! earlier process left working is a leftover. An engine for several instances keeps a lease
//! per instance and calls an instance gone when its lease lapses.

use async_trait::async_trait;

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
