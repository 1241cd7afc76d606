//! `[auth]`: which credentials open the door, and how long a verdict is trusted.

use super::{Invalid, invalid};
use crate::guard::scheme::Scheme;
use crate::units::{Bounded, Seconds};
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
    pub credential_cache_seconds: Seconds<0, 5>,
    /// Argon2 password verifications allowed at once.
    #[serde(default = "default_password_checks_at_once")]
    pub password_checks_at_once: Bounded<1, 64>,
    /// `[[auth.issuers]]`: the identity providers whose access tokens the door accepts (with
    /// `"jwt"` in `schemes`).
    #[serde(default)]
    pub issuers: Vec<IssuerPolicy>,
    /// The header a TLS-terminating proxy in `server.trusted_proxies` forwards the verified
    /// client certificate in (URL-encoded PEM, nginx's `$ssl_client_escaped_cert`), for
    /// `"mtls"` behind it. Read from trusted proxies only.
    #[serde(default)]
    pub forwarded_client_certificate_header: Option<String>,
}

/// `[[auth.issuers]]`: one identity provider whose JWT access tokens (RFC 9068) open the door
/// to the peers bound to their subjects.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerPolicy {
    /// The name bindings use (`peer bind NAME --issuer NAME`): 1-64 of letters, digits, `.`,
    /// `_` and `-`.
    pub name: String,
    /// `iss`, compared exactly; discovery at `<issuer>/.well-known/openid-configuration`, else
    /// RFC 8414's `<scheme://host>/.well-known/oauth-authorization-server<path>`.
    pub issuer: String,
    /// Must be `aud`, or in it: this door's own identifier at the provider.
    pub audience: String,
    /// The key set's URL, instead of discovery.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// A key set on disk, instead of discovery (read at start).
    #[serde(default)]
    pub jwks_file: Option<std::path::PathBuf>,
    /// The provider's token endpoint, for the card's client-credentials flow; from discovery
    /// when absent (without either the card names the provider's discovery document instead).
    #[serde(default)]
    pub token_url: Option<String>,
    /// Whether the public card advertises this issuer (the operator's own provider); else only
    /// the extended card of the peers bound to it does.
    #[serde(default)]
    pub public: bool,
    /// Whether each operation needs its scope in the token (`a2a:message`, `a2a:tasks:read`,
    /// `a2a:tasks:cancel`, `a2a:push`).
    #[serde(default = "yes")]
    pub require_scopes: bool,
    /// The signature algorithms accepted: some of RS256, PS256, ES256, EdDSA.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Accepts tokens without `typ: at+jwt`, for providers that issue plain JWTs (an ID token
    /// is still refused).
    #[serde(default)]
    pub plain_jwt: bool,
    /// How far the provider's clock may be from ours.
    #[serde(default = "default_skew")]
    pub clock_skew_seconds: Seconds<0, 300>,
    /// The longest token lifetime accepted.
    #[serde(default = "default_max_lifetime")]
    pub max_token_lifetime_seconds: Seconds<60, 604_800>,
    /// Whether a token must name its client in `client_id`; when false (the default), a token
    /// without `client_id` is bound by its `sub`. A `client_id` that is empty or not a string is
    /// refused either way.
    #[serde(default)]
    pub client_id_required: bool,
    /// The token claims the authorization policies read (`groups`, `roles`): each becomes a tag
    /// of the peer in Cedar, a set of strings (a string claim is a set of one; other values
    /// are not read). At most 16 names, each at most 64 characters.
    #[serde(default)]
    pub claims: Vec<String>,
    /// Allows an `http://` issuer, key set or discovery on a loopback address: for tests and
    /// local development only.
    #[serde(default)]
    pub dangerous_allow_http_loopback: bool,
}

/// The most token claims one provider's tokens hand the authorization policies.
pub const MAX_CLAIMS: usize = 16;

fn yes() -> bool {
    true
}
fn default_algorithms() -> Vec<String> {
    crate::jose::access_token::ASYMMETRIC_ALGORITHMS
        .iter()
        .map(|alg| (*alg).to_owned())
        .collect()
}
fn default_skew() -> Seconds<0, 300> {
    const { Seconds::of(60) }
}
fn default_max_lifetime() -> Seconds<60, 604_800> {
    const { Seconds::of(24 * 3600) }
}

