//! peergate's JOSE code checked against an independent implementation: `jsonwebtoken` (a
//! dev-dependency only, pure-Rust `rust_crypto` provider). See
//! `docs/decisions/0001-jose-and-rate-limit-crates.md`.
//!
//! * Every card peergate signs (EdDSA, ES256, HS256) verifies under `jsonwebtoken::crypto::verify`,
//!   and a one-byte change of the payload does not.
//! * The Wycheproof Ed25519 vectors (`tests/data/wycheproof/ed25519_test.json`) go through
//!   peergate's Ed25519 check and through jsonwebtoken's. peergate must accept every valid vector
//!   and no invalid one. jsonwebtoken 12.0.0 accepts no invalid vector either (pinned below, so
//!   a change shows). `cargo test --test jose_crosscheck -- --nocapture` prints the table.
//! * Where the two Ed25519 checks do differ: a small-order key, which Wycheproof's file does
//!   not exercise. peergate refuses it; jsonwebtoken accepts one signature for every message.
//! * A 31-byte Ed25519 key: peergate refuses it; jsonwebtoken panics when verifying with it.

use base64::Engine as _;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use peergate::jose::keys;
use peergate::jose::sign::{self, CardSigningKey, JwsAlgorithm};
use peergate::jose::verify::{TrustedKeys, verify_card};
use serde_json::{Value, json};

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64url(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

fn unhex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// jsonwebtoken 12 needs exactly one crypto provider. With only `rust_crypto` enabled it picks
/// that one itself; install it explicitly in case feature unification ever turns on a second.
fn jwt_provider() {
    if CryptoProvider::try_get_default().is_none() {
        // Another test thread may have installed it first; either way one is there after.
        let _ =
            CryptoProvider::install_default(&jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER);
    }
    assert!(CryptoProvider::try_get_default().is_some());
}

/// A card of the shape peergate serves: non-ASCII text, a number, nested objects, and no empty
/// or default values (so the raw RFC 8785 form and the SDK's cleaned form are the same bytes).
fn card() -> Value {
    json!({
        "name": "Café Agent",
        "description": "Answers questions ☕ for partner agents",
        "version": "1.0.0",
        "supportedInterfaces": [{
            "url": "https://agent.example.com/a2a",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"
        }],
        "provider": {"organization": "Example Org", "url": "https://example.com"},
        "capabilities": {
            "streaming": false,
            "extensions": [{
                "uri": "https://example.com/ext/v1",
                "required": true,
                "params": {"max": 5, "ratio": 0.5}
            }]
        },
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [{"id": "ask", "name": "Ask", "description": "One question, one answer",
            "tags": ["qa", "ünïcode"]}]
    })
}

/// One key per algorithm peergate signs with, fixed so that a rerun signs the same bytes.
fn signing_keys() -> Vec<CardSigningKey> {
    vec![
        CardSigningKey::ed25519("ed-1", ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])),
        CardSigningKey::p256(
            "es-1",
            p256::ecdsa::SigningKey::from_slice(&[3u8; 32]).unwrap(),
        ),
        CardSigningKey::hs256("hs-1", HS256_SECRET.to_vec()),
    ]
}

/// The shared secret of the HS256 key.
const HS256_SECRET: [u8; 32] = [0x5a; 32];

/// jsonwebtoken's key for the card key: the public JWK peergate publishes (read by
/// jsonwebtoken's own `Jwk` type), or the shared secret for HS256.
fn decoding_key(key: &CardSigningKey) -> DecodingKey {
    match key.public_jwk() {
        None => DecodingKey::from_secret(&HS256_SECRET).unwrap(),
        Some(public) => {
            let jwk: Jwk = serde_json::from_value(public).unwrap();
            DecodingKey::from_jwk(&jwk).unwrap()
        }
    }
}

