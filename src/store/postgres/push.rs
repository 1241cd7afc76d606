//! Push-notification configs and the delivery queue in PostgreSQL.

use super::PostgresStore;
use crate::clock::Timestamp;
use crate::protocol::ids::TaskId;
use crate::store::PeerId;
use crate::store::{
    DeliveryOutcome, Exchange, FailedDelivery, PushConfigRecord, PushDelivery, PushStore,
    StoreError,
};
use async_trait::async_trait;
use sqlx::{PgConnection, Postgres, QueryBuilder};

/// Queues `task_json` for every config of the task, if the task's row now holds that state
/// (`state` as of `now`): a turn's final state that the store did not take over a sweep's is
/// not the task's, so it is not announced.
pub(super) async fn queue_state(
    tx: &mut PgConnection,
    task_id: &str,
    state: &str,
    task_json: &str,
    (now, call_trace): (Timestamp, Option<&str>),
) -> Result<(), StoreError> {
    let now = now.as_millisecond();
    sqlx::query(
        "INSERT INTO push_deliveries (task_id, config_id, peer_id, url, sealed, body, state, attempts, next_attempt_at, created_at, updated_at, call_trace) \
         SELECT task_id, id, peer_id, url, sealed, $1, 'pending', 0, $2, $2, $2, $5 FROM push_configs WHERE task_id = $3 \
         AND EXISTS (SELECT 1 FROM tasks WHERE id = $3 AND state = $4 AND status_at = $2)",
    )
    .bind(crate::store::records::task_notification(task_json))
    .bind(now)
    .bind(task_id)
    .bind(state)
    .bind(call_trace)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Queues each state of `exchanges` marked [`Exchange::notify`] for its task's configs. One
/// indexed read finds which of the batch's tasks have configs at all, so a batch without any
/// costs that read alone.
pub(super) async fn queue_states(
    tx: &mut PgConnection,
    exchanges: &[&Exchange],
) -> Result<(), StoreError> {
    let notify: Vec<&Exchange> = exchanges.iter().copied().filter(|e| e.notify).collect();
    if notify.is_empty() {
        return Ok(());
    }
    let mut find = QueryBuilder::<Postgres>::new(
        "SELECT DISTINCT task_id FROM push_configs WHERE task_id IN (",
    );
    let mut ids = find.separated(", ");
    for e in &notify {
        ids.push_bind(e.task_id.as_str());
    }
    find.push(")");
    let configured: std::collections::HashSet<String> = find
        .build_query_scalar()
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    for e in notify
        .iter()
        .filter(|e| configured.contains(e.task_id.as_str()))
    {
        let when = (e.now, e.call_trace.as_deref());
        queue_state(tx, &e.task_id, e.state.as_str(), &e.task_json, when).await?;
    }
    Ok(())
}

/// Stores a config, replacing the one with its task and id.
pub(super) async fn upsert_config(
    tx: &mut PgConnection,
    config: &PushConfigRecord,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO push_configs (task_id, id, peer_id, url, sealed, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (task_id, id) DO UPDATE SET url = excluded.url, sealed = excluded.sealed",
    )
    .bind(&config.task_id)
    .bind(config.id.as_str())
    .bind(config.peer_id.as_str())
    .bind(&config.url)
    .bind(&config.sealed)
    .bind(config.created_at.as_millisecond())
    .execute(&mut *tx)
    .await?;
    // What is still queued under it goes where the config now says, with its new secrets.
    sqlx::query(
        "UPDATE push_deliveries SET url = $1, sealed = $2 \
         WHERE task_id = $3 AND config_id = $4 AND state = 'pending'",
    )
    .bind(&config.url)
    .bind(&config.sealed)
    .bind(&config.task_id)
    .bind(config.id.as_str())
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[async_trait]
impl PushStore for PostgresStore {
    async fn put_push_config(
        &self,
        config: &PushConfigRecord,
        max_per_task: u32,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        // Two configs created at once for one task count each other.
        sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
            .bind(&config.task_id)
            .execute(&mut *tx)
            .await?;
        let others: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM push_configs WHERE task_id = $1 AND id <> $2")
                .bind(&config.task_id)
                .bind(config.id.as_str())
                .fetch_one(&mut *tx)
                .await?;
        if others >= i64::from(max_per_task) {
            return Err(StoreError::TooManyPushConfigs(max_per_task));
        }
        upsert_config(&mut tx, config).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &str,
    ) -> Result<Option<PushConfigRecord>, StoreError> {
        sqlx::query("SELECT * FROM push_configs WHERE task_id = $1 AND id = $2 AND peer_id = $3")
            .bind(task_id.as_str())
            .bind(id)
            .bind(peer_id.as_str())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(crate::store::push_rows::config)
            .transpose()
    }

    async fn push_configs(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PushConfigRecord>, StoreError> {
        sqlx::query(
            "SELECT * FROM push_configs WHERE task_id = $1 AND peer_id = $2 AND ($3::TEXT IS NULL OR id > $3) ORDER BY id LIMIT $4",
        )
        .bind(task_id.as_str())
        .bind(peer_id.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(crate::store::push_rows::config)
        .collect()
    }

    async fn delete_push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let deleted =
            sqlx::query("DELETE FROM push_configs WHERE task_id = $1 AND id = $2 AND peer_id = $3")
                .bind(task_id.as_str())
                .bind(id)
                .bind(peer_id.as_str())
                .execute(&mut *tx)
                .await?;
        if deleted.rows_affected() > 0 {
            sqlx::query(
                "DELETE FROM push_deliveries WHERE task_id = $1 AND config_id = $2 AND state = 'pending'",
            )
            .bind(task_id.as_str())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        claim_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushDelivery>, StoreError> {
        let now = now.as_millisecond();
        let claim_until = claim_until.as_millisecond();
        let rows = sqlx::query(
            "UPDATE push_deliveries SET claimed_until = $1 WHERE id IN ( \
               SELECT d.id FROM push_deliveries d \
               WHERE d.state = 'pending' AND d.next_attempt_at <= $2 \
                 AND (d.claimed_until IS NULL OR d.claimed_until <= $3) \
                 AND NOT EXISTS (SELECT 1 FROM push_deliveries e WHERE e.task_id = d.task_id \
                   AND e.config_id = d.config_id AND e.state = 'pending' AND e.id < d.id) \
               ORDER BY d.next_attempt_at, d.id LIMIT $4 FOR UPDATE SKIP LOCKED) \
             RETURNING id, task_id, config_id, peer_id, url, sealed, body, attempts, call_trace",
        )
        .bind(claim_until)
        .bind(now)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| crate::store::push_rows::delivery(row, claim_until))
            .collect()
    }

    async fn record_delivery(
        &self,
        id: i64,
        claimed_until: Timestamp,
        outcome: DeliveryOutcome,
        error: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let claimed_until = claimed_until.as_millisecond();
        let now = now.as_millisecond();
        let query = match outcome {
            DeliveryOutcome::Delivered => {
                sqlx::query("DELETE FROM push_deliveries WHERE id = $1 AND claimed_until = $2")
                    .bind(id)
                    .bind(claimed_until)
            }
            DeliveryOutcome::RetryAt(at) => sqlx::query(
                "UPDATE push_deliveries SET attempts = attempts + 1, next_attempt_at = $1, claimed_until = NULL, \
                 last_error = $2, updated_at = $3 WHERE id = $4 AND claimed_until = $5",
            )
            .bind(at.as_millisecond())
            .bind(error)
            .bind(now)
            .bind(id)
            .bind(claimed_until),
            DeliveryOutcome::Deferred(at) => sqlx::query(
                "UPDATE push_deliveries SET next_attempt_at = $1, claimed_until = NULL \
                 WHERE id = $2 AND claimed_until = $3",
            )
            .bind(at.as_millisecond())
            .bind(id)
            .bind(claimed_until),
            DeliveryOutcome::GiveUp => sqlx::query(
                "UPDATE push_deliveries SET attempts = attempts + 1, state = 'dead', claimed_until = NULL, \
                 last_error = $1, updated_at = $2 WHERE id = $3 AND claimed_until = $4",
            )
            .bind(error)
            .bind(now)
            .bind(id)
            .bind(claimed_until),
        };
        query.execute(&self.pool).await?;
        Ok(())
    }

    async fn failed_deliveries(
        &self,
        owner_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FailedDelivery>, StoreError> {
        sqlx::query(
            "SELECT d.id, p.name, d.task_id, d.config_id, d.url, d.attempts, d.last_error, d.created_at, d.updated_at \
             FROM push_deliveries d JOIN peers p ON p.id = d.peer_id \
             WHERE d.state = 'dead' AND ($1::TEXT IS NULL OR p.owner_id = $1) ORDER BY d.id DESC LIMIT $2",
        )
        .bind(owner_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(crate::store::push_rows::failed)
        .collect()
    }
}
