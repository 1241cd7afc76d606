//! Conversations as their owners read them, tokens spent, and the served documents' times.

use super::rows::{AdminRow, EntryRow, SummaryRow, UsageRow, admin_columns};
use super::{SqlEngine, sql};
use crate::clock::{Timestamp, UtcPeriod, from_millis};
use crate::protocol::ids::ContextId;
use crate::store::{
    AdminId, AdminRecord, ConversationEntry, ConversationQuery, ConversationStore,
    ConversationSummary, DocumentStore, PeerId, PeerUsage, StoreError, UsageStore,
};
use async_trait::async_trait;

#[async_trait]
impl<E: SqlEngine> ConversationStore for E {
    async fn conversations(
        &self,
        query: &ConversationQuery,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let after = query.after.as_ref();
        let rows: Vec<SummaryRow> = sql(
            "SELECT p.name, c.context_id, c.created_at, c.updated_at, \
             (SELECT COUNT(*) FROM messages m WHERE m.peer_id = c.peer_id AND m.context_id = c.context_id) AS messages \
             FROM contexts c JOIN peers p ON p.id = c.peer_id \
             WHERE (CAST($1 AS TEXT) IS NULL OR p.owner_id = $1) AND (CAST($2 AS TEXT) IS NULL OR p.name = $2) \
             AND (CAST($3 AS BIGINT) IS NULL OR c.updated_at >= $3) \
             AND (CAST($4 AS BIGINT) IS NULL OR c.updated_at < $4) \
             AND (CAST($5 AS BIGINT) IS NULL OR c.updated_at < $5 OR (c.updated_at = $5 \
               AND (p.name > $6 OR (p.name = $6 AND c.context_id > $7)))) \
             ORDER BY c.updated_at DESC, p.name, c.context_id LIMIT $8",
        )
        .bind(query.owner_id.as_deref())
        .bind(query.peer.as_deref())
        .bind(query.since)
        .bind(query.until)
        .bind(after.map(|a| a.updated_at))
        .bind(after.map(|a| a.peer_name.as_str()))
        .bind(after.map(|a| a.context_id.as_str()))
        .bind(query.limit)
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(SummaryRow::summary).collect())
    }

    async fn conversation(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<Option<Vec<ConversationEntry>>, StoreError> {
        let exists: Option<(String,)> =
            sql("SELECT context_id FROM contexts WHERE peer_id = $1 AND context_id = $2")
                .bind(peer_id)
                .bind(context_id.as_str())
                .fetch_optional(self.reads())
                .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows: Vec<EntryRow> = sql(
            "SELECT role, body, parts, task_id, created_at FROM messages \
             WHERE peer_id = $1 AND context_id = $2 ORDER BY seq",
        )
        .bind(peer_id)
        .bind(context_id.as_str())
        .fetch_all(self.reads())
        .await?;
        Ok(Some(rows.into_iter().map(EntryRow::entry).collect()))
    }
}

#[async_trait]
impl<E: SqlEngine> UsageStore for E {
    async fn find_admin_by_id(&self, id: &AdminId) -> Result<Option<AdminRecord>, StoreError> {
        let row: Option<AdminRow> = sql(concat!(admin_columns!(), " WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.reads())
            .await?;
        row.map(AdminRow::record).transpose()
    }

    async fn tokens_spent(&self, admin_id: &AdminId, period: UtcPeriod) -> Result<u64, StoreError> {
        let (total,): (Option<i64>,) = sql("SELECT CAST(SUM(tokens) AS BIGINT) FROM usage \
             WHERE admin_id = $1 AND substr(day, 1, length($2)) = $2")
        .bind(admin_id)
        .bind(period.to_string())
        .fetch_one(self.reads())
        .await?;
        Ok(u64::try_from(total.unwrap_or(0)).unwrap_or(0))
    }

    async fn peer_tokens_spent(
        &self,
        peer_id: &PeerId,
        period: UtcPeriod,
    ) -> Result<u64, StoreError> {
        let (total,): (Option<i64>,) = sql("SELECT CAST(SUM(tokens) AS BIGINT) FROM usage \
             WHERE peer_id = $1 AND substr(day, 1, length($2)) = $2")
        .bind(peer_id)
        .bind(period.to_string())
        .fetch_one(self.reads())
        .await?;
        Ok(u64::try_from(total.unwrap_or(0)).unwrap_or(0))
    }

    async fn peer_tokens_per_day(&self, peer_id: &PeerId) -> Result<Option<u64>, StoreError> {
        let budget: Option<(Option<i64>,)> = sql("SELECT tokens_per_day FROM peers WHERE id = $1")
            .bind(peer_id)
            .fetch_optional(self.reads())
            .await?;
        Ok(budget
            .and_then(|(n,)| n)
            .map(|n| u64::try_from(n).unwrap_or(0)))
    }

    async fn usage_by_peer(
        &self,
        admin_id: &AdminId,
        period: UtcPeriod,
    ) -> Result<Vec<PeerUsage>, StoreError> {
        let rows: Vec<UsageRow> = sql(
            "SELECT p.name, CAST(SUM(u.tokens) AS BIGINT) AS tokens, \
             CAST(SUM(u.requests) AS BIGINT) AS requests FROM usage u JOIN peers p ON p.id = u.peer_id \
             WHERE u.admin_id = $1 AND substr(u.day, 1, length($2)) = $2 \
             GROUP BY p.name ORDER BY p.name",
        )
        .bind(admin_id)
        .bind(period.to_string())
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(UsageRow::usage).collect())
    }
}

#[async_trait]
impl<E: SqlEngine> DocumentStore for E {
    async fn document_modified_at(
        &self,
        name: &str,
        etag: &str,
        now: Timestamp,
    ) -> Result<Timestamp, StoreError> {
        let mut tx = self.begin_write(false).await?;
        let stored: Option<(String, i64)> =
            sql("SELECT etag, modified_at FROM documents WHERE name = $1 FOR UPDATE")
                .bind(name)
                .fetch_optional(tx.on())
                .await?;
        if let Some((stored, at)) = stored
            && stored == etag
        {
            return Ok(from_millis(at));
        }
        sql("INSERT INTO documents (name, etag, modified_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, modified_at = excluded.modified_at")
        .bind(name)
        .bind(etag)
        .bind(now)
        .execute(tx.on())
        .await?;
        tx.commit().await?;
        // As stored: to the millisecond.
        Ok(from_millis(now.as_millisecond()))
    }
}
