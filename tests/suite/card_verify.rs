//! The card verifier: end to end against a running peergate, every rejection rule, the
//! Wycheproof JWS vectors, and the remote-fetch rules.

use crate::common::*;
use base64::Engine as _;
use peergate::jose::fetch::{FetchPolicy, Lookup, fetch_text};
use peergate::jose::sign::{self, CardSigningKey};
use peergate::jose::verify::{TrustedKeys, verify_card, verify_compact};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn peergates_card_verifies_against_its_jwks_url_with_the_cli() {
    let gw = TestGateway::start().await;
    let card = gw.url("/.well-known/agent-card.json");
    let jwks = gw.url("/.well-known/jwks.json");
    // The CLI runs while this test's runtime keeps serving.
    let args = [
        "card".to_owned(),
        "verify".to_owned(),
        card.clone(),
        "--jwks".to_owned(),
        jwks.clone(),
        "--dangerous-allow-http-loopback".to_owned(),
    ];
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("verified: signature by kid ed-") && stdout.contains("(EdDSA)"),
        "{stdout}"
    );
    // Plain http is refused without the dangerous switch.
    let (code, _, stderr) = cli(&["card", "verify", &card, "--jwks", &jwks]);
    assert_ne!(code, 0);
    assert!(stderr.contains("only https"), "{stderr}");
    gw.stop().await;
}

