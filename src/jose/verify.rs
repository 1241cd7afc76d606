//! Verifying a signed Agent Card with keys the caller supplies: hard to fool by design.
//!
//! * Keys come only from the caller (`--secret KID=…`, a JWKS), each bound to exactly one
//!   algorithm, and are chosen only by `kid`. A key carried in the signature (`jwk`, `x5c`,
//!   `x5u`) is never used; `alg` must name the chosen key's own algorithm exactly, so neither
//!   `none` (in any spelling) nor an HMAC keyed with public-key bytes can pass.
//! * The protected header must be strict base64url of a JSON object without duplicate members,
//!   with no `crit` and no `b64`, and must not share a name with the unprotected `header`.
//! * ES256 signatures are exactly 64 bytes (`r ‖ s`, both in range); EdDSA signatures are
//!   checked with strict verification; HS256 is compared in constant time.
//! * The payload is the card as received without `signatures`, canonicalized by RFC 8785
//!   (raw JCS), and also the form the official Python SDK computes (empty values dropped).

use crate::jose::json::{self, Integers};
use crate::jose::sign;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Map, Value};

/// A key the caller trusts, bound to one algorithm.
#[derive(Clone)]
pub enum TrustedKey {
    /// HS256 with a shared secret of at least 32 bytes.
    Hs256(Vec<u8>),
    /// Ed25519.
    EdDsa(ed25519_dalek::VerifyingKey),
    /// ECDSA P-256 with SHA-256.
    Es256(p256::ecdsa::VerifyingKey),
    /// RSASSA-PKCS1-v1_5 with SHA-256, a modulus of 2048 to 8192 bits.
    Rs256(RsaKey),
    /// RSASSA-PSS with SHA-256, a modulus of 2048 to 8192 bits.
    Ps256(RsaKey),
}

/// An RSA public key's modulus and exponent, checked when loaded: 2048 to 8192 bits, both odd,
/// the exponent from 3 to 2^33 (what the verifier accepts, so a broken key fails when its set
/// is loaded, not on a request).
#[derive(Clone)]
pub struct RsaKey {
    n: Vec<u8>,
    e: Vec<u8>,
}

impl RsaKey {
    /// The key from its big-endian modulus and exponent.
    pub fn new(n: &[u8], e: &[u8]) -> Result<Self, String> {
        let strip =
            |bytes: &[u8]| -> Vec<u8> { bytes.iter().copied().skip_while(|b| *b == 0).collect() };
        let (n, e) = (strip(n), strip(e));
        let bits = n.len() * 8 - n.first().map_or(8, |b| b.leading_zeros() as usize);
        if !(2048..=8192).contains(&bits) {
            return Err(format!(
                "an RSA modulus of {bits} bits (2048 to 8192 are accepted)"
            ));
        }
        if n.last().is_none_or(|b| b % 2 == 0) {
            return Err("an even RSA modulus".to_owned());
        }
        let exponent = e.iter().try_fold(0u64, |acc, b| {
            (acc < 1 << 56).then(|| (acc << 8) | u64::from(*b))
        });
        match exponent {
            Some(value) if (3..1 << 33).contains(&value) && value % 2 == 1 => {}
            _ => return Err("an RSA exponent that is not odd and from 3 to 2^33 - 1".to_owned()),
        }
        Ok(Self { n, e })
    }

    fn verify(
        &self,
        algorithm: &'static ring::signature::RsaParameters,
        input: &[u8],
        signature: &[u8],
    ) -> bool {
        ring::signature::RsaPublicKeyComponents {
            n: &self.n,
            e: &self.e,
        }
        .verify(algorithm, input, signature)
        .is_ok()
    }
}

impl TrustedKey {
    fn alg(&self) -> &'static str {
        match self {
            Self::Hs256(_) => "HS256",
            Self::EdDsa(_) => "EdDSA",
            Self::Es256(_) => "ES256",
            Self::Rs256(_) => "RS256",
            Self::Ps256(_) => "PS256",
        }
    }
}

/// The keys a verification may use, by `kid`, at most [`TrustedKeys::MAX_KEYS`] of them.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<(String, TrustedKey)>,
}

/// Refuses a key set of more than [`TrustedKeys::MAX_KEYS`] entries before parsing any key.
fn within_key_bound(keys: usize) -> Result<(), KeyRejected> {
    if keys > TrustedKeys::MAX_KEYS {
        return Err(KeyRejected(format!(
            "the key set holds {keys} keys; at most {} are accepted",
            TrustedKeys::MAX_KEYS
        )));
    }
    Ok(())
}

/// Why a key or a key set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyRejected(pub String);