#[test]
fn every_card_peergate_signs_verifies_under_jsonwebtoken() {
    jwt_provider();
    let keys = signing_keys();
    let card = card();
    assert!(!sign::holds_droppable_values(&card));
    let signed =
        sign::sign_card(&card, &keys, Some("https://agent.example.com/jwks.json")).unwrap();
    let signatures = signed["signatures"].as_array().unwrap();
    assert_eq!(signatures.len(), keys.len());

    // The payload every signature covers, rebuilt from the signed card as a verifier would.
    let payload = sign::canonical_payload(&signed).unwrap();
    let mut unsigned = signed.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    assert_eq!(
        payload,
        serde_json_canonicalizer::to_string(&unsigned).unwrap(),
        "for this card the payload is plain RFC 8785 of the card without signatures"
    );
    // The same payload with one byte changed ("1.0.0" becomes "1.0.1").
    let tampered = payload.replacen("\"1.0.0\"", "\"1.0.1\"", 1);
    assert_eq!(tampered.len(), payload.len());
    assert_eq!(
        tampered
            .bytes()
            .zip(payload.bytes())
            .filter(|(a, b)| a != b)
            .count(),
        1
    );

    for (entry, key) in signatures.iter().zip(&keys) {
        let protected = entry["protected"].as_str().unwrap();
        let signature = entry["signature"].as_str().unwrap();
        let header: Value = serde_json::from_slice(&unb64url(protected)).unwrap();
        assert_eq!(header["kid"], key.kid());
        // jsonwebtoken reads the algorithm name itself.
        let alg: Algorithm = header["alg"].as_str().unwrap().parse().unwrap();
        let expected = match key.algorithm() {
            JwsAlgorithm::EdDsa => Algorithm::EdDSA,
            JwsAlgorithm::Es256 => Algorithm::ES256,
            JwsAlgorithm::Hs256 => Algorithm::HS256,
            other => panic!("no jsonwebtoken algorithm for {other}"),
        };
        assert_eq!(alg, expected);
        let decoding = decoding_key(key);

        let input = format!("{protected}.{}", b64url(payload.as_bytes()));
        assert!(
            jsonwebtoken::crypto::verify(signature, input.as_bytes(), &decoding, alg).unwrap(),
            "{alg:?} signature by {} does not verify under jsonwebtoken",
            key.kid()
        );
        let input = format!("{protected}.{}", b64url(tampered.as_bytes()));
        assert!(
            !jsonwebtoken::crypto::verify(signature, input.as_bytes(), &decoding, alg).unwrap(),
            "{alg:?}: a tampered payload verifies under jsonwebtoken"
        );
    }

    // And peergate's own verifier agrees, one key at a time.
    let mut public = TrustedKeys::new();
    public
        .add_jwks(&keys::jwks(&keys).to_string())
        .expect("peergate reads its own JWKS");
    assert_eq!(public.len(), 2);
    let verified = verify_card(&signed.to_string(), &public).unwrap();
    assert_eq!(verified.kid, "ed-1");
    let mut secret = TrustedKeys::new();
    secret
        .add_secret_arg(&format!("hs-1={}", b64url(&[0x5a; 32])))
        .unwrap();
    assert_eq!(
        verify_card(&signed.to_string(), &secret).unwrap().alg,
        "HS256"
    );
}

/// peergate's Ed25519 rules for a raw (message, signature, key): the key goes through the
/// public `TrustedKeys::add_jwks` (32 bytes of strict base64url, a valid point, no small-order
/// key) and the signature through `TrustedKeys::verify_raw`, the same check a card's signature
/// gets (exactly 64 bytes, then `verify_strict`).
fn peergate_accepts(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let jwks =
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "w", "x": b64url(public_key)}]});
    let mut keys = TrustedKeys::new();
    if keys.add_jwks(&jwks.to_string()).is_err() {
        return false;
    }
    keys.verify_raw("w", message, signature).unwrap_or(false)
}

/// jsonwebtoken's EdDSA verification of a raw (message, signature, key), through its public
/// primitive `crypto::verify` (ed25519-dalek's `verify`, not `verify_strict`). An error (a key
/// that is not a point, a signature that is not 64 bytes) counts as a rejection.
fn jsonwebtoken_accepts(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let key = DecodingKey::from_ed_components(&b64url(public_key)).unwrap();
    jsonwebtoken::crypto::verify(&b64url(signature), message, &key, Algorithm::EdDSA)
        .unwrap_or(false)
}

