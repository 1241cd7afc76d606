//! Administrators, their peers and credentials, usage, conversations, and the audit log.
//!
//! Changes go through [`WriteTx`], one write transaction, so a change and its audit record are
//! committed together or not at all. The audit table refuses `UPDATE` and `DELETE` in the
//! database itself (triggers), so no code path, this one included, can rewrite history.

use super::{BEGIN_WRITE, PEER_COLUMNS, PeerRecord, Store, StoreError, peer_record};
use crate::token::{CredentialKind, TokenSecretHash};
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};

/// An administrator as listed. Never holds a secret.
#[derive(Debug, Clone)]
pub struct AdminRecord {
    /// Stable id.
    pub id: String,
    /// Unique name, also the Basic login.
    pub name: String,
    /// `active` or `disabled`.
    pub status: String,
    /// Whether a password is set (the hash itself never leaves the store).
    pub has_password: bool,
    /// Whether this administrator's peers may use the model at all.
    pub model_allowed: bool,
    /// Tokens per UTC day; `None` takes the policy's default.
    pub tokens_per_day: Option<u64>,
    /// Tokens per UTC month; `None` takes the policy's default.
    pub tokens_per_month: Option<u64>,
    /// Creation time, epoch ms.
    pub created_at: i64,
}

/// What signing in to the admin API needs about a name.
#[derive(Debug, Clone)]
pub struct AdminLogin {
    /// The administrator.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once disabled.
    pub active: bool,
}

/// One record for the audit log. Holds no secret by construction: the service layer builds
/// every field from names, ids and numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// When, epoch ms.
    pub at: i64,
    /// Who: `admin:NAME`, `operator` (the command line) or `peer:NAME`.
    pub actor: String,
    /// What, e.g. `peer.created` or `credential.rotated`.
    pub action: String,
    /// On what, e.g. `peer:alice` or `admin:ops`.
    pub target: String,
    /// `ok`, or `denied: …` / `refused: …` / `failed: …`.
    pub outcome: String,
    /// The client address, or `local` for the command line.
    pub client: String,
    /// Non-secret particulars (a new quota, a grace period).
    pub detail: String,
    /// The administrator whose account the record belongs to, so each sees their own.
    pub owner_id: Option<String>,
}

/// A stored audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Position in the log.
    pub seq: i64,
    /// The record.
    pub entry: AuditEntry,
}

/// A conversation as listed.
#[derive(Debug, Clone)]
pub struct ConversationSummary {
    /// The peer that held it.
    pub peer_name: String,
    /// The peer's `contextId`.
    pub context_id: String,
    /// First message, epoch ms.
    pub created_at: i64,
    /// Last message, epoch ms.
    pub updated_at: i64,
    /// Messages in it.
    pub messages: i64,
}

/// One message of a conversation as its owner reads it.
#[derive(Debug, Clone)]
pub struct ConversationEntry {
    /// `peer` or `agent`.
    pub role: String,
    /// The text.
    pub text: String,
    /// The task it belongs to.
    pub task_id: String,
    /// When, epoch ms.
    pub at: i64,
}

/// Tokens a peer spent in a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUsage {
    /// The peer.
    pub peer_name: String,
    /// Model tokens.
    pub tokens: u64,
    /// Answered requests.
    pub requests: u64,
}

const ADMIN_COLUMNS: &str = "SELECT id, name, status, password_hash IS NOT NULL AS has_password, \
     model_allowed, tokens_per_day, tokens_per_month, created_at FROM admins";

fn admin_record(row: &sqlx::sqlite::SqliteRow) -> Result<AdminRecord, StoreError> {
    let count = |column: &str| -> Result<Option<u64>, StoreError> {
        Ok(row
            .try_get::<Option<i64>, _>(column)?
            .map(|n| u64::try_from(n).unwrap_or(0)))
    };
    Ok(AdminRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        has_password: row.try_get("has_password")?,
        model_allowed: row.try_get("model_allowed")?,
        tokens_per_day: count("tokens_per_day")?,
        tokens_per_month: count("tokens_per_month")?,
        created_at: row.try_get("created_at")?,
    })
}