#[tokio::test]
async fn an_hs256_card_verifies_with_the_secret_and_fails_with_another() {
    let dir = tempfile::tempdir().unwrap();
    let secret = [9u8; 32];
    let secret_file = dir.path().join("card.secret");
    std::fs::write(&secret_file, b64(&secret)).unwrap();
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .push_table(
                "signing.keys",
                &[
                    ("kid", "hs-1".into()),
                    ("alg", "HS256".into()),
                    ("secret_file", secret_file.to_str().unwrap().into()),
                ],
            )
            .policy(),
    )
    .await;
    let card = reqwest::get(gw.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let file = dir.path().join("card.json");
    std::fs::write(&file, &card).unwrap();
    let file = file.to_str().unwrap();
    let (code, stdout, stderr) = cli(&[
        "card",
        "verify",
        file,
        "--secret",
        &format!("hs-1={}", b64(&secret)),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "verified: signature by kid hs-1 (HS256)");
    let (code, _, stderr) = cli(&[
        "card",
        "verify",
        file,
        "--secret",
        &format!("hs-1={}", b64(&[8u8; 32])),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("does not verify"), "{stderr}");
    let (code, _, stderr) = cli(&[
        "card",
        "verify",
        file,
        "--secret",
        &format!("hs-1={}", b64(&[8u8; 16])),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("at least 32"), "{stderr}");
    let (code, _, stderr) = cli(&["card", "verify", file]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no keys"), "{stderr}");
    gw.stop().await;
}

#[test]
fn a_hostile_cards_header_names_do_not_make_a_long_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let secret = format!("k={}", b64(&[9u8; 32]));
    // A megabyte kid, then a thousand signatures that each fail with a reason of their own.
    let long = b64(json!({"alg": "HS256", "kid": "k".repeat(1 << 20)})
        .to_string()
        .as_bytes());
    let many: Vec<Value> = (0..1000)
        .map(|i| {
            let header = json!({"alg": "HS256", "kid": format!("other-{i}")}).to_string();
            json!({"protected": b64(header.as_bytes()), "signature": "AA"})
        })
        .collect();
    for signatures in [json!([{"protected": long, "signature": "AA"}]), json!(many)] {
        let file = dir.path().join("card.json");
        std::fs::write(
            &file,
            json!({"name": "x", "signatures": signatures}).to_string(),
        )
        .unwrap();
        let (code, _, stderr) = cli(&[
            "card",
            "verify",
            file.to_str().unwrap(),
            "--secret",
            &secret,
        ]);
        assert_ne!(code, 0);
        assert!(
            stderr.starts_with("peergate: card not verified"),
            "{stderr:.300}"
        );
        assert!(
            stderr.len() < 2200,
            "{} bytes: {:.300}",
            stderr.len(),
            stderr
        );
    }
}

/// A card signed by a known Ed25519 key, the key as JWKS, and the protected header it used.
fn signed_card() -> (Value, ed25519_dalek::SigningKey, String) {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let card = json!({"name": "Agent", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": "https://a.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": false}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]});
    let signing = CardSigningKey::ed25519("ed-1", key.clone());
    let signed = sign::sign_card(&card, &[signing], None).unwrap();
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "ed-1",
        "x": b64(key.verifying_key().as_bytes())}]})
    .to_string();
    (signed, key, jwks)
}

fn keys_from(jwks: &str) -> TrustedKeys {
    let mut keys = TrustedKeys::new();
    keys.add_jwks(jwks).unwrap();
    keys
}

/// The card with its signature replaced by one over `header` (raw JSON text) signed by `sign`.
fn resign(card: &Value, header: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let protected = b64(header.as_bytes());
    let payload = sign::canonical_payload(card).unwrap();
    let input = format!("{protected}.{}", b64(payload.as_bytes()));
    let mut card = card.clone();
    card["signatures"] =
        json!([{"protected": protected, "signature": b64(&sign(input.as_bytes()))}]);
    card.to_string()
}

#[test]
fn the_verifier_refuses_every_trick_in_the_book() {
    use ed25519_dalek::Signer as _;
    use hmac::{KeyInit as _, Mac as _};
    let (card, key, jwks) = signed_card();
    let keys = keys_from(&jwks);
    assert_eq!(verify_card(&card.to_string(), &keys).unwrap().kid, "ed-1");
    let ed = |input: &[u8]| key.sign(input).to_bytes().to_vec();
    let refused = |text: String, why: &str| {
        let error = verify_card(&text, &keys).unwrap_err().to_string();
        assert!(error.contains(why), "expected {why:?} in {error:?}");
    };

    // A changed card.
    let mut changed = card.clone();
    changed["name"] = json!("Other");
    refused(changed.to_string(), "does not verify");
    // alg none, in any spelling, and any alg the key is not bound to.
    for alg in ["none", "None", "NONE", "HS256", "ES256", "eddsa"] {
        let header = format!(r#"{{"alg":"{alg}","kid":"ed-1","typ":"JOSE"}}"#);
        refused(resign(&card, &header, |_| Vec::new()), "does not match");
    }
    // An HMAC keyed with the public key's bytes.
    let public = key.verifying_key().to_bytes();
    let hmac_with_public = |input: &[u8]| {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&public).unwrap();
        mac.update(input);
        mac.finalize().into_bytes().to_vec()
    };
    refused(
        resign(&card, r#"{"alg":"HS256","kid":"ed-1"}"#, hmac_with_public),
        "does not match",
    );
    // A key carried in the signature is never used.
    let attacker = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]);
    let embedded = format!(
        r#"{{"alg":"EdDSA","kid":"attacker","jwk":{{"kty":"OKP","crv":"Ed25519","x":"{}"}}}}"#,
        b64(attacker.verifying_key().as_bytes())
    );
    refused(
        resign(&card, &embedded, |i| attacker.sign(i).to_bytes().to_vec()),
        "no key supplied",
    );
    let embedded_same_kid = embedded.replace("\"attacker\"", "\"ed-1\"");
    refused(
        resign(&card, &embedded_same_kid, |i| {
            attacker.sign(i).to_bytes().to_vec()
        }),
        "does not verify",
    );
    // crit and b64.
    refused(
        resign(
            &card,
            r#"{"alg":"EdDSA","kid":"ed-1","crit":["exp"],"exp":1}"#,
            ed,
        ),
        "crit",
    );
    refused(
        resign(
            &card,
            r#"{"alg":"EdDSA","kid":"ed-1","b64":false,"crit":["b64"]}"#,
            ed,
        ),
        "crit",
    );
    refused(
        resign(&card, r#"{"alg":"EdDSA","kid":"ed-1","b64":true}"#, ed),
        "b64",
    );
    // Duplicate members, known and unknown.
    refused(
        resign(&card, r#"{"alg":"EdDSA","alg":"none","kid":"ed-1"}"#, ed),
        "duplicate",
    );
    refused(
        resign(&card, r#"{"alg":"EdDSA","kid":"ed-1","x":1,"x":2}"#, ed),
        "duplicate",
    );
    // Protected and unprotected headers overlapping.
    let good = resign(&card, r#"{"alg":"EdDSA","kid":"ed-1"}"#, ed);
    assert!(verify_card(&good, &keys).is_ok());
    let mut overlap: Value = serde_json::from_str(&good).unwrap();
    overlap["signatures"][0]["header"] = json!({"kid": "ed-1"});
    refused(
        overlap.to_string(),
        "both the protected and the unprotected",
    );
    // Sloppy base64url.
    let mut padded: Value = serde_json::from_str(&good).unwrap();
    let protected = padded["signatures"][0]["protected"]
        .as_str()
        .unwrap()
        .to_owned();
    for sloppy in [
        format!("{protected}="),
        format!(" {protected}"),
        protected.replace('-', "+").replace('_', "/") + "+",
    ] {
        padded["signatures"][0]["protected"] = json!(sloppy);
        refused(padded.to_string(), "strict base64url");
    }
    let mut sig: Value = serde_json::from_str(&good).unwrap();
    let signature = sig["signatures"][0]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    sig["signatures"][0]["signature"] = json!(format!("{signature}=="));
    refused(sig.to_string(), "strict base64url");
    // Malformed EdDSA signatures.
    refused(
        resign(&card, r#"{"alg":"EdDSA","kid":"ed-1"}"#, |i| {
            ed(i)[..63].to_vec()
        }),
        "64 bytes",
    );
    // No signatures at all.
    let mut none = card.clone();
    none.as_object_mut().unwrap().remove("signatures");
    assert_eq!(
        verify_card(&none.to_string(), &keys)
            .unwrap_err()
            .to_string(),
        "the card carries no signatures"
    );
}

#[test]
fn malformed_es256_signatures_are_refused() {
    use p256::ecdsa::signature::Signer as _;
    let key = p256::ecdsa::SigningKey::from_slice(&[3u8; 32]).unwrap();
    let point = key.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "ec-1",
        "x": b64(&bytes[1..33]), "y": b64(&bytes[33..65])}]})
    .to_string();
    let keys = keys_from(&jwks);
    let (card, _, _) = signed_card();
    let sign = |input: &[u8]| -> Vec<u8> {
        let signature: p256::ecdsa::Signature = key.sign(input);
        signature.to_bytes().to_vec()
    };
    let header = r#"{"alg":"ES256","kid":"ec-1"}"#;
    assert_eq!(
        verify_card(&resign(&card, header, sign), &keys)
            .unwrap()
            .kid,
        "ec-1"
    );
    let der = |input: &[u8]| -> Vec<u8> {
        let signature: p256::ecdsa::Signature = key.sign(input);
        signature.to_der().as_bytes().to_vec()
    };
    for (text, why) in [
        (resign(&card, header, der), "exactly 64 bytes"),
        (
            resign(&card, header, |i| [sign(i), vec![0]].concat()),
            "exactly 64 bytes",
        ),
        (resign(&card, header, |_| vec![0u8; 64]), "out of range"),
    ] {
        let error = verify_card(&text, &keys).unwrap_err().to_string();
        assert!(error.contains(why), "expected {why:?} in {error:?}");
    }
}

