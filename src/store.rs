//! The store of record: peers, their credentials, tasks and conversations, in one SQLite file.
//!
//! SQLite runs in WAL mode with one writer connection (so concurrent writers queue instead of
//! failing with `SQLITE_BUSY`) and a few reader connections. The command line and a running
//! server open the same file, so `peergate peer revoke` works while the server runs.
//! Timestamps are INTEGER epoch milliseconds, so the schema ports to PostgreSQL unchanged.

mod accounts;

pub use accounts::{
    AdminLogin, AdminRecord, AuditEntry, AuditRecord, ConversationEntry, ConversationSummary,
    PeerUsage, WriteTx,
};

use crate::token::{CredentialKind, TokenSecretHash};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The SQLite file inside the data directory.
pub const DATABASE_FILE: &str = "peergate.sqlite3";

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A peer with that name already exists.
    #[error("a peer named \"{0}\" already exists")]
    DuplicatePeer(String),
    /// No peer has that name.
    #[error("no peer named \"{0}\"")]
    UnknownPeer(String),
    /// The peer was revoked and takes no new credentials.
    #[error("peer \"{0}\" is revoked")]
    RevokedPeer(String),
    /// An administrator with that name already exists.
    #[error("an administrator named \"{0}\" already exists")]
    DuplicateAdmin(String),
    /// The data directory could not be prepared.
    #[error("cannot prepare the data directory: {0}")]
    DataDir(std::io::ErrorKind),
    /// The database failed. Shown to the operator and logged; peers only ever see a request id.
    #[error("the store failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// A peer as the administrator sees it. Never holds a secret.
#[derive(Debug, Clone)]
pub struct PeerRecord {
    /// Stable id.
    pub id: String,
    /// Unique name chosen by the administrator.
    pub name: String,
    /// `active` or `revoked`.
    pub status: String,
    /// Requests per minute.
    pub rate_per_minute: u32,
    /// Creation time, epoch ms.
    pub created_at: i64,
    /// Last authenticated request, epoch ms (updated at most once a minute).
    pub last_used_at: Option<i64>,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// That administrator's name.
    pub owner_name: String,
    /// When the peer stops being let in, epoch ms; `None` for never.
    pub expires_at: Option<i64>,
}

/// What the authentication layer needs to decide about a token id.
#[derive(Debug, Clone)]
pub struct CredentialRecord {
    /// The peer the credential belongs to.
    pub peer_id: String,
    /// That peer's name.
    pub peer_name: String,
    /// Hash of the secret.
    pub secret_hash: TokenSecretHash,
    /// False once the credential or its peer is revoked.
    pub active: bool,
    /// The peer's quota.
    pub rate_per_minute: u32,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// When the credential stops working (a rotation's grace period or the peer's expiry,
    /// whichever comes first), epoch ms.
    pub valid_until: Option<i64>,
}

/// What Basic authentication needs to know about a peer name.
#[derive(Debug, Clone)]
pub struct PeerLogin {
    /// The peer.
    pub peer_id: String,
    /// Its name.
    pub peer_name: String,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once revoked.
    pub active: bool,
    /// The peer's quota.
    pub rate_per_minute: u32,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// When the peer expires, epoch ms.
    pub valid_until: Option<i64>,
}

/// One message of a conversation, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationMessage {
    /// `user` (the peer) or `agent` (the model).
    pub role: ConversationRole,
    /// The text.
    pub text: String,
}

/// Who wrote a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationRole {
    /// The partner agent.
    Peer,
    /// The model behind peergate.
    Agent,
}

impl ConversationRole {
    fn as_str(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Agent => "agent",
        }
    }
}

/// A finished exchange: the task as served and the conversation messages it adds.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Task id.
    pub task_id: String,
    /// Owning peer.
    pub peer_id: String,
    /// Conversation.
    pub context_id: String,
    /// Final state name.
    pub state: &'static str,
    /// The task as served, JSON.
    pub task_json: String,
    /// Now, epoch ms.
    pub now: i64,
    /// When `GetTask` stops finding it, epoch ms.
    pub expires_at: i64,
    /// The conversation messages this exchange adds (empty when the backend failed).
    pub messages: Vec<ConversationMessage>,
    /// Model tokens spent, counted against the owner's budget.
    pub usage: Option<ExchangeUsage>,
    /// A record for the audit log (a refusal by quota).
    pub audit: Option<AuditEntry>,
}