/// The invalid Wycheproof Ed25519 vectors jsonwebtoken 12.0.0 (rust_crypto) accepts, by tcId:
/// none when this test was written (it rejects all 63, as peergate does). A change here means
/// jsonwebtoken's EdDSA check changed.
const JSONWEBTOKEN_ACCEPTS_INVALID: [i64; 0] = [];

#[test]
fn wycheproof_ed25519_vectors_through_both_verifiers() {
    jwt_provider();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/wycheproof/ed25519_test.json"
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut total, mut valid, mut invalid) = (0, 0, 0);
    let mut peergate_invalid = Vec::new();
    let mut jwt_invalid = Vec::new();
    let mut jwt_refused_valid = Vec::new();
    for group in data["testGroups"].as_array().unwrap() {
        let public_key = unhex(group["publicKey"]["pk"].as_str().unwrap());
        // jsonwebtoken slices the first 32 bytes of an Ed25519 key without a length check.
        assert_eq!(public_key.len(), 32);
        for test in group["tests"].as_array().unwrap() {
            let id = test["tcId"].as_i64().unwrap();
            let message = unhex(test["msg"].as_str().unwrap());
            let signature = unhex(test["sig"].as_str().unwrap());
            let by_peergate = peergate_accepts(&public_key, &message, &signature);
            let by_jwt = jsonwebtoken_accepts(&public_key, &message, &signature);
            let row = (
                id,
                test["comment"].as_str().unwrap().to_owned(),
                test["flags"].to_string(),
            );
            total += 1;
            match test["result"].as_str().unwrap() {
                "valid" => {
                    valid += 1;
                    assert!(by_peergate, "peergate refuses valid tcId {id}");
                    if !by_jwt {
                        jwt_refused_valid.push(row);
                    }
                }
                "invalid" => {
                    invalid += 1;
                    if by_peergate {
                        peergate_invalid.push(row.clone());
                    }
                    if by_jwt {
                        jwt_invalid.push(row);
                    }
                }
                other => panic!("tcId {id}: unexpected result {other:?}"),
            }
        }
    }

    println!("Wycheproof ed25519_test.json: {total} vectors, {valid} valid, {invalid} invalid");
    println!(
        "invalid vectors accepted: peergate {}, jsonwebtoken {}",
        peergate_invalid.len(),
        jwt_invalid.len()
    );
    for (id, comment, flags) in &jwt_invalid {
        println!("  jsonwebtoken accepts invalid tcId {id:>3}: {comment} {flags}");
    }
    for (id, comment, flags) in &jwt_refused_valid {
        println!("  jsonwebtoken refuses valid tcId {id:>3}: {comment} {flags}");
    }

    assert_eq!(total, data["numberOfTests"].as_i64().unwrap());
    assert_eq!((total, valid, invalid), (151, 88, 63));
    assert!(
        peergate_invalid.is_empty(),
        "peergate accepts invalid vectors: {peergate_invalid:?}"
    );
    assert!(
        jwt_refused_valid.is_empty(),
        "jsonwebtoken refuses valid vectors: {jwt_refused_valid:?}"
    );
    let ids: Vec<i64> = jwt_invalid.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(
        ids, JSONWEBTOKEN_ACCEPTS_INVALID,
        "the invalid vectors jsonwebtoken accepts changed"
    );
}

