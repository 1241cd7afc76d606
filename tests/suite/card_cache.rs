//! The Agent Card's HTTP caching over real HTTP: ETag, Last-Modified across restarts,
//! Cache-Control, and 304 answers to If-None-Match and If-Modified-Since.

use crate::common::*;
use peergate::app::{RunningGateway, start};
use peergate::clock::ManualClock;
use peergate::config::Policy;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

async fn start_on(policy: Policy, data: &Path, clock: &ManualClock) -> RunningGateway {
    start(gateway_options(policy, data, Arc::new(clock.clone())))
        .await
        .unwrap()
}

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn conditional_requests_get_304_without_a_body() {
    let gw = TestGateway::start().await;
    let url = gw.url("/.well-known/agent-card.json");
    let first = get(&url, &[]).await;
    assert_eq!(first.status(), 200);
    let etag = header(&first, "etag");
    let last_modified = header(&first, "last-modified");
    assert_eq!(header(&first, "cache-control"), "public, max-age=60");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "{etag}"
    );
    assert!(last_modified.ends_with(" GMT"), "{last_modified}");
    let body = first.bytes().await.unwrap();
    assert_eq!(
        peergate::http::document::etag_for(&body),
        etag,
        "the tag is over the exact bytes"
    );
    // The other path serves the same document.
    let other = get(&gw.url("/.well-known/agent.json"), &[]).await;
    assert_eq!(header(&other, "etag"), etag);

    let weak = format!("W/{etag}");
    let list = format!("\"something-else\", {etag}");
    for value in [etag.as_str(), weak.as_str(), list.as_str(), "*"] {
        let response = get(&url, &[("if-none-match", value)]).await;
        assert_eq!(response.status(), 304, "{value}");
        assert_eq!(header(&response, "etag"), etag);
        assert_eq!(header(&response, "cache-control"), "public, max-age=60");
        assert!(response.bytes().await.unwrap().is_empty());
    }
    let response = get(&url, &[("if-none-match", "\"stale\"")]).await;
    assert_eq!(response.status(), 200);

    let response = get(&url, &[("if-modified-since", &last_modified)]).await;
    assert_eq!(response.status(), 304);
    let response = get(
        &url,
        &[("if-modified-since", "Sat, 01 Jan 2000 00:00:00 GMT")],
    )
    .await;
    assert_eq!(response.status(), 200);
    // A non-matching If-None-Match wins over a matching If-Modified-Since.
    let response = get(
        &url,
        &[
            ("if-none-match", "\"stale\""),
            ("if-modified-since", &last_modified),
        ],
    )
    .await;
    assert_eq!(response.status(), 200);
    gw.stop().await;
}