fn b64url_strict(text: &str) -> Option<Vec<u8>> {
    // Unpadded, URL-safe, no whitespace, no stray trailing bits (RFC 7515 §2).
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}

impl TrustedKeys {
    /// The most keys a verifier holds, from every set and secret given to it. Publishers
    /// rotate through two or three keys; a set of hundreds only makes each card's check (and
    /// each repeated-`kid` check while adding) cost more, which is what a hostile key server
    /// would want.
    pub const MAX_KEYS: usize = 64;

    /// No keys yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `signature` over raw `message` verifies under the key `kid`, by exactly the
    /// check a card's signature gets (for test vectors, which sign bytes, not JWS inputs).
    pub fn verify_raw(&self, kid: &str, message: &[u8], signature: &[u8]) -> Result<bool, String> {
        let (_, key) = self
            .keys
            .iter()
            .find(|(k, _)| k == kid)
            .ok_or_else(|| format!("no key {kid:?}"))?;
        check(key, message, signature)
    }

    fn add(&mut self, kid: &str, key: TrustedKey) -> Result<(), KeyRejected> {
        if kid.is_empty() {
            return Err(KeyRejected("a key needs a kid".to_owned()));
        }
        if self.keys.iter().any(|(k, _)| k == kid) {
            return Err(KeyRejected(format!("kid {kid:?} is given twice")));
        }
        within_key_bound(self.keys.len() + 1)?;
        self.keys.push((kid.to_owned(), key));
        Ok(())
    }

    /// Adds an HS256 secret given as `KID=BASE64URL`.
    pub fn add_secret_arg(&mut self, arg: &str) -> Result<(), KeyRejected> {
        let (kid, encoded) = arg
            .split_once('=')
            .ok_or_else(|| KeyRejected("--secret takes KID=BASE64URL".to_owned()))?;
        let secret = b64url_strict(encoded).ok_or_else(|| {
            KeyRejected(format!(
                "the secret for kid {kid:?} is not unpadded base64url"
            ))
        })?;
        if secret.len() < sign::MIN_HMAC_SECRET_BYTES {
            return Err(KeyRejected(format!(
                "the secret for kid {kid:?} is {} bytes; HS256 needs at least {}",
                secret.len(),
                sign::MIN_HMAC_SECRET_BYTES
            )));
        }
        self.add(kid, TrustedKey::Hs256(secret))
    }

