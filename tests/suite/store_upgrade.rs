//! A store written by an earlier release upgrades in place.
//!
//! `tests/data/stores/release-0.1-schema-4.sqlite3` was written by peergate 0.1 (schema
//! version 4, kept in `PRAGMA user_version`, before the migrations were `.sql` files): two
//! administrators, two peers with a token, a password and an API key, two answered messages
//! in one context, usage and audit records. Each test works on a copy.
//!
//! The tests of that fixture are about SQLite files, and are skipped on another store engine.
//!
//! The stores of the current release, 0.1.0, are kept too, one per engine (SQLite at schema
//! 18, PostgreSQL at schema 14), each with what that release read back from it, in
//! `tests/data/stores/release-0.1.0-*`. `tests/data/stores/make-current.sh` wrote them with
//! that release's binary; it says what they hold. Each test restores a copy, reads it with the
//! code under test as the release read it (its command line's listings, then its door and
//! admin API, with the credentials it issued), and compares the answers with the recorded
//! ones: a store a release wrote must read back exactly as it did.

use crate::common::*;
use peergate::clock::UtcPeriod;
use peergate::store::Store;
use peergate::store::sqlite::DATABASE_FILE;
use peergate::token::{self, CredentialKind};
use serde_json::json;

const FIXTURE: &str = "tests/data/stores/release-0.1-schema-4.sqlite3";
/// Alice's token, issued by that release into the fixture (valid only there).
const ALICE_TOKEN: &str = "pgt_3judfRvyQh59_gckPdcu12wEVpcgmmISuPGZXGv7GhDNc0IPsDP";
const FIRST_TASK: &str = "01a22cbb-67bd-776e-b81f-ddbe2ef25869";

fn copy_of_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(repo_root().join(FIXTURE), dir.path().join(DATABASE_FILE)).unwrap();
    dir
}

