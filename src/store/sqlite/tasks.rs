//! Tasks and context histories in SQLite. Exchanges are written by [`super::writer`].

use super::writer::{Job, PendingExchange};
use super::{BEGIN_WRITE, SqliteStore};
use crate::clock::{Timestamp, from_millis};
use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::TaskState;
use crate::store::PeerId;
use crate::store::{
    ConversationMessage, ConversationRole, Exchange, StoreError, TaskPage, TaskQuery, TaskStore,
    WorkingTask,
};
use async_trait::async_trait;
use sqlx::Row;

#[async_trait]
impl TaskStore for SqliteStore {
    async fn context_history(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
        limit: u32,
    ) -> Result<Vec<ConversationMessage>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT role, body FROM messages WHERE peer_id = ? AND context_id = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(peer_id.as_str())
        .bind(context_id.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        let mut history = rows
            .iter()
            .map(|row| {
                let role: String = row.try_get("role")?;
                Ok(ConversationMessage {
                    role: if role == ConversationRole::Agent.as_str() {
                        ConversationRole::Agent
                    } else {
                        ConversationRole::Peer
                    },
                    text: row.try_get("body")?,
                    parts: None,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        history.reverse();
        Ok(history)
    }

    /// Concurrent calls share one transaction (group commit) on the writer's thread, so one
    /// writer keeps up with many requests.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.exchanges
            .send(Job::Write(PendingExchange { exchange, done }))
            .await
            .map_err(|_| StoreError::Closed)?;
        committed.await.map_err(|_| StoreError::Closed)?
    }

    async fn find_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        now: Timestamp,
    ) -> Result<Option<String>, StoreError> {
        let now = now.as_millisecond();
        let row =
            sqlx::query("SELECT body FROM tasks WHERE id = ? AND peer_id = ? AND expires_at > ?")
                .bind(task_id.as_str())
                .bind(peer_id.as_str())
                .bind(now)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row.map(|row| row.try_get("body")).transpose()?)
    }

    async fn upstream_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT upstream_task_id FROM tasks WHERE id = ? AND peer_id = ?")
            .bind(task_id.as_str())
            .bind(peer_id.as_str())
            .fetch_optional(&self.reader)
            .await?;
        Ok(row
            .map(|row| row.try_get::<Option<String>, _>("upstream_task_id"))
            .transpose()?
            .flatten())
    }

    async fn working_tasks(
        &self,
        created_before: Option<Timestamp>,
    ) -> Result<Vec<WorkingTask>, StoreError> {
        let created_before = created_before.map(Timestamp::as_millisecond);
        let rows = sqlx::query(
            "SELECT id, peer_id, body, instance FROM tasks WHERE state = 'TASK_STATE_WORKING' AND (? IS NULL OR COALESCE(status_at, created_at) < ?)",
        )
        .bind(created_before)
        .bind(created_before)
        .fetch_all(&self.writer)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(WorkingTask {
                    id: row.try_get::<String, _>("id")?.into(),
                    peer_id: row.try_get::<String, _>("peer_id")?.into(),
                    body: row.try_get("body")?,
                    instance: row.try_get("instance")?,
                })
            })
            .collect()
    }

    async fn finish_working_task(
        &self,
        id: &TaskId,
        state: TaskState,
        body: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let finished = sqlx::query(
            "UPDATE tasks SET state = ?, body = ?, status_at = ? WHERE id = ? AND state = 'TASK_STATE_WORKING'",
        )
        .bind(state.as_str())
        .bind(body)
        .bind(now.as_millisecond())
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        if finished.rows_affected() > 0 {
            super::push::queue_state(&mut tx, id, state.as_str(), body, (now, None)).await?;
        }
        tx.commit().await?;
        Ok(finished.rows_affected() > 0)
    }

    async fn list_tasks(
        &self,
        query: &TaskQuery<'_>,
        now: Timestamp,
    ) -> Result<TaskPage, StoreError> {
        let now = now.as_millisecond();
        const FILTERS: &str = "peer_id = ? AND expires_at > ? AND (? IS NULL OR context_id = ?) \
             AND (? IS NULL OR state = ?) AND (? IS NULL OR status_at >= ?)";
        let filtered = |sql: String| {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(query.peer_id.as_str())
                .bind(now)
                .bind(query.context_id.map(ContextId::as_str))
                .bind(query.context_id.map(ContextId::as_str))
                .bind(query.state.map(TaskState::as_str))
                .bind(query.state.map(TaskState::as_str))
                .bind(query.status_since.map(Timestamp::as_millisecond))
                .bind(query.status_since.map(Timestamp::as_millisecond))
        };
        let (after_at, after_id) = query.after.unzip();
        let after_at = after_at.map(Timestamp::as_millisecond);
        let rows = filtered(format!(
            "SELECT id, body, COALESCE(status_at, created_at) AS status_at FROM tasks WHERE {FILTERS} AND (? IS NULL OR status_at < ? \
             OR (status_at = ? AND id < ?)) ORDER BY status_at DESC, id DESC LIMIT ?"
        ))
        .bind(after_at)
        .bind(after_at)
        .bind(after_at)
        .bind(after_id.map(TaskId::as_str))
        .bind(i64::from(query.limit))
        .fetch_all(&self.reader)
        .await?;
        let total: i64 = filtered(format!("SELECT count(*) FROM tasks WHERE {FILTERS}"))
            .fetch_one(&self.reader)
            .await?
            .try_get(0)?;
        let tasks = rows
            .iter()
            .map(|row| {
                Ok((
                    from_millis(row.try_get("status_at")?),
                    row.try_get("id")?,
                    row.try_get("body")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(TaskPage {
            tasks,
            total: u64::try_from(total).unwrap_or(0),
        })
    }

    async fn delete_expired_tasks(&self, now: Timestamp) -> Result<u64, StoreError> {
        let now = now.as_millisecond();
        // One statement each, so the write lock is never held across awaits (a command-line
        // change waits on it); the tasks go last, so a sweep cut short leaves nothing that the
        // next one cannot find.
        for table in ["push_deliveries", "push_configs"] {
            let _turn = self.write_turn().await;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE task_id IN (SELECT id FROM tasks WHERE expires_at <= ?)"
            )))
            .bind(now)
            .execute(&self.writer)
            .await?;
        }
        let _turn = self.write_turn().await;
        let done = sqlx::query("DELETE FROM tasks WHERE expires_at <= ?")
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }
}