/// Tokens an exchange spent on the model, for the owner's usage.
#[derive(Debug, Clone)]
pub struct ExchangeUsage {
    /// The administrator charged.
    pub owner_id: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: std::sync::Arc<str>,
    /// Tokens read and written.
    pub tokens: u64,
}

/// An exchange waiting for the group commit, and who to tell when it is durable.
struct PendingExchange {
    exchange: Exchange,
    done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// Most exchanges committed in one transaction.
const MAX_BATCH: usize = 256;

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct Store {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    exchanges: tokio::sync::mpsc::Sender<PendingExchange>,
}

/// Write transactions take the write lock up front, so a transaction that reads before it
/// writes waits out `busy_timeout` instead of failing when another process (the CLI, a second
/// server) commits in between.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE peers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    rate_per_minute INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER
);
CREATE TABLE credentials (
    token_id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL REFERENCES peers(id),
    secret_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX credentials_peer ON credentials(peer_id);
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX tasks_expires ON tasks(expires_at);
CREATE TABLE contexts (
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (peer_id, context_id)
);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX messages_context ON messages(peer_id, context_id, seq);
"#,
    r#"
ALTER TABLE credentials ADD COLUMN kind TEXT NOT NULL DEFAULT 'token';
ALTER TABLE peers ADD COLUMN password_hash TEXT;
"#,
    r#"
CREATE TABLE documents (
    name TEXT PRIMARY KEY,
    etag TEXT NOT NULL,
    modified_at INTEGER NOT NULL
);
"#,
    r#"
CREATE TABLE admins (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    status TEXT NOT NULL,
    model_allowed INTEGER NOT NULL DEFAULT 1,
    tokens_per_day INTEGER,
    tokens_per_month INTEGER,
    created_at INTEGER NOT NULL
);
CREATE TABLE admin_tokens (
    token_id TEXT PRIMARY KEY,
    admin_id TEXT NOT NULL REFERENCES admins(id),
    secret_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
ALTER TABLE peers ADD COLUMN owner_id TEXT REFERENCES admins(id);
ALTER TABLE peers ADD COLUMN expires_at INTEGER;
ALTER TABLE credentials ADD COLUMN expires_at INTEGER;
CREATE INDEX peers_owner ON peers(owner_id);
-- Peers from before administrators existed go to an administrator named "operator", who has
-- no password until `peergate admin password operator`.
INSERT INTO admins (id, name, status, created_at)
    SELECT 'adm_operator', 'operator', 'active', CAST(strftime('%s', 'now') AS INTEGER) * 1000
    WHERE EXISTS (SELECT 1 FROM peers);
UPDATE peers SET owner_id = 'adm_operator' WHERE owner_id IS NULL;
CREATE TABLE usage (
    admin_id TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    day TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    PRIMARY KEY (admin_id, day, peer_id)
);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    client TEXT NOT NULL,
    detail TEXT NOT NULL,
    owner_id TEXT
);
CREATE INDEX audit_at ON audit(at);
CREATE TRIGGER audit_keeps_rows BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_keeps_deletions_out BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"#,
];

impl Store {
    /// Opens (creating if needed) the store in `data_dir`, and brings its schema up to date.
    pub async fn open(data_dir: &Path) -> Result<Self, StoreError> {
        create_private_dir(data_dir).map_err(|e| StoreError::DataDir(e.kind()))?;
        let path = data_dir.join(DATABASE_FILE);
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        // A local file cannot drop a connection behind our back: no liveness ping (one more
        // round trip to SQLite's worker thread) before each use.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        migrate(&writer).await?;
        restrict_to_owner(&path).map_err(|e| StoreError::DataDir(e.kind()))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let (exchanges, pending) = tokio::sync::mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(group_commit(writer.clone(), pending));
        Ok(Self {
            writer,
            reader,
            path,
            exchanges,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Every peer (of one administrator, or all), oldest first.
    pub async fn list_peers(&self, owner_id: Option<&str>) -> Result<Vec<PeerRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE (? IS NULL OR p.owner_id = ?) ORDER BY p.created_at, p.name"
        )))
        .bind(owner_id)
        .bind(owner_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(peer_record).collect()
    }

