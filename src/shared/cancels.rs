//! Cancel requests across instances: `CancelTask` reaches a turn another instance is answering.
//!
//! An instance that cannot find a running turn in its own registry asks every instance; the
//! one answering the turn stops it as if the peer had asked it directly (the peer was checked
//! by the asking instance, and the request names the peer, so a turn is only ever stopped for
//! its own peer). The in-process engine has no other instance to ask.

use crate::store::PeerId;
use std::sync::Arc;

/// Hears cancel requests for turns this instance may be answering.
pub type CancelListener = Arc<dyn Fn(&PeerId, &str) + Send + Sync>;

/// Carries cancel requests to the other instances.
pub trait CancelRequests: Send + Sync + std::fmt::Debug {
    /// Asks the other instances to cancel `task_id` of `peer_id` if one is answering it.
    fn request(&self, peer_id: &PeerId, task_id: &str);
    /// Adds the listener that stops this instance's turns (called with peer id and task id).
    fn subscribe(&self, listener: CancelListener);
}

/// The in-process engine: one instance, nobody else to ask.
#[derive(Debug, Default)]
pub struct NoOtherInstances;

impl CancelRequests for NoOtherInstances {
    fn request(&self, _peer_id: &PeerId, _task_id: &str) {}
    fn subscribe(&self, _listener: CancelListener) {}
}
