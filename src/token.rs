//! Machine-generated credentials: peer tokens `pgt_<id>_<secret><crc>`, peer API keys
//! `pgk_<id>_<secret><crc>` and administrator tokens `pga_<id>_<secret><crc>`.
//!
//! * the prefix names the kind of secret, so scanners and log redactors can find leaked ones
//!   and a key can never be used as a token or the other way round;
//! * `<id>` (12 base62 characters) finds the credential row without revealing anything;
//! * `<secret>` (32 base62 characters, 190.5 bits from the operating system's CSPRNG);
//! * `<crc>` (6 base62 characters) is CRC32 of everything before it, so typos and junk are
//!   refused before the store is asked. The checksum is not a security control.
//!
//! The store keeps only [`TokenSecretHash`], a SHA-256 over the kind, the id and the secret; the
//! credential itself is shown once, when it is issued.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The kinds of generated credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialKind {
    /// `Authorization: Bearer pgt_…`
    PeerToken,
    /// `X-API-Key: pgk_…` (the header name is configurable)
    ApiKey,
    /// `Authorization: Bearer pga_…` on the admin API only.
    AdminToken,
}

impl CredentialKind {
    /// The prefix that starts every credential of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::PeerToken => "pgt_",
            Self::ApiKey => "pgk_",
            Self::AdminToken => "pga_",
        }
    }

    /// The name the store uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PeerToken => "token",
            Self::ApiKey => "api_key",
            Self::AdminToken => "admin_token",
        }
    }
}

const PREFIX_LEN: usize = 4;
const ID_LEN: usize = 12;
const SECRET_LEN: usize = 32;
const CRC_LEN: usize = 6;
/// Length of a well-formed token in bytes.
pub const TOKEN_LEN: usize = PREFIX_LEN + ID_LEN + 1 + SECRET_LEN + CRC_LEN;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Why a presented string is not a peer token. Each case is decided without the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFormatError {
    /// Wrong length, prefix, separator or alphabet.
    #[error("not a peer token")]
    Malformed,
    /// Well-formed, but the checksum does not match: a typo or a made-up token.
    #[error("peer token checksum mismatch")]
    BadChecksum,
}

/// A freshly issued token: the only moment the secret exists in full.
pub struct IssuedToken {
    /// The full token to hand to the peer, once.
    pub token: String,
    /// The public id embedded in the token.
    pub token_id: String,
    /// What the store keeps.
    pub secret_hash: TokenSecretHash,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

/// A token that passed the format and checksum checks; not yet known to be valid.
#[derive(Clone, Copy)]
pub struct ParsedToken<'a> {
    /// The public id.
    pub token_id: &'a str,
    kind: CredentialKind,
    secret: &'a str,
}

impl std::fmt::Debug for ParsedToken<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedToken")
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

/// SHA-256 over a domain label, the token id and the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecretHash(pub [u8; 32]);

impl std::fmt::Debug for TokenSecretHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSecretHash(..)")
    }
}

impl TokenSecretHash {
    fn compute(kind: CredentialKind, token_id: &str, secret: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"peergate peer credential v1\0");
        hasher.update(kind.as_str().as_bytes());
        hasher.update(b"\0");
        hasher.update(token_id.as_bytes());
        hasher.update(b"\0");
        hasher.update(secret.as_bytes());
        Self(hasher.finalize().into())
    }
}

impl<'a> ParsedToken<'a> {
    /// The secret part, for tools that rebuild a token from its parts (never log it).
    pub fn secret(&self) -> &'a str {
        self.secret
    }

    /// Whether this token's secret hashes to `stored`, compared in constant time.
    pub fn matches(&self, stored: &TokenSecretHash) -> bool {
        let presented = TokenSecretHash::compute(self.kind, self.token_id, self.secret);
        presented.0.ct_eq(&stored.0).into()
    }
}

/// Issues a new credential of `kind` from the operating system's CSPRNG.
pub fn issue(kind: CredentialKind) -> Result<IssuedToken, getrandom::Error> {
    let token_id = random_base62(ID_LEN)?;
    let secret = random_base62(SECRET_LEN)?;
    let token = assemble(kind, &token_id, &secret);
    let secret_hash = TokenSecretHash::compute(kind, &token_id, &secret);
    Ok(IssuedToken {
        token,
        token_id,
        secret_hash,
    })
}

/// Builds the credential text for an id and a secret, checksum included. Tools use it to turn
/// parts into a credential; it creates nothing in the store.
pub fn assemble(kind: CredentialKind, token_id: &str, secret: &str) -> String {
    let body = format!("{}{token_id}_{secret}", kind.prefix());
    let crc = crc_base62(body.as_bytes());
    format!("{body}{crc}")
}

