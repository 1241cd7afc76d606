//! Signing the Agent Card: JWS `AgentCardSignature` entries over the card's canonical form.
//!
//! The payload is the card without `signatures`, cleaned the way the official Python SDK
//! cleans it (empty strings, arrays, objects and nulls removed, recursively, and the protobuf
//! non-presence defaults `required: false` and `pkceRequired: false` dropped), then serialized
//! by RFC 8785 (JCS). The signing input is `BASE64URL(protected) "." BASE64URL(payload)`, a
//! normal compact JWS whose payload is detached: the verifier rebuilds it from the card.
//!
//! peergate serves cards that hold no such empty or default values, so a raw-JCS verifier and
//! the SDK's verifier compute the same payload (see `a2a-1.0.md` §4 in the design notes).

use base64::Engine as _;
use ed25519_dalek::Signer as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Map, Value, json};

/// The shortest HS256 secret accepted (RFC 7518 §3.2: at least the hash output size).
pub const MIN_HMAC_SECRET_BYTES: usize = 32;

/// The JWS algorithms peergate signs and verifies cards with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[non_exhaustive]
pub enum JwsAlgorithm {
    /// Ed25519 (RFC 8037).
    #[serde(rename = "EdDSA")]
    EdDsa,
    /// ECDSA on P-256 with SHA-256.
    #[serde(rename = "ES256")]
    Es256,
    /// HMAC with SHA-256.
    #[serde(rename = "HS256")]
    Hs256,
}

impl JwsAlgorithm {
    /// The JOSE name (`alg`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EdDsa => "EdDSA",
            Self::Es256 => "ES256",
            Self::Hs256 => "HS256",
        }
    }
}

impl std::fmt::Display for JwsAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Why a card could not be signed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The card is not a JSON object.
    #[error("the card must be a JSON object")]
    NotAnObject,
    /// A number JCS cannot represent (non-finite) or a serialization failure.
    #[error("the card cannot be canonicalized: {0}")]
    Canonical(String),
}

/// Something that signs cards: one algorithm, one `kid`. A new kind of key (another curve, a
/// key held in an HSM) is a new implementation of this trait, not new arms in every match.
pub trait CardSigner: Send + Sync {
    /// The algorithm, fixed for the key's life: a key never signs under another (so an
    /// attacker cannot ask for an HMAC over a public key, the classic algorithm confusion).
    fn algorithm(&self) -> JwsAlgorithm;
    /// The key id.
    fn kid(&self) -> &str;
    /// The raw signature over `input` (the JWS signing input).
    fn sign(&self, input: &[u8]) -> Vec<u8>;
    /// The public JWK to publish; `None` for a shared secret, which is never published.
    fn public_jwk(&self) -> Option<Value>;
}

/// A card-signing key (any [`CardSigner`]); clones share the key (a reload signs the cards
/// again with the keys start-up loaded, the ones the key set publishes).
#[derive(Clone)]
pub struct CardSigningKey(std::sync::Arc<dyn CardSigner>);

impl std::fmt::Debug for CardSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        f.debug_struct("CardSigningKey")
            .field("alg", &self.alg())
            .field("kid", &self.kid())
            .finish_non_exhaustive()
    }
}

impl CardSigningKey {
    /// A key from any signer.
    pub fn new(signer: impl CardSigner + 'static) -> Self {
        Self(std::sync::Arc::new(signer))
    }

    /// HMAC-SHA-256 with a shared secret (the loader refuses fewer than 32 bytes).
    pub fn hs256(kid: impl Into<String>, secret: Vec<u8>) -> Self {
        Self::new(HmacKey {
            kid: kid.into(),
            secret,
        })
    }

    /// Ed25519.
    pub fn ed25519(kid: impl Into<String>, key: ed25519_dalek::SigningKey) -> Self {
        Self::new(Ed25519Key {
            kid: kid.into(),
            key,
        })
    }

