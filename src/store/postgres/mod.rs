//! The engine for several instances: every seam in one PostgreSQL database.
//!
//! One pool serves reads and writes. The schema is this engine's own `.sql` migrations, run by
//! `sqlx::migrate!` under PostgreSQL's advisory lock, so instances starting together migrate
//! once. The statements and rows are the shared core's ([`crate::store::sql`]), whose account
//! changes lock the rows they read (`FOR UPDATE`); exchanges share one transaction per batch
//! in the same shape as SQLite's ([`exchanges`]).

mod exchanges;

use super::sql::{LastUses, On, SqlEngine, WritePool, WriteTx, Writer};
use super::{Exchange, InstanceRegistry, PeerId, Serving, StoreEngine, StoreError};
use crate::clock::Timestamp;
use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

/// The schema, versioned.
static MIGRATOR: Migrator = sqlx::migrate!("src/store/postgres/migrations");

/// The PostgreSQL engine.
pub struct PostgresStore {
    pool: PgPool,
    /// Host, port and database, for the log; never the password.
    location: String,
    exchanges: tokio::sync::mpsc::Sender<exchanges::PendingExchange>,
    /// When each peer was last seen, for their batch writer.
    uses: LastUses,
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
pub(crate) const PEER_NAMES_LOCK: i64 = SERVING_LOCK + 2;

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
        let (exchanges, pending) = tokio::sync::mpsc::channel(4 * exchanges::MAX_BATCH);
        tokio::spawn(exchanges::group_commit(pool.clone(), pending));
        let uses = LastUses::start(WritePool::Postgres(pool.clone()));
        Ok(Self {
            pool,
            location,
            exchanges,
            uses,
            serving: tokio::sync::Mutex::new(None),
            housekeeping: tokio::sync::Mutex::new(None),
        })
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
        // The last-use notes still queued are written first.
        self.uses.close().await;
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
impl SqlEngine for PostgresStore {
    fn reads(&self) -> On<'_> {
        On::Postgres(&self.pool)
    }

    async fn writer(&self) -> Writer<'_> {
        Writer::postgres(&self.pool)
    }

    async fn begin_write(&self, _essential: bool) -> Result<WriteTx, StoreError> {
        Ok(WriteTx::postgres(self.pool.begin().await?))
    }

    /// Concurrent calls share one transaction (group commit), so one writer keeps up with many
    /// requests.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.exchanges
            .send(exchanges::PendingExchange { exchange, done })
            .await
            .map_err(|_| StoreError::Closed)?;
        committed.await.map_err(|_| StoreError::Closed)?
    }

    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp) {
        self.uses.note(peer_id, now);
    }
}