    /// What Basic authentication needs about `name`, if such a peer exists.
    pub async fn find_peer_login(&self, name: &str) -> Result<Option<PeerLogin>, StoreError> {
        let row = sqlx::query(
            "SELECT id, name, password_hash, status, rate_per_minute, owner_id, expires_at FROM peers WHERE name = ?",
        )
        .bind(name)
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        Ok(Some(PeerLogin {
            peer_id: row.try_get("id")?,
            peer_name: row.try_get("name")?,
            password_hash: row.try_get("password_hash")?,
            active: status == "active",
            rate_per_minute: rate(&row)?,
            owner_id: row.try_get("owner_id")?,
            valid_until: row.try_get("expires_at")?,
        }))
    }

    /// The credential with this token id, whatever its state.
    pub async fn find_credential(
        &self,
        kind: CredentialKind,
        token_id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT c.peer_id, p.name, c.secret_hash, c.revoked_at, p.status, p.rate_per_minute, \
             p.owner_id, min(coalesce(c.expires_at, p.expires_at), coalesce(p.expires_at, c.expires_at)) AS valid_until \
             FROM credentials c JOIN peers p ON p.id = c.peer_id WHERE c.token_id = ? AND c.kind = ?",
        )
        .bind(token_id)
        .bind(kind.as_str())
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let hash: Vec<u8> = row.try_get("secret_hash")?;
        let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) else {
            return Ok(None);
        };
        let revoked_at: Option<i64> = row.try_get("revoked_at")?;
        let status: String = row.try_get("status")?;
        Ok(Some(CredentialRecord {
            peer_id: row.try_get("peer_id")?,
            peer_name: row.try_get("name")?,
            secret_hash: TokenSecretHash(hash),
            active: revoked_at.is_none() && status == "active",
            rate_per_minute: rate(&row)?,
            owner_id: row.try_get("owner_id")?,
            valid_until: row.try_get("valid_until")?,
        }))
    }

    /// Records that a peer was seen.
    pub async fn touch_peer(&self, peer_id: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET last_used_at = ? WHERE id = ?")
            .bind(now)
            .bind(peer_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// The last `limit` messages of a peer's context, oldest first.
    pub async fn context_history(
        &self,
        peer_id: &str,
        context_id: &str,
        limit: u32,
    ) -> Result<Vec<ConversationMessage>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT role, body FROM messages WHERE peer_id = ? AND context_id = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(peer_id)
        .bind(context_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        let mut history = rows
            .iter()
            .map(|row| {
                let role: String = row.try_get("role")?;
                Ok(ConversationMessage {
                    role: if role == "agent" {
                        ConversationRole::Agent
                    } else {
                        ConversationRole::Peer
                    },
                    text: row.try_get("body")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        history.reverse();
        Ok(history)
    }

    /// Persists a finished task and its conversation messages, and returns once they are
    /// committed. Concurrent calls share one transaction (group commit), so one writer keeps up
    /// with many requests; an exchange is never reported saved before its commit.
    pub async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.exchanges
            .send(PendingExchange { exchange, done })
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::PoolClosed))?;
        committed
            .await
            .map_err(|_| StoreError::Database(sqlx::Error::PoolClosed))?
    }

    /// A task of this peer that has not expired, as JSON. Another peer's task is `None`,
    /// exactly like a task that never existed.
    pub async fn find_task(
        &self,
        peer_id: &str,
        task_id: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let row =
            sqlx::query("SELECT body FROM tasks WHERE id = ? AND peer_id = ? AND expires_at > ?")
                .bind(task_id)
                .bind(peer_id)
                .bind(now)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row.map(|row| row.try_get("body")).transpose()?)
    }

    /// When the document `name` last changed: the stored time if its entity tag is still
    /// `etag`, else `now`, recorded for the next start.
    pub async fn document_modified_at(
        &self,
        name: &str,
        etag: &str,
        now: i64,
    ) -> Result<i64, StoreError> {
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let row = sqlx::query("SELECT etag, modified_at FROM documents WHERE name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = row
            && row.try_get::<String, _>("etag")? == etag
        {
            return Ok(row.try_get("modified_at")?);
        }
        sqlx::query(
            "INSERT INTO documents (name, etag, modified_at) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, modified_at = excluded.modified_at",
        )
        .bind(name)
        .bind(etag)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(now)
    }

    /// Tasks still marked working (created before `created_before`, if given): (id, body).
    /// After a restart these are the ones a crash interrupted.
    pub async fn working_tasks(
        &self,
        created_before: Option<i64>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, body FROM tasks WHERE state = 'TASK_STATE_WORKING' AND (? IS NULL OR created_at < ?)",
        )
        .bind(created_before)
        .bind(created_before)
        .fetch_all(&self.writer)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("body")?)))
            .collect()
    }

    /// Replaces a working task with its final state, if it is still working.
    pub async fn finish_working_task(
        &self,
        id: &str,
        state: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE tasks SET state = ?, body = ? WHERE id = ? AND state = 'TASK_STATE_WORKING'",
        )
        .bind(state)
        .bind(body)
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Deletes tasks whose retention ended; returns how many.
    pub async fn delete_expired_tasks(&self, now: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM tasks WHERE expires_at <= ?")
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }
}

