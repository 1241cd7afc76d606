//! A partner's PKI, made by each test with `openssl` in a temporary directory: a root CA, an
//! intermediate, client certificates (good, revoked, expired, for the wrong usage, with a NUL in
//! a name), and the intermediate's revocation list.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of one test PKI.
pub struct TestPki {
    pub dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// DER of a subjectAltName value holding one URI, as hex for `openssl`'s `DER:` form.
fn uri_san_der_hex(uri: &[u8]) -> String {
    let mut name = vec![0x86, uri.len() as u8];
    name.extend_from_slice(uri);
    let mut sequence = vec![0x30, name.len() as u8];
    sequence.extend(name);
    sequence.iter().map(|b| format!("{b:02X}")).collect()
}

impl TestPki {
    /// Makes the root, the intermediate, the client certificates and the revocation list.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let write = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();
        let key = |name: &str| {
            openssl(
                d,
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                    name,
                ],
            )
        };
        key("root.key");
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "root.key",
                "-out",
                "root.pem",
                "-days",
                "2",
                "-subj",
                "/CN=Partner Root",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        write(
            "ca.ext",
            "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n",
        );
        key("inter.key");
        openssl(
            d,
            &[
                "req",
                "-new",
                "-key",
                "inter.key",
                "-out",
                "inter.csr",
                "-subj",
                "/CN=Partner Intermediate",
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "inter.csr",
                "-CA",
                "root.pem",
                "-CAkey",
                "root.key",
                "-CAcreateserial",
                "-out",
                "inter.pem",
                "-days",
                "2",
                "-extfile",
                "ca.ext",
            ],
        );
        let nul_san = uri_san_der_hex(b"spiffe://acme.example/agent\0.evil.example");
        for (name, extensions) in [
            (
                "good",
                "subjectAltName=URI:spiffe://acme.example/agent\nextendedKeyUsage=clientAuth\n"
                    .to_owned(),
            ),
            (
                "other",
                "subjectAltName=DNS:other.acme.example\nextendedKeyUsage=clientAuth\n".to_owned(),
            ),
            (
                "revoked",
                "subjectAltName=URI:spiffe://acme.example/revoked\nextendedKeyUsage=clientAuth\n"
                    .to_owned(),
            ),
            (
                "server-usage",
                "subjectAltName=URI:spiffe://acme.example/agent\nextendedKeyUsage=serverAuth\n"
                    .to_owned(),
            ),
            (
                "nul",
                format!("subjectAltName=DER:{nul_san}\nextendedKeyUsage=clientAuth\n"),
            ),
        ] {
            write(
                &format!("{name}.ext"),
                &format!("keyUsage=critical,digitalSignature\n{extensions}"),
            );
            key(&format!("{name}.key"));
            openssl(
                d,
                &[
                    "req",
                    "-new",
                    "-key",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={name}"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "inter.pem",
                    "-CAkey",
                    "inter.key",
                    "-CAcreateserial",
                    "-out",
                    &format!("{name}.pem"),
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{name}.ext"),
                ],
            );
        }
        // The intermediate revokes one certificate.
        write("index.txt", "");
        write("crlnumber", "01\n");
        write(
            "ca.cnf",
            "[ca]\ndefault_ca = intermediate\n[intermediate]\ndatabase = index.txt\ncrlnumber = crlnumber\ndefault_md = sha256\ndefault_crl_days = 2\nnew_certs_dir = .\nserial = serial\npolicy = any\n[any]\ncommonName = supplied\n",
        );
        openssl(
            d,
            &[
                "ca",
                "-config",
                "ca.cnf",
                "-keyfile",
                "inter.key",
                "-cert",
                "inter.pem",
                "-revoke",
                "revoked.pem",
            ],
        );
        // One that expired: signed by the intermediate for two days in 2020.
        key("expired.key");
        openssl(
            d,
            &[
                "req",
                "-new",
                "-key",
                "expired.key",
                "-out",
                "expired.csr",
                "-subj",
                "/CN=expired",
            ],
        );
        write("serial", "1000\n");
        openssl(
            d,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-keyfile",
                "inter.key",
                "-cert",
                "inter.pem",
                "-in",
                "expired.csr",
                "-out",
                "expired.pem",
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200103000000Z",
                "-extfile",
                "good.ext",
                "-notext",
            ],
        );
        openssl(
            d,
            &[
                "ca",
                "-config",
                "ca.cnf",
                "-keyfile",
                "inter.key",
                "-cert",
                "inter.pem",
                "-gencrl",
                "-out",
                "inter.crl",
            ],
        );
        Self { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The SHA-256 of a certificate's DER, as lowercase hex.
    pub fn sha256(&self, name: &str) -> String {
        use rustls::pki_types::pem::PemObject;
        use sha2::Digest;
        let der =
            rustls::pki_types::CertificateDer::from_pem_file(self.path(&format!("{name}.pem")))
                .unwrap();
        sha2::Sha256::digest(der.as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// An HTTPS client trusting the gateway's test CA and presenting the client certificate
    /// `name` with the intermediate (or none).
    pub fn client(&self, name: Option<&str>) -> reqwest::Client {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(super::test_ca_path()).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let config = match name {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain = vec![
                    CertificateDer::from_pem_file(self.path(&format!("{name}.pem"))).unwrap(),
                    CertificateDer::from_pem_file(self.path("inter.pem")).unwrap(),
                ];
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{name}.key"))).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
        };
        reqwest::Client::builder()
            .use_preconfigured_tls(config)
            .build()
            .unwrap()
    }
}
