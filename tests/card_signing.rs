//! The card-signing path against the official SDK's test vectors, byte for byte
//! (`tests/data/a2a_card_signing_vectors.json`, generated with the Python SDK wheels).

use base64::Engine as _;
use peergate::jws::{self, CardSigningKey};
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
    let key = CardSigningKey::EdDsa {
        kid: v["kid"].as_str().unwrap().to_owned(),
        key: Box::new(key),
    };
    let payload = jws::canonical_payload(&v["card"]).unwrap();
    assert_eq!(payload, v["canonical_payload"]);
    let header = jws::protected_header(&key, v["jku"].as_str());
    assert_eq!(header, v["protected_json"]);
    assert_eq!(b64url(header.as_bytes()), v["protected"]);
    let signed = jws::sign_card(&v["card"], &[key], v["jku"].as_str()).unwrap();
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
    let key = CardSigningKey::Hs256 {
        kid: "key-1".to_owned(),
        secret: v["secret_utf8"].as_str().unwrap().as_bytes().to_vec(),
    };
    let payload = jws::canonical_payload(&v["card"]).unwrap();
    assert_eq!(payload, v["canonical_payload"]);
    // The SDK's header carries "jku": null; sign under exactly that header.
    assert_eq!(
        b64url(v["protected_json"].as_str().unwrap().as_bytes()),
        v["protected"]
    );
    let signature = jws::sign_payload(v["protected"].as_str().unwrap(), &payload, &key);
    assert_eq!(signature["signature"], v["signature"]);
}

#[test]
fn a_signed_card_is_re_signed_over_the_card_without_its_signatures() {
    let v = &vectors()["hs256"];
    let key = || CardSigningKey::Hs256 {
        kid: "key-1".to_owned(),
        secret: vec![7; 32],
    };
    let once = jws::sign_card(&v["card"], &[key()], None).unwrap();
    let twice = jws::sign_card(&once, &[key()], None).unwrap();
    assert_eq!(once, twice);
    assert_eq!(
        jws::canonical_payload(&once).unwrap(),
        jws::canonical_payload(&v["card"]).unwrap()
    );
}