#[tokio::test]
async fn last_modified_survives_a_restart_and_moves_only_when_the_card_changes() {
    let data = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(peergate::clock::from_millis(1_800_000_000_000));
    // A fixed public URL: with port 0 the listen address, and so the card, would change.
    let fixed =
        || PolicyEdit::default().insert("server.public_base_url", "https://gateway.example.com");
    let policy = || fixed().policy();
    let gw = start_on(policy(), data.path(), &clock).await;
    let url = format!("http://{}/.well-known/agent-card.json", gw.local_addr);
    let first = get(&url, &[]).await;
    let (etag, modified) = (header(&first, "etag"), header(&first, "last-modified"));
    assert_eq!(modified, "Fri, 15 Jan 2027 08:00:00 GMT");
    gw.shutdown().await;

    clock.advance(Duration::from_secs(3600));
    let gw = start_on(policy(), data.path(), &clock).await;
    let url = format!("http://{}/.well-known/agent-card.json", gw.local_addr);
    let again = get(&url, &[]).await;
    assert_eq!(header(&again, "etag"), etag);
    assert_eq!(
        header(&again, "last-modified"),
        modified,
        "same card, same date"
    );
    gw.shutdown().await;

    clock.advance(Duration::from_secs(3600));
    let changed = fixed().set("card.version", "0.2.0").policy();
    let gw = start_on(changed, data.path(), &clock).await;
    let url = format!("http://{}/.well-known/agent-card.json", gw.local_addr);
    let moved = get(&url, &[]).await;
    assert_ne!(header(&moved, "etag"), etag);
    assert_eq!(
        header(&moved, "last-modified"),
        "Fri, 15 Jan 2027 10:00:00 GMT"
    );
    // A client holding the old tag gets the new card.
    let response = get(&url, &[("if-none-match", &etag)]).await;
    assert_eq!(response.status(), 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn authenticated_peers_get_the_extended_card_and_bad_credentials_a_401() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let url = gw.url("/.well-known/agent-card.json");
    let public = get(&url, &[]).await;
    assert_eq!(header(&public, "vary"), "Authorization");
    assert_eq!(header(&public, "cache-control"), "public, max-age=60");
    let public_etag = header(&public, "etag");
    let public: serde_json::Value = public.json().await.unwrap();
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    assert!(
        public["skills"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["id"] != "ask")
    );

    let auth = format!("Bearer {token}");
    let extended = get(&url, &[("authorization", &auth)]).await;
    assert_eq!(extended.status(), 200);
    assert_eq!(header(&extended, "cache-control"), "private, max-age=60");
    assert_eq!(header(&extended, "vary"), "Authorization");
    let extended_etag = header(&extended, "etag");
    assert_ne!(extended_etag, public_etag);
    let extended: serde_json::Value = extended.json().await.unwrap();
    let ask = extended["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "ask")
        .expect("the ask skill")
        .clone();
    let version = format!("peergate-{}", env!("CARGO_PKG_VERSION"));
    assert!(
        ask["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == version.as_str()),
        "{ask}"
    );
    assert!(extended["signatures"][0]["signature"].is_string());
    // Conditional requests work on the extended card too.
    let again = get(
        &url,
        &[("authorization", &auth), ("if-none-match", &extended_etag)],
    )
    .await;
    assert_eq!(again.status(), 304);
    // The same document through JSON-RPC.
    let response = rpc(
        &gw.door,
        &token,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}),
    )
    .await;
    assert_eq!(response["result"], extended);

    // A bad credential is refused, never downgraded to the public card.
    let bad = get(&url, &[("authorization", "Bearer pgt_not_a_real_token")]).await;
    assert_eq!(bad.status(), 401);
    assert!(header(&bad, "www-authenticate").starts_with("Bearer"));
    let revoked_token = gw.add_peer("bob");
    gw.revoke_through_server("bob").await;
    let revoked = get(
        &url,
        &[("authorization", &format!("Bearer {revoked_token}"))],
    )
    .await;
    assert_eq!(revoked.status(), 401);
    gw.stop().await;
}

#[tokio::test]
async fn the_jwks_answers_conditional_requests_too() {
    let gw = TestGateway::start().await;
    let url = gw.url("/.well-known/jwks.json");
    let first = get(&url, &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "cache-control"), "public, max-age=300");
    let etag = header(&first, "etag");
    let again = get(&url, &[("if-none-match", &etag)]).await;
    assert_eq!(again.status(), 304);
    assert!(again.bytes().await.unwrap().is_empty());
    gw.stop().await;
}

#[tokio::test]
async fn the_card_varies_on_the_api_key_header_when_keys_are_enabled() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("auth.schemes", ["bearer", "api_key"])
            .policy(),
    )
    .await;
    let response = get(&gw.url("/.well-known/agent-card.json"), &[]).await;
    assert_eq!(header(&response, "vary"), "Authorization, X-API-Key");
    gw.stop().await;
}

#[tokio::test]
async fn a_card_that_would_hold_empty_values_stops_start_up() {
    let data = tempfile::tempdir().unwrap();
    let policy = PolicyEdit::default()
        .set("card.skills.0.tags", [""])
        .policy();
    let clock = ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH);
    let result = start(gateway_options(policy, data.path(), Arc::new(clock))).await;
    let message = result.err().expect("start-up must fail").to_string();
    assert!(message.contains("empty value"), "{message}");
}
