use super::*;
use crate::clock::from_millis;

fn key(seed: u8) -> CardSigningKey {
    CardSigningKey::ed25519(
        format!("r{seed}"),
        ed25519_dalek::SigningKey::from_bytes(&[seed; 32]),
    )
}

fn trusted(keys: &[&CardSigningKey]) -> TrustedKeys {
    let jwks = json!({"keys": keys.iter().filter_map(|k| k.public_jwk()).collect::<Vec<_>>()});
    let mut trusted = TrustedKeys::new();
    trusted.add_jwks(&jwks.to_string()).unwrap();
    trusted
}

fn statement() -> Statement {
    Statement {
        binding: "JSONRPC".into(),
        method: "SendMessage".into(),
        task: "t1".into(),
        context: "c1".into(),
        message: "m1".into(),
        state: "TASK_STATE_COMPLETED",
        received: from_millis(1_795_996_800_000),
        answered: from_millis(1_795_996_800_250),
        credential: json!({"scheme": "bearer", "id": "tok_1"}),
        card: "card-digest".into(),
        request: "req-digest".into(),
        answer: "ans-digest".into(),
        events: None,
        upstream: None,
    }
}

fn expected(now: Timestamp) -> Expected<'static> {
    Expected {
        issuer: "https://gw.example",
        audience: Some("peer_1"),
        now,
    }
}

#[test]
fn a_receipt_verifies_and_states_what_it_was_given() {
    let signer = ReceiptSigner::new(key(1), "https://gw.example".into()).unwrap();
    let now = from_millis(1_795_996_801_000);
    let receipt = signer.sign("peer_1", &statement(), now);
    let claims = verify(&receipt, &trusted(&[&key(1)]), expected(now)).unwrap();
    assert_eq!(claims["aud"], "peer_1");
    assert_eq!(claims["a2a"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(claims["a2a"]["received"], "2026-11-30T00:00:00.000Z");
    assert_eq!(claims["dig"]["ans"], "ans-digest");
    assert_eq!(claims["cred"]["id"], "tok_1");
    // Two receipts of the same statement differ in their id.
    let again = signer.sign("peer_1", &statement(), now);
    let other = verify(&again, &trusted(&[&key(1)]), expected(now)).unwrap();
    assert_ne!(claims["jti"], other["jti"]);
}

#[test]
fn every_check_refuses_what_it_is_for() {
    let signer = ReceiptSigner::new(key(1), "https://gw.example".into()).unwrap();
    let now = from_millis(1_795_996_801_000);
    let receipt = signer.sign("peer_1", &statement(), now);
    let keys = trusted(&[&key(1)]);
    // Another peer's receipt, another gateway's, one from the future.
    let mut for_other = expected(now);
    for_other.audience = Some("peer_2");
    assert!(matches!(
        verify(&receipt, &keys, for_other),
        Err(ReceiptError::Claim { claim: "aud", .. })
    ));
    let mut elsewhere = expected(now);
    elsewhere.issuer = "https://other.example";
    assert!(matches!(
        verify(&receipt, &keys, elsewhere),
        Err(ReceiptError::Claim { claim: "iss", .. })
    ));
    let early = from_millis(1_795_996_801_000 - (SKEW_SECONDS + 5) * 1000);
    assert!(matches!(
        verify(&receipt, &keys, expected(early)),
        Err(ReceiptError::Claim { claim: "iat", .. })
    ));
    // A key nobody trusts, and a changed claim.
    assert_eq!(
        verify(&receipt, &trusted(&[&key(2)]), expected(now)),
        Err(ReceiptError::UnknownKey("r1".into()))
    );
    let mut parts: Vec<&str> = receipt.split('.').collect();
    let claims: Value = json_part(parts[1]).unwrap();
    let mut changed = claims.clone();
    changed["dig"]["ans"] = json!("another answer");
    let forged = b64url(changed.to_string().as_bytes());
    parts[1] = &forged;
    assert_eq!(
        verify(&parts.join("."), &keys, expected(now)),
        Err(ReceiptError::BadSignature)
    );
}

#[test]
fn only_a_receipt_typed_as_one_passes_and_never_under_a_shared_secret() {
    let now = from_millis(1_795_996_801_000);
    let keys = trusted(&[&key(1)]);
    // Signed by the same key, typed as something else: a card signature, a caller's assertion.
    for typ in ["JOSE", "peergate-caller+jwt", "at+jwt"] {
        let header = json!({"alg": "EdDSA", "kid": "r1", "typ": typ});
        let claims = json!({"iss": "https://gw.example", "aud": "peer_1", "iat": 1});
        let other = key(1).sign_compact(&header, &claims);
        assert_eq!(
            verify(&other, &keys, expected(now)),
            Err(ReceiptError::WrongType(typ.into()))
        );
    }
    let secret = CardSigningKey::hs256("h1", vec![7; 32]);
    assert_eq!(
        ReceiptSigner::new(secret.clone(), "https://gw.example".into()).unwrap_err(),
        ReceiptError::SharedSecret
    );
    // An HS256 receipt under a trusted secret is still refused: the verifier holds the key.
    let mut with_secret = TrustedKeys::new();
    with_secret
        .add_secret_arg(&format!("h1={}", b64url(&[7; 32])))
        .unwrap();
    let header = json!({"alg": "HS256", "kid": "h1", "typ": TYP});
    let claims = json!({"iss": "https://gw.example", "aud": "peer_1", "iat": 1});
    let forged = secret.sign_compact(&header, &claims);
    assert_eq!(
        verify(&forged, &with_secret, expected(now)),
        Err(ReceiptError::WrongAlgorithm("HS256".into()))
    );
}

#[test]
fn the_answer_is_digested_without_its_history_and_its_receipt() {
    let task = json!({
        "id": "t1",
        "contextId": "c1",
        "status": {"state": "TASK_STATE_COMPLETED"},
        "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}],
        "metadata": {EXTENSION: "a.b.c"},
    });
    let bare = json!({"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED"}});
    assert_eq!(answer_projection(&task), bare);
    assert_eq!(
        digest(&answer_projection(&task)).unwrap(),
        digest(&bare).unwrap()
    );
    // Member order does not matter (RFC 8785); any other metadata does.
    let reordered: Value = serde_json::from_str(
        r#"{"status":{"state":"TASK_STATE_COMPLETED"},"contextId":"c1","id":"t1"}"#,
    )
    .unwrap();
    assert_eq!(digest(&reordered).unwrap(), digest(&bare).unwrap());
    let mut kept = task.clone();
    kept["metadata"]["note"] = json!(1);
    assert_ne!(
        digest(&answer_projection(&kept)).unwrap(),
        digest(&bare).unwrap()
    );
}
