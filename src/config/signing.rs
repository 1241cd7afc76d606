//! `[signing]`: the keys that sign the Agent Card.

use super::{Invalid, invalid};
use crate::jose::sign::JwsAlgorithm;
use serde::Deserialize;

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
    pub retiring_until: Option<String>,
}

impl SigningPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (i, key) in self.keys.iter().enumerate() {
            if !crate::jose::keys::is_valid_kid(&key.kid) {
                return Err(invalid(
                    "signing.keys",
                    "every kid must be 1 to 64 of letters, digits and ._-",
                ));
            }
            if self.keys[..i].iter().any(|k| k.kid == key.kid) {
                return Err(invalid("signing.keys", "a kid is listed twice"));
            }
            if let Some(until) = &key.retiring_until
                && (until.len() != 10 || until.parse::<jiff::civil::Date>().is_err())
            {
                return Err(invalid(
                    "signing.keys",
                    "retiring_until must be a date such as 2027-01-31",
                ));
            }
        }
        if let Some(url) = &self.jwks_url
            && !url.starts_with("https://")
        {
            return Err(invalid("signing.jwks_url", "must be an https URL"));
        }
        Ok(())
    }
}
