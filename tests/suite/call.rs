//! `peergate call` against a real peergate on 127.0.0.1: the card verified with the key set it
//! publishes, the answer printed, the context id on stderr, and one exit status per way a call
//! can end.

use crate::common::*;
use serde_json::Value;

/// A served peergate with `policy` (credential cache off) and its peer `caller`.
struct Served {
    served: ServedPolicy,
    data: std::path::PathBuf,
    token: String,
}

fn serve(policy: PolicyEdit) -> Served {
    let served = ServedPolicy::start(&policy.without_credential_cache(), &["caller"], &[]);
    Served {
        data: served.data.clone(),
        token: served.tokens[0].clone(),
        served,
    }
}

impl Served {
    fn base(&self) -> String {
        format!("http://{}", self.served.server.addr)
    }

    fn jwks(&self) -> String {
        format!("{}/.well-known/jwks.json", self.base())
    }

    /// `peergate call BASE TEXT --jwks JWKS` with `extra`.
    fn call(&self, text: &str, extra: &[&str]) -> (i32, String, String) {
        let jwks = self.jwks();
        let mut args = vec!["--jwks", jwks.as_str()];
        args.extend_from_slice(extra);
        self.call_with(text, &args)
    }

    /// `peergate call BASE TEXT --token TOKEN` with `extra` (and no keys unless given).
    fn call_with(&self, text: &str, extra: &[&str]) -> (i32, String, String) {
        let base = self.base();
        let mut args = vec![
            "call",
            base.as_str(),
            text,
            "--dangerous-allow-http-loopback",
        ];
        if !extra
            .iter()
            .any(|a| a.starts_with("--token") || *a == "--basic" || *a == "--api-key")
        {
            args.extend_from_slice(&["--token", self.token.as_str()]);
        }
        args.extend_from_slice(extra);
        cli(&args)
    }
}

fn context_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("context: "))
        .unwrap_or_else(|| panic!("no context line: {stderr}"))
        .to_owned()
}

