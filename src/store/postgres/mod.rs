//! The engine for several instances: every seam in one PostgreSQL database.
//!
//! One pool serves reads and writes. The schema is this engine's own `.sql` migrations, run by
//! `sqlx::migrate!` under PostgreSQL's advisory lock, so instances starting together migrate
//! once. Account changes lock the rows they read (`FOR UPDATE`); exchanges share one
//! transaction per batch in the same shape as SQLite's ([`crate::store::batch`]).

mod accounts;
mod push;
mod tasks;

use super::InstanceRegistry;
use super::{
    AdminLogin, ConversationEntry, ConversationQuery, ConversationStore, ConversationSummary,
    CredentialRecord, CredentialStore, DocumentStore, PeerLogin, PeerUsage, Serving, StoreEngine,
    StoreError, UsageStore,
};
use crate::clock::{Timestamp, from_millis};
use crate::locks::Locked;
use crate::protocol::ids::ContextId;
use crate::store::PeerId;
use crate::store::PeerIdentity;
use crate::token::{CredentialKind, TokenSecretHash};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use std::str::FromStr;
use std::time::Duration;

/// The schema, versioned.
static MIGRATOR: Migrator = sqlx::migrate!("src/store/postgres/migrations");

/// Where last-use notes (peer id, epoch ms) go.
type LastUses = tokio::sync::mpsc::Sender<(Box<str>, i64)>;

/// The PostgreSQL engine.
pub struct PostgresStore {
    pool: PgPool,
    /// Host, port and database, for the log; never the password.
    location: String,
    exchanges: tokio::sync::mpsc::Sender<tasks::PendingExchange>,
    uses: std::sync::Mutex<Option<LastUses>>,
    uses_writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The connection holding the serving lock, while a gateway serves this database.
    serving: tokio::sync::Mutex<Option<sqlx::PgConnection>>,
    /// The connection holding the housekeeping lock, while this process leads housekeeping.
    housekeeping: tokio::sync::Mutex<Option<sqlx::PgConnection>>,
}

/// The advisory lock serving gateways hold: exclusively by one serving alone, shared by
/// instances serving together (an arbitrary constant of this application).
const SERVING_LOCK: i64 = 0x7065_6572_6761_7465; // "peergate"
/// The advisory lock of the instance that runs the cluster's housekeeping.
const HOUSEKEEPING_LOCK: i64 = SERVING_LOCK + 1;
/// The transaction lock peer creations take in turn (names are unique regardless of case).
const PEER_NAMES_LOCK: i64 = SERVING_LOCK + 2;

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// The pool (for copying a store into this one).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Connects to `url` (`postgres://user:password@host:port/database`) and brings the schema
    /// up to date. A refusal names what was wrong, never the password.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        // The driver also takes other schemes (and then fails later, less clearly).
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::Url(
                "not a PostgreSQL URL (postgres://user:password@host:port/database)",
            ));
        }
        let options = PgConnectOptions::from_str(url)
            .map(|options| {
                // PostgreSQL's notices ("already exists, skipping") are not the operator's news.
                options.options([("client_min_messages", "warning")])
            })
            .map_err(|_| {
                StoreError::Url(
                    "not a PostgreSQL URL (postgres://user:password@host:port/database)",
                )
            })?;
        let location = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("postgres")
        );
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Unreachable {
                location: location.clone(),
                reason: e.to_string(),
            })?;
        MIGRATOR
            .run(&pool)
            .await
            .map_err(|e| StoreError::Schema(e.to_string()))?;
        let (exchanges, pending) = tokio::sync::mpsc::channel(4 * tasks::MAX_BATCH);
        tokio::spawn(tasks::group_commit(pool.clone(), pending));
        let (uses, seen) = tokio::sync::mpsc::channel(LAST_USE_BACKLOG);
        let uses_writer = tokio::spawn(write_last_uses(pool.clone(), seen));
        Ok(Self {
            pool,
            location,
            exchanges,
            uses: std::sync::Mutex::new(Some(uses)),
            uses_writer: std::sync::Mutex::new(Some(uses_writer)),
            serving: tokio::sync::Mutex::new(None),
            housekeeping: tokio::sync::Mutex::new(None),
        })
    }
}

