//! `[auth]`: which credentials open the door, and how long a verdict is trusted.

use super::{Invalid, invalid};
use crate::layers::auth::Scheme;
use serde::Deserialize;

/// `[auth]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthPolicy {
    /// Enabled schemes: `bearer`, `basic`, `api_key`, in the order challenges are sent.
    #[serde(default = "default_schemes")]
    pub schemes: Vec<Scheme>,
    /// Header carrying API keys.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// How long a verified credential is trusted without asking the store again. A revocation
    /// made with the command line while the server runs takes effect within this time.
    #[serde(default = "default_credential_cache_seconds")]
    pub credential_cache_seconds: u64,
    /// Argon2 password verifications allowed at once.
    #[serde(default = "default_password_checks_at_once")]
    pub password_checks_at_once: usize,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        Self {
            schemes: default_schemes(),
            api_key_header: default_api_key_header(),
            credential_cache_seconds: default_credential_cache_seconds(),
            password_checks_at_once: default_password_checks_at_once(),
        }
    }
}

fn default_schemes() -> Vec<Scheme> {
    vec![Scheme::Bearer]
}
fn default_api_key_header() -> String {
    "X-API-Key".to_owned()
}
fn default_credential_cache_seconds() -> u64 {
    2
}
fn default_password_checks_at_once() -> usize {
    2
}

impl AuthPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.schemes.is_empty() {
            return Err(invalid(
                "auth.schemes",
                "at least one of \"bearer\", \"basic\", \"api_key\" must be enabled",
            ));
        }
        for (i, scheme) in self.schemes.iter().enumerate() {
            if self.schemes[..i].contains(scheme) {
                return Err(invalid(
                    "auth.schemes",
                    format!("{:?} is listed twice", scheme.policy_name()),
                ));
            }
        }
        match axum::http::HeaderName::from_bytes(self.api_key_header.as_bytes()) {
            Ok(name) if name != axum::http::header::AUTHORIZATION => {}
            _ => {
                return Err(invalid(
                    "auth.api_key_header",
                    "must be a valid header name other than Authorization",
                ));
            }
        }
        if !(1..=64).contains(&self.password_checks_at_once) {
            return Err(invalid(
                "auth.password_checks_at_once",
                "must be between 1 and 64",
            ));
        }
        if self.credential_cache_seconds > 5 {
            return Err(invalid(
                "auth.credential_cache_seconds",
                "must be at most 5, so that a revocation takes effect within seconds",
            ));
        }
        Ok(())
    }
}
