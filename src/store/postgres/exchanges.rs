//! The group commit that shares one PostgreSQL transaction among many turns: the exchanges
//! waiting are written with a few multi-row statements in the shape of
//! [`crate::store::batch`], and the shared core's statements for what one row at a time is
//! enough for (push configs and queued states, audit records).

use crate::store::batch::Batch;
use crate::store::sql::{self, Failed, On};
use crate::store::{Exchange, StoreError};
use sqlx::postgres::PgPool;
use sqlx::{PgConnection, Postgres, QueryBuilder};

/// An exchange waiting for the group commit, and who to tell when it is durable.
pub(super) struct PendingExchange {
    pub(super) exchange: Exchange,
    pub(super) done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// Most exchanges committed in one transaction.
pub(super) const MAX_BATCH: usize = 256;

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
        "INSERT INTO tasks (id, peer_id, context_id, state, body, created_at, expires_at, instance, status_at, upstream_task_id, sealing) ",
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
            .push_bind(e.upstream_task_id.as_deref())
            .push_bind(e.sealing.as_deref());
    });
    // A finished task replaces the working copy stored before the model was asked, unless a
    // sweep already called that copy failed (a peer may have read it so). A task waiting for
    // the peer goes on when the peer answers it.
    tasks.push(
        " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body, \
         expires_at = excluded.expires_at, status_at = excluded.status_at, \
         instance = excluded.instance, sealing = excluded.sealing, \
         upstream_task_id = COALESCE(excluded.upstream_task_id, tasks.upstream_task_id) \
         WHERE tasks.state IN ('TASK_STATE_WORKING', 'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')",
    );
    tasks.build().execute(&mut *tx).await?;
    // Configs sent with a message first, so they hear its task's first state.
    for config in exchanges.iter().filter_map(|e| e.push_config.as_ref()) {
        for statement in sql::upsert_config_statements(config) {
            statement
                .execute(On::PostgresTx(&mut tx, Failed::unmarked()))
                .await?;
        }
    }
    queue_states(&mut tx, exchanges).await?;
    write_conversation(&mut tx, &batch).await?;
    add_usage(&mut tx, &batch).await?;
    for entry in exchanges.iter().filter_map(|e| e.audit.as_ref()) {
        sql::insert_audit_statement(entry)
            .execute(On::PostgresTx(&mut tx, Failed::unmarked()))
            .await?;
    }
    for receipt in exchanges
        .iter()
        .filter_map(|e| sql::insert_receipt_statement(e))
    {
        receipt
            .execute(On::PostgresTx(&mut tx, Failed::unmarked()))
            .await?;
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
            .push_bind(crate::store::batch::storable_text(&m.text).into_owned())
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
                .push_bind(day.to_string())
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

/// Queues each state of `exchanges` marked [`Exchange::notify`] for its task's configs. One
/// indexed read finds which of the batch's tasks have configs at all, so a batch without any
/// costs that read alone.
async fn queue_states(tx: &mut PgConnection, exchanges: &[&Exchange]) -> Result<(), StoreError> {
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
        sql::queue_state(&e.task_id, e.state.as_str(), &e.task_json, when)
            .execute(On::PostgresTx(&mut *tx, Failed::unmarked()))
            .await?;
    }
    Ok(())
}