/// Most last-use notes waiting for the writer; past that, notes are dropped (they cost only a
/// timestamp, and the next minute brings another).
const LAST_USE_BACKLOG: usize = 1024;

/// Writes last-use notes in batches, off every request's path: one statement a batch, so the
/// rows are locked only while PostgreSQL runs it.
async fn write_last_uses(pool: PgPool, mut seen: tokio::sync::mpsc::Receiver<(Box<str>, i64)>) {
    let mut batch = Vec::with_capacity(64);
    while seen.recv_many(&mut batch, 64).await > 0 {
        // One row a peer, its latest time: an UPDATE … FROM uses one match a row.
        batch.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        batch.dedup_by(|later, kept| later.0 == kept.0);
        let mut update = sqlx::QueryBuilder::<sqlx::Postgres>::new(
            "UPDATE peers AS p SET last_used_at = GREATEST(p.last_used_at, v.at) FROM (",
        );
        update.push_values(batch.iter(), |mut row, (peer_id, now)| {
            row.push_bind(peer_id.to_string()).push_bind(*now);
        });
        update.push(") AS v(id, at) WHERE p.id = v.id");
        if let Err(e) = update.build().execute(&pool).await {
            tracing::warn!(error = %e, "could not record last use of peers");
        }
        batch.clear();
    }
}

#[async_trait]
impl StoreEngine for PostgresStore {
    fn describe(&self) -> String {
        format!("postgresql ({})", self.location)
    }

    async fn claim_for_serving(&self, serving: Serving) -> Result<(), StoreError> {
        // An advisory lock on a connection of its own, released if the process dies: taken
        // exclusively by a gateway serving alone (so a second one cannot fail its turns at
        // start-up), shared by instances serving together (which hold leases instead).
        let (take, refusal) = match serving {
            Serving::Alone => (
                "SELECT pg_try_advisory_lock($1)",
                StoreError::ServedOtherwise(
                    "this PostgreSQL store is already served by other peergate instances; instances serve one store together only when each runs with --redis (or PEERGATE_REDIS_URL)",
                ),
            ),
            Serving::Shared => (
                "SELECT pg_try_advisory_lock_shared($1)",
                StoreError::ServedOtherwise(
                    "this PostgreSQL store is served by a peergate instance without --redis; stop it, or start every instance with the same --redis",
                ),
            ),
        };
        let mut conn = self.pool.acquire().await?.detach();
        notice_a_vanished_holder(&mut conn).await?;
        let claimed: bool = sqlx::query_scalar(take)
            .bind(SERVING_LOCK)
            .fetch_one(&mut conn)
            .await?;
        if !claimed {
            return Err(refusal);
        }
        *self.serving.lock().await = Some(conn);
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        for held in [&self.housekeeping, &self.serving] {
            if let Some(conn) = held.lock().await.take() {
                let _ = sqlx::Connection::close(conn).await;
            }
        }
        // The last-use notes still queued are written first (bounded: a note is a timestamp).
        drop(self.uses.locked().take());
        let writer = self.uses_writer.locked().take();
        if let Some(writer) = writer {
            let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        }
        self.pool.close().await;
    }

    async fn announce(&self, notes: &[String]) {
        for note in notes
            .iter()
            .filter(|n| n.len() <= crate::store::LONGEST_NOTE)
        {
            let sent = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(ANNOUNCEMENTS)
                .bind(note)
                .execute(&self.pool)
                .await;
            if let Err(e) = sent {
                tracing::warn!(error = %e, "could not tell the running gateways of a change; they re-read credentials within seconds");
                return;
            }
        }
    }

