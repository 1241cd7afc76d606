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

/// A client certificate's DER, or a proxy's forwarded-certificate header holding it: never
/// panics, and what is read holds what the guard relies on (the fingerprint is the DER's, the
/// names are printable ASCII, unreadable names mean no names and no `clientAuth`).
pub fn certificate_der(data: &[u8]) {
    use crate::guard::certificate::{ClientCertificate, crl_next_update, validity};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let read = if mode % 2 == 0 {
        let _ = crl_next_update(rest);
        let _ = validity(rest);
        let read = ClientCertificate::from_der(rest);
        assert_eq!(read.sha256, <[u8; 32]>::from(sha2::Sha256::digest(rest)));
        read
    } else {
        use axum::http::{HeaderMap, HeaderName, HeaderValue};
        let Ok(value) = HeaderValue::from_bytes(rest) else {
            return;
        };
        let header = HeaderName::from_static("x-client-cert");
        let mut headers = HeaderMap::new();
        headers.insert(header.clone(), value);
        let Some(read) = crate::layers::client_addr::forwarded_certificate(&headers, &header)
        else {
            return;
        };
        read
    };
    let hex: String = read.sha256.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(read.sha256_hex, hex);
    let x5t = base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        read.x5t_s256(),
    )
    .expect("x5t#S256 is base64url");
    assert_eq!(x5t, read.sha256);
    for name in read.uris.iter().chain(&read.dns_names) {
        assert!(name.bytes().all(|b| (0x21..=0x7E).contains(&b)), "{name:?}");
    }
    if read.names_unusable {
        assert!(read.uris.is_empty() && read.dns_names.is_empty() && !read.client_auth);
    }
}

use sha2::Digest as _;

/// Two issuers' keys for [`access_token`], one `kid` each, the same `kid`: a lookup across
/// issuers would show.
struct Issuers {
    keys: [crate::jose::verify::TrustedKeys; 2],
    signers: [ed25519_dalek::SigningKey; 2],
}

fn issuers() -> &'static Issuers {
    use std::sync::OnceLock;
    static ISSUERS: OnceLock<Issuers> = OnceLock::new();
    ISSUERS.get_or_init(|| {
        let signers = [
            ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]),
            ed25519_dalek::SigningKey::from_bytes(&[11u8; 32]),
        ];
        let keys = signers.clone().map(|signer| {
            let x = b64url(signer.verifying_key().as_bytes());
            let jwks = serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": x}]});
            let mut keys = crate::jose::verify::TrustedKeys::new();
            keys.add_issuer_jwks(&jwks.to_string()).expect("a good key");
            keys
        });
        Issuers { keys, signers }
    })
}

fn b64url(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
}

/// The rules of issuer `i` (0: `https://a.example`, 1: `https://b.example`).
fn issuer_rules(i: usize, plain_jwt: bool) -> crate::jose::access_token::AccessTokenRules {
    crate::jose::access_token::AccessTokenRules {
        issuer: ["https://a.example", "https://b.example"][i].to_owned(),
        audience: "https://gw.example/a2a/v1".to_owned(),
        algorithms: vec!["EdDSA".to_owned()],
        plain_jwt,
        skew: std::time::Duration::from_secs(60),
        max_lifetime: std::time::Duration::from_secs(24 * 3600),
        client_id_required: false,
        claims: Vec::new(),
    }
}

/// An access token: raw text, or (first byte's low bit) header and claims JSON given as bytes
/// (split at the first `0xFF`) that the target signs with issuer A's or B's key, its signature
/// flipped or not. Read in the layer's order: never panics, a wrong key or a changed signature
/// is never taken, and a token taken holds what the door relies on.
pub fn access_token(data: &[u8]) {
    use crate::jose::access_token::{check_claims, parse, peek_issuer, verify};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (signer, flipped) = (usize::from(mode & 2 != 0), mode & 8 != 0);
    let token = if mode & 1 == 1 {
        let (header, claims) = match rest.iter().position(|b| *b == 0xFF) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &b""[..]),
        };
        let input = format!("{}.{}", b64url(header), b64url(claims));
        let mut signature =
            ed25519_dalek::Signer::sign(&issuers().signers[signer], input.as_bytes()).to_bytes();
        if flipped {
            signature[0] ^= 1;
        }
        format!("{input}.{}", b64url(&signature))
    } else {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        text.to_owned()
    };
    let Ok(first) = parse(&token, true) else {
        return;
    };
    let Some(i) = peek_issuer(&first).ok().and_then(|iss| {
        ["https://a.example", "https://b.example"]
            .iter()
            .position(|known| *known == iss)
    }) else {
        return;
    };
    let rules = issuer_rules(i, mode & 4 != 0);
    let Ok(parsed) = parse(&token, rules.plain_jwt) else {
        return;
    };
    let now = crate::clock::from_millis(1_800_000_000_000);
    let claims_hold = check_claims(&parsed, &rules, now).is_ok();
    let Ok(taken) = verify(&parsed, &issuers().keys[i], &rules, now) else {
        return;
    };
    assert!(
        mode & 1 == 0 || (signer == i && !flipped),
        "taken with another key's signature"
    );
    assert!(claims_hold, "taken although its claims do not hold");
    assert!(!taken.subject.is_empty());
    assert!(
        taken
            .scopes
            .iter()
            .all(|s| !s.is_empty() && !s.contains(' '))
    );
    assert!(now < crate::clock::later(taken.expires_at, rules.skew));
}