/// Where the two Ed25519 checks do differ, outside Wycheproof's file: a small-order public key.
/// Under the identity point as key, the signature `R = identity, S = 0` satisfies the
/// cofactorless equation `[S]B = R + [k]A` for every message. jsonwebtoken (ed25519-dalek's
/// `verify`) accepts it; peergate refuses the key when it is added and `verify_strict` refuses
/// the signature.
#[test]
fn a_small_order_key_is_where_the_two_ed25519_checks_differ() {
    jwt_provider();
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let mut signature = [0u8; 64];
    signature[..32].copy_from_slice(&identity);
    for message in [&b"any card"[..], b"any other card", b""] {
        assert!(jsonwebtoken_accepts(&identity, message, &signature));
        assert!(!peergate_accepts(&identity, message, &signature));
    }
    let jwks =
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "w", "x": b64url(&identity)}]});
    let refused = TrustedKeys::new().add_jwks(&jwks.to_string()).unwrap_err();
    assert!(refused.0.contains("small-order"), "{refused}");
    let key = ed25519_dalek::VerifyingKey::from_bytes(&identity).unwrap();
    let signature = ed25519_dalek::Signature::from_bytes(&signature);
    assert!(key.verify_strict(b"any card", &signature).is_err());
}

/// `TrustedKeys::verify_raw`, which `peergate_accepts` uses, gives the same answers as peergate's public
/// `verify_compact` wherever both apply (messages that are JWS signing inputs): a good
/// signature, one with a flipped bit, one with `S + L` (the same signature, malleated), one cut
/// short.
#[test]
fn raw_verification_agrees_with_verify_compact() {
    use ed25519_dalek::Signer as _;
    let signing = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let public = signing.verifying_key().to_bytes();
    let protected = b64url(br#"{"alg":"EdDSA","kid":"w"}"#);
    let input = format!("{protected}.{}", b64url(b"{\"name\":\"card\"}"));
    let good = signing.sign(input.as_bytes()).to_bytes();
    let mut flipped = good;
    flipped[40] ^= 1;
    // S + L, with L the group order, little-endian; S < L so the sum fits in 32 bytes.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut malleated = good;
    let mut carry = 0u16;
    for (i, l) in L.iter().enumerate() {
        let sum = u16::from(good[32 + i]) + u16::from(*l) + carry;
        malleated[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(carry, 0);
    let mut keys = TrustedKeys::new();
    keys.add_jwks(
        &json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "w", "x": b64url(&public)}]})
            .to_string(),
    )
    .unwrap();
    let cases: [(&[u8], bool); 4] = [
        (&good, true),
        (&flipped, false),
        (&malleated, false),
        (&good[..63], false),
    ];
    for (signature, expected) in cases {
        let compact = format!("{input}.{}", b64url(signature));
        let by_peergate = peergate::jose::verify::verify_compact(&compact, &keys).is_ok();
        assert_eq!(by_peergate, expected);
        assert_eq!(
            peergate_accepts(&public, input.as_bytes(), signature),
            expected
        );
    }
}

/// A JWKS entry whose Ed25519 `x` is 31 bytes: peergate refuses the key when it is added;
/// jsonwebtoken 12.0.0 reads it, then panics on the first verification (it slices `[..32]`
/// without a length check, `src/crypto/rust_crypto/eddsa.rs`). For a verifier fed remote key
/// sets that is a panic an outsider can trigger. If this starts failing, jsonwebtoken fixed it:
/// update the decision record.
#[test]
fn a_short_ed25519_key_is_refused_by_peergate_and_panics_jsonwebtoken() {
    jwt_provider();
    let jwk = json!({"kty": "OKP", "crv": "Ed25519", "kid": "short", "x": b64url(&[9u8; 31])});
    let refused = TrustedKeys::new()
        .add_jwks(&json!({"keys": [jwk.clone()]}).to_string())
        .unwrap_err();
    assert!(refused.0.contains("bad Ed25519"), "{refused}");
    let jwk: Jwk = serde_json::from_value(jwk).unwrap();
    let key = DecodingKey::from_jwk(&jwk).expect("jsonwebtoken reads the key");
    eprintln!("a panic in jsonwebtoken's eddsa.rs is expected next (a 31-byte Ed25519 key)");
    let outcome = std::panic::catch_unwind(|| {
        jsonwebtoken::crypto::verify(&b64url(&[0u8; 64]), b"card", &key, Algorithm::EdDSA)
    });
    assert!(
        outcome.is_err(),
        "jsonwebtoken no longer panics: {outcome:?}"
    );
}