/// (version, ran here): sqlx records an adopted migration with an execution time of -1.
async fn applied_migrations(dir: &std::path::Path) -> Vec<(i64, bool)> {
    let url = format!("sqlite://{}", dir.join(DATABASE_FILE).display());
    let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query_as(
        "SELECT version, execution_time >= 0 FROM _sqlx_migrations WHERE success ORDER BY version",
    )
    .fetch_all(&mut db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_store_from_release_0_1_opens_with_everything_it_held() {
    if skip_unless_sqlite("the store is a SQLite file from an earlier release") {
        return;
    }
    let dir = copy_of_fixture();
    let store = Store::open(dir.path()).await.expect("the old store opens");
    assert_eq!(
        applied_migrations(dir.path()).await,
        [
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, true),
            (6, true),
            (7, true),
            (8, true),
            (9, true),
            (10, true),
            (11, true),
            (12, true),
            (13, true),
            (14, true),
            (15, true),
            (16, true),
            (17, true),
            (18, true),
            (19, true),
            (20, true)
        ],
        "the old version is adopted, not run again; the newer migrations run"
    );

    let peers = store.accounts().list_peers(None).await.unwrap();
    let names: Vec<(&str, &str)> = peers
        .iter()
        .map(|p| (p.name.as_str(), p.owner_name.as_str()))
        .collect();
    assert_eq!(names, [("alice", "operator"), ("bob", "ops")]);
    let alice = &peers[0];

    let parsed = token::parse(CredentialKind::PeerToken, ALICE_TOKEN).unwrap();
    let credential = store
        .credentials()
        .find_credential(CredentialKind::PeerToken, parsed.token_id)
        .await
        .unwrap()
        .expect("alice's token is still there");
    assert!(credential.login.active && parsed.matches(&credential.secret_hash));
    let login = store.credentials().find_peer_login("alice").await.unwrap();
    assert!(login.unwrap().password_hash.is_some());
    let ops = store.credentials().find_admin_login("ops").await.unwrap();
    assert!(ops.unwrap().password_hash.is_some());

    // The task is read as it was stored (at a time inside its retention).
    let created = i64::from_str_radix(&FIRST_TASK.replace('-', "")[..12], 16).unwrap();
    let task = store
        .tasks()
        .find_task(
            &alice.id,
            &FIRST_TASK.into(),
            peergate::clock::from_millis(created),
        )
        .await
        .unwrap()
        .expect("the answered task survives the upgrade");
    assert!(task.contains("TASK_STATE_COMPLETED"), "{task}");
    let history = store
        .tasks()
        .context_history(&alice.id, &"ctx-1".into(), 20)
        .await
        .unwrap();
    assert_eq!(history.len(), 4);

    let conversations = store
        .conversations()
        .conversations(&peergate::store::ConversationQuery {
            owner_id: Some(alice.owner_id.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(conversations.len(), 1);
    assert_eq!(conversations[0].messages, 4);
    // Its messages were kept before their parts were: each reads back as its text alone.
    let messages = store
        .conversations()
        .conversation(&alice.id, &"ctx-1".into())
        .await
        .unwrap()
        .unwrap();
    assert!(
        messages
            .iter()
            .all(|m| m.parts.is_none() && !m.text.is_empty())
    );
    let spent = store
        .usage()
        .tokens_spent(&alice.owner_id, UtcPeriod::parse("2026-11").unwrap())
        .await
        .unwrap();
    assert_eq!(spent, 380);
    let audit = store
        .accounts()
        .audit_since(peergate::clock::Timestamp::UNIX_EPOCH, None)
        .await
        .unwrap();
    assert_eq!(audit.len(), 12);
    store.close().await;

    // A second open finds nothing to do.
    let again = Store::open(dir.path()).await.unwrap();
    assert_eq!(again.accounts().list_peers(None).await.unwrap().len(), 2);
    again.close().await;
    assert_eq!(applied_migrations(dir.path()).await.len(), 20);
}

#[tokio::test]
async fn a_gateway_on_an_upgraded_store_answers_the_old_token_in_the_old_context() {
    if skip_unless_sqlite("the store is a SQLite file from an earlier release") {
        return;
    }
    let dir = copy_of_fixture();
    let server = ServeProcess::start(dir.path(), dir.path());
    let answer = rpc(
        &server.door(),
        ALICE_TOKEN,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m3", "contextId": "ctx-1", "role": "ROLE_USER",
            "parts": [{"text": "still there?"}]}}}),
    )
    .await;
    assert_eq!(
        task_of(&answer)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{answer}"
    );
    drop(server);
    let store = Store::open(dir.path()).await.unwrap();
    let alice = store.accounts().find_peer("alice").await.unwrap().unwrap();
    let history = store
        .tasks()
        .context_history(&alice.id, &"ctx-1".into(), 20)
        .await
        .unwrap();
    assert_eq!(history.len(), 6, "the new turn joined the old conversation");
}

#[tokio::test]
async fn a_store_from_a_newer_release_is_refused_unchanged() {
    if skip_unless_sqlite("the store is a SQLite file from an earlier release") {
        return;
    }
    let dir = copy_of_fixture();
    Store::open(dir.path()).await.unwrap().close().await;
    let url = format!("sqlite://{}", dir.path().join(DATABASE_FILE).display());
    let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', TRUE, x'00', 0)",
    )
    .execute(&mut db)
    .await
    .unwrap();
    drop(db);
    let error = Store::open(dir.path()).await.unwrap_err().to_string();
    assert!(
        error.starts_with("cannot bring the store's schema up to date"),
        "{error}"
    );
    assert!(error.contains("99"), "{error}");
}

#[tokio::test]
async fn an_adoption_cut_short_is_finished_by_the_next_open() {
    if skip_unless_sqlite("it writes the SQLite file of an earlier release") {
        return;
    }
    // The row an adoption writes for version 1, taken from one that completed.
    let done = copy_of_fixture();
    Store::open(done.path()).await.unwrap().close().await;
    let connect = |dir: &std::path::Path| {
        let url = format!("sqlite://{}", dir.join(DATABASE_FILE).display());
        async move {
            <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
                .await
                .unwrap()
        }
    };
    let (description, checksum): (String, Vec<u8>) =
        sqlx::query_as("SELECT description, checksum FROM _sqlx_migrations WHERE version = 1")
            .fetch_one(&mut connect(done.path()).await)
            .await
            .unwrap();
    // As if a process died after adopting version 1 of the old store's 4.
    let dir = copy_of_fixture();
    let mut db = connect(dir.path()).await;
    sqlx::raw_sql(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, \
         checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&mut db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (1, ?, TRUE, ?, -1)",
    )
    .bind(description)
    .bind(checksum)
    .execute(&mut db)
    .await
    .unwrap();
    drop(db);
    let store = Store::open(dir.path())
        .await
        .expect("the next open finishes the adoption instead of re-running old migrations");
    assert_eq!(store.accounts().list_peers(None).await.unwrap().len(), 2);
    store.close().await;
    assert_eq!(
        applied_migrations(dir.path()).await,
        [
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, true),
            (6, true),
            (7, true),
            (8, true),
            (9, true),
            (10, true),
            (11, true),
            (12, true),
            (13, true),
            (14, true),
            (15, true),
            (16, true),
            (17, true),
            (18, true),
            (19, true),
            (20, true)
        ]
    );
}

