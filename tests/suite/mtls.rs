//! Client certificates at the door: the door serves TLS itself (`[server.tls]`) and a
//! certificate that chains to the partner CA, carries the clientAuth usage and is not revoked
//! opens the door for the peer bound to one of its names or to its fingerprint. Certificates
//! are made by each test with `openssl` (`TestPki`): a root, an intermediate, a revoked one, one
//! for the wrong usage and one with a NUL in a name.

use crate::common::*;
use serde_json::{Value, json};

fn server_file(name: &str) -> String {
    repo_root()
        .join("tests/data/tls")
        .join(name)
        .to_str()
        .unwrap()
        .to_owned()
}

fn policy(pki: &TestPki, schemes: &[&str], require: bool) -> PolicyEdit {
    let mut edit = PolicyEdit::default()
        .insert("server.tls.cert_file", server_file("server.pem"))
        .insert("server.tls.key_file", server_file("server.key"))
        .insert(
            "server.tls.client_ca_file",
            pki.path("root.pem").to_str().unwrap(),
        )
        .insert(
            "server.tls.client_crl_files",
            [pki.path("inter.crl").to_str().unwrap()],
        );
    if require {
        edit = edit.insert("server.tls.require_client_certificate", true);
    }
    match schemes {
        ["bearer", "mtls"] => edit.set("auth.schemes", ["bearer", "mtls"]),
        ["mtls"] => edit.set("auth.schemes", ["mtls"]),
        ["bearer", "jwt", "mtls"] => edit.set("auth.schemes", ["bearer", "jwt", "mtls"]),
        other => panic!("no policy for {other:?}"),
    }
}

fn get_task(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}).to_string()
}

