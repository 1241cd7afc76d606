//! The exchange writer: one thread that owns a SQLite connection and commits exchanges in
//! batches, with statements prepared once.
//!
//! Every SendMessage writes its task twice (working before the model is asked, answered
//! before the answer is sent), so this is the hottest write peergate makes. Through sqlx each
//! statement of a group commit was a round trip to sqlx's worker thread (BEGIN, one per table,
//! COMMIT: about seven hand-offs a batch, each a futex wake both ways), and each multi-row
//! statement was built and prepared again because its shape changed with the batch size.
//! Here the thread that owns the connection takes everything queued (up to [`MAX_BATCH`]),
//! runs it in one `BEGIN IMMEDIATE` transaction with cached single-row statements, and answers
//! every waiting request: one hand-off in, one wake per request out.
//!
//! Durability is unchanged: a request is answered `Ok` only after its batch committed. A
//! batch that fails is retried one exchange at a time, so one bad exchange sinks only itself,
//! unless the failure is one no exchange causes (a lock held elsewhere, a full disk), which the
//! whole batch is told at once. A failed commit is rolled back when its transaction drops (or
//! was already, by SQLite), so the connection is ready for the next batch without a restart.
//! The thread takes the store's [`WriteTurn`] around each transaction.

use super::reserve::Reserve;
use crate::store::batch::Batch;
use crate::store::sql::{self, Dialect};
use crate::store::{Exchange, StoreError};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior, params};
use std::path::Path;
use std::time::Duration;

/// The core's statements, as SQLite reads them.
const SQLITE: Dialect = Dialect::Sqlite;

/// Most exchanges committed in one transaction.
pub(super) const MAX_BATCH: usize = 256;

/// An exchange waiting for the writer, and who to tell when it is durable.
pub(super) struct PendingExchange {
    pub(super) exchange: Exchange,
    pub(super) done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer is asked to do.
// `Stop` is sent once a process; boxing `Write` would add an allocation to every write.
#[allow(clippy::large_enum_variant)]
pub(super) enum Job {
    /// Commit an exchange.
    Write(PendingExchange),
    /// Commit what is queued before this, refuse what comes after (`StoreError::Closed`),
    /// close the connection, then say so.
    Stop(tokio::sync::oneshot::Sender<()>),
}

/// Where jobs are queued for the writer. The thread also ends, closing its connection, when
/// every sender is gone.
pub(super) type ExchangeQueue = tokio::sync::mpsc::Sender<Job>;

/// The in-process write turn. The writer's thread and the sqlx writer connection take it
/// around each write transaction, so writers in this process queue in order (one batch at
/// most ahead of a revocation) instead of meeting in SQLite's busy handler, which sleeps up to
/// 100 ms between tries and gives up after the busy timeout. Another process (the command
/// line) still meets the busy handler.
pub(super) type WriteTurn = std::sync::Arc<tokio::sync::Mutex<()>>;

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            return Self::DiskFull;
        }
        Self::Engine(Box::new(error))
    }
}

/// Opens the writer's connection to `database` (already migrated) and starts its thread.
pub(super) fn start(
    database: &Path,
    busy_timeout: Duration,
    turn: WriteTurn,
    reserve: std::sync::Arc<Reserve>,
) -> Result<ExchangeQueue, StoreError> {
    let connection = connect(database, busy_timeout)?;
    let (queue, pending) = tokio::sync::mpsc::channel(4 * MAX_BATCH);
    std::thread::Builder::new()
        .name("sqlite-writer".into())
        .spawn(move || run(connection, pending, &turn, &reserve))
        .map_err(|e| StoreError::Engine(Box::new(e)))?;
    Ok(queue)
}

/// The same settings as the store's other connections: WAL (already the file's mode),
/// `synchronous=NORMAL`, foreign keys, and waiting out another writer (the command line)
/// instead of failing with `SQLITE_BUSY`.
fn connect(database: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    // No mutex: this connection never leaves its thread.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let connection = Connection::open_with_flags(database, flags)?;
    connection.busy_timeout(busy_timeout)?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    Ok(connection)
}