/// The columns of a [`PeerRecord`], from `peers p` joined with its owner `a`.
const PEER_COLUMNS: &str = "SELECT p.id, p.name, p.status, p.rate_per_minute, p.created_at, \
     p.last_used_at, p.owner_id, a.name AS owner_name, p.expires_at \
     FROM peers p JOIN admins a ON a.id = p.owner_id";

fn peer_record(row: &sqlx::sqlite::SqliteRow) -> Result<PeerRecord, StoreError> {
    Ok(PeerRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        rate_per_minute: rate(row)?,
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        owner_id: row.try_get("owner_id")?,
        owner_name: row.try_get("owner_name")?,
        expires_at: row.try_get("expires_at")?,
    })
}

fn rate(row: &sqlx::sqlite::SqliteRow) -> Result<u32, StoreError> {
    Ok(u32::try_from(row.try_get::<i64, _>("rate_per_minute")?).unwrap_or(u32::MAX))
}

/// Commits waiting exchanges in batches until every `Store` handle is gone.
async fn group_commit(pool: SqlitePool, mut pending: tokio::sync::mpsc::Receiver<PendingExchange>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while pending.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let exchanges: Vec<&Exchange> = batch.iter().map(|p| &p.exchange).collect();
        match write_exchanges(&pool, &exchanges).await {
            Ok(()) => {
                for waiting in batch.drain(..) {
                    let _ = waiting.done.send(Ok(()));
                }
            }
            Err(error) => {
                // One exchange must not sink the others: retry each alone.
                if batch.len() == 1 {
                    if let Some(waiting) = batch.pop() {
                        let _ = waiting.done.send(Err(error));
                    }
                    continue;
                }
                for waiting in batch.drain(..) {
                    let outcome = write_exchanges(&pool, &[&waiting.exchange]).await;
                    let _ = waiting.done.send(outcome);
                }
            }
        }
    }
}

