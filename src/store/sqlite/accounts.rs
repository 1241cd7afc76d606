//! Administrators, peers, credentials and the audit log in SQLite.
//!
//! A change is one `BEGIN IMMEDIATE` transaction, so a change and its audit record are
//! committed together or not at all, and a read inside it sees what it will commit over. The
//! audit table refuses `UPDATE` and `DELETE` in the database itself (triggers), so no code
//! path, this one included, can rewrite history.

use super::{BEGIN_WRITE, SqliteStore};
use crate::clock::{Timestamp, from_millis};
use crate::protocol::ids::ContextId;
use crate::store::PeerId;
use crate::store::{
    AccountChange, AccountChanges, AccountStore, AdminRecord, AuditEntry, AuditRecord, PeerRecord,
    StoreError,
};
use crate::store::{AdminStatus, AuditAction, PeerStatus};
use crate::store::{IdentityKind, PeerIdentity};
use crate::token::{CredentialKind, TokenSecretHash};
use async_trait::async_trait;
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};

pub(super) const ADMIN_COLUMNS: &str = "SELECT id, name, status, password_hash IS NOT NULL AS has_password, \
     model_allowed, tokens_per_day, tokens_per_month, created_at, role FROM admins";

pub(super) fn admin_record(row: &sqlx::sqlite::SqliteRow) -> Result<AdminRecord, StoreError> {
    let count = |column: &str| -> Result<Option<u64>, StoreError> {
        Ok(row
            .try_get::<Option<i64>, _>(column)?
            .map(|n| u64::try_from(n).unwrap_or(0)))
    };
    Ok(AdminRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: super::named(row, "status", AdminStatus::from_name)?,
        has_password: row.try_get("has_password")?,
        model_allowed: row.try_get("model_allowed")?,
        tokens_per_day: count("tokens_per_day")?,
        tokens_per_month: count("tokens_per_month")?,
        created_at: from_millis(row.try_get("created_at")?),
        auditor: row.try_get::<String, _>("role")? == "auditor",
    })
}

fn audit_record(row: &sqlx::sqlite::SqliteRow) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        seq: row.try_get("seq")?,
        entry: AuditEntry {
            at: from_millis(row.try_get("at")?),
            actor: row.try_get("actor")?,
            action: super::named(row, "action", AuditAction::from_name)?,
            target: row.try_get("target")?,
            outcome: row.try_get("outcome")?,
            client: row.try_get("client")?,
            detail: row.try_get("detail")?,
            owner_id: row.try_get("owner_id")?,
        },
    })
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The columns of a [`PeerRecord`], from `peers p` joined with its owner `a`.
pub(super) const PEER_COLUMNS: &str = "SELECT p.id, p.name, p.status, p.rate_per_minute, p.created_at, \
     p.last_used_at, p.owner_id, a.name AS owner_name, p.expires_at, p.max_streams, p.trusts_trace, p.operations, \
     p.tokens_per_day FROM peers p JOIN admins a ON a.id = p.owner_id";

fn peer_record(row: &sqlx::sqlite::SqliteRow) -> Result<PeerRecord, StoreError> {
    Ok(PeerRecord {
        id: row.try_get::<String, _>("id")?.into(),
        name: row.try_get("name")?,
        status: super::named(row, "status", PeerStatus::from_name)?,
        rate_per_minute: super::rate(row)?,
        created_at: from_millis(row.try_get("created_at")?),
        last_used_at: row
            .try_get::<Option<i64>, _>("last_used_at")?
            .map(from_millis),
        owner_id: row.try_get("owner_id")?,
        owner_name: row.try_get("owner_name")?,
        expires_at: row
            .try_get::<Option<i64>, _>("expires_at")?
            .map(from_millis),
        max_streams: super::max_streams(row)?,
        trusts_trace: row.try_get("trusts_trace")?,
        operations: crate::store::operations_column(row.try_get("operations")?),
        tokens_per_day: row
            .try_get::<Option<i64>, _>("tokens_per_day")?
            .map(|n| u64::try_from(n).unwrap_or(0)),
    })
}

#[async_trait]
impl AccountStore for SqliteStore {
    async fn begin_change(&self) -> Result<AccountChange, StoreError> {
        let turn = self.write_turn().await;
        self.reserve.before_essential_write();
        Ok(Box::new(SqliteAccountChange {
            tx: self.writer.begin_with(BEGIN_WRITE).await?,
            reserve: self.reserve.clone(),
            _turn: turn,
        }))
    }

