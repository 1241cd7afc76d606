//! The store seams behave the same on every engine: each check runs against the embedded SQLite
//! store and against PostgreSQL (a throwaway cluster of this test binary; skipped loudly when
//! PostgreSQL is not installed, failing under CI).

use crate::common::*;
use peergate::clock::{UtcDay, UtcPeriod};
use peergate::store::{
    AdminRecord, AdminStatus, AuditAction, AuditEntry, ConversationMessage, ConversationRole,
    DeliveryOutcome, Exchange, ExchangeUsage, PeerRecord, PeerStatus, PushConfigRecord,
    PushDelivery, Serving, Store, StoreError, StoreLocation,
};
use peergate::token::{self, CredentialKind};
use std::sync::Arc;
use std::time::Duration;

/// The instant `millis` after the epoch (the stores keep milliseconds).
fn at(millis: i64) -> peergate::clock::Timestamp {
    peergate::clock::from_millis(millis)
}

/// Every engine this machine can run, each with a fresh store.
async fn engines() -> Vec<(&'static str, Store, tempfile::TempDir)> {
    let mut stores = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    stores.push(("sqlite", Store::open(dir.path()).await.unwrap(), dir));
    if let Some(cluster) = postgres::cluster() {
        let dir = tempfile::tempdir().unwrap();
        let url = cluster.database_for(dir.path());
        let store = Store::open_at(&StoreLocation::Postgres(url))
            .await
            .expect("the PostgreSQL store opens");
        stores.push(("postgres", store, dir));
    }
    stores
}

/// Administrator `ada` (adm_1) and her peer `alice` (peer_1).
async fn with_alice(store: &Store) {
    let mut change = store.accounts().begin_change().await.unwrap();
    change
        .insert_admin(&admin("adm_1", "ada"), None)
        .await
        .unwrap();
    change
        .insert_peer(&peer("peer_1", "alice", "adm_1"))
        .await
        .unwrap();
    change.commit().await.unwrap();
}

fn admin(id: &str, name: &str) -> AdminRecord {
    AdminRecord {
        id: id.into(),
        name: name.into(),
        status: AdminStatus::Active,
        has_password: false,
        model_allowed: true,
        tokens_per_day: Some(500),
        tokens_per_month: None,
        created_at: at(1),
        auditor: false,
    }
}

fn peer(id: &str, name: &str, owner: &str) -> PeerRecord {
    PeerRecord {
        id: id.into(),
        name: name.into(),
        status: PeerStatus::Active,
        rate_per_minute: 30,
        max_streams: Some(12),
        tokens_per_day: Some(700),
        created_at: at(2),
        last_used_at: None,
        owner_id: owner.into(),
        owner_name: String::new(),
        expires_at: Some(at(10_000)),
        trusts_trace: false,
        operations: None,
    }
}

fn entry(action: AuditAction) -> AuditEntry {
    AuditEntry {
        at: at(5),
        actor: peergate::store::AuditActor::Operator,
        action,
        target: peergate::store::AuditTarget::Peer("alice".into()),
        outcome: peergate::store::AuditOutcome::Ok,
        client: "local".into(),
        detail: String::new(),
        owner_id: Some("adm_1".into()),
    }
}