    /// Adds every key of a JWKS document. The set is refused whole when it holds private or
    /// symmetric keys, a duplicate `kid`, or a key whose `alg`, `use` or `key_ops` contradict
    /// verification with it.
    pub fn add_jwks(&mut self, text: &str) -> Result<(), KeyRejected> {
        let set = parse_strict(text)
            .map_err(|why| KeyRejected(format!("the JWKS is not strict JSON: {why}")))?;
        let keys = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| KeyRejected("the JWKS has no \"keys\" array".to_owned()))?;
        within_key_bound(keys.len())?;
        let mut staged = self.clone();
        for jwk in keys {
            let (kid, key) = jwk_key(jwk)?;
            staged.add(&kid, key)?;
        }
        *self = staged;
        Ok(())
    }

    /// Adds the usable signing keys of an identity provider's JWKS, skipping the others (an
    /// encryption key, a type this verifier does not take, a key that fails its checks), so
    /// one odd key does not take an issuer's working keys away; a skipped key is never used.
    /// Returns how many were skipped; a set with no usable key is refused.
    pub fn add_issuer_jwks(&mut self, text: &str) -> Result<usize, KeyRejected> {
        let set = parse_strict(text)
            .map_err(|why| KeyRejected(format!("the JWKS is not strict JSON: {why}")))?;
        let keys = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| KeyRejected("the JWKS has no \"keys\" array".to_owned()))?;
        within_key_bound(keys.len())?;
        let mut staged = self.clone();
        let mut skipped = 0;
        for jwk in keys {
            match jwk_key(jwk).and_then(|(kid, key)| staged.add(&kid, key)) {
                Ok(()) => {}
                Err(_) => skipped += 1,
            }
        }
        if staged.len() == self.len() {
            return Err(KeyRejected(
                "the JWKS holds no usable signing key".to_owned(),
            ));
        }
        *self = staged;
        Ok(skipped)
    }

    /// The algorithm of the key `kid`, if there is one.
    pub fn algorithm_of(&self, kid: &str) -> Option<&'static str> {
        self.by_kid(kid).map(TrustedKey::alg)
    }

    /// Whether `signature` over the JWS signing `input` verifies under the key `kid` with
    /// `alg`, which must be that key's one algorithm.
    pub fn verify_jws(
        &self,
        kid: &str,
        alg: &str,
        input: &[u8],
        signature: &[u8],
    ) -> Result<bool, String> {
        let key = self.by_kid(kid).ok_or_else(|| format!("no key {kid:?}"))?;
        if key.alg() != alg {
            return Err(format!("key {kid:?} is a {} key, not {alg}", key.alg()));
        }
        check(key, input, signature)
    }

    /// Adds a key set the caller holds privately, which may carry HS256 secrets (`"kty":"oct"`)
    /// as well as asymmetric keys (whose private members are ignored). Refused whole when it
    /// mixes symmetric and asymmetric keys, repeats a `kid`, or holds a key that cannot be used
    /// for exactly one supported signature algorithm.
    pub fn add_private_jwks(&mut self, text: &str) -> Result<(), KeyRejected> {
        let set = parse_strict(text)
            .map_err(|why| KeyRejected(format!("the key set is not strict JSON: {why}")))?;
        let keys: Vec<Value> = match set.get("keys").and_then(Value::as_array) {
            Some(keys) => keys.clone(),
            None if set.is_object() => vec![set.clone()],
            None => return Err(KeyRejected("the key set is not an object".to_owned())),
        };
        within_key_bound(keys.len())?;
        let symmetric = keys.iter().filter(|k| k["kty"] == "oct").count();
        if symmetric != 0 && symmetric != keys.len() {
            return Err(KeyRejected(
                "the key set mixes symmetric and asymmetric keys".to_owned(),
            ));
        }
        let mut parsed = Vec::new();
        for jwk in &keys {
            if jwk["kty"] == "oct" {
                parsed.push(secret_jwk(jwk)?);
            } else {
                let mut public = jwk.clone();
                if let Some(object) = public.as_object_mut() {
                    for private in ["d", "p", "q", "dp", "dq", "qi"] {
                        object.remove(private);
                    }
                }
                parsed.push(jwk_key(&public)?);
            }
        }
        let mut staged = self.clone();
        for (kid, key) in parsed {
            staged.add(&kid, key)?;
        }
        *self = staged;
        Ok(())
    }

    fn by_kid(&self, kid: &str) -> Option<&TrustedKey> {
        self.keys.iter().find(|(k, _)| k == kid).map(|(_, key)| key)
    }
}

fn secret_jwk(jwk: &Value) -> Result<(String, TrustedKey), KeyRejected> {
    let kid = jwk
        .get("kid")
        .and_then(Value::as_str)
        .ok_or_else(|| KeyRejected("a key has no kid".to_owned()))?
        .to_owned();
    let reject = |why: &str| KeyRejected(format!("key {kid:?}: {why}"));
    if jwk.get("alg").is_some_and(|alg| alg != "HS256") {
        return Err(reject("only HS256 secrets are supported"));
    }
    if jwk.get("use").is_some_and(|usage| usage != "sig") {
        return Err(reject("\"use\" is not \"sig\""));
    }
    let secret = jwk
        .get("k")
        .and_then(Value::as_str)
        .and_then(b64url_strict)
        .ok_or_else(|| reject("bad \"k\""))?;
    if secret.len() < sign::MIN_HMAC_SECRET_BYTES {
        return Err(reject(&format!(
            "the secret is {} bytes; HS256 needs at least {}",
            secret.len(),
            sign::MIN_HMAC_SECRET_BYTES
        )));
    }
    Ok((kid, TrustedKey::Hs256(secret)))
}

