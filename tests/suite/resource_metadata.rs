//! RFC 9728: a partner holding a 401 finds its way to a token. The door serves its
//! protected-resource metadata (the public providers only), every Bearer challenge names it, the
//! signed card points at it; `peergate call` with nothing but client credentials and the
//! official Python SDK client each go 401 → metadata → the provider's metadata (RFC 8414) → a
//! token for the resource (RFC 8707, panva's oidc-provider holding the resource indicator) → the
//! answer.

use crate::common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn a_partner_with_only_client_credentials_goes_from_a_401_to_a_token() {
    let (door_port, idp_port) = (postgres::free_port(), postgres::free_port());
    let origin = format!("http://127.0.0.1:{door_port}");
    let door = format!("{origin}/a2a/v1");
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let partner_key = TestKey::new("partner-1", 43);
    let dir = tempfile::tempdir().unwrap();
    let partner_keys = dir.path().join("partner.jwks");
    std::fs::write(&partner_keys, jwks(&[&partner_key])).unwrap();
    // The operator's provider comes up after the door: its keys are fetched when first needed.
    let policy = PolicyEdit::default()
        .set("auth.schemes", ["bearer", "jwt"])
        .insert("server.public_base_url", origin.as_str())
        .push_table(
            "auth.issuers",
            &[
                ("name", "acme".into()),
                ("issuer", issuer.as_str().into()),
                ("audience", door.as_str().into()),
                ("jwks_uri", format!("{issuer}/jwks").into()),
                ("dangerous_allow_http_loopback", true.into()),
                ("public", true.into()),
            ],
        )
        .push_table(
            "auth.issuers",
            &[
                ("name", "partner".into()),
                ("issuer", "https://idp.partner.example".into()),
                ("audience", door.as_str().into()),
                ("jwks_file", partner_keys.to_str().unwrap().into()),
            ],
        );
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, policy.text()).unwrap();
    let data = dir.path().join("data");
    let with_policy = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--policy", policy_file.to_str().unwrap()]);
        let (code, _, stderr) = cli_on(&data, &all);
        assert_eq!(code, 0, "{stderr}");
    };
    with_policy(&["peer", "add", "partner"]);
    with_policy(&[
        "peer",
        "bind",
        "partner",
        "--issuer",
        "acme",
        "--subject",
        "agent-a",
    ]);
    let mut args = store_args(&data);
    args.extend([
        "--policy".to_owned(),
        policy_file.to_str().unwrap().to_owned(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listen = format!("127.0.0.1:{door_port}");
    let _server = ServeProcess::start_listening_on(dir.path(), &listen, &args, &[]);
    let clients = [("agent-a", "secret-a", "a2a:message a2a:tasks:read")];
    let key = TestKey::new("idp-1", 44);
    let Some(_idp) = TestIdp::start_requiring_resource(&door, &clients, &[&key], idp_port) else {
        return;
    };

    // The 401 names the metadata, whose resource is the door and whose servers are the public
    // provider's alone.
    let metadata_url = format!("{origin}/.well-known/oauth-protected-resource/a2a/v1");
    let refused = reqwest::Client::new()
        .post(&door)
        .header("a2a-version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    assert_eq!(
        challenge,
        format!(r#"Bearer realm="peergate", resource_metadata="{metadata_url}""#)
    );
    let served = reqwest::get(&metadata_url).await.unwrap();
    assert_eq!(served.headers()["cache-control"], "public, max-age=300");
    assert_eq!(served.headers()["access-control-allow-origin"], "*");
    let etag = served.headers()["etag"].to_str().unwrap().to_owned();
    let metadata: Value = served.json().await.unwrap();
    assert_eq!(
        metadata,
        json!({
            "resource": door,
            "authorization_servers": [issuer],
            "scopes_supported": ["a2a:message", "a2a:tasks:read", "a2a:tasks:cancel", "a2a:push"],
            "bearer_methods_supported": ["header"],
            "resource_name": "peergate"
        }),
        "{metadata:#}"
    );
    let again = reqwest::Client::new()
        .get(&metadata_url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    for elsewhere in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/a2a/v1/evil",
        "/.well-known/oauth-protected-resource-evil/a2a/v1",
    ] {
        let status = reqwest::get(format!("{origin}{elsewhere}"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{elsewhere}");
    }
    // The signed card points at it.
    let card: Value = reqwest::get(format!("{origin}/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let extension = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == "urn:peergate:ext:oauth-protected-resource:v1")
        .unwrap_or_else(|| panic!("{card:#}"));
    assert_eq!(
        extension["params"]["resource_metadata"],
        metadata_url.as_str()
    );

    // `peergate call` with client credentials only; a wrong secret is the provider's refusal.
    let cache = tempfile::tempdir().unwrap();
    let call = |secret: &'static str| {
        let (origin, cache) = (origin.clone(), cache.path().to_owned());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .args(["call", &origin, "found by discovery"])
                .args(["--jwks", &format!("{origin}/.well-known/jwks.json")])
                .args(["--dangerous-allow-http-loopback", "--client-id", "agent-a"])
                .args(["--client-secret-env", "TEST_IDP_SECRET"])
                .env("TEST_IDP_SECRET", secret)
                .env("XDG_CACHE_HOME", &cache)
                .output()
                .unwrap()
        })
    };
    // An unsigned card leads the secret nowhere: no discovery without a verified card.
    let unverified = {
        let origin = origin.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .args(["call", &origin, "unverified", "--insecure-unsigned"])
                .args(["--dangerous-allow-http-loopback", "--client-id", "agent-a"])
                .args(["--client-secret-env", "TEST_IDP_SECRET"])
                .env("TEST_IDP_SECRET", "secret-a")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let said = String::from_utf8_lossy(&unverified.stderr);
    assert_eq!(unverified.status.code(), Some(1), "{said}");
    assert!(
        said.contains("neither its token URL nor discovery"),
        "{said}"
    );
    let wrong = call("not the secret").await.unwrap();
    assert_eq!(wrong.status.code(), Some(4), "{wrong:?}");
    let called = call("secret-a").await.unwrap();
    let stderr = String::from_utf8_lossy(&called.stderr);
    assert_eq!(called.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&called.stdout).contains("found by discovery"));

    // The official Python SDK client, from the metadata alone.
    let args = ["--base-url", &origin, "--discover"]
        .into_iter()
        .chain(["--client-id", "agent-a", "--client-secret", "secret-a"])
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let summary = run_interop_script("a2a_python_oauth.py", &args).await;
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED", "{summary}");
    assert_eq!(summary["resource"], door.as_str(), "{summary}");
    assert_eq!(
        summary["authorization_server"],
        issuer.as_str(),
        "{summary}"
    );
}
