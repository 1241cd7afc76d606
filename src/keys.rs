//! The keys that sign the Agent Card, and the JWKS that publishes their public halves.
//!
//! With no signing key in the policy, the first start generates an Ed25519 key in the data
//! directory (PKCS#8 PEM, mode 0600) and every later start reuses it, so the default card is
//! signed, and verifiable against `/.well-known/jwks.json`, from the first run.

use crate::jws::CardSigningKey;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The file, inside the data directory, that holds the generated default key.
pub const DEFAULT_KEY_FILE: &str = "card-signing-ed25519.pem";

/// Why a key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key file could not be read or written.
    #[error("card signing key {file}: {reason}")]
    File {
        /// The file name (inside the data directory).
        file: String,
        /// What went wrong.
        reason: String,
    },
}

/// Loads the default Ed25519 key from `data_dir`, generating it on first use.
pub fn default_card_key(data_dir: &Path) -> Result<CardSigningKey, KeyError> {
    let path = data_dir.join(DEFAULT_KEY_FILE);
    let fail = |reason: String| KeyError::File {
        file: DEFAULT_KEY_FILE.to_owned(),
        reason,
    };
    let key = if path.exists() {
        let pem = std::fs::read_to_string(&path).map_err(|e| fail(e.kind().to_string()))?;
        ed25519_dalek::SigningKey::from_pkcs8_pem(&pem)
            .map_err(|_| fail("not an Ed25519 PKCS#8 PEM private key".to_owned()))?
    } else {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| fail(e.to_string()))?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let pem = key
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .map_err(|e| fail(e.to_string()))?;
        write_private(&path, pem.as_bytes()).map_err(|e| fail(e.kind().to_string()))?;
        key
    };
    let kid = thumbprint_kid(&key.verifying_key());
    Ok(CardSigningKey::EdDsa {
        kid,
        key: Box::new(key),
    })
}

/// A `kid` derived from the key itself: `ed-` and the start of its RFC 7638 thumbprint.
pub fn thumbprint_kid(key: &ed25519_dalek::VerifyingKey) -> String {
    let x = b64url(key.as_bytes());
    // RFC 7638: the required members, sorted, no whitespace.
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    let thumbprint = b64url(&Sha256::digest(canonical.as_bytes()));
    format!("ed-{}", &thumbprint[..16])
}

/// The public JWK of an asymmetric key; `None` for a symmetric key, which is never published.
pub fn public_jwk(key: &CardSigningKey) -> Option<Value> {
    match key {
        CardSigningKey::EdDsa { kid, key } => Some(json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url(key.verifying_key().as_bytes()),
            "kid": kid,
            "alg": "EdDSA",
            "use": "sig",
        })),
        CardSigningKey::Hs256 { .. } => None,
    }
}

/// The JWKS of the asymmetric keys among `keys`.
pub fn jwks(keys: &[CardSigningKey]) -> Value {
    json!({"keys": keys.iter().filter_map(public_jwk).collect::<Vec<_>>()})
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Creates `path` readable by its owner only (where the platform has modes).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reused_and_never_published_privately() {
        let dir = tempfile::tempdir().unwrap();
        let first = default_card_key(dir.path()).unwrap();
        let again = default_card_key(dir.path()).unwrap();
        assert_eq!(first.kid(), again.kid());
        assert!(first.kid().starts_with("ed-"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(DEFAULT_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let set = jwks(&[
            first,
            CardSigningKey::Hs256 {
                kid: "shared".into(),
                secret: vec![1; 32],
            },
        ]);
        let keys = set["keys"].as_array().unwrap();
        assert_eq!(keys.len(), 1, "symmetric keys are never published");
        assert!(keys[0].get("d").is_none(), "no private part");
    }
}
