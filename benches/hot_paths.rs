//! The functions every request runs: peer token parse + verify, the GCRA limiter check (direct,
//! and through the rate-limit seam), building a refusal, a task event nobody listens to, an
//! unknown credential refused from memory, a SendMessage's two writes to SQLite, and the floor
//! under those writes: SQLite appending one row to a table with no index.
//!
//! `cargo bench --bench hot_paths`

use criterion::{Criterion, criterion_group, criterion_main};
use peergate::layers::limit::{KeyedGcra, Quota};
use peergate::token::{self, CredentialKind};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

fn tokens(c: &mut Criterion) {
    let issued = token::issue(CredentialKind::PeerToken).unwrap();
    let hash = issued.secret_hash.clone();
    c.bench_function("token parse + verify", |b| {
        b.iter(|| {
            let parsed = token::parse(CredentialKind::PeerToken, black_box(&issued.token)).unwrap();
            assert!(parsed.matches(&hash));
        })
    });
    let mut typo = issued.token.clone().into_bytes();
    typo[20] = if typo[20] == b'a' { b'b' } else { b'a' };
    let typo = String::from_utf8(typo).unwrap();
    c.bench_function("token parse, checksum fails", |b| {
        b.iter(|| token::parse(CredentialKind::PeerToken, black_box(&typo)).is_err())
    });
}

fn limiter(c: &mut Criterion) {
    let quota = Quota::per_minute(1_000_000_000);
    let limiter = KeyedGcra::new(100_000);
    let key = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let mut now = 0i64;
    c.bench_function("limiter check, one key", |b| {
        b.iter(|| {
            now += 1_000;
            black_box(limiter.check(&key, quota, now))
        })
    });
    let limiter = KeyedGcra::new(100_000);
    let keys: Vec<IpAddr> = (0..10_000u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(i)))
        .collect();
    let mut i = 0usize;
    c.bench_function("limiter check, 10k keys", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            now += 1_000;
            black_box(limiter.check(&keys[i], quota, now))
        })
    });
}

fn limiter_refusing(c: &mut Criterion) {
    // A peer far over its quota: every check is a refusal, as in a 429 flood.
    let quota = Quota::per_minute(1);
    let limiter = KeyedGcra::new(100_000);
    let key = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    limiter.check(&key, quota, 0);
    c.bench_function("limiter check, refused", |b| {
        b.iter(|| black_box(limiter.check(&key, quota, 1_000)))
    });
}

fn seams(c: &mut Criterion) {
    use peergate::clock::ManualClock;
    use peergate::shared::events::{LocalTaskEvents, TaskEvents};
    use peergate::shared::rate_limit::{LocalLimiter, RateLimiter};
    use std::sync::Arc;
    let quota = Quota::per_minute(1_000_000_000);
    let clock = ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH);
    let limiter: Arc<dyn RateLimiter<IpAddr>> =
        Arc::new(LocalLimiter::new(100_000, Arc::new(clock.clone())));
    let key = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    c.bench_function("limiter check through the seam, one key", |b| {
        b.iter(|| {
            clock.advance(std::time::Duration::from_millis(1));
            black_box(limiter.check(&key, quota).ready())
        })
    });
    let refusal = peergate::layers::limit::RateLimited {
        limit: peergate::layers::limit::Limit::PerPeer,
        retry_after: std::time::Duration::from_millis(1_500),
        quota: Quota::per_minute(30),
    };
    c.bench_function("429 answer from the refusal map", |b| {
        b.iter(|| {
            black_box(axum::response::IntoResponse::into_response(black_box(
                refusal,
            )))
        })
    });
    let events = LocalTaskEvents::default();
    c.bench_function("task event check, nobody listening", |b| {
        b.iter(|| black_box(events.listening()))
    });
}

/// A SQLite store in `dir` and the account service over it, as the command line makes them.
async fn store_in(
    dir: &std::path::Path,
) -> (peergate::store::Store, peergate::admin::AccountService) {
    use peergate::admin::{AccountDefaults, AccountService};
    let store = peergate::store::Store::open(dir).await.unwrap();
    let accounts = AccountService::new(
        store.clone(),
        std::sync::Arc::new(peergate::clock::SystemClock),
        AccountDefaults {
            default_owner: Some("operator".to_owned()),
            rate_per_minute: 60,
        },
    );
    (store, accounts)
}

/// An unknown credential id refused from memory, with 10,000 ids held (a flood of made-up
/// tokens).
fn known_ids(c: &mut Criterion) {
    use peergate::admin::{Caller, NewPeer};
    use peergate::layers::auth::known_ids::KnownCredentialIds;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let known = runtime.block_on(async {
        let (store, accounts) = store_in(dir.path()).await;
        for n in 0..10_000 {
            let peer = NewPeer {
                name: format!("peer{n}"),
                ..NewPeer::default()
            };
            accounts
                .create_peer(&Caller::operator(), peer)
                .await
                .unwrap();
        }
        KnownCredentialIds::load(&*store.credentials())
            .await
            .unwrap()
    });
    c.bench_function("unknown credential id refused from memory, 10k held", |b| {
        b.iter(|| black_box(!known.holds(black_box("Zq3kP9xTmW2aLr7v"))))
    });
}

