//! Identity providers for the identity tests: keys of the test's own that sign access tokens
//! (for the adversarial ones), and panva's `oidc-provider` (`tests/idp/`), a real OpenID
//! Provider started as a child process on loopback.
//!
//! Without Node.js, or without the npm registry the first time, the provider tests say so in
//! one loud line and skip, except under `CI=true`, where they fail.

use super::repo_root;
use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ES256 signing key of the test's own, with its `kid`.
pub struct TestKey {
    pub kid: String,
    key: p256::ecdsa::SigningKey,
}

impl TestKey {
    /// A key from a seed byte (tests want several distinct, repeatable keys).
    pub fn new(kid: &str, seed: u8) -> Self {
        let mut bytes = [seed; 32];
        bytes[0] = 1;
        Self {
            kid: kid.to_owned(),
            key: p256::ecdsa::SigningKey::from_slice(&bytes).unwrap(),
        }
    }

    fn coordinates(&self) -> (String, String) {
        let point = self.key.verifying_key().to_sec1_point(false);
        let bytes = point.as_bytes();
        (b64(&bytes[1..33]), b64(&bytes[33..65]))
    }

    /// The public JWK.
    pub fn public_jwk(&self) -> Value {
        let (x, y) = self.coordinates();
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "x": x, "y": y, "alg": "ES256", "use": "sig"})
    }

    /// The private JWK (for the provider to sign with).
    pub fn private_jwk(&self) -> Value {
        let mut jwk = self.public_jwk();
        jwk["d"] = json!(b64(&self.key.to_bytes()));
        jwk
    }

    /// A compact JWS of `header` and `payload`, signed with this key whatever they say.
    pub fn sign(&self, header: &Value, payload: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(payload.to_string().as_bytes())
        );
        let signature: p256::ecdsa::Signature = self.key.sign(input.as_bytes());
        format!("{input}.{}", b64(&signature.to_bytes()))
    }

    /// An RFC 9068 access token from `issuer` for `audience`, naming `client_id`, granting
    /// `scope`, valid from now (epoch seconds) for five minutes; `edit` changes it.
    pub fn access_token(
        &self,
        issuer: &str,
        audience: &str,
        client_id: &str,
        scope: &str,
        now: i64,
    ) -> String {
        self.sign(
            &json!({"alg": "ES256", "typ": "at+jwt", "kid": self.kid}),
            &json!({"iss": issuer, "aud": audience, "client_id": client_id, "sub": client_id,
                    "scope": scope, "iat": now, "exp": now + 300, "jti": uuid::Uuid::new_v4().to_string()}),
        )
    }
}

/// A JWKS of public keys.
pub fn jwks(keys: &[&TestKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.public_jwk()).collect::<Vec<_>>()}).to_string()
}

/// Where `tests/idp` is installed for the tests (`npm ci` once per lock file).
fn installed_idp() -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if Command::new("node").arg("--version").output().is_err() {
        assert!(!ci, "Node.js is not installed; CI must have it");
        super::skipped("Node.js is not installed; the identity-provider tests do not run");
        return None;
    }
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oidc-provider");
    std::fs::create_dir_all(&work).unwrap();
    let source = repo_root().join("tests/idp");
    let lock = std::fs::read_to_string(source.join("package-lock.json")).unwrap();
    for file in ["package.json", "package-lock.json", "server.mjs"] {
        std::fs::copy(source.join(file), work.join(file)).unwrap();
    }
    let marker = work.join("installed-lock.json");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(lock.as_str()) {
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&work)
            .output()
            .expect("run npm");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && !ci {
            super::skipped(&format!(
                "npm could not install oidc-provider: {}",
                stderr.lines().next().unwrap_or("")
            ));
            return None;
        }
        assert!(output.status.success(), "npm ci failed: {stderr}");
        std::fs::write(&marker, lock).unwrap();
    }
    Some(work)
}

/// A running `oidc-provider`: killed when dropped.
pub struct TestIdp {
    pub issuer: String,
    pub port: u16,
    child: Child,
    _keys: tempfile::NamedTempFile,
}

