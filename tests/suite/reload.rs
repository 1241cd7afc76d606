//! The policy changes without a restart: `SIGHUP` and the admin API read the file again and
//! apply what can change while serving (identity providers, the per-address limit, the cards'
//! text, the log level), atomically; a file that does not check keeps the policy in force and
//! says why; what needs a restart is named. Served by the real binary, as an operator runs it.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const AUDIENCE: &str = "https://gw.example.com/a2a/v1";
const ACME: &str = "https://idp.acme.example";
const OTHER: &str = "https://idp.other.example";
const ADMIN_PASSWORD: &str = "a long enough password";

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The default policy with peer tokens and the `"jwt"` scheme, trusting `issuers` (name,
/// `iss`, key set file), its card named `card_name`.
fn policy(issuers: &[(&str, &str, &std::path::Path)], card_name: &str) -> PolicyEdit {
    let mut edit = PolicyEdit::default()
        .set("auth.schemes", ["bearer", "jwt"])
        .set("card.name", card_name)
        .set("admin.reloaders", ["ada"]);
    for (name, issuer, file) in issuers {
        edit = edit.push_table(
            "auth.issuers",
            &[
                ("name", (*name).into()),
                ("issuer", (*issuer).into()),
                ("audience", AUDIENCE.into()),
                ("jwks_file", file.to_str().unwrap().into()),
            ],
        );
    }
    edit
}

fn key_file(key: &TestKey) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), jwks(&[key])).unwrap();
    file
}

fn send() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
           "params": {"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                                  "parts": [{"text": "hello"}]}}})
}

/// The status of a SendMessage with `token`.
async fn status_of(door: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .post(door)
        .bearer_auth(token)
        .json(&send())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn card_name(served: &ServedPolicy) -> String {
    let url = format!("http://{}/.well-known/agent-card.json", served.server.addr);
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), 200);
    let card: Value = response.json().await.unwrap();
    card["name"].as_str().unwrap().to_owned()
}

/// Rewrites the served policy file.
fn rewrite(served: &ServedPolicy, edit: &PolicyEdit) {
    std::fs::write(served.dir.path().join("policy.toml"), edit.text()).unwrap();
}