/// Writes exchanges in one transaction, a few multi-row statements for the whole batch.
async fn write_exchanges(pool: &SqlitePool, exchanges: &[&Exchange]) -> Result<(), StoreError> {
    let mut tx = pool.begin_with(BEGIN_WRITE).await?;
    let mut tasks = QueryBuilder::<Sqlite>::new(
        "INSERT INTO tasks (id, peer_id, context_id, state, body, created_at, expires_at) ",
    );
    tasks.push_values(exchanges, |mut row, e| {
        row.push_bind(e.task_id.as_str())
            .push_bind(e.peer_id.as_str())
            .push_bind(e.context_id.as_str())
            .push_bind(e.state)
            .push_bind(e.task_json.as_str())
            .push_bind(e.now)
            .push_bind(e.expires_at);
    });
    // A finished task replaces the working copy stored before the model was asked, unless a
    // sweep already called that copy failed (a peer may have read it so).
    tasks.push(
        " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body, \
         expires_at = excluded.expires_at WHERE tasks.state = 'TASK_STATE_WORKING'",
    );
    tasks.build().execute(&mut *tx).await?;
    let answered: Vec<&&Exchange> = exchanges
        .iter()
        .filter(|e| !e.messages.is_empty())
        .collect();
    if !answered.is_empty() {
        let mut contexts = QueryBuilder::<Sqlite>::new(
            "INSERT INTO contexts (peer_id, context_id, created_at, updated_at) ",
        );
        contexts.push_values(&answered, |mut row, e| {
            row.push_bind(e.peer_id.as_str())
                .push_bind(e.context_id.as_str())
                .push_bind(e.now)
                .push_bind(e.now);
        });
        contexts.push(
            " ON CONFLICT (peer_id, context_id) DO UPDATE SET updated_at = excluded.updated_at",
        );
        contexts.build().execute(&mut *tx).await?;
        let messages = answered
            .iter()
            .flat_map(|e| e.messages.iter().map(move |m| (*e, m)));
        let mut insert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO messages (peer_id, context_id, task_id, role, body, created_at) ",
        );
        insert.push_values(messages, |mut row, (e, m)| {
            row.push_bind(e.peer_id.as_str())
                .push_bind(e.context_id.as_str())
                .push_bind(e.task_id.as_str())
                .push_bind(m.role.as_str())
                .push_bind(m.text.as_str())
                .push_bind(e.now);
        });
        insert.build().execute(&mut *tx).await?;
    }
    // One upsert for the batch's usage, summed per (owner, peer, day).
    let mut usage: std::collections::HashMap<(&str, &str, &str), (u64, u64)> =
        std::collections::HashMap::new();
    for e in exchanges {
        if let Some(spent) = &e.usage {
            let entry = usage
                .entry((spent.owner_id.as_str(), e.peer_id.as_str(), &*spent.day))
                .or_default();
            entry.0 = entry.0.saturating_add(spent.tokens);
            entry.1 += 1;
        }
    }
    if !usage.is_empty() {
        let mut upsert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO usage (admin_id, peer_id, day, tokens, requests) ",
        );
        upsert.push_values(
            &usage,
            |mut row, ((owner, peer, day), (tokens, requests))| {
                row.push_bind(*owner)
                    .push_bind(*peer)
                    .push_bind(*day)
                    .push_bind(i64::try_from(*tokens).unwrap_or(i64::MAX))
                    .push_bind(i64::try_from(*requests).unwrap_or(i64::MAX));
            },
        );
        upsert.push(
            " ON CONFLICT (admin_id, day, peer_id) DO UPDATE \
             SET tokens = tokens + excluded.tokens, requests = requests + excluded.requests",
        );
        upsert.build().execute(&mut *tx).await?;
    }
    for entry in exchanges.iter().filter_map(|e| e.audit.as_ref()) {
        accounts::insert_audit(&mut tx, entry).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    // The version is read under the write lock, so two processes opening a new data directory
    // at once migrate it once.
    sqlx::raw_sql(BEGIN_WRITE).execute(&mut *conn).await?;
    let outcome = apply_migrations(&mut conn).await;
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    sqlx::raw_sql(end).execute(&mut *conn).await?;
    outcome
}

async fn apply_migrations(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await?;
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let target = i64::try_from(index).unwrap_or(i64::MAX) + 1;
        if version >= target {
            continue;
        }
        sqlx::raw_sql(*migration).execute(&mut *conn).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PRAGMA user_version = {target}"
        )))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
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
