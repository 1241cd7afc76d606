//! A store written by an earlier release upgrades in place.
//!
//! `tests/data/stores/release-0.1-schema-4.sqlite3` was written by peergate 0.1 (schema
//! version 4, kept in `PRAGMA user_version`, before the migrations were `.sql` files): two
//! administrators, two peers with a token, a password and an API key, two answered messages
//! in one context, usage and audit records. Each test works on a copy.
//!
//! Every test here is about SQLite files, and is skipped on another store engine.

use crate::common::*;
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
            (18, true)
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
    assert!(credential.active && parsed.matches(&credential.secret_hash));
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
        .tokens_spent(&alice.owner_id, "2026-11")
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
    assert_eq!(applied_migrations(dir.path()).await.len(), 18);
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
            (18, true)
        ]
    );
}
