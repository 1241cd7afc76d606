//! Push notifications (`capabilities.push_notifications`): peers register callback URLs on
//! their tasks, and every state a task reaches is POSTed to each of them.
//!
//! | part | module |
//! |---|---|
//! | which URLs may be called, checked at store time and before each delivery | [`callback`] |
//! | tokens and credentials encrypted at rest | [`seal`] |
//! | the delivery loop over the store's durable queue | [`deliver`] |
//!
//! The queue lives in the store ([`crate::store::PushStore`]): a state is queued in the
//! transaction that stores it, so nothing stored goes unnotified across a crash or restart,
//! and several instances share one queue. Delivery is at-least-once: receivers should treat a
//! repeated task state as the same notification.

pub mod callback;
pub mod deliver;
pub mod seal;

use crate::clock::Clock;
use crate::store::PushStore;
use callback::CallbackPolicy;
use seal::SealingKey;
use std::sync::Arc;
use std::time::Duration;

/// What `[push]` sets.
#[derive(Debug, Clone)]
pub struct PushSettings {
    /// Configs one task may have.
    pub max_configs_per_task: u32,
    /// Attempts per notification before it becomes a dead letter.
    pub max_attempts: u32,
    /// Deliveries in flight at once.
    pub deliveries_at_once: u32,
    /// Deliveries of one peer's tasks in flight at once.
    pub deliveries_per_peer: u32,
    /// How long one delivery may take.
    pub timeout: Duration,
}

/// Push notifications as the agent and the delivery loop share them.
pub struct Push {
    /// Configs and the queue.
    pub store: Arc<dyn PushStore>,
    /// Seals and opens configs' secrets.
    pub key: SealingKey,
    /// Which callbacks may be called.
    pub callbacks: CallbackPolicy,
    /// Limits.
    pub settings: PushSettings,
    /// Time for the queue (due times, claims).
    pub clock: Arc<dyn Clock>,
    /// Where attempts are counted (`/metrics`).
    pub metrics: Arc<crate::layers::metrics::Metrics>,
    /// Each delivery's span, when traces are exported.
    pub tracing: Option<Arc<crate::telemetry::Tracing>>,
    /// Rings when a state was queued or a delivery slot came free.
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("callbacks", &self.callbacks)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Push {
    /// Push over `store`.
    pub fn new(
        store: Arc<dyn PushStore>,
        key: SealingKey,
        callbacks: CallbackPolicy,
        settings: PushSettings,
        clock: Arc<dyn Clock>,
        metrics: Arc<crate::layers::metrics::Metrics>,
    ) -> Self {
        Self {
            store,
            key,
            callbacks,
            settings,
            clock,
            metrics,
            tracing: None,
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Each delivery with a span of its own (`tracing`, when traces are exported).
    pub fn traced(mut self, tracing: Option<Arc<crate::telemetry::Tracing>>) -> Self {
        self.tracing = tracing;
        self
    }

    /// Tells the delivery loop that something may be due now rather than at its next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}