    /// ECDSA on P-256 with SHA-256; signatures are the raw 64-byte `r ‖ s`.
    pub fn p256(kid: impl Into<String>, key: p256::ecdsa::SigningKey) -> Self {
        Self::new(P256Key {
            kid: kid.into(),
            key,
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> JwsAlgorithm {
        self.0.algorithm()
    }

    /// The JOSE algorithm name.
    pub fn alg(&self) -> &'static str {
        self.0.algorithm().as_str()
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        self.0.kid()
    }

    /// The public JWK, for an asymmetric key.
    pub fn public_jwk(&self) -> Option<Value> {
        self.0.public_jwk()
    }

    /// A compact JWS of `claims` under `header`, signed with this key.
    pub fn sign_compact(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let signature = b64url(&self.sign_raw(input.as_bytes()));
        format!("{input}.{signature}")
    }

    /// Signs `input` (the JWS signing input) and returns the raw signature.
    fn sign_raw(&self, input: &[u8]) -> Vec<u8> {
        self.0.sign(input)
    }
}

struct HmacKey {
    kid: String,
    secret: Vec<u8>,
}

impl CardSigner for HmacKey {
    fn algorithm(&self) -> JwsAlgorithm {
        JwsAlgorithm::Hs256
    }
    fn kid(&self) -> &str {
        &self.kid
    }
    fn sign(&self, input: &[u8]) -> Vec<u8> {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.secret)
            .expect("HMAC accepts keys of any length");
        mac.update(input);
        mac.finalize().into_bytes().to_vec()
    }
    fn public_jwk(&self) -> Option<Value> {
        None
    }
}

struct Ed25519Key {
    kid: String,
    key: ed25519_dalek::SigningKey,
}

impl CardSigner for Ed25519Key {
    fn algorithm(&self) -> JwsAlgorithm {
        JwsAlgorithm::EdDsa
    }
    fn kid(&self) -> &str {
        &self.kid
    }
    fn sign(&self, input: &[u8]) -> Vec<u8> {
        self.key.sign(input).to_bytes().to_vec()
    }
    fn public_jwk(&self) -> Option<Value> {
        Some(json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url(self.key.verifying_key().as_bytes()),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }))
    }
}

struct P256Key {
    kid: String,
    key: p256::ecdsa::SigningKey,
}

impl CardSigner for P256Key {
    fn algorithm(&self) -> JwsAlgorithm {
        JwsAlgorithm::Es256
    }
    fn kid(&self) -> &str {
        &self.kid
    }
    fn sign(&self, input: &[u8]) -> Vec<u8> {
        let signature: p256::ecdsa::Signature =
            p256::ecdsa::signature::Signer::sign(&self.key, input);
        signature.to_bytes().to_vec()
    }
    fn public_jwk(&self) -> Option<Value> {
        let point = self.key.verifying_key().to_sec1_point(false);
        let bytes = point.as_bytes();
        // Uncompressed SEC1: 0x04, then x and y, 32 bytes each.
        Some(json!({
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(&bytes[1..33]),
            "y": b64url(&bytes[33..65]),
            "kid": self.kid,
            "alg": "ES256",
            "use": "sig",
        }))
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The canonical payload of a card: the bytes every signature covers.
pub fn canonical_payload(card: &Value) -> Result<String, SignError> {
    let Value::Object(map) = card else {
        return Err(SignError::NotAnObject);
    };
    if has_unsafe_integer(card) {
        return Err(SignError::Canonical(
            "an integer a double cannot hold exactly would be rounded".to_owned(),
        ));
    }
    let mut map = map.clone();
    map.remove("signatures");
    let mut value = Value::Object(map);
    drop_proto_defaults(&mut value);
    let value = clean_empty(value).unwrap_or_else(|| json!({}));
    serde_json_canonicalizer::to_string(&value).map_err(|e| SignError::Canonical(e.to_string()))
}

fn has_unsafe_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.as_u64()
                .is_some_and(|v| !crate::protocol::json::exact_as_double(i128::from(v)))
                || n.as_i64()
                    .is_some_and(|v| !crate::protocol::json::exact_as_double(i128::from(v)))
        }
        Value::Array(items) => items.iter().any(has_unsafe_integer),
        Value::Object(map) => map.values().any(has_unsafe_integer),
        _ => false,
    }
}

/// Whether `card` holds a value the SDKs drop before canonicalizing (an empty string, array or
/// object, a null, or a protobuf default) anywhere but in its security requirements: such a
/// card would verify differently in different clients. A requirement of a scheme without scopes
/// is an empty scope list by its nature (`{"bearerAuth": {}}`); for those, [`sign_card`] signs
/// both forms instead.
pub fn holds_droppable_values(card: &Value) -> bool {
    let mut unsigned = card.clone();
    if let Value::Object(map) = &mut unsigned {
        map.remove("securityRequirements");
    }
    payload_forms(&unsigned).map_or(true, |forms| forms.len() > 1)
}