/// A call's span context as a queued delivery keeps it.
const TRACED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
#[tokio::test]
async fn accounts_credentials_and_the_audit_log_on_every_engine() {
    for (engine, store, _dir) in engines().await {
        let mut change = store.accounts().begin_change().await.unwrap();
        change
            .insert_admin(&admin("adm_1", "ada"), Some("phc"))
            .await
            .unwrap();
        change
            .insert_peer(&peer("peer_1", "alice", "adm_1"))
            .await
            .unwrap();
        let issued = token::issue(CredentialKind::PeerToken).unwrap();
        change
            .insert_credential(
                &"peer_1".into(),
                CredentialKind::PeerToken,
                &issued.token_id,
                &issued.secret_hash,
                at(3),
            )
            .await
            .unwrap();
        change
            .audit(&entry(AuditAction::PeerCreated))
            .await
            .unwrap();
        change.commit().await.unwrap();

        // A taken name is refused by name, and a change dropped without commit leaves nothing.
        let mut change = store.accounts().begin_change().await.unwrap();
        let duplicate = change.insert_peer(&peer("peer_2", "alice", "adm_1")).await;
        assert!(
            matches!(
                duplicate,
                Err(peergate::store::StoreError::DuplicatePeer(_))
            ),
            "{engine}: {duplicate:?}"
        );
        change.audit(&entry(AuditAction::PeerRead)).await.unwrap();
        drop(change);

        let peers = store
            .accounts()
            .list_peers(Some(&"adm_1".into()))
            .await
            .unwrap();
        assert_eq!(peers.len(), 1, "{engine}");
        assert_eq!(
            (peers[0].owner_name.as_str(), peers[0].status),
            ("ada", PeerStatus::Active)
        );
        assert_eq!(peers[0].tokens_per_day, Some(700), "{engine}");
        let budget = store.usage().peer_tokens_per_day(&peers[0].id).await;
        assert_eq!(budget.unwrap(), Some(700), "{engine}");
        let parsed = token::parse(CredentialKind::PeerToken, &issued.token).unwrap();
        let found = store
            .credentials()
            .find_credential(CredentialKind::PeerToken, parsed.token_id)
            .await
            .unwrap()
            .unwrap();
        assert!(
            found.login.active && parsed.matches(&found.secret_hash),
            "{engine}"
        );
        assert_eq!(
            found.login.valid_until,
            Some(at(10_000)),
            "{engine}: the peer's expiry"
        );

        // A grace period shorter than the peer's expiry wins; revocation ends it.
        let mut change = store.accounts().begin_change().await.unwrap();
        change
            .expire_credentials(&"peer_1".into(), CredentialKind::PeerToken, at(7_000))
            .await
            .unwrap();
        change.commit().await.unwrap();
        let found = store
            .credentials()
            .find_credential(CredentialKind::PeerToken, parsed.token_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.login.valid_until, Some(at(7_000)), "{engine}");
        let mut change = store.accounts().begin_change().await.unwrap();
        change.revoke_peer(&"peer_1".into(), at(8)).await.unwrap();
        change.commit().await.unwrap();
        let found = store
            .credentials()
            .find_credential(CredentialKind::PeerToken, parsed.token_id)
            .await
            .unwrap()
            .unwrap();
        assert!(!found.login.active, "{engine}");

        let audit = store.accounts().audit_since(at(0), None).await.unwrap();
        let actions: Vec<AuditAction> = audit.iter().map(|r| r.entry.action).collect();
        assert_eq!(
            actions,
            [AuditAction::PeerCreated],
            "{engine}: rolled back with its change"
        );
        store.close().await;
    }
}

