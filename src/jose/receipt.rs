//! Answer receipts: a compact JWS the gateway signs when a task reaches a terminal state,
//! naming who asked (the peer, and the credential it signed in with), what was asked and what
//! was answered (digests of both), under which card, and when. A partner keeps it and can show
//! it to anyone, offline, against the keys the signed card publishes.
//!
//! Typed `a2a-receipt+jwt` (RFC 8725 §3.11), so a receipt never passes as a card signature
//! (`JOSE`), an access token (`at+jwt`) or a caller's assertion, nor any of those as a receipt;
//! signed with an asymmetric key only (a shared secret would let the verifier forge one).
//!
//! **Which bytes are digested** (`dig`, each the base64url SHA-256 of the RFC 8785 form of a
//! value's canonical ProtoJSON, [`protojson`]: what any protobuf library prints for the message,
//! so a partner on gRPC, which receives no JSON, and one on JSON-RPC digest alike):
//! * `req`: the partner's `Message` as the gateway read it ([`message_digest`]);
//! * `ans`: the task as `GetTask` returns it once terminal, without `history` (the request is
//!   covered by `req`) and without this receipt in its `metadata` ([`answer_digest`]);
//! * `evt`: a stream's `StreamResponse` events in order ([`EventChain`]).

use super::sign::{CardSigningKey, JwsAlgorithm};
use super::verify::TrustedKeys;
use crate::clock::{Timestamp, rfc3339_millis};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The receipt's `typ`.
pub const TYP: &str = "a2a-receipt+jwt";

/// The extension the card declares and a task's metadata holds the receipt under.
pub const EXTENSION: &str = "urn:peergate:ext:receipts:v1";

/// The algorithms a receipt is signed with.
pub const ALGORITHMS: [&str; 2] = ["EdDSA", "ES256"];

/// How far in the future a receipt's `iat` may be and still verify (the verifier's clock and
/// the gateway's differ).
pub const SKEW_SECONDS: i64 = 300;

/// Why a receipt was not made or did not verify. The text names the check, never a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// Not a compact JWS of three base64url parts with JSON header and claims.
    #[error("not a receipt: {0}")]
    Malformed(&'static str),
    /// The header's `typ` is not [`TYP`].
    #[error("typ is {0:?}, not \"a2a-receipt+jwt\"")]
    WrongType(String),
    /// The algorithm is not one receipts are signed with, or not the key's.
    #[error("alg {0:?} is not EdDSA or ES256, or not the algorithm of its key")]
    WrongAlgorithm(String),
    /// No key with the header's `kid` is trusted.
    #[error("no trusted key has kid {0:?}")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// A claim differs from what the verifier expects.
    #[error("{claim}: {why}")]
    Claim {
        /// The claim.
        claim: &'static str,
        /// How it differs (never the value of a secret).
        why: String,
    },
    /// A value could not be put in canonical form.
    #[error("cannot canonicalize: {0}")]
    Canonical(String),
    /// A shared-secret key was offered for signing.
    #[error(
        "a shared-secret key cannot sign receipts: whoever verifies would hold the key that forges them (use EdDSA or ES256)"
    )]
    SharedSecret,
}

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

/// What one receipt states about a finished task (besides who signs it, for whom and when).
#[derive(Debug, Clone)]
pub struct Statement {
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub binding: &'static str,
    /// The A2A method that was called (`SendMessage`, `CancelTask`, …).
    pub method: &'static str,
    /// The task.
    pub task: String,
    /// Its context.
    pub context: String,
    /// The partner's message it answers.
    pub message: String,
    /// The terminal state (`TASK_STATE_…`).
    pub state: &'static str,
    /// When the request arrived.
    pub received: Timestamp,
    /// When the answer was made.
    pub answered: Timestamp,
    /// How the peer signed in (`cred`).
    pub credential: Value,
    /// The digest of the signed card in force.
    pub card: String,
    /// `dig.req`.
    pub request: String,
    /// `dig.ans`.
    pub answer: String,
    /// In front of an agent: `{task, ans, rcpt?}` of its answer.
    pub upstream: Option<Value>,
    /// A stream's events, as [`EventChain::claim`] states them.
    pub events: Option<Value>,
}

/// Signs receipts with one key, as one gateway.
#[derive(Debug, Clone)]
pub struct ReceiptSigner {
    key: CardSigningKey,
    issuer: String,
}

impl ReceiptSigner {
    /// Receipts issued as `issuer` (the card's origin), signed with `key`; a shared secret is
    /// refused.
    pub fn new(key: CardSigningKey, issuer: String) -> Result<Self, ReceiptError> {
        if key.algorithm() == JwsAlgorithm::Hs256 {
            return Err(ReceiptError::SharedSecret);
        }
        Ok(Self { key, issuer })
    }

    /// The key's id, as the JWKS lists it.
    pub fn kid(&self) -> &str {
        self.key.kid()
    }

