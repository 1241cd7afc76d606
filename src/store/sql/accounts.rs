//! Administrators, peers, credentials and the audit log.
//!
//! A change is one write transaction, so a change and its audit record are committed together
//! or not at all. Its reads lock the rows they read (PostgreSQL's `FOR UPDATE`; SQLite's
//! `BEGIN IMMEDIATE` holds the whole file), so two changes of the same peer or administrator
//! take turns instead of both acting on what they read. The audit table refuses `UPDATE` and
//! `DELETE` in the database itself (triggers, in each engine's migrations), so no code path,
//! this one included, can rewrite history.

use super::rows::{AdminRow, AuditRow, IdentityRow, PeerRow, admin_columns, peer_columns};
use super::{Arg, Dialect, Sql, SqlEngine, WriteTx, sql};
use crate::clock::Timestamp;
use crate::protocol::ids::ContextId;
use crate::protocol::operations::OperationSet;
use crate::store::{
    AccountChange, AccountChanges, AccountStore, AdminId, AdminRecord, AuditEntry, AuditRecord,
    PeerId, PeerIdentity, PeerRecord, StoreError,
};
use crate::store::{AdminSetting, PeerSetting};
use crate::token::{CredentialKind, TokenSecretHash};
use async_trait::async_trait;

/// One audit record: `$1` time, `$2` actor, `$3` action, `$4` target, `$5` outcome, `$6`
/// client, `$7` detail, `$8` owner.
pub(crate) const INSERT_AUDIT: &str = "INSERT INTO audit (at, actor, action, target, outcome, \
     client, detail, owner_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// [`INSERT_AUDIT`] with `entry`'s values.
pub(crate) fn insert_audit_statement(entry: &AuditEntry) -> Sql<'_> {
    sql(INSERT_AUDIT)
        .bind(entry.at)
        .bind(entry.actor.to_string())
        .bind(entry.action.as_str())
        .bind(entry.target.to_string())
        .bind(entry.outcome.to_string())
        .bind(&entry.client)
        .bind(&entry.detail)
        .bind(&entry.owner_id)
}

#[async_trait]
impl<E: SqlEngine> AccountStore for E {
    async fn begin_change(&self) -> Result<AccountChange, StoreError> {
        Ok(Box::new(SqlChange {
            tx: self.begin_write(true).await?,
        }))
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.begin_change().await?;
        tx.audit(entry).await?;
        tx.commit().await
    }

    async fn list_admins(&self) -> Result<Vec<AdminRecord>, StoreError> {
        let rows: Vec<AdminRow> = sql(concat!(admin_columns!(), " ORDER BY created_at, name"))
            .fetch_all(self.reads())
            .await?;
        rows.into_iter().map(AdminRow::record).collect()
    }

    async fn list_peers(&self, owner_id: Option<&AdminId>) -> Result<Vec<PeerRecord>, StoreError> {
        let rows: Vec<PeerRow> = sql(concat!(
            peer_columns!(),
            " WHERE (CAST($1 AS TEXT) IS NULL OR p.owner_id = $1) ORDER BY p.created_at, p.name"
        ))
        .bind(owner_id)
        .fetch_all(self.reads())
        .await?;
        rows.into_iter().map(PeerRow::record).collect()
    }

    async fn find_peer(&self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row: Option<PeerRow> = sql(concat!(peer_columns!(), " WHERE p.name = $1"))
            .bind(name)
            .fetch_optional(self.reads())
            .await?;
        row.map(PeerRow::record).transpose()
    }

    async fn list_identities(&self) -> Result<Vec<(String, PeerIdentity)>, StoreError> {
        let rows: Vec<IdentityRow> = sql("SELECT peer_id, kind, issuer, subject FROM \
             peer_identities ORDER BY created_at, kind, issuer, subject")
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().filter_map(IdentityRow::identity).collect())
    }

    async fn credential_kinds(&self, now: Timestamp) -> Result<Vec<(String, String)>, StoreError> {
        sql("SELECT DISTINCT peer_id, kind FROM credentials \
             WHERE (revoked_at IS NULL OR revoked_at > $1) AND (expires_at IS NULL OR expires_at > $1) \
             UNION SELECT id AS peer_id, 'password' AS kind FROM peers WHERE password_hash IS NOT NULL \
             ORDER BY peer_id, kind")
        .bind(now)
        .fetch_all(self.reads())
        .await
    }

    async fn audit_since(
        &self,
        since: Timestamp,
        owner_id: Option<&AdminId>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<AuditRow> = sql(
            "SELECT seq, at, actor, action, target, outcome, client, detail, owner_id FROM audit \
             WHERE at >= $1 AND (CAST($2 AS TEXT) IS NULL OR owner_id = $2) ORDER BY seq",
        )
        .bind(since)
        .bind(owner_id)
        .fetch_all(self.reads())
        .await?;
        rows.into_iter().map(AuditRow::record).collect()
    }
}

