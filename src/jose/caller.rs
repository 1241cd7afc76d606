//! The caller's assertion: for every request peergate sends the agent behind the door, a
//! short-lived JWT it signs saying who is calling — the peer (id, name, owner), how it signed in
//! (the scheme, and an identity provider's issuer and subject) and the scopes in force. The
//! agent verifies it offline against peergate's JWKS, where its key is published under a `kid`
//! of its own; it never carries the partner's credential.
//!
//! Typed `peergate-caller+jwt`, so it can never pass as an access token (`at+jwt`) or a card
//! signature (`JOSE`); its audience is the agent's URL; it lives a minute at most and has a
//! unique `jti`, so an agent that remembers the ids it saw refuses a replay.

use super::sign::{CardSigningKey, JwsAlgorithm};
use serde_json::{Value, json};

/// The assertion's `typ`.
pub const TYP: &str = "peergate-caller+jwt";

/// How long an assertion is good for, in seconds.
pub const LIFETIME_SECONDS: i64 = 60;

/// Who is calling, as an assertion states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The peer's stable id (`sub`).
    pub peer_id: String,
    /// Its name.
    pub peer_name: String,
    /// The administrator it acts for.
    pub owner: String,
    /// How it signed in: `bearer`, `basic`, `api_key`, `jwt`, `mtls`.
    pub scheme: &'static str,
    /// The identity provider's issuer name and the token's subject, for `jwt`.
    pub identity: Option<(String, String)>,
    /// The operation scopes in force (all of them unless a token narrowed them).
    pub scopes: Vec<&'static str>,
}

/// Signs callers' assertions with one key.
#[derive(Debug)]
pub struct CallerAssertions {
    key: CardSigningKey,
    issuer: String,
}

impl CallerAssertions {
    /// Assertions issued as `issuer` (peergate's public origin), signed with `key`; a shared
    /// secret is refused: the agent must verify offline with a public key.
    pub fn new(key: CardSigningKey, issuer: String) -> Result<Self, String> {
        if key.algorithm() == JwsAlgorithm::Hs256 {
            return Err("a shared-secret key cannot sign callers' assertions: the agent verifies them with a public key (EdDSA or ES256)".to_owned());
        }
        Ok(Self { key, issuer })
    }

    /// The key's id, as the JWKS lists it.
    pub fn kid(&self) -> &str {
        self.key.kid()
    }

    /// A fresh assertion of `caller` for `audience` (the agent's URL), issued at `now` (Unix
    /// seconds).
    pub fn sign(&self, audience: &str, caller: &Caller, now: i64) -> String {
        let header = json!({"alg": self.key.alg(), "kid": self.key.kid(), "typ": TYP});
        let mut claims = json!({
            "iss": self.issuer,
            "aud": audience,
            "sub": caller.peer_id,
            "iat": now,
            "nbf": now,
            "exp": now + LIFETIME_SECONDS,
            "jti": uuid::Uuid::new_v4().to_string(),
            "peer": {"id": caller.peer_id, "name": caller.peer_name, "owner": caller.owner},
            "auth": {"scheme": caller.scheme},
            "scope": caller.scopes.join(" "),
        });
        if let Some((issuer, subject)) = &caller.identity {
            claims["auth"]["iss"] = Value::from(issuer.as_str());
            claims["auth"]["sub"] = Value::from(subject.as_str());
        }
        self.key.sign_compact(&header, &claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use ed25519_dalek::Verifier as _;

    fn decode(part: &str) -> Value {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn an_assertion_is_typed_short_lived_unique_and_verifies_with_the_published_key() {
        let secret = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let public = secret.verifying_key();
        let key = CardSigningKey::ed25519("caller-1", secret);
        let assertions = CallerAssertions::new(key, "https://gw.example".into()).unwrap();
        let caller = Caller {
            peer_id: "peer_1".into(),
            peer_name: "alice".into(),
            owner: "operator".into(),
            scheme: "jwt",
            identity: Some(("acme".into(), "alice-app".into())),
            scopes: vec!["a2a:message", "a2a:tasks:read"],
        };
        let token = assertions.sign("https://agent.example/rpc", &caller, 1_000);
        let again = assertions.sign("https://agent.example/rpc", &caller, 1_000);
        let parts: Vec<&str> = token.split('.').collect();
        let (header, claims) = (decode(parts[0]), decode(parts[1]));
        assert_eq!(header["typ"], TYP);
        assert_eq!(header["kid"], "caller-1");
        assert_eq!(header["alg"], "EdDSA");
        assert_eq!(claims["aud"], "https://agent.example/rpc");
        assert_eq!(claims["iss"], "https://gw.example");
        assert_eq!(claims["sub"], "peer_1");
        assert_eq!(claims["exp"], 1_060);
        assert_eq!(claims["peer"]["name"], "alice");
        assert_eq!(claims["auth"]["iss"], "acme");
        assert_eq!(claims["auth"]["sub"], "alice-app");
        assert_eq!(claims["scope"], "a2a:message a2a:tasks:read");
        assert_ne!(
            claims["jti"],
            decode(again.split('.').nth(1).unwrap())["jti"]
        );
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[2])
            .unwrap();
        let signature = ed25519_dalek::Signature::from_slice(&signature).unwrap();
        let input = format!("{}.{}", parts[0], parts[1]);
        assert!(public.verify(input.as_bytes(), &signature).is_ok());
    }

    #[test]
    fn a_shared_secret_cannot_sign_assertions() {
        let key = CardSigningKey::hs256("h", vec![1; 32]);
        assert!(CallerAssertions::new(key, "https://gw.example".into()).is_err());
    }
}
