//! Rows as both engines return them, and the records they become: the one place a column is
//! read. Times are milliseconds since the epoch, counts and limits are `BIGINT` (SQLite's
//! `INTEGER`), flags are booleans (SQLite's 0 and 1).

use crate::clock::{Timestamp, from_millis};
use crate::store::records::{
    AdminLogin, AdminRecord, AdminStatus, AuditAction, AuditActor, AuditEntry, AuditOutcome,
    AuditRecord, AuditTarget, ConversationEntry, ConversationSummary, CredentialRecord,
    FailedDelivery, IdentityKind, PeerIdentity, PeerLogin, PeerRecord, PeerStatus, PeerUsage,
    PushConfigRecord, PushDelivery, WorkingTask,
};
use crate::store::{ListedTask, StoreError, operations_column};
use crate::token::TokenSecretHash;

/// A column holding one of a type's names (a status, an audit action); anything else is a
/// store this release cannot read.
fn named<T>(column: &str, text: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
    parse(text).ok_or_else(|| StoreError::Schema(format!("unknown {column} {text:?}")))
}

/// A stored count or limit; a negative one (never written) reads as 0.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A stored per-minute rate or stream cap; past `u32` reads as `u32::MAX`.
fn small(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A stored secret hash; `None` for one of the wrong length (it never matches).
fn secret_hash(bytes: &[u8]) -> Option<TokenSecretHash> {
    <[u8; 32]>::try_from(bytes).ok().map(TokenSecretHash)
}

fn millis(at: Option<i64>) -> Option<Timestamp> {
    at.map(from_millis)
}

/// The columns of [`AdminRow`], from `admins`.
macro_rules! admin_columns {
    () => {
        "SELECT id, name, status, password_hash IS NOT NULL AS has_password, model_allowed, \
         tokens_per_day, tokens_per_month, created_at, role FROM admins"
    };
}
pub(super) use admin_columns;

#[derive(sqlx::FromRow)]
pub(super) struct AdminRow {
    id: String,
    name: String,
    status: String,
    has_password: bool,
    model_allowed: bool,
    tokens_per_day: Option<i64>,
    tokens_per_month: Option<i64>,
    created_at: i64,
    role: String,
}

impl AdminRow {
    pub(super) fn record(self) -> Result<AdminRecord, StoreError> {
        Ok(AdminRecord {
            status: named("status", &self.status, AdminStatus::from_name)?,
            id: self.id.into(),
            name: self.name,
            has_password: self.has_password,
            model_allowed: self.model_allowed,
            tokens_per_day: self.tokens_per_day.map(count),
            tokens_per_month: self.tokens_per_month.map(count),
            created_at: from_millis(self.created_at),
            auditor: self.role == "auditor",
        })
    }
}

/// The columns of [`PeerRow`], from `peers p` joined with its owner `a`.
macro_rules! peer_columns {
    () => {
        "SELECT p.id, p.name, p.status, p.rate_per_minute, p.created_at, p.last_used_at, \
         p.owner_id, a.name AS owner_name, p.expires_at, p.max_streams, p.trusts_trace, \
         p.operations, p.tokens_per_day FROM peers p JOIN admins a ON a.id = p.owner_id"
    };
}
pub(super) use peer_columns;

#[derive(sqlx::FromRow)]
pub(super) struct PeerRow {
    id: String,
    name: String,
    status: String,
    rate_per_minute: i64,
    created_at: i64,
    last_used_at: Option<i64>,
    owner_id: String,
    owner_name: String,
    expires_at: Option<i64>,
    max_streams: Option<i64>,
    trusts_trace: bool,
    operations: Option<String>,
    tokens_per_day: Option<i64>,
}

impl PeerRow {
    pub(super) fn record(self) -> Result<PeerRecord, StoreError> {
        Ok(PeerRecord {
            status: named("status", &self.status, PeerStatus::from_name)?,
            id: self.id.into(),
            name: self.name,
            rate_per_minute: small(self.rate_per_minute),
            created_at: from_millis(self.created_at),
            last_used_at: millis(self.last_used_at),
            owner_id: self.owner_id.into(),
            owner_name: self.owner_name,
            expires_at: millis(self.expires_at),
            max_streams: self.max_streams.map(small),
            trusts_trace: self.trusts_trace,
            operations: operations_column(self.operations),
            tokens_per_day: self.tokens_per_day.map(count),
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AuditRow {
    seq: i64,
    at: i64,
    actor: String,
    action: String,
    target: String,
    outcome: String,
    client: String,
    detail: String,
    owner_id: Option<String>,
}

impl AuditRow {
    pub(super) fn record(self) -> Result<AuditRecord, StoreError> {
        Ok(AuditRecord {
            seq: self.seq,
            entry: AuditEntry {
                action: named("action", &self.action, AuditAction::from_name)?,
                at: from_millis(self.at),
                actor: AuditActor::from_stored(&self.actor),
                target: AuditTarget::from_stored(&self.target),
                outcome: AuditOutcome::from_stored(&self.outcome),
                client: self.client,
                detail: self.detail,
                owner_id: self.owner_id.map(Into::into),
            },
        })
    }
}

/// What authentication reads of a peer (a credential's, or the peer's own for Basic and bound
/// identities).
#[derive(sqlx::FromRow)]
pub(super) struct LoginRow {
    peer_id: String,
    name: String,
    status: String,
    rate_per_minute: i64,
    max_streams: Option<i64>,
    trusts_trace: bool,
    operations: Option<String>,
    owner_id: String,
    valid_until: Option<i64>,
    #[sqlx(default)]
    password_hash: Option<String>,
    /// A credential's: its hash and when it was revoked.
    #[sqlx(default)]
    secret_hash: Option<Vec<u8>>,
    #[sqlx(default)]
    revoked_at: Option<i64>,
}

impl LoginRow {
    pub(super) fn login(self) -> PeerLogin {
        PeerLogin {
            active: self.status == "active",
            peer_id: self.peer_id.into(),
            peer_name: self.name,
            password_hash: self.password_hash,
            rate_per_minute: small(self.rate_per_minute),
            max_streams: self.max_streams.map(small),
            trusts_trace: self.trusts_trace,
            operations: operations_column(self.operations),
            owner_id: self.owner_id.into(),
            valid_until: millis(self.valid_until),
        }
    }

    /// The credential; `None` when its stored hash cannot match.
    pub(super) fn credential(mut self) -> Option<CredentialRecord> {
        let secret_hash = secret_hash(self.secret_hash.take()?.as_slice())?;
        let revoked = self.revoked_at.is_some();
        let mut login = self.login();
        login.active &= !revoked;
        Some(CredentialRecord { login, secret_hash })
    }
}

/// What signing in as an administrator reads (with a token's hash and revocation when by
/// token).
#[derive(sqlx::FromRow)]
pub(super) struct AdminLoginRow {
    id: String,
    name: String,
    status: String,
    role: String,
    #[sqlx(default)]
    password_hash: Option<String>,
    #[sqlx(default)]
    secret_hash: Option<Vec<u8>>,
    #[sqlx(default)]
    revoked_at: Option<i64>,
}

impl AdminLoginRow {
    pub(super) fn login(self) -> AdminLogin {
        AdminLogin {
            active: self.revoked_at.is_none() && self.status == "active",
            auditor: self.role == "auditor",
            id: self.id.into(),
            name: self.name,
            password_hash: self.password_hash,
        }
    }

    /// The login and the token's hash; `None` when the hash cannot match.
    pub(super) fn with_token(mut self) -> Option<(AdminLogin, TokenSecretHash)> {
        let hash = secret_hash(self.secret_hash.take()?.as_slice())?;
        Some((self.login(), hash))
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct IdentityRow {
    peer_id: String,
    kind: String,
    issuer: String,
    subject: String,
}

impl IdentityRow {
    /// `None` for a kind a newer release wrote: not this release's to show.
    pub(super) fn identity(self) -> Option<(String, PeerIdentity)> {
        let kind = IdentityKind::from_name(&self.kind)?;
        Some((
            self.peer_id,
            PeerIdentity {
                kind,
                issuer: self.issuer,
                subject: self.subject,
            },
        ))
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SummaryRow {
    name: String,
    context_id: String,
    created_at: i64,
    updated_at: i64,
    messages: i64,
}

impl SummaryRow {
    pub(super) fn summary(self) -> ConversationSummary {
        ConversationSummary {
            peer_name: self.name,
            context_id: self.context_id,
            created_at: from_millis(self.created_at),
            updated_at: from_millis(self.updated_at),
            messages: self.messages,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct EntryRow {
    role: String,
    body: String,
    parts: Option<String>,
    task_id: String,
    created_at: i64,
}

impl EntryRow {
    pub(super) fn entry(self) -> ConversationEntry {
        ConversationEntry {
            role: self.role,
            text: self.body,
            parts: self
                .parts
                .and_then(|parts| serde_json::from_str(&parts).ok()),
            task_id: self.task_id,
            at: from_millis(self.created_at),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct UsageRow {
    name: String,
    tokens: i64,
    requests: i64,
}

impl UsageRow {
    pub(super) fn usage(self) -> PeerUsage {
        PeerUsage {
            peer_name: self.name,
            tokens: count(self.tokens),
            requests: count(self.requests),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct WorkingRow {
    id: String,
    peer_id: String,
    body: String,
    instance: Option<String>,
    sealing: Option<String>,
}

impl WorkingRow {
    pub(super) fn task(self) -> WorkingTask {
        WorkingTask {
            id: self.id.into(),
            peer_id: self.peer_id.into(),
            body: self.body,
            instance: self.instance,
            sealing: self.sealing,
        }
    }
}

/// A task as a page of `ListTasks` holds it.
#[derive(sqlx::FromRow)]
pub(super) struct ListedRow {
    status_at: i64,
    id: String,
    body: String,
}

impl ListedRow {
    pub(super) fn listed(self) -> ListedTask {
        ListedTask {
            status_at: from_millis(self.status_at),
            id: self.id.into(),
            body: self.body,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct PushConfigRow {
    task_id: String,
    id: String,
    peer_id: String,
    url: String,
    sealed: String,
    created_at: i64,
}

impl PushConfigRow {
    pub(super) fn config(self) -> PushConfigRecord {
        PushConfigRecord {
            task_id: self.task_id,
            id: self.id.into(),
            peer_id: self.peer_id.into(),
            url: self.url,
            sealed: self.sealed,
            created_at: from_millis(self.created_at),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct DeliveryRow {
    id: i64,
    task_id: String,
    config_id: String,
    peer_id: String,
    url: String,
    sealed: String,
    body: String,
    attempts: i64,
    call_trace: Option<String>,
}

impl DeliveryRow {
    /// The delivery, under the claim that took it.
    pub(super) fn delivery(self, claimed_until: Timestamp) -> PushDelivery {
        PushDelivery {
            id: self.id,
            task_id: self.task_id,
            config_id: self.config_id.into(),
            peer_id: self.peer_id.into(),
            url: self.url,
            sealed: self.sealed,
            body: self.body,
            attempts: u32::try_from(self.attempts).unwrap_or(0),
            claimed_until,
            call_trace: self.call_trace,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct FailedRow {
    id: i64,
    name: String,
    task_id: String,
    config_id: String,
    url: String,
    attempts: i64,
    last_error: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl FailedRow {
    pub(super) fn failed(self) -> FailedDelivery {
        FailedDelivery {
            id: self.id,
            peer_name: self.name,
            task_id: self.task_id,
            config_id: self.config_id.into(),
            url: self.url,
            attempts: u32::try_from(self.attempts).unwrap_or(0),
            last_error: self.last_error.unwrap_or_default(),
            created_at: from_millis(self.created_at),
            failed_at: from_millis(self.updated_at),
        }
    }
}

/// A stored hash of the answer log's tree.
#[derive(sqlx::FromRow)]
pub(super) struct HashRow {
    hash: Vec<u8>,
}

impl HashRow {
    /// `None` for a hash of the wrong length (never written).
    pub(super) fn hash(self) -> Option<crate::tlog::Hash> {
        self.hash.try_into().ok()
    }
}

/// A signed checkpoint of the answer log.
#[derive(sqlx::FromRow)]
pub(super) struct CheckpointRow {
    size: i64,
    note: String,
}

impl CheckpointRow {
    pub(super) fn checkpoint(self) -> (u64, String) {
        (count(self.size), self.note)
    }
}

/// The columns of a receipt in the answer log.
#[derive(sqlx::FromRow)]
pub(super) struct ReceiptRow {
    jti: String,
    log_index: Option<i64>,
    jws: String,
    entry: Vec<u8>,
    created_at: i64,
}

impl ReceiptRow {
    pub(super) fn receipt(self) -> crate::store::records::LoggedReceipt {
        crate::store::records::LoggedReceipt {
            jti: self.jti,
            index: self.log_index.map(count),
            jws: self.jws,
            entry: self.entry,
            created_at: from_millis(self.created_at),
        }
    }
}

/// A receipt waiting for the answer log: its id and entry.
#[derive(sqlx::FromRow)]
pub(super) struct PendingRow {
    jti: String,
    entry: Vec<u8>,
}

impl PendingRow {
    pub(super) fn entry(self) -> crate::store::PendingEntry {
        crate::store::PendingEntry {
            jti: self.jti,
            entry: self.entry,
        }
    }
}