    async fn hear_announcements(&self) -> Result<crate::store::Announcements, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(ANNOUNCEMENTS).await?;
        let (heard, announcements) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            // Half a second after the first failure, doubling up to half a minute while the
            // database stays away; one miss is reported per outage (the periodic re-read covers
            // the rest).
            let mut backoff = Duration::ZERO;
            loop {
                let received = tokio::select! {
                    received = listener.try_recv() => received,
                    () = heard.closed() => return,
                };
                let note = match received {
                    Ok(Some(notification)) => {
                        backoff = Duration::ZERO;
                        crate::store::Heard::Note(notification.payload().to_owned())
                    }
                    // The connection dropped (it is made again on the next call): whatever
                    // was announced meanwhile was not heard.
                    Ok(None) => {
                        backoff = Duration::ZERO;
                        crate::store::Heard::Missed
                    }
                    // It could not be made again.
                    Err(_) => {
                        let first = backoff.is_zero();
                        backoff = (backoff * 2)
                            .clamp(Duration::from_millis(500), Duration::from_secs(30));
                        tokio::time::sleep(backoff).await;
                        if !first {
                            continue;
                        }
                        crate::store::Heard::Missed
                    }
                };
                if heard.send(note).await.is_err() {
                    return;
                }
            }
        });
        Ok(announcements)
    }
}

/// The channel the command line's changes are announced on (`NOTIFY`), heard by every
/// instance serving the store.
const ANNOUNCEMENTS: &str = "peergate_changes";

/// A session holding an advisory lock keeps it until PostgreSQL sees the session end. A
/// process that dies closes its socket at once, but a machine that vanishes (power, network)
/// does not: these keepalives let the server notice within about 11 s (5 s idle, then 3 probes
/// 2 s apart) instead of the system's default of hours, so the lock passes on.
async fn notice_a_vanished_holder(conn: &mut sqlx::PgConnection) -> Result<(), StoreError> {
    for setting in [
        "SET tcp_keepalives_idle = 5",
        "SET tcp_keepalives_interval = 2",
        "SET tcp_keepalives_count = 3",
    ] {
        sqlx::query(setting).execute(&mut *conn).await?;
    }
    Ok(())
}