#[test]
fn the_python_sdk_canonical_form_is_accepted_too() {
    // A card holding an empty value: the SDK signs it without, raw JCS with it.
    let key = ed25519_dalek::SigningKey::from_bytes(&[5u8; 32]);
    let (mut card, _, _) = signed_card();
    card.as_object_mut().unwrap().remove("signatures");
    card["documentationUrl"] = json!("");
    let signing = CardSigningKey::ed25519("ed-1", key.clone());
    let signed = sign::sign_card(&card, &[signing], None).unwrap();
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "ed-1",
        "x": b64(key.verifying_key().as_bytes())}]})
    .to_string();
    assert!(verify_card(&signed.to_string(), &keys_from(&jwks)).is_ok());
}

#[test]
fn key_sets_that_contradict_themselves_are_refused_whole() {
    let x = b64(&[0x11; 32]);
    for (jwks, why) in [
        (
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x, "d": x}]}),
            "private",
        ),
        (
            json!({"keys": [{"kty": "oct", "kid": "a", "k": x}]}),
            "symmetric",
        ),
        (
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x, "alg": "ES256"}]}),
            "does not fit",
        ),
        (
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x, "use": "enc"}]}),
            "use",
        ),
        (
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x, "key_ops": ["sign"]}]}),
            "key_ops",
        ),
        (
            json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x}, {"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x}]}),
            "twice",
        ),
        (
            // RSA is taken from 2048 bits up, checked when the set is loaded.
            json!({"keys": [{"kty": "RSA", "kid": "a", "n": "AQAB", "e": "AQAB"}]}),
            "an RSA modulus of 17 bits",
        ),
        (
            json!({"keys": [{"kty": "EC", "crv": "P-384", "kid": "a", "x": x, "y": x}]}),
            "unsupported",
        ),
    ] {
        let error = TrustedKeys::new()
            .add_jwks(&jwks.to_string())
            .unwrap_err()
            .to_string();
        assert!(error.contains(why), "expected {why:?} in {error:?}");
    }
}

