//! Partners with their own identity: an identity provider's access tokens open the door for the
//! one peer their (issuer, subject) is bound to, with everything a peer has (limits, audit,
//! revocation) working as with the credentials peergate issues.
//!
//! The adversarial tokens are signed by the tests' own keys (`TestKey`, an issuer whose key set
//! is a file); the provider's own tokens come from panva's `oidc-provider`, a real OpenID
//! Provider started on loopback (`TestIdp`), whose keys the gateway discovers and refetches.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const AUDIENCE: &str = "https://gw.example.com/a2a/v1";
const ACME: &str = "https://idp.acme.example";

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// One `[[auth.issuers]]`: name, issuer, key set file (`None`: discovery), extra entries.
type Issuer<'a> = (
    &'a str,
    &'a str,
    Option<&'a std::path::Path>,
    Vec<(&'a str, Value)>,
);

/// The default policy with peer tokens and the `"jwt"` scheme, trusting `issuers`.
fn policy_with(issuers: &[Issuer<'_>]) -> PolicyEdit {
    let mut edit = PolicyEdit::default().set("auth.schemes", ["bearer", "jwt"]);
    for (name, issuer, file, extra) in issuers {
        let mut entries: Vec<(&str, Value)> = vec![
            ("name", json!(name)),
            ("issuer", json!(issuer)),
            ("audience", json!(AUDIENCE)),
        ];
        if let Some(file) = file {
            entries.push(("jwks_file", json!(file.to_str().unwrap())));
        }
        entries.extend(extra.iter().cloned());
        let entries: Vec<(&str, toml_edit::Value)> = entries
            .into_iter()
            .map(|(k, v)| (k, toml_value(&v)))
            .collect();
        edit = edit.push_table("auth.issuers", &entries);
    }
    edit
}

fn toml_value(value: &Value) -> toml_edit::Value {
    match value {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => n.as_i64().unwrap().into(),
        Value::Array(items) => {
            let mut array = toml_edit::Array::new();
            for item in items {
                array.push(toml_value(item));
            }
            array.into()
        }
        other => panic!("no TOML for {other}"),
    }
}

fn key_file(keys: &[&TestKey]) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), jwks(keys)).unwrap();
    file
}

fn send(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
           "params": {"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                                  "parts": [{"text": text}]}}})
    .to_string()
}

fn get_task(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}}).to_string()
}

