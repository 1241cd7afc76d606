//! The engines that share state across instances through one Redis server.
//!
//! | engine | seam | while Redis is away |
//! |---|---|---|
//! | [`limit::RedisLimiter`] | per-IP, per-peer and failed-authentication limits | each instance limits on its own, with the full quota |
//! | [`bus::RedisBus`] | change notifications and task events (sent to Redis only while another instance has a subscriber) | changes reach other instances within the credential cache time; events stay on their instance; when Redis answers again every cache forgets everything (changes may have been missed) |
//! | [`turns::RedisTurnLocks`] | one turn at a time per context | turns are ordered within each instance only |
//! | [`spend::RedisSpend`] | tokens spent against budgets | each instance counts what it spends itself, seeded from the store |
//!
//! Every engine logs one warning when Redis goes away and one when it answers again, and
//! counts the answers it gave without Redis ([`Degradation::local_answers`]). The door keeps
//! answering valid peers throughout: Redis shares state, it never decides alone.

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
}

impl std::fmt::Debug for Redis {
    /// Never the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redis(…)")
    }
}

impl Redis {
    /// Connects to `url`; a refusal never echoes the URL.
    pub async fn connect(url: &str) -> Result<Self, RedisSetupError> {
        if !url.starts_with("redis://") {
            return Err(RedisSetupError::Url);
        }
        let client = redis::Client::open(url).map_err(|_| RedisSetupError::Url)?;
        // Short timeouts: a request waits on Redis only briefly before its engine answers
        // without it.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_millis(500)))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| RedisSetupError::Unreachable(format!("{:?}", e.kind())))?;
        Ok(Self { client, connection })
    }

    /// The shared connection (cheap to clone).
    /// Whether Redis answers a PING within `within`.
    pub async fn answers(&self, within: Duration) -> bool {
        let mut connection = self.connection.clone();
        let ping = redis::cmd("PING");
        let answer = ping.query_async::<String>(&mut connection);
        matches!(tokio::time::timeout(within, answer).await, Ok(Ok(_)))
    }

    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The client, for subscriptions (each needs a connection of its own).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }
}

/// Whether an engine is answering without Redis: one warning when it starts, one when Redis
/// answers again, and a count of the answers given without it.
#[derive(Debug, Clone)]
pub struct Degradation {
    /// What the engine shares, for the log.
    what: &'static str,
    away: Arc<AtomicBool>,
    local_answers: Arc<AtomicU64>,
}

impl Degradation {
    /// For the engine that shares `what`.
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            away: Arc::default(),
            local_answers: Arc::default(),
        }
    }

    /// Redis answered.
    pub fn answered(&self) {
        if self.away.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                shared = self.what,
                "Redis answers again: shared across instances again"
            );
        }
    }

    /// Redis did not answer, so this answer was given without it.
    pub fn failed(&self, error: &redis::RedisError) {
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