/// The vectors whose label no strict verifier can meet: 372 and 373 are labelled valid but their
/// HMAC does not match the signing input as received (the vector set's own README says so);
/// 367 and 370 are labelled invalid but their JWS text is byte for byte that of 357, which is
/// labelled valid (the padding they were named for is not in this copy).
const EXCEPTIONS: [i64; 4] = [367, 370, 372, 373];

/// Wycheproof `json_web_signature_test.json`, HS256 and ES256 groups with compact JWS; JSON
/// serializations are not what this verifier reads and count as rejections.
#[test]
fn wycheproof_jws_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/wycheproof/json_web_signature_test.json"
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut run, mut accepted_valid) = (0, 0);
    for group in data["testGroups"].as_array().unwrap() {
        let key = if group["public"].is_object() {
            &group["public"]
        } else {
            &group["private"]
        };
        let mut keys = TrustedKeys::new();
        match (
            key["kty"].as_str(),
            key["alg"].as_str(),
            key["kid"].as_str(),
        ) {
            (Some("oct"), Some("HS256"), Some(kid)) => {
                keys.add_secret_arg(&format!("{kid}={}", key["k"].as_str().unwrap()))
                    .unwrap();
            }
            (Some("EC"), alg, Some(_)) if key["crv"] == "P-256" && alg != Some("ES512") => {
                let mut public = key.clone();
                public.as_object_mut().unwrap().remove("d");
                if keys
                    .add_jwks(&json!({"keys": [public]}).to_string())
                    .is_err()
                {
                    // A key whose declared alg contradicts it: refused before any JWS.
                    continue;
                }
            }
            _ => continue,
        }
        for test in group["tests"].as_array().unwrap() {
            let id = test["tcId"].as_i64().unwrap();
            if [367, 370].contains(&id) {
                let twin = group["tests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["tcId"] == 357)
                    .unwrap();
                assert_eq!(
                    test["jws"], twin["jws"],
                    "tcId {id} is no longer the twin of 357"
                );
            }
            let outcome = match test["jws"].as_str() {
                Some(compact) => verify_compact(compact, &keys).is_ok(),
                None => false,
            };
            // An exception gets the opposite of its label.
            let expected = (test["result"] == "valid") != EXCEPTIONS.contains(&id);
            assert_eq!(
                outcome, expected,
                "tcId {id} ({}): {}",
                test["comment"], test["result"]
            );
            run += 1;
            accepted_valid += usize::from(outcome);
        }
    }
    assert!(run >= 70, "ran {run} vectors");
    assert!(
        accepted_valid >= 5,
        "accepted {accepted_valid} valid vectors"
    );
}

/// A resolver the test controls: it answers every name with `answer` and records the names.
struct FixedLookup {
    answer: Vec<IpAddr>,
    asked: Mutex<Vec<String>>,
}