/// Access tokens signed by jsonwebtoken (RS256 with an RSA key openssl made, PS256, ES256)
/// verify under peergate's access-token verifier with the public halves in a JWKS, and a
/// changed claim does not: the RSA check peergate does with ring agrees with an independent
/// signer.
#[test]
fn access_tokens_jsonwebtoken_signs_verify_under_peergates_verifier() {
    use peergate::jose::access_token::{self, AccessTokenRules};
    jwt_provider();
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "openssl {args:?}");
        output.stdout
    };
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "rsa.pem",
    ]);
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "ec.pem",
    ]);
    // jsonwebtoken without its PEM feature reads DER: PKCS#1 for RSA, PKCS#8 for EC.
    let rsa_der = openssl(&["rsa", "-in", "rsa.pem", "-outform", "DER", "-traditional"]);
    let ec_der = openssl(&[
        "pkcs8", "-topk8", "-nocrypt", "-in", "ec.pem", "-outform", "DER",
    ]);
    // The public halves as a JWKS, read off by openssl.
    let modulus =
        String::from_utf8(openssl(&["rsa", "-in", "rsa.pem", "-modulus", "-noout"])).unwrap();
    let n = unhex(modulus.trim().trim_start_matches("Modulus="));
    let spki = openssl(&["pkey", "-in", "ec.pem", "-pubout", "-outform", "DER"]);
    let point = &spki[spki.len() - 65..];
    let rsa = |kid: &str, alg: &str| json!({"kty": "RSA", "kid": kid, "alg": alg, "n": b64url(&n), "e": "AQAB"});
    let jwks = json!({"keys": [
        rsa("rsa-1", "RS256"),
        rsa("rsa-pss", "PS256"),
        {"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": b64url(&point[1..33]), "y": b64url(&point[33..65])},
    ]});
    let mut keys = TrustedKeys::new();
    assert_eq!(keys.add_issuer_jwks(&jwks.to_string()), Ok(0), "{jwks}");
    let rules = AccessTokenRules {
        issuer: "https://idp.example".to_owned(),
        audience: "https://gw.example/a2a/v1".to_owned(),
        algorithms: vec!["RS256".into(), "PS256".into(), "ES256".into()],
        plain_jwt: false,
        skew: std::time::Duration::from_secs(60),
        max_lifetime: std::time::Duration::from_secs(3600),
        client_id_required: false,
        claims: Vec::new(),
    };
    let now = 1_800_000_000i64;
    let claims = json!({"iss": rules.issuer, "aud": rules.audience, "client_id": "partner",
        "scope": "a2a:message", "iat": now, "exp": now + 300});
    for (kid, alg) in [
        ("rsa-1", Algorithm::RS256),
        ("rsa-pss", Algorithm::PS256),
        ("ec-1", Algorithm::ES256),
    ] {
        let mut header = jsonwebtoken::Header::new(alg);
        header.kid = Some(kid.to_owned());
        header.typ = Some("at+jwt".to_owned());
        let key = if alg == Algorithm::ES256 {
            jsonwebtoken::EncodingKey::from_ec_der(&ec_der)
        } else {
            jsonwebtoken::EncodingKey::from_rsa_der(&rsa_der)
        };
        let token = jsonwebtoken::encode(&header, &claims, &key).unwrap();
        let parsed = access_token::parse(&token, false).unwrap();
        let verified = access_token::verify(
            &parsed,
            &keys,
            &rules,
            peergate::clock::Timestamp::from_second(now).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(verified.subject, "partner");
        // The same signature over a changed claim.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let mut changed = claims.clone();
        changed["scope"] = json!("a2a:message a2a:push");
        parts[1] = b64url(changed.to_string().as_bytes());
        let forged = parts.join(".");
        let parsed = access_token::parse(&forged, false).unwrap();
        assert!(
            access_token::verify(
                &parsed,
                &keys,
                &rules,
                peergate::clock::Timestamp::from_second(now).unwrap()
            )
            .is_err(),
            "{alg:?}: a changed claim verified"
        );
    }
}