/// A client of the provider: (client_id, client_secret, allowed scopes).
pub type IdpClient<'a> = (&'a str, &'a str, &'a str);

/// The clients as the provider's metadata.
fn client_metadata(clients: &[IdpClient<'_>]) -> Vec<Value> {
    clients
        .iter()
        .map(
            |(id, secret, scope)| json!({"client_id": id, "client_secret": secret, "scope": scope}),
        )
        .collect()
}

impl TestIdp {
    /// Starts the provider for `audience` with `clients`, signing with `keys[0]` (all of them
    /// published), on `port` (0: any). `None` when it cannot run here (see the module docs).
    pub fn start(
        audience: &str,
        clients: &[IdpClient<'_>],
        keys: &[&TestKey],
        port: u16,
    ) -> Option<Self> {
        Self::start_with_clients(audience, client_metadata(clients), keys, port)
    }

    /// As [`TestIdp::start`], with the clients' metadata as JSON (e.g.
    /// `"tls_client_certificate_bound_access_tokens": true`).
    pub fn start_with_clients(
        audience: &str,
        clients: Vec<Value>,
        keys: &[&TestKey],
        port: u16,
    ) -> Option<Self> {
        Self::start_with_env(audience, clients, keys, port, &[])
    }

    /// As [`TestIdp::start`], giving tokens for the audience only to requests that name it as
    /// their `resource` (RFC 8707).
    pub fn start_requiring_resource(
        audience: &str,
        clients: &[IdpClient<'_>],
        keys: &[&TestKey],
        port: u16,
    ) -> Option<Self> {
        let clients = client_metadata(clients);
        Self::start_with_env(
            audience,
            clients,
            keys,
            port,
            &[("IDP_REQUIRE_RESOURCE", "1")],
        )
    }

    fn start_with_env(
        audience: &str,
        clients: Vec<Value>,
        keys: &[&TestKey],
        port: u16,
        env: &[(&str, &str)],
    ) -> Option<Self> {
        let work = installed_idp()?;
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let private = json!({"keys": keys.iter().map(|k| k.private_jwk()).collect::<Vec<_>>()});
        std::io::Write::write_all(&mut file, private.to_string().as_bytes()).unwrap();
        let mut child = Command::new("node")
            .arg(work.join("server.mjs"))
            .env("IDP_PORT", port.to_string())
            .env("IDP_AUDIENCE", audience)
            .env("IDP_CLIENTS", Value::Array(clients).to_string())
            .env("IDP_JWKS_FILE", file.path())
            .env("IDP_ALG", "ES256")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the identity provider");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|_| panic!("the identity provider did not start: {line:?}"));
        let issuer = started["issuer"].as_str().unwrap().to_owned();
        let port = issuer.rsplit(':').next().unwrap().parse().unwrap();
        Some(Self {
            issuer,
            port,
            child,
            _keys: file,
        })
    }

    /// A client-credentials access token for `client` with `scope`.
    pub async fn token(&self, client: (&str, &str), scope: &str) -> String {
        self.token_for_certificate(client, scope, None).await
    }

    /// A token bound (RFC 8705) to the PEM certificate `certificate` when given: the provider
    /// reads it from the `x-client-cert` header, as behind a TLS-terminating proxy.
    pub async fn token_for_certificate(
        &self,
        client: (&str, &str),
        scope: &str,
        certificate: Option<&str>,
    ) -> String {
        let mut request = reqwest::Client::new().post(format!("{}/token", self.issuer));
        if let Some(pem) = certificate {
            let encoded: String = pem
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                        (b as char).to_string()
                    }
                    other => format!("%{other:02X}"),
                })
                .collect();
            request = request.header("x-client-cert", encoded);
        }
        let response = request
            .basic_auth(client.0, Some(client.1))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type=client_credentials&scope={}",
                scope.replace(' ', "+")
            ))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "token request: {body}");
        body["access_token"].as_str().unwrap().to_owned()
    }
}

impl Drop for TestIdp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
