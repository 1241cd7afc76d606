//! Why a request was not authenticated ([`AuthError`]), on the door and on the admin API alike:
//! one set of reasons and codes, answered with the listener's own challenges.

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No credential.
    #[error("no credentials were presented")]
    MissingCredentials,
    /// Two `Authorization` headers, two API-key headers, or one of each.
    #[error("more than one credential was presented; send exactly one")]
    AmbiguousCredentials,
    /// An `Authorization` scheme this gateway does not accept.
    #[error("this authentication scheme is not enabled here")]
    SchemeNotEnabled,
    /// Not `<scheme> <credentials>`, or Basic credentials that are not base64 of UTF-8 `name:password`.
    #[error("the Authorization header is malformed")]
    MalformedHeader,
    /// Not well formed for the scheme that read it (a peer token whose checksum fails, an
    /// access token past its size bound), decided without the store. Worded for any token: the
    /// door may take several kinds, and a partner's own IdP token is no peer token to mistake.
    #[error("the token is malformed")]
    MalformedToken,
    /// An unknown, wrong or revoked token. One case on purpose: the answer must not tell
    /// them apart.
    #[error("the token is not valid")]
    InvalidToken,
    /// Wrong name or password, or an unknown, wrong or revoked API key; one case on purpose.
    #[error("the credentials are not valid")]
    InvalidCredentials,
    /// A credential of a kind this listener never takes (a peer's token on the admin API).
    #[error("a peer credential opens nothing here")]
    ForeignCredential,
    /// The client certificate this connection presented has expired since its handshake: the
    /// connection opens nothing more.
    #[error(
        "the client certificate this connection presented has expired; connect again with a current one"
    )]
    CertificateExpired,
    /// The store could not be asked.
    #[error("credentials cannot be checked right now")]
    Unavailable,
    /// Every password check slot is busy and the queue for them is full (a flood of Basic
    /// logins): nothing was decided about these credentials.
    #[error("too many password sign-ins are waiting to be checked; retry in a second")]
    Busy,
}

impl AuthError {
    /// The stable code in the JSON body.
    pub fn code(self) -> &'static str {
        match self {
            Self::MissingCredentials => "missing_credentials",
            Self::AmbiguousCredentials => "ambiguous_credentials",
            Self::SchemeNotEnabled => "scheme_not_enabled",
            Self::MalformedHeader => "malformed_authorization",
            Self::MalformedToken | Self::InvalidToken => "invalid_token",
            Self::InvalidCredentials => "invalid_credentials",
            Self::ForeignCredential => "peer_credential",
            Self::CertificateExpired => "certificate_expired",
            Self::Unavailable => "auth_unavailable",
            Self::Busy => "auth_busy",
        }
    }
}
