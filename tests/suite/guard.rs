//! The guard layers over real HTTP: client address, per-IP limit, the three authentication
//! schemes, the failed-attempt budget and the per-peer limit. Time moves by a manual clock.

use crate::common::*;
use base64::Engine as _;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn probe() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string()
}

/// POSTs the probe with the given headers; returns (status, headers, body).
async fn call(url: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap, Value) {
    let mut request = reqwest::Client::new().post(url).body(probe());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get_card(gw: &TestGateway, xff: Option<&str>) -> (u16, HeaderMap, Value) {
    let mut request = reqwest::Client::new().get(gw.url("/.well-known/agent-card.json"));
    if let Some(xff) = xff {
        request = request.header("x-forwarded-for", xff);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn basic(name: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
    format!("Basic {encoded}")
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
}

fn assert_limited(status: u16, headers: &HeaderMap, body: &Value, limit: &str, retry_after: u64) {
    assert_eq!(status, 429, "{body}");
    assert_eq!(header(headers, "retry-after"), retry_after.to_string());
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(body["error"]["limit"], limit);
    assert_eq!(body["error"]["retryAfterSeconds"], retry_after);
    assert!(header(headers, "ratelimit").starts_with(&format!("\"{limit}\";r=0;t={retry_after}")));
    assert!(header(headers, "ratelimit-policy").starts_with(&format!("\"{limit}\";q=")));
}

#[tokio::test]
async fn per_peer_limit_counts_exactly_and_retry_after_is_honest() {
    let gw = TestGateway::start().await;
    let (code, token, stderr) = gw.cli(&["peer", "add", "alice", "--rate", "3/min"]);
    assert_eq!(code, 0, "{stderr}");
    let auth = bearer(token.trim());
    for remaining in [2, 1, 0] {
        let (status, headers, _) = call(&gw.door, &[("authorization", &auth)]).await;
        assert_eq!(status, 200);
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            "\"per_peer\";q=3;w=60"
        );
        assert!(
            header(&headers, "ratelimit").starts_with(&format!("\"per_peer\";r={remaining};")),
            "{:?}",
            headers.get("ratelimit")
        );
    }
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 20);
    gw.clock.advance(Duration::from_secs(19));
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 1);
    gw.clock.advance(Duration::from_secs(1));
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 429);
    // Another peer has its own budget.
    let other = gw.add_peer("bob");
    assert_eq!(
        call(&gw.door, &[("authorization", &bearer(&other))])
            .await
            .0,
        200
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_new_quota_applies_without_a_restart() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .without_credential_cache()
            .set("limits.per_ip_per_minute", 1000)
            .policy(),
    )
    .await;
    let (_, token, _) = gw.cli(&["peer", "add", "alice", "--rate", "1/min"]);
    let auth = bearer(token.trim());
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 429);
    let (code, _, stderr) = gw.cli(&["peer", "limit", "alice", "120/min"]);
    assert_eq!(code, 0, "{stderr}");
    // The request already made still counts: 119 of the new 120 are left, at once.
    for i in 0..119 {
        let (status, _, body) = call(&gw.door, &[("authorization", &auth)]).await;
        assert_eq!(status, 200, "request {i}: {body}");
    }
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 1);
    gw.stop().await;
}