#[test]
fn a_verified_call_prints_the_answer_and_the_context_to_follow_up_in() {
    let served = serve(PolicyEdit::default());
    let (code, stdout, stderr) = served.call("What is A2A?", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("card verified: kid ed-"), "{stderr}");
    assert!(
        stdout.contains("What is A2A?"),
        "the echo's answer: {stdout}"
    );
    let context = context_of(&stderr);

    // The follow-up lands in the same context; --json prints the whole result.
    let (code, stdout, stderr) = served.call("And then?", &["--context", &context, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["task"]["contextId"], context.as_str());
    assert_eq!(result["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(context_of(&stderr), context);
}

#[test]
fn a_card_that_does_not_verify_is_refused_unless_the_caller_accepts_it_unverified() {
    let served = serve(PolicyEdit::default());
    // No keys at all.
    let (code, _, stderr) = served.call_with("hi", &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("--jwks"), "{stderr}");
    // A key that did not sign it.
    let other = "other=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let (code, _, stderr) = served.call_with("hi", &["--secret", other]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("the card is not verified"), "{stderr}");
    // ... and still refused with --insecure-unsigned: a signature that fails is never used.
    let (code, _, stderr) = served.call_with("hi", &["--secret", other, "--insecure-unsigned"]);
    assert_eq!(code, 3, "{stderr}");
    // Without keys, --insecure-unsigned goes ahead and says so.
    let (code, stdout, stderr) = served.call_with("hi", &["--insecure-unsigned"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("not verified"), "{stderr}");
    assert!(stdout.contains("hi"), "{stdout}");
}

#[test]
fn refusals_have_their_own_exit_status() {
    let served = serve(PolicyEdit::default());
    // A credential the gateway does not know.
    let (code, _, stderr) = served.call("hi", &["--token", "pg_not_a_real_token"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("refused the credential"), "{stderr}");
    assert!(!stderr.contains("pg_not_a_real_token"), "{stderr}");

    // A peer over its quota: the wait is printed.
    let (code, _, stderr) = cli_on(&served.data, &["peer", "limit", "caller", "1/min"]);
    assert_eq!(code, 0, "{stderr}");
    let mut last = (0, String::new());
    for _ in 0..3 {
        let (code, _, stderr) = served.call("hi", &[]);
        last = (code, stderr);
        if code != 0 {
            break;
        }
    }
    assert_eq!(last.0, 5, "{}", last.1);
    assert!(last.1.contains("rate limited: retry after"), "{}", last.1);
}

#[test]
fn a_failed_or_rejected_task_exits_6() {
    // A model that is not there: the task fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let served = serve(PolicyEdit::default().openai(&format!("http://127.0.0.1:{port}/v1"), "m"));
    let (code, _, stderr) = served.call("hi", &[]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("TASK_STATE_FAILED"), "{stderr}");
}

#[test]
fn streaming_basic_and_api_key_calls() {
    let served = serve(
        PolicyEdit::default()
            .set("capabilities.streaming", true)
            .set("auth.schemes", ["bearer", "basic", "api_key"]),
    );
    let (code, stdout, stderr) = served.call("streamed words", &["--stream"]);
    assert_eq!(code, 0, "{stderr}");
    // Streamed as it came, and not printed again when it arrives whole.
    assert_eq!(stdout.matches("streamed words").count(), 1, "{stdout}");
    context_of(&stderr);
    // The task's id beside its context.
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("task: ") && line.len() > 6),
        "{stderr}"
    );

    let (code, _, stderr) = cli_with_stdin_on(
        &served.data,
        &["peer", "password", "caller"],
        "a long enough password\n",
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, key, stderr) = cli_on(&served.data, &["peer", "key", "caller"]);
    assert_eq!(code, 0, "{stderr}");
    let (base, jwks) = (served.base(), served.jwks());
    let (code, stdout, stderr) = cli_with_stdin(
        &[
            "call",
            &base,
            "by basic",
            "--jwks",
            &jwks,
            "--basic",
            "caller",
            "--dangerous-allow-http-loopback",
        ],
        "a long enough password\n",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("by basic"), "{stdout}");
    // The API key goes in the header the card names.
    let (code, stdout, stderr) = served.call("by key", &["--api-key", key.trim()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("by key"), "{stdout}");
    let (code, _, stderr) = served.call("by key", &["--api-key", "pgk_wrong"]);
    assert_eq!(code, 4, "{stderr}");
}

#[test]
fn plain_http_and_private_addresses_are_refused_before_anything_is_sent() {
    let call = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "call",
            url,
            "hi",
            "--token",
            "secret-token",
            "--insecure-unsigned",
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    for (url, extra, why) in [
        // Plain http: only to loopback, and only under the dangerous switch.
        ("http://127.0.0.1:9", &[][..], "only https is fetched"),
        (
            "http://192.0.2.1:8080",
            &["--dangerous-allow-http-loopback"][..],
            "http is allowed only to loopback",
        ),
        // The address guard `card verify` uses: no private, link-local or metadata address
        // unless the caller says the agent is on their own network.
        ("https://10.0.0.7", &[][..], "not a public one"),
        (
            "https://169.254.169.254",
            &["--allow-private-network"][..],
            "link-local",
        ),
        ("https://127.0.0.1:9", &[][..], "not a public one"),
        // A name is checked after it is resolved, by the only resolver the client uses.
        (
            "https://localhost:9",
            &[][..],
            "resolves to no public address",
        ),
    ] {
        let (code, _, stderr) = call(url, extra);
        assert_eq!(code, 1, "{url}: {stderr}");
        assert!(stderr.contains(why), "{url}: {stderr}");
        assert!(!stderr.contains("secret-token"));
    }
    // With the switch, https on the private network is dialled (nothing listens on port 9 of
    // loopback, which the private side includes): refused by the network, not by the guard.
    let (code, _, stderr) = call("https://127.0.0.1:9", &["--allow-private-network"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains("not a public one"), "{stderr}");
}

#[test]
fn a_call_to_the_official_python_sdk_server() {
    let agent = UpstreamAgent::start(true);
    let keys = |name: &str| repo_root().join("tests/data/upstream").join(name);
    let (jwks, other) = (keys("signing.jwks.json"), keys("other.jwks.json"));
    let call_as = |jwks: &std::path::Path, token: &str, text: &str, extra: &[&str]| {
        let mut args = vec![
            "call",
            agent.url.as_str(),
            text,
            "--dangerous-allow-http-loopback",
            "--token",
            token,
            "--jwks",
        ];
        args.push(jwks.to_str().unwrap());
        args.extend_from_slice(extra);
        cli(&args)
    };
    let call = |text: &str, extra: &[&str]| call_as(&jwks, UPSTREAM_TOKEN, text, extra);
    let (code, stdout, stderr) = call("hello", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("card verified: kid upstream-ed-1"),
        "{stderr}"
    );
    assert_eq!(stdout.trim(), "upstream says: hello");

    // A message answer, a streamed one, and a task that waits for input and is answered.
    let (code, stdout, stderr) = call("message", &[]);
    assert_eq!(
        (code, stdout.trim()),
        (0, "a direct message answer"),
        "{stderr}"
    );
    let (code, stdout, stderr) = call("slow", &["--stream"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("step 1step 2step 3"), "{stdout}");
    assert!(stdout.contains("slow work done"), "{stdout}");
    let (code, _, stderr) = call("input", &[]);
    assert_eq!(code, 0, "{stderr}");
    let waiting = stderr
        .lines()
        .find(|line| line.starts_with("task: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let task = waiting
        .split("--task ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let context = context_of(&stderr);
    let (code, stdout, stderr) = call("more", &["--task", task, "--context", &context]);
    assert_eq!((code, stdout.trim()), (0, "you said: more"), "{stderr}");

    // A failed task, and a refused credential.
    let (code, _, stderr) = call("fail", &[]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("it failed on purpose"), "{stderr}");
    let (code, _, stderr) = call_as(&jwks, "wrong", "hello", &[]);
    assert_eq!(code, 4, "{stderr}");
    // A key set that did not sign the card.
    let (code, _, stderr) = call_as(&other, UPSTREAM_TOKEN, "hello", &[]);
    assert_eq!(code, 3, "{stderr}");
}

#[test]
fn the_credential_goes_only_to_the_origin_whose_card_was_verified() {
    // A verified card whose interface is on another origin (here a port nothing listens on).
    let served =
        serve(PolicyEdit::default().insert("server.public_base_url", "http://localhost:1"));
    let (code, _, stderr) = served.call("hello", &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--allow-other-origin"), "{stderr}");
    assert!(
        !stderr.contains("cannot reach"),
        "something was sent: {stderr}"
    );
    let (code, _, stderr) = served.call("hello", &["--allow-other-origin"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot reach http://localhost:1/"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_key_set_kept_by_one_call_verifies_the_next_while_the_key_server_is_down() {
    let served = serve(PolicyEdit::default());
    // The gateway's key set, served from a key server of its own that can go away.
    let jwks = key_set(&served).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let jwks = jwks.clone();
            async move { jwks }
        }),
    );
    let key_server = tokio::spawn(async move { axum::serve(listener, app).await });
    let call_with = |cache: &std::path::Path, extra: &'static [&'static str]| {
        let (base, token, url, cache) = (
            served.base(),
            served.token.clone(),
            url.clone(),
            cache.to_owned(),
        );
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(bin())
                .args([
                    "call",
                    &base,
                    "kept keys",
                    "--token",
                    &token,
                    "--jwks",
                    &url,
                ])
                .arg("--dangerous-allow-http-loopback")
                .args(extra)
                .env("XDG_CACHE_HOME", &cache)
                .output()
                .unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let call = |cache: &std::path::Path| call_with(cache, &[]);
    let cache = tempfile::tempdir().unwrap();
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 0, "{stderr}");
    // Kept for the next run, readable by its owner only, naming the URL it came from.
    let kept: Vec<_> = std::fs::read_dir(cache.path().join("peergate"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("jwks-")
        })
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kept[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let file: Value = serde_json::from_slice(&std::fs::read(&kept[0]).unwrap()).unwrap();
    assert_eq!(file["url"], url.as_str());

    key_server.abort();
    let _ = key_server.await;
    assert!(reqwest::get(&url).await.is_err(), "the key server is down");
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("card verified: kid ed-"), "{stderr}");
    // Without what the first run kept, the card cannot be verified.
    let empty = tempfile::tempdir().unwrap();
    let (code, stderr) = call(empty.path()).await.unwrap();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("cannot fetch"), "{stderr}");
    // Nor with a kept set that is not to be trusted: fetched "in the future", or writable by
    // others.
    let kept_path = kept[0].clone();
    let rewrite = |edit: &dyn Fn(&mut Value)| {
        let mut kept: Value = serde_json::from_slice(&std::fs::read(&kept_path).unwrap()).unwrap();
        edit(&mut kept);
        std::fs::write(&kept_path, kept.to_string()).unwrap();
    };
    let fetched_at = file["fetched_at"].as_i64().unwrap();
    rewrite(&|kept| kept["fetched_at"] = (fetched_at + 3600).into());
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 1, "a set from the future: {stderr}");
    rewrite(&|kept| kept["fetched_at"] = fetched_at.into());
    std::fs::set_permissions(&kept_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 1, "a set others may write: {stderr}");
    std::fs::set_permissions(&kept_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 0, "{stderr}");
    // A set older than 10 minutes is used through a failing key server only when asked to.
    rewrite(&|kept| kept["fetched_at"] = (fetched_at - 11 * 60).into());
    let (code, stderr) = call(cache.path()).await.unwrap();
    assert_eq!(code, 1, "a withdrawn key could still verify: {stderr}");
    let (code, stderr) = call_with(cache.path(), &["--use-stale-jwks"])
        .await
        .unwrap();
    assert_eq!(code, 0, "{stderr}");
}

/// A key server that stalls is given five seconds, as SECURITY.md promises, by `call` and by
/// `card verify` alike: one that answers after twelve is too late (it was waited for twenty).
#[tokio::test(flavor = "multi_thread")]
async fn a_stalling_key_server_is_given_five_seconds() {
    let served = serve(PolicyEdit::default());
    let jwks = key_set(&served).await;
    let app = axum::Router::new().route(
        "/slow.json",
        axum::routing::get(move || async move {
            tokio::time::sleep(std::time::Duration::from_secs(12)).await;
            jwks
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = format!("http://{}/slow.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let card = format!("{}/.well-known/agent-card.json", served.base());
    let (call, verify) = tokio::task::spawn_blocking(move || {
        let call = served.call_with("hello", &["--jwks", &slow]);
        let verify = cli(&[
            "card",
            "verify",
            &card,
            "--jwks",
            &slow,
            "--dangerous-allow-http-loopback",
        ]);
        (call, verify)
    })
    .await
    .unwrap();
    for (what, (code, _, stderr)) in [("call", call), ("card verify", verify)] {
        assert_ne!(code, 0, "{what} waited for the key server: {stderr}");
        assert!(stderr.contains("slow.json"), "{what}: {stderr}");
    }
}

/// `call --stream` prints the answer and exits when the task reaches its final state, even
/// when the agent keeps its stream open after it.
#[tokio::test(flavor = "multi_thread")]
async fn call_stream_ends_at_the_final_state_not_at_the_streams_end() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let card = serde_json::json!({
        "name": "lingering", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": format!("{base}/"), "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [],
    });
    let completed = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {
        "id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED",
            "message": {"messageId": "r-1", "role": "ROLE_AGENT",
                "parts": [{"text": "the final answer"}]}}}}});
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            axum::routing::get(move || async move { axum::Json(card) }),
        )
        .route(
            "/",
            axum::routing::post(move || async move {
                // The answer, then the stream held open long past it.
                let first = futures_util::stream::once(async move {
                    Ok::<_, std::io::Error>(format!("data: {completed}\n\n"))
                });
                let lingering = futures_util::stream::once(async {
                    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                    Ok::<_, std::io::Error>(String::new())
                });
                (
                    [("content-type", "text/event-stream")],
                    axum::body::Body::from_stream(futures_util::StreamExt::chain(first, lingering)),
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        cli(&[
            "call",
            &base,
            "hello",
            "--stream",
            "--insecure-unsigned",
            "--dangerous-allow-http-loopback",
            "--token",
            "any",
            "--timeout",
            "30",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("the final answer"), "{stdout}");
}

/// The gateway's key set, as its door serves it.
async fn key_set(served: &Served) -> String {
    reqwest::get(served.jwks())
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[test]
fn a_call_keeps_the_receipt_it_asked_for_with_what_verifies_it() {
    // on_request: only a call that names the extension gets one.
    let served = serve(PolicyEdit::default().set("receipts.mode", "on_request"));
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("receipts");
    let (code, _, stderr) = served.call("keep this", &["--keep-receipt", kept.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("receipt: kept in"), "{stderr}");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&kept)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let named = |suffix: &str| {
        files
            .iter()
            .find(|f| f.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no *{suffix} in {files:?}"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    let (task, request, receipt) = (
        named(".task.json"),
        named(".request.json"),
        named(".receipt"),
    );
    let card = format!("{}/.well-known/agent-card.json", served.base());
    let extra = [
        "--receipt",
        receipt.as_str(),
        "--dangerous-allow-http-loopback",
    ];
    let (code, out, err) = verify_receipt((&task, &request), (&card, &served.jwks()), &extra);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("request: digest matches") && out.contains("answer: digest matches"),
        "{out}"
    );
    // Without --keep-receipt the call does not ask, and gets none.
    let (code, out, stderr) = served.call("no receipt", &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!out.contains("urn:peergate:ext:receipts:v1"), "{out}");
}