fn audit_record(row: &sqlx::sqlite::SqliteRow) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        seq: row.try_get("seq")?,
        entry: AuditEntry {
            at: row.try_get("at")?,
            actor: row.try_get("actor")?,
            action: row.try_get("action")?,
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

impl Store {
    /// Starts a write transaction (taking the write lock at once).
    pub async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        Ok(WriteTx {
            tx: self.writer.begin_with(BEGIN_WRITE).await?,
        })
    }

    /// Appends one audit record on its own (for refusals, whose change was rolled back).
    pub async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        tx.audit(entry).await?;
        tx.commit().await
    }

    /// Every administrator, oldest first.
    pub async fn list_admins(&self) -> Result<Vec<AdminRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{ADMIN_COLUMNS} ORDER BY created_at, name"
        )))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(admin_record).collect()
    }

    /// The administrator with this id.
    pub async fn find_admin_by_id(&self, id: &str) -> Result<Option<AdminRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("{ADMIN_COLUMNS} WHERE id = ?")))
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(admin_record).transpose()
    }

    /// What signing in as `name` needs.
    pub async fn find_admin_login(&self, name: &str) -> Result<Option<AdminLogin>, StoreError> {
        let row = sqlx::query("SELECT id, name, password_hash, status FROM admins WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.reader)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(AdminLogin {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            password_hash: row.try_get("password_hash")?,
            active: row.try_get::<String, _>("status")? == "active",
        }))
    }

    /// The administrator token with this id: (administrator, hash, usable).
    pub async fn find_admin_token(
        &self,
        token_id: &str,
    ) -> Result<Option<(AdminLogin, TokenSecretHash)>, StoreError> {
        let row = sqlx::query(
            "SELECT a.id, a.name, a.status, t.secret_hash, t.revoked_at FROM admin_tokens t \
             JOIN admins a ON a.id = t.admin_id WHERE t.token_id = ?",
        )
        .bind(token_id)
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let hash: Vec<u8> = row.try_get("secret_hash")?;
        let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) else {
            return Ok(None);
        };
        let revoked: Option<i64> = row.try_get("revoked_at")?;
        Ok(Some((
            AdminLogin {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                password_hash: None,
                active: revoked.is_none() && row.try_get::<String, _>("status")? == "active",
            },
            TokenSecretHash(hash),
        )))
    }

    /// The peer named `name`.
    pub async fn find_peer(&self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE p.name = ?"
        )))
        .bind(name)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(peer_record).transpose()
    }

    /// Tokens an administrator spent on days starting with `period` (`YYYY-MM-DD` for a day,
    /// `YYYY-MM` for a month).
    pub async fn tokens_spent(&self, admin_id: &str, period: &str) -> Result<u64, StoreError> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT SUM(tokens) FROM usage WHERE admin_id = ? AND substr(day, 1, length(?)) = ?",
        )
        .bind(admin_id)
        .bind(period)
        .bind(period)
        .fetch_one(&self.reader)
        .await?;
        Ok(u64::try_from(total.unwrap_or(0)).unwrap_or(0))
    }

    /// Tokens and requests per peer of an administrator in `period`.
    pub async fn usage_by_peer(
        &self,
        admin_id: &str,
        period: &str,
    ) -> Result<Vec<PeerUsage>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.name, SUM(u.tokens) AS tokens, SUM(u.requests) AS requests FROM usage u \
             JOIN peers p ON p.id = u.peer_id \
             WHERE u.admin_id = ? AND substr(u.day, 1, length(?)) = ? GROUP BY p.name ORDER BY p.name",
        )
        .bind(admin_id)
        .bind(period)
        .bind(period)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PeerUsage {
                    peer_name: row.try_get("name")?,
                    tokens: u64::try_from(row.try_get::<i64, _>("tokens")?).unwrap_or(0),
                    requests: u64::try_from(row.try_get::<i64, _>("requests")?).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Audit records at or after `since` (of one administrator's account, or all), oldest first.
    pub async fn audit_since(
        &self,
        since: i64,
        owner_id: Option<&str>,
    ) -> Result<Vec<AuditRecord>, StoreError> {
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

    /// The conversations of an administrator's peers, most recent first.
    pub async fn conversations(
        &self,
        owner_id: &str,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.name, c.context_id, c.created_at, c.updated_at, \
             (SELECT COUNT(*) FROM messages m WHERE m.peer_id = c.peer_id AND m.context_id = c.context_id) AS messages \
             FROM contexts c JOIN peers p ON p.id = c.peer_id WHERE p.owner_id = ? \
             ORDER BY c.updated_at DESC, c.context_id",
        )
        .bind(owner_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ConversationSummary {
                    peer_name: row.try_get("name")?,
                    context_id: row.try_get("context_id")?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                    messages: row.try_get("messages")?,
                })
            })
            .collect()
    }

    /// Every message of one conversation, oldest first; `None` when there is no such
    /// conversation.
    pub async fn conversation(
        &self,
        peer_id: &str,
        context_id: &str,
    ) -> Result<Option<Vec<ConversationEntry>>, StoreError> {
        let exists = sqlx::query("SELECT 1 FROM contexts WHERE peer_id = ? AND context_id = ?")
            .bind(peer_id)
            .bind(context_id)
            .fetch_optional(&self.reader)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT role, body, task_id, created_at FROM messages \
             WHERE peer_id = ? AND context_id = ? ORDER BY seq",
        )
        .bind(peer_id)
        .bind(context_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ConversationEntry {
                    role: row.try_get("role")?,
                    text: row.try_get("body")?,
                    task_id: row.try_get("task_id")?,
                    at: row.try_get("created_at")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map(Some)
    }
}

