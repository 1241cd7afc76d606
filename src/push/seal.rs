//! The key that encrypts push-notification tokens and credentials at rest.
//!
//! A config's secrets are sealed with AES-256-GCM under a random 96-bit nonce, with the task
//! and config ids as associated data: a sealed value copied onto another config's row does
//! not open there, so a writer to the store cannot move a receiver's credentials to a URL of
//! their choosing without the key. What this protects is the store (a dump, a backup, a
//! read-only leak); whoever holds the key and the store holds the secrets.

use base64::Engine;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Length of the key, in bytes.
pub const KEY_BYTES: usize = 32;

/// Where the policy says the key is (`push.key_env`, `push.key_file`); neither names none.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeySource<'a> {
    /// The environment variable holding it.
    pub env: Option<&'a str>,
    /// The file holding it.
    pub file: Option<&'a str>,
}

/// File name of the key generated in the data directory when the policy names none.
pub const GENERATED_KEY_FILE: &str = "push-notification.key";

/// What a config keeps secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSecrets {
    /// Sent as `X-A2A-Notification-Token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `Authorization` scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// `Authorization` credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

/// Why a key could not be loaded or a value opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The key setting is missing, unreadable or weak; names the setting, never the key.
    #[error("{setting}: {reason}")]
    Key {
        /// The policy setting.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A sealed value did not open: another key sealed it, or the row was altered.
    #[error(
        "a push notification config's secrets do not open with this key (push.key_env / push.key_file changed, or the row was altered)"
    )]
    Unopenable,
}

/// The sealing key.
pub struct SealingKey {
    key: LessSafeKey,
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(…)")
    }
}

impl SealingKey {
    /// A key from 32 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SealError> {
        if bytes.len() != KEY_BYTES {
            return Err(SealError::Key {
                setting: "push.key_env / push.key_file",
                reason: format!(
                    "the key is {} bytes; it must be exactly {KEY_BYTES} random bytes, base64url",
                    bytes.len()
                ),
            });
        }
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| SealError::Key {
            setting: "push.key_env / push.key_file",
            reason: "not an AES-256 key".to_owned(),
        })?;
        Ok(Self {
            key: LessSafeKey::new(key),
        })
    }

    /// The key `named` names, or (`allow_generated`) the one in `data_dir`, created on first
    /// use. Instances serving together must name a shared key, so they pass `false`.
    pub fn load(
        named: KeySource<'_>,
        data_dir: &Path,
        allow_generated: bool,
    ) -> Result<Self, SealError> {
        let named = crate::jose::keys::read_secret(
            named.env,
            named.file,
            ("push.key_env", "push.key_file"),
        )
        .map_err(|reason| SealError::Key {
            setting: "push.key_env / push.key_file",
            reason,
        })?;
        if let Some(bytes) = named {
            return Self::from_bytes(&bytes);
        }
        if !allow_generated {
            return Err(SealError::Key {
                setting: "push.key_env / push.key_file",
                reason: "instances serving together must share the key that encrypts push notification secrets; name it (generate one with `peergate keys push`)".to_owned(),
            });
        }
        let path = data_dir.join(GENERATED_KEY_FILE);
        let unreadable = |e: std::io::Error| SealError::Key {
            setting: "push.key_file",
            reason: format!(
                "cannot use the generated key in the data directory: {}",
                e.kind()
            ),
        };
        if !path.exists() {
            crate::jose::keys::write_private(&path, generate().as_bytes()).map_err(unreadable)?;
        }
        let encoded = std::fs::read_to_string(&path).map_err(unreadable)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded.trim())
            .map_err(|_| SealError::Key {
                setting: "push.key_file",
                reason: format!("{GENERATED_KEY_FILE} in the data directory is not base64url"),
            })?;
        Self::from_bytes(&bytes)
    }

    /// Seals `secrets` for the config `config_id` of `task_id`.
    pub fn seal(&self, task_id: &str, config_id: &str, secrets: &PushSecrets) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        // The operating system's generator failing is not something to serve through.
        getrandom::fill(&mut nonce).expect("the operating system's random generator works");
        let mut sealed = serde_json::to_vec(secrets).unwrap_or_default();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(task_id, config_id)),
                &mut sealed,
            )
            .expect("AES-GCM seals any message this small");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    /// Opens what [`seal`](Self::seal) made for the same task and config.
    pub fn open(
        &self,
        task_id: &str,
        config_id: &str,
        sealed: &str,
    ) -> Result<PushSecrets, SealError> {
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| SealError::Unopenable)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Unopenable);
        }
        let mut body = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| SealError::Unopenable)?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(associated(task_id, config_id)), &mut body)
            .map_err(|_| SealError::Unopenable)?;
        serde_json::from_slice(plain).map_err(|_| SealError::Unopenable)
    }
}

