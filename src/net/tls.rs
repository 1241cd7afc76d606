//! TLS for the connections peergate makes: a hosted model, an upstream agent, remote key sets
//! and cards, push receivers.
//!
//! Every outgoing client is built on a [`rustls::ClientConfig`] made here, explicitly, with the
//! *ring* provider. Nothing installs a process-wide default provider, so an embedding program
//! keeps whatever provider it chose, and no client of ours can end up with a different one by
//! the order in which things started.
//!
//! Certificates are always checked: against the system's roots (the platform store, which
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` may point elsewhere), plus the CA file a policy names for
//! one upstream. There is no switch that turns the check off, so a policy mistake cannot turn a
//! hosted model's API key into something any on-path attacker can read.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Why a TLS client configuration could not be built. Names the policy setting involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// The CA file could not be read or parsed.
    #[error("cannot use the CA file named by {setting}: {reason}")]
    CaFile {
        /// The policy setting that names the file.
        setting: &'static str,
        /// What was wrong, without the file's contents.
        reason: String,
    },
    /// Neither the system nor the policy provides a root to check certificates against.
    #[error(
        "no trusted root certificates for {setting}: install the system's CA certificates (ca-certificates) or name a CA file in {setting}"
    )]
    NoRoots {
        /// The policy setting that could name a CA file.
        setting: &'static str,
    },
    /// rustls refused the configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

/// Why a server's certificate was refused, in words an operator can act on: an expired
/// certificate, one for another host and one from an unknown issuer are three different fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateProblem {
    /// Past its `notAfter`.
    #[error("it has expired")]
    Expired,
    /// Before its `notBefore` (or this machine's clock is behind).
    #[error("it is not valid yet (or this machine's clock is wrong)")]
    NotValidYet,
    /// It does not name the host that was dialled.
    #[error("it is not valid for the host name dialled")]
    WrongHost,
    /// It does not chain to a trusted root.
    #[error("its issuer is not trusted (it chains to neither the system's roots nor the CA file)")]
    UnknownIssuer,
    /// Its issuer revoked it.
    #[error("it has been revoked")]
    Revoked,
    /// The server sent none.
    #[error("the server presented none")]
    Absent,
    /// Anything else: a bad signature, an unsupported algorithm, a wrong usage.
    #[error("it is malformed, badly signed or not for this use")]
    Other,
}

/// The certificate problem behind a failed connection, if a refused certificate is what
/// failed it. Walks the error's chain, through the `io::Error`s rustls reports by.
pub fn certificate_problem(
    error: &(dyn std::error::Error + 'static),
) -> Option<CertificateProblem> {
    use rustls::CertificateError as E;
    let mut source = Some(error);
    while let Some(inner) = source {
        match inner.downcast_ref::<rustls::Error>() {
            Some(rustls::Error::InvalidCertificate(why)) => {
                return Some(match why {
                    E::Expired | E::ExpiredContext { .. } => CertificateProblem::Expired,
                    E::NotValidYet | E::NotValidYetContext { .. } => {
                        CertificateProblem::NotValidYet
                    }
                    E::NotValidForName | E::NotValidForNameContext { .. } => {
                        CertificateProblem::WrongHost
                    }
                    E::UnknownIssuer => CertificateProblem::UnknownIssuer,
                    E::Revoked => CertificateProblem::Revoked,
                    _ => CertificateProblem::Other,
                });
            }
            Some(rustls::Error::NoCertificatesPresented) => {
                return Some(CertificateProblem::Absent);
            }
            _ => {}
        }
        // rustls reports through io::Errors, whose `source` skips the error they wrap.
        source = match inner.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            None => inner.source(),
        };
    }
    None
}

/// The system's root certificates, read once.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() && !found.errors.is_empty() {
            tracing::warn!(
                errors = found.errors.len(),
                "the system's root certificates could not be read; https connections will fail unless a CA file is named"
            );
        }
        found.certs
    })
}

/// A client configuration checking certificates against the system's roots and, when given,
/// the certificates in the PEM file `ca_file` (named by the policy `setting`). Fails when the
/// file cannot be used, or when `require_roots` and there is no root at all.
pub fn client_config(
    ca_file: Option<&Path>,
    setting: &'static str,
    require_roots: bool,
) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    client_config_presenting(ca_file, setting, require_roots, None)
}

/// As [`client_config`], presenting the client certificate chain and key of the PEM files
/// `identity` (certificate, key) when a server asks for one.
pub fn client_config_presenting(
    ca_file: Option<&Path>,
    setting: &'static str,
    require_roots: bool,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    // A malformed system certificate is skipped, as every TLS client does.
    let _ = roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca_file {
        let ca_error = |reason: String| TlsSetupError::CaFile { setting, reason };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca_error(pem_reason(&e)))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca_error(pem_reason(&e)))?;
        if certs.is_empty() {
            return Err(ca_error("it holds no PEM certificate".to_owned()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| ca_error(format!("a certificate is not usable as a root: {e}")))?;
        }
    }
    if require_roots && roots.is_empty() {
        return Err(TlsSetupError::NoRoots { setting });
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TlsSetupError::Config(e.to_string()))?
    .with_root_certificates(roots);
    let config = match identity {
        None => config.with_no_client_auth(),
        Some((cert_file, key_file)) => {
            let chain = CertificateDer::pem_file_iter(cert_file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| TlsSetupError::Config(format!("--cert: {}", pem_reason(&e))))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key_file)
                .map_err(|_| TlsSetupError::Config("--key: not a PEM private key".to_owned()))?;
            config
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsSetupError::Config(format!("--cert/--key: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// The configuration of the clients that name no CA file of their own (key sets, cards, push
/// receivers), built once.
pub fn default_client_config() -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, TlsSetupError>> = OnceLock::new();
    CONFIG
        .get_or_init(|| client_config(None, "the system's roots", false))
        .clone()
}

/// A client builder whose TLS is `config`: the only way peergate builds an HTTP client. Over
/// TLS it offers HTTP/2 first and HTTP/1.1 after it (ALPN), so a server that speaks HTTP/2
/// carries a client's requests at once on one connection; reqwest leaves ALPN to a
/// configuration it is given.
pub fn client_builder(config: &Arc<rustls::ClientConfig>) -> reqwest::ClientBuilder {
    let mut config = rustls::ClientConfig::clone(config);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder().tls_backend_preconfigured(config)
}

/// A PEM error without the file's contents.
fn pem_reason(error: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match error {
        Error::Io(e) => e.kind().to_string(),
        Error::NoItemsFound => "it holds no PEM certificate".to_owned(),
        _ => "it is not a PEM certificate file".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_is_named_by_its_reason_through_the_io_error() {
        use rustls::CertificateError as E;
        for (why, problem) in [
            (E::Expired, CertificateProblem::Expired),
            (E::NotValidForName, CertificateProblem::WrongHost),
            (E::UnknownIssuer, CertificateProblem::UnknownIssuer),
            (E::NotValidYet, CertificateProblem::NotValidYet),
            (E::Revoked, CertificateProblem::Revoked),
            (E::BadSignature, CertificateProblem::Other),
        ] {
            let io = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(why),
            );
            assert_eq!(certificate_problem(&io), Some(problem));
        }
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(certificate_problem(&refused), None);
    }

    #[test]
    fn building_clients_installs_no_process_wide_provider() {
        let config = client_config(None, "model.openai.ca_file", false).unwrap();
        let _client = client_builder(&config).build().unwrap();
        let _other = client_builder(&default_client_config().unwrap())
            .build()
            .unwrap();
        assert!(
            rustls::crypto::CryptoProvider::get_default().is_none(),
            "a client was built through the process-wide default provider"
        );
    }

    #[test]
    fn a_ca_file_that_cannot_be_used_names_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = client_config(Some(&missing), "model.openai.ca_file", false).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("cannot use the CA file named by model.openai.ca_file"),
            "{error}"
        );
        let not_pem = dir.path().join("key.txt");
        std::fs::write(&not_pem, "secret-looking text").unwrap();
        let error = client_config(Some(&not_pem), "model.openai.ca_file", false).unwrap_err();
        assert!(
            error.to_string().contains("holds no PEM certificate"),
            "{error}"
        );
        assert!(!error.to_string().contains("secret-looking"), "{error}");
    }
}
