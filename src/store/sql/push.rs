//! Push-notification configs and the durable queue of their deliveries.

use super::rows::{DeliveryRow, FailedRow, PushConfigRow};
use super::{Sql, SqlEngine, sql};
use crate::clock::Timestamp;
use crate::protocol::ids::TaskId;
use crate::store::{
    AdminId, DeliveryOutcome, FailedDelivery, PeerId, PushConfigId, PushConfigRecord, PushDelivery,
    PushStore, StoreError,
};
use async_trait::async_trait;

/// Queues a task's state for each of its configs, if the task is still in that state at that
/// time: `$1` the notification body, `$2` now, `$3` the task, `$4` the state, `$5` the call's
/// `traceparent` (or NULL).
pub(crate) const QUEUE_STATE: &str = "INSERT INTO push_deliveries (task_id, config_id, peer_id, \
     url, sealed, body, state, attempts, next_attempt_at, created_at, updated_at, call_trace) \
     SELECT task_id, id, peer_id, url, sealed, $1, 'pending', 0, $2, $2, $2, $5 FROM push_configs \
     WHERE task_id = $3 \
     AND EXISTS (SELECT 1 FROM tasks WHERE id = $3 AND state = $4 AND status_at = $2)";

/// Stores a config (`$1` task, `$2` id, `$3` peer, `$4` URL, `$5` sealed secrets, `$6` now),
/// replacing the one with its task and id.
pub(crate) const UPSERT_CONFIG: &str = "INSERT INTO push_configs (task_id, id, peer_id, url, \
     sealed, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (task_id, id) DO UPDATE SET url = excluded.url, sealed = excluded.sealed";

/// What is still queued under a config goes where the config now says, with its new secrets:
/// `$1` URL, `$2` sealed secrets, `$3` task, `$4` config id.
pub(crate) const RETARGET_DELIVERIES: &str = "UPDATE push_deliveries SET url = $1, sealed = $2 \
     WHERE task_id = $3 AND config_id = $4 AND state = 'pending'";

/// [`QUEUE_STATE`] for `task_json`, if the task's row now holds `state` as of `now`: a turn's
/// final state that the store did not take over a sweep's is not the task's, so it is not
/// announced.
pub(crate) fn queue_state<'a>(
    task_id: &'a str,
    state: &'a str,
    task_json: &str,
    (now, call_trace): (Timestamp, Option<&'a str>),
) -> Sql<'a> {
    sql(QUEUE_STATE)
        .bind(crate::store::records::task_notification(task_json))
        .bind(now)
        .bind(task_id)
        .bind(state)
        .bind(call_trace)
}

