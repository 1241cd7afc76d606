//! The answer log's rows: receipts as issued (with the exchange that stores their task's final
//! state), the tree's stored hashes, and the signed checkpoints. The tree itself is
//! [`crate::tlog`]'s; this file only reads and writes what it names.

use super::rows::{CheckpointRow, HashRow, PendingRow, ReceiptRow};
use super::{Dialect, Sql, SqlEngine, WriteTx, sql};
use crate::clock::Timestamp;
use crate::protocol::ids::TaskId;
use crate::store::PeerId;
use crate::store::records::{Exchange, IssuedReceipt, LoggedReceipt};
use crate::store::{LogIntegration, LogStore, PendingEntry, StoreError};
use crate::tlog::{Hash, Node};
use async_trait::async_trait;

/// Stores a receipt with its exchange: `$1` jti, `$2` peer, `$3` task, `$4` JWS, `$5` entry,
/// `$6` now.
pub(crate) const INSERT_RECEIPT: &str = "INSERT INTO receipts (jti, peer_id, task_id, jws, \
     entry, created_at) VALUES ($1, $2, $3, $4, $5, $6)";

/// [`INSERT_RECEIPT`] for the exchange's receipt, if it has one.
pub(crate) fn insert_receipt_statement(e: &Exchange) -> Option<Sql<'_>> {
    let receipt = e.receipt.as_ref()?;
    Some(receipt_statement(receipt, &e.peer_id, &e.task_id, e.now))
}

/// [`INSERT_RECEIPT`] for `receipt`, of `peer`'s task `task`, issued at `now`.
pub(crate) fn receipt_statement<'a>(
    receipt: &'a IssuedReceipt,
    peer: &'a PeerId,
    task: &'a TaskId,
    now: Timestamp,
) -> Sql<'a> {
    sql(INSERT_RECEIPT)
        .bind(receipt.jti.as_str())
        .bind(peer)
        .bind(task.as_str())
        .bind(receipt.jws.as_str())
        .bind(receipt.entry.as_slice())
        .bind(now)
}

/// The key of PostgreSQL's transaction-scoped advisory lock that elects the integrator (the
/// bytes of `tlog` and a version).
const INTEGRATOR_LOCK: i64 = 0x746c_6f67_0000_0001;

/// Rows a turn writes per statement, at most: the appends of a turn take a few dozen
/// statements, not three per receipt (the turn holds SQLite's write turn meanwhile).
const ROWS: usize = 64;

/// `rows` in runs of [`ROWS`], then of 8, then one at a time, each run a statement whose form
/// is made once.
fn chunks<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        let take = [ROWS, 8, 1].into_iter().find(|&n| rest.len() >= n)?;
        let (run, left) = rest.split_at(take);
        rest = left;
        Some(run)
    })
}

/// `head` followed by `rows` tuples of `width` numbered parameters, each written by `row`
/// from its first parameter's number; made once, kept for the life of the process.
fn rows_statement(
    head: &str,
    rows: usize,
    width: usize,
    row: fn(usize) -> String,
    tail: &str,
) -> &'static str {
    let tuples: Vec<String> = (0..rows).map(|r| row(r * width + 1)).collect();
    Box::leak(format!("{head}{}{tail}", tuples.join(", ")).into_boxed_str())
}