/// Takes whatever is queued, commits it, answers; until asked to stop or the queue closes.
fn run(
    mut connection: Connection,
    mut pending: tokio::sync::mpsc::Receiver<Job>,
    turn: &tokio::sync::Mutex<()>,
    reserve: &Reserve,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stop = None;
    while stop.is_none() {
        match pending.blocking_recv() {
            Some(Job::Write(first)) => batch.push(first),
            Some(Job::Stop(stopped)) => stop = Some(stopped),
            None => break,
        }
        // What arrived while the last batch was committing goes in this one.
        drain(&mut pending, &mut batch, &mut stop);
        if batch.is_empty() {
            continue;
        }
        commit(&mut connection, &mut batch, turn, reserve);
    }
    // Nothing more is taken: what is still queued is refused, then the connection closes (the
    // last one to close checkpoints the WAL into the file).
    pending.close();
    while let Ok(job) = pending.try_recv() {
        match job {
            Job::Write(waiting) => {
                let _ = waiting.done.send(Err(StoreError::Closed));
            }
            Job::Stop(stopped) => {
                let _ = stopped.send(());
            }
        }
    }
    drop(connection);
    if let Some(stopped) = stop {
        let _ = stopped.send(());
    }
}

/// Commits one batch and answers each of its waiters, each exchange alone when one of them
/// failed the batch.
fn commit(
    connection: &mut Connection,
    batch: &mut Vec<PendingExchange>,
    turn: &tokio::sync::Mutex<()>,
    reserve: &Reserve,
) {
    // A full disk: refused before anything is written (or the model asked), and the
    // reserve's room kept for account changes.
    if !reserve.admits_exchanges() {
        for waiting in batch.drain(..) {
            let _ = waiting.done.send(Err(StoreError::DiskFull));
        }
        return;
    }
    let exchanges: Vec<&Exchange> = batch.iter().map(|p| &p.exchange).collect();
    let outcome = {
        let _turn = turn.blocking_lock();
        write(connection, &exchanges)
    };
    drop(exchanges);
    match outcome {
        Ok(()) => {
            for waiting in batch.drain(..) {
                let _ = waiting.done.send(Ok(()));
            }
        }
        Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) => {
            reserve.on_full();
            for waiting in batch.drain(..) {
                let _ = waiting.done.send(Err(StoreError::DiskFull));
            }
        }
        Err(error) if batch.len() == 1 => {
            if let Some(waiting) = batch.pop() {
                let _ = waiting.done.send(Err(error.into()));
            }
        }
        Err(error) if !one_exchange_can_cause(&error) => {
            // A lock held elsewhere past the busy timeout, a full disk, a failing device:
            // retrying each exchange alone would meet it again, once per exchange.
            let reason = error.to_string();
            for waiting in batch.drain(..) {
                let _ = waiting
                    .done
                    .send(Err(StoreError::Engine(reason.clone().into())));
            }
        }
        Err(_) => {
            // One exchange must not sink the others: each alone.
            for waiting in batch.drain(..) {
                let outcome = {
                    let _turn = turn.blocking_lock();
                    write(connection, &[&waiting.exchange])
                };
                let _ = waiting.done.send(outcome.map_err(|error| {
                    if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
                        reserve.on_full();
                    }
                    StoreError::from(error)
                }));
            }
        }
    }
}

/// Moves what is queued into `batch`, up to [`MAX_BATCH`], or up to a stop.
fn drain(
    pending: &mut tokio::sync::mpsc::Receiver<Job>,
    batch: &mut Vec<PendingExchange>,
    stop: &mut Option<tokio::sync::oneshot::Sender<()>>,
) {
    while stop.is_none() && batch.len() < MAX_BATCH {
        match pending.try_recv() {
            Ok(Job::Write(next)) => batch.push(next),
            Ok(Job::Stop(stopped)) => *stop = Some(stopped),
            Err(_) => break,
        }
    }
}

/// A finished task replaces the working copy stored before the model was asked, unless a
/// sweep already called that copy failed (a peer may have read it so). A task waiting for the
/// peer goes on when the peer answers it.
const UPSERT_TASK: &str = "INSERT INTO tasks (id, peer_id, context_id, state, body, created_at, \
     expires_at, instance, status_at, upstream_task_id, sealing) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body, \
     expires_at = excluded.expires_at, status_at = excluded.status_at, \
     instance = excluded.instance, sealing = excluded.sealing, \
     upstream_task_id = COALESCE(excluded.upstream_task_id, tasks.upstream_task_id) \
     WHERE tasks.state IN ('TASK_STATE_WORKING', 'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')";

