//! When each peer was last seen: noted on every request without waiting, written in batches
//! off the request's path, one statement a batch (so SQLite's write lock is held only while the
//! statement runs, never across an await where a busy runtime would keep it from the command
//! line, and PostgreSQL's rows only as long).

use super::{Writer, sql};
use crate::clock::Timestamp;
use crate::locks::Locked;
use crate::store::PeerId;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Most notes waiting for the writer; past that, notes are dropped (they cost only a
/// timestamp, and the next minute brings another).
const BACKLOG: usize = 1024;

/// Most peers one statement updates.
const MOST_PER_BATCH: usize = 64;

/// A note: the peer's id and when it was seen (epoch milliseconds).
type Note = (Box<str>, i64);

/// Where the batches are written: an engine's writing pool, owned by the writer's task.
pub(crate) enum WritePool {
    /// SQLite's writer pool, and this process's write turn.
    Sqlite(SqlitePool, std::sync::Arc<tokio::sync::Mutex<()>>),
    /// PostgreSQL's pool.
    Postgres(PgPool),
}

impl WritePool {
    async fn writer(&self) -> Writer<'_> {
        match self {
            Self::Sqlite(pool, turn) => Writer::sqlite(pool, turn.clone().lock_owned().await),
            Self::Postgres(pool) => Writer::postgres(pool),
        }
    }
}

/// The notes and their writer.
#[derive(Debug)]
pub(crate) struct LastUses {
    /// Taken when the store closes, which ends the writer once it has written what is queued.
    notes: Mutex<Option<tokio::sync::mpsc::Sender<Note>>>,
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl LastUses {
    /// Starts the writer on `pool`.
    pub(crate) fn start(pool: WritePool) -> Self {
        let (notes, seen) = tokio::sync::mpsc::channel(BACKLOG);
        Self {
            notes: Mutex::new(Some(notes)),
            writer: Mutex::new(Some(tokio::spawn(write(pool, seen)))),
        }
    }

    /// Notes that `peer_id` was seen at `now`; returns at once.
    pub(crate) fn note(&self, peer_id: &PeerId, now: Timestamp) {
        if let Some(notes) = self.notes.locked().as_ref() {
            // Full or closed: the timestamp waits for the next note.
            let _ = notes.try_send((peer_id.as_str().into(), now.as_millisecond()));
        }
    }

    /// Writes what is queued (bounded: a note is a timestamp) and stops the writer.
    pub(crate) async fn close(&self) {
        drop(self.notes.locked().take());
        let writer = self.writer.locked().take();
        if let Some(writer) = writer {
            let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        }
    }
}

async fn write(pool: WritePool, mut seen: tokio::sync::mpsc::Receiver<Note>) {
    let mut batch = Vec::with_capacity(MOST_PER_BATCH);
    while seen.recv_many(&mut batch, MOST_PER_BATCH).await > 0 {
        // One row a peer, its latest time: an UPDATE … FROM uses one match a row.
        batch.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        batch.dedup_by(|later, kept| later.0 == kept.0);
        let mut update = sql(update_of(batch.len()));
        for (peer_id, at) in &batch {
            update = update.bind(&**peer_id).bind(*at);
        }
        let writer = pool.writer().await;
        if let Err(e) = update.execute(writer.on()).await {
            tracing::warn!(error = %e, "could not record last use of peers");
        }
        batch.clear();
    }
}

/// The update of `rows` peers (1 to [`MOST_PER_BATCH`]): made once a size, and kept.
fn update_of(rows: usize) -> &'static str {
    static MADE: [OnceLock<&'static str>; MOST_PER_BATCH] =
        [const { OnceLock::new() }; MOST_PER_BATCH];
    let rows = rows.clamp(1, MOST_PER_BATCH);
    MADE[rows - 1].get_or_init(|| {
        let values: Vec<String> = (0..rows)
            .map(|i| format!("(${}, CAST(${} AS BIGINT))", 2 * i + 1, 2 * i + 2))
            .collect();
        // Leaked once a size: at most MOST_PER_BATCH statements for the life of the process.
        Box::leak(
            format!(
                "UPDATE peers SET last_used_at = GREATEST(coalesce(last_used_at, v.column2), \
                 v.column2) FROM (VALUES {}) AS v WHERE peers.id = v.column1",
                values.join(", ")
            )
            .into_boxed_str(),
        )
    })
}