fn jwk_key(jwk: &Value) -> Result<(String, TrustedKey), KeyRejected> {
    let field = |name: &str| jwk.get(name).and_then(Value::as_str);
    let kid = field("kid")
        .ok_or_else(|| KeyRejected("a JWKS key has no kid".to_owned()))?
        .to_owned();
    let reject = |why: &str| KeyRejected(format!("JWKS key {kid:?}: {why}"));
    if jwk.get("d").is_some() || jwk.get("k").is_some() {
        return Err(reject("private or symmetric key material in a JWKS"));
    }
    if let Some(usage) = jwk.get("use")
        && usage != "sig"
    {
        return Err(reject("\"use\" is not \"sig\""));
    }
    if let Some(ops) = jwk.get("key_ops")
        && !ops
            .as_array()
            .is_some_and(|ops| ops.iter().any(|op| op == "verify"))
    {
        return Err(reject("\"key_ops\" does not allow verify"));
    }
    let (key, alg) = match (field("kty"), field("crv")) {
        (Some("OKP"), Some("Ed25519")) => {
            let x = field("x")
                .and_then(b64url_strict)
                .and_then(|x| <[u8; 32]>::try_from(x).ok())
                .ok_or_else(|| reject("bad Ed25519 \"x\""))?;
            let key = ed25519_dalek::VerifyingKey::from_bytes(&x)
                .map_err(|_| reject("not an Ed25519 public key"))?;
            if key.is_weak() {
                return Err(reject("a small-order Ed25519 key"));
            }
            (TrustedKey::EdDsa(key), "EdDSA")
        }
        (Some("EC"), Some("P-256")) => {
            let coordinate = |name: &str| {
                field(name)
                    .and_then(b64url_strict)
                    .filter(|c| c.len() == 32)
                    .ok_or_else(|| reject(&format!("bad P-256 \"{name}\"")))
            };
            let mut point = vec![4u8];
            point.extend(coordinate("x")?);
            point.extend(coordinate("y")?);
            let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
                .map_err(|_| reject("not a P-256 point"))?;
            (TrustedKey::Es256(key), "ES256")
        }
        (Some("RSA"), None) => {
            let component = |name: &str| {
                field(name)
                    .and_then(b64url_strict)
                    .ok_or_else(|| reject(&format!("bad RSA \"{name}\"")))
            };
            let key =
                RsaKey::new(&component("n")?, &component("e")?).map_err(|why| reject(&why))?;
            // One key, one algorithm: PS256 only when the key says so.
            if field("alg") == Some("PS256") {
                (TrustedKey::Ps256(key), "PS256")
            } else {
                (TrustedKey::Rs256(key), "RS256")
            }
        }
        (kty, crv) => {
            return Err(reject(&format!(
                "unsupported key type {kty:?}/{crv:?} (Ed25519, P-256 and RSA are)"
            )));
        }
    };
    if let Some(declared) = field("alg")
        && declared != alg
    {
        return Err(reject(&format!(
            "\"alg\" {declared:?} does not fit the key"
        )));
    }
    Ok((kid, key))
}

/// A signature that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key that verified it.
    pub kid: String,
    /// Its algorithm.
    pub alg: String,
}

/// Why no signature verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The document is not a JSON object.
    #[error("the card is not a JSON object")]
    NotACard,
    /// The card is JSON two readers could read differently (duplicate members, integers that
    /// canonicalization would round).
    #[error("the card is ambiguous JSON: {0}")]
    Malformed(String),
    /// The card has no `signatures`.
    #[error("the card carries no signatures")]
    NoSignature,
    /// Every signature failed; one reason per signature.
    #[error("no signature verified: {}", .0.join("; "))]
    NoValidSignature(Vec<String>),
}

/// Verifies a card as received (its exact text) against `keys`.
pub fn verify_card(card_text: &str, keys: &TrustedKeys) -> Result<Verified, VerifyError> {
    let card = parse_strict(card_text).map_err(VerifyError::Malformed)?;
    let Value::Object(object) = &card else {
        return Err(VerifyError::NotACard);
    };
    let signatures = match object.get("signatures") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        _ => return Err(VerifyError::NoSignature),
    };
    let mut unsigned = object.clone();
    unsigned.remove("signatures");
    let raw = serde_json_canonicalizer::to_string(&Value::Object(unsigned))
        .map_err(|_| VerifyError::NotACard)?;
    let sdk = sign::canonical_payload(&card).map_err(|_| VerifyError::NotACard)?;
    let payloads: Vec<&str> = if raw == sdk {
        vec![raw.as_str()]
    } else {
        vec![raw.as_str(), sdk.as_str()]
    };
    let mut reasons = Vec::new();
    for (i, entry) in signatures.iter().enumerate() {
        match verify_entry(entry, &payloads, keys) {
            Ok(verified) => return Ok(verified),
            Err(reason) => reasons.push(format!("signature {i}: {reason}")),
        }
    }
    Err(VerifyError::NoValidSignature(reasons))
}

/// Verifies a compact JWS (`header.payload.signature`) with the same rules; used to run
/// outside test vectors through the same checks.
pub fn verify_compact(compact: &str, keys: &TrustedKeys) -> Result<Verified, String> {
    let parts: Vec<&str> = compact.split('.').collect();
    let [protected, payload, signature] = parts[..] else {
        return Err("not three dot-separated parts".to_owned());
    };
    if protected.is_empty() || signature.is_empty() {
        return Err("empty header or signature".to_owned());
    }
    let payload = b64url_strict(payload).ok_or("payload is not strict base64url")?;
    let payload = String::from_utf8(payload).map_err(|_| "payload is not UTF-8".to_owned())?;
    let entry = serde_json::json!({"protected": protected, "signature": signature});
    verify_entry(&entry, &[payload.as_str()], keys)
}

