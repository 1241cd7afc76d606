//! Change notifications: a peer or an administrator changed, so every cache that holds them
//! forgets them.
//!
//! The account service publishes each change once; the in-process engine calls this process's
//! subscribers at once, so a change made here applies to the very next request. An engine for
//! several instances also carries the change to the others (Redis pub/sub), bounding how long
//! they keep a revoked credential.

use std::sync::{Arc, RwLock};

/// Something that changed in the accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A peer's credentials, quota or expiry changed (by its id).
    Peer(String),
    /// An administrator's budget or status changed (by their id).
    Admin(String),
    /// Anything may have changed (changes may have been missed): forget everything.
    Everyone,
}

/// A cache that must forget what changed.
pub trait ChangeListener: Send + Sync {
    /// Forgets what it holds about the peer or administrator that changed.
    fn changed(&self, change: &Change);
}

/// Carries changes to every subscriber.
pub trait ChangeNotifier: Send + Sync + std::fmt::Debug {
    /// Tells every subscriber about `change`.
    fn publish(&self, change: Change);
    /// Adds a subscriber.
    fn subscribe(&self, listener: Arc<dyn ChangeListener>);
}

/// The in-process engine: subscribers are called in the publishing thread.
#[derive(Default)]
pub struct LocalChanges {
    listeners: RwLock<Vec<Arc<dyn ChangeListener>>>,
}

impl std::fmt::Debug for LocalChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalChanges").finish_non_exhaustive()
    }
}

impl ChangeNotifier for LocalChanges {
    fn publish(&self, change: Change) {
        let listeners = self.listeners.read().unwrap_or_else(|e| e.into_inner());
        for listener in listeners.iter() {
            listener.changed(&change);
        }
    }

    fn subscribe(&self, listener: Arc<dyn ChangeListener>) {
        self.listeners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<Change>>);

    impl ChangeListener for Seen {
        fn changed(&self, change: &Change) {
            self.0.lock().unwrap().push(change.clone());
        }
    }

    #[test]
    fn every_subscriber_hears_every_change() {
        let changes = LocalChanges::default();
        let (first, second) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
        changes.subscribe(first.clone());
        changes.subscribe(second.clone());
        changes.publish(Change::Peer("p1".into()));
        changes.publish(Change::Admin("a1".into()));
        let expected = [Change::Peer("p1".into()), Change::Admin("a1".into())];
        assert_eq!(*first.0.lock().unwrap(), expected);
        assert_eq!(*second.0.lock().unwrap(), expected);
    }
}
