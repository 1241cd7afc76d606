//! Tasks and context histories in PostgreSQL, and the group commit that shares one
//! transaction among many turns.

use super::PostgresStore;
use crate::clock::{Timestamp, from_millis};
use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::TaskState;
use crate::store::PeerId;
use crate::store::batch::Batch;
use crate::store::{
    ConversationMessage, ConversationRole, Exchange, StoreError, TaskPage, TaskQuery, TaskStore,
    WorkingTask,
};
use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, QueryBuilder, Row};

/// An exchange waiting for the group commit, and who to tell when it is durable.
pub(super) struct PendingExchange {
    exchange: Exchange,
    done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// Most exchanges committed in one transaction.
pub(super) const MAX_BATCH: usize = 256;

#[async_trait]
impl TaskStore for PostgresStore {
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
            "SELECT role, body FROM messages WHERE peer_id = $1 AND context_id = $2 ORDER BY seq DESC LIMIT $3",
        )
        .bind(peer_id.as_str())
        .bind(context_id.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
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

    /// Concurrent calls share one transaction (group commit), so one writer keeps up with many
    /// requests.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.exchanges
            .send(PendingExchange { exchange, done })
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
        let row = sqlx::query(
            "SELECT body FROM tasks WHERE id = $1 AND peer_id = $2 AND expires_at > $3",
        )
        .bind(task_id.as_str())
        .bind(peer_id.as_str())
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| row.try_get("body")).transpose()?)
    }

    async fn upstream_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT upstream_task_id FROM tasks WHERE id = $1 AND peer_id = $2")
            .bind(task_id.as_str())
            .bind(peer_id.as_str())
            .fetch_optional(&self.pool)
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
            "SELECT id, peer_id, body, instance FROM tasks WHERE state = 'TASK_STATE_WORKING' AND ($1::BIGINT IS NULL OR COALESCE(status_at, created_at) < $2)",
        )
        .bind(created_before)
        .bind(created_before)
        .fetch_all(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        let finished = sqlx::query(
            "UPDATE tasks SET state = $1, body = $2, status_at = $3 WHERE id = $4 AND state = 'TASK_STATE_WORKING'",
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
        const FILTERS: &str = "peer_id = $1 AND expires_at > $2 AND ($3::TEXT IS NULL OR context_id = $3) \
             AND ($4::TEXT IS NULL OR state = $4) AND ($5::BIGINT IS NULL OR status_at >= $5)";
        let filtered = |sql: String| {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(query.peer_id.as_str())
                .bind(now)
                .bind(query.context_id.map(ContextId::as_str))
                .bind(query.state.map(TaskState::as_str))
                .bind(query.status_since.map(Timestamp::as_millisecond))
        };
        let (after_at, after_id) = query.after.unzip();
        let after_at = after_at.map(Timestamp::as_millisecond);
        let rows = filtered(format!(
            "SELECT id, body, COALESCE(status_at, created_at) AS status_at FROM tasks WHERE {FILTERS} AND ($6::BIGINT IS NULL OR status_at < $6 \
             OR (status_at = $6 AND id < $7)) ORDER BY status_at DESC, id DESC LIMIT $8"
        ))
        .bind(after_at)
        .bind(after_id.map(TaskId::as_str))
        .bind(i64::from(query.limit))
        .fetch_all(&self.pool)
        .await?;
        let total: i64 = filtered(format!("SELECT count(*) FROM tasks WHERE {FILTERS}"))
            .fetch_one(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        for table in ["push_deliveries", "push_configs"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE task_id IN (SELECT id FROM tasks WHERE expires_at <= $1)"
            )))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let done = sqlx::query("DELETE FROM tasks WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }
}

/// Commits waiting exchanges in batches until every handle is gone.
pub(super) async fn group_commit(
    pool: PgPool,
    mut pending: tokio::sync::mpsc::Receiver<PendingExchange>,
) {
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
async fn write_exchanges(pool: &PgPool, exchanges: &[&Exchange]) -> Result<(), StoreError> {
    let batch = Batch::of(exchanges);
    let mut tx = pool.begin().await?;
    let mut tasks = QueryBuilder::<Postgres>::new(
        "INSERT INTO tasks (id, peer_id, context_id, state, body, created_at, expires_at, instance, status_at, upstream_task_id) ",
    );
    tasks.push_values(&batch.tasks, |mut row, (e, created_at)| {
        row.push_bind(e.task_id.as_str())
            .push_bind(e.peer_id.as_str())
            .push_bind(e.context_id.as_str())
            .push_bind(e.state.as_str())
            .push_bind(e.task_json.as_str())
            .push_bind(created_at.as_millisecond())
            .push_bind(e.expires_at.as_millisecond())
            .push_bind(e.instance.as_deref())
            .push_bind(e.now.as_millisecond())
            .push_bind(e.upstream_task_id.as_deref());
    });
    // A finished task replaces the working copy stored before the model was asked, unless a
    // sweep already called that copy failed (a peer may have read it so). A task waiting for
    // the peer goes on when the peer answers it.
    tasks.push(
        " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body, \
         expires_at = excluded.expires_at, status_at = excluded.status_at, \
         instance = excluded.instance, \
         upstream_task_id = COALESCE(excluded.upstream_task_id, tasks.upstream_task_id) \
         WHERE tasks.state IN ('TASK_STATE_WORKING', 'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')",
    );
    tasks.build().execute(&mut *tx).await?;
    // Configs sent with a message first, so they hear its task's first state.
    for config in exchanges.iter().filter_map(|e| e.push_config.as_ref()) {
        super::push::upsert_config(&mut tx, config).await?;
    }
    super::push::queue_states(&mut tx, exchanges).await?;
    write_conversation(&mut tx, &batch).await?;
    add_usage(&mut tx, &batch).await?;
    for entry in exchanges.iter().filter_map(|e| e.audit.as_ref()) {
        super::accounts::insert_audit(&mut tx, entry).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The batch's contexts (first and latest time) and conversation messages.
async fn write_conversation(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    batch: &Batch<'_>,
) -> Result<(), StoreError> {
    if batch.contexts.is_empty() {
        return Ok(());
    }
    let mut contexts = QueryBuilder::<Postgres>::new(
        "INSERT INTO contexts (peer_id, context_id, created_at, updated_at) ",
    );
    contexts.push_values(
        &batch.contexts,
        |mut row, ((peer, context), (first, last))| {
            row.push_bind(*peer)
                .push_bind(*context)
                .push_bind(first.as_millisecond())
                .push_bind(last.as_millisecond());
        },
    );
    contexts
        .push(" ON CONFLICT (peer_id, context_id) DO UPDATE SET updated_at = excluded.updated_at");
    contexts.build().execute(&mut **tx).await?;
    let mut insert = QueryBuilder::<Postgres>::new(
        "INSERT INTO messages (peer_id, context_id, task_id, role, body, parts, created_at) ",
    );
    insert.push_values(&batch.messages, |mut row, (e, m)| {
        row.push_bind(e.peer_id.as_str())
            .push_bind(e.context_id.as_str())
            .push_bind(e.task_id.as_str())
            .push_bind(m.role.as_str())
            .push_bind(m.text.as_str())
            .push_bind(m.parts.as_deref())
            .push_bind(e.now.as_millisecond());
    });
    insert.build().execute(&mut **tx).await?;
    Ok(())
}

/// The batch's tokens and requests, added to each (owner, peer, day).
async fn add_usage(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    batch: &Batch<'_>,
) -> Result<(), StoreError> {
    if batch.usage.is_empty() {
        return Ok(());
    }
    let mut upsert = QueryBuilder::<Postgres>::new(
        "INSERT INTO usage (admin_id, peer_id, day, tokens, requests) ",
    );
    upsert.push_values(
        &batch.usage,
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
         SET tokens = usage.tokens + excluded.tokens, requests = usage.requests + excluded.requests",
    );
    upsert.build().execute(&mut **tx).await?;
    Ok(())
}