/// The forms of a statement by its number of rows (1, 8 and [`ROWS`]).
struct ByRows([&'static str; 3]);

impl std::ops::Index<usize> for ByRows {
    type Output = &'static str;
    fn index(&self, rows: usize) -> &&'static str {
        match rows {
            1 => &self.0[0],
            8 => &self.0[1],
            _ => &self.0[2],
        }
    }
}

fn by_rows(make: fn(usize) -> &'static str) -> ByRows {
    ByRows([make(1), make(8), make(ROWS)])
}

/// Writes stored hashes: `(level, n, hash)` per row.
static INSERT_HASHES: std::sync::LazyLock<ByRows> = std::sync::LazyLock::new(|| {
    by_rows(|rows| {
        rows_statement(
            "INSERT INTO log_hashes (level, n, hash) VALUES ",
            rows,
            3,
            |p| format!("(${p}, ${}, ${})", p + 1, p + 2),
            "",
        )
    })
});

/// Gives waiting receipts their indices: `(jti, index)` per row (the turn read them waiting,
/// under its lock; the join goes by the receipts' key, so its cost does not grow with the log).
static SET_INDICES: std::sync::LazyLock<ByRows> = std::sync::LazyLock::new(|| {
    by_rows(|rows| {
        rows_statement(
            "UPDATE receipts SET log_index = v.column2 FROM (VALUES ",
            rows,
            2,
            |p| format!("(CAST(${p} AS TEXT), CAST(${} AS BIGINT))", p + 1),
            ") AS v WHERE receipts.jti = v.column1",
        )
    })
});

const SELECT_HASH: &str = "SELECT hash FROM log_hashes WHERE level = $1 AND n = $2";
const LATEST_CHECKPOINT: &str = "SELECT size, note FROM log_checkpoints ORDER BY size DESC LIMIT 1";

fn index(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl<E: SqlEngine> LogStore for E {
    async fn begin_integration(&self) -> Result<Option<Box<dyn LogIntegration>>, StoreError> {
        let mut tx = self.begin_write(false).await?;
        if tx.dialect() == Dialect::Postgres {
            // Held until the transaction ends: a dead integrator's turn passes with its
            // connection, and its appends roll back whole.
            let (held,): (bool,) = sql("SELECT pg_try_advisory_xact_lock($1)")
                .bind(INTEGRATOR_LOCK)
                .fetch_one(tx.on())
                .await?;
            if !held {
                return Ok(None);
            }
        }
        Ok(Some(Box::new(Integration { tx })))
    }

    async fn latest_checkpoint(&self) -> Result<Option<(u64, String)>, StoreError> {
        let row: Option<CheckpointRow> =
            sql(LATEST_CHECKPOINT).fetch_optional(self.reads()).await?;
        Ok(row.map(CheckpointRow::checkpoint))
    }

    async fn checkpoints(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let rows: Vec<CheckpointRow> = sql("SELECT size, note FROM log_checkpoints ORDER BY size")
            .fetch_all(self.reads())
            .await?;
        Ok(rows.into_iter().map(CheckpointRow::checkpoint).collect())
    }

    async fn log_hashes(&self, nodes: &[Node]) -> Result<Option<Vec<Hash>>, StoreError> {
        let mut hashes = Vec::with_capacity(nodes.len());
        for node in nodes {
            let row: Option<HashRow> = sql(SELECT_HASH)
                .bind(i64::from(node.level))
                .bind(index(node.index))
                .fetch_optional(self.reads())
                .await?;
            match row.and_then(HashRow::hash) {
                Some(hash) => hashes.push(hash),
                None => return Ok(None),
            }
        }
        Ok(Some(hashes))
    }

    async fn log_level(&self, level: u8, start: u64, end: u64) -> Result<Vec<Hash>, StoreError> {
        let rows: Vec<HashRow> =
            sql("SELECT hash FROM log_hashes WHERE level = $1 AND n >= $2 AND n < $3 ORDER BY n")
                .bind(i64::from(level))
                .bind(index(start))
                .bind(index(end))
                .fetch_all(self.reads())
                .await?;
        rows.into_iter()
            .map(|row| {
                row.hash()
                    .ok_or_else(|| StoreError::Schema("a log hash is not 32 bytes".into()))
            })
            .collect()
    }

    async fn logged_receipt(&self, jti: &str) -> Result<Option<LoggedReceipt>, StoreError> {
        let row: Option<ReceiptRow> =
            sql("SELECT jti, log_index, jws, entry, created_at FROM receipts WHERE jti = $1")
                .bind(jti)
                .fetch_optional(self.reads())
                .await?;
        Ok(row.map(ReceiptRow::receipt))
    }

    async fn logged_receipts(
        &self,
        start: u64,
        most: u32,
    ) -> Result<Vec<LoggedReceipt>, StoreError> {
        let rows: Vec<ReceiptRow> = sql(
            "SELECT jti, log_index, jws, entry, created_at FROM receipts \
             WHERE log_index >= $1 ORDER BY log_index LIMIT $2",
        )
        .bind(index(start))
        .bind(most)
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(ReceiptRow::receipt).collect())
    }

    async fn pending_receipts(&self, most: u32) -> Result<u64, StoreError> {
        let (n,): (i64,) = sql(
            "SELECT COUNT(*) FROM (SELECT 1 FROM receipts WHERE log_index IS NULL LIMIT $1) AS w",
        )
        .bind(most)
        .fetch_one(self.reads())
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// The integrator's turn: one write transaction (holding the advisory lock on PostgreSQL).
struct Integration {
    tx: WriteTx,
}

#[async_trait]
impl LogIntegration for Integration {
    async fn latest_checkpoint(&mut self) -> Result<Option<(u64, String)>, StoreError> {
        let row: Option<CheckpointRow> =
            sql(LATEST_CHECKPOINT).fetch_optional(self.tx.on()).await?;
        Ok(row.map(CheckpointRow::checkpoint))
    }

    async fn log_hashes(&mut self, nodes: &[Node]) -> Result<Option<Vec<Hash>>, StoreError> {
        let mut hashes = Vec::with_capacity(nodes.len());
        for node in nodes {
            let row: Option<HashRow> = sql(SELECT_HASH)
                .bind(i64::from(node.level))
                .bind(index(node.index))
                .fetch_optional(self.tx.on())
                .await?;
            match row.and_then(HashRow::hash) {
                Some(hash) => hashes.push(hash),
                None => return Ok(None),
            }
        }
        Ok(Some(hashes))
    }

    async fn pending(&mut self, most: u32) -> Result<Vec<PendingEntry>, StoreError> {
        // The entries only: the receipts themselves stay unread.
        let rows: Vec<PendingRow> = sql("SELECT jti, entry FROM receipts WHERE log_index IS NULL \
             ORDER BY created_at, jti LIMIT $1 FOR UPDATE")
        .bind(most)
        .fetch_all(self.tx.on())
        .await?;
        Ok(rows.into_iter().map(PendingRow::entry).collect())
    }

    async fn append(
        &mut self,
        first: u64,
        entries: &[PendingEntry],
        written: &[(Node, Hash)],
        (size, note, now): (u64, &str, Timestamp),
    ) -> Result<(), StoreError> {
        let indexed: Vec<(&PendingEntry, u64)> = entries.iter().zip(first..).collect();
        for chunk in chunks(&indexed) {
            let mut statement = sql(SET_INDICES[chunk.len()]);
            for (entry, i) in chunk {
                statement = statement.bind(entry.jti.as_str()).bind(index(*i));
            }
            statement.execute(self.tx.on()).await?;
        }
        for chunk in chunks(written) {
            let mut statement = sql(INSERT_HASHES[chunk.len()]);
            for (node, hash) in chunk {
                statement = statement
                    .bind(i64::from(node.level))
                    .bind(index(node.index))
                    .bind(hash.as_slice());
            }
            statement.execute(self.tx.on()).await?;
        }
        sql("INSERT INTO log_checkpoints (size, note, created_at) VALUES ($1, $2, $3)")
            .bind(index(size))
            .bind(note)
            .bind(now)
            .execute(self.tx.on())
            .await?;
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await
    }
}
