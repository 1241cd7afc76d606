//! The engines that share state across instances through one Redis server.
//!
//! | engine | seam | while Redis is away |
//! |---|---|---|
//! | [`admission::RedisAdmission`] | one request's limits, budget read and turn lock, asked in one script before the answer | each check is made in this process, as its engine below does |
//! | [`limit::RedisLimiter`] | per-IP, per-peer and failed-authentication limits | each instance limits on its own, with the full quota |
//! | [`bus::RedisBus`] | change notifications and task events (sent to Redis only while another instance has a subscriber) | changes reach other instances within the credential cache time; events stay on their instance; when Redis answers again every cache forgets everything (changes may have been missed) |
//! | [`turns::RedisTurnLocks`] | one turn at a time per context | turns are ordered within each instance only |
//! | [`spend::RedisSpend`] | tokens spent against budgets | each instance counts what it spends itself, seeded from the store |
//!
//! Every engine logs one warning when Redis goes away and one when it answers again, and
//! counts the answers it gave without Redis ([`Degradation::local_answers`]). The door keeps
//! answering valid peers throughout: Redis shares state, it never decides alone. A Redis that
//! hangs instead of refusing is cut off by one [`breaker::Breaker`] for all of them.

pub mod admission;
pub mod breaker;
pub mod bus;
pub mod limit;
pub mod spend;
pub mod streams;
pub mod turns;

use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Why Redis could not be used at start-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisSetupError {
    /// The URL is not a Redis URL this build can use (it is not echoed: it may hold a
    /// password). Redis is reached over plain TCP: `rediss://` (TLS) is not built in.
    #[error(
        "the Redis URL is not a redis://host:port URL (rediss:// is not supported: keep Redis on a private network)"
    )]
    Url,
    /// Redis did not answer at start-up.
    #[error("Redis cannot be reached at start-up: {0}")]
    Unreachable(String),
}

/// One Redis server, connected: a multiplexed connection that reconnects by itself, and the
/// client that opens subscriptions.
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    connection: ConnectionManager,
    breaker: Arc<breaker::Breaker>,
}

impl std::fmt::Debug for Redis {
    /// Never the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redis(…)")
    }
}

/// How long a call waits for Redis's answer, unless the policy says otherwise
/// (`cluster.redis_timeout_ms`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
/// Timeouts within a second that open the breaker, unless the policy says otherwise
/// (`cluster.redis_breaker_timeouts`).
pub const DEFAULT_BREAKER_TIMEOUTS: u32 = 3;

impl Redis {
    /// Connects to `url` with the default timeout and breaker; a refusal never echoes the URL.
    pub async fn connect(url: &str) -> Result<Self, RedisSetupError> {
        Self::connect_with(url, DEFAULT_TIMEOUT, DEFAULT_BREAKER_TIMEOUTS).await
    }

    /// Connects to `url`: each call waits `timeout` for its answer, and `breaker_timeouts`
    /// timeouts within a second open the breaker.
    pub async fn connect_with(
        url: &str,
        timeout: Duration,
        breaker_timeouts: u32,
    ) -> Result<Self, RedisSetupError> {
        if !url.starts_with("redis://") {
            return Err(RedisSetupError::Url);
        }
        // Without TCP_NODELAY (the client's default), a call sent while the previous one is
        // unacknowledged (the next request's admission behind a turn's release) waits for
        // that acknowledgement: with Redis a hop away, a whole extra round trip.
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|_| RedisSetupError::Url)?
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).map_err(|_| RedisSetupError::Url)?;
        // Short timeouts: a request waits on Redis only briefly before its engine answers
        // without it.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| RedisSetupError::Unreachable(format!("{:?}", e.kind())))?;
        let breaker = Arc::new(breaker::Breaker::new(
            connection.clone(),
            breaker_timeouts,
            timeout,
        ));
        Ok(Self {
            client,
            connection,
            breaker,
        })
    }

    /// The breaker every engine on this connection shares.
    pub fn breaker(&self) -> &Arc<breaker::Breaker> {
        &self.breaker
    }

    /// The degradation record of the engine that shares `what`, behind this connection's
    /// breaker.
    pub fn degradation(&self, what: &'static str) -> Degradation {
        Degradation {
            what,
            away: Arc::default(),
            local_answers: Arc::default(),
            breaker: Some(self.breaker.clone()),
        }
    }

    /// Whether Redis answers a PING within `within`.
    pub async fn answers(&self, within: Duration) -> bool {
        pings(self.connection.clone(), within).await
    }

    /// The shared connection (cheap to clone).
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The client, for subscriptions (each needs a connection of its own).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }
}

/// Whether Redis answers a `PING` on `connection` within `within` (readiness, and the
/// breaker's probe).
async fn pings(mut connection: ConnectionManager, within: Duration) -> bool {
    let ping = redis::cmd("PING");
    let answer = ping.query_async::<String>(&mut connection);
    matches!(tokio::time::timeout(within, answer).await, Ok(Ok(_)))
}

/// Whether an engine is answering without Redis: one warning when it starts, one when Redis
/// answers again, and a count of the answers given without it.
#[derive(Debug, Clone)]
pub struct Degradation {
    /// What the engine shares, for the log.
    what: &'static str,
    away: Arc<AtomicBool>,
    local_answers: Arc<AtomicU64>,
    /// The connection's breaker (none for an engine made without a connection).
    breaker: Option<Arc<breaker::Breaker>>,
}

impl Degradation {
    /// For the engine that shares `what`.
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            away: Arc::default(),
            local_answers: Arc::default(),
            breaker: None,
        }
    }

    /// Whether the breaker is open, so this answer is given without asking Redis (and is
    /// counted as one).
    pub fn bypassed(&self) -> bool {
        let open = self.breaker.as_ref().is_some_and(|b| b.is_open());
        if open {
            self.local_answers.fetch_add(1, Ordering::Relaxed);
        }
        open
    }

    /// Redis answered.
    pub fn answered(&self) {
        if let Some(breaker) = &self.breaker {
            breaker.answered();
        }
        if self.away.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                shared = self.what,
                "Redis answers again: shared across instances again"
            );
        }
    }

    /// Redis did not answer, so this answer was given without it.
    pub fn failed(&self, error: &redis::RedisError) {
        if error.is_timeout()
            && let Some(breaker) = &self.breaker
        {
            breaker.timed_out();
        }
        if !self.away.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                shared = self.what,
                error = ?error.kind(),
                "Redis cannot be reached: each instance answers on its own until it does"
            );
        }
        self.local_answers.fetch_add(1, Ordering::Relaxed);
    }

    /// Answers given without Redis.
    pub fn local_answers(&self) -> u64 {
        self.local_answers.load(Ordering::Relaxed)
    }
}