/// A gRPC request message for one of the A2A operations (the first byte chooses it): never
/// panics, refusals are the caller's (never an internal error), and the turn's request reads
/// alike through its generated type and through reflection.
pub fn grpc_request(data: &[u8]) {
    const METHODS: [Method; 10] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::CreatePushConfig,
        Method::GetPushConfig,
        Method::ListPushConfigs,
        Method::DeletePushConfig,
    ];
    let Some((&which, message)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(which) % METHODS.len()];
    let read = crate::http::grpc::read_request(method, message);
    if let Err(error) = &read {
        assert!(
            !matches!(error, crate::protocol::error::A2aError::Internal { .. }),
            "{error:?}"
        );
    }
    if method == Method::SendMessage {
        let reflected = crate::http::grpc::read_send_message_reflected(message);
        assert_eq!(
            read.is_ok(),
            reflected.is_ok(),
            "generated {read:?}, reflected {reflected:?}"
        );
    }
}

/// An HTTP+JSON request (the first byte chooses the route: a message's body, a push config's
/// body, ListTasks' or GetTask's query): never panics, and a message's body is taken exactly
/// when the same JSON as JSON-RPC `params` is.
pub fn rest_request(data: &[u8]) {
    use crate::a2a::operation::A2aRequest;
    use crate::http::rest::{body_params, query_params, request};
    use crate::protocol::jsonrpc::Method;
    let Some((&route, rest)) = data.split_first() else {
        return;
    };
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    match route % 4 {
        0 => {
            let by_rest = body_params(&headers, rest)
                .and_then(|params| request(Method::SendMessage, params))
                .is_ok();
            let mut envelope =
                br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":"#.to_vec();
            envelope.extend_from_slice(rest);
            envelope.push(b'}');
            let by_rpc = jsonrpc::parse_request(&envelope)
                .ok()
                .and_then(|asked| {
                    A2aRequest::read(Method::SendMessage, asked.params.as_deref()).ok()
                })
                .is_some();
            assert_eq!(
                by_rest, by_rpc,
                "HTTP+JSON and JSON-RPC read one body apart"
            );
        }
        1 => {
            let _ = body_params(&headers, rest)
                .and_then(|params| request(Method::CreatePushConfig, params));
        }
        route => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let Ok(uri) = format!("http://door.example/?{text}").parse::<axum::http::Uri>() else {
                return;
            };
            let Ok(query) = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
            else {
                return;
            };
            let params = query_params(&query.0);
            if route == 2 {
                let _ = params.and_then(|params| request(Method::ListTasks, params));
            } else {
                let _ = params.and_then(|mut params| {
                    params["id"] = serde_json::json!("t-1");
                    request(Method::GetTask, params)
                });
            }
        }
    }
}

/// A policy file's text: never panics, and a policy that parses writes an effective text that
/// parses back to itself.
pub fn policy(data: &[u8]) {
    use crate::config::{Policy, PolicySource};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse(text, &PolicySource::Embedded) else {
        return;
    };
    let effective = policy.effective_text();
    let again =
        Policy::parse(&effective, &PolicySource::Embedded).expect("the effective text parses");
    assert_eq!(again.effective_text(), effective);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The access-token target's keys and rules take a token signed as its seeds are, so the
    /// fuzzer starts from tokens that reach the claims' checks.
    #[test]
    fn a_token_signed_as_the_seeds_are_is_taken() {
        use crate::jose::access_token::{parse, verify};
        let header = br#"{"alg":"EdDSA","typ":"at+jwt","kid":"k1"}"#;
        let claims = br#"{"iss":"https://a.example","aud":"https://gw.example/a2a/v1","exp":1800000300,"iat":1800000000,"sub":"svc"}"#;
        let input = format!("{}.{}", b64url(header), b64url(claims));
        let signature = ed25519_dalek::Signer::sign(&issuers().signers[0], input.as_bytes());
        let token = format!("{input}.{}", b64url(&signature.to_bytes()));
        let parsed = parse(&token, false).unwrap();
        let now = crate::clock::from_millis(1_800_000_000_000);
        let taken = verify(&parsed, &issuers().keys[0], &issuer_rules(0, false), now).unwrap();
        assert_eq!(taken.subject, "svc");
        assert!(verify(&parsed, &issuers().keys[1], &issuer_rules(0, false), now).is_err());
    }
}
