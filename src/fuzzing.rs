//! Entry points shared by the `fuzz/` targets and the stable test that replays their corpora,
//! so both hold the code to the same properties.

use crate::protocol::jsonrpc::{self, Method};
use crate::token::{self, CredentialKind};
use std::net::IpAddr;

/// Feeds arbitrary bytes to the JSON-RPC envelope parser and checks what it promises: it
/// never panics, a refusal carries only an envelope-level code, and an accepted request names
/// a known method and, when the id was readable, echoes it with its JSON type.
pub fn jsonrpc_envelope(data: &[u8]) {
    match jsonrpc::parse_request(data) {
        Ok(request) => {
            assert!(matches!(
                request.method,
                Method::SendMessage
                    | Method::SendStreamingMessage
                    | Method::GetTask
                    | Method::ListTasks
                    | Method::CancelTask
                    | Method::SubscribeToTask
                    | Method::CreatePushConfig
                    | Method::GetPushConfig
                    | Method::ListPushConfigs
                    | Method::DeletePushConfig
                    | Method::GetExtendedAgentCard
            ));
            let id = request.id.to_json();
            assert!(id.is_null() || id.is_string() || id.is_i64());
            // Params that parsed as raw JSON must parse again as JSON.
            if let Some(params) = &request.params {
                assert!(serde_json::from_str::<serde_json::Value>(params.get()).is_ok());
            }
            let null = serde_json::value::RawValue::from_string("null".to_owned()).unwrap();
            let response: serde_json::Value =
                serde_json::from_str(&jsonrpc::success(&request.id, &null)).unwrap();
            assert_eq!(response["id"], id);
        }
        Err(failure) => {
            assert!(matches!(failure.error.code(), -32700 | -32600 | -32601));
            let response: serde_json::Value =
                serde_json::from_str(&jsonrpc::failure(&failure.id, &failure.error)).unwrap();
            assert_eq!(response["jsonrpc"], "2.0");
        }
    }
}

/// The card verifier on arbitrary text, with one Ed25519 and one HS256 key trusted: never
/// panics, and accepts only cards that parse strictly and name a trusted `kid`.
pub fn card_verifier(data: &[u8]) {
    use std::sync::OnceLock;
    static KEYS: OnceLock<crate::jose::verify::TrustedKeys> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let mut keys = crate::jose::verify::TrustedKeys::new();
        let ed = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
        let x = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ed.verifying_key().as_bytes(),
        );
        let jwks =
            format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"ed-1","x":"{x}"}}]}}"#);
        keys.add_jwks(&jwks).expect("fixed JWKS");
        keys.add_secret_arg("hs-1=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
            .expect("fixed secret");
        keys
    });
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(verified) = crate::jose::verify::verify_card(text, keys) {
        assert!(crate::jose::verify::parse_strict(text).is_ok());
        assert!(verified.kid == "ed-1" || verified.kid == "hs-1");
    }
}

/// RFC 8785 canonicalization of the card payload is idempotent: canonicalizing the canonical
/// form again changes nothing.
pub fn jcs(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(value) = crate::jose::verify::parse_strict(text) else {
        return;
    };
    let Ok(canonical) = crate::jose::sign::canonical_payload(&value) else {
        return;
    };
    let again: serde_json::Value = serde_json::from_str(&canonical).expect("JCS output is JSON");
    assert_eq!(
        crate::jose::sign::canonical_payload(&again).expect("canonical again"),
        canonical
    );
}

/// Token parsing never panics, and a token that parses is rebuilt exactly from its parts.
pub fn token_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for kind in [CredentialKind::PeerToken, CredentialKind::ApiKey] {
        if let Ok(parsed) = token::parse(kind, text) {
            assert_eq!(
                token::assemble(kind, parsed.token_id, parsed.secret()),
                text
            );
        }
    }
}

/// The client address from arbitrary `X-Forwarded-For` bytes, from a trusted proxy: always the
/// socket's address or one of the header's own hops, never anything else.
pub fn forwarded_for(data: &[u8]) {
    use axum::http::{HeaderMap, HeaderValue};
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert("x-forwarded-for", value);
    let socket: IpAddr = "10.0.0.1".parse().expect("literal");
    let trusted = ["10.0.0.0/8".parse().expect("literal")];
    let client = crate::layers::client_addr::resolve(socket, &headers, &trusted);
    let text = String::from_utf8_lossy(data);
    let hops: Vec<IpAddr> = text
        .split(',')
        .filter_map(|h| h.trim().parse().ok())
        .collect();
    assert!(client == socket || hops.contains(&client));
}

/// Basic credentials: never panics; what parses splits at the first colon of valid UTF-8.
pub fn basic_header(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((name, password)) = crate::layers::auth::parse_basic(text) {
        assert!(!name.contains(':'));
        let _ = password;
    }
}