    async fn list_peers(&self, owner_id: Option<&str>) -> Result<Vec<PeerRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE (? IS NULL OR p.owner_id = ?) ORDER BY p.created_at, p.name"
        )))
        .bind(owner_id)
        .bind(owner_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(peer_record).collect()
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.begin_change().await?;
        tx.audit(entry).await?;
        tx.commit().await
    }

    async fn list_admins(&self) -> Result<Vec<AdminRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{ADMIN_COLUMNS} ORDER BY created_at, name"
        )))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(admin_record).collect()
    }

    async fn find_peer(&self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE p.name = ?"
        )))
        .bind(name)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(peer_record).transpose()
    }

    async fn credential_kinds(&self, now: Timestamp) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT peer_id, kind FROM credentials \
             WHERE (revoked_at IS NULL OR revoked_at > ?1) AND (expires_at IS NULL OR expires_at > ?1) \
             UNION SELECT id AS peer_id, 'password' AS kind FROM peers WHERE password_hash IS NOT NULL \
             ORDER BY peer_id, kind",
        )
        .bind(now.as_millisecond())
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("peer_id")?, row.try_get("kind")?)))
            .collect()
    }

    async fn list_identities(&self) -> Result<Vec<(String, PeerIdentity)>, StoreError> {
        let rows = sqlx::query(
            "SELECT peer_id, kind, issuer, subject FROM peer_identities ORDER BY created_at, kind, issuer, subject",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .filter_map(|row| {
                let kind: String = match row.try_get("kind") {
                    Ok(kind) => kind,
                    Err(e) => return Some(Err(e.into())),
                };
                // A kind a newer release wrote is not this release's to show.
                let kind = IdentityKind::parse(&kind)?;
                Some((|| {
                    Ok((
                        row.try_get("peer_id")?,
                        PeerIdentity {
                            kind,
                            issuer: row.try_get("issuer")?,
                            subject: row.try_get("subject")?,
                        },
                    ))
                })())
            })
            .collect()
    }

    async fn audit_since(
        &self,
        since: Timestamp,
        owner_id: Option<&str>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let since = since.as_millisecond();
        let rows = sqlx::query(
            "SELECT seq, at, actor, action, target, outcome, client, detail, owner_id FROM audit \
             WHERE at >= ? AND (? IS NULL OR owner_id = ?) ORDER BY seq",
        )
        .bind(since)
        .bind(owner_id)
        .bind(owner_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(audit_record).collect()
    }
}

/// One write transaction. Dropped without `commit`, it rolls back.
struct SqliteAccountChange {
    tx: Transaction<'static, Sqlite>,
    /// Released if this change finds the disk full, so trying it again has room.
    reserve: std::sync::Arc<super::reserve::Reserve>,
    /// This process's write turn, held until the change commits or drops.
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl std::fmt::Debug for SqliteAccountChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteAccountChange")
    }
}

