//! Push-notification configs and the delivery queue in SQLite.

use super::{BEGIN_WRITE, SqliteStore};
use crate::clock::Timestamp;
use crate::protocol::ids::TaskId;
use crate::store::PeerId;
use crate::store::{
    DeliveryOutcome, FailedDelivery, PushConfigRecord, PushDelivery, PushStore, StoreError,
};
use async_trait::async_trait;
use sqlx::SqliteConnection;

/// Queues `task_json` for every config of the task, if the task's row now holds that state
/// (`state` as of `now`): a turn's final state that the store did not take over a sweep's is
/// not the task's, so it is not announced.
pub(super) async fn queue_state(
    tx: &mut SqliteConnection,
    task_id: &str,
    state: &str,
    task_json: &str,
    (now, call_trace): (Timestamp, Option<&str>),
) -> Result<(), StoreError> {
    let now = now.as_millisecond();
    sqlx::query(QUEUE_STATE)
        .bind(crate::store::records::task_notification(task_json))
        .bind(now)
        .bind(task_id)
        .bind(state)
        .bind(call_trace)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Queues a task's state for each of its configs, if the task is still in that state at that
/// time: `?1` the notification body, `?2` now, `?3` the task, `?4` the state, `?5` the call's
/// `traceparent` (or NULL).
pub(super) const QUEUE_STATE: &str = "INSERT INTO push_deliveries (task_id, config_id, peer_id, \
     url, sealed, body, state, attempts, next_attempt_at, created_at, updated_at, call_trace) \
     SELECT task_id, id, peer_id, url, sealed, ?1, 'pending', 0, ?2, ?2, ?2, ?5 FROM push_configs \
     WHERE task_id = ?3 \
     AND EXISTS (SELECT 1 FROM tasks WHERE id = ?3 AND state = ?4 AND status_at = ?2)";

/// Stores a config (`?1` task, `?2` id, `?3` peer, `?4` URL, `?5` sealed secrets, `?6` now),
/// replacing the one with its task and id.
pub(super) const UPSERT_CONFIG: &str = "INSERT INTO push_configs (task_id, id, peer_id, url, \
     sealed, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (task_id, id) DO UPDATE SET url = excluded.url, sealed = excluded.sealed";

/// What is still queued under a config goes where the config now says, with its new secrets:
/// `?1` URL, `?2` sealed secrets, `?3` task, `?4` config id.
pub(super) const RETARGET_DELIVERIES: &str = "UPDATE push_deliveries SET url = ?1, sealed = ?2 \
     WHERE task_id = ?3 AND config_id = ?4 AND state = 'pending'";

/// Stores a config, replacing the one with its task and id.
pub(super) async fn upsert_config(
    tx: &mut SqliteConnection,
    config: &PushConfigRecord,
) -> Result<(), StoreError> {
    sqlx::query(UPSERT_CONFIG)
        .bind(&config.task_id)
        .bind(config.id.as_str())
        .bind(config.peer_id.as_str())
        .bind(&config.url)
        .bind(&config.sealed)
        .bind(config.created_at.as_millisecond())
        .execute(&mut *tx)
        .await?;
    sqlx::query(RETARGET_DELIVERIES)
        .bind(&config.url)
        .bind(&config.sealed)
        .bind(&config.task_id)
        .bind(config.id.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

#[async_trait]
impl PushStore for SqliteStore {
    async fn put_push_config(
        &self,
        config: &PushConfigRecord,
        max_per_task: u32,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let others: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM push_configs WHERE task_id = ? AND id <> ?")
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
        sqlx::query("SELECT * FROM push_configs WHERE task_id = ? AND id = ? AND peer_id = ?")
            .bind(task_id.as_str())
            .bind(id)
            .bind(peer_id.as_str())
            .fetch_optional(&self.reader)
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
            "SELECT * FROM push_configs WHERE task_id = ? AND peer_id = ? AND (? IS NULL OR id > ?) ORDER BY id LIMIT ?",
        )
        .bind(task_id.as_str())
        .bind(peer_id.as_str())
        .bind(after)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
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
        let _turn = self.write_turn().await;
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let deleted =
            sqlx::query("DELETE FROM push_configs WHERE task_id = ? AND id = ? AND peer_id = ?")
                .bind(task_id.as_str())
                .bind(id)
                .bind(peer_id.as_str())
                .execute(&mut *tx)
                .await?;
        if deleted.rows_affected() > 0 {
            sqlx::query(
                "DELETE FROM push_deliveries WHERE task_id = ? AND config_id = ? AND state = 'pending'",
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
            "UPDATE push_deliveries SET claimed_until = ? WHERE id IN ( \
               SELECT d.id FROM push_deliveries d \
               WHERE d.state = 'pending' AND d.next_attempt_at <= ? \
                 AND (d.claimed_until IS NULL OR d.claimed_until <= ?) \
                 AND NOT EXISTS (SELECT 1 FROM push_deliveries e WHERE e.task_id = d.task_id \
                   AND e.config_id = d.config_id AND e.state = 'pending' AND e.id < d.id) \
               ORDER BY d.next_attempt_at, d.id LIMIT ?) \
             RETURNING id, task_id, config_id, peer_id, url, sealed, body, attempts, call_trace",
        )
        .bind(claim_until)
        .bind(now)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.writer);
        // The claim writes (it sets `claimed_until`): in this process's write turn.
        let rows = {
            let _turn = self.write_turn().await;
            rows.await?
        };
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
                sqlx::query("DELETE FROM push_deliveries WHERE id = ? AND claimed_until = ?")
                    .bind(id)
                    .bind(claimed_until)
            }
            DeliveryOutcome::RetryAt(at) => sqlx::query(
                "UPDATE push_deliveries SET attempts = attempts + 1, next_attempt_at = ?, claimed_until = NULL, \
                 last_error = ?, updated_at = ? WHERE id = ? AND claimed_until = ?",
            )
            .bind(at.as_millisecond())
            .bind(error)
            .bind(now)
            .bind(id)
            .bind(claimed_until),
            DeliveryOutcome::Deferred(at) => sqlx::query(
                "UPDATE push_deliveries SET next_attempt_at = ?, claimed_until = NULL \
                 WHERE id = ? AND claimed_until = ?",
            )
            .bind(at.as_millisecond())
            .bind(id)
            .bind(claimed_until),
            DeliveryOutcome::GiveUp => sqlx::query(
                "UPDATE push_deliveries SET attempts = attempts + 1, state = 'dead', claimed_until = NULL, \
                 last_error = ?, updated_at = ? WHERE id = ? AND claimed_until = ?",
            )
            .bind(error)
            .bind(now)
            .bind(id)
            .bind(claimed_until),
        };
        let _turn = self.write_turn().await;
        query.execute(&self.writer).await?;
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
             WHERE d.state = 'dead' AND (? IS NULL OR p.owner_id = ?) ORDER BY d.id DESC LIMIT ?",
        )
        .bind(owner_id)
        .bind(owner_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(crate::store::push_rows::failed)
        .collect()
    }
}