/// Checks shape, prefix and checksum for `kind`; touches nothing else.
pub fn parse(kind: CredentialKind, presented: &str) -> Result<ParsedToken<'_>, TokenFormatError> {
    // ASCII first: the byte offsets below must fall on character boundaries.
    if !presented.is_ascii()
        || presented.len() != TOKEN_LEN
        || !presented.starts_with(kind.prefix())
    {
        return Err(TokenFormatError::Malformed);
    }
    let rest = &presented[PREFIX_LEN..];
    let (token_id, rest) = rest.split_at(ID_LEN);
    let Some(rest) = rest.strip_prefix('_') else {
        return Err(TokenFormatError::Malformed);
    };
    let (secret, crc) = rest.split_at(SECRET_LEN);
    let is_base62 = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric());
    if !is_base62(token_id) || !is_base62(secret) || !is_base62(crc) {
        return Err(TokenFormatError::Malformed);
    }
    let body = &presented[..presented.len() - CRC_LEN];
    if crc_base62(body.as_bytes()).as_bytes() != crc.as_bytes() {
        return Err(TokenFormatError::BadChecksum);
    }
    Ok(ParsedToken {
        token_id,
        kind,
        secret,
    })
}

/// Random base62 text by rejection sampling, so every character is equally likely.
fn random_base62(len: usize) -> Result<String, getrandom::Error> {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buf)?;
        for &b in &buf {
            // 248 = 4 * 62: bytes at or above it would favour the first characters.
            if b < 248 && out.len() < len {
                out.push(BASE62[usize::from(b % 62)] as char);
            }
        }
    }
    Ok(out)
}

fn crc_base62(data: &[u8]) -> String {
    let mut n = u64::from(crc32fast::hash(data));
    let mut digits = [b'0'; CRC_LEN];
    for slot in digits.iter_mut().rev() {
        *slot = BASE62[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_token_parses_and_matches_its_hash() {
        let issued = issue(CredentialKind::PeerToken).unwrap();
        assert_eq!(issued.token.len(), TOKEN_LEN);
        let parsed = parse(CredentialKind::PeerToken, &issued.token).unwrap();
        assert_eq!(parsed.token_id, issued.token_id);
        assert!(parsed.matches(&issued.secret_hash));
    }

    #[test]
    fn another_tokens_hash_does_not_match() {
        let a = issue(CredentialKind::PeerToken).unwrap();
        let b = issue(CredentialKind::PeerToken).unwrap();
        assert!(
            !parse(CredentialKind::PeerToken, &a.token)
                .unwrap()
                .matches(&b.secret_hash)
        );
    }

    #[test]
    fn a_single_changed_character_fails_the_checksum() {
        let issued = issue(CredentialKind::PeerToken).unwrap();
        let mut bytes = issued.token.into_bytes();
        let i = PREFIX_LEN + ID_LEN + 5;
        bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
        let typo = String::from_utf8(bytes).unwrap();
        assert_eq!(
            parse(CredentialKind::PeerToken, &typo).unwrap_err(),
            TokenFormatError::BadChecksum
        );
    }

    #[test]
    fn junk_is_malformed() {
        for junk in [
            "",
            "pgt_",
            "Bearer",
            &"x".repeat(TOKEN_LEN),
            "pgt_ÄÄÄÄÄÄ",
            &format!("pgt_{}", "é".repeat(25) + "x"),
        ] {
            assert_eq!(
                parse(CredentialKind::PeerToken, junk).unwrap_err(),
                TokenFormatError::Malformed,
                "{junk}"
            );
        }
    }

    #[test]
    fn a_key_is_not_a_token_and_the_other_way_round() {
        let key = issue(CredentialKind::ApiKey).unwrap();
        assert!(key.token.starts_with("pgk_"));
        assert!(parse(CredentialKind::ApiKey, &key.token).is_ok());
        assert_eq!(
            parse(CredentialKind::PeerToken, &key.token).unwrap_err(),
            TokenFormatError::Malformed
        );
        // The same id and secret under the other kind hash differently.
        let parsed = parse(CredentialKind::ApiKey, &key.token).unwrap();
        let as_token = assemble(CredentialKind::PeerToken, parsed.token_id, parsed.secret);
        let as_token = parse(CredentialKind::PeerToken, &as_token).unwrap();
        assert!(!as_token.matches(&key.secret_hash));
    }

    #[test]
    fn secret_carries_at_least_190_bits() {
        assert!(SECRET_LEN as f64 * 62f64.log2() >= 190.0);
    }
}