/// What a card's signatures cover, `signatures` left out: the SDKs' form (empty values
/// dropped, then RFC 8785) first, then the raw RFC 8785 form when it differs. A verifier that
/// does not drop empty values first computes the second.
pub fn payload_forms(card: &Value) -> Result<Vec<String>, SignError> {
    let sdk = canonical_payload(card)?;
    let mut unsigned = card.clone();
    if let Value::Object(map) = &mut unsigned {
        map.remove("signatures");
    }
    let raw = serde_json_canonicalizer::to_string(&unsigned)
        .map_err(|e| SignError::Canonical(e.to_string()))?;
    Ok(if raw == sdk {
        vec![sdk]
    } else {
        vec![sdk, raw]
    })
}

/// Removes `""`, `null`, `[]` and `{}` everywhere, and parents that become empty; keeps
/// `false` and `0`. `None` when the value itself is empty.
fn clean_empty(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(clean_empty).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(map) => {
            let map: Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| clean_empty(v).map(|v| (k, v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        other => Some(other),
    }
}

/// The card's plain (non-`optional`) booleans that protobuf omits at their default.
fn drop_proto_defaults(card: &mut Value) {
    if let Some(extensions) = card
        .pointer_mut("/capabilities/extensions")
        .and_then(Value::as_array_mut)
    {
        for extension in extensions.iter_mut().filter_map(Value::as_object_mut) {
            if extension.get("required") == Some(&Value::Bool(false)) {
                extension.remove("required");
            }
        }
    }
    if let Some(schemes) = card
        .get_mut("securitySchemes")
        .and_then(Value::as_object_mut)
    {
        for scheme in schemes.values_mut() {
            if let Some(flows) = scheme.pointer_mut("/oauth2SecurityScheme/flows") {
                for flow in flows
                    .as_object_mut()
                    .into_iter()
                    .flat_map(|f| f.values_mut())
                {
                    if let Some(flow) = flow.as_object_mut()
                        && flow.get("pkceRequired") == Some(&Value::Bool(false))
                    {
                        flow.remove("pkceRequired");
                    }
                }
            }
        }
    }
}

/// The protected header peergate writes: `alg`, `kid`, `typ: "JOSE"`, and `jku` when given,
/// serialized with sorted keys.
pub fn protected_header(key: &CardSigningKey, jku: Option<&str>) -> String {
    // Sorted by a map that sorts, not by serde_json's, whose order a dependency may make the
    // order of insertion (Cedar does): the published vectors hold these exact bytes.
    let mut header =
        std::collections::BTreeMap::from([("alg", key.alg()), ("kid", key.kid()), ("typ", "JOSE")]);
    if let Some(jku) = jku {
        header.insert("jku", jku);
    }
    serde_json::to_string(&header).unwrap_or_default()
}

/// One `AgentCardSignature` over `payload` with an already encoded protected header.
pub fn sign_payload(protected_b64: &str, payload: &str, key: &CardSigningKey) -> Value {
    let input = format!("{protected_b64}.{}", b64url(payload.as_bytes()));
    json!({"protected": protected_b64, "signature": b64url(&key.sign_raw(input.as_bytes()))})
}

/// The card with one signature per key in `signatures` (replacing any there were).
pub fn sign_card(
    card: &Value,
    keys: &[CardSigningKey],
    jku: Option<&str>,
) -> Result<Value, SignError> {
    // When the two forms differ (a requirement with no scopes), each key signs both. A client
    // needs one signature that verifies (the A2A specification, §8.4; the SDKs take the first).
    let payloads = payload_forms(card)?;
    let signatures: Vec<Value> = payloads
        .iter()
        .flat_map(|payload| {
            keys.iter().map(move |key| {
                sign_payload(&b64url(protected_header(key, jku).as_bytes()), payload, key)
            })
        })
        .collect();
    let mut signed = card.clone();
    if let Value::Object(map) = &mut signed {
        map.remove("signatures");
        if !signatures.is_empty() {
            map.insert("signatures".to_owned(), Value::Array(signatures));
        }
    }
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning_keeps_false_and_zero_and_drops_empties() {
        let card = json!({"a": "", "b": [], "c": {}, "d": null, "e": false, "f": 0,
            "g": {"h": [""], "i": {"j": []}}, "k": ["", "x"], "signatures": [1]});
        assert_eq!(
            canonical_payload(&card).unwrap(),
            r#"{"e":false,"f":0,"k":["x"]}"#
        );
    }

    #[test]
    fn debug_never_shows_key_material() {
        let key = CardSigningKey::hs256("k", b"very secret bytes, really secret".to_vec());
        let debug = format!("{key:?}");
        assert!(!debug.contains("secret bytes"), "{debug}");
    }
}