/// The `n`th log line holding `needle` (1-based), waiting for it.
fn nth_line_with(served: &ServedPolicy, needle: &str, n: usize) -> String {
    for _ in 0..200 {
        let lines: Vec<String> = served
            .server
            .log_text()
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect();
        if lines.len() >= n {
            return lines[n - 1].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no line {n} with {needle:?}:\n{}", served.server.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_applies_what_can_change_names_what_cannot_and_keeps_the_policy_on_a_bad_file() {
    let (acme_key, other_key) = (TestKey::new("acme-1", 61), TestKey::new("other-1", 62));
    let (acme_file, other_file) = (key_file(&acme_key), key_file(&other_key));
    let both = [
        ("acme", ACME, acme_file.path()),
        ("other", OTHER, other_file.path()),
    ];
    // The policy's log level decides, not the tests' RUST_LOG.
    let served = ServedPolicy::start(
        &policy(&both, "Before"),
        &["alice", "bob"],
        &[("RUST_LOG", "")],
    );
    let (door, data) = (served.server.door(), served.data.clone());
    let policy_file = served.dir.path().join("policy.toml");
    for (peer, issuer, subject) in [("alice", "acme", "agent-a"), ("bob", "other", "agent-b")] {
        let (code, _, stderr) = cli_on(
            &data,
            &[
                "peer",
                "bind",
                peer,
                "--issuer",
                issuer,
                "--subject",
                subject,
            ]
            .into_iter()
            .chain(["--policy", policy_file.to_str().unwrap()])
            .collect::<Vec<_>>(),
        );
        assert_eq!(code, 0, "{stderr}");
    }
    let scope = "a2a:message a2a:tasks:read";
    let acme_token = acme_key.access_token(ACME, AUDIENCE, "agent-a", scope, now_s());
    let other_token = other_key.access_token(OTHER, AUDIENCE, "agent-b", scope, now_s());
    assert_eq!(status_of(&door, &acme_token).await, 200);
    assert_eq!(status_of(&door, &other_token).await, 200);

    // acme removed, the card renamed, the per-address limit lowered, debug lines on, and a
    // key that needs a restart.
    let only_other = policy(&both[1..], "After")
        .set("limits.per_ip_per_minute", 8)
        .set("log.level", "info,peergate=debug")
        .set("server.request_timeout_seconds", 300);
    rewrite(&served, &only_other);
    served.hang_up();
    let line = nth_line_with(&served, "policy reloaded", 1);
    for key in [
        "auth.issuers",
        "card.name",
        "limits.per_ip_per_minute",
        "log.level",
    ] {
        assert!(line.contains(key), "{line}");
    }
    assert!(
        line.contains("restart_needed=server.request_timeout_seconds"),
        "{line}"
    );
    // At once: the token verified a moment ago is not remembered past its provider.
    assert_eq!(status_of(&door, &acme_token).await, 401);
    assert_eq!(status_of(&door, &other_token).await, 200);
    assert_eq!(card_name(&served).await, "After");

    // A key that needs a restart is named again while it differs, and nothing is applied.
    served.hang_up();
    let again = nth_line_with(&served, "nothing applied", 1);
    assert!(
        again.contains("restart_needed=server.request_timeout_seconds"),
        "{again}"
    );

    // The new level is in force: a reload that finds nothing new says so at debug.
    let only_other = only_other.remove("server.request_timeout_seconds");
    rewrite(&served, &only_other);
    served.hang_up();
    nth_line_with(&served, "nothing changed", 1);

    // Only a SIGHUP or the admin API read the file: an instance does not hear its own reload
    // as another's, which would read its file again every 5 s for two minutes (and could
    // read it half-written).
    rewrite(&served, &only_other.clone().set("card.name", "Unannounced"));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(card_name(&served).await, "After");

    // A file that does not check changes nothing, and says why.
    rewrite(
        &served,
        &only_other
            .clone()
            .set("card.name", "Broken")
            .set("limits.per_ip_per_minute", 0),
    );
    served.hang_up();
    let refused = nth_line_with(&served, "was not reloaded", 1);
    assert!(refused.contains("limits.per_ip_per_minute"), "{refused}");
    assert_eq!(card_name(&served).await, "After");

    // Each SIGHUP is in the audit log as the operator's, the refused one too (written just
    // after its log line: waited for).
    let mut audit = Value::Null;
    for _ in 0..100 {
        let (code, text, stderr) = cli_on(&data, &["audit", "--json"]);
        assert_eq!(code, 0, "{stderr}");
        audit = serde_json::from_str(&text).unwrap();
        let signals = audit.as_array().unwrap().iter();
        if signals.filter(|r| r["client"] == "SIGHUP").count() >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let by_signal: Vec<&Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "policy.reloaded" && r["client"] == "SIGHUP")
        .collect();
    assert_eq!(by_signal.len(), 4, "{audit:#}");
    assert_eq!(by_signal[3]["outcome"], "refused", "{audit:#}");

    // The lowered limit counts what this address spent: a few more calls meet it.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(status_of(&door, &other_token).await);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
}

/// Posts `/v1/policy/reload` as the administrator ada.
async fn reload_by_api(served: &ServedPolicy) -> (u16, Value) {
    reload_as(served, "ada").await
}

/// Posts `/v1/policy/reload` as the administrator `name`.
async fn reload_as(served: &ServedPolicy, name: &str) -> (u16, Value) {
    as_admin(served, name, "/v1/policy/reload", Some(json!({}))).await
}

/// A request to the admin API as the administrator `name`: a POST of `body`, else a GET;
/// (status, JSON answer).
async fn as_admin(
    served: &ServedPolicy,
    name: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("http://{}{path}", served.server.admin_addr);
    let client = reqwest::Client::new();
    let request = match body {
        Some(body) => client.post(url).json(&body),
        None => client.get(url),
    };
    let response = request
        .basic_auth(name, Some(ADMIN_PASSWORD))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_reloads_under_load_losing_no_call_and_refuses_a_part_that_cannot_be_built() {
    let key = TestKey::new("acme-1", 63);
    let keys = key_file(&key);
    let acme = [("acme", ACME, keys.path())];
    let served = ServedPolicy::start(&policy(&acme, "Zero"), &["alice"], &[]);
    for name in ["ada", "bob"] {
        let (code, _, stderr) = cli_with_stdin_on(
            &served.data,
            &["admin", "add", name],
            &format!("{ADMIN_PASSWORD}\n"),
        );
        assert_eq!(code, 0, "{stderr}");
    }
    // The file is the operator's: only an administrator the policy names may apply it.
    let (status, body) = reload_as(&served, "bob").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin.reloaders"),
        "{body}"
    );
    let (door, token) = (served.server.door(), served.tokens[0].clone());

    // Calls keep coming while the card changes five times: every one is answered (24 calls,
    // within the peer's 30 a minute).
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (door, token) = (door.clone(), token.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..6 {
                    statuses.push(status_of(&door, &token).await);
                }
                statuses
            })
        })
        .collect();
    for round in 1..=5 {
        let name = format!("Round {round}");
        rewrite(&served, &policy(&acme, &name));
        let (status, body) = reload_by_api(&served).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["applied"], json!(["card.name"]), "{body}");
        assert_eq!(body["restartNeeded"], json!([]), "{body}");
        assert_eq!(card_name(&served).await, name);
    }
    for caller in callers {
        let statuses = caller.await.unwrap();
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    }

    // What new peers and budget-less owners get: applied to the very next ones.
    let defaults = policy(&acme, "Round 5")
        .set("peers.default_rate_per_minute", 77)
        .set("budgets.tokens_per_day", 4242);
    rewrite(&served, &defaults);
    let (status, body) = reload_by_api(&served).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["applied"],
        json!(["budgets.tokens_per_day", "peers.default_rate_per_minute"]),
        "{body}"
    );
    let (_, usage) = as_admin(&served, "ada", "/v1/usage", None).await;
    assert_eq!(usage["tokensPerDay"], 4242, "{usage}");
    let late = json!({"name": "late"});
    let (_, created) = as_admin(&served, "ada", "/v1/peers", Some(late)).await;
    assert_eq!(created["peer"]["ratePerMinute"], 77, "{created}");

    // A new card name beside a provider whose key set cannot be read: neither is applied, and
    // the answer names the setting, never the file's path.
    let missing = served.dir.path().join("no-such-keys.json");
    let broken = policy(&[("acme", ACME, &missing)], "Never");
    rewrite(&served, &broken);
    let (status, body) = reload_by_api(&served).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "policy_refused", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("auth.issuers[0].jwks_file"), "{message}");
    assert!(
        !message.contains(served.dir.path().to_str().unwrap()),
        "{message}"
    );
    assert_eq!(card_name(&served).await, "Round 5");

    // Each reload is in the administrator's audit trail, the refusal too.
    let (_, audit) = as_admin(&served, "ada", "/v1/audit", None).await;
    let reloads: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "policy.reloaded")
        .collect();
    assert_eq!(reloads.len(), 7, "{audit:#}");
    assert!(
        reloads.iter().any(|r| r["outcome"] == "refused"),
        "{audit:#}"
    );
}

/// A `RUST_LOG` that is no directive list is said on stderr and not used: the policy's
/// `log.level` decides, and a reload can change it.
#[test]
fn a_rust_log_that_is_no_directive_list_is_said_and_left_to_the_policy() {
    let debug = PolicyEdit::default().set("log.level", "info,peergate=debug");
    let served = ServedPolicy::start(&debug, &[], &[("RUST_LOG", "info,[")]);
    let said = nth_line_with(&served, "RUST_LOG is not a directive list", 1);
    assert!(said.contains("it is not used"), "{said}");
    // The policy's debug level is in force: a reload that finds nothing new says so.
    served.hang_up();
    nth_line_with(&served, "nothing changed", 1);
}
