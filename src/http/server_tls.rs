//! The door's own TLS (`[server.tls]`): its certificate, and the client certificates it asks
//! for.
//!
//! The configuration is explicit: the *ring* provider, the safe default protocol versions, and
//! a client-certificate verifier over exactly the configured CA and revocation lists (no
//! process-wide provider, no system roots for clients). A client certificate must chain to the
//! CA, be within its validity, carry the `clientAuth` usage when it names usages, and not be
//! revoked by a configured list; what it proves is decided by the `"mtls"` scheme.
//!
//! The client CA and the revocation lists are dated: [`check_client_trust`] says at start-up
//! which CA has expired and which list is past its `nextUpdate` (webpki checks neither a
//! trust anchor's validity nor, unless asked, a list's), and stops start-up for them under
//! `expired_client_trust = "refuse"`, which also makes the handshake refuse what a list gone
//! out of date while serving would have judged.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// `[server.tls]`: the door's certificate, and the CA its clients' certificates chain to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsSettings {
    /// The door's certificate chain (PEM), leaf first.
    pub cert_file: std::path::PathBuf,
    /// Its private key (PEM).
    pub key_file: std::path::PathBuf,
    /// The CA (PEM) client certificates must chain to; with it the door asks for one.
    #[serde(default)]
    pub client_ca_file: Option<std::path::PathBuf>,
    /// Certificate revocation lists (PEM or DER) of that CA and its intermediates.
    #[serde(default)]
    pub client_crl_files: Vec<std::path::PathBuf>,
    /// Whether a connection without a client certificate is refused in the handshake (else a
    /// client may still use the other schemes).
    #[serde(default)]
    pub require_client_certificate: bool,
    /// What an expired client CA, or a revocation list past its `nextUpdate`, does: `warn`
    /// (the default: logged at start-up) or `refuse` (start-up stops naming the file, and a
    /// list that goes out of date while serving fails the handshakes it would have judged).
    #[serde(default)]
    pub expired_client_trust: ExpiredClientTrust,
}

/// `server.tls.expired_client_trust`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpiredClientTrust {
    /// Logged at start-up; served as it is.
    #[default]
    Warn,
    /// Start-up stops; a list that goes out of date while serving fails handshakes.
    Refuse,
}

/// The door's TLS acceptor offering `alpn` (`http/1.1` for the door, `h2` for the gRPC
/// listener), and the SHA-256 (hex) of the client CA's certificate when client certificates
/// are asked for. Names the setting whose file is wrong.
pub fn acceptor(
    policy: &ServerTlsSettings,
    alpn: &[u8],
) -> Result<(tokio_rustls::TlsAcceptor, Option<String>), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_file_iter(&policy.cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("server.tls.cert_file: cannot read a PEM certificate chain ({e})"))?;
    if chain.is_empty() {
        return Err("server.tls.cert_file: holds no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_file(&policy.key_file)
        .map_err(|e| format!("server.tls.key_file: cannot read a PEM private key ({e})"))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("server.tls: {e}"))?;
    let (builder, ca_sha256) = match &policy.client_ca_file {
        None => (builder.with_no_client_auth(), None),
        Some(path) => {
            let cas = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    format!("server.tls.client_ca_file: cannot read PEM certificates ({e})")
                })?;
            let first = cas
                .first()
                .ok_or("server.tls.client_ca_file: holds no certificate")?;
            let ca_sha256: String = Sha256::digest(first.as_ref())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let mut roots = rustls::RootCertStore::empty();
            for ca in cas {
                roots
                    .add(ca)
                    .map_err(|e| format!("server.tls.client_ca_file: not a usable CA ({e})"))?;
            }
            let mut crls = Vec::new();
            for path in &policy.client_crl_files {
                crls.extend(revocation_lists(path)?);
            }
            // The lists given are enforced along the whole chain; a certificate whose issuer
            // has no list here is not refused for that (an operator lists what they publish).
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .with_crls(crls)
                    .allow_unknown_revocation_status();
            if policy.expired_client_trust == ExpiredClientTrust::Refuse {
                verifier = verifier.enforce_revocation_expiration();
            }
            if !policy.require_client_certificate {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| format!("server.tls.client_crl_files: {e}"))?;
            (builder.with_client_cert_verifier(verifier), Some(ca_sha256))
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("server.tls.key_file: does not fit the certificate ({e})"))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_sha256))
}

/// The client CA's and the revocation lists' dates at `now`: what is out of date, each named
/// with its setting and date, logged as warnings; under `expired_client_trust = "refuse"` the
/// first of them as the error that stops start-up.
pub fn check_client_trust(
    policy: &ServerTlsSettings,
    now: crate::clock::Timestamp,
) -> Result<(), String> {
    let mut stale = Vec::new();
    if let Some(path) = &policy.client_ca_file {
        let cas = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .unwrap_or_default();
        for ca in cas {
            if let Some((_, not_after)) = crate::guard::certificate::validity(ca.as_ref())
                && now > not_after
            {
                stale.push(format!(
                    "server.tls.client_ca_file: a CA certificate expired at {not_after}; client certificates still chain to it"
                ));
            }
        }
    }
    for path in &policy.client_crl_files {
        for list in revocation_lists(path).unwrap_or_default() {
            if let Some(next) = crate::guard::certificate::crl_next_update(list.as_ref())
                && now > next
            {
                stale.push(format!(
                    "server.tls.client_crl_files: {} is past its nextUpdate ({next}); certificates revoked since are not known",
                    path.display()
                ));
            }
        }
    }
    for why in &stale {
        tracing::warn!("{why}");
    }
    match (stale.first(), policy.expired_client_trust) {
        (Some(first), ExpiredClientTrust::Refuse) => Err(format!(
            "{first} (server.tls.expired_client_trust is \"refuse\")"
        )),
        _ => Ok(()),
    }
}

/// The revocation lists in `path`: PEM, else one DER list.
fn revocation_lists(
    path: &std::path::Path,
) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let read = CertificateRevocationListDer::pem_file_iter(path)
        .and_then(|lists| lists.collect::<Result<Vec<_>, _>>());
    match read {
        Ok(lists) if !lists.is_empty() => Ok(lists),
        _ => {
            let der = std::fs::read(path).map_err(|e| {
                format!(
                    "server.tls.client_crl_files: cannot read a list ({})",
                    e.kind()
                )
            })?;
            Ok(vec![CertificateRevocationListDer::from(der)])
        }
    }
}