/// Whether `name` is a valid issuer (or peer-binding) name: 1-64 of letters, digits and `._-`.
pub fn is_valid_issuer_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl IssuerPolicy {
    /// At most [`MAX_CLAIMS`] names, each 1-64 characters without control characters.
    fn validate_claims(&self, key: &str) -> Result<(), Invalid> {
        let bad = |claim: &String| {
            claim.is_empty() || claim.len() > 64 || claim.contains(char::is_control)
        };
        if self.claims.len() > MAX_CLAIMS || self.claims.iter().any(bad) {
            return Err(invalid(
                key.to_owned(),
                "must name at most 16 claims, each 1-64 characters",
            ));
        }
        Ok(())
    }

    fn validate(&self, at: usize) -> Result<(), Invalid> {
        self.validate_as(&format!("auth.issuers[{at}]"))
    }

    /// Checks the issuer, naming its settings under `table` (`auth.issuers[0]`, `admin.issuer`).
    pub(super) fn validate_as(&self, table: &str) -> Result<(), Invalid> {
        let key = |field: &str| format!("{table}.{field}");
        if !is_valid_issuer_name(&self.name) {
            return Err(invalid(
                key("name"),
                "must be 1-64 of letters, digits, '.', '_' and '-'",
            ));
        }
        for (field, url) in [
            ("issuer", Some(&self.issuer)),
            ("jwks_uri", self.jwks_uri.as_ref()),
        ] {
            let Some(url) = url else { continue };
            let parsed =
                reqwest::Url::parse(url).map_err(|_| invalid(key(field), "is not a URL"))?;
            let host = parsed
                .host_str()
                .unwrap_or_default()
                .trim_matches(['[', ']']);
            let loopback_http = parsed.scheme() == "http"
                && (host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback()));
            if parsed.scheme() != "https" && !(loopback_http && self.dangerous_allow_http_loopback)
            {
                return Err(invalid(
                    key(field),
                    "must be https (http only on a loopback address, with dangerous_allow_http_loopback)",
                ));
            }
            if !parsed.username().is_empty()
                || parsed.password().is_some()
                || parsed.fragment().is_some()
            {
                return Err(invalid(
                    key(field),
                    "must carry no credentials and no fragment",
                ));
            }
        }
        if self.audience.trim().is_empty() {
            return Err(invalid(
                key("audience"),
                "must name this door as the provider knows it",
            ));
        }
        if self.jwks_uri.is_some() && self.jwks_file.is_some() {
            return Err(invalid(
                key("jwks_file"),
                "give jwks_uri or jwks_file, not both",
            ));
        }
        if self.algorithms.is_empty()
            || self.algorithms.iter().any(|alg| {
                !crate::jose::access_token::ASYMMETRIC_ALGORITHMS.contains(&alg.as_str())
            })
        {
            return Err(invalid(
                key("algorithms"),
                "must list some of \"RS256\", \"PS256\", \"ES256\", \"EdDSA\" (never none or HMAC)",
            ));
        }
        self.validate_claims(&key("claims"))?;
        Ok(())
    }
}

impl Default for AuthPolicy {
    fn default() -> Self {
        Self {
            schemes: default_schemes(),
            api_key_header: default_api_key_header(),
            credential_cache_seconds: default_credential_cache_seconds(),
            password_checks_at_once: default_password_checks_at_once(),
            issuers: Vec::new(),
            forwarded_client_certificate_header: None,
        }
    }
}

fn default_schemes() -> Vec<Scheme> {
    vec![Scheme::Bearer]
}
fn default_api_key_header() -> String {
    "X-API-Key".to_owned()
}
fn default_credential_cache_seconds() -> Seconds<0, 5> {
    const { Seconds::of(2) }
}
fn default_password_checks_at_once() -> Bounded<1, 64> {
    const { Bounded::of(2) }
}

impl AuthPolicy {
    /// The names of its identity providers (`[[auth.issuers]] name`).
    pub fn issuer_names(&self) -> Vec<String> {
        self.issuers
            .iter()
            .map(|issuer| issuer.name.clone())
            .collect()
    }

    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.schemes.is_empty() {
            return Err(invalid(
                "auth.schemes",
                "at least one of \"bearer\", \"basic\", \"api_key\", \"jwt\" must be enabled",
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
        // Both ways, so neither an enabled scheme with nobody to trust nor a list of issuers
        // nobody asked for passes unnoticed (a check skipped when a list is empty).
        match (self.schemes.contains(&Scheme::Jwt), self.issuers.is_empty()) {
            (true, true) => {
                return Err(invalid(
                    "auth.issuers",
                    "\"jwt\" is in auth.schemes but no [[auth.issuers]] names a provider",
                ));
            }
            (false, false) => {
                return Err(invalid(
                    "auth.schemes",
                    "[[auth.issuers]] names providers but \"jwt\" is not enabled",
                ));
            }
            _ => {}
        }
        for (at, issuer) in self.issuers.iter().enumerate() {
            issuer.validate(at)?;
            let earlier = &self.issuers[..at];
            if earlier.iter().any(|other| other.name == issuer.name) {
                return Err(invalid(
                    format!("auth.issuers[{at}].name"),
                    "is given twice",
                ));
            }
            if earlier.iter().any(|other| other.issuer == issuer.issuer) {
                return Err(invalid(
                    format!("auth.issuers[{at}].issuer"),
                    "is given twice",
                ));
            }
        }
        Ok(())
    }
}
