//! Configured card-signing keys: generation, several signatures, rotation, the JWKS, and the
//! settings that stop start-up.

use crate::common::*;
use base64::Engine as _;
use serde_json::Value;
use std::path::Path;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

fn generate(dir: &Path, alg: &str, kid: &str) -> String {
    let out = dir.join(format!("{kid}.pem"));
    let (code, stdout, stderr) = cli(&[
        "keys",
        "generate",
        "--alg",
        alg,
        "--kid",
        kid,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), out.to_str().unwrap());
    out.to_str().unwrap().to_owned()
}

#[test]
fn generated_keys_are_private_files_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = generate(dir.path(), "ES256", "ec-1");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (code, _, stderr) = cli(&[
        "keys", "generate", "--alg", "ES256", "--kid", "ec-1", "--out", &path,
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr
            .trim()
            .ends_with("already exists; keys are never overwritten"),
        "{stderr}"
    );
    let (code, _, stderr) = cli(&["keys", "generate", "--alg", "HS256", "--kid", "h"]);
    assert_ne!(code, 0);
    assert!(
        !stderr.trim().contains('\n') && stderr.contains("EdDSA or ES256"),
        "{stderr}"
    );
}

fn keys_policy(dir: &Path, hs_secret: &[u8]) -> PolicyEdit {
    let ed = generate(dir, "EdDSA", "ed-now");
    let ec = generate(dir, "ES256", "ec-now");
    let old = generate(dir, "EdDSA", "ed-retiring");
    let gone = generate(dir, "EdDSA", "ed-gone");
    let secret_file = dir.join("hs.secret");
    std::fs::write(&secret_file, b64(hs_secret)).unwrap();
    PolicyEdit::default()
        .insert(
            "signing.jwks_url",
            "https://gw.example.org/.well-known/jwks.json",
        )
        .push_table(
            "signing.keys",
            &[
                ("kid", "ed-now".into()),
                ("alg", "EdDSA".into()),
                ("private_key_file", ed.into()),
            ],
        )
        .push_table(
            "signing.keys",
            &[
                ("kid", "ec-now".into()),
                ("alg", "ES256".into()),
                ("private_key_file", ec.into()),
            ],
        )
        .push_table(
            "signing.keys",
            &[
                ("kid", "hs-now".into()),
                ("alg", "HS256".into()),
                ("secret_file", secret_file.to_str().unwrap().into()),
            ],
        )
        .push_table(
            "signing.keys",
            &[
                ("kid", "ed-retiring".into()),
                ("alg", "EdDSA".into()),
                ("private_key_file", old.into()),
                ("retiring_until", "2999-01-01".into()),
            ],
        )
        .push_table(
            "signing.keys",
            &[
                ("kid", "ed-gone".into()),
                ("alg", "EdDSA".into()),
                ("private_key_file", gone.into()),
                ("retiring_until", "2000-01-01".into()),
            ],
        )
}