const UPSERT_CONTEXT: &str = "INSERT INTO contexts (peer_id, context_id, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (peer_id, context_id) DO UPDATE SET updated_at = excluded.updated_at";

const INSERT_MESSAGE: &str = "INSERT INTO messages (peer_id, context_id, task_id, role, body, \
     parts, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

const ADD_USAGE: &str = "INSERT INTO usage (admin_id, peer_id, day, tokens, requests) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (admin_id, day, peer_id) DO UPDATE \
     SET tokens = tokens + excluded.tokens, requests = requests + excluded.requests";

/// Whether `error` can come from one exchange of a batch (a constraint it breaks), so that
/// the others are worth writing without it; the conditions of the file or the lock cannot.
fn one_exchange_can_cause(error: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode;
    !matches!(
        error.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::ReadOnly
                | ErrorCode::CannotOpen
                | ErrorCode::OutOfMemory
        )
    )
}

/// Writes exchanges in one transaction.
fn write(connection: &mut Connection, exchanges: &[&Exchange]) -> rusqlite::Result<()> {
    let batch = Batch::of(exchanges);
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut upsert = tx.prepare_cached(UPSERT_TASK)?;
        for (e, created_at) in &batch.tasks {
            upsert.execute(params![
                e.task_id.as_str(),
                e.peer_id.as_str(),
                e.context_id.as_str(),
                e.state.as_str(),
                e.task_json,
                created_at.as_millisecond(),
                e.expires_at.as_millisecond(),
                e.instance.as_deref(),
                e.now.as_millisecond(),
                e.upstream_task_id,
                e.sealing,
            ])?;
        }
    }
    // Configs sent with a message first, so they hear its task's first state.
    write_push_configs(&tx, exchanges)?;
    queue_states(&tx, exchanges)?;
    if !batch.contexts.is_empty() {
        let mut upsert = tx.prepare_cached(UPSERT_CONTEXT)?;
        for ((peer, context), (first, last)) in &batch.contexts {
            upsert.execute(params![
                peer,
                context,
                first.as_millisecond(),
                last.as_millisecond()
            ])?;
        }
        let mut insert = tx.prepare_cached(INSERT_MESSAGE)?;
        for (e, m) in &batch.messages {
            insert.execute(params![
                e.peer_id.as_str(),
                e.context_id.as_str(),
                e.task_id.as_str(),
                m.role.as_str(),
                &*crate::store::batch::storable_text(&m.text),
                m.parts.as_deref(),
                e.now.as_millisecond()
            ])?;
        }
    }
    if !batch.usage.is_empty() {
        let mut add = tx.prepare_cached(ADD_USAGE)?;
        for ((owner, peer, day), (tokens, requests)) in &batch.usage {
            add.execute(params![
                owner,
                peer,
                day.to_string(),
                i64::try_from(*tokens).unwrap_or(i64::MAX),
                i64::try_from(*requests).unwrap_or(i64::MAX),
            ])?;
        }
    }
    write_audit(&tx, exchanges)?;
    write_receipts(&tx, exchanges)?;
    tx.commit()?;
    Ok(())
}

/// The push configs sent with the messages, each retargeting its queued deliveries.
fn write_push_configs(tx: &Transaction<'_>, exchanges: &[&Exchange]) -> rusqlite::Result<()> {
    for config in exchanges.iter().filter_map(|e| e.push_config.as_ref()) {
        tx.prepare_cached(SQLITE.form(sql::UPSERT_CONFIG))?
            .execute(params![
                config.task_id,
                config.id.as_str(),
                config.peer_id.as_str(),
                config.url,
                config.sealed,
                config.created_at.as_millisecond(),
            ])?;
        tx.prepare_cached(SQLITE.form(sql::RETARGET_DELIVERIES))?
            .execute(params![
                config.url,
                config.sealed,
                config.task_id,
                config.id.as_str()
            ])?;
    }
    Ok(())
}

