//! The embedded engine: every seam in one SQLite file.
//!
//! SQLite runs in WAL mode with two write connections that take turns (so concurrent writers
//! in this process queue instead of failing with `SQLITE_BUSY`) and a few reader connections.
//! Exchanges, the hot write, are committed by a thread that owns its connection
//! ([`writer`]); everything else writes through sqlx's single-connection writer pool. The
//! command line and a running server open the same file, so `peergate peer revoke` works while
//! the server runs. The statements and rows are the shared core's ([`crate::store::sql`]):
//! this engine gives it its pools, its write turn and its exchange writer.
//!
//! The schema is the versioned `.sql` files in `migrations/`, embedded and run by
//! `sqlx::migrate!`. They are SQLite's own dialect (`AUTOINCREMENT`, `RAISE(ABORT)` triggers,
//! `strftime`); another engine has migrations of its own. Stores written before the files
//! existed kept their version in `PRAGMA user_version`; opening one adopts that version once,
//! so it upgrades in place.

pub mod announce;
mod backup;
mod reserve;
mod writer;

use super::sql::{LastUses, On, SqlEngine, WritePool, WriteTx, Writer};
use super::{Exchange, PeerId, Serving, StoreEngine, StoreError};
use crate::clock::Timestamp;
use crate::locks::Locked;
use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqliteConnection};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use backup::backup;

/// The SQLite file inside the data directory.
pub const DATABASE_FILE: &str = "peergate.sqlite3";

/// The schema, versioned.
static MIGRATOR: Migrator = sqlx::migrate!("src/store/sqlite/migrations");

/// How long a connection waits for another's write lock before it fails with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Write transactions take the write lock up front, so a transaction that reads before it
/// writes waits out `busy_timeout` instead of failing when another process (the CLI, a second
/// server) commits in between.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// The SQLite engine.
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    exchanges: writer::ExchangeQueue,
    /// Taken around every write transaction in this process (see [`writer::WriteTurn`]).
    turn: writer::WriteTurn,
    /// Room kept for account changes when the disk fills.
    reserve: Arc<reserve::Reserve>,
    /// Last-use notes for their writer; taken (closing the channel) when the store closes.
    /// When each peer was last seen, for their batch writer.
    uses: LastUses,
    /// Held while a gateway serves this file: SQLite's working-task sweep and the in-memory
    /// limits and budgets assume one serving process.
    serving: std::sync::Mutex<Option<std::fs::File>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, and brings its schema up to date.
    pub async fn open(data_dir: &Path) -> Result<Self, StoreError> {
        create_private_dir(data_dir).map_err(|e| StoreError::DataDir(e.kind()))?;
        let path = data_dir.join(DATABASE_FILE);
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        migrate(&path, &options).await?;
        restrict_to_owner(&path).map_err(|e| StoreError::DataDir(e.kind()))?;
        // A local file cannot drop a connection behind our back: no liveness ping (one more
        // round trip to SQLite's worker thread) before each use.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            // A connection that comes back still inside a transaction is closed, and the next
            // write opens a fresh one. When a COMMIT fails on a full disk, SQLite has already
            // rolled back, so the driver's own ROLLBACK fails and it goes on counting an open
            // transaction: every later write on that connection was refused until a restart.
            .after_release(|connection, _| {
                use sqlx::Connection as _;
                let clean = !connection.is_in_transaction();
                Box::pin(async move { Ok(clean) })
            })
            .connect_with(options.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let turn = writer::WriteTurn::default();
        let reserve = Arc::new(reserve::Reserve::open(data_dir));
        let exchanges = writer::start(&path, BUSY_TIMEOUT, turn.clone(), reserve.clone())?;
        let uses = LastUses::start(WritePool::Sqlite(writer.clone(), turn.clone()));
        Ok(Self {
            writer,
            reader,
            path,
            exchanges,
            turn,
            reserve,
            uses,
            serving: std::sync::Mutex::new(None),
        })
    }

    /// Waits for this process's turn to write (see [`writer::WriteTurn`]).
    async fn write_turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The read-only pool (for copying the store elsewhere).
    pub(crate) fn reader(&self) -> &SqlitePool {
        &self.reader
    }
}

/// How long opening a store waits for another process's migration.
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Brings the schema up to date, once even when several processes open a new data directory
/// at the same moment: an exclusive lock on a sibling file (`peergate.sqlite3.lock`) is held
/// for the whole migration. Never on the database file itself: closing any descriptor of that
/// file would drop the POSIX locks SQLite holds on it.
async fn migrate(path: &Path, options: &SqliteConnectOptions) -> Result<(), StoreError> {
    let lock = lock_for_migration(path).await?;
    let mut conn = SqliteConnection::connect_with(options).await?;
    let outcome = async {
        adopt_user_version(&mut conn).await?;
        MIGRATOR
            .run_direct(None, &mut conn, false)
            .await
            .map_err(schema_error)?;
        record_user_version(&mut conn).await
    }
    .await;
    conn.close().await?;
    drop(lock);
    outcome
}

