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

/// What one receipt states about a finished task (besides who signs it, for whom and when).
#[derive(Debug, Clone)]
pub struct Statement {
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub binding: std::borrow::Cow<'static, str>,
    /// The A2A method that was called (`SendMessage`, `CancelTask`, …).
    pub method: std::borrow::Cow<'static, str>,
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
    /// A stream's events, as [`EventChain::claim`] states them.
    pub events: Option<Value>,
    /// In front of an agent: its task, and digests of its answer and receipt (`up`).
    pub upstream: Option<Value>,
}

/// Signs receipts with one key, as one gateway.
#[derive(Debug, Clone)]
pub struct ReceiptSigner {
    key: CardSigningKey,
    issuer: String,
    /// What the receipts promise of the answer log (`log`), when there is one.
    log: Option<Value>,
}

impl ReceiptSigner {
    /// Receipts issued as `issuer` (the card's origin), signed with `key`; a shared secret is
    /// refused.
    pub fn new(key: CardSigningKey, issuer: String) -> Result<Self, ReceiptError> {
        if key.algorithm() == JwsAlgorithm::Hs256 {
            return Err(ReceiptError::SharedSecret);
        }
        Ok(Self {
            key,
            issuer,
            log: None,
        })
    }

    /// Receipts that also promise inclusion in the answer log (`log: {origin, mmd}`).
    #[must_use]
    pub fn with_log(mut self, promise: Value) -> Self {
        self.log = Some(promise);
        self
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
        self.issue(peer_id, statement, now).1
    }

    /// [`Self::sign`], with the receipt's new `jti`: `(jti, receipt)`.
    pub fn issue(&self, peer_id: &str, statement: &Statement, now: Timestamp) -> (String, String) {
        let header = json!({"alg": self.key.alg(), "kid": self.key.kid(), "typ": TYP});
        let jti = uuid::Uuid::now_v7().to_string();
        let mut claims = json!({
            "iss": self.issuer,
            "sub": peer_id,
            "aud": peer_id,
            "jti": jti,
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
        if let Some(events) = &statement.events {
            claims["dig"]["evt"] = events.clone();
        }
        if let Some(upstream) = &statement.upstream {
            claims["up"] = upstream.clone();
        }
        if let Some(log) = &self.log {
            claims["log"] = log.clone();
        }
        (jti, self.key.sign_compact(&header, &claims))
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

/// The base64url SHA-256 of `bytes` (an access token's `ath`).
pub fn sha256_b64url(bytes: &[u8]) -> String {
    b64url(&Sha256::digest(bytes))
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

mod digest;
pub use digest::{EventChain, answer_digest, answer_projection, digest, message_digest, protojson};

#[cfg(test)]
mod tests;
