//! Client certificates at the door (`"mtls"` in `auth.schemes`, with `[server.tls]`): a
//! certificate the TLS handshake verified (it chains to the client CA, is within its validity
//! and not revoked) opens the door for the one peer bound to its SHA-256 or to one of its
//! subject alternative names, when the request carries no other credential.
//!
//! * The certificate must name `clientAuth` in its extended key usage.
//! * A binding whose value contains `://` matches URI names only (a SPIFFE id); any other
//!   matches DNS names only; so a DNS name can never pass for a URI or the other way round.
//!   Names are compared exactly, byte for byte; a certificate with a name that holds a NUL or
//!   a byte outside printable ASCII has no usable names (its fingerprint still works).
//! * A certificate whose fingerprint and names are bound to two different peers is refused:
//!   one certificate names one peer.

use super::scheme::{Context, CredentialScheme, Failure, Presented};
use super::{AuthError, AuthenticatedPeer, Scheme, SignedInWith, peer};
use crate::guard::certificate::ClientCertificate;
use crate::store::{CredentialStore, PeerIdentity, PeerLogin};
use async_trait::async_trait;
use std::sync::Arc;

/// The door's `"mtls"` scheme.
pub struct ClientCertificates {
    store: Arc<dyn CredentialStore>,
}

impl ClientCertificates {
    /// The scheme, finding peers in `store`.
    pub fn new(store: Arc<dyn CredentialStore>) -> Self {
        Self { store }
    }

    /// The identities `certificate` can prove: its fingerprint, then its names by type.
    fn identities(certificate: &ClientCertificate) -> Vec<PeerIdentity> {
        let mut identities: Vec<PeerIdentity> =
            PeerIdentity::certificate_sha256(&certificate.sha256_hex)
                .into_iter()
                .collect();
        if !certificate.names_unusable {
            let uris = certificate.uris.iter().filter(|uri| uri.contains("://"));
            let dns = certificate
                .dns_names
                .iter()
                .filter(|dns| !dns.contains("://"));
            identities.extend(
                uris.chain(dns)
                    .filter_map(|name| PeerIdentity::certificate_san(name).ok()),
            );
        }
        identities
    }
}

#[async_trait]
impl CredentialScheme<AuthenticatedPeer> for ClientCertificates {
    fn name(&self) -> &'static str {
        "mtls"
    }

    /// None: a certificate is asked for by the TLS handshake, not by a challenge.
    fn challenge(&self) -> String {
        String::new()
    }

    fn claims(&self, presented: &Presented<'_>) -> bool {
        matches!(presented, Presented::Certificate(_))
    }

    fn precheck(&self, _credentials: &str) -> Result<(), AuthError> {
        Ok(())
    }

    fn verification_is_costly(&self) -> bool {
        false
    }

    async fn verify(
        &self,
        _credentials: &str,
        context: &Context<'_>,
    ) -> Result<AuthenticatedPeer, Failure> {
        let certificate = context.certificate.ok_or(AuthError::MissingCredentials)?;
        if !certificate.client_auth {
            tracing::debug!("a client certificate without the clientAuth usage was refused");
            return Err(AuthError::InvalidCredentials.into());
        }
        let mut found: Option<PeerLogin> = None;
        for identity in Self::identities(certificate) {
            let bound = self.store.find_bound_peer(&identity).await.map_err(|e| {
                tracing::error!(error = %e, "identity look-up failed");
                AuthError::Unavailable
            })?;
            match (&found, bound) {
                (_, None) => {}
                (None, Some(login)) => found = Some(login),
                (Some(first), Some(login)) if first.peer_id != login.peer_id => {
                    tracing::warn!(
                        first = %first.peer_name,
                        second = %login.peer_name,
                        "a client certificate is bound to two peers; refused"
                    );
                    return Err(AuthError::InvalidCredentials.into());
                }
                (Some(_), Some(_)) => {}
            }
        }
        let login = found
            .filter(|login| login.active)
            .ok_or(AuthError::InvalidCredentials)?;
        let valid_until = login.valid_until;
        let thumbprint = SignedInWith::Certificate {
            thumbprint: certificate.x5t_s256().into(),
        };
        Ok(peer(Scheme::Mtls, login, valid_until, thumbprint))
    }
}