/// One write transaction. Dropped without [`WriteTx::commit`], it rolls back.
pub struct WriteTx {
    tx: Transaction<'static, Sqlite>,
}

impl std::fmt::Debug for WriteTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteTx")
    }
}

impl WriteTx {
    /// Commits everything written through this transaction.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }

    /// Appends an audit record.
    pub async fn audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError> {
        insert_audit(&mut self.tx, entry).await
    }

    /// The administrator named `name`, read under the write lock.
    pub async fn admin(&mut self, name: &str) -> Result<Option<AdminRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{ADMIN_COLUMNS} WHERE name = ?"
        )))
        .bind(name)
        .fetch_optional(&mut *self.tx)
        .await?;
        row.as_ref().map(admin_record).transpose()
    }

    /// The peer named `name`, read under the write lock.
    pub async fn peer(&mut self, name: &str) -> Result<Option<PeerRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{PEER_COLUMNS} WHERE p.name = ?"
        )))
        .bind(name)
        .fetch_optional(&mut *self.tx)
        .await?;
        row.as_ref().map(peer_record).transpose()
    }

    /// Adds an administrator.
    pub async fn insert_admin(
        &mut self,
        admin: &AdminRecord,
        password_hash: Option<&str>,
    ) -> Result<(), StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO admins (id, name, password_hash, status, model_allowed, tokens_per_day, tokens_per_month, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&admin.id)
        .bind(&admin.name)
        .bind(password_hash)
        .bind(&admin.status)
        .bind(admin.model_allowed)
        .bind(admin.tokens_per_day.map(signed))
        .bind(admin.tokens_per_month.map(signed))
        .bind(admin.created_at)
        .execute(&mut *self.tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::DuplicateAdmin(admin.name.clone()));
        }
        Ok(())
    }

    /// Disables an administrator and revokes their administrator tokens.
    pub async fn disable_admin(&mut self, admin_id: &str, now: i64) -> Result<(), StoreError> {
        self.set_admin_status(admin_id, "disabled").await?;
        self.revoke_admin_tokens(admin_id, now).await
    }

    /// Sets an administrator's status (`active` or `disabled`).
    pub async fn set_admin_status(
        &mut self,
        admin_id: &str,
        status: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE admins SET status = ? WHERE id = ?")
            .bind(status)
            .bind(admin_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Revokes every live administrator token of an administrator.
    pub async fn revoke_admin_tokens(
        &mut self,
        admin_id: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE admin_tokens SET revoked_at = ? WHERE admin_id = ? AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(admin_id)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Sets an administrator's model switch and budgets.
    pub async fn set_admin_budget(
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

    /// Sets an administrator's password (an Argon2id PHC string).
    pub async fn set_admin_password(
        &mut self,
        admin_id: &str,
        phc: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE admins SET password_hash = ? WHERE id = ?")
            .bind(phc)
            .bind(admin_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Adds an administrator token.
    pub async fn insert_admin_token(
        &mut self,
        admin_id: &str,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: i64,
    ) -> Result<(), StoreError> {
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

    /// Adds a peer (without credentials).
    pub async fn insert_peer(&mut self, peer: &PeerRecord) -> Result<(), StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO peers (id, name, status, rate_per_minute, created_at, owner_id, expires_at) \
             VALUES (?, ?, 'active', ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&peer.id)
        .bind(&peer.name)
        .bind(i64::from(peer.rate_per_minute))
        .bind(peer.created_at)
        .bind(&peer.owner_id)
        .bind(peer.expires_at)
        .execute(&mut *self.tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::DuplicatePeer(peer.name.clone()));
        }
        Ok(())
    }

    /// Adds a credential to a peer.
    pub async fn insert_credential(
        &mut self,
        peer_id: &str,
        kind: CredentialKind,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO credentials (token_id, peer_id, secret_hash, created_at, kind) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(token_id)
        .bind(peer_id)
        .bind(&secret_hash.0[..])
        .bind(now)
        .bind(kind.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Revokes a peer's live credentials (of one kind, or all) now; the rows stay for audits.
    pub async fn revoke_credentials(
        &mut self,
        peer_id: &str,
        kind: Option<CredentialKind>,
        now: i64,
    ) -> Result<(), StoreError> {
        revoke_credentials(&mut self.tx, peer_id, kind, now).await
    }

    /// Lets a peer's live credentials of `kind` work until `until` (a rotation's grace period),
    /// or less where they already end sooner.
    pub async fn expire_credentials(
        &mut self,
        peer_id: &str,
        kind: CredentialKind,
        until: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE credentials SET expires_at = min(coalesce(expires_at, ?), ?) \
             WHERE peer_id = ? AND kind = ? AND revoked_at IS NULL",
        )
        .bind(until)
        .bind(until)
        .bind(peer_id)
        .bind(kind.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Marks a peer revoked.
    pub async fn revoke_peer(&mut self, peer_id: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET status = 'revoked' WHERE id = ?")
            .bind(peer_id)
            .execute(&mut *self.tx)
            .await?;
        revoke_credentials(&mut self.tx, peer_id, None, now).await
    }

    /// Sets a peer's quota.
    pub async fn set_peer_rate(&mut self, peer_id: &str, rate: u32) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET rate_per_minute = ? WHERE id = ?")
            .bind(i64::from(rate))
            .bind(peer_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Sets or clears a peer's expiry.
    pub async fn set_peer_expiry(
        &mut self,
        peer_id: &str,
        expires_at: Option<i64>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET expires_at = ? WHERE id = ?")
            .bind(expires_at)
            .bind(peer_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Sets a peer's Basic password (an Argon2id PHC string).
    pub async fn set_peer_password(&mut self, peer_id: &str, phc: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE peers SET password_hash = ? WHERE id = ?")
            .bind(phc)
            .bind(peer_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Deletes a conversation: its messages, and the tasks that carried its text. Returns
    /// whether it existed.
    pub async fn delete_conversation(
        &mut self,
        peer_id: &str,
        context_id: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM contexts WHERE peer_id = ? AND context_id = ?")
            .bind(peer_id)
            .bind(context_id)
            .execute(&mut *self.tx)
            .await?;
        for table in ["messages", "tasks"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE peer_id = ? AND context_id = ?"
            )))
            .bind(peer_id)
            .bind(context_id)
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
    sqlx::query(
        "INSERT INTO audit (at, actor, action, target, outcome, client, detail, owner_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(entry.at)
    .bind(&entry.actor)
    .bind(&entry.action)
    .bind(&entry.target)
    .bind(&entry.outcome)
    .bind(&entry.client)
    .bind(&entry.detail)
    .bind(&entry.owner_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Marks a peer's live credentials (of one kind, or all) revoked; the rows stay for audits.
async fn revoke_credentials(
    tx: &mut SqliteConnection,
    peer_id: &str,
    kind: Option<CredentialKind>,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE credentials SET revoked_at = ? \
         WHERE peer_id = ? AND revoked_at IS NULL AND (? IS NULL OR kind = ?)",
    )
    .bind(now)
    .bind(peer_id)
    .bind(kind.map(CredentialKind::as_str))
    .bind(kind.map(CredentialKind::as_str))
    .execute(&mut *tx)
    .await?;
    Ok(())
}