#[tokio::test]
async fn every_signing_key_adds_a_signature_and_the_jwks_follows_rotation() {
    use ed25519_dalek::Verifier as _;
    use hmac::{KeyInit as _, Mac as _};
    let dir = tempfile::tempdir().unwrap();
    let secret = [42u8; 32];
    let gw = TestGateway::start_with(keys_policy(dir.path(), &secret).policy()).await;
    let card: Value = reqwest::get(gw.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let jwks: Value = reqwest::get(gw.url("/.well-known/jwks.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let published: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(published, ["ed-now", "ec-now", "ed-retiring"], "{jwks}");
    for key in jwks["keys"].as_array().unwrap() {
        assert!(
            key.get("d").is_none() && key.get("k").is_none(),
            "secret material: {key}"
        );
    }

    // Each key signs the SDK's cleaned payload, then (the card holds empty scope lists) raw
    // JCS of the card without its signatures.
    let sdk = peergate::jose::sign::canonical_payload(&card).unwrap();
    let mut unsigned = card.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    let raw = serde_json_canonicalizer::to_string(&unsigned).unwrap();
    let signatures = card["signatures"].as_array().unwrap();
    assert_eq!(signatures.len() % 2, 0);
    let mut kids = Vec::new();
    for (i, signature) in signatures.iter().enumerate() {
        let payload = if i < signatures.len() / 2 { &sdk } else { &raw };
        let protected = signature["protected"].as_str().unwrap();
        let header: Value = serde_json::from_slice(&unb64(protected)).unwrap();
        assert_eq!(
            header["jku"],
            "https://gw.example.org/.well-known/jwks.json"
        );
        assert_eq!(header["typ"], "JOSE");
        let input = format!("{protected}.{}", b64(payload.as_bytes()));
        let sig = unb64(signature["signature"].as_str().unwrap());
        let kid = header["kid"].as_str().unwrap();
        let jwk = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid);
        match header["alg"].as_str().unwrap() {
            "EdDSA" => {
                let x = unb64(jwk.unwrap()["x"].as_str().unwrap());
                let key = ed25519_dalek::VerifyingKey::from_bytes(&x.try_into().unwrap()).unwrap();
                key.verify(
                    input.as_bytes(),
                    &ed25519_dalek::Signature::from_slice(&sig).unwrap(),
                )
                .expect("EdDSA verifies");
            }
            "ES256" => {
                use p256::ecdsa::signature::Verifier as _;
                let jwk = jwk.unwrap();
                let mut point = vec![4u8];
                point.extend(unb64(jwk["x"].as_str().unwrap()));
                point.extend(unb64(jwk["y"].as_str().unwrap()));
                let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).unwrap();
                assert_eq!(sig.len(), 64, "raw r||s");
                let sig = p256::ecdsa::Signature::from_slice(&sig).unwrap();
                key.verify(input.as_bytes(), &sig).expect("ES256 verifies");
            }
            "HS256" => {
                assert!(jwk.is_none(), "an HMAC key is never published");
                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&secret).unwrap();
                mac.update(input.as_bytes());
                mac.verify_slice(&sig).expect("HS256 verifies");
            }
            other => panic!("unexpected alg {other}"),
        }
        kids.push(kid.to_owned());
    }
    assert_eq!(
        kids,
        ["ed-now", "ec-now", "hs-now", "ed-now", "ec-now", "hs-now"],
        "retiring keys do not sign"
    );
    gw.stop().await;
}

/// Why start-up fails with `key` as the only signing key.
async fn start_error(key: &[(&str, toml_edit::Value)]) -> String {
    let data = tempfile::tempdir().unwrap();
    let policy = PolicyEdit::default()
        .push_table("signing.keys", key)
        .policy();
    let result = peergate::app::start(gateway_options(
        policy,
        data.path(),
        std::sync::Arc::new(peergate::clock::SystemClock),
    ))
    .await;
    result.err().expect("start-up must fail").to_string()
}

#[tokio::test]
async fn weak_or_missing_keys_stop_start_up_naming_the_kid() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.secret");
    std::fs::write(&short, b64(b"sixteen byte key")).unwrap();
    let message = start_error(&[
        ("kid", "weak".into()),
        ("alg", "HS256".into()),
        ("secret_file", short.to_str().unwrap().into()),
    ])
    .await;
    assert!(
        message.contains("kid \"weak\"") && message.contains("16 bytes"),
        "{message}"
    );
    assert!(!message.contains("sixteen"), "{message}");

    let message = start_error(&[
        ("kid", "env".into()),
        ("alg", "HS256".into()),
        ("secret_env", "PEERGATE_TEST_UNSET_CARD_SECRET".into()),
    ])
    .await;
    assert!(
        message.contains("PEERGATE_TEST_UNSET_CARD_SECRET"),
        "{message}"
    );

    let key = generate(dir.path(), "EdDSA", "only-retiring");
    let message = start_error(&[
        ("kid", "only-retiring".into()),
        ("alg", "EdDSA".into()),
        ("private_key_file", key.into()),
        ("retiring_until", "2999-01-01".into()),
    ])
    .await;
    assert!(message.contains("at least one key must sign"), "{message}");
}