#[tokio::test]
async fn per_ip_limit_covers_card_and_door_and_ignores_spoofed_forwarding() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("limits.per_ip_per_minute", 4)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    assert_eq!(get_card(&gw, None).await.0, 200);
    assert_eq!(get_card(&gw, Some("203.0.113.1")).await.0, 200);
    assert_eq!(
        call(&gw.door, &[("authorization", &bearer(&token))])
            .await
            .0,
        200
    );
    assert_eq!(
        call(&gw.door, &[("x-forwarded-for", "203.0.113.2")])
            .await
            .0,
        401
    );
    // The fifth request from 127.0.0.1 is refused, whatever X-Forwarded-For claims.
    let (status, headers, body) = get_card(&gw, Some("198.51.100.7")).await;
    assert_limited(status, &headers, &body, "per_ip", 15);
    let (status, headers, body) = call(
        &gw.door,
        &[
            ("authorization", &bearer(&token)),
            ("x-forwarded-for", "192.0.2.99"),
        ],
    )
    .await;
    assert_limited(status, &headers, &body, "per_ip", 15);
    gw.clock.advance(Duration::from_secs(15));
    assert_eq!(get_card(&gw, None).await.0, 200);
    // /health is not limited.
    for _ in 0..10 {
        assert_eq!(reqwest::get(gw.url("/health")).await.unwrap().status(), 200);
    }
    gw.stop().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("limits.per_ip_per_minute", 2)
            .set("server.trusted_proxies", ["127.0.0.1/32", "10.0.0.0/8"])
            .policy(),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(get_card(&gw, Some("203.0.113.1")).await.0, 200);
    }
    assert_eq!(get_card(&gw, Some("203.0.113.1")).await.0, 429);
    // A chain through another trusted proxy: the right-most untrusted hop counts.
    assert_eq!(get_card(&gw, Some("203.0.113.1, 10.1.1.1")).await.0, 429);
    assert_eq!(
        get_card(&gw, Some("198.51.100.1, 203.0.113.2, 10.1.1.1"))
            .await
            .0,
        200
    );
    // IPv6 clients share a budget per /64.
    assert_eq!(get_card(&gw, Some("2001:db8:1:2::1")).await.0, 200);
    assert_eq!(get_card(&gw, Some("2001:db8:1:2::ffff")).await.0, 200);
    assert_eq!(get_card(&gw, Some("2001:db8:1:2:aaaa::1")).await.0, 429);
    assert_eq!(get_card(&gw, Some("2001:db8:1:3::1")).await.0, 200);
    // A malformed header falls back to the proxy's own address, which has its own budget.
    assert_eq!(get_card(&gw, Some("not an address")).await.0, 200);
    assert_eq!(get_card(&gw, None).await.0, 200);
    assert_eq!(get_card(&gw, Some("203.0.113.9, garbage")).await.0, 429);
    gw.stop().await;
}

fn all_schemes() -> PolicyEdit {
    PolicyEdit::default().set("auth.schemes", ["bearer", "basic", "api_key"])
}

