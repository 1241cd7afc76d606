//! The command line as a contract, and the `serve` binary across restarts and revocations.

use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The one line a refusal prints, after the line that names the store (which every command
/// that opens one prints first).
fn one_line(stderr: &str) -> &str {
    let trimmed = stderr.trim_end();
    let trimmed = match trimmed.split_once('\n') {
        Some((first, rest)) if first.starts_with("store: ") => rest,
        _ => trimmed,
    };
    assert!(!trimmed.contains('\n'), "more than one line: {stderr:?}");
    assert!(trimmed.starts_with("peergate: "), "{stderr:?}");
    trimmed
}

#[test]
fn peer_add_prints_the_token_alone_and_list_never_shows_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (code, stdout, stderr) = cli_on(data, &["peer", "add", "alice"]);
    assert_eq!(code, 0, "{stderr}");
    let token = stdout.strip_suffix('\n').expect("token ends the line");
    assert!(
        !token.contains('\n'),
        "stdout holds only the token: {stdout:?}"
    );
    assert!(
        peergate::token::parse(peergate::token::CredentialKind::PeerToken, token).is_ok(),
        "{token}"
    );
    assert!(stderr.contains("alice"), "{stderr}");
    assert!(!stderr.contains(token), "the summary repeats the token");

    let (code, _, stderr) = cli_on(data, &["peer", "add", "bob", "--rate", "100/min"]);
    assert_eq!(code, 0, "{stderr}");

    let (code, list, _) = cli_on(data, &["peer", "list"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = list.lines().collect();
    // A header, then each peer with the kinds of credential it holds beneath.
    assert_eq!(lines.len(), 5, "{list}");
    assert_eq!(lines[2], "  credentials: token", "{list}");
    for column in [
        "NAME",
        "ID",
        "STATUS",
        "LIMIT",
        "CREATED",
        "LAST USED",
        "OWNER",
        "EXPIRES",
    ] {
        assert!(lines[0].contains(column), "{column} missing: {}", lines[0]);
    }
    let alice: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(alice[0], "alice");
    assert!(alice[1].starts_with("peer_"));
    assert_eq!(alice[2], "active");
    assert_eq!(alice[3], "30/min", "default from the policy");
    assert!(alice[4].ends_with('Z'));
    assert_eq!(alice[5], "never");
    assert_eq!(alice[6], "operator", "the policy's default owner");
    assert_eq!(alice[7], "never");
    assert!(lines[3].contains("100/min"));
    // Neither the token, its secret part nor its id appear.
    assert!(!list.contains(token));
    assert!(!list.contains(&token[17..49]));
    if skip_unless_sqlite("the store's bytes are read from SQLite's files") {
        return;
    }
    // Nor does any file of the store (the database, its WAL) hold the secret.
    let mut files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token[17..49]),
            "secret stored in clear"
        );
        files += 1;
    }
    assert!(files >= 2, "expected the database and its WAL");
    // The store does hold the peer, so the search above looked in the right place.
    let mut found_name = false;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        found_name |= String::from_utf8_lossy(&bytes).contains("alice");
    }
    assert!(found_name);
}

#[test]
fn bad_input_exits_non_zero_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    add_peer(dir.path(), "alice");

    let (code, stdout, stderr) = cli_on(data, &["peer", "add", "alice"]);
    assert_ne!(code, 0);
    assert!(stdout.is_empty(), "no token for a refused add");
    assert!(one_line(&stderr).contains("a peer named \"alice\" already exists"));

    let (code, _, stderr) = cli_on(data, &["peer", "revoke", "nobody"]);
    assert_ne!(code, 0);
    assert!(one_line(&stderr).contains("no peer named \"nobody\""));

    let (code, _, stderr) = cli_on(data, &["peer", "add", "carol", "--rate", "5/h"]);
    assert_ne!(code, 0);
    let line = one_line(&stderr);
    assert!(line.contains("--rate") && line.contains("N/min"), "{line}");

    let (code, _, stderr) = cli_on(data, &["peer", "add", "bad name!"]);
    assert_ne!(code, 0);
    assert!(one_line(&stderr).contains("invalid peer name"));

    let (code, _, stderr) = cli(&["serve", "--listen", "not-an-address"]);
    assert_ne!(code, 0);
    assert!(one_line(&stderr).contains("--listen"));

    let (code, _, stderr) = cli_on(data, &["serve", "--policy", "/nonexistent/policy.toml"]);
    assert_ne!(code, 0);
    let line = one_line(&stderr);
    assert!(
        line.contains("/nonexistent/policy.toml") && line.contains("cannot read"),
        "{line}"
    );

    let bad = dir.path().join("bad.toml");
    let text = PolicyEdit::default()
        .set("tasks.context_messages", 9999)
        .text();
    std::fs::write(&bad, text).unwrap();
    let (code, _, stderr) = cli_on(data, &["serve", "--policy", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    let line = one_line(&stderr);
    assert!(
        line.contains("bad.toml") && line.contains("tasks.context_messages"),
        "{line}"
    );

    let text = PolicyEdit::default().insert("peers.surprise", 1).text();
    std::fs::write(&bad, text).unwrap();
    let (code, _, stderr) = cli_on(
        data,
        &["peer", "add", "dave", "--policy", bad.to_str().unwrap()],
    );
    assert_ne!(code, 0);
    let line = one_line(&stderr);
    assert!(
        line.contains("bad.toml") && line.contains("surprise") && line.contains("line"),
        "{line}"
    );
}

#[tokio::test]
async fn serve_runs_on_the_embedded_defaults_anywhere() {
    let cwd = tempfile::tempdir().unwrap();
    // No store arguments: this is what serve does on its own (SQLite in ./data), whatever
    // engine the suite runs on.
    let server = ServeProcess::start_on_defaults(cwd.path());
    let card: serde_json::Value = reqwest::get(format!(
        "http://{}/.well-known/agent-card.json",
        server.addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(card["name"], "peergate");
    let log = server.log_text();
    assert!(log.contains("embedded policies/default.toml"), "{log}");
    assert!(log.contains("DEMONSTRATION backend"), "{log}");
    assert!(
        log.contains("the Agent Card is signed") && log.contains("kid=\"ed-"),
        "the log names the signing kid: {log}"
    );
    assert!(
        cwd.path()
            .join("data")
            .join("card-signing-ed25519.pem")
            .exists()
    );
    assert!(log.contains("listening on http://127.0.0.1:"), "{log}");
    assert!(log.contains("peergate.sqlite3"), "{log}");
    assert!(
        cwd.path().join("data").join("peergate.sqlite3").exists(),
        "default data dir"
    );
}

#[tokio::test]
async fn answered_tasks_and_conversations_survive_a_kill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, "alice");
    let server = ServeProcess::start(dir.path(), &data);
    let first = send_text(&server.door(), &token, "before the crash", None).await;
    let task = task_of(&first).clone();
    server.kill();

    let server = ServeProcess::start(dir.path(), &data);
    let got = get_task(&server.door(), &token, task["id"].as_str().unwrap(), None).await;
    assert_eq!(got["result"], task);
    let next = send_text(&server.door(), &token, "after", task["contextId"].as_str()).await;
    let reply = reply_text(task_of(&next));
    assert!(reply.contains("history: 2 earlier messages"), "{reply}");
    assert!(reply.contains("peer: before the crash"), "{reply}");
}

/// The writer commits concurrent requests together: a kill while batches are in flight must
/// not lose any task whose answer a client got.
#[tokio::test]
async fn every_answer_given_under_concurrent_load_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, "alice");
    let (code, _, stderr) = cli_on(&data, &["peer", "limit", "alice", "100000/min"]);
    assert_eq!(code, 0, "{stderr}");
    let server = ServeProcess::start(dir.path(), &data);
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let mut senders = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let (door, token, answered) = (server.door(), token.clone(), answered.clone());
        senders.spawn(async move {
            let client = reqwest::Client::new();
            // Below the default policy's 120 requests a minute per address, kill or not.
            for n in 0..13 {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": {"messageId": format!("m{worker}-{n}"), "role": "ROLE_USER",
                    "parts": [{"text": format!("worker {worker} message {n}")}]}}});
                let Ok(response) = client
                    .post(&door)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                else {
                    return;
                };
                let Ok(answer) = response.json::<Value>().await else {
                    return;
                };
                answered.lock().unwrap().push(task_of(&answer).clone());
            }
        });
    }
    // Kill with requests in flight: once some are answered, before all are.
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered.lock().unwrap().len() < 40 {
        assert!(Instant::now() < deadline, "the load never got going");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.kill();
    while let Some(sent) = senders.join_next().await {
        sent.expect("every answer before the kill is a task");
    }
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() < 8 * 13, "the kill came after every answer");

    let server = ServeProcess::start(dir.path(), &data);
    for task in &answered {
        let got = get_task(&server.door(), &token, task["id"].as_str().unwrap(), None).await;
        assert_eq!(got["result"], *task, "an answered task was lost");
    }
}