    /// The algorithm.
    pub fn alg(&self) -> &'static str {
        self.key.alg()
    }

    /// A receipt of `statement` for the peer `peer_id`, signed at `now`.
    pub fn sign(&self, peer_id: &str, statement: &Statement, now: Timestamp) -> String {
        let header = json!({"alg": self.key.alg(), "kid": self.key.kid(), "typ": TYP});
        let mut claims = json!({
            "iss": self.issuer,
            "sub": peer_id,
            "aud": peer_id,
            "jti": uuid::Uuid::now_v7().to_string(),
            "iat": now.as_second(),
            "a2a": {
                "v": crate::protocol::VERSION,
                "binding": statement.binding,
                "method": statement.method,
                "task": statement.task,
                "context": statement.context,
                "message": statement.message,
                "state": statement.state,
                "received": rfc3339_millis(statement.received),
                "answered": rfc3339_millis(statement.answered),
            },
            "dig": {"alg": "sha-256", "req": statement.request, "ans": statement.answer},
            "cred": statement.credential,
            "card": statement.card,
        });
        if let Some(upstream) = &statement.upstream {
            claims["up"] = upstream.clone();
        }
        if let Some(events) = &statement.events {
            claims["dig"]["evt"] = events.clone();
        }
        self.key.sign_compact(&header, &claims)
    }
}

/// What a verifier expects of a receipt besides its signature.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The gateway (the card's origin).
    pub issuer: &'a str,
    /// The peer it was made for, when the verifier knows its id.
    pub audience: Option<&'a str>,
    /// The verifier's clock.
    pub now: Timestamp,
}

/// The claims of `receipt`, once its type, algorithm, key, signature, issuer, audience and
/// time are checked against `keys` and `expected`.
pub fn verify(
    receipt: &str,
    keys: &TrustedKeys,
    expected: Expected<'_>,
) -> Result<Value, ReceiptError> {
    let mut parts = receipt.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReceiptError::Malformed("a compact JWS has three parts"));
    };
    let decoded_header: Value = json_part(header)?;
    let typ = decoded_header["typ"].as_str().unwrap_or_default();
    if typ != TYP {
        return Err(ReceiptError::WrongType(typ.to_owned()));
    }
    let alg = decoded_header["alg"].as_str().unwrap_or_default();
    let kid = decoded_header["kid"].as_str().unwrap_or_default();
    let Some(key_alg) = keys.algorithm(kid) else {
        return Err(ReceiptError::UnknownKey(kid.to_owned()));
    };
    if !ALGORITHMS.contains(&alg) || key_alg != alg {
        return Err(ReceiptError::WrongAlgorithm(alg.to_owned()));
    }
    let signature = decode(signature)?;
    let input = format!("{header}.{claims}");
    match keys.verify_raw(kid, input.as_bytes(), &signature) {
        Ok(true) => {}
        _ => return Err(ReceiptError::BadSignature),
    }
    let claims: Value = json_part(claims)?;
    check_claims(&claims, expected)?;
    Ok(claims)
}

fn check_claims(claims: &Value, expected: Expected<'_>) -> Result<(), ReceiptError> {
    let differs = |claim: &'static str, why: String| Err(ReceiptError::Claim { claim, why });
    if claims["iss"].as_str() != Some(expected.issuer) {
        return differs("iss", format!("not issued by {}", expected.issuer));
    }
    if let Some(audience) = expected.audience
        && claims["aud"].as_str() != Some(audience)
    {
        return differs("aud", "made for another peer".to_owned());
    }
    let Some(iat) = claims["iat"].as_i64() else {
        return differs("iat", "missing or not an integer".to_owned());
    };
    if iat > expected.now.as_second() + SKEW_SECONDS {
        return differs(
            "iat",
            "signed in the future beyond the allowed skew".to_owned(),
        );
    }
    if claims["dig"]["alg"].as_str() != Some("sha-256") {
        return differs("dig.alg", "not sha-256".to_owned());
    }
    Ok(())
}

fn json_part(part: &str) -> Result<Value, ReceiptError> {
    let bytes = decode(part)?;
    serde_json::from_slice(&bytes).map_err(|_| ReceiptError::Malformed("a part is not JSON"))
}

fn decode(part: &str) -> Result<Vec<u8>, ReceiptError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| ReceiptError::Malformed("a part is not base64url"))
}

/// A running digest over a stream's events, so one receipt covers them all: a dropped,
/// repeated or reordered event changes it. `h0` is 32 zero bytes; each event `e` makes
/// `h = SHA-256(h || SHA-256(RFC 8785 of e))`; the final event is taken without the receipt in
/// its `metadata` ([`answer_projection`]'s rule). The claim is `{"n": events, "chain": h}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventChain {
    n: u64,
    hash: [u8; 32],
}

impl EventChain {
    /// Adds one event (a `StreamResponse` in ProtoJSON form).
    pub fn add(&mut self, event: &Value) -> Result<(), ReceiptError> {
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

    /// The `dig.evt` claim.
    pub fn claim(&self) -> Value {
        json!({"n": self.n, "chain": b64url(&self.hash)})
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

/// The base64url SHA-256 of `bytes` (an access token's `ath`).
pub fn sha256_b64url(bytes: &[u8]) -> String {
    b64url(&Sha256::digest(bytes))
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests;