#[async_trait]
impl InstanceRegistry for PostgresStore {
    async fn renew_lease(&self, instance: &str, lease: Duration) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO instances (id, lease_until) VALUES ($1, now() + make_interval(secs => $2)) \
             ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until",
        )
        .bind(instance)
        .bind(lease.as_secs_f64())
        .execute(&self.pool)
        .await?;
        // Instances gone for a day have no working task left to explain.
        sqlx::query("DELETE FROM instances WHERE lease_until < now() - interval '1 day'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn holds_lease(&self, instance: &str, grace: Duration) -> Result<bool, StoreError> {
        let live: Option<bool> = sqlx::query_scalar(
            "SELECT lease_until + make_interval(secs => $2) > now() FROM instances WHERE id = $1",
        )
        .bind(instance)
        .bind(grace.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(live.unwrap_or(false))
    }

    async fn end_lease(&self, instance: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(instance)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn lead_housekeeping(&self) -> Result<bool, StoreError> {
        let mut held = self.housekeeping.lock().await;
        if let Some(conn) = held.as_mut() {
            // Still leading while the session that holds the lock lives.
            if sqlx::query("SELECT 1").execute(&mut *conn).await.is_ok() {
                return Ok(true);
            }
            held.take();
        }
        let mut conn = self.pool.acquire().await?;
        let took: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(HOUSEKEEPING_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        if took {
            // Kept out of the pool: the lock lives as long as this session.
            let mut conn = conn.detach();
            notice_a_vanished_holder(&mut conn).await?;
            *held = Some(conn);
        }
        Ok(took)
    }
}

#[async_trait]
impl CredentialStore for PostgresStore {
    async fn credential_ids(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT token_id FROM credentials")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get("token_id")?))
            .collect()
    }

    async fn find_credential(
        &self,
        kind: CredentialKind,
        token_id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT c.peer_id, p.name, c.secret_hash, c.revoked_at, p.status, p.rate_per_minute, p.max_streams, p.trusts_trace, p.operations, \
             p.owner_id, LEAST(c.expires_at, p.expires_at) AS valid_until \
             FROM credentials c JOIN peers p ON p.id = c.peer_id WHERE c.token_id = $1 AND c.kind = $2",
        )
        .bind(token_id)
        .bind(kind.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let Some(hash) = secret_hash(&row)? else {
            return Ok(None);
        };
        let revoked_at: Option<i64> = row.try_get("revoked_at")?;
        let status: String = row.try_get("status")?;
        Ok(Some(CredentialRecord {
            peer_id: row.try_get::<String, _>("peer_id")?.into(),
            peer_name: row.try_get("name")?,
            secret_hash: hash,
            active: revoked_at.is_none() && status == "active",
            rate_per_minute: rate(&row)?,
            max_streams: max_streams(&row)?,
            trusts_trace: row.try_get("trusts_trace")?,
            operations: crate::store::operations_column(row.try_get("operations")?),
            owner_id: row.try_get("owner_id")?,
            valid_until: row
                .try_get::<Option<i64>, _>("valid_until")?
                .map(from_millis),
        }))
    }

    async fn find_peer_login(&self, name: &str) -> Result<Option<PeerLogin>, StoreError> {
        let row = sqlx::query(
            "SELECT id, name, password_hash, status, rate_per_minute, max_streams, trusts_trace, operations, owner_id, expires_at FROM peers WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        Ok(Some(PeerLogin {
            peer_id: row.try_get::<String, _>("id")?.into(),
            peer_name: row.try_get("name")?,
            password_hash: row.try_get("password_hash")?,
            active: status == "active",
            rate_per_minute: rate(&row)?,
            max_streams: max_streams(&row)?,
            trusts_trace: row.try_get("trusts_trace")?,
            operations: crate::store::operations_column(row.try_get("operations")?),
            owner_id: row.try_get("owner_id")?,
            valid_until: row
                .try_get::<Option<i64>, _>("expires_at")?
                .map(from_millis),
        }))
    }

    async fn find_bound_peer(
        &self,
        identity: &PeerIdentity,
    ) -> Result<Option<PeerLogin>, StoreError> {
        let row = sqlx::query(
            "SELECT p.id, p.name, p.status, p.rate_per_minute, p.max_streams, p.trusts_trace, p.operations, p.owner_id, p.expires_at \
             FROM peer_identities i JOIN peers p ON p.id = i.peer_id \
             WHERE i.kind = $1 AND i.issuer = $2 AND i.subject = $3",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        Ok(Some(PeerLogin {
            peer_id: row.try_get::<String, _>("id")?.into(),
            peer_name: row.try_get("name")?,
            password_hash: None,
            active: status == "active",
            rate_per_minute: rate(&row)?,
            max_streams: max_streams(&row)?,
            trusts_trace: row.try_get("trusts_trace")?,
            operations: crate::store::operations_column(row.try_get("operations")?),
            owner_id: row.try_get("owner_id")?,
            valid_until: row
                .try_get::<Option<i64>, _>("expires_at")?
                .map(from_millis),
        }))
    }

    async fn find_bound_admin(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<AdminLogin>, StoreError> {
        let row = sqlx::query(
            "SELECT a.id, a.name, a.password_hash, a.status, a.role FROM admin_identities i \
             JOIN admins a ON a.id = i.admin_id WHERE i.issuer = $1 AND i.subject = $2",
        )
        .bind(issuer)
        .bind(subject)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(AdminLogin {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            password_hash: None,
            active: row.try_get::<String, _>("status")? == "active",
            auditor: row.try_get::<String, _>("role")? == "auditor",
        }))
    }

    async fn find_admin_login(&self, name: &str) -> Result<Option<AdminLogin>, StoreError> {
        let row =
            sqlx::query("SELECT id, name, password_hash, status, role FROM admins WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(AdminLogin {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            password_hash: row.try_get("password_hash")?,
            active: row.try_get::<String, _>("status")? == "active",
            auditor: row.try_get::<String, _>("role")? == "auditor",
        }))
    }

    async fn find_admin_token(
        &self,
        token_id: &str,
    ) -> Result<Option<(AdminLogin, TokenSecretHash)>, StoreError> {
        let row = sqlx::query(
            "SELECT a.id, a.name, a.status, a.role, t.secret_hash, t.revoked_at FROM admin_tokens t \
             JOIN admins a ON a.id = t.admin_id WHERE t.token_id = $1",
        )
        .bind(token_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let Some(hash) = secret_hash(&row)? else {
            return Ok(None);
        };
        let revoked: Option<i64> = row.try_get("revoked_at")?;
        Ok(Some((
            AdminLogin {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                password_hash: None,
                active: revoked.is_none() && row.try_get::<String, _>("status")? == "active",
                auditor: row.try_get::<String, _>("role")? == "auditor",
            },
            hash,
        )))
    }

    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp) {
        let now = now.as_millisecond();
        let uses = self.uses.locked();
        if let Some(uses) = uses.as_ref() {
            // Full or closed: the timestamp waits for the next note.
            let _ = uses.try_send((peer_id.as_str().into(), now));
        }
    }
}

