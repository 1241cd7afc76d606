//! The keys that sign the Agent Card, and the JWKS that publishes their public halves.
//!
//! With no signing key in the policy, the first start generates an Ed25519 key in the data
//! directory (PKCS#8 PEM, mode 0600) and every later start reuses it, so the default card is
//! signed, and verifiable against `/.well-known/jwks.json`, from the first run.

use crate::clock::UtcDay;
use crate::jose::sign::CardSigningKey;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Whether `kid` is an acceptable key id: 1 to 64 of letters, digits and `._-`.
pub fn is_valid_kid(kid: &str) -> bool {
    (1..=64).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

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

/// The default key of callers' assertions, in the data directory of a lone instance.
pub const DEFAULT_CALLER_KEY_FILE: &str = "caller-assertion-ed25519.pem";

/// The file in the data directory holding the generated receipt key.
pub const DEFAULT_RECEIPT_KEY_FILE: &str = "receipt-ed25519.pem";

/// Loads the default Ed25519 key from `data_dir`, generating it on first use.
pub fn default_card_key(data_dir: &Path) -> Result<CardSigningKey, KeyError> {
    default_key(data_dir, DEFAULT_KEY_FILE, "")
}

/// Loads the default Ed25519 key of callers' assertions from `data_dir`, generating it on
/// first use; its `kid` starts `caller-`, so it never collides with a card key's.
pub fn default_caller_key(data_dir: &Path) -> Result<CardSigningKey, KeyError> {
    default_key(data_dir, DEFAULT_CALLER_KEY_FILE, "caller-")
}

/// Loads the default Ed25519 key of answer receipts from `data_dir`, generating it on first
/// use; its `kid` starts `receipt-`.
pub fn default_receipt_key(data_dir: &Path) -> Result<CardSigningKey, KeyError> {
    default_key(data_dir, DEFAULT_RECEIPT_KEY_FILE, "receipt-")
}

/// The file in the data directory holding the generated key of the answer log's checkpoints.
pub const DEFAULT_LOG_KEY_FILE: &str = "receipt-log-ed25519.pem";

/// Loads the default Ed25519 key of the answer log's checkpoints from `data_dir`, generating
/// it on first use.
pub fn default_log_key(data_dir: &Path) -> Result<ed25519_dalek::SigningKey, KeyError> {
    ed25519_in(data_dir, DEFAULT_LOG_KEY_FILE)
}

/// The Ed25519 key (PKCS#8 PEM) in the file at `path`.
pub fn read_ed25519(path: &Path) -> Result<ed25519_dalek::SigningKey, KeyError> {
    let fail = |reason: String| KeyError::File {
        file: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read_to_string(path).map_err(|e| fail(e.kind().to_string()))?;
    ed25519_dalek::SigningKey::from_pkcs8_pem(&pem)
        .map_err(|_| fail("not an Ed25519 PKCS#8 PEM private key".to_owned()))
}

/// The Ed25519 key in `file` of `data_dir` (made on first use), its kid `prefix` and the
/// start of its thumbprint.
fn default_key(data_dir: &Path, file: &str, prefix: &str) -> Result<CardSigningKey, KeyError> {
    let key = ed25519_in(data_dir, file)?;
    let kid = format!("{prefix}{}", thumbprint_kid(&key.verifying_key()));
    Ok(CardSigningKey::ed25519(kid, key))
}

/// The Ed25519 key in `file` of `data_dir`, made on first use.
fn ed25519_in(data_dir: &Path, file: &str) -> Result<ed25519_dalek::SigningKey, KeyError> {
    let path = data_dir.join(file);
    let fail = |reason: String| KeyError::File {
        file: file.to_owned(),
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
    Ok(key)
}

/// A `kid` derived from the key itself: `ed-` and the start of its RFC 7638 thumbprint.
pub fn thumbprint_kid(key: &ed25519_dalek::VerifyingKey) -> String {
    let x = b64url(key.as_bytes());
    // RFC 7638: the required members, sorted, no whitespace.
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    let thumbprint = b64url(&Sha256::digest(canonical.as_bytes()));
    format!("ed-{}", &thumbprint[..16])
}

/// The JWKS of the asymmetric keys among `keys`.
pub fn jwks(keys: &[CardSigningKey]) -> Value {
    json!({"keys": keys.iter().filter_map(CardSigningKey::public_jwk).collect::<Vec<_>>()})
}

/// The keys of a policy's `[signing]` table: those that sign now, and every asymmetric key
/// with the last day its public half is published (none: while it signs).
pub struct PolicyKeys {
    /// Keys that sign the card.
    pub signing: Vec<CardSigningKey>,
    /// The public halves of the asymmetric keys, each with its `retiring_until` day.
    pub published: Vec<PublishedKey>,
}

/// A public key in the JWKS, until its day (none: while it signs).
#[derive(Debug, Clone)]
pub struct PublishedKey {
    /// The public JWK.
    pub jwk: Value,
    /// The last day it is published.
    pub until: Option<UtcDay>,
}

/// The JWKS on `today`: every published key whose day has not passed.
pub fn jwks_on(published: &[PublishedKey], today: UtcDay) -> Value {
    let keys: Vec<Value> = published
        .iter()
        .filter(|key| key.until.is_none_or(|until| until >= today))
        .map(|key| key.jwk.clone())
        .collect();
    json!({ "keys": keys })
}

/// The base64url secret named by an environment variable or a file (`None` when neither is
/// named); `keys` names the two settings in errors. The secret itself is never shown.
pub fn read_secret(
    env: Option<&str>,
    file: Option<&str>,
    keys: (&str, &str),
) -> Result<Option<Vec<u8>>, String> {
    let encoded = match (env, file) {
        (Some(var), None) => std::env::var(var).map_err(|_| {
            format!(
                "the environment variable {var} named by {} is not set",
                keys.0
            )
        })?,
        (None, Some(file)) => std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {}", keys.1, e.kind()))?,
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => return Err(format!("set one of {} or {}", keys.0, keys.1)),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim())
        .map(Some)
        .map_err(|_| "the secret must be base64url without padding".to_owned())
}

/// Writes a new private key for `alg` ("EdDSA" or "ES256") to `path` (mode 0600, never over an
/// existing file).
pub fn generate(alg: &str, path: &Path) -> Result<(), String> {
    let pem = match alg {
        "EdDSA" => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| e.to_string())?;
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
                .map_err(|e| e.to_string())?
                .to_string()
        }
        "ES256" => {
            let key = loop {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
                // Rejection sampling: a scalar at or above the group order is refused.
                if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&bytes) {
                    break key;
                }
            };
            p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(&key, p256::pkcs8::LineEnding::LF)
                .map_err(|e| e.to_string())?
                .to_string()
        }
        other => {
            return Err(format!(
                "--alg {other:?}: use EdDSA or ES256 (HS256 secrets come from the environment or a file)"
            ));
        }
    };
    write_new_key(path, pem.as_bytes())
}