/// A new random key, base64url (what `peergate keys push` prints).
pub fn generate() -> String {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key).expect("the operating system's random generator works");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

/// The ids a sealed value is bound to; the separator cannot occur in either id.
fn associated(task_id: &str, config_id: &str) -> Vec<u8> {
    format!("peergate push v1\n{task_id}\n{config_id}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SealingKey {
        SealingKey::from_bytes(&[7u8; KEY_BYTES]).unwrap()
    }

    #[test]
    fn sealed_secrets_open_only_for_their_own_task_and_config_and_key() {
        let secrets = PushSecrets {
            token: Some("tok-123".to_owned()),
            scheme: Some("Bearer".to_owned()),
            credentials: Some("receiver-secret".to_owned()),
        };
        let sealed = key().seal("t1", "c1", &secrets);
        assert!(!sealed.contains("receiver-secret") && !sealed.contains("tok-123"));
        assert_eq!(key().open("t1", "c1", &sealed).unwrap(), secrets);
        // Two seals of the same secrets differ (fresh nonce).
        assert_ne!(key().seal("t1", "c1", &secrets), sealed);
        // Moved to another config or task, or opened with another key: refused.
        assert_eq!(key().open("t1", "c2", &sealed), Err(SealError::Unopenable));
        assert_eq!(key().open("t2", "c1", &sealed), Err(SealError::Unopenable));
        let other = SealingKey::from_bytes(&[8u8; KEY_BYTES]).unwrap();
        assert_eq!(other.open("t1", "c1", &sealed), Err(SealError::Unopenable));
        // Tampered: refused.
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&sealed)
            .unwrap();
        bytes[NONCE_LEN] ^= 1;
        let tampered = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(
            key().open("t1", "c1", &tampered),
            Err(SealError::Unopenable)
        );
    }

    #[test]
    fn the_key_is_named_by_the_policy_or_generated_once_for_a_lone_instance() {
        let dir = tempfile::tempdir().unwrap();
        let refused = SealingKey::load(KeySource::default(), dir.path(), false)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("push.key_env") && refused.contains("share"),
            "{refused}"
        );
        let first = SealingKey::load(KeySource::default(), dir.path(), true).unwrap();
        let sealed = first.seal("t", "c", &PushSecrets::default());
        let again = SealingKey::load(KeySource::default(), dir.path(), true).unwrap();
        assert!(
            again.open("t", "c", &sealed).is_ok(),
            "the generated key is kept"
        );
        let short = dir.path().join("short.key");
        std::fs::write(&short, "AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let file = short.display().to_string();
        let named = KeySource {
            env: None,
            file: Some(&file),
        };
        let refused = SealingKey::load(named, dir.path(), true)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("16 bytes"), "{refused}");
        let named = KeySource {
            env: Some("PEERGATE_TEST_NO_SUCH_PUSH_KEY"),
            file: None,
        };
        let refused = SealingKey::load(named, dir.path(), true)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("PEERGATE_TEST_NO_SUCH_PUSH_KEY named by push.key_env is not set"),
            "{refused}"
        );
    }

    #[test]
    fn a_short_key_is_refused_naming_the_setting_not_the_key() {
        let refused = SealingKey::from_bytes(&[1u8; 16]).unwrap_err().to_string();
        assert!(
            refused.contains("push.key_env") && refused.contains("16 bytes"),
            "{refused}"
        );
    }
}