#[async_trait]
impl ConversationStore for PostgresStore {
    async fn conversations(
        &self,
        query: &ConversationQuery,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let after = query.after.as_ref();
        let rows = sqlx::query(
            "SELECT p.name, c.context_id, c.created_at, c.updated_at, \
             (SELECT COUNT(*) FROM messages m WHERE m.peer_id = c.peer_id AND m.context_id = c.context_id) AS messages \
             FROM contexts c JOIN peers p ON p.id = c.peer_id \
             WHERE ($1::text IS NULL OR p.owner_id = $1) AND ($2::text IS NULL OR p.name = $2) \
             AND ($3::bigint IS NULL OR c.updated_at >= $3) AND ($4::bigint IS NULL OR c.updated_at < $4) \
             AND ($5::bigint IS NULL OR c.updated_at < $5 OR (c.updated_at = $5 \
               AND (p.name > $6 OR (p.name = $6 AND c.context_id > $7)))) \
             ORDER BY c.updated_at DESC, p.name, c.context_id LIMIT $8",
        )
        .bind(query.owner_id.as_deref())
        .bind(query.peer.as_deref())
        .bind(query.since.map(Timestamp::as_millisecond))
        .bind(query.until.map(Timestamp::as_millisecond))
        .bind(after.map(|a| a.updated_at.as_millisecond()))
        .bind(after.map(|a| a.peer_name.as_str()))
        .bind(after.map(|a| a.context_id.as_str()))
        .bind(i64::from(query.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ConversationSummary {
                    peer_name: row.try_get("name")?,
                    context_id: row.try_get("context_id")?,
                    created_at: from_millis(row.try_get("created_at")?),
                    updated_at: from_millis(row.try_get("updated_at")?),
                    messages: row.try_get("messages")?,
                })
            })
            .collect()
    }

    async fn conversation(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<Option<Vec<ConversationEntry>>, StoreError> {
        let exists = sqlx::query("SELECT 1 FROM contexts WHERE peer_id = $1 AND context_id = $2")
            .bind(peer_id.as_str())
            .bind(context_id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT role, body, parts, task_id, created_at FROM messages \
             WHERE peer_id = $1 AND context_id = $2 ORDER BY seq",
        )
        .bind(peer_id.as_str())
        .bind(context_id.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let parts: Option<String> = row.try_get("parts")?;
                Ok(ConversationEntry {
                    role: row.try_get("role")?,
                    text: row.try_get("body")?,
                    parts: parts.and_then(|parts| serde_json::from_str(&parts).ok()),
                    task_id: row.try_get("task_id")?,
                    at: from_millis(row.try_get("created_at")?),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map(Some)
    }
}

#[async_trait]
impl UsageStore for PostgresStore {
    async fn find_admin_by_id(&self, id: &str) -> Result<Option<super::AdminRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{} WHERE id = $1",
            accounts::ADMIN_COLUMNS
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(accounts::admin_record).transpose()
    }

    async fn tokens_spent(&self, admin_id: &str, period: &str) -> Result<u64, StoreError> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT SUM(tokens)::BIGINT FROM usage WHERE admin_id = $1 AND left(day, length($2)) = $3",
        )
        .bind(admin_id)
        .bind(period)
        .bind(period)
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(total.unwrap_or(0)).unwrap_or(0))
    }

    async fn peer_tokens_spent(&self, peer_id: &PeerId, period: &str) -> Result<u64, StoreError> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT SUM(tokens)::BIGINT FROM usage WHERE peer_id = $1 AND left(day, length($2)) = $3",
        )
        .bind(peer_id.as_str())
        .bind(period)
        .bind(period)
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(total.unwrap_or(0)).unwrap_or(0))
    }

    async fn peer_tokens_per_day(&self, peer_id: &PeerId) -> Result<Option<u64>, StoreError> {
        let budget: Option<Option<i64>> =
            sqlx::query_scalar("SELECT tokens_per_day FROM peers WHERE id = $1")
                .bind(peer_id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(budget.flatten().map(|n| u64::try_from(n).unwrap_or(0)))
    }

    async fn usage_by_peer(
        &self,
        admin_id: &str,
        period: &str,
    ) -> Result<Vec<PeerUsage>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.name, SUM(u.tokens)::BIGINT AS tokens, SUM(u.requests)::BIGINT AS requests FROM usage u \
             JOIN peers p ON p.id = u.peer_id \
             WHERE u.admin_id = $1 AND left(u.day, length($2)) = $3 GROUP BY p.name ORDER BY p.name",
        )
        .bind(admin_id)
        .bind(period)
        .bind(period)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PeerUsage {
                    peer_name: row.try_get("name")?,
                    tokens: u64::try_from(row.try_get::<i64, _>("tokens")?).unwrap_or(0),
                    requests: u64::try_from(row.try_get::<i64, _>("requests")?).unwrap_or(0),
                })
            })
            .collect()
    }
}

