//! The card-signing path against the official SDK's test vectors, byte for byte
//! (`tests/data/a2a_card_signing_vectors.json`, generated with the Python SDK wheels).

use base64::Engine as _;
use peergate::jose::sign::{self, CardSigningKey};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/a2a_card_signing_vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[test]
fn ed25519_vector_matches_byte_for_byte() {
    let v = &vectors()["ed25519"];
    let seed: Vec<u8> = (0u8..32).collect();
    assert_eq!(
        seed.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        v["seed_hex"]
    );
    let key = ed25519_dalek::SigningKey::from_bytes(&seed.try_into().unwrap());
    assert_eq!(b64url(key.verifying_key().as_bytes()), v["public_jwk"]["x"]);
    let key = CardSigningKey::ed25519(v["kid"].as_str().unwrap().to_owned(), key);
    let payload = sign::canonical_payload(&v["card"]).unwrap();
    assert_eq!(payload, v["canonical_payload"]);
    let header = sign::protected_header(&key, v["jku"].as_str());
    assert_eq!(header, v["protected_json"]);
    assert_eq!(b64url(header.as_bytes()), v["protected"]);
    let signed = sign::sign_card(&v["card"], &[key], v["jku"].as_str()).unwrap();
    assert_eq!(signed["signatures"][0]["protected"], v["protected"]);
    assert_eq!(signed["signatures"][0]["signature"], v["signature"]);
    // Signing leaves the card itself alone.
    let mut unsigned = signed.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    assert_eq!(unsigned, v["card"]);
}

#[test]
fn hs256_vector_matches_byte_for_byte() {
    let v = &vectors()["hs256"];
    let key = CardSigningKey::hs256(
        "key-1".to_owned(),
        v["secret_utf8"].as_str().unwrap().as_bytes().to_vec(),
    );
    let payload = sign::canonical_payload(&v["card"]).unwrap();
    assert_eq!(payload, v["canonical_payload"]);
    // The SDK's header carries "jku": null; sign under exactly that header.
    assert_eq!(
        b64url(v["protected_json"].as_str().unwrap().as_bytes()),
        v["protected"]
    );
    let signature = sign::sign_payload(v["protected"].as_str().unwrap(), &payload, &key);
    assert_eq!(signature["signature"], v["signature"]);
}

#[test]
fn a_signed_card_is_re_signed_over_the_card_without_its_signatures() {
    let v = &vectors()["hs256"];
    let key = || CardSigningKey::hs256("key-1", vec![7; 32]);
    let once = sign::sign_card(&v["card"], &[key()], None).unwrap();
    let twice = sign::sign_card(&once, &[key()], None).unwrap();
    assert_eq!(once, twice);
    assert_eq!(
        sign::canonical_payload(&once).unwrap(),
        sign::canonical_payload(&v["card"]).unwrap()
    );
}

/// Every empty string, array or object, and every null, anywhere in `value`.
fn empties(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::Null => found.push(path.to_owned()),
        Value::String(s) if s.is_empty() => found.push(path.to_owned()),
        Value::Array(items) => {
            if items.is_empty() {
                found.push(path.to_owned());
            }
            for (i, item) in items.iter().enumerate() {
                empties(item, &format!("{path}/{i}"), found);
            }
        }
        Value::Object(map) => {
            if map.is_empty() {
                found.push(path.to_owned());
            }
            for (key, item) in map {
                empties(item, &format!("{path}/{key}"), found);
            }
        }
        _ => {}
    }
}

mod served {
    use super::*;
    use crate::common::*;

    #[tokio::test]
    async fn the_default_card_is_signed_by_a_key_published_in_the_jwks() {
        use ed25519_dalek::Verifier as _;
        let gw = TestGateway::start_with(
            PolicyEdit::default()
                .set("auth.schemes", ["bearer", "basic", "api_key"])
                .policy(),
        )
        .await;
        let card: Value = reqwest::get(gw.url("/.well-known/agent-card.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // No empty value but the schemes' empty scope lists, which have no other form.
        let mut found = Vec::new();
        empties(&card, "", &mut found);
        found.retain(|path| !path.starts_with("/securityRequirements/"));
        assert!(
            found.is_empty(),
            "empty values in the served card: {found:?}"
        );

        let response = reqwest::get(gw.url("/.well-known/jwks.json"))
            .await
            .unwrap();
        assert_eq!(response.headers()["cache-control"], "public, max-age=300");
        assert!(response.headers().contains_key("etag"));
        let jwks: Value = response.json().await.unwrap();
        let jwk = &jwks["keys"][0];
        assert_eq!(jwks["keys"].as_array().unwrap().len(), 1);
        assert_eq!(
            (jwk["kty"].as_str(), jwk["crv"].as_str()),
            (Some("OKP"), Some("Ed25519"))
        );
        assert!(jwk.get("d").is_none(), "private key published");

        let signature = &card["signatures"][0];
        let protected = signature["protected"].as_str().unwrap();
        let header: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(protected)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "EdDSA");
        assert_eq!(header["typ"], "JOSE");
        assert_eq!(header["kid"], jwk["kid"]);

        // The first signature covers the SDK's cleaned form; the second, by the same key, raw
        // JCS of the card as served without its signatures (which keeps the empty scope
        // lists the SDK drops): each verifier generation finds one that verifies.
        let payload = sign::canonical_payload(&card).unwrap();
        let mut unsigned = card.clone();
        unsigned.as_object_mut().unwrap().remove("signatures");
        let raw = serde_json_canonicalizer::to_string(&unsigned).unwrap();
        assert_ne!(payload, raw);
        assert_eq!(card["signatures"].as_array().unwrap().len(), 2);
        assert_eq!(card["signatures"][1]["protected"], signature["protected"]);

        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(jwk["x"].as_str().unwrap())
            .unwrap();
        let key = ed25519_dalek::VerifyingKey::from_bytes(&x.try_into().unwrap()).unwrap();
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(signature["signature"].as_str().unwrap())
            .unwrap();
        let sig = ed25519_dalek::Signature::from_slice(&sig).unwrap();
        let input = format!("{protected}.{}", b64url(payload.as_bytes()));
        key.verify(input.as_bytes(), &sig)
            .expect("signature verifies");
        let raw_sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(card["signatures"][1]["signature"].as_str().unwrap())
            .unwrap();
        let raw_input = format!("{protected}.{}", b64url(raw.as_bytes()));
        key.verify(
            raw_input.as_bytes(),
            &ed25519_dalek::Signature::from_slice(&raw_sig).unwrap(),
        )
        .expect("the raw-JCS signature verifies");
        // A changed card does not.
        unsigned["name"] = Value::String("Someone else".into());
        let forged = sign::canonical_payload(&unsigned).unwrap();
        let input = format!("{protected}.{}", b64url(forged.as_bytes()));
        assert!(key.verify(input.as_bytes(), &sig).is_err());
        gw.stop().await;
    }
}