#[async_trait]
impl AccountChanges for SqliteAccountChange {
    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        let reserve = self.reserve.clone();
        match self.tx.commit().await.map_err(StoreError::from) {
            Err(StoreError::DiskFull) => {
                reserve.on_full();
                Err(StoreError::DiskFull)
            }
            other => other,
        }
    }

    async fn audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError> {
        insert_audit(&mut self.tx, entry).await
    }

    async fn admin(&mut self, name: &str) -> Result<Option<AdminRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{ADMIN_COLUMNS} WHERE name = ?"
        )))
        .bind(name)
        .fetch_optional(&mut *self.tx)
        .await?;
        row.as_ref().map(admin_record).transpose()
    }

    async fn peer(&mut self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE p.name = ?"
        )))
        .bind(name)
        .fetch_optional(&mut *self.tx)
        .await?;
        row.as_ref().map(peer_record).transpose()
    }

    async fn insert_admin(
        &mut self,
        admin: &AdminRecord,
        password_hash: Option<&str>,
    ) -> Result<(), StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO admins (id, name, password_hash, status, model_allowed, tokens_per_day, tokens_per_month, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(admin.id.as_str())
        .bind(&admin.name)
        .bind(password_hash)
        .bind(admin.status.as_str())
        .bind(admin.model_allowed)
        .bind(admin.tokens_per_day.map(signed))
        .bind(admin.tokens_per_month.map(signed))
        .bind(admin.created_at.as_millisecond())
        .execute(&mut *self.tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::DuplicateAdmin(admin.name.clone()));
        }
        Ok(())
    }

    async fn set_admin_status(
        &mut self,
        admin_id: &str,
        status: AdminStatus,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE admins SET status = ? WHERE id = ?")
            .bind(status.as_str())
            .bind(admin_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_admin_role(&mut self, admin_id: &str, auditor: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE admins SET role = ? WHERE id = ?")
            .bind(if auditor { "auditor" } else { "admin" })
            .bind(admin_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn revoke_admin_tokens(
        &mut self,
        admin_id: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let now = now.as_millisecond();
        sqlx::query(
            "UPDATE admin_tokens SET revoked_at = ? WHERE admin_id = ? AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(admin_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn set_admin_budget(
        &mut self,
        admin_id: &str,
        model_allowed: bool,
        tokens_per_day: Option<u64>,
        tokens_per_month: Option<u64>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE admins SET model_allowed = ?, tokens_per_day = ?, tokens_per_month = ? WHERE id = ?",
        )
        .bind(model_allowed)
        .bind(tokens_per_day.map(signed))
        .bind(tokens_per_month.map(signed))
        .bind(admin_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn set_admin_password(&mut self, admin_id: &str, phc: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE admins SET password_hash = ? WHERE id = ?")
            .bind(phc)
            .bind(admin_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn insert_admin_token(
        &mut self,
        admin_id: &str,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let now = now.as_millisecond();
        sqlx::query(
            "INSERT INTO admin_tokens (token_id, admin_id, secret_hash, created_at) VALUES (?, ?, ?, ?)",
        )
        .bind(token_id)
        .bind(admin_id)
        .bind(&secret_hash.0[..])
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn insert_peer(&mut self, peer: &PeerRecord) -> Result<(), StoreError> {
        let similar: Option<String> =
            sqlx::query_scalar("SELECT name FROM peers WHERE lower(name) = lower(?) LIMIT 1")
                .bind(&peer.name)
                .fetch_optional(&mut *self.tx)
                .await?;
        match similar {
            Some(existing) if existing == peer.name => {
                return Err(StoreError::DuplicatePeer(existing));
            }
            Some(existing) => return Err(StoreError::SimilarPeer(existing)),
            None => {}
        }
        let inserted = sqlx::query(
            "INSERT INTO peers (id, name, status, rate_per_minute, created_at, owner_id, expires_at, max_streams, tokens_per_day) \
             VALUES (?, ?, 'active', ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(peer.id.as_str())
        .bind(&peer.name)
        .bind(i64::from(peer.rate_per_minute))
        .bind(peer.created_at.as_millisecond())
        .bind(&peer.owner_id)
        .bind(peer.expires_at.map(Timestamp::as_millisecond))
        .bind(peer.max_streams.map(i64::from))
        .bind(peer.tokens_per_day.map(signed))
        .execute(&mut *self.tx)
        .await?;
        if inserted.rows_affected() == 0 {
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
        let now = now.as_millisecond();
        sqlx::query(
            "INSERT INTO credentials (token_id, peer_id, secret_hash, created_at, kind) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(token_id)
        .bind(peer_id.as_str())
        .bind(&secret_hash.0[..])
        .bind(now)
        .bind(kind.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn revoke_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: Option<CredentialKind>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        revoke_credentials(&mut self.tx, peer_id, kind, now).await
    }

    async fn expire_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: CredentialKind,
        until: Timestamp,
    ) -> Result<(), StoreError> {
        let until = until.as_millisecond();
        sqlx::query(
            "UPDATE credentials SET expires_at = min(coalesce(expires_at, ?), ?) \
             WHERE peer_id = ? AND kind = ? AND revoked_at IS NULL",
        )
        .bind(until)
        .bind(until)
        .bind(peer_id.as_str())
        .bind(kind.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn revoke_peer(&mut self, peer_id: &PeerId, now: Timestamp) -> Result<(), StoreError> {
        // The password goes too: reinstating the peer must not bring it back.
        sqlx::query("UPDATE peers SET status = 'revoked', password_hash = NULL WHERE id = ?")
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        revoke_credentials(&mut self.tx, peer_id, None, now).await
    }

    async fn reinstate_peer(&mut self, peer_id: &PeerId) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET status = 'active' WHERE id = ?")
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_rate(&mut self, peer_id: &PeerId, rate: u32) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET rate_per_minute = ? WHERE id = ?")
            .bind(i64::from(rate))
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_budget(
        &mut self,
        peer_id: &PeerId,
        tokens_per_day: Option<u64>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET tokens_per_day = ? WHERE id = ?")
            .bind(tokens_per_day.map(signed))
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_streams(
        &mut self,
        peer_id: &PeerId,
        max_streams: Option<u32>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET max_streams = ? WHERE id = ?")
            .bind(max_streams.map(i64::from))
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_trace_trust(
        &mut self,
        peer_id: &PeerId,
        trusted: bool,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET trusts_trace = ? WHERE id = ?")
            .bind(trusted)
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_operations(
        &mut self,
        peer_id: &PeerId,
        operations: Option<crate::protocol::operations::OperationSet>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET operations = ? WHERE id = ?")
            .bind(operations.map(crate::protocol::operations::OperationSet::to_text))
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_peer_expiry(
        &mut self,
        peer_id: &PeerId,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let expires_at = expires_at.map(Timestamp::as_millisecond);
        sqlx::query("UPDATE peers SET expires_at = ? WHERE id = ?")
            .bind(expires_at)
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn bind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let now = now.as_millisecond();
        let holder: Option<String> = sqlx::query_scalar(
            "SELECT p.name FROM peer_identities i JOIN peers p ON p.id = i.peer_id \
             WHERE i.kind = ? AND i.issuer = ? AND i.subject = ?",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .fetch_optional(&mut *self.tx)
        .await?;
        if let Some(holder) = holder {
            return Err(StoreError::IdentityTaken(holder));
        }
        sqlx::query(
            "INSERT INTO peer_identities (kind, issuer, subject, peer_id, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .bind(peer_id.as_str())
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn bind_admin_identity(
        &mut self,
        admin_id: &str,
        (issuer, subject): (&str, &str),
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let now = now.as_millisecond();
        let holder: Option<String> = sqlx::query_scalar(
            "SELECT a.name FROM admin_identities i JOIN admins a ON a.id = i.admin_id \
             WHERE i.issuer = ? AND i.subject = ?",
        )
        .bind(issuer)
        .bind(subject)
        .fetch_optional(&mut *self.tx)
        .await?;
        if let Some(holder) = holder {
            return Err(StoreError::IdentityTaken(holder));
        }
        sqlx::query(
            "INSERT INTO admin_identities (issuer, subject, admin_id, created_at) VALUES (?, ?, ?, ?)",
        )
        .bind(issuer)
        .bind(subject)
        .bind(admin_id)
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    async fn unbind_admin_identity(
        &mut self,
        admin_id: &str,
        (issuer, subject): (&str, &str),
    ) -> Result<bool, StoreError> {
        let deleted = sqlx::query(
            "DELETE FROM admin_identities WHERE issuer = ? AND subject = ? AND admin_id = ?",
        )
        .bind(issuer)
        .bind(subject)
        .bind(admin_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn unbind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
    ) -> Result<bool, StoreError> {
        let deleted = sqlx::query(
            "DELETE FROM peer_identities WHERE kind = ? AND issuer = ? AND subject = ? AND peer_id = ?",
        )
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .bind(peer_id.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn set_peer_password(&mut self, peer_id: &PeerId, phc: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET password_hash = ? WHERE id = ?")
            .bind(phc)
            .bind(peer_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn delete_conversation(
        &mut self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM contexts WHERE peer_id = ? AND context_id = ?")
            .bind(peer_id.as_str())
            .bind(context_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        for table in ["messages", "tasks"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE peer_id = ? AND context_id = ?"
            )))
            .bind(peer_id.as_str())
            .bind(context_id.as_str())
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(done.rows_affected() > 0)
    }
}

/// Appends an audit record inside a transaction.
pub(super) async fn insert_audit(
    tx: &mut SqliteConnection,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
    sqlx::query(INSERT_AUDIT)
        .bind(entry.at.as_millisecond())
        .bind(&entry.actor)
        .bind(entry.action.as_str())
        .bind(&entry.target)
        .bind(&entry.outcome)
        .bind(&entry.client)
        .bind(&entry.detail)
        .bind(&entry.owner_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// One audit record: `?1` time, `?2` actor, `?3` action, `?4` target, `?5` outcome, `?6`
/// client, `?7` detail, `?8` owner.
pub(super) const INSERT_AUDIT: &str = "INSERT INTO audit (at, actor, action, target, outcome, \
     client, detail, owner_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Marks a peer's live credentials (of one kind, or all) revoked; the rows stay for audits.
async fn revoke_credentials(
    tx: &mut SqliteConnection,
    peer_id: &PeerId,
    kind: Option<CredentialKind>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let now = now.as_millisecond();
    sqlx::query(
        "UPDATE credentials SET revoked_at = ? \
         WHERE peer_id = ? AND revoked_at IS NULL AND (? IS NULL OR kind = ?)",
    )
    .bind(now)
    .bind(peer_id.as_str())
    .bind(kind.map(CredentialKind::as_str))
    .bind(kind.map(CredentialKind::as_str))
    .execute(&mut *tx)
    .await?;
    Ok(())
}