#[tokio::test]
async fn exchanges_histories_usage_and_the_sweeps_on_every_engine() {
    for (engine, store, dir) in engines().await {
        with_alice(&store).await;
        let exchange = |task: &str, state: &'static str, now: i64, text: &str| Exchange {
            task_json: format!("{{\"id\":\"{task}\",\"state\":\"{state}\"}}"),
            expires_at: at(now + 1_000),
            messages: if text.is_empty() {
                Vec::new()
            } else {
                vec![
                    ConversationMessage {
                        role: ConversationRole::Peer,
                        text: text.into(),
                        parts: Some(
                            serde_json::json!([{"kind": "text", "text": text},
                            {"kind": "file", "filename": "a.pdf", "size": 3, "sha256": "00"}])
                            .to_string(),
                        ),
                    },
                    ConversationMessage {
                        role: ConversationRole::Agent,
                        text: format!("re: {text}"),
                        parts: None,
                    },
                ]
            },
            usage: (!text.is_empty()).then(|| ExchangeUsage {
                owner_id: "adm_1".into(),
                day: UtcDay::parse("2026-11-30").unwrap(),
                tokens: 40,
            }),
            instance: Some(Arc::from("ins_a")),
            ..bare_exchange(
                (task, "peer_1", "ctx"),
                peergate::protocol::types::TaskState::from_name(state).unwrap(),
                at(now),
            )
        };
        let tasks = store.tasks();
        // Concurrent turns share one batch: two contexts' worth of rows, one usage row.
        let (a, b, c) = tokio::join!(
            tasks.save_exchange(exchange("t1", "TASK_STATE_COMPLETED", 100, "one")),
            tasks.save_exchange(exchange("t2", "TASK_STATE_COMPLETED", 101, "two")),
            tasks.save_exchange(Exchange {
                sealing: Some("{\"kept\":1}".into()),
                ..exchange("t3", "TASK_STATE_WORKING", 102, "")
            }),
        );
        a.unwrap();
        b.unwrap();
        c.unwrap();
        let history = tasks
            .context_history(&"peer_1".into(), &"ctx".into(), 3)
            .await
            .unwrap();
        assert_eq!(history.len(), 3, "{engine}: the last three, oldest first");
        assert_eq!(history[2].role, ConversationRole::Agent, "{engine}");
        assert_eq!(
            store
                .usage()
                .tokens_spent(&"adm_1".into(), UtcPeriod::parse("2026-11").unwrap())
                .await
                .unwrap(),
            80,
            "{engine}"
        );
        for (peer, spent) in [("peer_1", 80), ("peer_2", 0)] {
            let tokens = store
                .usage()
                .peer_tokens_spent(&peer.into(), UtcPeriod::parse("2026-11-30").unwrap())
                .await
                .unwrap();
            assert_eq!(tokens, spent, "{engine}: {peer}");
        }
        let by_peer = store
            .usage()
            .usage_by_peer(&"adm_1".into(), UtcPeriod::parse("2026-11-30").unwrap())
            .await
            .unwrap();
        assert_eq!(
            (by_peer[0].tokens, by_peer[0].requests),
            (80, 2),
            "{engine}"
        );
        let owned = peergate::store::ConversationQuery {
            owner_id: Some("adm_1".into()),
            limit: 10,
            ..Default::default()
        };
        let conversations = store.conversations().conversations(&owned).await.unwrap();
        assert_eq!(conversations[0].messages, 4, "{engine}");
        // Every part of a message is read back as it was kept; a message kept without any is
        // its text alone.
        let messages = store
            .conversations()
            .conversation(&"peer_1".into(), &"ctx".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            messages[0].parts.as_ref().unwrap()[1]["filename"],
            "a.pdf",
            "{engine}"
        );
        assert_eq!(messages[1].parts, None, "{engine}");
        // Filtered by another peer's name, or to before its first message: nothing.
        for query in [
            peergate::store::ConversationQuery {
                peer: Some("nobody".into()),
                ..owned.clone()
            },
            peergate::store::ConversationQuery {
                until: Some(at(50)),
                ..owned.clone()
            },
        ] {
            let found = store.conversations().conversations(&query).await.unwrap();
            assert!(found.is_empty(), "{engine}: {query:?}");
        }

        // Another peer reads nothing; a working task is found by the sweep with its instance.
        assert!(
            tasks
                .find_task(&"peer_2".into(), &"t1".into(), at(100))
                .await
                .unwrap()
                .is_none(),
            "{engine}"
        );
        assert!(
            tasks
                .find_task(&"peer_1".into(), &"t1".into(), at(100))
                .await
                .unwrap()
                .is_some(),
            "{engine}"
        );
        let working = tasks.working_tasks(None).await.unwrap();
        assert_eq!(working.len(), 1, "{engine}");
        assert_eq!(working[0].instance.as_deref(), Some("ins_a"), "{engine}");
        // The sweep reads what the receipt states of the call, and stores the receipt it
        // makes with the failed state.
        assert_eq!(working[0].sealing.as_deref(), Some("{\"kept\":1}"));
        let swept = peergate::store::IssuedReceipt {
            jti: "r-swept".into(),
            jws: "h.swept.s".into(),
            entry: [3; 32],
        };
        tasks
            .finish_working_task(
                &"t3".into(),
                (peergate::protocol::types::TaskState::Failed, "{}"),
                Some((&"peer_1".into(), &swept)),
                at(103),
            )
            .await
            .unwrap();
        assert!(
            tasks.working_tasks(None).await.unwrap().is_empty(),
            "{engine}"
        );
        // A final copy never turns a swept task back; its receipt is logged all the same, since
        // it left with the answer.
        let late = peergate::store::IssuedReceipt {
            jti: "r-late".into(),
            jws: "h.late.s".into(),
            entry: [4; 32],
        };
        tasks
            .save_exchange(Exchange {
                receipt: Some(late),
                ..exchange("t3", "TASK_STATE_COMPLETED", 103, "")
            })
            .await
            .unwrap();
        let log = store.log();
        let logged = log.logged_receipt("r-swept").await.unwrap().unwrap();
        assert_eq!((logged.jws.as_str(), logged.index), ("h.swept.s", None));
        let late = log.logged_receipt("r-late").await.unwrap();
        assert!(late.is_some_and(|r| r.jws == "h.late.s"), "{engine}");
        let t3 = tasks
            .find_task(&"peer_1".into(), &"t3".into(), at(103))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t3, "{}", "{engine}");
        assert_eq!(
            tasks.delete_expired_tasks(at(10_000)).await.unwrap(),
            3,
            "{engine}"
        );

        // Documents keep their first modification time while their entity tag holds.
        let documents = store.documents();
        assert_eq!(
            documents
                .document_modified_at("card", "\"a\"", at(1))
                .await
                .unwrap(),
            at(1)
        );
        assert_eq!(
            documents
                .document_modified_at("card", "\"a\"", at(2))
                .await
                .unwrap(),
            at(1)
        );
        assert_eq!(
            documents
                .document_modified_at("card", "\"b\"", at(3))
                .await
                .unwrap(),
            at(3)
        );
        store.close().await;
        // A closed store refuses exchanges, and SQLite leaves no log beside its file.
        let late = tasks
            .save_exchange(exchange("t9", "TASK_STATE_COMPLETED", 300, "late"))
            .await;
        assert!(late.is_err(), "{engine}: an exchange after close was taken");
        if engine == "sqlite" {
            let wal = dir.path().join("peergate.sqlite3-wal");
            assert!(
                std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
                "every connection closed, the log checkpointed"
            );
        }
    }
}