/// One account change. Dropped without `commit`, it rolls back.
#[derive(Debug)]
struct SqlChange {
    tx: WriteTx,
}

impl SqlChange {
    /// Sets one column of one row: `statement` is `UPDATE … SET column = $1 WHERE id = $2`.
    async fn set(
        &mut self,
        statement: &'static str,
        value: Arg<'_>,
        id: &str,
    ) -> Result<(), StoreError> {
        sql(statement)
            .bind(value)
            .bind(id)
            .execute(self.tx.on())
            .await?;
        Ok(())
    }

    /// Whether an insert that did nothing on conflict inserted its row.
    async fn inserted(&mut self, statement: Sql<'_>) -> Result<bool, StoreError> {
        Ok(statement.execute(self.tx.on()).await? > 0)
    }

    /// Marks a peer's live credentials (of one kind, or all) revoked; the rows stay for audits.
    async fn revoke(
        &mut self,
        peer_id: &PeerId,
        kind: Option<CredentialKind>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sql("UPDATE credentials SET revoked_at = $1 \
             WHERE peer_id = $2 AND revoked_at IS NULL AND (CAST($3 AS TEXT) IS NULL OR kind = $3)")
        .bind(now)
        .bind(peer_id)
        .bind(kind.map(CredentialKind::as_str))
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    /// The peer whose name differs from `name` at most in case, if there is one.
    async fn similar_peer(&mut self, name: &str) -> Result<Option<String>, StoreError> {
        // Peer creations take turns, so two names differing only in case cannot both pass this
        // check in concurrent transactions (SQLite's write transactions already take turns).
        if self.tx.dialect() == Dialect::Postgres {
            sql("SELECT pg_advisory_xact_lock($1)")
                .bind(crate::store::postgres::PEER_NAMES_LOCK)
                .execute(self.tx.on())
                .await?;
        }
        let similar: Option<(String,)> =
            // Case folded for ASCII only on both engines (SQLite's `lower` folds no more):
            // under `COLLATE "C"` PostgreSQL's does the same.
            sql("SELECT name FROM peers WHERE lower(name COLLATE \"C\") = lower($1 COLLATE \"C\") LIMIT 1")
                .bind(name)
                .fetch_optional(self.tx.on())
                .await?;
        Ok(similar.map(|(name,)| name))
    }
}

#[async_trait]
impl AccountChanges for SqlChange {
    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await
    }

    async fn audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError> {
        insert_audit_statement(entry).execute(self.tx.on()).await?;
        Ok(())
    }

    async fn admin(&mut self, name: &str) -> Result<Option<AdminRecord>, StoreError> {
        let row: Option<AdminRow> = sql(concat!(admin_columns!(), " WHERE name = $1 FOR UPDATE"))
            .bind(name)
            .fetch_optional(self.tx.on())
            .await?;
        row.map(AdminRow::record).transpose()
    }

    async fn peer(&mut self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row: Option<PeerRow> = sql(concat!(
            peer_columns!(),
            " WHERE p.name = $1 FOR UPDATE OF p"
        ))
        .bind(name)
        .fetch_optional(self.tx.on())
        .await?;
        row.map(PeerRow::record).transpose()
    }