/// Posts `body` with `token`; (status, WWW-Authenticate, body).
async fn call(door: &str, token: &str, body: String) -> (u16, String, Value) {
    let response = reqwest::Client::new()
        .post(door)
        .header("content-type", "application/json")
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    (
        status,
        challenge,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn cli_ok(gw: &TestGateway, args: &[&str]) -> String {
    let (code, stdout, stderr) = gw.cli(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bound_subject_opens_the_door_as_its_peer_and_nothing_else_does() {
    let acme_key = TestKey::new("acme-1", 3);
    let other_key = TestKey::new("other-1", 4);
    let (acme_file, other_file) = (key_file(&[&acme_key]), key_file(&[&other_key]));
    let policy = policy_with(&[
        ("acme", ACME, Some(acme_file.path()), vec![]),
        (
            "other",
            "https://idp.other.example",
            Some(other_file.path()),
            vec![],
        ),
    ]);
    let gw = TestGateway::start_with(policy.policy()).await;
    let peer_token = gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let listed = cli_ok(&gw, &["peer", "list"]);
    assert!(listed.contains("bound: token acme:agent-a"), "{listed}");

    let all = "a2a:message a2a:tasks:read";
    let token = acme_key.access_token(ACME, AUDIENCE, "agent-a", all, now_s());
    let (status, _, answer) = call(&gw.door, &token, send("hello")).await;
    assert_eq!(status, 200, "{answer}");
    let task = answer["result"]["task"]["id"].as_str().unwrap().to_owned();
    // The peer is the same whichever way it signs in: its task is its own under its token too.
    let (_, _, by_token) = call(&gw.door, &peer_token, get_task(&task)).await;
    assert_eq!(by_token["result"]["id"], json!(task), "{by_token}");

    // Unbound subjects, the same subject from another issuer, another audience: refused like an
    // unknown token, with the same answer.
    let refusals = [
        acme_key.access_token(ACME, AUDIENCE, "agent-b", all, now_s()),
        other_key.access_token(
            "https://idp.other.example",
            AUDIENCE,
            "agent-a",
            all,
            now_s(),
        ),
        acme_key.access_token(ACME, "https://elsewhere.example", "agent-a", all, now_s()),
        // The other issuer's key, claiming acme: a kid is never looked up across issuers.
        other_key.access_token(ACME, AUDIENCE, "agent-a", all, now_s()),
    ];
    for refused in refusals {
        let (status, challenge, body) = call(&gw.door, &refused, get_task(&task)).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], "invalid_token");
        assert!(
            challenge.starts_with("Bearer ") && challenge.ends_with(r#"error="invalid_token""#),
            "{challenge}"
        );
    }

    // Partners' providers are not public: the public card says a provider's token is taken and
    // names none; the extended card of a peer signed in with acme's token names acme, the one
    // of a peer signed in with its peer token does not.
    let card = gw.card().await;
    assert!(
        card["securitySchemes"].get("oauth2-acme").is_none(),
        "{card:#}"
    );
    assert_eq!(
        card["securitySchemes"]["partnerProviderAuth"]["httpAuthSecurityScheme"]["bearerFormat"],
        "JWT"
    );
    let extended = json!({"jsonrpc": "2.0", "id": 9, "method": "GetExtendedAgentCard"}).to_string();
    let (_, _, by_provider) = call(&gw.door, &token, extended.clone()).await;
    let acme =
        &by_provider["result"]["securitySchemes"]["oauth2-acme"]["openIdConnectSecurityScheme"];
    assert_eq!(
        acme["openIdConnectUrl"],
        json!(format!("{ACME}/.well-known/openid-configuration")),
        "{by_provider:#}"
    );
    assert!(
        by_provider["result"]["securitySchemes"]
            .get("oauth2-other")
            .is_none()
    );
    let (_, _, by_peer_token) = call(&gw.door, &peer_token, extended).await;
    assert!(
        by_peer_token["result"]["securitySchemes"]
            .get("oauth2-acme")
            .is_none()
    );
    assert!(by_peer_token["result"]["signatures"].is_array());

    // Revoking the peer refuses its still-valid token on the next request.
    gw.revoke_through_server("partner").await;
    let (status, _, _) = call(&gw.door, &token, get_task(&task)).await;
    assert_eq!(status, 401);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unbinding_expiring_and_another_binding_apply_to_the_next_request() {
    let key = TestKey::new("acme-1", 5);
    let file = key_file(&[&key]);
    let gw =
        TestGateway::start_with(policy_with(&[("acme", ACME, Some(file.path()), vec![])]).policy())
            .await;
    gw.add_peer("partner");
    gw.add_peer("another");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    // One identity names one peer.
    let policy = gw.policy_file();
    let (code, _, stderr) = gw.cli(&[
        "peer",
        "bind",
        "another",
        "--issuer",
        "acme",
        "--subject",
        "agent-a",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("already bound to peer \"partner\""),
        "{stderr}"
    );
    let token = key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    let probe = get_task("no-such-task");
    assert_eq!(call(&gw.door, &token, probe.clone()).await.0, 200);
    cli_ok(
        &gw,
        &[
            "peer",
            "unbind",
            "partner",
            "--issuer",
            "acme",
            "--subject",
            "agent-a",
        ],
    );
    assert_eq!(
        call(&gw.door, &token, probe.clone()).await.0,
        401,
        "unbound"
    );
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    // A refusal is remembered for the credential cache's time, like any credential's.
    gw.clock.advance(Duration::from_secs(3));
    assert_eq!(
        call(&gw.door, &token, probe.clone()).await.0,
        200,
        "bound again"
    );
    cli_ok(&gw, &["peer", "expire", "partner", "1h"]);
    gw.clock.advance(Duration::from_secs(3601));
    assert_eq!(
        call(&gw.door, &token, probe.clone()).await.0,
        401,
        "the peer expired"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_narrow_what_a_token_may_do_and_never_widen_it() {
    let key = TestKey::new("acme-1", 6);
    let file = key_file(&[&key]);
    let relaxed = vec![("require_scopes", json!(false))];
    let policy = policy_with(&[
        ("acme", ACME, Some(file.path()), vec![]),
        (
            "relaxed",
            "https://idp.relaxed.example",
            Some(file.path()),
            relaxed,
        ),
    ]);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("reader");
    gw.add_peer("trusted");
    gw.bind("reader", &["--issuer", "acme", "--subject", "reader-app"]);
    gw.bind(
        "trusted",
        &["--issuer", "relaxed", "--subject", "trusted-app"],
    );
    let read_only = key.access_token(
        ACME,
        AUDIENCE,
        "reader-app",
        "a2a:tasks:read openid",
        now_s(),
    );
    let (status, challenge, body) = call(&gw.door, &read_only, send("hello")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_scope");
    assert_eq!(
        challenge,
        r#"Bearer realm="peergate", error="insufficient_scope", scope="a2a:message""#
    );
    assert_eq!(call(&gw.door, &read_only, get_task("none")).await.0, 200);
    // The HTTP+JSON binding is off by default; streaming too: a scope opens nothing the
    // policy does not (the same refusal a peer token gets).
    let streaming = json!({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}});
    let everything = "a2a:message a2a:tasks:read a2a:tasks:cancel a2a:push";
    let wide = key.access_token(ACME, AUDIENCE, "reader-app", everything, now_s());
    let (status, _, body) = call(&gw.door, &wide, streaming.to_string()).await;
    assert_eq!(status, 200);
    assert!(
        body["error"]["code"].is_i64(),
        "streaming is off in the policy: {body}"
    );
    // An issuer whose scopes are not required: no scope at all still sends.
    let no_scope = key.access_token(
        "https://idp.relaxed.example",
        AUDIENCE,
        "trusted-app",
        "",
        now_s(),
    );
    assert_eq!(call(&gw.door, &no_scope, send("hi")).await.0, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_tokens_cost_the_failed_attempt_budget_and_valid_ones_keep_working() {
    let key = TestKey::new("acme-1", 7);
    let forger = TestKey::new("acme-1", 8);
    let file = key_file(&[&key]);
    let policy = policy_with(&[("acme", ACME, Some(file.path()), vec![])])
        .set("limits.failed_auth_per_ip_per_minute", 3);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let good = key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    // The right kid, another key's signature.
    let forged = forger.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(call(&gw.door, &forged, get_task("x")).await.0);
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    // A token that verifies is never refused for its address's spent budget.
    assert_eq!(call(&gw.door, &good, get_task("x")).await.0, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_binds_lists_and_unbinds_identities() {
    let key = TestKey::new("acme-1", 9);
    let file = key_file(&[&key]);
    let gw =
        TestGateway::start_with(policy_with(&[("acme", ACME, Some(file.path()), vec![])]).policy())
            .await;
    let (code, _, stderr) =
        gw.cli_with_stdin(&["admin", "add", "ada"], "a long enough password 1\n");
    assert_eq!(code, 0, "{stderr}");
    let admin = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let request = reqwest::Client::new()
            .request(method, format!("{}{path}", gw.admin))
            .basic_auth("ada", Some("a long enough password 1"))
            .header("content-type", "application/json");
        let request = match body {
            Some(body) => request.body(body.to_string()),
            None => request,
        };
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, _) = admin(
        reqwest::Method::POST,
        "/v1/peers",
        Some(json!({"name": "partner"})),
    )
    .await;
    assert_eq!(status, 201);
    let identity = json!({"issuer": "acme", "subject": "agent-a"});
    let (status, peer) = admin(
        reqwest::Method::POST,
        "/v1/peers/partner/identities",
        Some(identity.clone()),
    )
    .await;
    assert_eq!(status, 200, "{peer}");
    assert_eq!(peer["identities"], json!([identity]));
    let token = key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 200);
    let (status, body) = admin(
        reqwest::Method::POST,
        "/v1/peers/partner/identities",
        Some(identity.clone()),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("conflict"))
    );
    // An issuer the policy does not name could never open the door: refused, by the admin API
    // and by the command line alike.
    let (status, body) = admin(
        reqwest::Method::POST,
        "/v1/peers/partner/identities",
        Some(json!({"issuer": "acm", "subject": "agent-a"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("\"acm\""), "{body}");
    let policy = gw.policy_file();
    let (code, _, stderr) = gw.cli(&[
        "peer",
        "bind",
        "partner",
        "--issuer",
        "acm",
        "--subject",
        "agent-b",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no identity provider \"acm\""), "{stderr}");
    let (status, body) = admin(
        reqwest::Method::POST,
        "/v1/peers/partner/identities",
        Some(json!({"issuer": "acme", "subject": "x", "certificateSan": "spiffe://acme/agent"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = admin(
        reqwest::Method::POST,
        "/v1/peers/partner/identities/unbind",
        Some(identity.clone()),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 401);
    let (_, audit) = admin(reqwest::Method::GET, "/v1/audit", None).await;
    let actions: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .filter(|a| a.starts_with("peer.identity"))
        .collect();
    // Bound, refused as taken, refused for an issuer the policy does not name, unbound.
    assert_eq!(
        actions,
        [
            "peer.identity_bound",
            "peer.identity_bound",
            "peer.identity_bound",
            "peer.identity_unbound"
        ]
    );
    gw.stop().await;
}

#[test]
fn a_policy_that_could_never_work_stops_start_up_naming_the_setting() {
    let refused = |edit: PolicyEdit| {
        let text = edit.text();
        peergate::config::Policy::parse(&text, &peergate::config::PolicySource::Embedded)
            .unwrap_err()
            .to_string()
    };
    let jwt_alone = PolicyEdit::default().set("auth.schemes", ["bearer", "jwt"]);
    assert!(refused(jwt_alone).contains("auth.issuers"));
    let issuers_alone =
        policy_with(&[("acme", ACME, None, vec![])]).set("auth.schemes", ["bearer"]);
    assert!(refused(issuers_alone).contains("auth.schemes"));
    let http = policy_with(&[("acme", "http://idp.acme.example", None, vec![])]);
    assert!(refused(http).contains("auth.issuers[0].issuer"));
    let hmac = policy_with(&[("acme", ACME, None, vec![("algorithms", json!(["HS256"]))])]);
    assert!(refused(hmac).contains("auth.issuers[0].algorithms"));
    let twice = policy_with(&[
        ("acme", ACME, None, vec![]),
        ("acme", "https://b.example", None, vec![]),
    ]);
    assert!(refused(twice).contains("auth.issuers[1].name"));
}

/// The provider's own tokens, discovered keys, a rotation the gateway follows by refetching on
/// an unknown `kid`, and a provider that was never reachable answered 503, not 401.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_from_a_real_openid_provider_open_the_door_through_key_rotation() {
    let first = TestKey::new("idp-1", 11);
    let clients = [("agent-a", "secret-a", "a2a:message a2a:tasks:read")];
    let Some(idp) = TestIdp::start(AUDIENCE, &clients, &[&first], 0) else {
        return;
    };
    let loopback = vec![
        ("dangerous_allow_http_loopback", json!(true)),
        ("public", json!(true)),
    ];
    let policy = policy_with(&[("acme", &idp.issuer, None, loopback)]);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let token = idp
        .token(("agent-a", "secret-a"), "a2a:message a2a:tasks:read")
        .await;
    // The operator's own provider is in the public card: a client-credentials flow at the
    // token endpoint discovery named, with the four scopes.
    let card = gw.card().await;
    let scheme = &card["securitySchemes"]["oauth2-acme"]["oauth2SecurityScheme"];
    assert_eq!(
        scheme["flows"]["clientCredentials"]["tokenUrl"],
        json!(format!("{}/token", idp.issuer)),
        "{card:#}"
    );
    assert_eq!(
        scheme["oauth2MetadataUrl"],
        json!(format!("{}/.well-known/openid-configuration", idp.issuer))
    );
    assert_eq!(
        scheme["flows"]["clientCredentials"]["scopes"]
            .as_object()
            .unwrap()
            .len(),
        4
    );
    assert!(
        card["securityRequirements"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["schemes"]["oauth2-acme"]["list"]
                .as_array()
                .is_some_and(|l| l.len() == 4)),
        "{card:#}"
    );
    let (status, _, answer) = call(&gw.door, &token, send("hello from the provider")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );

    // `peergate call` gets its own token from the provider at the token URL the verified card
    // names, keeps it (0600) for the next call, and a wrong secret is refused by the provider.
    let cache = tempfile::tempdir().unwrap();
    let base = format!("http://{}", gw.addr);
    let jwks_url = format!("{base}/.well-known/jwks.json");
    let call_cli = |secret: &'static str| {
        let (base, jwks_url, cache) = (base.clone(), jwks_url.clone(), cache.path().to_owned());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .args([
                    "call",
                    &base,
                    "hello by client credentials",
                    "--jwks",
                    &jwks_url,
                    "--dangerous-allow-http-loopback",
                ])
                .args([
                    "--client-id",
                    "agent-a",
                    "--client-secret-env",
                    "TEST_IDP_SECRET",
                ])
                .env("TEST_IDP_SECRET", secret)
                .env("XDG_CACHE_HOME", &cache)
                .output()
                .unwrap()
        })
    };
    let called = call_cli("secret-a").await.unwrap();
    let stderr = String::from_utf8_lossy(&called.stderr);
    assert_eq!(called.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&called.stdout).contains("hello by client credentials"));
    let kept: Vec<_> = std::fs::read_dir(cache.path().join("peergate"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("token-")
        })
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&kept[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The kept token serves the next call, whatever the secret now says.
    assert_eq!(
        call_cli("not the secret").await.unwrap().status.code(),
        Some(0)
    );
    // Not when others may write it: another user could have planted it.
    std::fs::set_permissions(&kept[0], std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        call_cli("not the secret").await.unwrap().status.code(),
        Some(4)
    );
    std::fs::set_permissions(&kept[0], std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        call_cli("not the secret").await.unwrap().status.code(),
        Some(0)
    );
    std::fs::remove_file(&kept[0]).unwrap();
    assert_eq!(
        call_cli("not the secret").await.unwrap().status.code(),
        Some(4)
    );

    // The official Python SDK client, with a token it asked the provider for itself.
    let args = [
        "--base-url",
        &base,
        "--client-id",
        "agent-a",
        "--client-secret",
        "secret-a",
    ]
    .map(str::to_owned);
    let summary = run_interop_script("a2a_python_oauth.py", &args).await;
    assert_eq!(summary["scheme"], "oauth2-acme", "{summary}");
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED", "{summary}");

    // The provider rotates to a new key on the same address; the gateway's cached set lacks
    // the new kid, so it fetches again (past the cooldown since its last fetch).
    let port = idp.port;
    drop(idp);
    let second = TestKey::new("idp-2", 12);
    let idp = TestIdp::start(AUDIENCE, &clients, &[&second, &first], port).expect("restarts");
    gw.clock.advance(Duration::from_secs(31));
    let rotated = idp.token(("agent-a", "secret-a"), "a2a:tasks:read").await;
    assert!(rotated != token);
    let (status, _, body) = call(&gw.door, &rotated, get_task("x")).await;
    assert_eq!(status, 200, "a token signed with the rotated key: {body}");
    // The earlier token still verifies with the key it was signed with.
    assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 200);
    gw.stop().await;

    // A provider the gateway never reached: 503 with Retry-After, nothing decided.
    let unreachable = format!("http://127.0.0.1:{}", crate::common::postgres::free_port());
    let policy = policy_with(&[(
        "acme",
        &unreachable,
        None,
        vec![("dangerous_allow_http_loopback", json!(true))],
    )]);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let token = second.access_token(&unreachable, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    let response = reqwest::Client::new()
        .post(&gw.door)
        .header("content-type", "application/json")
        .bearer_auth(&token)
        .body(get_task("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    gw.stop().await;
}

/// Administrators sign in with the organisation's provider: its tokens for the admin API's
/// audience, through the same stack, with the same refusals and the failed-attempt audit.
#[tokio::test(flavor = "multi_thread")]
async fn administrators_sign_in_with_the_organisations_provider() {
    let key = TestKey::new("corp-1", 31);
    let file = key_file(&[&key]);
    let corp = "https://login.corp.example";
    let admin_audience = "https://gw.example.com/admin";
    let policy = PolicyEdit::default()
        .insert("admin.issuer.name", "admin")
        .insert("admin.issuer.issuer", corp)
        .insert("admin.issuer.audience", admin_audience)
        .insert("admin.issuer.jwks_file", file.path().to_str().unwrap());
    let gw = TestGateway::start_with(policy.policy()).await;
    let (code, _, stderr) =
        gw.cli_with_stdin(&["admin", "add", "ada"], "a long enough password 1\n");
    assert_eq!(code, 0, "{stderr}");
    cli_ok(&gw, &["admin", "bind", "ada", "--subject", "ada@corp"]);
    let get = |token: String| {
        let url = format!("{}/v1/peers", gw.admin);
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let token = key.access_token(corp, admin_audience, "ada@corp", "", now_s());
    let (status, body) = get(token.clone()).await;
    assert_eq!(status, 200, "{body}");
    // A subject bound to nobody, a token for the door's audience: refused, and audited naming
    // the subject the token named.
    let stranger = key.access_token(corp, admin_audience, "mallory@corp", "", now_s());
    assert_eq!(get(stranger).await.0, 401);
    assert_eq!(
        get(key.access_token(corp, AUDIENCE, "ada@corp", "", now_s()))
            .await
            .0,
        401
    );
    // Failed sign-ins belong to no administrator's account: the operator reads them.
    let (code, audit, stderr) = gw.cli(&["audit", "--since", "1h"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        audit.lines().any(|line| line.contains("admin.login_failed")
            && line.contains("token subject admin:mallory@corp")),
        "{audit}"
    );
    // Disabling the administrator refuses their still-valid token on the next request.
    cli_ok(&gw, &["admin", "disable", "ada"]);
    gw.clock.advance(Duration::from_secs(3));
    assert_eq!(get(token).await.0, 401);
    gw.stop().await;
}

/// A flood of tokens naming kids the issuer never had costs its key server at most one fetch per
/// cooldown, and a token with the real kid keeps working meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_kids_cost_the_key_server_one_fetch_per_cooldown() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let key = TestKey::new("acme-1", 41);
    let set = jwks(&[&key]);
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let set = set.clone();
            async move { ([("content-type", "application/json")], set) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_uri = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let extra = vec![
        ("jwks_uri", json!(jwks_uri)),
        ("dangerous_allow_http_loopback", json!(true)),
    ];
    let policy = policy_with(&[("acme", ACME, None, extra)])
        .set("limits.failed_auth_per_ip_per_minute", 1_000_000)
        .set("limits.per_ip_per_minute", 1_000_000);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let good = key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &good, get_task("x")).await.0, 200);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "the first token fetched the set"
    );
    // 200 made-up kids, 20 at a time (the per-address connection cap is 64).
    for batch in 0..10 {
        let flood: Vec<_> = (0..20)
            .map(|i| {
                let forger = TestKey::new(&format!("made-up-{batch}-{i}"), 42);
                let token =
                    forger.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
                let door = gw.door.clone();
                tokio::spawn(async move { call(&door, &token, get_task("x")).await.0 })
            })
            .collect();
        for refused in flood {
            assert_eq!(refused.await.unwrap(), 401);
        }
    }
    assert_eq!(call(&gw.door, &good, get_task("y")).await.0, 200);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "200 unknown kids within the cooldown of the first fetch: no refetch"
    );
    // Past the cooldown, unknown kids cost one fetch between them.
    gw.clock.advance(Duration::from_secs(31));
    for i in 0..20 {
        let made_up = TestKey::new(&format!("later-{i}"), 43);
        let token = made_up.access_token(ACME, AUDIENCE, "agent-a", "", now_s());
        assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 401);
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "one fetch per cooldown");
    gw.stop().await;
}

/// Scopes hold on the HTTP+JSON binding too: one table of operations, whatever the binding.
#[tokio::test(flavor = "multi_thread")]
async fn scopes_hold_on_the_http_json_binding() {
    let key = TestKey::new("acme-1", 61);
    let file = key_file(&[&key]);
    let policy = policy_with(&[("acme", ACME, Some(file.path()), vec![])])
        .set("capabilities.http_json", true);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("reader");
    gw.bind("reader", &["--issuer", "acme", "--subject", "reader-app"]);
    let read_only = key.access_token(ACME, AUDIENCE, "reader-app", "a2a:tasks:read", now_s());
    let rest = format!("{}/rest", gw.door);
    let client = reqwest::Client::new();
    let send = client
        .post(format!("{rest}/message:send"))
        .bearer_auth(&read_only)
        .header("content-type", "application/json")
        .body(
            json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(send.status(), 403);
    assert!(
        send.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains(r#"scope="a2a:message""#)
    );
    let list = client
        .get(format!("{rest}/tasks"))
        .bearer_auth(&read_only)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    gw.stop().await;
}

/// A key server the test changes as it goes: the set it serves, its `Cache-Control`, its
/// status, and how many times it was asked.
#[derive(Clone)]
struct KeyServer {
    served: std::sync::Arc<std::sync::Mutex<(String, &'static str, u16)>>,
    fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    jwks_uri: String,
}

impl KeyServer {
    async fn start(set: String, cache_control: &'static str) -> Self {
        use std::sync::atomic::Ordering;
        let served = std::sync::Arc::new(std::sync::Mutex::new((set, cache_control, 200)));
        let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (state, counted) = (served.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let (set, cache_control, status) = state.lock().unwrap().clone();
                async move {
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [
                            ("content-type", "application/json"),
                            ("cache-control", cache_control),
                        ],
                        set,
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let jwks_uri = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            served,
            fetches,
            jwks_uri,
        }
    }

    fn serve(&self, set: String) {
        self.served.lock().unwrap().0 = set;
    }

    fn fail_with(&self, status: u16) {
        self.served.lock().unwrap().2 = status;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The issuer `acme` with its keys at this server.
    fn policy(&self) -> PolicyEdit {
        let extra = vec![
            ("jwks_uri", json!(self.jwks_uri)),
            ("dangerous_allow_http_loopback", json!(true)),
        ];
        policy_with(&[("acme", ACME, None, extra)])
            .set("limits.failed_auth_per_ip_per_minute", 1_000_000)
            .set("limits.per_ip_per_minute", 1_000_000)
    }
}

/// A key the provider removes stops opening the door within the set's own cache lifetime: for
/// new tokens it signs, and for tokens verified before the removal.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_provider_removed_stops_working_within_the_sets_cache_lifetime() {
    let (old, new) = (TestKey::new("acme-1", 81), TestKey::new("acme-2", 82));
    let keys = KeyServer::start(jwks(&[&old]), "public, max-age=60").await;
    let gw = TestGateway::start_with(keys.policy().policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let token =
        |key: &TestKey| key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    let verified_before = token(&old);
    assert_eq!(call(&gw.door, &verified_before, get_task("x")).await.0, 200);
    assert_eq!(keys.fetches(), 1);

    // The provider rotates: the old key leaves the set. Within the set's max-age nothing is
    // asked; past it, the old key's tokens are refused, the one verified before too.
    keys.serve(jwks(&[&new]));
    gw.clock.advance(Duration::from_secs(50));
    assert_eq!(call(&gw.door, &verified_before, get_task("x")).await.0, 200);
    assert_eq!(keys.fetches(), 1, "fresh for its max-age");
    gw.clock.advance(Duration::from_secs(11));
    assert_eq!(
        call(&gw.door, &verified_before, get_task("x")).await.0,
        401,
        "a token verified before its key was removed"
    );
    assert_eq!(call(&gw.door, &token(&old), get_task("x")).await.0, 401);
    assert_eq!(call(&gw.door, &token(&new), get_task("x")).await.0, 200);
    assert_eq!(keys.fetches(), 2, "one fetch for the whole rotation");
    gw.stop().await;
}

/// Made-up kids hold off a real rotation for two seconds at most, and the same made-up kid is
/// not asked for twice; a token whose claims would refuse it asks nothing at all.
#[tokio::test(flavor = "multi_thread")]
async fn made_up_kids_do_not_hold_off_a_rotation() {
    let (old, new) = (TestKey::new("acme-1", 83), TestKey::new("acme-2", 84));
    let keys = KeyServer::start(jwks(&[&old]), "max-age=600").await;
    let gw = TestGateway::start_with(keys.policy().policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    let token =
        |key: &TestKey| key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &token(&old), get_task("x")).await.0, 200);
    gw.clock.advance(Duration::from_secs(3));
    let junk = TestKey::new("made-up", 85);
    assert_eq!(call(&gw.door, &token(&junk), get_task("x")).await.0, 401);
    assert_eq!(
        keys.fetches(),
        2,
        "a kid nobody has asked for is asked for once"
    );
    // Another audience, an expired token: refused before any key is looked for.
    let other = TestKey::new("made-up-2", 86);
    let elsewhere = other.access_token(ACME, "https://elsewhere.example", "agent-a", "", now_s());
    assert_eq!(call(&gw.door, &elsewhere, get_task("x")).await.0, 401);
    let expired = other.access_token(ACME, AUDIENCE, "agent-a", "", now_s() - 7200);
    assert_eq!(call(&gw.door, &expired, get_task("x")).await.0, 401);
    assert_eq!(
        keys.fetches(),
        2,
        "tokens refused by their claims fetch nothing"
    );

    // The provider rotates just after the junk's fetch: its first token waits out the floor.
    keys.serve(jwks(&[&old, &new]));
    assert_eq!(call(&gw.door, &token(&new), get_task("x")).await.0, 401);
    gw.clock.advance(Duration::from_secs(3));
    assert_eq!(call(&gw.door, &token(&junk), get_task("x")).await.0, 401);
    assert_eq!(
        keys.fetches(),
        2,
        "the same junk kid is not asked for again"
    );
    assert_eq!(call(&gw.door, &token(&new), get_task("x")).await.0, 200);
    assert_eq!(keys.fetches(), 3);
    gw.stop().await;
}

/// A key server that fails is logged once per fetch, not once per request it refuses; a key
/// that leaves the set is logged once, however many of its tokens come after.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_fetch_and_a_removed_key_are_each_logged_once() {
    const BETA: &str = "https://idp.beta.example";
    let (old, new) = (TestKey::new("beta-1", 87), TestKey::new("beta-2", 88));
    let down = KeyServer::start(jwks(&[&old]), "max-age=600").await;
    down.fail_with(500);
    let keys = KeyServer::start(jwks(&[&old]), "max-age=600").await;
    let issuer = |name, iss, server: &KeyServer| {
        let extra = vec![
            ("jwks_uri", json!(server.jwks_uri)),
            ("dangerous_allow_http_loopback", json!(true)),
        ];
        (name, iss, None, extra)
    };
    let policy = policy_with(&[issuer("acme", ACME, &down), issuer("beta", BETA, &keys)])
        .set("limits.failed_auth_per_ip_per_minute", 1_000_000)
        .set("limits.per_ip_per_minute", 1_000_000);
    let served = ServedPolicy::start(&policy, &["partner"], &[]);
    let data = served.data.to_str().unwrap();
    let bind = [
        "peer",
        "bind",
        "partner",
        "--issuer",
        "beta",
        "--subject",
        "agent-a",
    ];
    let (code, _, stderr) = cli_in(served.dir.path(), &[&bind[..], &["--data", data]].concat());
    assert_eq!(code, 0, "{stderr}");
    let door = served.server.door();

    // The down issuer: twenty tokens, one fetch, one line.
    for _ in 0..20 {
        let token = old.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
        assert_eq!(call(&door, &token, get_task("x")).await.0, 503);
    }
    let log = served.server.log_with("a key set cannot be fetched");
    let failures = log.matches("a key set cannot be fetched").count();
    assert_eq!(failures, 1, "{log}");
    assert_eq!(down.fetches(), 1, "a failed fetch holds off the next");

    // The other rotates; the first token of its new key brings the new set.
    let token =
        |key: &TestKey| key.access_token(BETA, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&door, &token(&old), get_task("x")).await.0, 200);
    keys.serve(jwks(&[&new]));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(call(&door, &token(&new), get_task("x")).await.0, 200);
    for _ in 0..50 {
        assert_eq!(call(&door, &token(&old), get_task("x")).await.0, 401);
    }
    let log = served.server.log_with("removed a key");
    assert_eq!(log.matches("removed a key").count(), 1, "{log}");
    assert!(log.contains("kid=beta-1"), "{log}");
}

/// An issuer with a path is discovered at RFC 8414's URL for it (the path after the well-known
/// name), and a document naming another issuer is refused naming both, by `policy check
/// --discover` before anything serves.
#[tokio::test(flavor = "multi_thread")]
async fn an_issuer_with_a_path_is_discovered_where_rfc_8414_puts_it() {
    let key = TestKey::new("tenant-1", 89);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (issuer, set) = (format!("{base}/tenant"), jwks(&[&key]));
    let metadata = json!({"issuer": issuer, "jwks_uri": format!("{base}/tenant/jwks")});
    let wrong =
        json!({"issuer": format!("{base}/other"), "jwks_uri": format!("{base}/tenant/jwks")});
    let app = axum::Router::new()
        .route(
            "/.well-known/oauth-authorization-server/tenant",
            axum::routing::get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/.well-known/oauth-authorization-server/wrong",
            axum::routing::get(move || async move { axum::Json(wrong) }),
        )
        .route(
            "/tenant/jwks",
            axum::routing::get(move || async move { set }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let loopback = ("dangerous_allow_http_loopback", json!(true));
    let policy = policy_with(&[("tenant", &issuer, None, vec![loopback.clone()])]);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "tenant", "--subject", "agent-a"]);
    let token = key.access_token(&issuer, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 200);
    gw.stop().await;

    // `policy check --discover`: the good one passes, the other is named with what it names.
    let dir = tempfile::tempdir().unwrap();
    let check = |policy: PolicyEdit| {
        let file = dir.path().join("policy.toml");
        std::fs::write(&file, policy.text()).unwrap();
        cli(&[
            "policy",
            "check",
            "--discover",
            "--policy",
            file.to_str().unwrap(),
        ])
    };
    let (code, _, stderr) = check(policy);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("keys at http://"), "{stderr}");
    let wrong_issuer = format!("{base}/wrong");
    let (code, _, stderr) = check(policy_with(&[(
        "wrong",
        &wrong_issuer,
        None,
        vec![loopback],
    )]));
    assert_eq!(code, 1, "{stderr}");
    let named = format!(r#"names issuer "{base}/other", not "{wrong_issuer}""#);
    assert!(stderr.contains(&named), "{stderr}");
}

/// A token is taken until its `exp` and the issuer's clock skew, as the rules read it, not
/// only until `exp`.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_is_taken_within_the_clock_skew_past_its_exp() {
    let key = TestKey::new("acme-1", 90);
    let file = key_file(&[&key]);
    let policy = policy_with(&[("acme", ACME, Some(file.path()), vec![])]);
    let gw = TestGateway::start_with(policy.policy()).await;
    gw.add_peer("partner");
    gw.bind("partner", &["--issuer", "acme", "--subject", "agent-a"]);
    // `exp` 300 s from now (the test key's lifetime), the default skew 60 s.
    let token = key.access_token(ACME, AUDIENCE, "agent-a", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &token, get_task("x")).await.0, 200);
    gw.clock.advance(Duration::from_secs(330));
    assert_eq!(
        call(&gw.door, &token, get_task("x")).await.0,
        200,
        "within the skew"
    );
    gw.clock.advance(Duration::from_secs(31));
    assert_eq!(
        call(&gw.door, &token, get_task("x")).await.0,
        401,
        "past it"
    );
    gw.stop().await;
}

/// A 401 names the schemes the door accepts, so a partner holding the wrong kind of credential
/// learns which to bring; a malformed token is called malformed, not "not a peer token".
#[tokio::test(flavor = "multi_thread")]
async fn a_401_lists_the_accepted_schemes_and_calls_a_malformed_token_malformed() {
    let key = TestKey::new("acme-1", 91);
    let file = key_file(&[&key]);
    let policy = policy_with(&[("acme", ACME, Some(file.path()), vec![])]);
    let gw = TestGateway::start_with(policy.policy()).await;
    let (status, body) = post_raw(&gw.door, None, get_task("x")).await;
    assert_eq!(status, 401);
    let mut accepted: Vec<&str> = body["error"]["acceptedSchemes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    accepted.sort_unstable();
    assert_eq!(accepted, ["bearer", "jwt"], "{body}");
    for malformed in ["pgt_not_a_real_token", "a.b.c.d.e"] {
        let (status, _, body) = call(&gw.door, malformed, get_task("x")).await;
        assert_eq!(status, 401, "{body}");
        let said = body["error"]["message"].as_str().unwrap_or_default();
        assert!(!said.contains("peer token"), "{malformed}: {said}");
    }
    gw.stop().await;
}

/// A peer added with its identity provider's subject signs in with that provider's tokens: it
/// is given no token of peergate's unless one is asked for, and the summary says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_peer_added_with_its_identity_is_given_no_token_unless_asked() {
    let key = TestKey::new("acme-1", 71);
    let file = key_file(&[&key]);
    let policy = policy_with(&[("acme", ACME, Some(file.path()), vec![])]);
    let gw = TestGateway::start_with(policy.policy()).await;
    let policy = gw.policy_file();
    let policy = policy.to_str().unwrap();
    let add = |name: &str, subject: &str, extra: &[&str]| {
        let mut args = vec![
            "peer",
            "add",
            name,
            "--issuer",
            "acme",
            "--subject",
            subject,
        ];
        args.extend_from_slice(&["--policy", policy]);
        args.extend_from_slice(extra);
        gw.cli(&args)
    };
    let (code, stdout, stderr) = add("acme-app", "app-1", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "", "no token of peergate's");
    assert!(stderr.contains("no token of peergate's"), "{stderr}");
    assert!(stderr.contains("--token"), "{stderr}");
    // Its provider's token opens the door.
    let token = key.access_token(ACME, AUDIENCE, "app-1", "a2a:tasks:read", now_s());
    assert_eq!(call(&gw.door, &token, get_task("none")).await.0, 200);
    // Asked for, it gets one too.
    let (code, stdout, stderr) = add("acme-app-2", "app-2", &["--token"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.trim().starts_with("pgt_"), "{stdout}");
    gw.stop().await;
}
