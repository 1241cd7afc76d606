//! TLS for the outgoing connections peergate makes (remote JWKS and cards).

use std::sync::Once;

/// Installs the process-wide rustls crypto provider (ring) once.
pub fn ensure_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