/// The file beside `database` named with `suffix`, opened (created if needed) to hold a lock
/// on; the lock, not the file's content, is what holds.
fn lock_file(database: &Path, suffix: &str) -> Result<std::fs::File, StoreError> {
    let mut name = database.as_os_str().to_owned();
    name.push(suffix);
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(PathBuf::from(name))
        .map_err(|e| StoreError::DataDir(e.kind()))
}

async fn lock_for_migration(database: &Path) -> Result<std::fs::File, StoreError> {
    let file = lock_file(database, ".lock")?;
    let deadline = std::time::Instant::now() + MIGRATION_LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Schema(format!(
                    "another process has been bringing this store up to date for {} s",
                    MIGRATION_LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::DataDir(e.kind())),
        }
    }
}

/// A store from before the migration files kept its version in `PRAGMA user_version`: marks
/// those migrations applied without running them again. In one write transaction, and only
/// the rows that are missing, so an adoption cut short is finished by the next open.
async fn adopt_user_version(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await?;
    if version == 0 {
        return Ok(());
    }
    if !MIGRATOR.version_exists(version) {
        return Err(StoreError::Schema(format!(
            "schema version {version} is not one this release knows"
        )));
    }
    sqlx::raw_sql(BEGIN_WRITE).execute(&mut *conn).await?;
    let outcome = MIGRATOR
        .run_direct(Some(version), &mut *conn, true)
        .await
        .map_err(schema_error);
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    sqlx::raw_sql(end).execute(&mut *conn).await?;
    outcome
}

/// Keeps `PRAGMA user_version` at the newest migration applied, as releases before the
/// migration files read it.
async fn record_user_version(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let newest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PRAGMA user_version = {newest}"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn schema_error(error: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Schema(error.to_string())
}

#[async_trait]
impl StoreEngine for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite ({})", self.path.display())
    }

    async fn claim_for_serving(&self, serving: Serving) -> Result<(), StoreError> {
        use std::io::{Read as _, Seek as _, Write as _};
        if serving == Serving::Shared {
            return Err(StoreError::Unshareable);
        }
        let mut file = lock_file(&self.path, ".serving")?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                // Only what this code writes is shown: `pid` and digits.
                let holder = if holder.strip_prefix("pid ").is_some_and(|n| {
                    !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit())
                }) {
                    holder.to_owned()
                } else {
                    "pid unknown".to_owned()
                };
                return Err(StoreError::Served { holder });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::DataDir(e.kind())),
        }
        // The lock, not the text, is what holds: a process that dies releases it with its
        // descriptors, whatever the file still says.
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "pid {}", std::process::id()));
        written.map_err(|e| StoreError::DataDir(e.kind()))?;
        *self.serving.locked() = Some(file);
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        // Also what puts the reserve back once the disk has room: an instance taken out of
        // rotation for a full disk gets no SendMessage that would notice.
        let reserve = self.reserve.clone();
        let room = tokio::task::spawn_blocking(move || reserve.admits_exchanges())
            .await
            .unwrap_or(false);
        if room {
            Ok(())
        } else {
            Err(StoreError::DiskFull)
        }
    }

    async fn close(&self) {
        // Exchanges already queued are committed first; any sent later are refused.
        let (stop, stopped) = tokio::sync::oneshot::channel();
        if self.exchanges.send(writer::Job::Stop(stop)).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(10), stopped).await;
        }
        drop(self.serving.locked().take());
        // The last-use notes still queued are written first.
        self.uses.close().await;
        // Readers first: the last connection to close checkpoints the log into the file and
        // removes it, which a read-only one cannot do.
        self.reader.close().await;
        self.writer.close().await;
    }

    async fn announce(&self, notes: &[String]) {
        announce::announce(&self.path, notes).await;
    }

    async fn hear_announcements(&self) -> Result<crate::store::Announcements, StoreError> {
        announce::hear(&self.path)
    }
}

#[async_trait]
impl SqlEngine for SqliteStore {
    fn reads(&self) -> On<'_> {
        On::Sqlite(&self.reader)
    }

    async fn writer(&self) -> Writer<'_> {
        Writer::sqlite(&self.writer, self.write_turn().await)
    }

    async fn begin_write(&self, essential: bool) -> Result<WriteTx, StoreError> {
        let turn = self.write_turn().await;
        if essential {
            self.reserve.before_essential_write();
        }
        let tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let reserve = self.reserve.clone();
        Ok(WriteTx::sqlite(
            tx,
            turn,
            Arc::new(move || reserve.on_full()),
        ))
    }

    /// Concurrent calls share one transaction (group commit) on the writer's thread, so one
    /// writer keeps up with many requests.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.exchanges
            .send(writer::Job::Write(writer::PendingExchange {
                exchange,
                done,
            }))
            .await
            .map_err(|_| StoreError::Closed)?;
        committed.await.map_err(|_| StoreError::Closed)?
    }

    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp) {
        self.uses.note(peer_id, now);
    }
}

/// Makes the database and its WAL files readable by their owner only, whatever the umask.
fn restrict_to_owner(database: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for suffix in ["", "-wal", "-shm"] {
            let mut name = database.as_os_str().to_owned();
            name.push(suffix);
            let path = PathBuf::from(name);
            if path.exists() {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = database;
    Ok(())
}

/// Creates the directory readable by its owner only (where the platform has modes).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}