/// What a SendMessage costs the SQLite store: 16 (then 64) concurrent requests, each writing its
/// working copy and then its answer (with both conversation messages and the tokens spent),
/// through the public seam, so the hand-off to the writer's thread is counted. Bodies are the
/// echo backend's sizes (about 600 bytes working, 1.9 KB answered).
fn exchange_writes(c: &mut Criterion) {
    use peergate::admin::{Caller, NewPeer};
    use peergate::store::{ConversationMessage, ConversationRole, Exchange, ExchangeUsage};
    const REQUESTS: [usize; 2] = [16, 64];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tasks, peer_id) = runtime.block_on(async {
        let (store, accounts) = store_in(dir.path()).await;
        let peer = NewPeer {
            name: "bench".to_owned(),
            ..NewPeer::default()
        };
        let created = accounts
            .create_peer(&Caller::operator(), peer)
            .await
            .unwrap();
        (store.tasks(), created.peer.id)
    });
    let day = peergate::clock::UtcDay::parse("2026-12-01").unwrap();
    let exchange = |task: &str, working: bool| Exchange {
        task_id: task.into(),
        peer_id: peer_id.clone(),
        context_id: format!("ctx-{task}").into(),
        state: if working {
            peergate::protocol::types::TaskState::Working
        } else {
            peergate::protocol::types::TaskState::Completed
        },
        task_json: "x".repeat(if working { 600 } else { 1900 }),
        now: peergate::clock::from_millis(1_764_547_200_000),
        expires_at: peergate::clock::Timestamp::MAX,
        messages: if working {
            Vec::new()
        } else {
            vec![
                // Each message with its parts, as a turn keeps them (the text once more).
                ConversationMessage {
                    role: ConversationRole::Peer,
                    text: "q".repeat(48),
                    parts: Some(
                        serde_json::json!([{"kind": "text", "text": "q".repeat(48)}]).to_string(),
                    ),
                },
                ConversationMessage {
                    role: ConversationRole::Agent,
                    text: "a".repeat(330),
                    parts: Some(
                        serde_json::json!([{"kind": "text", "text": "a".repeat(330)}]).to_string(),
                    ),
                },
            ]
        },
        usage: (!working).then(|| ExchangeUsage {
            owner_id: "operator".into(),
            day,
            tokens: 100,
        }),
        audit: None,
        instance: None,
        notify: false,
        push_config: None,
        upstream_task_id: None,
        receipt: None,
        call_trace: None,
        sealing: None,
    };
    let mut round = 0u64;
    for requests in REQUESTS {
        let name = format!("SQLite: {requests} SendMessages stored (working, then answered)");
        c.bench_function(&name, |b| {
            b.iter(|| {
                round += 1;
                let ids: Vec<String> = (0..requests)
                    .map(|n| format!("{round:016}-{n:02}"))
                    .collect();
                runtime.block_on(async {
                    for working in [true, false] {
                        let mut writes = tokio::task::JoinSet::new();
                        for id in &ids {
                            let (tasks, e) = (tasks.clone(), exchange(id, working));
                            writes.spawn(async move { tasks.save_exchange(e).await });
                        }
                        while let Some(done) = writes.join_next().await {
                            done.unwrap().unwrap();
                        }
                    }
                })
            })
        });
    }
}

/// The least SQLite can spend storing an answered task durably (WAL, `synchronous=NORMAL`, as
/// the store runs it): one row of 1.9 KB (an answered echo task's size) appended to a table
/// with no index, with one prepared statement, in transactions of 8 rows (what a commit holds
/// under `bench/load.sh`'s 50 connections) and of 64. No store layout that keeps the answer in
/// SQLite can write it for less; a SendMessage writes its task twice.
fn sqlite_floor(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let connection = rusqlite::Connection::open(dir.path().join("floor.sqlite3")).unwrap();
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .unwrap();
    connection
        .pragma_update(None, "synchronous", "NORMAL")
        .unwrap();
    connection
        .execute_batch(
            "CREATE TABLE rows (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, body TEXT NOT NULL)",
        )
        .unwrap();
    let body = "x".repeat(1900);
    let mut seq = 0u64;
    for rows in [8usize, 64] {
        c.bench_function(
            &format!("SQLite floor: {rows} rows of 1.9 KB appended in one commit"),
            |b| {
                b.iter(|| {
                    let transaction = connection.unchecked_transaction().unwrap();
                    {
                        let mut insert = transaction
                            .prepare_cached("INSERT INTO rows (id, body) VALUES (?1, ?2)")
                            .unwrap();
                        for _ in 0..rows {
                            seq += 1;
                            insert
                                .execute(rusqlite::params![format!("{seq:036}"), body])
                                .unwrap();
                        }
                    }
                    transaction.commit().unwrap();
                })
            },
        );
    }
}