impl Lookup for FixedLookup {
    fn lookup(
        &self,
        host: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
    {
        self.asked.lock().unwrap().push(host);
        let answer = self.answer.clone();
        Box::pin(async move { Ok(answer) })
    }
}

#[tokio::test]
async fn remote_fetches_refuse_private_addresses_after_resolution() {
    for addresses in [
        vec!["169.254.169.254"],
        vec!["127.0.0.1"],
        vec!["10.0.0.7", "192.168.1.1"],
        vec!["::ffff:169.254.169.254"],
        vec!["fd00::1"],
    ] {
        let lookup = Arc::new(FixedLookup {
            answer: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            asked: Mutex::default(),
        });
        let policy = FetchPolicy {
            lookup: lookup.clone(),
            ..Default::default()
        };
        let error = fetch_text("https://jwks.example.com/.well-known/jwks.json", &policy)
            .await
            .unwrap_err();
        assert!(
            error.reason.contains("no public address"),
            "{addresses:?}: {error}"
        );
        assert_eq!(*lookup.asked.lock().unwrap(), ["jwks.example.com"]);
    }
    let policy = FetchPolicy::default();
    for (url, why) in [
        ("https://169.254.169.254/latest", "not a public one"),
        ("https://[::1]/jwks.json", "not a public one"),
        ("http://jwks.example.com/jwks.json", "only https"),
        ("https://user:pw@jwks.example.com/jwks.json", "credentials"),
        ("ftp://jwks.example.com/jwks.json", "not fetched"),
    ] {
        let error = fetch_text(url, &policy).await.unwrap_err();
        assert!(error.reason.contains(why), "{url}: {error}");
        assert!(
            !error.to_string().contains("pw@"),
            "echoes credentials: {error}"
        );
    }
}

#[tokio::test]
async fn remote_fetches_follow_no_redirect_and_stop_at_the_size_cap() {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/moved",
            get(|| async { axum::response::Redirect::temporary("/jwks.json") }),
        )
        .route("/big", get(|| async { "x".repeat(70 * 1024) }))
        .route("/jwks.json", get(|| async { r#"{"keys":[]}"# }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let policy = FetchPolicy {
        dangerous_allow_http_loopback: true,
        ..Default::default()
    };
    let base = format!("http://{addr}");
    assert_eq!(
        fetch_text(&format!("{base}/jwks.json"), &policy)
            .await
            .unwrap(),
        r#"{"keys":[]}"#
    );
    let error = fetch_text(&format!("{base}/moved"), &policy)
        .await
        .unwrap_err();
    assert!(error.reason.contains("HTTP status 307"), "{error}");
    let error = fetch_text(&format!("{base}/big"), &policy)
        .await
        .unwrap_err();
    assert!(error.reason.contains("larger than"), "{error}");
    // The switch opens loopback only.
    let error = fetch_text("http://10.0.0.1/jwks.json", &policy)
        .await
        .unwrap_err();
    assert!(
        error.reason.contains("not a public one") || error.reason.contains("loopback"),
        "{error}"
    );
}

#[tokio::test]
async fn a_remote_jwks_is_cached_and_a_failed_check_refetches_at_most_once_per_cooldown() {
    use axum::routing::get;
    use peergate::clock::ManualClock;
    use peergate::jose::jwks_cache::{Asking, JwksCache};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let failing = failures.clone();
    let app = axum::Router::new()
        .route(
            "/jwks.json",
            get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { r#"{"keys":[]}"# }
            }),
        )
        .route(
            "/missing",
            get(move || {
                failing.fetch_add(1, Ordering::SeqCst);
                async { axum::http::StatusCode::SERVICE_UNAVAILABLE }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let clock = ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH);
    let policy = FetchPolicy {
        dangerous_allow_http_loopback: true,
        ..Default::default()
    };
    let cache = JwksCache::new(policy, Arc::new(clock.clone()));
    cache.get(&url, Asking::Fresh).await.unwrap();
    cache.get(&url, Asking::Fresh).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1, "served from the cache");
    // An unknown kid within the cooldown: no refetch.
    clock.advance(std::time::Duration::from_secs(10));
    cache.get(&url, Asking::AfterFailure).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // After the cooldown: one refetch, then the cooldown again.
    clock.advance(std::time::Duration::from_secs(30));
    cache.get(&url, Asking::AfterFailure).await.unwrap();
    cache.get(&url, Asking::AfterFailure).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Past the maximum age: refetched even without an unknown kid.
    clock.advance(JwksCache::MAX_AGE);
    cache.get(&url, Asking::Fresh).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    // A failing key server is not asked again within the cooldown either.
    let down = format!("{}/missing", url.trim_end_matches("/jwks.json"));
    assert!(cache.get(&down, Asking::Fresh).await.is_err());
    assert!(cache.get(&down, Asking::AfterFailure).await.is_err());
    assert_eq!(
        hits.load(Ordering::SeqCst),
        3,
        "the failing URL was asked once"
    );
}

#[tokio::test]
async fn a_failed_refetch_keeps_the_good_key_set_and_a_slow_key_server_blocks_nobody_else() {
    use axum::routing::get;
    use peergate::clock::ManualClock;
    use peergate::jose::jwks_cache::{Asking, JwksCache};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let good =
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k", "x": b64(&[0x11; 32])}]})
            .to_string();
    // 0: the good set; 1: a server error; 2: a document that is no key set; 3: a set with a bad key.
    let mode = Arc::new(AtomicUsize::new(0));
    let served = (mode.clone(), good.clone());
    let (release_slow, slow_released) = tokio::sync::watch::channel(false);
    let app = axum::Router::new()
        .route(
            "/jwks.json",
            get(move || {
                let (mode, good) = served.clone();
                async move {
                    use axum::response::IntoResponse;
                    match mode.load(Ordering::SeqCst) {
                        0 => good.into_response(),
                        1 => axum::http::StatusCode::BAD_GATEWAY.into_response(),
                        2 => "<html>maintenance</html>".into_response(),
                        _ => r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":"AA"}]}"#
                            .into_response(),
                    }
                }
            }),
        )
        .route(
            "/slow.json",
            get(move || {
                let mut released = slow_released.clone();
                async move {
                    let _ = released.wait_for(|go| *go).await;
                    r#"{"keys":[]}"#
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let clock = ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH);
    let policy = FetchPolicy {
        dangerous_allow_http_loopback: true,
        ..Default::default()
    };
    let cache = Arc::new(JwksCache::new(policy, Arc::new(clock.clone())));
    let url = format!("{base}/jwks.json");
    assert_eq!(&*cache.get(&url, Asking::Fresh).await.unwrap().text, good);
    for failing in 1..=3 {
        mode.store(failing, Ordering::SeqCst);
        clock.advance(JwksCache::MAX_AGE);
        assert_eq!(
            &*cache.get(&url, Asking::AfterFailure).await.unwrap().text,
            good,
            "mode {failing} replaced the good set"
        );
    }
    // Still failing a day after the good fetch: the set is too old to trust, so it fails closed.
    clock.advance(JwksCache::MAX_STALE);
    assert!(cache.get(&url, Asking::Fresh).await.is_err());
    // The server recovers: the next fetch after the cooldown is used.
    mode.store(0, Ordering::SeqCst);
    clock.advance(JwksCache::COOLDOWN);
    assert_eq!(&*cache.get(&url, Asking::Fresh).await.unwrap().text, good);

    // A key server that does not answer holds up its own URL only.
    let slow = {
        let (cache, url) = (cache.clone(), format!("{base}/slow.json"));
        tokio::spawn(async move { cache.get(&url, Asking::Fresh).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!slow.is_finished(), "the slow server answered already");
    clock.advance(JwksCache::MAX_AGE);
    let other = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        cache.get(&url, Asking::Fresh),
    )
    .await
    .expect("a look-up for another URL waited for the slow key server");
    assert_eq!(&*other.unwrap().text, good);
    release_slow.send(true).unwrap();
    assert!(slow.await.unwrap().is_ok());
}

/// Wycheproof `json_web_key_test.json`: each group's key set (as a caller would hold it) and
/// the JWS to verify with it. Documented exceptions: HS384 (14) and HS512 (15) are valid there
/// but not algorithms peergate verifies, so they are refused. The RSA vector (tcId 5) verifies
/// since RS256 keys are taken (identity providers sign with them).
#[test]
fn wycheproof_key_set_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/wycheproof/json_web_key_test.json"
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let unsupported = [14, 15];
    let mut run = 0;
    for group in data["testGroups"].as_array().unwrap() {
        let mut keys = TrustedKeys::new();
        let loaded = keys.add_private_jwks(&group["private"].to_string()).is_ok();
        for test in group["tests"].as_array().unwrap() {
            let id = test["tcId"].as_i64().unwrap();
            let outcome = loaded && verify_compact(test["jws"].as_str().unwrap(), &keys).is_ok();
            let expected = test["result"] == "valid" && !unsupported.contains(&id);
            assert_eq!(
                outcome, expected,
                "tcId {id} ({}): {}",
                test["comment"], test["result"]
            );
            run += 1;
        }
    }
    assert_eq!(run, 26);
}

#[test]
fn ambiguous_cards_header_variants_and_the_raw_jcs_path() {
    use ed25519_dalek::Signer as _;
    let (card, key, jwks) = signed_card();
    let keys = keys_from(&jwks);
    let ed = |input: &[u8]| key.sign(input).to_bytes().to_vec();
    let refused = |text: String, why: &str| {
        let error = verify_card(&text, &keys).unwrap_err().to_string();
        assert!(error.contains(why), "expected {why:?} in {error:?}");
    };
    // Duplicate members anywhere in the card: two readers could see two different cards.
    let text = card.to_string();
    let duplicated = text.replacen('{', "{\"name\":\"Evil\",", 1);
    assert!(duplicated.contains("\"name\":\"Evil\"") && duplicated.contains("\"name\":\"Agent\""));
    refused(duplicated, "duplicate member");
    // Integers canonicalization would round.
    let mut big = card.clone();
    big["capabilities"]["extensions"] = json!([{"uri": "u", "params": {"n": 9007199254740993u64}}]);
    refused(big.to_string(), "cannot hold exactly");
    // A large integer a double holds exactly is fine (JCS writes 1e19 that way too).
    let mut exact = card.clone();
    exact["capabilities"]["extensions"] =
        json!([{"uri": "u", "params": {"n": 10000000000000000000u64}}]);
    assert!(
        !verify_card(&exact.to_string(), &keys)
            .unwrap_err()
            .to_string()
            .contains("cannot hold")
    );
    // Header variants: alg spellings, missing members, header shapes, key-carrying members.
    for header in [
        r#"{"alg":"nOnE","kid":"ed-1"}"#,
        r#"{"alg":"EDDSA","kid":"ed-1"}"#,
        r#"{"alg":"Ed25519","kid":"ed-1"}"#,
    ] {
        refused(resign(&card, header, ed), "does not match");
    }
    refused(resign(&card, r#"{"kid":"ed-1"}"#, ed), "no \"alg\"");
    refused(resign(&card, r#"{"alg":"EdDSA"}"#, ed), "no \"kid\"");
    refused(resign(&card, r#"["EdDSA"]"#, ed), "not a JSON object");
    let good = resign(&card, r#"{"alg":"EdDSA","kid":"ed-1"}"#, ed);
    let mut shaped: Value = serde_json::from_str(&good).unwrap();
    shaped["signatures"][0]["header"] = json!("x");
    refused(shaped.to_string(), "not an object");
    shaped["signatures"][0]["header"] = json!({"crit": ["x"]});
    refused(shaped.to_string(), "unprotected header");
    // Nothing unsigned is read, so nothing unsigned is let through: a jku there verified before.
    for member in [
        json!({"jku": "https://evil.example/jwks.json"}),
        json!({"jwk": {"kty": "OKP", "crv": "Ed25519", "x": "AA"}}),
        json!({"x-anything": 1}),
    ] {
        shaped["signatures"][0]["header"] = member.clone();
        refused(shaped.to_string(), "not signed and not used here");
    }
    shaped["signatures"][0]["header"] = json!({});
    assert!(
        verify_card(&shaped.to_string(), &keys).is_ok(),
        "an empty one is nothing"
    );
    // Repeated members at any depth of either header.
    refused(
        resign(
            &card,
            r#"{"alg":"EdDSA","kid":"ed-1","jwk":{"kty":"OKP","x":"a","x":"b"}}"#,
            ed,
        ),
        "duplicate",
    );
    refused(
        resign(
            &card,
            r#"{"alg":"EdDSA","kid":"ed-1","n":{"deeper":[{"k":1,"k":2}]}}"#,
            ed,
        ),
        "duplicate",
    );
    let unprotected_twice = good.replacen(
        "\"signature\":",
        "\"header\":{\"a\":{\"b\":1,\"b\":2}},\"signature\":",
        1,
    );
    assert_ne!(unprotected_twice, good);
    refused(unprotected_twice, "duplicate");
    // x5c, x5u and jku name other keys; they are never used (and never fetched).
    let attacker = ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]);
    for header in [
        r#"{"alg":"EdDSA","kid":"ed-1","x5u":"https://evil.example/cert.pem"}"#,
        r#"{"alg":"EdDSA","kid":"ed-1","x5c":["MIIB"]}"#,
        r#"{"alg":"EdDSA","kid":"ed-1","jku":"https://evil.example/jwks.json"}"#,
    ] {
        refused(
            resign(&card, header, |i| attacker.sign(i).to_bytes().to_vec()),
            "does not verify",
        );
        // The same headers are harmless on a signature by the trusted key.
        assert!(
            verify_card(&resign(&card, header, ed), &keys).is_ok(),
            "{header}"
        );
    }
    // A card signed over its raw JCS (holding an empty value the SDK form would drop).
    let mut raw_card = card.clone();
    raw_card.as_object_mut().unwrap().remove("signatures");
    raw_card["iconUrl"] = json!("");
    let protected = b64(br#"{"alg":"EdDSA","kid":"ed-1"}"#);
    let payload = serde_json_canonicalizer::to_string(&raw_card).unwrap();
    assert_ne!(payload, sign::canonical_payload(&raw_card).unwrap());
    let signature = ed(format!("{protected}.{}", b64(payload.as_bytes())).as_bytes());
    raw_card["signatures"] = json!([{"protected": protected, "signature": b64(&signature)}]);
    assert!(verify_card(&raw_card.to_string(), &keys).is_ok());
}

#[test]
fn a_key_set_past_the_key_bound_is_refused_whole() {
    let set = |n: usize| {
        let keys: Vec<Value> = (0..n)
            .map(|i| json!({"kty": "OKP", "crv": "Ed25519", "kid": format!("k{i}"), "x": b64(&[0x11; 32])}))
            .collect();
        json!({ "keys": keys }).to_string()
    };
    let mut keys = TrustedKeys::new();
    keys.add_jwks(&set(TrustedKeys::MAX_KEYS)).unwrap();
    assert_eq!(keys.len(), TrustedKeys::MAX_KEYS);
    let mut keys = TrustedKeys::new();
    let error = keys.add_jwks(&set(500)).unwrap_err().to_string();
    assert!(error.contains("at most 64"), "{error}");
    assert!(keys.is_empty(), "refused whole");
    // The bound holds across sets too.
    let mut keys = TrustedKeys::new();
    keys.add_jwks(&set(TrustedKeys::MAX_KEYS)).unwrap();
    let one_more =
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "extra", "x": b64(&[0x11; 32])}]});
    assert!(keys.add_jwks(&one_more.to_string()).is_err());
    assert!(
        keys.add_private_jwks(&set(TrustedKeys::MAX_KEYS + 1))
            .unwrap_err()
            .to_string()
            .contains("at most")
    );
}

#[test]
fn a_jwks_with_duplicate_members_or_a_repeated_kid_adds_nothing() {
    let x = b64(&[0x11; 32]);
    let mut keys = TrustedKeys::new();
    let duplicate_member =
        format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"a","x":"{x}","x":"{x}"}}]}}"#);
    assert!(
        keys.add_jwks(&duplicate_member)
            .unwrap_err()
            .to_string()
            .contains("duplicate")
    );
    let repeated = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x},
        {"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": x}]});
    assert!(keys.add_jwks(&repeated.to_string()).is_err());
    assert!(keys.is_empty(), "refused whole");
}

#[tokio::test]
async fn address_literals_in_every_spelling_are_checked() {
    let policy = FetchPolicy::default();
    for url in [
        "https://2130706433/jwks.json",
        "https://0x7f.1/jwks.json",
        "https://0177.0.0.1/jwks.json",
        "https://[::ffff:7f00:1]/jwks.json",
        "https://0.0.0.0/jwks.json",
        "https://[fe80::1]/jwks.json",
    ] {
        let error = fetch_text(url, &policy).await.unwrap_err();
        assert!(error.reason.contains("not a public one"), "{url}: {error}");
    }
}