#[async_trait]
impl DocumentStore for PostgresStore {
    async fn document_modified_at(
        &self,
        name: &str,
        etag: &str,
        now: Timestamp,
    ) -> Result<Timestamp, StoreError> {
        let now = now.as_millisecond();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT etag, modified_at FROM documents WHERE name = $1 FOR UPDATE")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = row
            && row.try_get::<String, _>("etag")? == etag
        {
            return Ok(from_millis(row.try_get("modified_at")?));
        }
        sqlx::query(
            "INSERT INTO documents (name, etag, modified_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, modified_at = excluded.modified_at",
        )
        .bind(name)
        .bind(etag)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(from_millis(now))
    }
}

/// A stored secret hash; `None` for a row whose hash has the wrong length (never matches).
fn secret_hash(row: &PgRow) -> Result<Option<TokenSecretHash>, StoreError> {
    let hash: Vec<u8> = row.try_get("secret_hash")?;
    Ok(<[u8; 32]>::try_from(hash.as_slice())
        .ok()
        .map(TokenSecretHash))
}

/// A column holding one of a type's names (a status, an audit action); anything else is a
/// store this release cannot read.
fn named<T>(row: &PgRow, column: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
    let text: String = row.try_get(column)?;
    parse(&text).ok_or_else(|| StoreError::Schema(format!("unknown {column} {text:?}")))
}

fn rate(row: &PgRow) -> Result<u32, StoreError> {
    Ok(u32::try_from(row.try_get::<i64, _>("rate_per_minute")?).unwrap_or(u32::MAX))
}

/// A peer's own cap on open streams (`None`: the policy's).
fn max_streams(row: &PgRow) -> Result<Option<u32>, StoreError> {
    let cap: Option<i64> = row.try_get("max_streams")?;
    Ok(cap.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
}
