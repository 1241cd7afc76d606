//! What a receipt digests, and how: a value's canonical ProtoJSON ([`protojson`]) in RFC 8785
//! form, hashed with SHA-256; the answer without its history and its receipt
//! ([`answer_projection`]); a stream's events chained ([`EventChain`]).

use super::{EXTENSION, ReceiptError, b64url};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// `value` as protobuf message `name` (`lf.a2a.v1.…`) prints in the proto3 JSON mapping:
/// camelCase names, enums by name, defaults left out, 64-bit integers as strings, timestamps
/// with 0, 3, 6 or 9 fractional digits. Members the message does not have are dropped.
pub fn protojson(value: &Value, name: &str) -> Result<Value, ReceiptError> {
    let canonical = |why: String| ReceiptError::Canonical(format!("{name}: {why}"));
    let descriptor = crate::protocol::grpc::descriptor(name)
        .ok_or_else(|| canonical("unknown message".to_owned()))?;
    let message = crate::protocol::grpc::write(&descriptor, &value.to_string())
        .map_err(|_| canonical("does not fit the message".to_owned()))?;
    serde_json::to_value(&message).map_err(|e| canonical(e.to_string()))
}

/// `dig.req`: the digest of a partner's `Message`.
pub fn message_digest(message: &Value) -> Result<String, ReceiptError> {
    digest(&protojson(message, "lf.a2a.v1.Message")?)
}

/// `dig.ans`: the digest of a finished task as `GetTask` returns it ([`answer_projection`]).
pub fn answer_digest(task: &Value) -> Result<String, ReceiptError> {
    digest(&protojson(&answer_projection(task), "lf.a2a.v1.Task")?)
}

/// The base64url SHA-256 of `value` in RFC 8785 form.
pub fn digest(value: &Value) -> Result<String, ReceiptError> {
    let text = serde_json_canonicalizer::to_string(value)
        .map_err(|e| ReceiptError::Canonical(e.to_string()))?;
    Ok(b64url(&Sha256::digest(text.as_bytes())))
}

/// The part of a finished task `dig.ans` covers: the task as `GetTask` returns it without its
/// `history` and without the receipt in its `metadata` (a `metadata` left empty is dropped).
pub fn answer_projection(task: &Value) -> Value {
    let mut projection = task.clone();
    if let Some(object) = projection.as_object_mut() {
        object.remove("history");
        let emptied = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .map(|metadata| {
                metadata.remove(EXTENSION);
                metadata.is_empty()
            });
        if emptied == Some(true) {
            object.remove("metadata");
        }
    }
    projection
}

/// A running digest over a stream's events, so one receipt covers them all: a dropped,
/// repeated or reordered event changes it. `h0` is 32 zero bytes; each event `e` makes
/// `h = SHA-256(h || SHA-256(RFC 8785 of e))`; the final event is taken without the receipt in
/// its `metadata` ([`answer_projection`]'s rule). The claim is `{"n": events, "chain": h}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventChain {
    n: u64,
    hash: [u8; 32],
    /// An event could not be digested: the chain states nothing.
    failed: bool,
}

impl EventChain {
    /// Adds one event (a `StreamResponse` in ProtoJSON form); an event that cannot be digested
    /// spoils the chain ([`EventChain::claim`] refuses it).
    pub fn add(&mut self, event: &Value) -> Result<(), ReceiptError> {
        let added = self.digested(event);
        self.failed |= added.is_err();
        added
    }

    /// Marks the chain spoilt: an event was sent that it does not hold.
    pub fn spoil(&mut self) {
        self.failed = true;
    }

    fn digested(&mut self, event: &Value) -> Result<(), ReceiptError> {
        let mut event = event.clone();
        if let Some(object) = event.as_object_mut() {
            for inner in object.values_mut() {
                strip_receipt(inner);
            }
        }
        let event = protojson(&event, "lf.a2a.v1.StreamResponse")?;
        let text = serde_json_canonicalizer::to_string(&event)
            .map_err(|e| ReceiptError::Canonical(e.to_string()))?;
        let one: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let mut next = Sha256::new();
        next.update(self.hash);
        next.update(one);
        self.hash = next.finalize().into();
        self.n += 1;
        Ok(())
    }

    /// The `dig.evt` claim; none for a chain an event was missed by.
    pub fn claim(&self) -> Result<Value, ReceiptError> {
        if self.failed {
            return Err(ReceiptError::Canonical(
                "a streamed event could not be digested".to_owned(),
            ));
        }
        Ok(json!({"n": self.n, "chain": b64url(&self.hash)}))
    }
}

/// Drops the receipt from an event's `metadata` (and the `metadata` it leaves empty).
fn strip_receipt(event: &mut Value) {
    let Some(object) = event.as_object_mut() else {
        return;
    };
    let emptied = (object.get_mut("metadata").and_then(Value::as_object_mut)).map(|metadata| {
        metadata.remove(EXTENSION);
        metadata.is_empty()
    });
    if emptied == Some(true) {
        object.remove("metadata");
    }
}
