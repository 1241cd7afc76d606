//! The agent behind the door knows who asks: with `backend = "a2a"`, every request peergate
//! sends it carries an assertion peergate signs (a typed, short-lived JWT with a unique id,
//! its audience the agent's URL), which the official Python SDK agent verifies offline with
//! PyJWT against peergate's JWKS — and refuses when replayed, expired or meant for another
//! audience.

use crate::common::*;
use serde_json::{Value, json};

/// What the agent verified and refused so far.
async fn callers(agent: &UpstreamAgent) -> Value {
    let url = format!("{}/callers", agent.url);
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// A JSON-RPC request sent to the agent directly, as peergate would, with `assertion`.
async fn post_to_agent(agent: &UpstreamAgent, assertion: &str) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}});
    let response = reqwest::Client::new()
        .post(format!("{}/", agent.url))
        .bearer_auth(UPSTREAM_TOKEN)
        .header("a2a-version", "1.0")
        .header("x-peergate-caller", assertion)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// `claims` signed with the gateway's caller key in `data` (PyJWT, as anyone holding the key
/// could), under `kid`.
fn signed_with_gateway_key(data: &std::path::Path, kid: &str, claims: &Value) -> String {
    let key = data.join("caller-assertion-ed25519.pem");
    // The PEM's DER is PKCS#8 v2 (with the public key), which `cryptography` does not read:
    // the seed is taken from its fixed place.
    let script = "import base64, jwt, json, sys\n\
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey\n\
        pem = open(sys.argv[1]).read().split('-----')[2]\n\
        key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(pem)[16:48])\n\
        print(jwt.encode(json.loads(sys.argv[3]), key, algorithm='EdDSA',\n\
              headers={'kid': sys.argv[2], 'typ': 'peergate-caller+jwt'}))";
    let output = std::process::Command::new(python_with_sdk())
        .args([
            "-c",
            script,
            key.to_str().unwrap(),
            kid,
            &claims.to_string(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn the_agent_verifies_who_calls_and_refuses_a_replayed_expired_or_misaddressed_assertion() {
    let dir = tempfile::tempdir().unwrap();
    let jwks_file = dir.path().join("peergate.jwks.json");
    std::fs::write(&jwks_file, r#"{"keys": []}"#).unwrap();
    let agent = UpstreamAgent::start_verifying_callers(&jwks_file);
    let env = [(UPSTREAM_TOKEN_ENV, UPSTREAM_TOKEN)];
    let policy = agent.policy().set("capabilities.cancel_running", true);
    let served = ServedPolicy::start(&policy, &["alice"], &env);
    // The agent holds peergate's key set, as an operator would give it (or fetch it).
    let jwks_url = format!("http://{}/.well-known/jwks.json", served.server.addr);
    let jwks: Value = reqwest::get(jwks_url).await.unwrap().json().await.unwrap();
    std::fs::write(&jwks_file, jwks.to_string()).unwrap();
    let kid = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|key| key["kid"].as_str())
        .find(|kid| kid.starts_with("caller-"))
        .expect("the assertion key is published under a kid of its own")
        .to_owned();

    let answer = send_text(&served.server.door(), &served.tokens[0], "hi", None).await;
    assert_eq!(
        task_of(&answer)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{answer}"
    );
    let seen = callers(&agent).await;
    assert_eq!(seen["refused"], json!([]), "{seen}");
    let verified = &seen["verified"][0];
    let claims = &verified["claims"];
    assert_eq!(claims["peer"]["name"], "alice", "{claims}");
    assert!(
        claims["sub"].as_str().unwrap().starts_with("peer_"),
        "{claims}"
    );
    assert_eq!(claims["peer"]["id"], claims["sub"]);
    // Its owner, by the administrator's stable id.
    assert!(
        claims["peer"]["owner"]
            .as_str()
            .unwrap()
            .starts_with("adm_"),
        "{claims}"
    );
    assert_eq!(claims["auth"]["scheme"], "bearer");
    assert_eq!(claims["aud"], format!("{}/", agent.url));
    assert_eq!(claims["iss"], format!("http://{}", served.server.addr));
    assert!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap() <= 60);
    assert!(claims["scope"].as_str().unwrap().contains("a2a:message"));
    // The partner's own credential never reaches the agent.
    assert!(!verified.to_string().contains(&served.tokens[0]));

    // A task the agent left waiting for input, canceled by the peer: the agent is told who
    // cancels too, in an assertion of its own.
    let waiting = send_text(&served.server.door(), &served.tokens[0], "input", None).await;
    let task = task_of(&waiting);
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{waiting}"
    );
    let cancel =
        json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": task["id"]}});
    let canceled = rpc(&served.server.door(), &served.tokens[0], cancel).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let seen = callers(&agent).await;
    assert_eq!(seen["refused"], json!([]), "{seen}");
    assert_eq!(seen["verified"].as_array().unwrap().len(), 3, "{seen}");

    // The same assertion again: refused, nothing runs.
    let token = verified["token"].as_str().unwrap();
    let (status, text) = post_to_agent(&agent, token).await;
    assert_eq!((status, text.contains("replayed")), (401, true), "{text}");
    // Signed with the right key but for another audience, or expired: refused.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut elsewhere = claims.clone();
    elsewhere["aud"] = json!("https://another-agent.example/");
    elsewhere["jti"] = json!("elsewhere-1");
    let mut expired = claims.clone();
    (expired["iat"], expired["nbf"], expired["exp"]) =
        (json!(now - 120), json!(now - 120), json!(now - 60));
    expired["jti"] = json!("expired-1");
    for (claims, why) in [(elsewhere, "audience"), (expired, "expired")] {
        let forged = signed_with_gateway_key(&served.data, &kid, &claims);
        let (status, text) = post_to_agent(&agent, &forged).await;
        assert_eq!((status, text.contains(why)), (401, true), "{why}: {text}");
    }
}

#[tokio::test]
async fn named_caller_keys_are_published_and_rotated_and_a_shared_secret_or_a_card_kid_is_refused()
{
    use peergate::config::{Policy, PolicySource};
    let dir = tempfile::tempdir().unwrap();
    let key = |alg: &str, kid: &str| generated_key(dir.path(), alg, kid);
    let (now, old) = (key("ES256", "who-2026"), key("EdDSA", "who-2025"));
    let caller_key = |kid: &str, alg: &str, file: &str| -> Vec<(&'static str, toml_edit::Value)> {
        vec![
            ("kid", kid.into()),
            ("alg", alg.into()),
            ("private_key_file", file.into()),
        ]
    };
    let mut retiring = caller_key("who-2025", "EdDSA", &old);
    retiring.push(("retiring_until", "2999-01-01".into()));
    let policy = UpstreamAgent::policy_at("http://127.0.0.1:9")
        .push_table(
            "signing.caller_keys",
            &caller_key("who-2026", "ES256", &now),
        )
        .push_table("signing.caller_keys", &retiring);
    let data = tempfile::tempdir().unwrap();
    let keys = policy
        .policy()
        .signing
        .load_caller_keys(data.path())
        .unwrap();
    // The one without a retirement signs; both are published, the retiring one until its day.
    assert_eq!(keys.signing.len(), 1);
    assert_eq!(keys.signing[0].kid(), "who-2026");
    let published: Vec<&str> = keys
        .published
        .iter()
        .map(|key| key.jwk["kid"].as_str().unwrap())
        .collect();
    assert_eq!(published, ["who-2026", "who-2025"]);

    // A shared secret cannot sign what an agent verifies offline; a kid the card's keys use
    // would name two keys in one JWKS. Both stop start-up naming the setting.
    let secret_file = dir.path().join("hs.secret");
    std::fs::write(&secret_file, "A".repeat(43)).unwrap();
    let shared = PolicyEdit::default().push_table(
        "signing.caller_keys",
        &[
            ("kid", "who-hs".into()),
            ("alg", "HS256".into()),
            ("secret_file", secret_file.to_str().unwrap().into()),
        ],
    );
    let card_kid = PolicyEdit::default()
        .push_table("signing.keys", &caller_key("same", "ES256", &now))
        .push_table("signing.caller_keys", &caller_key("same", "ES256", &now));
    for (edit, why) in [(shared, "EdDSA or ES256"), (card_kid, "also a card key")] {
        let refused = Policy::parse(&edit.text(), &PolicySource::Embedded).unwrap_err();
        let refused = refused.to_string();
        assert!(
            refused.contains("signing.caller_keys") && refused.contains(why),
            "{refused}"
        );
    }
}