/// Posts to the door over TLS; `Err` when the handshake (or connection) failed.
async fn post(
    client: &reqwest::Client,
    gw: &TestGateway,
    token: Option<&str>,
    body: String,
) -> Result<(u16, Value), String> {
    let mut request = client
        .post(format!("https://127.0.0.1:{}/a2a/v1", gw.addr.port()))
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

fn cli_ok(gw: &TestGateway, args: &[&str]) {
    let (code, _, stderr) = gw.cli(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verified_certificate_opens_the_door_for_the_peer_bound_to_it() {
    let pki = TestPki::generate();
    let gw = TestGateway::start_with(policy(&pki, &["bearer", "mtls"], false).policy()).await;
    let token = gw.add_peer("partner");
    gw.add_peer("by-fingerprint");
    gw.bind(
        "partner",
        &["--certificate-san", "spiffe://acme.example/agent"],
    );
    let other = pki.sha256("other");
    gw.bind("by-fingerprint", &["--certificate-sha256", &other]);
    // The bound URI name, no Authorization header at all.
    let (status, body) = post(&pki.client(Some("good")), &gw, None, get_task("x"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // The fingerprint binding.
    let (status, body) = post(&pki.client(Some("other")), &gw, None, get_task("x"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // Without a certificate the other schemes still work; without either, nothing.
    let plain = pki.client(None);
    assert_eq!(
        post(&plain, &gw, Some(&token), get_task("x"))
            .await
            .unwrap()
            .0,
        200
    );
    let (status, body) = post(&plain, &gw, None, get_task("x")).await.unwrap();
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("missing_credentials"))
    );

    // A name that holds a NUL matches nothing, not even the name before it.
    let (status, body) = post(&pki.client(Some("nul")), &gw, None, get_task("x"))
        .await
        .unwrap();
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("invalid_credentials"))
    );
    // Revoked by the intermediate's list, expired, or made for servers: refused in the handshake.
    for refused in ["revoked", "expired", "server-usage"] {
        assert!(
            post(&pki.client(Some(refused)), &gw, None, get_task("x"))
                .await
                .is_err(),
            "{refused} was let through the handshake"
        );
    }
    // `peergate call` presents the certificate (with its intermediate) and trusts the door's CA.
    let chain = pki.path("good-chain.pem");
    std::fs::write(
        &chain,
        [
            std::fs::read(pki.path("good.pem")).unwrap(),
            std::fs::read(pki.path("inter.pem")).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    let base = format!("https://127.0.0.1:{}", gw.addr.port());
    let jwks = format!("{base}/.well-known/jwks.json");
    let (ca, key) = (server_file("ca.pem"), pki.path("good.key"));
    let args = [
        "call",
        base.as_str(),
        "hello over mutual TLS",
        "--dangerous-allow-http-loopback",
        "--jwks",
        jwks.as_str(),
        "--ca",
        ca.as_str(),
        "--cert",
        chain.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("hello over mutual TLS"), "{stdout}");

    // Unbinding (or revoking the peer) refuses the certificate on the next request.
    cli_ok(
        &gw,
        &[
            "peer",
            "unbind",
            "partner",
            "--certificate-san",
            "spiffe://acme.example/agent",
        ],
    );
    let (status, _) = post(&pki.client(Some("good")), &gw, None, get_task("x"))
        .await
        .unwrap();
    assert_eq!(status, 401);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_door_that_requires_certificates_refuses_connections_without_one() {
    let pki = TestPki::generate();
    let gw = TestGateway::start_with(policy(&pki, &["mtls"], true).policy()).await;
    gw.add_peer("partner");
    gw.bind(
        "partner",
        &["--certificate-san", "spiffe://acme.example/agent"],
    );
    assert!(
        post(&pki.client(None), &gw, None, get_task("x"))
            .await
            .is_err()
    );
    let (status, _) = post(&pki.client(Some("good")), &gw, None, get_task("x"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    // The card says which CA and how names are compared.
    let card: Value = pki
        .client(Some("good"))
        .get(format!(
            "https://127.0.0.1:{}/.well-known/agent-card.json",
            gw.addr.port()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let description = card["securitySchemes"]["mtlsAuth"]["mtlsSecurityScheme"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(description.contains(&pki.sha256("root")), "{description}");
    gw.stop().await;
}

/// RFC 8705: a token bound to a certificate is taken only over a connection that presented it.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_bound_token_needs_its_certificate() {
    use base64::Engine as _;
    let pki = TestPki::generate();
    let key = TestKey::new("acme-1", 21);
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), jwks(&[&key])).unwrap();
    let issuer = "https://idp.acme.example";
    let audience = "https://gw.example.com/a2a/v1";
    let edit = policy(&pki, &["bearer", "jwt", "mtls"], false).push_table(
        "auth.issuers",
        &[
            ("name", "acme".into()),
            ("issuer", issuer.into()),
            ("audience", audience.into()),
            ("jwks_file", keys.path().to_str().unwrap().into()),
        ],
    );
    let gw = TestGateway::start_with(edit.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let hex = pki.sha256("good");
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let thumbprint = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let bound = key.sign(
        &json!({"alg": "ES256", "typ": "at+jwt", "kid": "acme-1"}),
        &json!({"iss": issuer, "aud": audience, "client_id": "agent-a", "scope": "a2a:tasks:read",
                "iat": now, "exp": now + 300, "cnf": {"x5t#S256": thumbprint}}),
    );
    let with_it = post(&pki.client(Some("good")), &gw, Some(&bound), get_task("x"))
        .await
        .unwrap();
    assert_eq!(with_it.0, 200, "{with_it:?}");
    for (client, what) in [
        (pki.client(None), "no certificate"),
        (pki.client(Some("other")), "another certificate"),
    ] {
        let (status, body) = post(&client, &gw, Some(&bound), get_task("x"))
            .await
            .unwrap();
        assert_eq!(status, 401, "{what}: {body}");
    }
    gw.stop().await;
}

/// The same with a real provider: panva's oidc-provider issues a token bound to the client's
/// certificate (the client registered for RFC 8705 bound tokens).
#[tokio::test(flavor = "multi_thread")]
async fn a_providers_certificate_bound_token_needs_its_certificate() {
    let pki = TestPki::generate();
    let key = TestKey::new("idp-1", 22);
    let audience = "https://gw.example.com/a2a/v1";
    let client = json!({"client_id": "agent-a", "client_secret": "secret-a",
        "scope": "a2a:tasks:read", "tls_client_certificate_bound_access_tokens": true});
    let Some(idp) = TestIdp::start_with_clients(audience, vec![client], &[&key], 0) else {
        return;
    };
    let edit = policy(&pki, &["bearer", "jwt", "mtls"], false).push_table(
        "auth.issuers",
        &[
            ("name", "acme".into()),
            ("issuer", idp.issuer.as_str().into()),
            ("audience", audience.into()),
            ("dangerous_allow_http_loopback", true.into()),
        ],
    );
    let gw = TestGateway::start_with(edit.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let pem = std::fs::read_to_string(pki.path("good.pem")).unwrap();
    let bound = idp
        .token_for_certificate(("agent-a", "secret-a"), "a2a:tasks:read", Some(&pem))
        .await;
    let with_it = post(&pki.client(Some("good")), &gw, Some(&bound), get_task("x"))
        .await
        .unwrap();
    assert_eq!(with_it.0, 200, "{with_it:?}");
    let without = post(&pki.client(None), &gw, Some(&bound), get_task("x"))
        .await
        .unwrap();
    assert_eq!(without.0, 401, "{without:?}");
    gw.stop().await;
}

/// Behind a TLS-terminating proxy (the nginx example): the certificate it verified and
/// forwarded is read only when the request comes from a trusted proxy.
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_certificate_counts_from_trusted_proxies_only() {
    let pki = TestPki::generate();
    let pem = std::fs::read_to_string(pki.path("good.pem")).unwrap();
    let escaped: String = pem
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    for (proxies, expected) in [("127.0.0.1/32", 200), ("10.0.0.0/8", 401)] {
        let policy = PolicyEdit::default()
            .set("auth.schemes", ["bearer", "mtls"])
            .insert(
                "auth.forwarded_client_certificate_header",
                "X-SSL-Client-Cert",
            )
            .set("server.trusted_proxies", [proxies]);
        let gw = TestGateway::start_with(policy.policy()).await;
        gw.add_peer("partner");
        gw.bind(
            "partner",
            &["--certificate-san", "spiffe://acme.example/agent"],
        );
        let response = reqwest::Client::new()
            .post(&gw.door)
            .header("content-type", "application/json")
            .header("x-ssl-client-cert", &escaped)
            .body(get_task("x"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), expected, "proxies {proxies}");
        gw.stop().await;
    }
    // Without trusted proxies the setting could never apply: refused at start, named.
    let lone = PolicyEdit::default()
        .set("auth.schemes", ["bearer", "mtls"])
        .insert(
            "auth.forwarded_client_certificate_header",
            "X-SSL-Client-Cert",
        );
    let refused =
        peergate::config::Policy::parse(&lone.text(), &peergate::config::PolicySource::Embedded)
            .unwrap_err()
            .to_string();
    assert!(
        refused.contains("auth.forwarded_client_certificate_header"),
        "{refused}"
    );
}

/// A connection kept alive past its certificate's notAfter opens nothing more: the handshake
/// checked the certificate once, each request checks its expiry again.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_that_expires_ends_its_connections_access() {
    let pki = TestPki::generate();
    let gw = TestGateway::start_with(policy(&pki, &["bearer", "mtls"], false).policy()).await;
    gw.add_peer("partner");
    gw.bind(
        "partner",
        &["--certificate-san", "spiffe://acme.example/agent"],
    );
    let client = pki.client(Some("good"));
    let (status, body) = post(&client, &gw, None, get_task("x")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    // The certificates are made for two days.
    gw.clock
        .advance(std::time::Duration::from_secs(3 * 24 * 3600));
    let (status, body) = post(&client, &gw, None, get_task("x")).await.unwrap();
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("certificate_expired")),
        "{body}"
    );
    gw.stop().await;
}

/// A client CA that has expired and a revocation list past its nextUpdate are warned about at
/// start-up, and stop it when the policy says `refuse`.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_client_ca_or_stale_revocation_list_stops_start_up_when_the_policy_says_so() {
    use peergate::clock::{Clock, ManualClock, SystemClock};
    let pki = TestPki::generate();
    // Three days on, the two-day root and the list due in two days are both out of date.
    let later = ManualClock::new(peergate::clock::later(
        SystemClock.now(),
        std::time::Duration::from_secs(3 * 24 * 3600),
    ));
    let start = |edit: PolicyEdit| {
        let data = tempfile::tempdir().unwrap();
        let options = gateway_options(
            edit.policy(),
            data.path(),
            std::sync::Arc::new(later.clone()),
        );
        async move {
            let started = match peergate::app::start(options).await {
                Ok(running) => {
                    running.shutdown().await;
                    Ok(())
                }
                Err(e) => Err(e),
            };
            (started, data)
        }
    };
    let refusing = policy(&pki, &["bearer", "mtls"], false)
        .insert("server.tls.expired_client_trust", "refuse");
    let (refused, _data) = start(refusing).await;
    let why = refused.expect_err("start-up went on").to_string();
    assert!(why.contains("server.tls.client_ca_file"), "{why}");
    assert!(why.contains("expired_client_trust"), "{why}");
    let (started, _data) = start(policy(&pki, &["bearer", "mtls"], false)).await;
    assert!(started.is_ok(), "warn, the default, starts");
}

/// With `[server.tls]` the start-up log names the door, its card and the gRPC listener as what
/// they are: TLS.
#[tokio::test(flavor = "multi_thread")]
async fn the_start_up_log_says_the_door_serves_tls() {
    let full = PolicyEdit::from_text(
        &std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap(),
    )
    .insert("server.tls.cert_file", server_file("server.pem"))
    .insert("server.tls.key_file", server_file("server.key"));
    let served = ServedPolicy::start(&full, &[], &[]);
    let log = served.server.log_text();
    assert!(log.contains("listening on https://127.0.0.1:"), "{log}");
    assert!(log.contains("card https://127.0.0.1:"), "{log}");
    assert!(log.contains(", over TLS)"), "{log}");
    assert!(!log.contains("listening on http://"), "{log}");
}