#[tokio::test]
async fn revoking_from_the_cli_stops_a_token_on_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let alice = add_peer(&data, "alice");
    let bob = add_peer(&data, "bob");
    let server = ServeProcess::start(dir.path(), &data);
    let probe =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    assert_eq!(
        post_raw(&server.door(), Some(&alice), probe.clone())
            .await
            .0,
        200
    );

    let (code, _, stderr) = cli_on(&data, &["peer", "revoke", "alice"]);
    assert_eq!(code, 0, "{stderr}");
    // The server's credential cache holds a verified token for at most 2 s (the default of
    // auth.credential_cache_seconds); poll well past that rather than sleep a fixed window.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = post_raw(&server.door(), Some(&alice), probe.clone()).await;
        if status == 401 {
            assert_eq!(body["error"]["code"], "invalid_token");
            break;
        }
        assert!(Instant::now() < deadline, "revoked token still accepted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Other peers are unaffected, and the list shows the revocation.
    assert_eq!(post_raw(&server.door(), Some(&bob), probe).await.0, 200);
    let (_, list, _) = cli_on(&data, &["peer", "list"]);
    let alice_line = list.lines().find(|l| l.starts_with("alice")).unwrap();
    assert!(alice_line.contains("revoked"), "{alice_line}");
    let bob_line = list.lines().find(|l| l.starts_with("bob")).unwrap();
    let last_used = bob_line.split_whitespace().nth(5).unwrap();
    assert_ne!(last_used, "never", "last used is recorded: {bob_line}");
}