#[tokio::test]
async fn challenges_and_card_list_every_enabled_scheme() {
    let gw = TestGateway::start_with(all_schemes().policy()).await;
    let (status, headers, body) = call(&gw.door, &[]).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "missing_credentials");
    let challenges: Vec<&str> = headers
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        challenges,
        [
            "Bearer realm=\"peergate\"",
            "Basic realm=\"peergate\", charset=\"UTF-8\"",
            "ApiKey realm=\"peergate\", header=\"X-API-Key\""
        ]
    );
    let (_, _, card) = get_card(&gw, None).await;
    assert_eq!(
        card["securitySchemes"]["bearerAuth"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securitySchemes"]["basicAuth"]["httpAuthSecurityScheme"]["scheme"],
        "Basic"
    );
    assert_eq!(
        card["securitySchemes"]["apiKeyAuth"]["apiKeySecurityScheme"],
        json!({"location": "header", "name": "X-API-Key", "description": "An API key issued by this gateway's administrator"})
    );
    assert_eq!(
        card["securityRequirements"],
        json!([
            {"schemes": {"bearerAuth": {}}},
            {"schemes": {"basicAuth": {}}},
            {"schemes": {"apiKeyAuth": {}}}
        ])
    );
    gw.stop().await;

    // The default enables Bearer alone.
    let gw = TestGateway::start().await;
    let (_, headers, _) = call(&gw.door, &[]).await;
    assert_eq!(headers.get_all("www-authenticate").iter().count(), 1);
    let (_, _, card) = get_card(&gw, None).await;
    assert_eq!(card["securitySchemes"].as_object().unwrap().len(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn basic_accepts_the_right_password_and_refuses_everything_else_with_401() {
    let gw = TestGateway::start_with(
        all_schemes()
            .set("limits.failed_auth_per_ip_per_minute", 100)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    let (code, _, stderr) = gw.cli_with_stdin(&["peer", "password", "alice"], "short\n");
    assert_ne!(code, 0);
    assert!(stderr.contains("too short"), "{stderr}");
    let (code, stdout, stderr) =
        gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty());
    let (code, _, stderr) =
        gw.cli_with_stdin(&["peer", "password", "nobody"], "a long enough password\n");
    assert_ne!(code, 0);
    assert!(stderr.contains("no peer named \"nobody\""), "{stderr}");

    let good = basic("alice", "a long enough password");
    let (status, _, body) = call(&gw.door, &[("authorization", &good)]).await;
    assert_eq!(status, 200, "{body}");
    let not_utf8 = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode([b'a', b':', 0xff, 0xfe])
    );
    let no_colon = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice")
    );
    let cases = [
        (
            basic("alice", "a long enough passworD"),
            "invalid_credentials",
        ),
        (
            basic("mallory", "a long enough password"),
            "invalid_credentials",
        ),
        (
            "Basic !!!not-base64!!!".to_owned(),
            "malformed_authorization",
        ),
        (no_colon, "malformed_authorization"),
        (not_utf8, "malformed_authorization"),
        ("Basic".to_owned(), "malformed_authorization"),
    ];
    for (value, code) in cases {
        let (status, _, body) = call(&gw.door, &[("authorization", &value)]).await;
        assert_eq!(status, 401, "{value}: {body}");
        assert_eq!(body["error"]["code"], code, "{value}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn failed_attempt_budget_stops_argon2_work_and_the_cache_keeps_it_off_the_hot_path() {
    let gw = TestGateway::start_with(
        all_schemes()
            .set("limits.failed_auth_per_ip_per_minute", 3)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
    let good = basic("alice", "a long enough password");

    assert_eq!(
        call(&gw.door, &[("authorization", &basic("alice", "wrong"))])
            .await
            .0,
        401
    );
    assert_eq!(gw.password_verifications(), 1);
    // An unknown name costs exactly what a wrong password costs: one verification.
    assert_eq!(
        call(&gw.door, &[("authorization", &basic("nobody", "wrong"))])
            .await
            .0,
        401
    );
    assert_eq!(gw.password_verifications(), 2);
    assert_eq!(
        call(&gw.door, &[("authorization", &basic("alice", "again"))])
            .await
            .0,
        401
    );
    assert_eq!(gw.password_verifications(), 3);
    // The budget is spent: refused before any verification, the right password included.
    for value in [basic("alice", "fourth"), good.clone(), bearer("pgt_junk")] {
        let (status, headers, body) = call(&gw.door, &[("authorization", &value)]).await;
        assert_limited(status, &headers, &body, "failed_auth", 20);
    }
    assert_eq!(
        gw.password_verifications(),
        3,
        "no Argon2 work once the budget is spent"
    );
    gw.clock.advance(Duration::from_secs(20));
    assert_eq!(call(&gw.door, &[("authorization", &good)]).await.0, 200);
    assert_eq!(gw.password_verifications(), 4);
    // Verified credentials are cached: no further Argon2 work for the same credential.
    for _ in 0..5 {
        assert_eq!(call(&gw.door, &[("authorization", &good)]).await.0, 200);
    }
    assert_eq!(gw.password_verifications(), 4);
    gw.stop().await;
}

#[tokio::test]
async fn api_keys_work_alone_and_a_new_key_retires_the_old() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("auth.schemes", ["api_key"])
            .set("auth.api_key_header", "X-Partner-Key")
            .without_credential_cache()
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let (code, key, stderr) = gw.cli(&["peer", "key", "alice"]);
    assert_eq!(code, 0, "{stderr}");
    let key = key.trim().to_owned();
    assert!(key.starts_with("pgk_"), "{key}");
    assert_eq!(call(&gw.door, &[("x-partner-key", &key)]).await.0, 200);
    // The default header name is not the configured one.
    assert_eq!(call(&gw.door, &[("x-api-key", &key)]).await.0, 401);
    // A peer token is not an API key, and Bearer is not enabled here.
    let (status, _, body) = call(&gw.door, &[("x-partner-key", &token)]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("invalid_credentials"))
    );
    let (status, _, body) = call(&gw.door, &[("authorization", &bearer(&token))]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("scheme_not_enabled"))
    );
    let (_, new_key, _) = gw.cli(&["peer", "key", "alice"]);
    let new_key = new_key.trim().to_owned();
    assert_eq!(call(&gw.door, &[("x-partner-key", &new_key)]).await.0, 200);
    let (status, _, body) = call(&gw.door, &[("x-partner-key", &key)]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("invalid_credentials"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn two_credentials_are_refused_and_neither_is_accepted() {
    let gw = TestGateway::start_with(all_schemes().policy()).await;
    let token = gw.add_peer("alice");
    let (_, key, _) = gw.cli(&["peer", "key", "alice"]);
    let key = key.trim();
    assert_eq!(
        call(&gw.door, &[("authorization", &bearer(&token))])
            .await
            .0,
        200
    );
    assert_eq!(call(&gw.door, &[("x-api-key", key)]).await.0, 200);
    for headers in [
        vec![
            ("authorization", bearer(&token)),
            ("x-api-key", key.to_owned()),
        ],
        vec![
            ("authorization", bearer(&token)),
            ("authorization", bearer(&token)),
        ],
        vec![("x-api-key", key.to_owned()), ("x-api-key", key.to_owned())],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, _, body) = call(&gw.door, &headers).await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["code"], "ambiguous_credentials");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_revocation_through_the_running_server_applies_to_the_very_next_request() {
    // The default cache of 2 s would keep a CLI revocation out for up to 2 s; one made through
    // the server drops the cached credential at once.
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let auth = bearer(&token);
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    gw.revoke_through_server("alice").await;
    let (status, _, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_token");
    gw.stop().await;
}

#[tokio::test]
async fn a_repeated_bad_credential_costs_one_verification() {
    let gw = TestGateway::start_with(
        all_schemes()
            .set("limits.failed_auth_per_ip_per_minute", 100)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    for _ in 0..5 {
        let (status, _, body) =
            call(&gw.door, &[("authorization", &basic("alice", "guess"))]).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("invalid_credentials"))
        );
    }
    assert_eq!(gw.password_verifications(), 1, "the refusal is cached");
    // Each attempt still counts against the failed-attempt budget.
    let (status, _, _) = call(&gw.door, &[("authorization", &basic("alice", "other"))]).await;
    assert_eq!(status, 401);
    assert_eq!(gw.password_verifications(), 2);
    gw.stop().await;
}

#[tokio::test]
async fn concurrent_guesses_cannot_outrun_the_budget_and_argon2_runs_a_few_at_a_time() {
    let gw = TestGateway::start_with(
        all_schemes()
            .set("limits.failed_auth_per_ip_per_minute", 6)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    let door = gw.door.clone();
    let guesses: Vec<_> = (0..30)
        .map(|i| {
            let door = door.clone();
            tokio::spawn(async move {
                call(
                    &door,
                    &[("authorization", &basic("alice", &format!("guess {i}")))],
                )
                .await
                .0
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for guess in guesses {
        statuses.push(guess.await.unwrap());
    }
    let unauthorized = statuses.iter().filter(|s| **s == 401).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((unauthorized, limited), (6, 24), "{statuses:?}");
    assert_eq!(
        gw.password_verifications(),
        6,
        "Argon2 ran only within the budget"
    );
    let peak = gw.password_peak_concurrency();
    assert!(
        (1..=2).contains(&peak),
        "at most 2 verifications at once, saw {peak}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn forwarding_from_an_untrusted_socket_is_ignored_even_with_proxies_configured() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("limits.per_ip_per_minute", 2)
            .set("server.trusted_proxies", ["10.0.0.0/8"])
            .policy(),
    )
    .await;
    assert_eq!(get_card(&gw, Some("203.0.113.1")).await.0, 200);
    assert_eq!(get_card(&gw, Some("203.0.113.2")).await.0, 200);
    assert_eq!(get_card(&gw, Some("203.0.113.3")).await.0, 429);
    gw.stop().await;
}

#[tokio::test]
async fn retry_after_rounds_up_and_waiting_that_long_always_suffices() {
    let gw = TestGateway::start().await;
    let (_, token, _) = gw.cli(&["peer", "add", "alice", "--rate", "7/min"]);
    let auth = bearer(token.trim());
    for _ in 0..7 {
        assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    }
    // 60/7 = 8.57 s, rounded up.
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 9);
    gw.clock.advance(Duration::from_secs(8));
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 1);
    gw.clock.advance(Duration::from_secs(1));
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    gw.stop().await;
}

#[tokio::test]
async fn a_lowered_quota_applies_without_a_restart() {
    let gw =
        TestGateway::start_with(PolicyEdit::default().without_credential_cache().policy()).await;
    let (_, token, _) = gw.cli(&["peer", "add", "alice", "--rate", "100/min"]);
    let auth = bearer(token.trim());
    for _ in 0..10 {
        assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    }
    gw.cli(&["peer", "limit", "alice", "5/min"]);
    // Ten requests are owed at 12 s each: 120 s, of which a 60 s burst is allowed; the next
    // one passes after 120 + 12 - 60 = 72 s.
    let (status, headers, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_limited(status, &headers, &body, "per_peer", 72);
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        "\"per_peer\";q=5;w=60"
    );
    gw.clock.advance(Duration::from_secs(72));
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    gw.stop().await;
}

#[tokio::test]
async fn a_cli_revocation_reaches_a_running_server_within_the_cache_time() {
    let gw = TestGateway::start().await; // credential_cache_seconds = 2
    let token = gw.add_peer("alice");
    let auth = bearer(&token);
    assert_eq!(call(&gw.door, &[("authorization", &auth)]).await.0, 200);
    let (code, _, stderr) = gw.cli(&["peer", "revoke", "alice"]);
    assert_eq!(code, 0, "{stderr}");
    gw.clock.advance(Duration::from_secs(2));
    let (status, _, body) = call(&gw.door, &[("authorization", &auth)]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("invalid_token"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn basic_alone_is_advertised_and_challenged_alone() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("auth.schemes", ["basic"])
            .policy(),
    )
    .await;
    let (_, _, card) = get_card(&gw, None).await;
    assert_eq!(
        card["securitySchemes"],
        json!({"basicAuth": {"httpAuthSecurityScheme": {
            "scheme": "Basic",
            "description": "The peer's name and the password its administrator set"}}})
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"basicAuth": {}}}])
    );
    let (status, headers, _) = call(&gw.door, &[]).await;
    assert_eq!(status, 401);
    let challenges: Vec<_> = headers.get_all("www-authenticate").iter().collect();
    assert_eq!(challenges, ["Basic realm=\"peergate\", charset=\"UTF-8\""]);
    gw.stop().await;
}

#[tokio::test]
async fn a_flood_from_many_addresses_never_locks_out_a_valid_peer() {
    // The smallest table the policy allows, so a flood of a few hundred addresses fills it.
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("limits.tracked_addresses", 16)
            .set("limits.per_ip_per_minute", 30)
            .set("limits.failed_auth_per_ip_per_minute", 3)
            .set("server.trusted_proxies", ["127.0.0.1/32"])
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let unknown = peergate::token::issue(peergate::token::CredentialKind::PeerToken)
        .unwrap()
        .token;
    // Every address of the flood leaves a live entry in both tables: its request counted by
    // the per-IP limit, its failure by the failed-attempt budget.
    for n in 0..100u32 {
        let address = format!("2001:db8:{:x}:{:x}::1", n / 256, n % 256);
        let (status, _, _) = call(
            &gw.door,
            &[
                ("authorization", &bearer(&unknown)),
                ("x-forwarded-for", &address),
            ],
        )
        .await;
        assert_eq!(status, 401, "{address}");
    }
    // A valid peer from an address the full tables have not seen is served.
    let (status, _, body) = call(
        &gw.door,
        &[
            ("authorization", &bearer(&token)),
            ("x-forwarded-for", "203.0.113.50"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // An address that spent its failed-attempt budget is refused more guesses...
    let guesser = "203.0.113.60";
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let headers = [
            ("authorization", bearer(&unknown)),
            ("x-forwarded-for", guesser.to_owned()),
        ];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        statuses.push(call(&gw.door, &headers).await.0);
    }
    assert_eq!(statuses, [401, 401, 401, 429]);
    // ...but a credential that verifies from it is neither charged nor refused, also once its
    // cached verdict has expired (credential_cache_seconds = 2).
    for _ in 0..3 {
        gw.clock.advance(Duration::from_secs(3));
        let (status, _, body) = call(
            &gw.door,
            &[
                ("authorization", &bearer(&token)),
                ("x-forwarded-for", guesser),
            ],
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn basic_logins_past_the_argon2_queue_are_refused_at_once_with_retry_after() {
    // One slot, so four may wait; failed attempts unlimited, as from many addresses.
    let gw = TestGateway::start_with(
        all_schemes()
            .set("auth.password_checks_at_once", 1)
            .set("server.max_connections_per_address", 1024)
            .set("limits.failed_auth_per_ip_per_minute", 1_000_000_000)
            .set("limits.per_ip_per_minute", 1_000_000_000)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
    let door = gw.door.clone();
    let flood: Vec<_> = (0..128)
        .map(|n| {
            let door = door.clone();
            tokio::spawn(async move {
                let wrong = basic("alice", &format!("wrong password {n}"));
                call(&door, &[("authorization", &wrong)]).await
            })
        })
        .collect();
    let mut busy = 0;
    for answer in flood {
        let (status, headers, body) = answer.await.unwrap();
        match status {
            401 => assert_eq!(body["error"]["code"], "invalid_credentials"),
            503 => {
                busy += 1;
                assert_eq!(body["error"]["code"], "auth_busy", "{body}");
                assert_eq!(header(&headers, "retry-after"), "1");
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(busy > 0, "every login of the flood was queued for Argon2");
    assert!(
        gw.password_verifications() <= 128 - busy,
        "a refused login was verified anyway"
    );
    // The flood is over: the right password signs in.
    let good = basic("alice", "a long enough password");
    assert_eq!(call(&gw.door, &[("authorization", &good)]).await.0, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_login_refused_for_busy_password_slots_costs_its_address_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    // The flood comes from many addresses (behind a trusted proxy); the real user's address
    // may fail only once a minute.
    let gw = TestGateway::start_with(
        all_schemes()
            .set("auth.password_checks_at_once", 1)
            .set("auth.credential_cache_seconds", 0)
            .set("limits.failed_auth_per_ip_per_minute", 1)
            .set("limits.per_ip_per_minute", 1_000_000_000)
            .set("server.trusted_proxies", ["127.0.0.1/32"])
            .set("server.max_connections_per_address", 1024)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    gw.cli(&["peer", "limit", "alice", "100000/min"]);
    gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
    let good = basic("alice", "a long enough password");
    let (stop, next) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    // Wrong passwords, each from an address of its own, for as long as the real user tries.
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (door, stop, next) = (gw.door.clone(), stop.clone(), next.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let wrong = basic("alice", &format!("wrong password {n}"));
                    let from = format!("10.{}.{}.{}", n >> 16 & 255, n >> 8 & 255, n & 255);
                    call(
                        &door,
                        &[("authorization", &wrong), ("x-forwarded-for", &from)],
                    )
                    .await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The real user retries one at a time, as Retry-After invites (without waiting, to meet
    // the flood as often as it can), until it has been told "busy" and then let in. Verdicts
    // are not cached, so every try meets the password slots until one matches.
    let mut seen = Vec::new();
    for _ in 0..200 {
        let (status, _, body) = call(
            &gw.door,
            &[
                ("authorization", &good),
                ("x-forwarded-for", "10.255.255.254"),
            ],
        )
        .await;
        assert_ne!(
            status, 429,
            "busy refusals were charged to the address: {seen:?} {body}"
        );
        seen.push(status);
        if status == 200 && seen.contains(&503) {
            break;
        }
        if status == 200 {
            // In before the flood was ever in its way: now known good, it would never meet
            // the slots again. A new password is a new hash, which is not.
            gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
        }
    }
    // Once let in, the same password is known good: it takes no slot, so the flood of wrong
    // ones from many addresses no longer starves it (0 of 60 got in before).
    let mut later = Vec::new();
    for _ in 0..60 {
        let (status, _, _) = call(
            &gw.door,
            &[
                ("authorization", &good),
                ("x-forwarded-for", "10.255.255.254"),
            ],
        )
        .await;
        later.push(status);
    }
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.unwrap();
    }
    assert!(
        seen.contains(&503),
        "the password slots were never busy: {seen:?}"
    );
    assert!(later.iter().all(|status| *status == 200), "{later:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn administrators_wait_for_a_password_slot_while_the_door_is_flooded() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let gw = TestGateway::start_with(
        all_schemes()
            .set("auth.password_checks_at_once", 1)
            .set("limits.failed_auth_per_ip_per_minute", 1_000_000_000)
            .set("limits.per_ip_per_minute", 1_000_000_000)
            .set("server.trusted_proxies", ["127.0.0.1/32"])
            .set("server.max_connections_per_address", 1024)
            .policy(),
    )
    .await;
    gw.add_peer("alice");
    gw.cli_with_stdin(&["peer", "password", "alice"], "a long enough password\n");
    let (code, _, err) = gw.cli_with_stdin(&["admin", "add", "ada"], "ada's admin password 1\n");
    assert_eq!(code, 0, "{err}");
    let (stop, next) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let busy_at_the_door = Arc::new(AtomicU32::new(0));
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (door, stop, next) = (gw.door.clone(), stop.clone(), next.clone());
            let busy = busy_at_the_door.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let wrong = basic("alice", &format!("wrong password {n}"));
                    let from = format!("10.{}.{}.{}", n >> 16 & 255, n >> 8 & 255, n & 255);
                    let (status, _, _) = call(
                        &door,
                        &[("authorization", &wrong), ("x-forwarded-for", &from)],
                    )
                    .await;
                    if status == 503 {
                        busy.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Every administrator sign-in is verified (no verdict cache on the admin API), so each one
    // meets the flooded password slots: it waits its turn, never refused as busy.
    let client = reqwest::Client::new();
    for attempt in 0..20 {
        let response = client
            .get(format!("{}/v1/peers", gw.admin))
            .basic_auth("ada", Some("ada's admin password 1"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "sign-in {attempt} during the flood");
    }
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.unwrap();
    }
    assert!(
        busy_at_the_door.load(Ordering::Relaxed) > 0,
        "the door's password slots were never busy"
    );
    gw.stop().await;
}
