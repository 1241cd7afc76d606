//! The extended card of a peer its administrator limited to some operations: the capabilities
//! it may not use say so (no streaming when it may neither stream a message nor follow a task;
//! no push notifications when it may touch no push config), signed like every card. Made when
//! such a peer first asks, kept per (identity provider, operations), since few sets exist.

use crate::jose::sign::{self, CardSigningKey};
use crate::locks::Locked;
use crate::protocol::jsonrpc::Method;
use crate::protocol::operations::OperationSet;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most narrowed cards kept; past it they are signed again on each ask (a bound on what
/// many distinct sets could hold).
const KEPT: usize = 256;

/// The signed narrowed cards, as JSON text, by (identity provider, operations).
type Kept = HashMap<(Option<String>, OperationSet), Arc<str>>;

/// The unsigned extended cards and the keys that sign them, for narrowing per peer.
pub struct PeerCards {
    extended: Value,
    by_issuer: HashMap<String, Value>,
    keys: Vec<CardSigningKey>,
    jku: Option<String>,
    kept: Mutex<Kept>,
}

impl std::fmt::Debug for PeerCards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCards").finish_non_exhaustive()
    }
}

impl PeerCards {
    /// Over the unsigned `extended` card and each non-public provider's, signed with `keys`.
    pub fn new(
        extended: Value,
        by_issuer: HashMap<String, Value>,
        keys: Vec<CardSigningKey>,
        jku: Option<String>,
    ) -> Self {
        Self {
            extended,
            by_issuer,
            keys,
            jku,
            kept: Mutex::default(),
        }
    }

    /// The signed extended card, as JSON text, of a peer signed in with `issuer`'s token (or
    /// a credential of peergate's) and limited to `operations`.
    pub fn for_peer(&self, issuer: Option<&str>, operations: OperationSet) -> Option<Arc<str>> {
        let key = (issuer.map(str::to_owned), operations);
        if let Some(kept) = self.kept.locked().get(&key) {
            return Some(kept.clone());
        }
        let card = issuer
            .and_then(|issuer| self.by_issuer.get(issuer))
            .unwrap_or(&self.extended);
        let signed =
            sign::sign_card(&narrowed(card, operations), &self.keys, self.jku.as_deref()).ok()?;
        let text: Arc<str> = serde_json::to_string(&signed).ok()?.into();
        let mut kept = self.kept.locked();
        if kept.len() < KEPT {
            kept.insert(key, text.clone());
        }
        Some(text)
    }
}

/// `card` with the capabilities a peer limited to `operations` cannot use turned off.
fn narrowed(card: &Value, operations: OperationSet) -> Value {
    let mut card = card.clone();
    let may = |methods: &[Method]| methods.iter().any(|m| operations.contains(*m));
    let streams = may(&[Method::SendStreamingMessage, Method::SubscribeToTask]);
    let pushes = may(&[
        Method::CreatePushConfig,
        Method::GetPushConfig,
        Method::ListPushConfigs,
        Method::DeletePushConfig,
    ]);
    if let Some(capabilities) = card.get_mut("capabilities").and_then(Value::as_object_mut) {
        if !streams {
            capabilities.insert("streaming".to_owned(), Value::Bool(false));
        }
        if !pushes {
            capabilities.insert("pushNotifications".to_owned(), Value::Bool(false));
        }
    }
    card
}
