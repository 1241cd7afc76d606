//! The ways a caller may prove who it is, as the policy names them (`auth.schemes`).

/// The authentication schemes peergate knows, as the policy names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scheme {
    /// `Authorization: Bearer <peer token>`
    Bearer,
    /// `Authorization: Basic base64(name:password)`
    Basic,
    /// `<configured header>: <API key>`
    ApiKey,
    /// `Authorization: Bearer <an identity provider's JWT access token>` (`[[auth.issuers]]`)
    Jwt,
    /// A client certificate the TLS handshake verified (`[server.tls]`)
    Mtls,
}

impl Scheme {
    /// The name used in the policy (`auth.schemes`).
    pub fn policy_name(self) -> &'static str {
        match self {
            Self::Bearer => "bearer",
            Self::Basic => "basic",
            Self::ApiKey => "api_key",
            Self::Jwt => "jwt",
            Self::Mtls => "mtls",
        }
    }
}