/// The audit entries the exchanges carry.
fn write_audit(tx: &Transaction<'_>, exchanges: &[&Exchange]) -> rusqlite::Result<()> {
    for entry in exchanges.iter().filter_map(|e| e.audit.as_ref()) {
        tx.prepare_cached(SQLITE.form(sql::INSERT_AUDIT))?
            .execute(params![
                entry.at.as_millisecond(),
                entry.actor.to_string(),
                entry.action.as_str(),
                entry.target.to_string(),
                entry.outcome.to_string(),
                entry.client,
                entry.detail,
                entry.owner_id.as_deref(),
            ])?;
    }
    Ok(())
}

/// The receipts of the final states, queued for the answer log.
fn write_receipts(tx: &Transaction<'_>, exchanges: &[&Exchange]) -> rusqlite::Result<()> {
    for e in exchanges {
        if let Some(receipt) = &e.receipt {
            tx.prepare_cached(SQLITE.form(sql::INSERT_RECEIPT))?
                .execute(params![
                    receipt.jti,
                    e.peer_id.as_str(),
                    e.task_id.as_str(),
                    receipt.jws,
                    receipt.entry.as_slice(),
                    e.now.as_millisecond(),
                ])?;
        }
    }
    Ok(())
}

/// Queues each state marked [`Exchange::notify`] for its task's push configs (none, for a
/// task without any: the statement's look-up finds nothing).
fn queue_states(tx: &Transaction<'_>, exchanges: &[&Exchange]) -> rusqlite::Result<()> {
    for e in exchanges.iter().filter(|e| e.notify) {
        tx.prepare_cached(SQLITE.form(sql::QUEUE_STATE))?
            .execute(params![
                crate::store::records::task_notification(&e.task_json),
                e.now.as_millisecond(),
                e.task_id.as_str(),
                e.state.as_str(),
                e.call_trace.as_deref(),
            ])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStore as _;
    use crate::store::sqlite::SqliteStore;

    fn exchange(task: &str) -> Exchange {
        Exchange {
            task_id: task.into(),
            peer_id: "peer_1".into(),
            context_id: "ctx".into(),
            state: crate::protocol::types::TaskState::Completed,
            task_json: "{}".into(),
            now: crate::clock::from_millis(1),
            expires_at: crate::clock::Timestamp::MAX,
            messages: Vec::new(),
            usage: None,
            audit: None,
            instance: None,
            notify: false,
            push_config: None,
            upstream_task_id: None,
            receipt: None,
            call_trace: None,
            sealing: None,
        }
    }

    async fn stored(store: &SqliteStore, task: &str) -> bool {
        sqlx::query("SELECT 1 FROM tasks WHERE id = ?")
            .bind(task)
            .fetch_optional(&store.reader)
            .await
            .unwrap()
            .is_some()
    }

    /// While another writer of this process holds the turn (a revocation, say), the writer's
    /// thread waits for it instead of committing beside it through SQLite's busy handler.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_writer_commits_only_in_its_turn() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SqliteStore::open(dir.path()).await.unwrap());
        for insert in [
            "INSERT INTO admins (id, name, status, created_at) VALUES ('adm_1', 'ada', 'active', 0)",
            "INSERT INTO peers (id, name, status, rate_per_minute, created_at, owner_id) \
             VALUES ('peer_1', 'alice', 'active', 60, 0, 'adm_1')",
        ] {
            sqlx::query(insert).execute(&store.writer).await.unwrap();
        }
        let turn = store.write_turn().await;
        let saving = tokio::spawn({
            let store = store.clone();
            async move { store.save_exchange(exchange("t1")).await }
        });
        // Without the turn the row would be there within a few milliseconds.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(!stored(&store, "t1").await, "committed outside its turn");
        }
        drop(turn);
        saving.await.unwrap().unwrap();
        assert!(stored(&store, "t1").await);
    }

    #[test]
    fn only_failures_an_exchange_can_cause_are_retried_one_by_one() {
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        assert!(one_exchange_can_cause(&failure(
            rusqlite::ffi::SQLITE_CONSTRAINT
        )));
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR,
        ] {
            assert!(!one_exchange_can_cause(&failure(code)), "{code}");
        }
    }
}