    async fn insert_admin(
        &mut self,
        admin: &AdminRecord,
        password_hash: Option<&str>,
    ) -> Result<(), StoreError> {
        let insert = sql(
            "INSERT INTO admins (id, name, password_hash, status, model_allowed, \
             tokens_per_day, tokens_per_month, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&admin.id)
        .bind(&admin.name)
        .bind(password_hash)
        .bind(admin.status.as_str())
        .bind(admin.model_allowed)
        .bind(admin.tokens_per_day)
        .bind(admin.tokens_per_month)
        .bind(admin.created_at);
        if !self.inserted(insert).await? {
            return Err(StoreError::DuplicateAdmin(admin.name.clone()));
        }
        Ok(())
    }

    async fn set_admin(
        &mut self,
        admin_id: &AdminId,
        setting: &AdminSetting,
    ) -> Result<(), StoreError> {
        let (statement, value): (&'static str, Arg<'_>) = match setting {
            AdminSetting::Status(status) => (
                "UPDATE admins SET status = $1 WHERE id = $2",
                status.as_str().into(),
            ),
            AdminSetting::Auditor(auditor) => (
                "UPDATE admins SET role = $1 WHERE id = $2",
                if *auditor { "auditor" } else { "admin" }.into(),
            ),
            AdminSetting::PasswordHash(phc) => (
                "UPDATE admins SET password_hash = $1 WHERE id = $2",
                phc.into(),
            ),
            AdminSetting::Budget {
                model_allowed,
                tokens_per_day,
                tokens_per_month,
            } => {
                sql(
                    "UPDATE admins SET model_allowed = $1, tokens_per_day = $2, \
                     tokens_per_month = $3 WHERE id = $4",
                )
                .bind(*model_allowed)
                .bind(*tokens_per_day)
                .bind(*tokens_per_month)
                .bind(admin_id)
                .execute(self.tx.on())
                .await?;
                return Ok(());
            }
        };
        self.set(statement, value, admin_id).await
    }

    async fn revoke_admin_tokens(
        &mut self,
        admin_id: &AdminId,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let statement =
            "UPDATE admin_tokens SET revoked_at = $1 WHERE admin_id = $2 AND revoked_at IS NULL";
        self.set(statement, now.into(), admin_id).await
    }

    async fn insert_admin_token(
        &mut self,
        admin_id: &AdminId,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sql(
            "INSERT INTO admin_tokens (token_id, admin_id, secret_hash, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(token_id)
        .bind(admin_id)
        .bind(&secret_hash.0[..])
        .bind(now)
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    async fn insert_peer(&mut self, peer: &PeerRecord) -> Result<(), StoreError> {
        match self.similar_peer(&peer.name).await? {
            Some(existing) if existing == peer.name => {
                return Err(StoreError::DuplicatePeer(existing));
            }
            Some(existing) => return Err(StoreError::SimilarPeer(existing)),
            None => {}
        }
        let insert = sql(
            "INSERT INTO peers (id, name, status, rate_per_minute, created_at, \
             owner_id, expires_at, max_streams, tokens_per_day) \
             VALUES ($1, $2, 'active', $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&peer.id)
        .bind(&peer.name)
        .bind(peer.rate_per_minute)
        .bind(peer.created_at)
        .bind(&peer.owner_id)
        .bind(peer.expires_at)
        .bind(peer.max_streams)
        .bind(peer.tokens_per_day);
        if !self.inserted(insert).await? {
            return Err(StoreError::DuplicatePeer(peer.name.clone()));
        }
        Ok(())
    }

    async fn insert_credential(
        &mut self,
        peer_id: &PeerId,
        kind: CredentialKind,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sql(
            "INSERT INTO credentials (token_id, peer_id, secret_hash, created_at, kind) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(token_id)
        .bind(peer_id)
        .bind(&secret_hash.0[..])
        .bind(now)
        .bind(kind.as_str())
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    async fn revoke_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: Option<CredentialKind>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.revoke(peer_id, kind, now).await
    }

    async fn expire_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: CredentialKind,
        until: Timestamp,
    ) -> Result<(), StoreError> {
        sql(
            "UPDATE credentials SET expires_at = LEAST(coalesce(expires_at, $1), $1) \
             WHERE peer_id = $2 AND kind = $3 AND revoked_at IS NULL",
        )
        .bind(until)
        .bind(peer_id)
        .bind(kind.as_str())
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    async fn revoke_peer(&mut self, peer_id: &PeerId, now: Timestamp) -> Result<(), StoreError> {
        // The password goes too: reinstating the peer must not bring it back.
        sql("UPDATE peers SET status = 'revoked', password_hash = NULL WHERE id = $1")
            .bind(peer_id)
            .execute(self.tx.on())
            .await?;
        self.revoke(peer_id, None, now).await
    }

    async fn reinstate_peer(&mut self, peer_id: &PeerId) -> Result<(), StoreError> {
        sql("UPDATE peers SET status = 'active' WHERE id = $1")
            .bind(peer_id)
            .execute(self.tx.on())
            .await?;
        Ok(())
    }

    async fn set_peer(
        &mut self,
        peer_id: &PeerId,
        setting: &PeerSetting,
    ) -> Result<(), StoreError> {
        let (statement, value): (&'static str, Arg<'_>) = match setting {
            PeerSetting::Rate(rate) => (
                "UPDATE peers SET rate_per_minute = $1 WHERE id = $2",
                (*rate).into(),
            ),
            PeerSetting::TokensPerDay(tokens) => (
                "UPDATE peers SET tokens_per_day = $1 WHERE id = $2",
                (*tokens).into(),
            ),
            PeerSetting::MaxStreams(cap) => (
                "UPDATE peers SET max_streams = $1 WHERE id = $2",
                (*cap).into(),
            ),
            PeerSetting::TrustsTrace(trusted) => (
                "UPDATE peers SET trusts_trace = $1 WHERE id = $2",
                (*trusted).into(),
            ),
            PeerSetting::Operations(set) => (
                "UPDATE peers SET operations = $1 WHERE id = $2",
                (*set).map(OperationSet::to_text).into(),
            ),
            PeerSetting::ExpiresAt(at) => (
                "UPDATE peers SET expires_at = $1 WHERE id = $2",
                (*at).into(),
            ),
            PeerSetting::PasswordHash(phc) => (
                "UPDATE peers SET password_hash = $1 WHERE id = $2",
                phc.into(),
            ),
        };
        self.set(statement, value, peer_id.as_str()).await
    }

    async fn bind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let holder: Option<(String,)> = sql(
            "SELECT p.name FROM peer_identities i JOIN peers p ON p.id = i.peer_id \
             WHERE i.kind = $1 AND i.issuer = $2 AND i.subject = $3",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .fetch_optional(self.tx.on())
        .await?;
        if let Some((holder,)) = holder {
            return Err(StoreError::IdentityTaken(holder));
        }
        sql(
            "INSERT INTO peer_identities (kind, issuer, subject, peer_id, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .bind(peer_id)
        .bind(now)
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    async fn bind_admin_identity(
        &mut self,
        admin_id: &AdminId,
        (issuer, subject): (&str, &str),
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let holder: Option<(String,)> = sql(
            "SELECT a.name FROM admin_identities i JOIN admins a ON a.id = i.admin_id \
             WHERE i.issuer = $1 AND i.subject = $2",
        )
        .bind(issuer)
        .bind(subject)
        .fetch_optional(self.tx.on())
        .await?;
        if let Some((holder,)) = holder {
            return Err(StoreError::IdentityTaken(holder));
        }
        sql(
            "INSERT INTO admin_identities (issuer, subject, admin_id, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(issuer)
        .bind(subject)
        .bind(admin_id)
        .bind(now)
        .execute(self.tx.on())
        .await?;
        Ok(())
    }

    async fn unbind_admin_identity(
        &mut self,
        admin_id: &AdminId,
        (issuer, subject): (&str, &str),
    ) -> Result<bool, StoreError> {
        let deleted = sql(
            "DELETE FROM admin_identities WHERE issuer = $1 AND subject = $2 AND admin_id = $3",
        )
        .bind(issuer)
        .bind(subject)
        .bind(admin_id)
        .execute(self.tx.on())
        .await?;
        Ok(deleted > 0)
    }

    async fn unbind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
    ) -> Result<bool, StoreError> {
        let deleted = sql("DELETE FROM peer_identities \
             WHERE kind = $1 AND issuer = $2 AND subject = $3 AND peer_id = $4")
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .bind(peer_id)
        .execute(self.tx.on())
        .await?;
        Ok(deleted > 0)
    }

    async fn delete_conversation(
        &mut self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<bool, StoreError> {
        // Whether it existed is whether it had a context.
        let mut existed = false;
        for (i, statement) in [
            "DELETE FROM contexts WHERE peer_id = $1 AND context_id = $2",
            "DELETE FROM messages WHERE peer_id = $1 AND context_id = $2",
            "DELETE FROM tasks WHERE peer_id = $1 AND context_id = $2",
        ]
        .into_iter()
        .enumerate()
        {
            let done = sql(statement)
                .bind(peer_id)
                .bind(context_id.as_str())
                .execute(self.tx.on())
                .await?;
            existed |= i == 0 && done > 0;
        }
        Ok(existed)
    }
}
