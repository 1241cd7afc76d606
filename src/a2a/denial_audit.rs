//! The audit of a peer's refused calls (by the authorization policies, by the content guard):
//! the first of each kind a minute is written, off the call's path; the rest are counted in
//! the metrics only, so a peer that keeps asking cannot flood the audit log.

use crate::a2a::stages::CallView;
use crate::store::{AuditEntry, Store};
use std::sync::Arc;
use std::time::Duration;

/// Writes the first denial of each kind a minute.
pub struct DenialAudit {
    store: Store,
    written: moka::sync::Cache<Arc<str>, ()>,
}

impl DenialAudit {
    /// Denials audited in `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            written: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
        }
    }

    /// Writes `entry` (made only then), off the call's path, when it is the first denial
    /// under `key` (its kind, peer and subject) this minute.
    pub fn first_a_minute(&self, key: String, entry: impl FnOnce() -> AuditEntry) {
        if !self.written.entry(Arc::from(key)).or_insert(()).is_fresh() {
            return;
        }
        let (store, entry) = (self.store.clone(), entry());
        tokio::spawn(async move {
            if let Err(e) = store.accounts().append_audit(&entry).await {
                tracing::warn!(error = %e, "a denial could not be audited");
            }
        });
    }
}

/// The call's client address as the audit log writes it.
pub fn client_of(call: &CallView) -> String {
    call.client
        .map_or_else(|| "unknown".to_owned(), |c| c.to_string())
}