#[tokio::test]
async fn the_push_notification_queue_on_every_engine() {
    for (engine, store, _dir) in engines().await {
        with_alice(&store).await;
        let config = |task: &str, id: &str| PushConfigRecord {
            task_id: task.into(),
            id: id.into(),
            peer_id: "peer_1".into(),
            url: format!("https://hooks.example.com/{id}"),
            sealed: format!("sealed-{id}"),
            created_at: at(1),
        };
        let state =
            |task: &str, state: &'static str, now: i64, with: Option<PushConfigRecord>| Exchange {
                task_json: format!("{{\"id\":\"{task}\",\"state\":\"{state}\"}}"),
                expires_at: at(5_000),
                notify: true,
                push_config: with,
                // The final state's call was traced; the first's was not.
                call_trace: (state == "TASK_STATE_COMPLETED").then(|| TRACED.to_owned()),
                ..bare_exchange(
                    (task, "peer_1", "ctx"),
                    peergate::protocol::types::TaskState::from_name(state).unwrap(),
                    at(now),
                )
            };
        let (tasks, push) = (store.tasks(), store.push());
        // A config sent with the message hears the task's first state.
        tasks
            .save_exchange(state(
                "t1",
                "TASK_STATE_WORKING",
                100,
                Some(config("t1", "a")),
            ))
            .await
            .unwrap();
        push.put_push_config(&config("t1", "b"), 2).await.unwrap();
        push.put_push_config(&config("t1", "b"), 2).await.unwrap();
        assert!(
            matches!(
                push.put_push_config(&config("t1", "c"), 2).await,
                Err(StoreError::TooManyPushConfigs(2))
            ),
            "{engine}"
        );
        tasks
            .save_exchange(state("t1", "TASK_STATE_COMPLETED", 200, None))
            .await
            .unwrap();
        let listed = push
            .push_configs(&"peer_1".into(), &"t1".into(), None, 10)
            .await
            .unwrap();
        assert_eq!(listed.len(), 2, "{engine}");
        assert!(
            push.push_configs(&"peer_2".into(), &"t1".into(), None, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            push.push_config(&"peer_2".into(), &"t1".into(), &"a".into())
                .await
                .unwrap()
                .is_none()
        );

        // One delivery per config at a time, oldest first: a's working state (b was made after
        // it), then b's and a's final states.
        let claimed = |now: i64, until: i64| {
            let push = push.clone();
            async move {
                let mut due = push.claim_deliveries(at(now), at(until), 10).await.unwrap();
                due.sort_by(|x, y| x.config_id.cmp(&y.config_id));
                due
            }
        };
        let first = claimed(300, 10_300).await;
        let shape = |d: &PushDelivery| (d.config_id.to_string(), d.body.contains("WORKING"));
        assert_eq!(
            first.iter().map(shape).collect::<Vec<_>>(),
            [("a".to_owned(), true), ("b".to_owned(), false)],
            "{engine}"
        );
        assert!(first[0].body.starts_with("{\"task\":"), "{engine}");
        // A delivery carries the traced call's context to its span's link, or nothing.
        assert_eq!(first[0].call_trace, None, "{engine}");
        assert_eq!(first[1].call_trace.as_deref(), Some(TRACED), "{engine}");
        assert_eq!(first[0].url, "https://hooks.example.com/a");
        assert_eq!(first[0].sealed, "sealed-a");
        // Claimed: nothing else of those configs is due.
        assert!(claimed(300, 10_300).await.is_empty(), "{engine}");
        // A claim that lapses (its instance died) makes the delivery due again, and the lapsed
        // claim's outcome no longer counts.
        let again = claimed(10_300, 20_300).await;
        assert_eq!(again.len(), 2, "{engine}");
        let late = first[0].claimed_until;
        push.record_delivery(first[0].id, late, DeliveryOutcome::Delivered, "", at(400))
            .await
            .unwrap();
        let current = claimed(20_300, 20_350).await;
        assert_eq!(
            current.len(),
            2,
            "a lapsed claim deleted nothing ({engine})"
        );
        push.record_delivery(
            current[0].id,
            current[0].claimed_until,
            DeliveryOutcome::Delivered,
            "",
            at(20_301),
        )
        .await
        .unwrap();
        push.record_delivery(
            current[1].id,
            current[1].claimed_until,
            DeliveryOutcome::RetryAt(at(30_000)),
            "HTTP 503",
            at(20_301),
        )
        .await
        .unwrap();
        let next = claimed(20_400, 40_000).await;
        assert_eq!(
            next.iter().map(shape).collect::<Vec<_>>(),
            [("a".to_owned(), false)],
            "{engine}"
        );
        // A config sent again with a new URL and secrets takes its queued deliveries along.
        let mut moved = config("t1", "b");
        moved.url = "https://hooks.example.com/b2".into();
        moved.sealed = "sealed-b2".into();
        push.put_push_config(&moved, 2).await.unwrap();
        let retried = claimed(30_000, 40_000).await;
        assert_eq!(
            (retried[0].id, retried[0].attempts),
            (first[1].id, 1),
            "{engine}"
        );
        assert_eq!(
            (retried[0].url.as_str(), retried[0].sealed.as_str()),
            ("https://hooks.example.com/b2", "sealed-b2"),
            "{engine}"
        );
        push.record_delivery(
            retried[0].id,
            retried[0].claimed_until,
            DeliveryOutcome::GiveUp,
            "HTTP 503",
            at(30_001),
        )
        .await
        .unwrap();
        let dead = push
            .failed_deliveries(Some(&"adm_1".into()), 10)
            .await
            .unwrap();
        assert_eq!(dead.len(), 1, "{engine}");
        assert_eq!(
            (
                dead[0].peer_name.as_str(),
                dead[0].attempts,
                dead[0].last_error.as_str()
            ),
            ("alice", 2, "HTTP 503"),
            "{engine}"
        );
        assert_eq!(dead[0].failed_at, at(30_001));
        assert!(
            push.failed_deliveries(Some(&"adm_2".into()), 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Deleting the config keeps its dead letter.
        push.delete_push_config(&"peer_1".into(), &"t1".into(), &"b".into())
            .await
            .unwrap();
        assert_eq!(
            push.failed_deliveries(Some(&"adm_1".into()), 10)
                .await
                .unwrap()
                .len(),
            1
        );

        // A sweep's final state is queued too; a turn's late final state, which the store does
        // not take over the sweep's, is not; deleting a config drops what it still had queued.
        tasks
            .save_exchange(state(
                "t2",
                "TASK_STATE_WORKING",
                500,
                Some(config("t2", "z")),
            ))
            .await
            .unwrap();
        let working = claimed(40_000, 40_100).await;
        let working = working.iter().find(|d| d.task_id == "t2").unwrap();
        push.record_delivery(
            working.id,
            working.claimed_until,
            DeliveryOutcome::Delivered,
            "",
            at(600),
        )
        .await
        .unwrap();
        tasks
            .finish_working_task(
                &"t2".into(),
                (
                    peergate::protocol::types::TaskState::Failed,
                    "{\"failed\":1}",
                ),
                None,
                at(800),
            )
            .await
            .unwrap();
        tasks
            .save_exchange(state("t2", "TASK_STATE_COMPLETED", 900, None))
            .await
            .unwrap();
        let swept = claimed(40_200, 50_000).await;
        let t2: Vec<&str> = swept
            .iter()
            .filter(|d| d.task_id == "t2")
            .map(|d| d.body.as_str())
            .collect();
        assert_eq!(t2, ["{\"task\":{\"failed\":1}}"], "{engine}");
        push.record_delivery(
            swept[0].id,
            swept[0].claimed_until,
            DeliveryOutcome::Delivered,
            "",
            at(40_201),
        )
        .await
        .unwrap();
        push.delete_push_config(&"peer_1".into(), &"t2".into(), &"z".into())
            .await
            .unwrap();
        push.delete_push_config(&"peer_1".into(), &"t2".into(), &"z".into())
            .await
            .unwrap();
        assert!(
            push.claim_deliveries(at(60_000), at(70_000), 10)
                .await
                .unwrap()
                .iter()
                .all(|d| d.task_id != "t2"),
            "{engine}"
        );
        // Expired tasks take their configs and deliveries with them.
        tasks.delete_expired_tasks(at(5_000)).await.unwrap();
        assert!(
            push.push_configs(&"peer_1".into(), &"t1".into(), None, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            push.failed_deliveries(None, 10).await.unwrap().is_empty(),
            "{engine}"
        );
        store.close().await;
    }
}

#[tokio::test]
async fn one_gateway_serves_a_store_at_a_time_on_every_engine() {
    let mut locations = vec![(
        "sqlite",
        StoreLocation::Embedded(tempfile::tempdir().unwrap().keep()),
    )];
    if let Some(cluster) = postgres::cluster() {
        let dir = tempfile::tempdir().unwrap();
        locations.push((
            "postgres",
            StoreLocation::Postgres(cluster.database_for(dir.path())),
        ));
    }
    for (engine, location) in locations {
        let first = Store::open_at(&location).await.unwrap();
        let second = Store::open_at(&location).await.unwrap();
        first.claim_for_serving(Serving::Alone).await.unwrap();
        let refused = second.claim_for_serving(Serving::Alone).await;
        assert!(
            matches!(
                refused,
                Err(peergate::store::StoreError::Served { .. }
                    | peergate::store::StoreError::ServedOtherwise(_))
            ),
            "{engine}: {refused:?}"
        );
        // The command line's reads and writes work beside the serving gateway.
        assert!(second.accounts().list_peers(None).await.is_ok(), "{engine}");
        first.close().await;
        second
            .claim_for_serving(Serving::Alone)
            .await
            .unwrap_or_else(|e| panic!("{engine}: free once the first closed: {e}"));
        second.close().await;
        if let StoreLocation::Embedded(dir) = location {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[tokio::test]
async fn instances_serving_postgresql_together_hold_leases_and_one_leads_housekeeping() {
    let Some(cluster) = postgres::cluster() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let location = StoreLocation::Postgres(cluster.database_for(dir.path()));
    let (first, second) = (
        Store::open_at(&location).await.unwrap(),
        Store::open_at(&location).await.unwrap(),
    );
    // Serving together: both shared claims hold; a lone one is refused beside them.
    first.claim_for_serving(Serving::Shared).await.unwrap();
    second.claim_for_serving(Serving::Shared).await.unwrap();
    let lone = Store::open_at(&location).await.unwrap();
    assert!(matches!(
        lone.claim_for_serving(Serving::Alone).await,
        Err(peergate::store::StoreError::ServedOtherwise(_))
    ));
    lone.close().await;
    let (a, b) = (first.instances().unwrap(), second.instances().unwrap());
    assert!(
        !b.holds_lease("ins_a", Duration::ZERO).await.unwrap(),
        "no lease yet"
    );
    a.renew_lease("ins_a", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        b.holds_lease("ins_a", Duration::ZERO).await.unwrap(),
        "seen by the other instance"
    );
    a.renew_lease("ins_short", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !b.holds_lease("ins_short", Duration::ZERO).await.unwrap(),
        "a lease lapses"
    );
    assert!(
        b.holds_lease("ins_short", Duration::from_secs(30))
            .await
            .unwrap(),
        "but counts while within the grace"
    );
    a.end_lease("ins_a").await.unwrap();
    assert!(
        !b.holds_lease("ins_a", Duration::ZERO).await.unwrap(),
        "a clean stop ends it"
    );
    // One leader at a time; the lead passes on when the leader's session ends.
    assert!(a.lead_housekeeping().await.unwrap());
    assert!(a.lead_housekeeping().await.unwrap(), "kept while held");
    assert!(!b.lead_housekeeping().await.unwrap());
    first.close().await;
    // The server ends the closed session (and its lock) a moment after the client hangs up.
    let mut taken = false;
    for _ in 0..100 {
        taken = b.lead_housekeeping().await.unwrap();
        if taken {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(taken, "taken over");
    second.close().await;
    // The embedded store is served by one process only.
    let embedded = Store::open(dir.path()).await.unwrap();
    assert!(matches!(
        embedded.claim_for_serving(Serving::Shared).await,
        Err(peergate::store::StoreError::Unshareable)
    ));
    assert!(embedded.instances().is_none());
    embedded.close().await;
}

#[tokio::test]
async fn the_audit_log_is_append_only_in_postgresql_too() {
    let Some(cluster) = postgres::cluster() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.database_for(dir.path());
    let store = Store::open_at(&StoreLocation::Postgres(url.clone()))
        .await
        .unwrap();
    store
        .accounts()
        .append_audit(&entry(AuditAction::PeerCreated))
        .await
        .unwrap();
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    for statement in [
        "UPDATE audit SET outcome = 'rewritten'",
        "DELETE FROM audit",
        "TRUNCATE audit",
    ] {
        let refused = sqlx::raw_sql(statement).execute(&mut db).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("append-only")),
            "{statement}: {refused:?}"
        );
    }
    assert_eq!(
        store
            .accounts()
            .audit_since(at(0), None)
            .await
            .unwrap()
            .len(),
        1
    );
    store.close().await;
}

#[test]
fn a_bad_or_unreachable_store_url_is_named_without_its_password() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let (code, _, stderr) = crate::common::cli(&[
        "peer",
        "list",
        "--data",
        dir,
        "--store",
        "mysql://alice:s3cret-pw@db.example/peergate",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--store / PEERGATE_STORE_URL: not a PostgreSQL URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    // Nothing listens on port 1: start-up stops, naming where it looked.
    let (code, _, stderr) = crate::common::cli(&[
        "peer",
        "list",
        "--data",
        dir,
        "--store",
        "postgres://alice:s3cret-pw@127.0.0.1:1/peergate",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("cannot reach the PostgreSQL store at 127.0.0.1:1/peergate"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
}

#[tokio::test]
async fn a_task_waiting_for_input_goes_on_and_is_swept_from_its_continuation_on_every_engine() {
    for (engine, store, _dir) in engines().await {
        with_alice(&store).await;
        let exchange =
            |state: &'static str, now: i64, instance: &str, agent: Option<&str>| Exchange {
                task_json: format!("{{\"id\":\"t1\",\"state\":\"{state}\"}}"),
                expires_at: at(now + 1_000_000),
                instance: Some(Arc::from(instance)),
                upstream_task_id: agent.map(str::to_owned),
                ..bare_exchange(
                    ("t1", "peer_1", "ctx"),
                    peergate::protocol::types::TaskState::from_name(state).unwrap(),
                    at(now),
                )
            };
        let tasks = store.tasks();
        tasks
            .save_exchange(exchange("TASK_STATE_WORKING", 100, "ins_a", None))
            .await
            .unwrap();
        tasks
            .save_exchange(exchange(
                "TASK_STATE_INPUT_REQUIRED",
                200,
                "ins_a",
                Some("agent-7"),
            ))
            .await
            .unwrap();
        assert_eq!(
            tasks
                .upstream_task(&"peer_1".into(), &"t1".into())
                .await
                .unwrap()
                .as_deref(),
            Some("agent-7"),
            "{engine}"
        );
        assert_eq!(
            tasks
                .upstream_task(&"peer_2".into(), &"t1".into())
                .await
                .unwrap(),
            None,
            "{engine}: another peer's"
        );
        // The continuation, on another instance, much later: the agent's id stays.
        tasks
            .save_exchange(exchange("TASK_STATE_WORKING", 10_000, "ins_b", None))
            .await
            .unwrap();
        assert_eq!(
            tasks
                .upstream_task(&"peer_1".into(), &"t1".into())
                .await
                .unwrap()
                .as_deref(),
            Some("agent-7"),
            "{engine}"
        );
        // A sweep of turns older than the continuation leaves it alone; it names ins_b.
        assert!(
            tasks
                .working_tasks(Some(at(5_000)))
                .await
                .unwrap()
                .is_empty(),
            "{engine}"
        );
        let working = tasks.working_tasks(Some(at(20_000))).await.unwrap();
        assert_eq!(working.len(), 1, "{engine}");
        assert_eq!(working[0].instance.as_deref(), Some("ins_b"), "{engine}");
        // Finished, it stays finished.
        tasks
            .save_exchange(exchange("TASK_STATE_COMPLETED", 10_100, "ins_b", None))
            .await
            .unwrap();
        tasks
            .save_exchange(exchange("TASK_STATE_WORKING", 10_200, "ins_a", None))
            .await
            .unwrap();
        let stored = tasks
            .find_task(&"peer_1".into(), &"t1".into(), at(10_300))
            .await
            .unwrap()
            .unwrap();
        assert!(
            stored.contains("TASK_STATE_COMPLETED"),
            "{engine}: {stored}"
        );
    }
}
