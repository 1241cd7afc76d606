//! What the answer log's integrator costs and how its reads behave as the log grows: fills a
//! fresh store with N receipts waiting (as exchanges would queue them), lets the integrator
//! append them turn by turn, then times a receipt's proof and the tiles a monitor reads. The
//! figures go in BENCHMARKS.md ("The answer log").
//!
//! `cargo run --release --example answer_log_scale -- [N] [postgres://…]` (SQLite in a
//! temporary directory without a URL; N defaults to 1,000,000).

use peergate::a2a::answer_log::AnswerLog;
use peergate::clock::{Clock, SystemClock};
use peergate::store::{Store, StoreLocation};
use sha2::{Digest, Sha256};
use std::time::Instant;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("N"));
    let url = args.next();
    let dir = tempfile::tempdir().unwrap();
    let store = match &url {
        Some(url) => Store::open_at(&StoreLocation::Postgres(url.clone())).await,
        None => Store::open(dir.path()).await,
    }
    .expect("the store opens");
    let filling = Instant::now();
    fill(&url, dir.path(), n).await;
    println!(
        "filled {n} waiting receipts in {:.1} s",
        filling.elapsed().as_secs_f64()
    );
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let log = AnswerLog::new(store.log(), "https://door.example/a2a/v1", key).unwrap();
    let started = Instant::now();
    let mut turns = Vec::new();
    loop {
        let turn = Instant::now();
        let appended = log.integrate(SystemClock.now()).await.unwrap();
        if appended == 0 {
            break;
        }
        turns.push((appended, turn.elapsed()));
    }
    let total = started.elapsed();
    let per_thousand = total.as_secs_f64() * 1000.0 / n as f64 * 1000.0;
    let first = turns
        .first()
        .map(|(k, d)| d.as_secs_f64() * 1000.0 / *k as f64 * 1000.0);
    let last = turns
        .last()
        .map(|(k, d)| d.as_secs_f64() * 1000.0 / *k as f64 * 1000.0);
    println!(
        "integrated {n} in {:.1} s over {} turns: {per_thousand:.0} ms per 1000 (first turn {:.0}, last {:.0})",
        total.as_secs_f64(),
        turns.len(),
        first.unwrap_or_default(),
        last.unwrap_or_default()
    );
    reads(&log, &store, n).await;
    store.close().await;
}

/// N receipts waiting, written straight into the table the exchanges write.
async fn fill(url: &Option<String>, dir: &std::path::Path, n: u64) {
    match url {
        Some(url) => {
            use sqlx::Executor;
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let statement = format!(
                "INSERT INTO receipts (jti, peer_id, task_id, jws, entry, created_at) \
                 SELECT 'r-' || i, 'peer', 't-' || i, 'jws-' || i, sha256(('jws-' || i)::bytea), i \
                 FROM generate_series(1, {n}) i"
            );
            pool.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(statement)))
                .await
                .unwrap();
            pool.close().await;
        }
        None => {
            let mut db = rusqlite::Connection::open(dir.join("peergate.sqlite3")).unwrap();
            let tx = db.transaction().unwrap();
            {
                let mut insert = tx
                    .prepare("INSERT INTO receipts (jti, peer_id, task_id, jws, entry, created_at) VALUES (?1, 'peer', ?2, ?3, ?4, ?5)")
                    .unwrap();
                for i in 0..n {
                    let jws = format!("jws-{i}");
                    let entry = Sha256::digest(jws.as_bytes()).to_vec();
                    insert
                        .execute(rusqlite::params![
                            format!("r-{i}"),
                            format!("t-{i}"),
                            jws,
                            entry,
                            i as i64
                        ])
                        .unwrap();
                }
            }
            tx.commit().unwrap();
        }
    }
}

/// A proof's size and time, and the time to serve each kind of tile, at this size.
async fn reads(log: &AnswerLog, store: &Store, n: u64) {
    let middle = store
        .log()
        .logged_receipts(n / 2, 1)
        .await
        .unwrap()
        .remove(0);
    const TIMES: u32 = 50;
    let started = Instant::now();
    let mut proof = String::new();
    for _ in 0..TIMES {
        proof = log.proof(&middle.jti).await.unwrap();
    }
    let hashes = proof.lines().skip(2).take_while(|l| !l.is_empty()).count();
    println!(
        "proof of index {}: {hashes} hashes, {} bytes with its checkpoint, {:.2} ms to serve",
        n / 2,
        proof.len(),
        started.elapsed().as_secs_f64() * 1000.0 / f64::from(TIMES)
    );
    let level0 = (n / 2) / 256;
    for path in [
        format!("0/{}", three(level0)),
        format!("entries/{}", three(level0)),
        format!("1/{}", three(0)),
        format!("2/000.p/{}", (n >> 16).clamp(1, 255)),
    ] {
        let started = Instant::now();
        let mut bytes = 0;
        for _ in 0..TIMES {
            bytes = log.tile(&path).await.map(|t| t.len()).unwrap_or(0);
        }
        println!(
            "tile/{path}: {bytes} bytes, {:.2} ms to serve",
            started.elapsed().as_secs_f64() * 1000.0 / f64::from(TIMES)
        );
    }
}

/// A tile index in tlog-tiles' three-digit groups.
fn three(index: u64) -> String {
    peergate::tlog::tile::path("x", index, 256)
        .trim_start_matches("tile/x/")
        .to_owned()
}
