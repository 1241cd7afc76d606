//! `[signing]`: the keys that sign the Agent Card, and those that sign the callers'
//! assertions peergate hands the agent behind the door.

use super::{Invalid, invalid};
use crate::jose::keys::{
    PolicyKeys, PublishedKey, default_caller_key, default_card_key, default_receipt_key,
    read_secret,
};
use crate::jose::sign::{CardSigningKey, JwsAlgorithm, MIN_HMAC_SECRET_BYTES};
use ed25519_dalek::pkcs8::DecodePrivateKey;
use serde::Deserialize;
use std::path::Path;

/// `[signing]`: the keys that sign the Agent Card.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningPolicy {
    /// Public URL of the JWKS, written into each signature's protected header as `jku`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// `[[signing.keys]]`; none means a key generated in the data directory.
    #[serde(default)]
    pub keys: Vec<SigningKeyPolicy>,
    /// `[[signing.caller_keys]]`: the keys of the callers' assertions (EdDSA or ES256), rotated
    /// as the card's are; none means a key generated in the data directory.
    #[serde(default)]
    pub caller_keys: Vec<SigningKeyPolicy>,
    /// `[[signing.receipt_keys]]`: the keys of the answer receipts (EdDSA or ES256), rotated as
    /// the card's are (a retiring key stays published for as long as receipts it signed are
    /// kept); none means a key generated in the data directory.
    #[serde(default)]
    pub receipt_keys: Vec<SigningKeyPolicy>,
}

/// `[[signing.keys]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningKeyPolicy {
    /// Key id, 1–64 of letters, digits and `._-`.
    pub kid: String,
    /// `EdDSA`, `ES256` or `HS256`.
    pub alg: JwsAlgorithm,
    /// PKCS#8 PEM private key (EdDSA, ES256).
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// Environment variable holding a base64url HS256 secret.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// File holding a base64url HS256 secret.
    #[serde(default)]
    pub secret_file: Option<String>,
    /// `YYYY-MM-DD`: the key no longer signs and stays in the JWKS until that day.
    #[serde(default)]
    pub retiring_until: Option<crate::clock::UtcDay>,
}

impl SigningPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        validate_keys("signing.keys", &self.keys)?;
        for (setting, keys, why) in [
            (
                "signing.caller_keys",
                &self.caller_keys,
                "must be EdDSA or ES256: the agent verifies the assertions with a public key",
            ),
            (
                "signing.receipt_keys",
                &self.receipt_keys,
                "must be EdDSA or ES256: a receipt signed with a shared secret could be forged by whoever verifies it",
            ),
        ] {
            validate_keys(setting, keys)?;
            if keys.iter().any(|key| key.alg == JwsAlgorithm::Hs256) {
                return Err(invalid(setting, why));
            }
        }
        // The JWKS names each key once: a kid of one list is no other list's.
        let mut earlier: Vec<&str> = self.keys.iter().map(|key| key.kid.as_str()).collect();
        for (setting, keys) in [
            ("signing.caller_keys", &self.caller_keys),
            ("signing.receipt_keys", &self.receipt_keys),
        ] {
            if keys.iter().any(|key| earlier.contains(&key.kid.as_str())) {
                return Err(invalid(
                    setting,
                    "a kid is also a card key's (or another list's): the JWKS names each key once",
                ));
            }
            earlier.extend(keys.iter().map(|key| key.kid.as_str()));
        }
        if let Some(url) = &self.jwks_url
            && !url.starts_with("https://")
        {
            return Err(invalid("signing.jwks_url", "must be an https URL"));
        }
        Ok(())
    }
}

/// The checks every key list passes: kids well formed and distinct, retirement a date.
fn validate_keys(setting: &'static str, keys: &[SigningKeyPolicy]) -> Result<(), Invalid> {
    for (i, key) in keys.iter().enumerate() {
        if !crate::jose::keys::is_valid_kid(&key.kid) {
            return Err(invalid(
                setting,
                "every kid must be 1 to 64 of letters, digits and ._-",
            ));
        }
        if keys[..i].iter().any(|k| k.kid == key.kid) {
            return Err(invalid(setting, "a kid is listed twice"));
        }
    }
    Ok(())
}