/// Writes a key file that does not exist yet (mode 0600); says why not in the operator's terms.
pub(crate) fn write_new_key(path: &Path, bytes: &[u8]) -> Result<(), String> {
    write_private(path, bytes).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => format!(
            "{} already exists; keys are never overwritten",
            path.display()
        ),
        kind => format!("cannot write {}: {kind}", path.display()),
    })
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Creates `path` readable by its owner only (where the platform has modes).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    // The data directory may not exist yet when the store is not a file in it.
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(bytes)
}

/// Replaces `path` with `bytes`, mode 0600: written whole under a name of this process's, then
/// renamed over the old file, so a reader beside it reads the old or the new, never half.
pub(crate) fn replace_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension(format!("{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    write_private(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

/// `path`'s contents, only if it and its directory belong to this process's user and nobody
/// else may write them: what another user could have put there is not trusted.
pub(crate) fn read_own_private(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::MetadataExt as _;
    let own = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|meta| {
            meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
        })
    };
    (own(path) && own(path.parent()?)).then(|| std::fs::read(path).ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retiring_key_is_published_through_its_last_day_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = default_card_key(dir.path()).unwrap();
        let jwk = key.public_jwk().unwrap();
        let published = vec![
            PublishedKey {
                jwk: jwk.clone(),
                until: None,
            },
            PublishedKey {
                jwk,
                until: UtcDay::parse("2027-01-31"),
            },
        ];
        assert_eq!(
            jwks_on(&published, UtcDay::parse("2027-01-31").unwrap())["keys"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            jwks_on(&published, UtcDay::parse("2027-02-01").unwrap())["keys"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

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
        let set = jwks(&[first, CardSigningKey::hs256("shared", vec![1; 32])]);
        let keys = set["keys"].as_array().unwrap();
        assert_eq!(keys.len(), 1, "symmetric keys are never published");
        assert!(keys[0].get("d").is_none(), "no private part");
    }
}