#[async_trait]
impl<E: SqlEngine> PushStore for E {
    async fn put_push_config(
        &self,
        config: &PushConfigRecord,
        max_per_task: u32,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write(false).await?;
        // Two configs created at once for one task count each other.
        sql("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
            .bind(&config.task_id)
            .execute(tx.on())
            .await?;
        let (others,): (i64,) =
            sql("SELECT COUNT(*) FROM push_configs WHERE task_id = $1 AND id <> $2")
                .bind(&config.task_id)
                .bind(&config.id)
                .fetch_one(tx.on())
                .await?;
        if others >= i64::from(max_per_task) {
            return Err(StoreError::TooManyPushConfigs(max_per_task));
        }
        for statement in upsert_config_statements(config) {
            statement.execute(tx.on()).await?;
        }
        tx.commit().await
    }

    async fn push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &PushConfigId,
    ) -> Result<Option<PushConfigRecord>, StoreError> {
        let row: Option<PushConfigRow> = sql(
            "SELECT task_id, id, peer_id, url, sealed, created_at FROM push_configs \
             WHERE task_id = $1 AND id = $2 AND peer_id = $3",
        )
        .bind(task_id.as_str())
        .bind(id)
        .bind(peer_id)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.map(PushConfigRow::config))
    }

    async fn push_configs(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        after: Option<&PushConfigId>,
        limit: u32,
    ) -> Result<Vec<PushConfigRecord>, StoreError> {
        let rows: Vec<PushConfigRow> = sql(
            "SELECT task_id, id, peer_id, url, sealed, created_at FROM push_configs \
             WHERE task_id = $1 AND peer_id = $2 AND (CAST($3 AS TEXT) IS NULL OR id > $3) \
             ORDER BY id LIMIT $4",
        )
        .bind(task_id.as_str())
        .bind(peer_id)
        .bind(after)
        .bind(limit)
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(PushConfigRow::config).collect())
    }

    async fn delete_push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &PushConfigId,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write(false).await?;
        let deleted =
            sql("DELETE FROM push_configs WHERE task_id = $1 AND id = $2 AND peer_id = $3")
                .bind(task_id.as_str())
                .bind(id)
                .bind(peer_id)
                .execute(tx.on())
                .await?;
        if deleted > 0 {
            sql(
                "DELETE FROM push_deliveries WHERE task_id = $1 AND config_id = $2 \
                 AND state = 'pending'",
            )
            .bind(task_id.as_str())
            .bind(id)
            .execute(tx.on())
            .await?;
        }
        tx.commit().await
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        claim_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushDelivery>, StoreError> {
        // The oldest pending delivery of each config, so a config's arrive in order; the claim
        // writes (it sets `claimed_until`), so it runs in this process's turn to write.
        let writer = self.writer().await;
        let rows: Vec<DeliveryRow> = sql(
            "UPDATE push_deliveries SET claimed_until = $1 WHERE id IN ( \
               SELECT d.id FROM push_deliveries d \
               WHERE d.state = 'pending' AND d.next_attempt_at <= $2 \
                 AND (d.claimed_until IS NULL OR d.claimed_until <= $2) \
                 AND NOT EXISTS (SELECT 1 FROM push_deliveries e WHERE e.task_id = d.task_id \
                   AND e.config_id = d.config_id AND e.state = 'pending' AND e.id < d.id) \
               ORDER BY d.next_attempt_at, d.id LIMIT $3 FOR UPDATE SKIP LOCKED) \
             RETURNING id, task_id, config_id, peer_id, url, sealed, body, attempts, call_trace",
        )
        .bind(claim_until)
        .bind(now)
        .bind(limit)
        .fetch_all(writer.on())
        .await?;
        // As stored: to the millisecond.
        let claimed = crate::clock::from_millis(claim_until.as_millisecond());
        Ok(rows.into_iter().map(|row| row.delivery(claimed)).collect())
    }

    async fn record_delivery(
        &self,
        id: i64,
        claimed_until: Timestamp,
        outcome: DeliveryOutcome,
        error: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        // `$1` the delivery, `$2` the claim; then when to try again, and why it failed.
        let (text, at, failed) = match outcome {
            DeliveryOutcome::Delivered => (
                "DELETE FROM push_deliveries WHERE id = $1 AND claimed_until = $2",
                None,
                false,
            ),
            DeliveryOutcome::RetryAt(at) => (
                "UPDATE push_deliveries SET attempts = attempts + 1, next_attempt_at = $3, \
                 claimed_until = NULL, last_error = $4, updated_at = $5 \
                 WHERE id = $1 AND claimed_until = $2",
                Some(at),
                true,
            ),
            DeliveryOutcome::Deferred(at) => (
                "UPDATE push_deliveries SET next_attempt_at = $3, claimed_until = NULL \
                 WHERE id = $1 AND claimed_until = $2",
                Some(at),
                false,
            ),
            DeliveryOutcome::GiveUp => (
                "UPDATE push_deliveries SET attempts = attempts + 1, state = 'dead', \
                 claimed_until = NULL, last_error = $3, updated_at = $4 \
                 WHERE id = $1 AND claimed_until = $2",
                None,
                true,
            ),
        };
        let mut statement = sql(text).bind(id).bind(claimed_until);
        if let Some(at) = at {
            statement = statement.bind(at);
        }
        if failed {
            statement = statement.bind(error).bind(now);
        }
        let writer = self.writer().await;
        statement.execute(writer.on()).await?;
        Ok(())
    }

    async fn failed_deliveries(
        &self,
        owner_id: Option<&AdminId>,
        limit: u32,
    ) -> Result<Vec<FailedDelivery>, StoreError> {
        let rows: Vec<FailedRow> = sql(
            "SELECT d.id, p.name, d.task_id, d.config_id, d.url, d.attempts, d.last_error, \
             d.created_at, d.updated_at FROM push_deliveries d JOIN peers p ON p.id = d.peer_id \
             WHERE d.state = 'dead' AND (CAST($1 AS TEXT) IS NULL OR p.owner_id = $1) \
             ORDER BY d.id DESC LIMIT $2",
        )
        .bind(owner_id)
        .bind(limit)
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(FailedRow::failed).collect())
    }
}

/// [`UPSERT_CONFIG`] and [`RETARGET_DELIVERIES`] for `config`, to run in its transaction.
pub(crate) fn upsert_config_statements(config: &PushConfigRecord) -> [Sql<'_>; 2] {
    [
        sql(UPSERT_CONFIG)
            .bind(&config.task_id)
            .bind(&config.id)
            .bind(&config.peer_id)
            .bind(&config.url)
            .bind(&config.sealed)
            .bind(config.created_at),
        sql(RETARGET_DELIVERIES)
            .bind(&config.url)
            .bind(&config.sealed)
            .bind(&config.task_id)
            .bind(&config.id),
    ]
}