#[test]
fn administrators_are_added_listed_and_disabled_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (code, _, stderr) = cli_with_stdin_on(data, &["admin", "add", "ops"], "short\n");
    assert_ne!(code, 0);
    assert!(stderr.contains("too short"), "{stderr}");
    let (code, stdout, stderr) = cli_with_stdin_on(
        data,
        &["admin", "add", "ops"],
        "a long enough admin password\n",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    let (code, _, stderr) = cli_with_stdin_on(
        data,
        &["admin", "add", "ops"],
        "another long enough password\n",
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("already exists"), "{stderr}");
    let (code, _, stderr) = cli_with_stdin_on(
        data,
        &["admin", "add", "bad name"],
        "a long enough admin password\n",
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("invalid administrator name"), "{stderr}");

    // Peers need an owner that exists and is active.
    let (code, _, stderr) = cli_on(data, &["peer", "add", "p1", "--owner", "nobody"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("no administrator named \"nobody\""),
        "{stderr}"
    );
    let (code, _, stderr) = cli_on(data, &["peer", "add", "p1", "--owner", "ops"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("owned by ops"), "{stderr}");

    let (code, _, stderr) = cli_on(
        data,
        &[
            "admin",
            "budget",
            "ops",
            "--tokens-per-day",
            "5000",
            "--model",
            "forbid",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, list, _) = cli_on(data, &["admin", "list"]);
    assert_eq!(code, 0);
    let ops: Vec<&str> = list.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &ops[..6],
        ["ops", "active", "set", "forbidden", "5000", "default"],
        "{list}"
    );
    assert!(!list.contains("argon2"), "no hash in the list: {list}");

    let (code, _, stderr) = cli_on(data, &["admin", "disable", "ops"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, list, _) = cli_on(data, &["admin", "list"]);
    assert!(list.lines().nth(1).unwrap().contains("disabled"), "{list}");
    let (code, _, stderr) = cli_on(data, &["peer", "add", "p2", "--owner", "ops"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("is disabled"), "{stderr}");
    let (code, _, stderr) = cli_on(data, &["admin", "token", "ops"]);
    assert_ne!(code, 0, "a disabled administrator gets no token");
    assert!(stderr.contains("disabled"), "{stderr}");

    // Every step is in the audit log, which `--since` filters.
    let (code, audit, _) = cli_on(data, &["audit"]);
    assert_eq!(code, 0);
    for action in [
        "admin.created",
        "peer.created",
        "credential.issued",
        "admin.budget_changed",
        "admin.disabled",
    ] {
        assert!(audit.contains(action), "{action} missing:\n{audit}");
    }
    assert!(
        audit.contains("refused: an administrator named \"ops\" already exists"),
        "the refused duplicate is recorded:\n{audit}"
    );
    let (code, future, _) = cli_on(data, &["audit", "--since", "2999-01-01"]);
    assert_eq!(code, 0);
    assert!(future.is_empty(), "{future}");
    let (code, _, stderr) = cli_on(data, &["audit", "--since", "yesterday"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("cannot read the time"), "{stderr}");
}

#[test]
fn without_a_default_owner_peer_add_needs_an_owner() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        PolicyEdit::default().set("peers.default_owner", "").text(),
    )
    .unwrap();
    let (code, _, stderr) = cli_on(
        &data,
        &["peer", "add", "p1", "--policy", policy.to_str().unwrap()],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("--owner NAME"), "{stderr}");
}

#[tokio::test]
async fn the_audit_log_refuses_updates_and_deletions_in_the_store_itself() {
    if skip_unless_sqlite("the statements are run on the SQLite file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    add_peer(dir.path(), "p1");
    let url = format!(
        "sqlite://{}",
        dir.path()
            .join(peergate::store::sqlite::DATABASE_FILE)
            .display()
    );
    let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert!(before >= 2, "created and issued");
    for statement in ["DELETE FROM audit", "UPDATE audit SET outcome = 'ok'"] {
        let error = sqlx::query(statement).execute(&mut db).await.unwrap_err();
        assert!(error.to_string().contains("append-only"), "{error}");
    }
    let after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(before, after);
}

#[test]
fn the_admin_api_never_listens_beyond_loopback_or_on_the_door() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (admin, why) in [
        ("0.0.0.0:0", "must be a loopback address"),
        ("127.0.0.1:18555", "must not be the door's address"),
    ] {
        let out = std::process::Command::new(bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:18555",
                "--admin-listen",
                admin,
            ])
            .args(store_args(&data))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{admin} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("admin_listen") && stderr.contains(why),
            "{stderr}"
        );
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        PolicyEdit::default()
            .set("server.admin_listen", "[::]:8081")
            .text(),
    )
    .unwrap();
    let (code, _, stderr) = cli(&["serve", "--policy", policy.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("server.admin_listen") && stderr.contains("loopback"),
        "{stderr}"
    );
}

#[test]
fn a_disabled_default_owner_takes_no_new_peers_until_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    add_peer(dir.path(), "first");
    let (code, _, stderr) = cli_on(data, &["admin", "disable", "operator"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = cli_on(data, &["peer", "add", "second"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"operator\" is disabled"), "{stderr}");
    let (code, _, stderr) = cli_on(data, &["admin", "enable", "operator"]);
    assert_eq!(code, 0, "{stderr}");
    add_peer(dir.path(), "second");
    let (_, audit, _) = cli_on(data, &["audit"]);
    assert!(audit.contains("admin.enabled"), "{audit}");
}

#[tokio::test]
async fn revoking_admin_tokens_stops_them_at_the_next_request() {
    let gw = TestGateway::start().await;
    let (code, _, stderr) =
        gw.cli_with_stdin(&["admin", "add", "ops"], "a long enough admin password\n");
    assert_eq!(code, 0, "{stderr}");
    let (_, token, _) = gw.cli(&["admin", "token", "ops"]);
    let token = token.trim().to_owned();
    let list = || async {
        reqwest::Client::new()
            .get(format!("{}/v1/peers", gw.admin))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(list().await, 200);
    let (code, _, stderr) = gw.cli(&["admin", "revoke-tokens", "ops"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(list().await, 401);
    // The password still works.
    let status = reqwest::Client::new()
        .get(format!("{}/v1/peers", gw.admin))
        .basic_auth("ops", Some("a long enough admin password"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn a_flood_of_bad_admin_logins_is_throttled_and_leaves_one_record_a_minute() {
    let gw = TestGateway::start().await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..25 {
        let status = client
            .get(format!("{}/v1/peers", gw.admin))
            .basic_auth("nobody", Some("guess"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        statuses.push(status);
    }
    // The default budget allows 10 failed attempts a minute per address.
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        15,
        "{statuses:?}"
    );
    let (_, audit, _) = gw.cli(&["audit"]);
    assert_eq!(audit.matches("admin.login_failed").count(), 11, "{audit}");
    assert_eq!(audit.matches("throttled").count(), 1, "{audit}");
    gw.stop().await;
}

/// The schema of a store written before administrators existed (user_version 3).
const VERSION_3_SCHEMA: &str = r#"
CREATE TABLE peers (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, status TEXT NOT NULL,
    rate_per_minute INTEGER NOT NULL, created_at INTEGER NOT NULL, last_used_at INTEGER,
    password_hash TEXT);
CREATE TABLE credentials (token_id TEXT PRIMARY KEY, peer_id TEXT NOT NULL REFERENCES peers(id),
    secret_hash BLOB NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER,
    kind TEXT NOT NULL DEFAULT 'token');
CREATE TABLE tasks (id TEXT PRIMARY KEY, peer_id TEXT NOT NULL, context_id TEXT NOT NULL,
    state TEXT NOT NULL, body TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE contexts (peer_id TEXT NOT NULL, context_id TEXT NOT NULL, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, PRIMARY KEY (peer_id, context_id));
CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL, task_id TEXT NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL,
    created_at INTEGER NOT NULL);
CREATE TABLE documents (name TEXT PRIMARY KEY, etag TEXT NOT NULL, modified_at INTEGER NOT NULL);
INSERT INTO peers (id, name, status, rate_per_minute, created_at) VALUES ('peer_old', 'old-peer', 'active', 30, 1);
INSERT INTO contexts VALUES ('peer_old', 'ctx-old', 1, 2);
INSERT INTO messages (peer_id, context_id, task_id, role, body, created_at) VALUES ('peer_old', 'ctx-old', 't1', 'peer', 'from before', 1);
PRAGMA user_version = 3;
"#;

#[tokio::test]
async fn a_store_from_before_administrators_gives_its_peers_to_operator() {
    if skip_unless_sqlite("the old store is a SQLite file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(peergate::store::sqlite::DATABASE_FILE);
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::raw_sql(VERSION_3_SCHEMA)
        .execute(&mut db)
        .await
        .unwrap();
    drop(db);
    let data = dir.path();
    let (code, list, stderr) = cli_on(data, &["peer", "list"]);
    assert_eq!(code, 0, "{stderr}");
    let old: Vec<&str> = list.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((old[0], old[6]), ("old-peer", "operator"), "{list}");
    let (_, admins, _) = cli_on(data, &["admin", "list"]);
    let operator: Vec<&str> = admins.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&operator[..3], ["operator", "active", "none"], "{admins}");
    // Its conversation is in operator's account.
    let (code, _, _) = cli_with_stdin_on(
        data,
        &["admin", "password", "operator"],
        "operator's new password\n",
    );
    assert_eq!(code, 0);
    let gw_dir = dir.path().to_owned();
    let server = ServeProcess::start(&gw_dir, data);
    let conversations: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{}/v1/conversations", server.admin_addr))
        .basic_auth("operator", Some("operator's new password"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        conversations["conversations"][0]["contextId"], "ctx-old",
        "{conversations}"
    );
}

#[test]
fn a_second_server_on_a_served_data_directory_refuses_and_names_the_first() {
    if skip_unless_sqlite("one process per SQLite file is the embedded engine's rule") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = ServeProcess::start(dir.path(), &data);
    let data_arg = data.to_str().unwrap();
    // A second server on the same data directory must stop at once, naming the first.
    let mut second = std::process::Command::new(bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--data", data_arg])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!("a second server kept running on a served data directory");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", first.child.id())),
        "names the process holding the store: {stderr}"
    );
    // The command line keeps working beside the running server, and the first still serves.
    let (code, _, stderr) = cli_on(&data, &["peer", "add", "alice"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, list, _) = cli_on(&data, &["peer", "list"]);
    assert_eq!(code, 0);
    assert!(list.contains("alice"), "{list}");
    let mut health = std::net::TcpStream::connect(first.addr).unwrap();
    std::io::Write::write_all(
        &mut health,
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut health, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Once the first is gone (even killed), the directory can be served again.
    first.kill();
    let again = ServeProcess::start(dir.path(), &data);
    again.kill();
}

#[tokio::test]
async fn an_embedded_store_copies_into_postgresql_and_serves_from_there() {
    if skip_unless_sqlite("it copies an embedded store") {
        return;
    }
    let Some(cluster) = postgres::cluster() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, "alice");
    let server = ServeProcess::start(dir.path(), &data);
    let first = send_text(&server.door(), &token, "remember this", Some("ctx-1")).await;
    assert_eq!(task_of(&first)["status"]["state"], "TASK_STATE_COMPLETED");
    let url = cluster.database_for(&dir.path().join("postgres"));
    let data_arg = data.to_str().unwrap();
    // Identities bound to a peer and to an administrator come along too.
    let certificate = "ab".repeat(32);
    for bind in [
        &[
            "peer",
            "bind",
            "alice",
            "--certificate-sha256",
            &certificate,
        ][..],
        &["admin", "bind", "operator", "--subject", "ops@corp"],
    ] {
        let (code, _, stderr) = cli_on(&data, bind);
        assert_eq!(code, 0, "{stderr}");
    }

    // A store being served is not copied half-way through its turns.
    let (code, _, stderr) = cli(&["store", "copy", "--data", data_arg, "--to", &url]);
    assert_ne!(code, 0);
    assert!(
        one_line(&stderr).contains("stop it before copying"),
        "{stderr}"
    );
    assert!(!stderr.contains(&url), "the URL is not echoed: {stderr}");
    server.kill();

    let (code, _, stderr) = cli(&["store", "copy", "--data", data_arg, "--to", &url]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("peers 1") && stderr.contains("messages 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("peer_identities 1") && stderr.contains("admin_identities 1"),
        "every table is copied: {stderr}"
    );
    let (code, shown, _) = cli(&[
        "peer", "list", "--json", "--data", data_arg, "--store", &url,
    ]);
    assert_eq!(code, 0);
    assert!(shown.contains(&certificate), "{shown}");

    // Served from PostgreSQL: the same token opens the door, the conversation goes on, and the
    // audit log came along.
    let served = ServeProcess::start_with(dir.path(), &data, &["--store", &url], &[]);
    assert!(
        served.log_text().contains("store=postgresql"),
        "{}",
        served.log_text()
    );
    let next = send_text(&served.door(), &token, "and now?", Some("ctx-1")).await;
    let reply = reply_text(task_of(&next));
    assert!(reply.contains("history: 2 earlier messages"), "{reply}");
    served.kill();
    let (code, audit, _) = cli(&["audit", "--data", data_arg, "--store", &url]);
    assert_eq!(code, 0);
    assert!(audit.contains("peer.created"), "{audit}");

    // Copying again would mix two stores: refused, and nothing is written.
    let (code, _, stderr) = cli(&["store", "copy", "--data", data_arg, "--to", &url]);
    assert_ne!(code, 0);
    assert!(one_line(&stderr).contains("not empty"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_and_the_access_log_name_each_request_and_never_a_secret() {
    let policy = PolicyEdit::default()
        .set("log.format", "json")
        .set("log.access", true);
    let served = ServedPolicy::start(&policy, &["alice"], &[]);
    let token = served.tokens[0].clone();
    let door = served.server.door();
    let secret_text = "the prompt must not reach the log 7f3a";
    let answered = send_text(&door, &token, secret_text, None).await;
    assert_eq!(
        task_of(&answered)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let wrong = format!("{}AAAAAA", &token[..token.len() - 6]);
    let (status, _) = post_raw(&door, Some(&wrong), "{}".to_owned()).await;
    assert_eq!(status, 401);
    // A JSON-RPC error travels under HTTP 200.
    let (status, _) = post_raw(
        &door,
        Some(&token),
        json!({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": "no-such-task"}})
            .to_string(),
    )
    .await;
    assert_eq!(status, 200);
    let _ = reqwest::get(format!(
        "http://{}/health?token=query-secret",
        served.server.addr
    ))
    .await
    .unwrap();
    let log = served.server.log_with("\"route\":\"health\"");
    // Every line is one JSON object.
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let access: Vec<&Value> = lines
        .iter()
        .filter(|line| line["target"] == "peergate::access")
        .collect();
    let peer_id = {
        let (code, out, err) = cli_on(&served.data, &["peer", "list"]);
        assert_eq!(code, 0, "{err}");
        out.split_whitespace()
            .find(|word| word.starts_with("peer_"))
            .unwrap()
            .to_owned()
    };
    let sent = access
        .iter()
        .find(|line| line["status"] == 200 && line["route"] == "door")
        .expect("an access line for the SendMessage");
    assert_eq!(sent["peer"], peer_id.as_str(), "{sent}");
    assert_eq!(sent["peer_name"], "alice", "{sent}");
    assert_eq!(sent["method"], "POST");
    // The operation, as the binding's handler named it.
    assert_eq!(
        (&sent["binding"], &sent["a2a_method"]),
        (&json!("jsonrpc"), &json!("SendMessage")),
        "{sent}"
    );
    assert!(sent["latency_ms"].as_f64().is_some(), "{sent}");
    // Milliseconds with three decimals at most.
    let latency = sent["latency_ms"].to_string();
    assert!(
        latency
            .split('.')
            .nth(1)
            .is_none_or(|decimals| decimals.len() <= 3),
        "{latency}"
    );
    assert_eq!(sent["rpc_error"], "-", "{sent}");
    // The pipeline's record: the task the call was answered with, and how it ended.
    assert!(
        sent["task"].as_str().is_some_and(|id| id.len() == 36),
        "{sent}"
    );
    assert_eq!(sent["outcome"], "answered", "{sent}");
    let not_found = access
        .iter()
        .find(|line| line["a2a_method"] == "GetTask")
        .expect("an access line for the GetTask");
    assert_eq!(
        (&not_found["status"], &not_found["rpc_error"]),
        (&json!(200), &json!("-32001")),
        "the JSON-RPC error code beside the 200: {not_found}"
    );
    // The task it named, and an operation that ran and answered an error.
    assert_eq!(
        (&not_found["task"], &not_found["outcome"]),
        (&json!("no-such-task"), &json!("failed")),
        "{not_found}"
    );
    assert!(
        sent["request_id"].as_str().is_some_and(|id| id.len() == 36),
        "{sent}"
    );
    assert_eq!(sent["client"], "127.0.0.1");
    let refused = access
        .iter()
        .find(|line| line["status"] == 401)
        .expect("an access line for the 401");
    assert_eq!(refused["peer"], "-");
    assert_eq!(refused["peer_name"], "-");
    assert_eq!(
        refused["a2a_method"], "-",
        "refused before any operation: {refused}"
    );
    assert_eq!(refused["reason"], "unauthenticated");
    assert_eq!(
        (&refused["task"], &refused["outcome"]),
        (&json!("-"), &json!("-"))
    );
    for secret in [token.as_str(), wrong.as_str(), secret_text, "query-secret"] {
        assert!(!log.contains(secret), "the log holds {secret:?}");
    }
}

#[test]
fn log_format_json_on_the_command_line_wins_over_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServeProcess::start_with(dir.path(), &data, &["--log-format", "json"], &[]);
    let log = server.log_with("listening on");
    let first = log.lines().next().unwrap();
    let line: Value = serde_json::from_str(first).unwrap_or_else(|_| panic!("not JSON: {first}"));
    assert_eq!(line["level"], "INFO", "{line}");
    let (code, _, err) = cli(&["--log-format", "yaml", "peer", "list"]);
    assert_eq!(code, 2);
    assert!(err.contains("text") && err.contains("json"), "{err}");
}

#[test]
fn a_command_line_mistake_is_told_whole_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for (args, needles) in [
        (
            vec!["peer", "add", "--data", data],
            vec!["required", "<NAME>"],
        ),
        (
            vec!["admin", "budget", "ops", "--model", "maybe", "--data", data],
            vec!["maybe", "allow", "forbid"],
        ),
        (
            vec!["--log-format", "yaml", "audit"],
            vec!["yaml", "text", "json"],
        ),
    ] {
        let (code, _, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        for needle in needles {
            assert!(
                err.contains(needle),
                "{args:?}: {needle:?} missing from {err}"
            );
        }
        assert!(!err.contains("Usage:"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_of_a_live_store_restores_every_answered_task_and_token() {
    let Some((dir, data, token)) = sqlite_store_with_alice() else {
        return;
    };
    let server = ServeProcess::start(dir.path(), &data);
    let door = server.door();
    let mut answered = Vec::new();
    for n in 0..12 {
        let response = send_text(&door, &token, &format!("message {n}"), None).await;
        answered.push(task_of(&response).clone());
    }
    // Taken while the server serves, and writes go on during it.
    let writing = {
        let (door, token) = (door.clone(), token.clone());
        tokio::spawn(async move {
            for n in 0..10 {
                send_text(&door, &token, &format!("during the backup {n}"), None).await;
            }
        })
    };
    let file = dir.path().join("backup.sqlite3");
    let (code, _, err) = cli(&[
        "backup",
        file.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // The card's signing key is a secret of the data directory the backup does not hold.
    assert!(
        err.contains("not in the backup: the Agent Card's signing key, card-signing-ed25519.pem"),
        "{err}"
    );
    writing.await.unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the backup is readable by others");
    }
    // Never over an existing file.
    let (code, _, err) = cli(&[
        "backup",
        file.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("exists already"), "{err}");
    drop(server);

    // Restored into a fresh data directory: every task answered before it reads as it was, and
    // the token still opens the door.
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::copy(&file, restored.join("peergate.sqlite3")).unwrap();
    let server = ServeProcess::start(dir.path(), &restored);
    for task in &answered {
        let id = task["id"].as_str().unwrap();
        let read = get_task(&server.door(), &token, id, None).await;
        assert_eq!(read["result"]["status"], task["status"], "{read}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn peer_add_takes_its_defaults_from_the_policy_the_server_runs() {
    if skip_unless_sqlite("the served policy is noted in the SQLite data directory") {
        return;
    }
    let policy = PolicyEdit::default().set("peers.default_rate_per_minute", 5);
    let served = ServedPolicy::start(&policy, &["alice"], &[]);
    // From another directory, without --policy: the server's 5/min, not the default 30/min.
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, token, err) = cli_in(
        elsewhere.path(),
        &[
            "peer",
            "add",
            "bob",
            "--data",
            served.data.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("5/min"), "{err}");
    assert!(
        err.contains("policy.toml"),
        "names where the defaults came from: {err}"
    );
    // And the server agrees: the sixth request in a minute is refused.
    let door = served.server.door();
    let token = token.trim();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
        statuses.push(post_raw(&door, Some(token), body.to_string()).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
}

#[test]
fn every_command_says_which_store_and_a_missing_or_foreign_one_is_refused_plainly() {
    if skip_unless_sqlite("the data directory is the SQLite store's") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    // A directory that does not exist: refused by the commands that read a store...
    for args in [
        vec!["peer", "list", "--data", data_arg],
        vec!["audit", "--data", data_arg],
        vec!["admin", "list", "--data", data_arg],
        vec!["peer", "revoke", "alice", "--data", data_arg],
    ] {
        let (code, _, err) = cli(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains(data_arg) && err.contains("--data"),
            "{args:?}: {err}"
        );
        assert!(!data.exists(), "{args:?} created the directory");
    }
    // ...and created, saying so, by the first peer add.
    let (code, _, err) = cli(&["peer", "add", "alice", "--data", data_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("creating a new store in"), "{err}");
    // Every command names the store it opened.
    let (code, _, err) = cli(&["peer", "list", "--data", data_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("store: sqlite (") && err.contains("peergate.sqlite3"),
        "{err}"
    );
    // Another user's store: one line naming the path and the likely cause, not a SQLite code.
    let nobody = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()])
        .args(["peer", "list", "--data", data_arg])
        .output();
    match nobody {
        Ok(output) if output.status.code() != Some(127) && !output.stderr.is_empty() => {
            let err = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{err}");
            assert!(err.contains(data_arg), "{err}");
            assert!(err.contains("another"), "{err}");
            assert!(!err.contains("code:"), "{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
        _ => skipped("setpriv cannot run the command as another user here"),
    }
    // A store that belongs to another user is refused even where access checks would pass
    // (root): files made beside it would be this user's, and the gateway's user locked out.
    let database = data.join("peergate.sqlite3");
    if std::os::unix::fs::chown(&database, Some(65534), Some(65534)).is_ok() {
        let (code, _, err) = cli(&["peer", "list", "--data", data_arg]);
        assert_ne!(code, 0, "{err}");
        assert!(err.contains("another"), "{err}");
    }
}

#[test]
fn mistakes_are_told_with_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    // Plain http: the flag that allows it on loopback is named.
    let secret = format!("k={}", "A".repeat(43));
    let (code, _, err) = cli(&[
        "card",
        "verify",
        "http://127.0.0.1:9/.well-known/agent-card.json",
        "--secret",
        &secret,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--dangerous-allow-http-loopback"), "{err}");
    // A key set that holds no key is not "give --jwks" when --jwks was given.
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"{"keys":[]}"#).unwrap();
    let card = dir.path().join("card.json");
    std::fs::write(&card, r#"{"name":"a card"}"#).unwrap();
    let (code, _, err) = cli(&[
        "card",
        "verify",
        card.to_str().unwrap(),
        "--jwks",
        empty.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("hold no key") && !err.contains("give --"),
        "{err}"
    );
    // A listen address with a name says to use an IP.
    for flag in ["--listen", "--admin-listen"] {
        let (code, _, err) = cli(&["serve", flag, "localhost:8080"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("127.0.0.1:8080") && err.contains("IP address"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_the_command_line_issues_are_admitted_at_once_during_a_flood_of_made_up_ids() {
    // No address runs out of failed attempts, so the flood reaches the credential check at
    // full speed; verdicts are cached for 5 s, so only the command line's announcement can
    // explain a revocation seen within a second.
    let policy = PolicyEdit::default()
        .set("limits.failed_auth_per_ip_per_minute", 1_000_000_000)
        .set("limits.per_ip_per_minute", 1_000_000_000)
        .set("auth.credential_cache_seconds", 5);
    let served = ServedPolicy::start(&policy, &["alice"], &[]);
    let door = served.server.door();
    let flood = Flood::start(&door, 16, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let data = served.data.clone();
    let on_cli = move |args: &'static [&'static str]| {
        let data = data.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let (code, stdout, stderr) = cli_on(&data, args);
                assert_eq!(code, 0, "{args:?}: {stderr}");
                stdout.trim().to_owned()
            })
            .await
            .unwrap()
        }
    };
    let within = Duration::from_secs(1);
    let added = on_cli(&["peer", "add", "bob"]).await;
    assert!(
        admitted_within(&door, &added, within).await.is_some(),
        "a peer added on the command line was not admitted within a second"
    );
    let rotated = on_cli(&["peer", "rotate", "bob"]).await;
    assert!(
        admitted_within(&door, &rotated, within).await.is_some(),
        "a rotated token was not admitted within a second"
    );
    // The revocation is heard at once too, though the verdict is cached for longer.
    on_cli(&["peer", "revoke", "bob"]).await;
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    let revoked_at = Instant::now();
    while post_raw(&door, Some(&rotated), probe.to_string()).await.0 != 401 {
        assert!(
            revoked_at.elapsed() < within,
            "a revocation on the command line was not heard within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reinstated = on_cli(&["peer", "reinstate", "bob"]).await;
    assert!(
        admitted_within(&door, &reinstated, within).await.is_some(),
        "a reinstated peer was not admitted within a second"
    );
    let key = on_cli(&["peer", "key", "alice"]).await;
    assert!(key.starts_with("pgk_"));
    let refused = flood.stop().await;
    assert!(refused > 200, "the flood hardly ran: {refused} refusals");
}

#[tokio::test]
async fn a_credential_whose_announcement_was_lost_is_admitted_by_the_periodic_re_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    add_peer(&data, "alice");
    let server = ServeProcess::start(dir.path(), &data);
    // The gateway stops hearing the command line: its announcements are lost.
    std::fs::remove_file(data.join("peergate.changes.sock")).unwrap();
    // Nothing else tells the gateway of this one: only the periodic re-read admits it.
    let token = add_peer(&data, "bob");
    // Within the re-read's period (10 s), with room for a slow machine.
    assert!(
        admitted_within(&server.door(), &token, Duration::from_secs(15))
            .await
            .is_some(),
        "a credential whose announcement was lost was never admitted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_access_log_names_the_request_id_an_internal_error_answered_with() {
    let policy = PolicyEdit::default()
        .set("log.format", "json")
        .set("log.access", true);
    let served = ServedPolicy::start(&policy, &["alice"], &[]);
    let door = served.server.door();
    // The store breaks under the running server: SendMessage answers -32603 inside a 200.
    let connection = rusqlite::Connection::open(served.data.join("peergate.sqlite3")).unwrap();
    connection
        .execute_batch("ALTER TABLE tasks RENAME TO tasks_gone")
        .unwrap();
    let answer = send_text(&door, &served.tokens[0], "cannot be stored", None).await;
    assert_eq!(error_code(&answer), -32603, "{answer}");
    let answered = answer["error"]["data"][0]["metadata"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = served
        .server
        .log_with(&format!("\"request_id\":\"{answered}\""));
    let access = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["target"] == "peergate::access" && line["route"] == "door")
        .expect("an access line for the SendMessage");
    assert_eq!(access["status"], 200);
    assert_eq!(access["request_id"], answered.as_str(), "{access}");
    // And the cause is logged under that id.
    assert!(
        log.lines()
            .any(|line| line.contains(&answered) && !line.contains("peergate::access")),
        "no log line holds the cause under {answered}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_on_the_door_says_only_whether_and_the_admin_listener_says_what() {
    let served = ServedPolicy::start(&PolicyEdit::default(), &[], &[]);
    let door: Value = reqwest::get(format!("http://{}/ready", served.server.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(door, json!({"status": "ready"}));
    let admin = reqwest::get(format!("http://{}/ready", served.server.admin_addr))
        .await
        .unwrap();
    assert_eq!(admin.status(), 200);
    let admin: Value = admin.json().await.unwrap();
    assert_eq!(
        admin,
        json!({"status": "ready", "store": "ok", "redis": "not_configured", "backend": "echo"})
    );
}

/// `peergate backup FILE --data DATA`: (exit code, stderr).
/// A SQLite store holding the peer alice, and alice's token, for the backup tests; `None`
/// (said once) when the suite runs on another engine.
fn sqlite_store_with_alice() -> Option<(tempfile::TempDir, std::path::PathBuf, String)> {
    if skip_unless_sqlite("the backup copies the SQLite file") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = add_peer(&data, "alice");
    Some((dir, data, token))
}

fn backup_to(file: &std::path::Path, data: &std::path::Path) -> (i32, String) {
    let (code, _, err) = cli(&[
        "backup",
        file.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    (code, err)
}

#[test]
fn a_backup_is_never_written_where_another_user_could_take_or_swap_it() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let Some((dir, data, _)) = sqlite_store_with_alice() else {
        return;
    };
    // A directory anyone can write to, without the sticky bit: refused, nothing written.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = backup_to(&open.join("copy.sqlite3"), &data);
    assert_ne!(code, 0);
    assert!(err.contains("writable by other users"), "{err}");
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        0,
        "something was written"
    );

    // A directory of another user's (root runs the backup, the user could rename the copy):
    // refused. Only where this test may give a directory away.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    if std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).is_ok() {
        let (code, err) = backup_to(&theirs.join("copy.sqlite3"), &data);
        assert_ne!(code, 0);
        assert!(err.contains("belongs to another user"), "{err}");
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    }

    // A shared directory with the sticky bit (like /tmp), and another user racing to put a link
    // where the copy goes: the copy is never written through it, and a copy reported written
    // is this user's, 0600, and whole.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let loot = dir.path().join("loot");
    std::fs::create_dir(&loot).unwrap();
    std::fs::set_permissions(&loot, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for round in 0..5 {
        let target = shared.join(format!("copy-{round}.sqlite3"));
        let script = format!(
            "end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do ln -s {loot}/stolen-{round} {target} 2>/dev/null; rm -f {target} 2>/dev/null; done",
            loot = loot.display(),
            target = target.display()
        );
        let attacker = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(&script)
            .spawn();
        let Ok(mut attacker) = attacker else {
            skipped("setpriv cannot run a racing user here");
            return;
        };
        std::thread::sleep(Duration::from_millis(50));
        let (code, err) = backup_to(&target, &data);
        let _ = attacker.wait();
        if code == 0 {
            let metadata = std::fs::symlink_metadata(&target).unwrap();
            assert!(
                metadata.file_type().is_file(),
                "round {round}: not a plain file"
            );
            assert_eq!(metadata.uid(), rustix_uid(), "round {round}: not ours");
            assert_eq!(
                metadata.permissions().mode() & 0o777,
                0o600,
                "round {round}"
            );
        } else {
            assert!(err.contains("never overwrites"), "round {round}: {err}");
        }
        let stolen = loot.join(format!("stolen-{round}"));
        assert!(
            !stolen.exists(),
            "round {round}: the copy went through the link"
        );
    }
}

fn rustix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    let probe = tempfile::tempfile().unwrap();
    probe.metadata().unwrap().uid()
}

#[test]
fn a_copy_removed_under_the_backup_is_never_reported_written() {
    let Some((dir, data, token)) = sqlite_store_with_alice() else {
        return;
    };
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Removes a copy as soon as it has any content, as fast as it can.
    let remover = {
        let (out, stop) = (out.clone(), stop.clone());
        std::thread::spawn(move || {
            let targets: Vec<_> = (0..10)
                .map(|round| out.join(format!("copy-{round}.sqlite3")))
                .collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for target in &targets {
                    if std::fs::metadata(target).is_ok_and(|m| m.len() > 0) {
                        let _ = std::fs::remove_file(target);
                    }
                }
            }
        })
    };
    for round in 0..10 {
        let target = out.join(format!("copy-{round}.sqlite3"));
        let (code, err) = backup_to(&target, &data);
        if code == 0 {
            // Reported written: with its real size, which is a whole store's.
            let bytes: u64 = err
                .rsplit_once('(')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("round {round}: no size in {err:?}"));
            assert!(
                bytes >= 4096,
                "round {round}: reported {bytes} bytes: {err}"
            );
        } else {
            assert!(
                err.contains("removed")
                    || err.contains("vanished")
                    || err.contains("failed")
                    || err.contains("cannot"),
                "round {round}: {err}"
            );
            assert!(!err.contains(&token));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    remover.join().unwrap();
}

#[test]
fn a_grpc_listener_that_cannot_be_served_as_asked_stops_start_up_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The flag without a [grpc] section: nothing to override.
    let (code, _, stderr) = cli_on(
        &data,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ],
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--grpc-listen") && stderr.contains("[grpc]"),
        "{stderr}"
    );
    // A listener on every address with no address for the card: a card naming 0.0.0.0 would
    // send every partner nowhere.
    let full = std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap();
    let policy = dir.path().join("grpc.toml");
    std::fs::write(&policy, full.replace("127.0.0.1:8082", "0.0.0.0:8082")).unwrap();
    let (code, _, stderr) = cli_on(&data, &["serve", "--policy", policy.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("grpc.public_address") && stderr.contains("unspecified"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_door_on_every_address_needs_the_url_partners_reach() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    // As a container's command would run it: refused, naming the setting and how to give it.
    let (code, _, stderr) = cli(&[
        "serve",
        "--data",
        data_arg,
        "--listen",
        "0.0.0.0:0",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("server.public_base_url") && stderr.contains("PEERGATE_PUBLIC_BASE_URL"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    // Given from the environment, it serves, and the card names it.
    let server = ServeProcess::start_args(
        dir.path(),
        &["--data", data_arg],
        &[("PEERGATE_PUBLIC_BASE_URL", "https://agents.example.com")],
    );
    let card = server.card().await;
    let url = card["supportedInterfaces"][0]["url"].as_str().unwrap();
    assert!(url.starts_with("https://agents.example.com/"), "{card}");
    // A bad one is refused as the policy's own value would be, without echoing it.
    for bad in [
        "https://agents.example.com/",
        "https://user:secret@agents.example.com",
    ] {
        let (code, _, stderr) = cli(&["serve", "--data", data_arg, "--public-base-url", bad]);
        assert_ne!(code, 0);
        assert!(stderr.contains("server.public_base_url"), "{stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    }
}

#[test]
fn policy_init_writes_each_profile_and_policy_check_validates_it_without_dialling_anything() {
    let dir = tempfile::tempdir().unwrap();
    for profile in ["narrow", "full", "agent"] {
        let path = dir.path().join(format!("{profile}.toml"));
        let (code, _, stderr) = cli(&[
            "policy",
            "init",
            "--profile",
            profile,
            "--out",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        // Only what differs from the defaults, commented.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# A starting policy"), "{text}");
        assert!(!text.contains("[limits]"), "{profile}: {text}");
        // The agent profile names an agent nobody runs: checking dials nothing.
        let (code, stdout, stderr) = cli(&["policy", "check", "--policy", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{profile}: {stderr}");
        assert!(stderr.contains("valid"), "{stderr}");
        // The policy in effect: the file over the defaults, every section present.
        let effective: toml::Table = toml::from_str(&stdout).unwrap();
        assert_eq!(
            effective["limits"]["per_ip_per_minute"].as_integer(),
            Some(120)
        );
        let backend = effective["model"]["backend"].as_str().unwrap();
        assert_eq!(backend, if profile == "agent" { "a2a" } else { "echo" });
        let streaming = effective["capabilities"]["streaming"].as_bool().unwrap();
        assert_eq!(streaming, profile == "full");
    }
    // The commented defaults come from the binary itself, not from a file of the source tree.
    let (code, defaults, stderr) = cli(&["policy", "defaults"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(defaults, peergate::config::EMBEDDED_DEFAULT);
    assert!(
        defaults.contains("[telemetry]") && defaults.contains("# "),
        "{defaults}"
    );
    // Profiles compose with the full surface: an agent behind the door with all of A2A 1.0.
    let path = dir.path().join("agent-full.toml");
    let out = path.to_str().unwrap();
    let args = [
        "policy",
        "init",
        "--profile",
        "agent",
        "--full",
        "--out",
        out,
    ];
    let (code, _, stderr) = cli(&args);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = cli(&["policy", "check", "--policy", out]);
    assert_eq!(code, 0, "{stderr}");
    let effective: toml::Table = toml::from_str(&stdout).unwrap();
    assert_eq!(effective["model"]["backend"].as_str(), Some("a2a"));
    for capability in [
        "streaming",
        "subscriptions",
        "push_notifications",
        "http_json",
    ] {
        assert_eq!(
            effective["capabilities"][capability].as_bool(),
            Some(true),
            "{capability}"
        );
    }
    // What several instances must share: each missing setting named, and exit 1.
    let full = dir.path().join("full.toml");
    let (code, _, stderr) = cli(&[
        "policy",
        "check",
        "--cluster",
        "--policy",
        full.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    for setting in [
        "server.public_base_url",
        "[[signing.keys]]",
        "push.key_env or push.key_file",
    ] {
        assert!(
            stderr.contains(&format!("missing for several instances: {setting}")),
            "{setting}: {stderr}"
        );
    }
    std::fs::write(
        &full,
        "[server]\npublic_base_url = \"https://agents.example.com\"\n\n[[signing.keys]]\nkid = \"k1\"\nalg = \"EdDSA\"\nprivate_key_file = \"keys/card.pem\"\n",
    )
    .unwrap();
    let (code, _, stderr) = cli(&[
        "policy",
        "check",
        "--cluster",
        "--policy",
        full.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("missing"), "{stderr}");
    // It does not overwrite.
    let path = dir.path().join("narrow.toml");
    let (code, _, stderr) = cli(&["policy", "init", "--out", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot create"), "{stderr}");
    // A misspelt key is named with its line.
    std::fs::write(&path, "[server]\n\nlisen = \"127.0.0.1:9000\"\n").unwrap();
    let (code, _, stderr) = cli(&["policy", "check", "--policy", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("line 3, key `server.lisen`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_fragment_serves_as_it_is_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("fragment.toml");
    // A fragment as the docs show them: no [server], no [card], no [model].
    std::fs::write(&policy, "[capabilities]\nstreaming = true\n").unwrap();
    let server = ServeProcess::start_with(
        dir.path(),
        &dir.path().join("data"),
        &["--policy", policy.to_str().unwrap()],
        &[],
    );
    let card = server.card().await;
    assert_eq!(card["capabilities"]["streaming"], true, "{card}");
    assert_eq!(card["name"], "peergate", "the default's");
}

#[test]
fn a_backup_takes_the_push_notification_key_with_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some((dir, data, _)) = sqlite_store_with_alice() else {
        return;
    };
    // Without a generated key, the backup is the store alone.
    let alone = dir.path().join("alone.sqlite3");
    let (code, err) = backup_to(&alone, &data);
    assert_eq!(code, 0, "{err}");
    assert!(
        !dir.path()
            .join("alone.sqlite3.push-notification.key")
            .exists()
    );
    // With one (the first start with push notifications on generates it), it goes beside.
    let key = b"key-bytes-as-generated-0123456789abcdef";
    std::fs::write(data.join("push-notification.key"), key).unwrap();
    let file = dir.path().join("backup.sqlite3");
    let (code, err) = backup_to(&file, &data);
    assert_eq!(code, 0, "{err}");
    let copied = dir.path().join("backup.sqlite3.push-notification.key");
    assert_eq!(std::fs::read(&copied).unwrap(), key);
    let mode = std::fs::metadata(&copied).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(err.contains("push-notification key"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_added_without_a_token_signs_in_only_the_way_it_was_given() {
    let policy = PolicyEdit::default().set("auth.schemes", ["bearer", "basic"]);
    let served = ServedPolicy::start(&policy, &[], &[]);
    let (code, stdout, stderr) = cli_on(&served.data, &["peer", "add", "bob", "--no-token"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "", "no token on stdout");
    assert!(stderr.contains("with no token"), "{stderr}");
    let password = "a long enough password for bob";
    let (code, _, stderr) = cli_with_stdin_on(
        &served.data,
        &["peer", "password", "bob"],
        &format!("{password}\n"),
    );
    assert_eq!(code, 0, "{stderr}");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
        {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "by password"}]}}});
    let answered: Value = reqwest::Client::new()
        .post(served.server.door())
        .basic_auth("bob", Some(password))
        .json(&send)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        task_of(&answered)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // No token was ever issued to it: the audit log has its creation and its password.
    let (code, audit, stderr) = cli_on(&served.data, &["audit"]);
    assert_eq!(code, 0, "{stderr}");
    let bobs: Vec<&str> = audit.lines().filter(|l| l.contains("peer:bob")).collect();
    assert!(bobs.iter().any(|l| l.contains("peer.created")), "{audit}");
    assert!(bobs.iter().any(|l| l.contains("password set")), "{audit}");
    assert!(!bobs.iter().any(|l| l.contains("token id")), "{audit}");
}

/// `peergate` as the operator reads what passed: conversations a page at a time with every
/// part, a task, usage per owner and peer by period; every listing as JSON too.
#[tokio::test(flavor = "multi_thread")]
async fn the_operator_reads_conversations_tasks_and_usage_and_every_listing_as_json() {
    let served = ServedPolicy::start(&PolicyEdit::default(), &["alice"], &[]);
    let (door, token) = (served.server.door(), served.tokens[0].clone());
    let first = send_text(&door, &token, "first", Some("ctx-1")).await;
    send_text(&door, &token, "second", Some("ctx-2")).await;
    let task_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    let json_of = |args: &[&str]| -> serde_json::Value {
        let (code, out, stderr) = cli_on(&served.data, args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };

    let page = json_of(&["conversations", "list", "--limit", "1", "--json"]);
    assert_eq!(page["conversations"].as_array().unwrap().len(), 1, "{page}");
    let cursor = page["next"].as_str().expect("a next page").to_owned();
    let rest = json_of(&["conversations", "list", "--cursor", &cursor, "--json"]);
    assert_eq!(rest["conversations"].as_array().unwrap().len(), 1, "{rest}");
    assert!(rest.get("next").is_none());
    let none = json_of(&["conversations", "list", "--peer", "bob", "--json"]);
    assert_eq!(none["conversations"], serde_json::json!([]));

    let shown = json_of(&["conversations", "show", "alice", "ctx-1", "--json"]);
    assert_eq!(
        shown["messages"][0]["parts"],
        serde_json::json!([{"kind": "text", "text": "first"}])
    );
    let (code, table, _) = cli_on(&served.data, &["conversations", "show", "alice", "ctx-1"]);
    assert_eq!(code, 0);
    assert!(table.contains("  first"), "{table}");

    let task = json_of(&["task", "show", "alice", &task_id]);
    assert_eq!(task["id"], serde_json::json!(task_id));
    let (code, _, stderr) = cli_on(&served.data, &["task", "show", "alice", "no-such-task"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no such task"), "{stderr}");

    let now = peergate::clock::Clock::now(&peergate::clock::SystemClock);
    let month = &peergate::clock::UtcDay::of(now).month().to_string();
    let usage = json_of(&["usage", "--period", month, "--json"]);
    assert_eq!(usage["owners"][0]["owner"], "operator", "{usage}");
    assert_eq!(usage["owners"][0]["peers"][0]["peer"], "alice", "{usage}");
    assert_eq!(usage["owners"][0]["peers"][0]["requests"], 2, "{usage}");
    let (code, _, stderr) = cli_on(&served.data, &["usage", "--period", "last-week"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--period"), "{stderr}");
    let (code, _, stderr) = cli_on(&served.data, &["usage", "--owner", "nobody"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("nobody"), "{stderr}");

    let peers = json_of(&["peer", "list", "--json"]);
    assert_eq!(peers[0]["name"], "alice", "{peers}");
    assert_eq!(peers[0]["credentials"], json!(["token"]), "{peers}");
    let (_, table, _) = cli_on(&served.data, &["peer", "list"]);
    assert!(table.contains("  credentials: token"), "{table}");
    let admins = json_of(&["admin", "list", "--json"]);
    assert_eq!(admins[0]["name"], "operator", "{admins}");
    let audit = json_of(&["audit", "--json"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["action"] == "peer.created"),
        "{audit}"
    );
}
