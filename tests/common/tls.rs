//! A TLS listener on loopback for the tests' outside servers (a hosted model, an upstream
//! agent), with the certificate in `tests/data/tls` signed by the test CA.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The test CA's certificate (PEM), which signed the servers' certificate.
pub fn test_ca_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls/ca.pem")
}

/// Accepts TLS connections for `localhost`, `127.0.0.1` and `::1`; a handshake that fails (a
/// client that refused the certificate) is dropped and the next connection accepted.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: Arc<AtomicUsize>,
}

impl TlsListener {
    pub async fn bind() -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
        let chain = CertificateDer::pem_file_iter(dir.join("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        // As hosted servers do: HTTP/2 to a client that offers it, HTTP/1.1 otherwise.
        let mut config = config;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self {
            tcp: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
            handshakes: Arc::default(),
        }
    }

    /// The count of handshakes completed on this listener, kept up to date as it serves.
    pub fn handshakes(&self) -> Arc<AtomicUsize> {
        self.handshakes.clone()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(stream).await {
                self.handshakes.fetch_add(1, Ordering::SeqCst);
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