fn verify_entry(entry: &Value, payloads: &[&str], keys: &TrustedKeys) -> Result<Verified, String> {
    let protected = entry
        .get("protected")
        .and_then(Value::as_str)
        .ok_or("no \"protected\" string")?;
    let signature = entry
        .get("signature")
        .and_then(Value::as_str)
        .ok_or("no \"signature\" string")?;
    let header_bytes = b64url_strict(protected).ok_or("\"protected\" is not strict base64url")?;
    let header = parse_unique_object(&header_bytes)?;
    if header.contains_key("crit") {
        return Err("\"crit\" is not supported".to_owned());
    }
    if header.contains_key("b64") {
        return Err("\"b64\" (RFC 7797) is not supported".to_owned());
    }
    match entry.get("header") {
        None => {}
        Some(Value::Object(unprotected)) => {
            if let Some(name) = unprotected.keys().find(|name| header.contains_key(*name)) {
                return Err(format!(
                    "\"{name}\" is in both the protected and the unprotected header"
                ));
            }
            if unprotected.contains_key("crit") || unprotected.contains_key("b64") {
                return Err("\"crit\"/\"b64\" in the unprotected header".to_owned());
            }
            // Nothing in it is covered by the signature, and this verifier reads none of it:
            // a member there (a `jku`, a `jwk`, a `kid`) could only mislead another reader of
            // the same card into trusting what nobody signed. Stricter than the spec, which
            // types the unprotected header as any object.
            if let Some(name) = unprotected.keys().next() {
                let name: String = name.chars().take(32).collect();
                return Err(format!(
                    "the unprotected header holds \"{name}\", which is not signed and not used here; leave it empty"
                ));
            }
        }
        Some(_) => return Err("\"header\" is not an object".to_owned()),
    }
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or("no \"alg\"")?;
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .ok_or("no \"kid\"")?;
    let key = keys
        .by_kid(kid)
        .ok_or_else(|| format!("no key supplied for kid {kid:?}"))?;
    // The key decides the algorithm; the header only has to agree, exactly.
    if alg != key.alg() {
        return Err(format!(
            "alg {alg:?} does not match the {} key {kid:?}",
            key.alg()
        ));
    }
    let signature = b64url_strict(signature).ok_or("\"signature\" is not strict base64url")?;
    for payload in payloads {
        let input = format!(
            "{protected}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload.as_bytes())
        );
        if check(key, input.as_bytes(), &signature)? {
            return Ok(Verified {
                kid: kid.to_owned(),
                alg: alg.to_owned(),
            });
        }
    }
    Err(format!("the {alg} signature by {kid:?} does not verify"))
}

fn check(key: &TrustedKey, input: &[u8], signature: &[u8]) -> Result<bool, String> {
    match key {
        TrustedKey::Hs256(secret) => {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
                .map_err(|_| "unusable HMAC key".to_owned())?;
            mac.update(input);
            Ok(mac.verify_slice(signature).is_ok())
        }
        TrustedKey::EdDsa(key) => {
            let signature = ed25519_dalek::Signature::from_slice(signature)
                .map_err(|_| "an EdDSA signature must be 64 bytes".to_owned())?;
            Ok(key.verify_strict(input, &signature).is_ok())
        }
        TrustedKey::Rs256(key) => Ok(key.verify(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            input,
            signature,
        )),
        TrustedKey::Ps256(key) => {
            Ok(key.verify(&ring::signature::RSA_PSS_2048_8192_SHA256, input, signature))
        }
        TrustedKey::Es256(key) => {
            use p256::ecdsa::signature::Verifier as _;
            if signature.len() != 64 {
                return Err("an ES256 signature must be exactly 64 bytes (r ‖ s)".to_owned());
            }
            let signature = p256::ecdsa::Signature::from_slice(signature)
                .map_err(|_| "ES256 r or s out of range".to_owned())?;
            Ok(key.verify(input, &signature).is_ok())
        }
    }
}

/// Parses JSON refusing duplicate member names in every object, at any depth, and integers a
/// double cannot hold exactly, which RFC 8785 can only write rounded (two different cards would
/// share one payload).
pub fn parse_strict(text: &str) -> Result<Value, String> {
    json::parse(text, Integers::ExactInDouble).map_err(|e| e.to_string())
}

/// Parses a JWS protected header: a JSON object naming each member once, at every depth.
fn parse_unique_object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    json::parse_object(bytes, Integers::Any)
        .map_err(|e| format!("the protected header is not a JSON object with unique members ({e})"))
}
