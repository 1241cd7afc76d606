//! Tasks and context histories. Exchanges are written by each engine's group commit.

use super::rows::{ListedRow, WorkingRow};
use super::{SqlEngine, log, push, sql};
use crate::clock::Timestamp;
use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::TaskState;
use crate::store::{
    ConversationMessage, ConversationRole, Exchange, IssuedReceipt, PeerId, StoreError, TaskPage,
    TaskQuery, TaskStore, WorkingTask,
};
use async_trait::async_trait;

/// `ListTasks`' filters: `$1` peer, `$2` now, `$3` context, `$4` state, `$5` status since.
macro_rules! task_filters {
    () => {
        "peer_id = $1 AND expires_at > $2 AND (CAST($3 AS TEXT) IS NULL OR context_id = $3) \
         AND (CAST($4 AS TEXT) IS NULL OR state = $4) \
         AND (CAST($5 AS BIGINT) IS NULL OR status_at >= $5)"
    };
}

#[async_trait]
impl<E: SqlEngine> TaskStore for E {
    async fn context_history(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
        limit: u32,
    ) -> Result<Vec<ConversationMessage>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // A withheld answer is the operator's evidence, never the model's history.
        let rows: Vec<(String, String)> = sql("SELECT role, body FROM messages \
             WHERE peer_id = $1 AND context_id = $2 AND role <> 'withheld' \
             ORDER BY seq DESC LIMIT $3")
        .bind(peer_id)
        .bind(context_id.as_str())
        .bind(limit)
        .fetch_all(self.reads())
        .await?;
        Ok(rows
            .into_iter()
            .rev()
            .map(|(role, text)| ConversationMessage {
                role: if role == ConversationRole::Agent.as_str() {
                    ConversationRole::Agent
                } else {
                    ConversationRole::Peer
                },
                text,
                parts: None,
            })
            .collect())
    }

    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        SqlEngine::save_exchange(self, exchange).await
    }

    async fn find_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        now: Timestamp,
    ) -> Result<Option<String>, StoreError> {
        let body: Option<(String,)> =
            sql("SELECT body FROM tasks WHERE id = $1 AND peer_id = $2 AND expires_at > $3")
                .bind(task_id.as_str())
                .bind(peer_id)
                .bind(now)
                .fetch_optional(self.reads())
                .await?;
        Ok(body.map(|(body,)| body))
    }

    async fn upstream_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
    ) -> Result<Option<String>, StoreError> {
        let id: Option<(Option<String>,)> =
            sql("SELECT upstream_task_id FROM tasks WHERE id = $1 AND peer_id = $2")
                .bind(task_id.as_str())
                .bind(peer_id)
                .fetch_optional(self.reads())
                .await?;
        Ok(id.and_then(|(id,)| id))
    }

    async fn working_tasks(
        &self,
        created_before: Option<Timestamp>,
    ) -> Result<Vec<WorkingTask>, StoreError> {
        // Read where writes go: a sweep must see every state written before it.
        let writer = self.writer().await;
        let rows: Vec<WorkingRow> = sql("SELECT id, peer_id, body, instance, sealing FROM tasks \
             WHERE state = 'TASK_STATE_WORKING' \
             AND (CAST($1 AS BIGINT) IS NULL OR COALESCE(status_at, created_at) < $1)")
        .bind(created_before)
        .fetch_all(writer.on())
        .await?;
        Ok(rows.into_iter().map(WorkingRow::task).collect())
    }

    async fn finish_working_task(
        &self,
        id: &TaskId,
        (state, body): (TaskState, &str),
        receipt: Option<(&PeerId, &IssuedReceipt)>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write(false).await?;
        let finished = sql("UPDATE tasks SET state = $1, body = $2, status_at = $3, \
             sealing = NULL WHERE id = $4 AND state = 'TASK_STATE_WORKING'")
        .bind(state.as_str())
        .bind(body)
        .bind(now)
        .bind(id.as_str())
        .execute(tx.on())
        .await?;
        if finished > 0 {
            push::queue_state(id.as_str(), state.as_str(), body, (now, None))
                .execute(tx.on())
                .await?;
            if let Some((peer_id, receipt)) = receipt {
                log::receipt_statement(receipt, peer_id, id, now)
                    .execute(tx.on())
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(finished > 0)
    }

    async fn list_tasks(
        &self,
        query: &TaskQuery<'_>,
        now: Timestamp,
    ) -> Result<TaskPage, StoreError> {
        let filtered = |statement: &'static str| {
            sql(statement)
                .bind(query.peer_id)
                .bind(now)
                .bind(query.context_id.map(ContextId::as_str))
                .bind(query.state.map(TaskState::as_str))
                .bind(query.status_since)
        };
        let (after_at, after_id) = query.after.unzip();
        let rows: Vec<ListedRow> = filtered(concat!(
            "SELECT id, body, COALESCE(status_at, created_at) AS status_at FROM tasks WHERE ",
            task_filters!(),
            " AND (CAST($6 AS BIGINT) IS NULL OR status_at < $6 OR (status_at = $6 AND id < $7)) \
             ORDER BY status_at DESC, id DESC LIMIT $8"
        ))
        .bind(after_at)
        .bind(after_id.map(TaskId::as_str))
        .bind(query.limit)
        .fetch_all(self.reads())
        .await?;
        let (total,): (i64,) = filtered(concat!(
            "SELECT count(*) FROM tasks WHERE ",
            task_filters!()
        ))
        .fetch_one(self.reads())
        .await?;
        Ok(TaskPage {
            tasks: rows.into_iter().map(ListedRow::listed).collect(),
            total: u64::try_from(total).unwrap_or(0),
        })
    }

    async fn delete_expired_tasks(&self, now: Timestamp) -> Result<u64, StoreError> {
        // One statement a turn, so SQLite's write lock is never held across awaits (a
        // command-line change waits on it); the tasks go last, so a sweep cut short leaves
        // nothing that the next one cannot find.
        let mut deleted = 0;
        for statement in [
            "DELETE FROM push_deliveries WHERE task_id IN (SELECT id FROM tasks WHERE expires_at <= $1)",
            "DELETE FROM push_configs WHERE task_id IN (SELECT id FROM tasks WHERE expires_at <= $1)",
            "DELETE FROM tasks WHERE expires_at <= $1",
        ] {
            let writer = self.writer().await;
            deleted = sql(statement).bind(now).execute(writer.on()).await?;
        }
        Ok(deleted)
    }
}
