//! The records the store seams exchange: plain data, the same whatever engine holds them.
//!
//! None holds a secret in clear: credentials appear only as hashes, passwords only as PHC
//! strings, and only in the login records the authentication layers need.

use crate::token::TokenSecretHash;

/// A peer as the administrator sees it. Never holds a secret.
#[derive(Debug, Clone)]
pub struct PeerRecord {
    /// Stable id.
    pub id: String,
    /// Unique name chosen by the administrator.
    pub name: String,
    /// `active` or `revoked`.
    pub status: String,
    /// Requests per minute.
    pub rate_per_minute: u32,
    /// Creation time, epoch ms.
    pub created_at: i64,
    /// Last authenticated request, epoch ms (updated at most once a minute).
    pub last_used_at: Option<i64>,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// That administrator's name.
    pub owner_name: String,
    /// When the peer stops being let in, epoch ms; `None` for never.
    pub expires_at: Option<i64>,
}

/// What the authentication layer needs to decide about a token id.
#[derive(Debug, Clone)]
pub struct CredentialRecord {
    /// The peer the credential belongs to.
    pub peer_id: String,
    /// That peer's name.
    pub peer_name: String,
    /// Hash of the secret.
    pub secret_hash: TokenSecretHash,
    /// False once the credential or its peer is revoked.
    pub active: bool,
    /// The peer's quota.
    pub rate_per_minute: u32,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// When the credential stops working (a rotation's grace period or the peer's expiry,
    /// whichever comes first), epoch ms.
    pub valid_until: Option<i64>,
}

/// What Basic authentication needs to know about a peer name.
#[derive(Debug, Clone)]
pub struct PeerLogin {
    /// The peer.
    pub peer_id: String,
    /// Its name.
    pub peer_name: String,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once revoked.
    pub active: bool,
    /// The peer's quota.
    pub rate_per_minute: u32,
    /// The administrator the peer acts for.
    pub owner_id: String,
    /// When the peer expires, epoch ms.
    pub valid_until: Option<i64>,
}

/// One message of a conversation, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationMessage {
    /// `user` (the peer) or `agent` (the model).
    pub role: ConversationRole,
    /// The text.
    pub text: String,
}

/// Who wrote a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationRole {
    /// The partner agent.
    Peer,
    /// The model behind peergate.
    Agent,
}

impl ConversationRole {
    /// The name the store uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Agent => "agent",
        }
    }
}

/// A finished exchange: the task as served and the conversation messages it adds.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Task id.
    pub task_id: String,
    /// Owning peer.
    pub peer_id: String,
    /// Conversation.
    pub context_id: String,
    /// Final state name.
    pub state: &'static str,
    /// The task as served, JSON.
    pub task_json: String,
    /// Now, epoch ms.
    pub now: i64,
    /// When `GetTask` stops finding it, epoch ms.
    pub expires_at: i64,
    /// The conversation messages this exchange adds (empty when the backend failed).
    pub messages: Vec<ConversationMessage>,
    /// Model tokens spent, counted against the owner's budget.
    pub usage: Option<ExchangeUsage>,
    /// A record for the audit log (a refusal by quota).
    pub audit: Option<AuditEntry>,
    /// The instance answering the task (see [`crate::shared::ownership`]).
    pub instance: Option<std::sync::Arc<str>>,
}

/// A task still marked working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkingTask {
    /// Its id.
    pub id: String,
    /// The task as stored, JSON.
    pub body: String,
    /// The instance that was answering it (`None` before instances were recorded).
    pub instance: Option<String>,
}

/// Tokens an exchange spent on the model, for the owner's usage.
#[derive(Debug, Clone)]
pub struct ExchangeUsage {
    /// The administrator charged.
    pub owner_id: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: std::sync::Arc<str>,
    /// Tokens read and written.
    pub tokens: u64,
}

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