/// A receipt's parts: the two digests (canonical ProtoJSON, RFC 8785, SHA-256) and the
/// signature, each on its own, for a message and an answer of a few hundred bytes.
fn receipts(c: &mut Criterion) {
    use peergate::jose::receipt::{self, ReceiptSigner, Statement};
    let message = serde_json::json!({"messageId": "m-1", "role": "ROLE_USER", "contextId": "c-1",
        "parts": [{"text": "What is the price of A-1? ".repeat(8)}, {"data": {"sku": "A-1", "qty": 2}}],
        "metadata": {"order": "o-77"}});
    let task = serde_json::json!({"id": "t-1", "contextId": "c-1",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T10:00:00.250Z",
            "message": {"messageId": "a-1", "contextId": "c-1", "taskId": "t-1", "role": "ROLE_AGENT",
                "parts": [{"text": "A-1 costs 12.50 EUR. ".repeat(16)}]}},
        "artifacts": [{"artifactId": "r-1", "parts": [{"text": "A-1 costs 12.50 EUR. ".repeat(16)}]}],
        "history": [message.clone()]});
    c.bench_function("receipt: message digest", |b| {
        b.iter(|| receipt::message_digest(&message).unwrap())
    });
    c.bench_function("receipt: answer digest", |b| {
        b.iter(|| receipt::answer_digest(&task).unwrap())
    });
    c.bench_function("receipt: RFC 8785 + SHA-256 of the answer alone", |b| {
        b.iter(|| receipt::digest(&task).unwrap())
    });
    let key = peergate::jose::sign::CardSigningKey::ed25519(
        "r1",
        ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
    );
    let signer = ReceiptSigner::new(key, "https://gw.example".to_owned()).unwrap();
    let now = peergate::clock::Timestamp::from_millisecond(1_795_996_800_000).unwrap();
    let statement = Statement {
        binding: "JSONRPC".into(),
        method: "SendMessage".into(),
        task: "t-1".into(),
        context: "c-1".into(),
        message: "m-1".into(),
        state: "TASK_STATE_COMPLETED",
        received: now,
        answered: now,
        credential: serde_json::json!({"scheme": "bearer", "id": "tok"}),
        card: "c".into(),
        request: "r".into(),
        answer: "a".into(),
        events: None,
        upstream: None,
    };
    c.bench_function("receipt: sign (EdDSA)", |b| {
        b.iter(|| signer.sign("peer_1", &statement, now))
    });
}

/// The content guard's starting pack, every group, on a short message, on 64 KiB of prose
/// with nothing to find, and on 64 KiB that holds a card number every kilobyte.
fn content_guard(c: &mut Criterion) {
    use peergate::content::settings::{StarterGroup, StarterSettings};
    use peergate::content::{ContentGuardSettings, ContentRules, Direction};
    let all = vec![
        StarterGroup::Secrets,
        StarterGroup::PersonalData,
        StarterGroup::InstructionOverride,
    ];
    let rules = ContentRules::compile(&ContentGuardSettings {
        starter: StarterSettings {
            inbound: all.clone(),
            outbound: all,
            ..StarterSettings::default()
        },
        ..ContentGuardSettings::default()
    })
    .unwrap();
    let inspect = |text: &str| {
        let mut text = text.to_owned();
        let mut inspection = rules.inspect(Direction::Inbound, "alice");
        inspection.text(&mut text);
        black_box((text, inspection.verdict()))
    };
    let short = "What is the delivery date for order 4471, and can it ship to the Lyon warehouse?";
    c.bench_function("content: starter pack, an 80-byte message", |b| {
        b.iter(|| inspect(short))
    });
    let prose = "The quarterly report covers revenue, shipping times and the new warehouse. ";
    let clean: String = prose.repeat(64 * 1024 / prose.len() + 1)[..64 * 1024].to_owned();
    c.bench_function("content: starter pack, 64 KiB, nothing found", |b| {
        b.iter(|| inspect(&clean))
    });
    let mut dirty = String::new();
    while dirty.len() < 64 * 1024 {
        dirty.push_str(&prose.repeat(13));
        dirty.push_str("card 4111 1111 1111 1111. ");
    }
    c.bench_function(
        "content: starter pack, 64 KiB, a card every kilobyte masked",
        |b| b.iter(|| inspect(&dirty)),
    );
    // A stream of 40-byte pieces, in its steady state: each piece read with the 1 KiB held.
    let piece = "and the shipment leaves Lyon on Monday. ";
    let mut streamed = peergate::content::stream::StreamedText::new(
        rules.look(Direction::Outbound, "alice"),
        peergate::content::stream::DEFAULT_OVERLAP,
    );
    for _ in 0..64 {
        streamed.piece(piece);
    }
    c.bench_function(
        "content: starter pack, one 40-byte streamed piece, 1 KiB held",
        |b| b.iter(|| black_box(streamed.piece(piece))),
    );
}

criterion_group!(
    benches,
    content_guard,
    tokens,
    limiter,
    limiter_refusing,
    seams,
    known_ids,
    exchange_writes,
    sqlite_floor,
    receipts
);
criterion_main!(benches);
