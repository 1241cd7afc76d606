//! Change notifications: a peer or an administrator changed, so every cache that holds them
//! forgets them, and a credential was issued, so every instance's set of known credential ids
//! holds it.
//!
//! The account service publishes each change once; the in-process engine calls this process's
//! subscribers at once, so a change made here applies to the very next request. An engine for
//! several instances also carries the change to the others (Redis pub/sub), and the command
//! line announces its changes to running servers through the store (see
//! [`crate::store::StoreEngine::announce`]); both carry them in the one wire form of
//! [`Change::to_wire`].

use crate::locks::{Locked, ReadWriteLocked};
use crate::store::{AdminId, PeerId};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::{Arc, RwLock};

/// Something that changed in the accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A peer's credentials, quota or expiry changed (by its id).
    Peer(PeerId),
    /// A peer was given a credential (a token or an API key): its id is known from now on.
    /// Implies [`Change::Peer`].
    CredentialIssued {
        /// The peer's id.
        peer_id: PeerId,
        /// The credential's public token id (never its secret).
        token_id: String,
    },
    /// An administrator's budget or status changed (by their id).
    Admin(AdminId),
    /// Anything may have changed (changes may have been missed): forget everything.
    Everyone,
    /// An instance reloaded its policy: each reads its own file again (and applies it when
    /// its text changed).
    Policy,
}

/// A change on the wire: JSON, naming the process that published it so it can skip its own.
#[derive(Serialize, Deserialize)]
struct WireChange<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    /// `peer`, `credential`, `admin`, `everyone` or `policy`.
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    /// The token id of a `credential`.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    token: Option<Cow<'a, str>>,
}

/// The longest token id a wire change may carry (peergate's are 12 characters).
const LONGEST_WIRE_ID: usize = 128;

impl Change {
    /// The change as sent to other processes, from `from`.
    pub fn to_wire(&self, from: &str) -> String {
        let (kind, id, token) = match self {
            Self::Peer(id) => ("peer", id.as_str(), None),
            Self::CredentialIssued { peer_id, token_id } => {
                ("credential", peer_id.as_str(), Some(token_id.as_str()))
            }
            Self::Admin(id) => ("admin", id.as_str(), None),
            Self::Everyone => ("everyone", "", None),
            Self::Policy => ("policy", "", None),
        };
        let wire = WireChange {
            from: Cow::Borrowed(from),
            kind: Cow::Borrowed(kind),
            id: Cow::Borrowed(id),
            token: token.map(Cow::Borrowed),
        };
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// A change read from the wire, with who published it; `None` for anything else (a
    /// newer release's kind, or junk), which is ignored.
    pub fn from_wire(payload: &str) -> Option<(String, Self)> {
        let wire: WireChange<'_> = serde_json::from_str(payload).ok()?;
        if wire.id.len() > LONGEST_WIRE_ID
            || wire
                .token
                .as_ref()
                .is_some_and(|t| t.len() > LONGEST_WIRE_ID)
        {
            return None;
        }
        let change = match (&*wire.kind, wire.token) {
            ("peer", _) => Self::Peer(wire.id.as_ref().into()),
            ("credential", Some(token)) => Self::CredentialIssued {
                peer_id: wire.id.as_ref().into(),
                token_id: token.into_owned(),
            },
            ("admin", _) => Self::Admin(wire.id.as_ref().into()),
            ("everyone", _) => Self::Everyone,
            ("policy", _) => Self::Policy,
            _ => return None,
        };
        Some((wire.from.into_owned(), change))
    }
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
    /// Tells the other processes only, not this one's subscribers: for a change this process
    /// has already acted on (its own reload must not come back to it as another's).
    fn tell_others(&self, change: Change);
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
        let listeners = self.listeners.read_locked();
        for listener in listeners.iter() {
            listener.changed(&change);
        }
    }

    /// One process: there is no other to tell.
    fn tell_others(&self, _change: Change) {}

    fn subscribe(&self, listener: Arc<dyn ChangeListener>) {
        self.listeners.write_locked().push(listener);
    }
}

/// Holds the changes made by a short-lived process (the command line), to announce them to
/// running servers once its work is done (see [`crate::store::Store::announce`]).
#[derive(Debug, Default)]
pub struct CollectedChanges(std::sync::Mutex<Vec<Change>>);

impl CollectedChanges {
    /// The changes published so far, emptied.
    pub fn take(&self) -> Vec<Change> {
        std::mem::take(&mut *self.0.locked())
    }
}

impl ChangeNotifier for CollectedChanges {
    fn publish(&self, change: Change) {
        self.0.locked().push(change);
    }

    fn tell_others(&self, change: Change) {
        self.publish(change);
    }

    fn subscribe(&self, _listener: Arc<dyn ChangeListener>) {}
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

    #[test]
    fn changes_read_back_from_the_wire_as_they_were_sent() {
        let changes = [
            Change::Peer("p1".into()),
            Change::CredentialIssued {
                peer_id: "p1".into(),
                token_id: "AbCdEf123456".into(),
            },
            Change::Admin("a1".into()),
            Change::Everyone,
        ];
        for change in changes {
            let wire = change.to_wire("instance-1");
            assert_eq!(
                Change::from_wire(&wire),
                Some(("instance-1".to_owned(), change))
            );
        }
        for junk in [
            "",
            "{}",
            r#"{"from":"x","kind":"credential","id":"p1"}"#,
            r#"{"from":"x","kind":"later","id":"p1"}"#,
        ] {
            assert_eq!(Change::from_wire(junk), None, "{junk}");
        }
        let long = format!(r#"{{"from":"x","kind":"peer","id":"{}"}}"#, "p".repeat(129));
        assert_eq!(Change::from_wire(&long), None);
    }
}