impl SigningPolicy {
    /// Loads the keys this policy names; with none named, the default key of the data
    /// directory.
    pub fn load_keys(&self, data_dir: &Path) -> Result<PolicyKeys, String> {
        if self.keys.is_empty() {
            let key = default_card_key(data_dir).map_err(|e| e.to_string())?;
            return Ok(alone(key));
        }
        load_listed("signing.keys", &self.keys)
    }

    /// Loads the keys of the answer receipts; with none named, the data directory's.
    pub fn load_receipt_keys(&self, data_dir: &Path) -> Result<PolicyKeys, String> {
        if self.receipt_keys.is_empty() {
            let key = default_receipt_key(data_dir).map_err(|e| e.to_string())?;
            return Ok(alone(key));
        }
        load_listed("signing.receipt_keys", &self.receipt_keys)
    }

    /// Loads the keys of the callers' assertions; with none named, the data directory's.
    pub fn load_caller_keys(&self, data_dir: &Path) -> Result<PolicyKeys, String> {
        if self.caller_keys.is_empty() {
            let key = default_caller_key(data_dir).map_err(|e| e.to_string())?;
            return Ok(alone(key));
        }
        load_listed("signing.caller_keys", &self.caller_keys)
    }
}

/// One key that signs and is published while it does.
fn alone(key: CardSigningKey) -> PolicyKeys {
    let published = key
        .public_jwk()
        .map(|jwk| PublishedKey { jwk, until: None });
    PolicyKeys {
        signing: vec![key],
        published: published.into_iter().collect(),
    }
}

/// The keys `setting` lists: those without `retiring_until` sign, every asymmetric one is
/// published until its day.
fn load_listed(setting: &str, keys: &[SigningKeyPolicy]) -> Result<PolicyKeys, String> {
    let mut signing = Vec::new();
    let mut published = Vec::new();
    for entry in keys {
        let key = load_one(setting, entry)?;
        if let Some(jwk) = key.public_jwk() {
            published.push(PublishedKey {
                jwk,
                until: entry.retiring_until,
            });
        }
        if entry.retiring_until.is_none() {
            signing.push(key);
        }
    }
    if signing.is_empty() {
        return Err(format!(
            "{setting}: at least one key must sign (a key without retiring_until)"
        ));
    }
    Ok(PolicyKeys { signing, published })
}

fn load_one(setting: &str, entry: &SigningKeyPolicy) -> Result<CardSigningKey, String> {
    let kid = entry.kid.clone();
    let name = |what: &str| format!("{setting} kid \"{kid}\": {what}");
    let private_pem = || -> Result<String, String> {
        let file = entry
            .private_key_file
            .as_ref()
            .ok_or_else(|| name("needs private_key_file"))?;
        std::fs::read_to_string(file)
            .map_err(|e| name(&format!("cannot read private_key_file: {}", e.kind())))
    };
    match entry.alg {
        JwsAlgorithm::Hs256 => {
            let secret = read_secret(
                entry.secret_env.as_deref(),
                entry.secret_file.as_deref(),
                ("secret_env", "secret_file"),
            )
            .map_err(|e| name(&e))?
            .ok_or_else(|| name("HS256 needs exactly one of secret_env or secret_file"))?;
            if secret.len() < MIN_HMAC_SECRET_BYTES {
                return Err(name(&format!(
                    "the HS256 secret is {} bytes; at least {} are required",
                    secret.len(),
                    MIN_HMAC_SECRET_BYTES
                )));
            }
            Ok(CardSigningKey::hs256(kid, secret))
        }
        JwsAlgorithm::EdDsa => {
            let key = ed25519_dalek::SigningKey::from_pkcs8_pem(&private_pem()?)
                .map_err(|_| name("private_key_file is not an Ed25519 PKCS#8 PEM key"))?;
            Ok(CardSigningKey::ed25519(kid, key))
        }
        JwsAlgorithm::Es256 => {
            let key = <p256::ecdsa::SigningKey as p256::pkcs8::DecodePrivateKey>::from_pkcs8_pem(
                &private_pem()?,
            )
            .map_err(|_| name("private_key_file is not a P-256 PKCS#8 PEM key"))?;
            Ok(CardSigningKey::p256(kid, key))
        }
    }
}
