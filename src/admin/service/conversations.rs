//! What administrators read of their peers: conversations, tasks, dead letters, usage and the
//! audit log.

use super::*;
use crate::clock::UtcPeriod;

/// A usage period: a UTC day (`YYYY-MM-DD`) or month (`YYYY-MM`).
pub fn read_period(period: &str) -> Result<UtcPeriod, ServiceError> {
    UtcPeriod::parse(period).ok_or_else(|| ServiceError::Invalid {
        field: "period",
        reason: "a UTC day (YYYY-MM-DD) or month (YYYY-MM)".to_owned(),
    })
}

/// A page of conversations, and where the next one starts (`None`: the last page).
#[derive(Debug, Clone)]
pub struct ConversationPage {
    /// Most recent first, then by peer and context.
    pub conversations: Vec<ConversationSummary>,
    /// Where the next page starts.
    pub next: Option<crate::store::ConversationCursor>,
}

/// The most conversations one page lists.
pub const MAX_CONVERSATIONS_PAGE: u32 = 500;

impl AccountService {
    pub(super) fn account(caller: &Caller) -> Result<&AdminId, ServiceError> {
        caller.actor.admin_id().ok_or(ServiceError::Forbidden(
            "conversations belong to an administrator's account; sign in as one",
        ))
    }

    /// Push notifications given up (dead letters) for the caller's peers, newest first (at
    /// most 200).
    pub async fn failed_deliveries(
        &self,
        caller: &Caller,
    ) -> Result<Vec<crate::store::FailedDelivery>, ServiceError> {
        Ok(self
            .store
            .push()
            .failed_deliveries(Some(Self::account(caller)?), 200)
            .await?)
    }

    /// A page of the conversations `query` asks for among the caller's peers (an
    /// administrator's own whatever the query says; the operator's, of the owner the query
    /// names or everyone's): at most `query.limit` (1 to [`MAX_CONVERSATIONS_PAGE`]), with
    /// where the next page starts when there is one.
    pub async fn conversations(
        &self,
        caller: &Caller,
        mut query: crate::store::ConversationQuery,
    ) -> Result<ConversationPage, ServiceError> {
        if let Some(me) = caller.actor.admin_id() {
            query.owner_id = Some(me.clone());
        }
        let limit = query.limit.clamp(1, MAX_CONVERSATIONS_PAGE);
        // One more than the page: whether there is a next one.
        query.limit = limit + 1;
        let mut conversations = self.store.conversations().conversations(&query).await?;
        let next = (conversations.len() > limit as usize)
            .then(|| {
                conversations.truncate(limit as usize);
                conversations
                    .last()
                    .map(crate::store::ConversationCursor::after)
            })
            .flatten();
        Ok(ConversationPage {
            conversations,
            next,
        })
    }

    /// A task of one of the caller's peers as `GetTask` answers it, while the gateway keeps
    /// it. Another's, or one that does not exist, is not found; asking for another's is
    /// audited.
    pub async fn task(
        &self,
        caller: &Caller,
        peer: &str,
        task_id: &str,
    ) -> Result<serde_json::Value, ServiceError> {
        let op = Operation::new(
            caller,
            AuditAction::TaskRead,
            AuditTarget::Peer(peer.to_owned()),
        );
        self.audited(op, async |_| {
            let peer = self.readable_peer(caller, peer).await?;
            let task_id = crate::protocol::ids::TaskId::from(task_id);
            let found = self
                .store
                .tasks()
                .find_task(&peer.id, &task_id, self.clock.now())
                .await?;
            found
                .and_then(|json| serde_json::from_str(&json).ok())
                .ok_or_else(|| ServiceError::NotFound("no such task".to_owned()))
        })
        .await
    }

    /// One conversation of one of the caller's peers. Asking for another's is audited.
    pub async fn conversation(
        &self,
        caller: &Caller,
        peer: &str,
        context_id: &str,
    ) -> Result<Vec<ConversationEntry>, ServiceError> {
        let op = Operation::new(
            caller,
            AuditAction::ConversationRead,
            AuditTarget::Peer(peer.to_owned()),
        );
        self.audited(op, async |_| {
            let peer = self.readable_peer(caller, peer).await?;
            self.store
                .conversations()
                .conversation(&peer.id, &ContextId::from(context_id))
                .await?
                .ok_or_else(|| ServiceError::NotFound("no such conversation".to_owned()))
        })
        .await
    }

    /// Deletes one conversation of one of the caller's peers, with the tasks that held its text.
    pub async fn delete_conversation(
        &self,
        caller: &Caller,
        peer: &str,
        context_id: &str,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::ConversationDeleted,
                AuditTarget::Peer(peer.to_owned()),
            ),
            async |op| {
                Self::account(caller)?;
                let (mut tx, record) = self.begin_change(caller, peer).await?;
                if !tx
                    .delete_conversation(&record.id, &ContextId::from(context_id))
                    .await?
                {
                    return Err(ServiceError::NotFound("no such conversation".to_owned()));
                }
                let detail = format!("context {context_id}");
                self.finish_change(tx, op, &record, detail).await
            },
        )
        .await
    }

    /// Tokens spent by the caller's peers on `day` and in its month, per peer.
    pub async fn usage(
        &self,
        caller: &Caller,
        admin_id: &AdminId,
        period: impl Into<UtcPeriod>,
    ) -> Result<(u64, Vec<PeerUsage>), ServiceError> {
        let period = period.into();
        if caller.actor.admin_id().is_some_and(|me| me != admin_id) {
            return Err(ServiceError::Forbidden("usage of another administrator"));
        }
        let total = self.store.usage().tokens_spent(admin_id, period).await?;
        let peers = self.store.usage().usage_by_peer(admin_id, period).await?;
        Ok((total, peers))
    }

    /// Audit records since `since`: the caller's own account, or all for the
    /// operator.
    pub async fn audit(
        &self,
        caller: &Caller,
        since: Timestamp,
    ) -> Result<Vec<AuditRecord>, ServiceError> {
        Ok(self
            .store
            .accounts()
            .audit_since(since, caller.actor.admin_id())
            .await?)
    }
}