/// The SQLite store release 0.1.0 wrote (schema 18), and what it read back beside it.
const RELEASE_SQLITE: &str = "tests/data/stores/release-0.1.0-schema-18.sqlite3";
/// The PostgreSQL store release 0.1.0 wrote (schema 14), as `pg_dump` printed it.
const RELEASE_POSTGRES: &str = "tests/data/stores/release-0.1.0-postgres-schema-14.sql";
/// The key that sealed both stores' push-notification configs.
const RELEASE_PUSH_KEY: &str = "tests/data/stores/release-0.1.0-push.key";

/// What the release read back from `fixture`, as `make-current.sh` recorded it.
fn recorded(fixture: &str) -> serde_json::Value {
    let path = repo_root().join(format!("{fixture}.expected.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The administrators' listing without `tokensToday`: tokens spent on the day it is read,
/// which was the recording's day and is not the test's. (The day's usage is compared whole,
/// by `usage --period DAY`.)
fn without_today(mut listing: serde_json::Value) -> serde_json::Value {
    for admin in listing.as_array_mut().into_iter().flatten() {
        admin.as_object_mut().unwrap().remove("tokensToday");
    }
    listing
}

/// Runs each command line the release ran on its store (`store` names the copy), in an empty
/// directory as it did (so the defaults are the embedded policy's), and compares the JSON.
fn assert_listed_as_recorded(recorded: &serde_json::Value, store: &[String]) {
    let cwd = tempfile::tempdir().unwrap();
    let listed = recorded["listed"].as_object().unwrap();
    assert!(listed.len() >= 8, "{listed:?}");
    for (command, then) in listed {
        let mut args: Vec<&str> = command.split_whitespace().collect();
        args.extend(store.iter().map(String::as_str));
        let (code, stdout, stderr) = cli_in(cwd.path(), &args);
        assert_eq!(code, 0, "{command}: {stderr}");
        let now: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{command} printed no JSON ({e}): {stdout}"));
        let (now, then) = if command.starts_with("admin list") {
            (without_today(now), without_today(then.clone()))
        } else {
            (now, then.clone())
        };
        assert_eq!(
            now, then,
            "`peergate {command}` reads as the release read it"
        );
    }
}

/// The policy the release served the store with (as `make-current.sh` writes it).
fn release_policy() -> peergate::config::Policy {
    let key = repo_root().join(RELEASE_PUSH_KEY);
    PolicyEdit::default()
        .set("tasks.retention_hours", 8760)
        .set("auth.schemes", ["bearer", "api_key"])
        .set("capabilities.push_notifications", true)
        .set("push.dangerous_allow_loopback_callbacks", true)
        .set("push.max_attempts", 1)
        .insert("push.key_file", key.to_str().unwrap())
        .policy()
}

/// A gateway of the code under test on a restored store, with its clock at the moment the
/// release was read (its tasks are kept a year from then, not from today), on a runtime of
/// its own.
struct ServedRelease {
    door: String,
    admin: String,
    running: Option<peergate::app::RunningGateway>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ServedRelease {
    async fn start(data: &std::path::Path, store_url: Option<String>, at: i64) -> Self {
        install_test_crypto();
        let options = peergate::app::GatewayOptions {
            policy: release_policy(),
            policy_source: peergate::config::PolicySource::Embedded,
            data_dir: data.to_owned(),
            store_url,
            redis_url: None,
            listen: Some("127.0.0.1:0".parse().unwrap()),
            admin_listen: Some("127.0.0.1:0".parse().unwrap()),
            grpc_listen: None,
            clock: std::sync::Arc::new(peergate::clock::ManualClock::new(
                peergate::clock::from_millis(at),
            )),
            telemetry: None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = runtime
            .spawn(peergate::app::start(options))
            .await
            .unwrap()
            .expect("the gateway starts on the release's store");
        Self {
            door: format!("http://{}/a2a/v1", running.local_addr),
            admin: format!("http://{}", running.admin_addr),
            running: Some(running),
            runtime: Some(runtime),
        }
    }
}

impl Drop for ServedRelease {
    fn drop(&mut self) {
        // Dropped inside the test's runtime, which may not block.
        if let Some(runtime) = self.runtime.take() {
            drop(self.running.take());
            runtime.shutdown_background();
        }
    }
}

/// A credential as the release recorded it, as the header it goes in.
fn credential_header(recorded: &serde_json::Value, who: &str) -> (&'static str, String) {
    let credential = recorded["credentials"][who].as_str().unwrap().to_owned();
    let name = if credential.starts_with("Bearer ") {
        "authorization"
    } else {
        "x-api-key"
    };
    (name, credential)
}

/// Asks the door and the admin API what the release asked, as the same callers, and compares
/// the answers.
async fn assert_served_as_recorded(recorded: &serde_json::Value, served: &ServedRelease) {
    let client = reqwest::Client::new();
    let door = recorded["door"].as_array().unwrap();
    assert_eq!(door.len(), 5, "{door:?}");
    for read in door {
        let (header, credential) = credential_header(recorded, read["as"].as_str().unwrap());
        let request =
            json!({"jsonrpc": "2.0", "id": 1, "method": read["method"], "params": read["params"]});
        let response = client
            .post(&served.door)
            .header(header, credential)
            .json(&request);
        let answer: serde_json::Value = response.send().await.unwrap().json().await.unwrap();
        assert_eq!(
            answer, read["response"],
            "{request} answers as the release answered"
        );
    }
    for read in recorded["admin"].as_array().unwrap() {
        let (header, credential) = credential_header(recorded, read["as"].as_str().unwrap());
        let url = format!("{}{}", served.admin, read["path"].as_str().unwrap());
        let answer = client
            .get(&url)
            .header(header, credential)
            .send()
            .await
            .unwrap();
        let answer: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(
            answer, read["response"],
            "GET {url} answers as the release answered"
        );
    }
}

#[tokio::test]
async fn a_sqlite_store_of_release_0_1_0_reads_back_as_that_release_read_it() {
    if skip_unless_sqlite("the store is a SQLite file of a release") {
        return;
    }
    let recorded = recorded(RELEASE_SQLITE);
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo_root().join(RELEASE_SQLITE),
        dir.path().join(DATABASE_FILE),
    )
    .unwrap();
    let data = dir.path().to_str().unwrap().to_owned();
    assert_listed_as_recorded(&recorded, &["--data".to_owned(), data]);
    let at = recorded["readAt"].as_i64().unwrap();
    let served = ServedRelease::start(dir.path(), None, at).await;
    assert_served_as_recorded(&recorded, &served).await;
}

/// A fresh database of the test cluster holding `dump`, restored with `psql` as an operator
/// would; its URL. `None` (having said so) without PostgreSQL.
fn restored(dump: &str, data: &std::path::Path) -> Option<String> {
    let url = postgres::cluster()?.database_for(data);
    let restore = std::process::Command::new("psql")
        .args([url.as_str(), "-q", "-X", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(repo_root().join(dump))
        .output()
        .expect("run psql");
    assert!(
        restore.status.success(),
        "the dump restores: {}",
        String::from_utf8_lossy(&restore.stderr)
    );
    Some(url)
}

#[tokio::test]
async fn a_postgresql_store_of_release_0_1_0_reads_back_as_that_release_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = restored(RELEASE_POSTGRES, dir.path()) else {
        return;
    };
    let recorded = recorded(RELEASE_POSTGRES);
    let data = dir.path().to_str().unwrap().to_owned();
    let store = ["--data".to_owned(), data, "--store".to_owned(), url.clone()];
    assert_listed_as_recorded(&recorded, &store);
    let at = recorded["readAt"].as_i64().unwrap();
    let served = ServedRelease::start(dir.path(), Some(url), at).await;
    assert_served_as_recorded(&recorded, &served).await;
}
