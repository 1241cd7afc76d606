//! The records the store seams exchange: plain data, the same whatever engine holds them.
//!
//! None holds a secret in clear: credentials appear only as hashes, passwords only as PHC
//! strings, and only in the login records the authentication layers need.

use crate::clock::Timestamp;
use crate::protocol::ids::{ContextId, TaskId};
use crate::token::TokenSecretHash;

crate::protocol::ids::text_id! {
    /// A peer's stable id: the gateway's own name for a partner record, never a protocol id and
    /// never chosen by the partner. Everything a peer owns (tasks, push configs, streams, turns,
    /// limits) is keyed by it, so a task id or a context id cannot be passed in its place.
    /// Shared (`Arc<str>`), because every authenticated request carries it through the layers.
    PeerId(std::sync::Arc<str>)
}

crate::protocol::ids::text_id! {
    /// An administrator's stable id (`adm_…`): what peers, budgets, usage and audit records
    /// belong to; never a name (which may be reused) nor a peer's id. Shared (`Arc<str>`),
    /// because every authenticated request carries its peer's owner through the layers.
    AdminId(std::sync::Arc<str>)
}

crate::protocol::ids::text_id! {
    /// A push-notification config's id within its task (the peer's, or one the gateway chose).
    PushConfigId(String)
}

/// An enum whose values are stored and shown by name: each variant with its name, once; the
/// type gets `as_str`, `from_name` (`None` for a name this release does not know) and
/// `Display`.
macro_rules! stored_names {
    ($(#[$meta:meta])* pub enum $ty:ident {
        $($(#[$vmeta:meta])* $variant:ident => $name:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $variant,)+
        }

        impl $ty {
            /// The stored and shown name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }

            /// The value with this name, if this release knows it.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

stored_names! {
    /// How a peer identity is proven (a binding's kind).
    #[non_exhaustive]
    pub enum IdentityKind {
        /// An identity provider's access token: `issuer` is the policy's issuer name, `subject` the
        /// token's `client_id` (else `sub`).
        Token => "token",
        /// A client certificate's URI or DNS subject alternative name (`issuer` is empty).
        CertificateSan => "certificate_san",
        /// A client certificate's SHA-256, lowercase hex (`issuer` is empty).
        CertificateSha256 => "certificate_sha256",
    }
}

/// An identity bound to a peer: one identity names at most one peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PeerIdentity {
    /// How it is proven.
    pub kind: IdentityKind,
    /// The issuer's name in the policy (empty for certificates).
    pub issuer: String,
    /// The subject, SAN or fingerprint.
    pub subject: String,
}

impl PeerIdentity {
    /// A provider's subject: the token's `client_id`, else its `sub`, from the issuer the
    /// policy names `issuer`. Refuses an issuer name or subject that could never match.
    pub fn token(issuer: &str, subject: &str) -> Result<Self, String> {
        if !(1..=64).contains(&issuer.len())
            || !issuer
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err("the issuer is named as in [[auth.issuers]]: 1-64 of letters, digits, '.', '_' and '-'".to_owned());
        }
        Ok(Self {
            kind: IdentityKind::Token,
            issuer: issuer.to_owned(),
            subject: checked_text(subject, "the subject")?,
        })
    }

    /// A client certificate's URI or DNS subject alternative name, compared exactly.
    pub fn certificate_san(san: &str) -> Result<Self, String> {
        Ok(Self {
            kind: IdentityKind::CertificateSan,
            issuer: String::new(),
            subject: checked_text(san, "the subject alternative name")?,
        })
    }

    /// A client certificate's SHA-256 (of its DER), as 64 hex digits (any case, `:` allowed).
    pub fn certificate_sha256(hex: &str) -> Result<Self, String> {
        let digits: String = hex.chars().filter(|c| *c != ':').collect();
        if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("a certificate's SHA-256 is 64 hex digits".to_owned());
        }
        Ok(Self {
            kind: IdentityKind::CertificateSha256,
            issuer: String::new(),
            subject: digits.to_ascii_lowercase(),
        })
    }

    /// The identity exactly one of its forms names: an issuer with a subject, a SAN, or a
    /// fingerprint, as the command line and the admin API take them; `None` when not exactly
    /// one form is given (each caller names the forms in its own words).
    pub fn one_of(
        issuer: Option<&str>,
        subject: Option<&str>,
        san: Option<&str>,
        sha256: Option<&str>,
    ) -> Option<Result<Self, String>> {
        match (issuer, subject, san, sha256) {
            (Some(issuer), Some(subject), None, None) => Some(Self::token(issuer, subject)),
            (None, None, Some(san), None) => Some(Self::certificate_san(san)),
            (None, None, None, Some(hex)) => Some(Self::certificate_sha256(hex)),
            _ => None,
        }
    }

    /// How lists and audit records show it.
    pub fn describe(&self) -> String {
        match self.kind {
            IdentityKind::Token => format!("token {}:{}", self.issuer, self.subject),
            IdentityKind::CertificateSan => format!("certificate SAN {}", self.subject),
            IdentityKind::CertificateSha256 => format!("certificate SHA-256 {}", self.subject),
        }
    }
}

/// `text` if it is 1 to 512 bytes without control characters (a NUL could make two readers
/// see two names).
fn checked_text(text: &str, what: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 512 || text.chars().any(char::is_control) {
        return Err(format!(
            "{what} must be 1 to 512 bytes without control characters"
        ));
    }
    Ok(text.to_owned())
}

/// A peer as the administrator sees it. Never holds a secret.
#[derive(Debug, Clone)]
pub struct PeerRecord {
    /// Stable id.
    pub id: PeerId,
    /// Unique name chosen by the administrator.
    pub name: String,
    /// Whether it is let in.
    pub status: PeerStatus,
    /// Requests per minute.
    pub rate_per_minute: u32,
    /// Streams it may hold open at once; `None` for the policy's `limits.streams_per_peer`.
    pub max_streams: Option<u32>,
    /// Its own daily token budget, besides its owner's; `None` for none of its own.
    pub tokens_per_day: Option<u64>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last authenticated request (updated at most once a minute).
    pub last_used_at: Option<Timestamp>,
    /// The administrator the peer acts for.
    pub owner_id: AdminId,
    /// That administrator's name.
    pub owner_name: String,
    /// When the peer stops being let in; `None` for never.
    pub expires_at: Option<Timestamp>,
    /// Its own trace context is continued, not only linked to (`peergate peer trace`).
    pub trusts_trace: bool,
    /// The operations it may call; `None`: every one the policy offers.
    pub operations: Option<crate::protocol::operations::OperationSet>,
}

impl PeerRecord {
    /// How the peer stands at `now`: `revoked`, `expired` (active, but past its expiry: no
    /// credential of it is let in), or `active`.
    pub fn standing(&self, now: Timestamp) -> &'static str {
        match self.status {
            PeerStatus::Revoked => "revoked",
            PeerStatus::Active if self.expires_at.is_some_and(|at| at <= now) => "expired",
            PeerStatus::Active => "active",
        }
    }
}

/// What the authentication layer needs to decide about a token id.
#[derive(Debug, Clone)]
pub struct CredentialRecord {
    /// The peer as it signs in with this credential: `active` false once the credential or
    /// its peer is revoked; `valid_until` the credential's end (a rotation's grace period or
    /// the peer's expiry, whichever comes first); no password.
    pub login: PeerLogin,
    /// Hash of the secret.
    pub secret_hash: TokenSecretHash,
}

/// What Basic authentication needs to know about a peer name.
#[derive(Debug, Clone)]
pub struct PeerLogin {
    /// The peer.
    pub peer_id: PeerId,
    /// Its name.
    pub peer_name: String,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once revoked.
    pub active: bool,
    /// The peer's quota.
    pub rate_per_minute: u32,
    /// The peer's own cap on open streams, if it has one.
    pub max_streams: Option<u32>,
    /// The peer's own trace context is continued.
    pub trusts_trace: bool,
    /// The operations it may call; `None`: every one the policy offers.
    pub operations: Option<crate::protocol::operations::OperationSet>,
    /// The administrator the peer acts for.
    pub owner_id: AdminId,
    /// When the peer expires.
    pub valid_until: Option<Timestamp>,
}

/// One message of a conversation, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationMessage {
    /// `user` (the peer) or `agent` (the model).
    pub role: ConversationRole,
    /// The text.
    pub text: String,
    /// Every part, as the conversation keeps it: a JSON array, as text (written as it is);
    /// `None` in the history a model reads, which is the text.
    pub parts: Option<String>,
}

stored_names! {
    /// Who wrote a conversation message.
    pub enum ConversationRole {
        /// The partner agent.
        Peer => "peer",
        /// The model behind peergate.
        Agent => "agent",
        /// An answer the content guard withheld, kept as the operator's evidence
        /// (`content_guard.keep_denied_answers`): never read back into a prompt.
        Withheld => "withheld",
    }
}

/// A finished exchange: the task as served and the conversation messages it adds.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Task id.
    pub task_id: TaskId,
    /// Owning peer.
    pub peer_id: PeerId,
    /// Conversation.
    pub context_id: ContextId,
    /// The state it is stored in.
    pub state: crate::protocol::types::TaskState,
    /// The task as served, JSON.
    pub task_json: String,
    /// Now.
    pub now: Timestamp,
    /// When `GetTask` stops finding it.
    pub expires_at: Timestamp,
    /// The conversation messages this exchange adds (empty when the backend failed).
    pub messages: Vec<ConversationMessage>,
    /// Model tokens spent, counted against the owner's budget.
    pub usage: Option<ExchangeUsage>,
    /// A record for the audit log (a refusal by quota).
    pub audit: Option<AuditEntry>,
    /// The instance answering the task (see [`crate::shared::ownership`]).
    pub instance: Option<std::sync::Arc<str>>,
    /// Queue this state for the task's push-notification configs, as `{"task": …}`
    /// (`capabilities.push_notifications`), in the same transaction.
    pub notify: bool,
    /// A config sent along with the message (`taskPushNotificationConfig`), stored before the
    /// state is queued, so it hears this state too.
    pub push_config: Option<PushConfigRecord>,
    /// The id an agent behind the door gave the task, once it answered.
    pub upstream_task_id: Option<String>,
    /// The receipt of the final state, stored with it and queued for the answer log (also when
    /// a sweep already failed the task and the state is not kept: the receipt left with the
    /// answer).
    pub receipt: Option<IssuedReceipt>,
    /// With a working state: what the task's receipt will state of its call (JSON), kept so a
    /// task failed without its turn is sealed too. Cleared by any other state.
    pub sealing: Option<String>,
    /// The call's span as a W3C `traceparent`, when it was traced: a push delivery of this
    /// state links its own span to it.
    pub call_trace: Option<String>,
}

/// A receipt as issued: its id, the compact JWS, and the log's entry for it (SHA-256 of the
/// JWS, so the log reveals neither peer nor content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedReceipt {
    /// The receipt's `jti`.
    pub jti: String,
    /// The compact JWS.
    pub jws: String,
    /// The log's entry.
    pub entry: [u8; 32],
}

/// A receipt as the answer log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedReceipt {
    /// The receipt's `jti`.
    pub jti: String,
    /// Its place in the log; `None` until the integrator appended it.
    pub index: Option<u64>,
    /// The compact JWS.
    pub jws: String,
    /// The log's entry as stored.
    pub entry: Vec<u8>,
    /// When it was stored.
    pub created_at: Timestamp,
}

/// Which of a peer's tasks to list (`ListTasks`).
#[derive(Debug, Clone, Copy)]
pub struct TaskQuery<'a> {
    /// The peer whose tasks these are; no other peer's row is ever read.
    pub peer_id: &'a PeerId,
    /// Only this conversation's tasks.
    pub context_id: Option<&'a ContextId>,
    /// Only tasks in this state.
    pub state: Option<crate::protocol::types::TaskState>,
    /// Only tasks whose status changed at or after this.
    pub status_since: Option<Timestamp>,
    /// Only tasks after this one in the order (its status time and id): the page cursor.
    pub after: Option<(Timestamp, &'a TaskId)>,
    /// At most this many.
    pub limit: u32,
}

/// One page of listed tasks.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks, in order.
    pub tasks: Vec<ListedTask>,
    /// How many tasks match the filters, on every page.
    pub total: u64,
}

/// A task as a page of `ListTasks` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTask {
    /// When its status last changed (the page's order, and its cursor).
    pub status_at: Timestamp,
    /// Its id.
    pub id: TaskId,
    /// The task as stored, JSON.
    pub body: String,
}

/// A task still marked working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkingTask {
    /// Its id.
    pub id: TaskId,
    /// The peer it belongs to.
    pub peer_id: PeerId,
    /// The task as stored, JSON.
    pub body: String,
    /// The instance that was answering it (`None` before instances were recorded).
    pub instance: Option<String>,
    /// What its receipt states of its call ([`Exchange::sealing`]), when it gets one.
    pub sealing: Option<String>,
}

/// Tokens an exchange spent on the model, for the owner's usage.
#[derive(Debug, Clone)]
pub struct ExchangeUsage {
    /// The administrator charged.
    pub owner_id: AdminId,
    /// The UTC day it counts for.
    pub day: crate::clock::UtcDay,
    /// Tokens read and written.
    pub tokens: u64,
}

/// An administrator as listed. Never holds a secret.
#[derive(Debug, Clone)]
pub struct AdminRecord {
    /// Stable id.
    pub id: AdminId,
    /// Unique name, also the Basic login.
    pub name: String,
    /// Whether they may sign in.
    pub status: AdminStatus,
    /// Whether a password is set (the hash itself never leaves the store).
    pub has_password: bool,
    /// Whether this administrator's peers may use the model at all.
    pub model_allowed: bool,
    /// Tokens per UTC day; `None` takes the policy's default.
    pub tokens_per_day: Option<u64>,
    /// Tokens per UTC month; `None` takes the policy's default.
    pub tokens_per_month: Option<u64>,
    /// Creation time.
    pub created_at: Timestamp,
    /// An auditor: reads on the admin API, changes nothing.
    pub auditor: bool,
}

/// What signing in to the admin API needs about a name.
#[derive(Debug, Clone)]
pub struct AdminLogin {
    /// The administrator.
    pub id: AdminId,
    /// Its name.
    pub name: String,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once disabled.
    pub active: bool,
    /// An auditor: reads on the admin API, changes nothing.
    pub auditor: bool,
}

/// One record for the audit log. Holds no secret by construction: the service layer builds
/// every field from names, ids and numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// When.
    pub at: Timestamp,
    /// Who.
    pub actor: AuditActor,
    /// What happened.
    pub action: AuditAction,
    /// On what.
    pub target: AuditTarget,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// The client address, or `local` for the command line.
    pub client: String,
    /// Non-secret particulars (a new quota, a grace period).
    pub detail: String,
    /// The administrator whose account the record belongs to, so each sees their own.
    pub owner_id: Option<AdminId>,
}

/// Who did what an audit record says; stored as `operator`, `admin:NAME`, `peer:NAME` or
/// `anonymous`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditActor {
    /// The operator: the command line, or a signal.
    Operator,
    /// An administrator, by name.
    Admin(String),
    /// A peer, by name.
    Peer(String),
    /// Nobody known (a failed sign-in).
    Anonymous,
    /// A form this release does not know (a newer release wrote it), shown as stored.
    Other(String),
}

/// What an audit record is about; stored as `peer:NAME`, `admin:NAME`, `admin:(unknown)`,
/// `policy` or `admin-api:OPERATION`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditTarget {
    /// A peer, by name.
    Peer(String),
    /// An administrator, by name (`None`: a name no administrator has, not written down).
    Admin(Option<String>),
    /// The policy.
    Policy,
    /// An admin API operation, by its OpenAPI id.
    AdminApi(String),
    /// A form this release does not know, shown as stored.
    Other(String),
}

/// How what an audit record says ended; stored as `ok`, `denied[: WHY]` or `refused[: WHY]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditOutcome {
    /// Done.
    Ok,
    /// Not allowed (empty: said no more).
    Denied(String),
    /// Refused as asked (a bad value, a conflict; empty: said no more).
    Refused(String),
    /// A form this release does not know, shown as stored.
    Other(String),
}

impl std::fmt::Display for AuditActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Operator => f.write_str("operator"),
            Self::Admin(name) => write!(f, "admin:{name}"),
            Self::Peer(name) => write!(f, "peer:{name}"),
            Self::Anonymous => f.write_str("anonymous"),
            Self::Other(text) => f.write_str(text),
        }
    }
}

impl AuditActor {
    /// The actor a stored form names (the form itself when this release does not know it).
    pub fn from_stored(text: &str) -> Self {
        match (text, text.split_once(':')) {
            ("operator", _) => Self::Operator,
            ("anonymous", _) => Self::Anonymous,
            (_, Some(("admin", name))) => Self::Admin(name.to_owned()),
            (_, Some(("peer", name))) => Self::Peer(name.to_owned()),
            _ => Self::Other(text.to_owned()),
        }
    }
}

impl std::fmt::Display for AuditTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Peer(name) => write!(f, "peer:{name}"),
            Self::Admin(Some(name)) => write!(f, "admin:{name}"),
            Self::Admin(None) => f.write_str("admin:(unknown)"),
            Self::Policy => f.write_str("policy"),
            Self::AdminApi(operation) => write!(f, "admin-api:{operation}"),
            Self::Other(text) => f.write_str(text),
        }
    }
}

impl AuditTarget {
    /// The target a stored form names (the form itself when this release does not know it).
    pub fn from_stored(text: &str) -> Self {
        match (text, text.split_once(':')) {
            ("policy", _) => Self::Policy,
            (_, Some(("admin", "(unknown)"))) => Self::Admin(None),
            (_, Some(("admin", name))) => Self::Admin(Some(name.to_owned())),
            (_, Some(("peer", name))) => Self::Peer(name.to_owned()),
            (_, Some(("admin-api", operation))) => Self::AdminApi(operation.to_owned()),
            _ => Self::Other(text.to_owned()),
        }
    }
}

impl std::fmt::Display for AuditOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (word, why) = match self {
            Self::Ok => return f.write_str("ok"),
            Self::Other(text) => return f.write_str(text),
            Self::Denied(why) => ("denied", why),
            Self::Refused(why) => ("refused", why),
        };
        match why.is_empty() {
            true => f.write_str(word),
            false => write!(f, "{word}: {why}"),
        }
    }
}

impl AuditOutcome {
    /// The outcome a stored form names (the form itself when this release does not know it).
    pub fn from_stored(text: &str) -> Self {
        let (word, why) = text.split_once(": ").unwrap_or((text, ""));
        match word {
            "ok" if why.is_empty() => Self::Ok,
            "denied" => Self::Denied(why.to_owned()),
            "refused" => Self::Refused(why.to_owned()),
            _ => Self::Other(text.to_owned()),
        }
    }
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
    /// First message.
    pub created_at: Timestamp,
    /// Last message.
    pub updated_at: Timestamp,
    /// Messages in it.
    pub messages: i64,
}

/// Which conversations to list: filters, and where a page starts.
#[derive(Debug, Clone, Default)]
pub struct ConversationQuery {
    /// Only this administrator's peers' (`None`: everyone's, for the operator).
    pub owner_id: Option<AdminId>,
    /// Only this peer's (by name).
    pub peer: Option<String>,
    /// Last message at or after this time.
    pub since: Option<Timestamp>,
    /// Last message before this time.
    pub until: Option<Timestamp>,
    /// Only what comes after this row in the listing's order (the last row of a page).
    pub after: Option<ConversationCursor>,
    /// At most this many.
    pub limit: u32,
}

/// A row of the conversations' listing, most recent first, then by peer and context: where
/// the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationCursor {
    /// Its last message.
    pub updated_at: Timestamp,
    /// Its peer's name.
    pub peer_name: String,
    /// Its `contextId`.
    pub context_id: String,
}

impl ConversationCursor {
    /// Where the page after `last` starts.
    pub fn after(last: &ConversationSummary) -> Self {
        Self {
            updated_at: last.updated_at,
            peer_name: last.peer_name.clone(),
            context_id: last.context_id.clone(),
        }
    }

    /// The cursor as the admin API and the command line hand it out: opaque, URL-safe.
    pub fn to_text(&self) -> String {
        use base64::Engine as _;
        let text = format!(
            "{}\n{}\n{}",
            self.updated_at.as_millisecond(),
            self.peer_name,
            self.context_id
        );
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    /// A cursor [`Self::to_text`] gave; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let mut fields = text.splitn(3, '\n');
        let (at, peer, context) = (fields.next()?, fields.next()?, fields.next()?);
        Some(Self {
            updated_at: crate::clock::from_millis(at.parse().ok()?),
            peer_name: peer.to_owned(),
            context_id: context.to_owned(),
        })
    }
}

/// One message of a conversation as its owner reads it.
#[derive(Debug, Clone)]
pub struct ConversationEntry {
    /// `peer`, `agent`, or `withheld` (an answer the content guard withheld, kept as evidence).
    pub role: String,
    /// The text.
    pub text: String,
    /// Every part (a JSON array); `None` for a message kept before parts were.
    pub parts: Option<serde_json::Value>,
    /// The task it belongs to.
    pub task_id: String,
    /// When.
    pub at: Timestamp,
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

stored_names! {
    /// What an audit record says happened. Its name (`peer.created`, …) is what the log, the
    /// command line and the API show.
    #[non_exhaustive]
    pub enum AuditAction {
        /// An administrator was added.
        AdminCreated => "admin.created",
        /// An administrator was disabled.
        AdminDisabled => "admin.disabled",
        /// An administrator was enabled again.
        AdminEnabled => "admin.enabled",
        /// An administrator's API tokens were revoked.
        AdminTokensRevoked => "admin.tokens_revoked",
        /// An administrator's password was set.
        AdminPasswordSet => "admin.password_set",
        /// An administrator was made an auditor, or a full administrator again.
        AdminRoleChanged => "admin.role_changed",
        /// An administrator token was issued.
        AdminTokenIssued => "admin.token_issued",
        /// An administrator's model switch or budgets changed.
        AdminBudgetChanged => "admin.budget_changed",
        /// A sign-in to the admin API failed.
        AdminLoginFailed => "admin.login_failed",
        /// A peer was created.
        PeerCreated => "peer.created",
        /// A peer was read by someone who does not own it (refused).
        PeerRead => "peer.read",
        /// A peer's quota changed.
        PeerLimitChanged => "peer.limit_changed",
        /// A peer's expiry changed.
        PeerExpiryChanged => "peer.expiry_changed",
        /// A peer's message was refused by its owner's budget.
        PeerRefusedByQuota => "peer.refused_by_quota",
        /// A credential (token, key or password) was issued.
        CredentialIssued => "credential.issued",
        /// A peer's token was rotated.
        CredentialRotated => "credential.rotated",
        /// A peer's credentials were revoked.
        CredentialRevoked => "credential.revoked",
        /// A revoked peer was let in again, with a new token.
        PeerReinstated => "peer.reinstated",
        /// A conversation was read by someone who does not own it (refused).
        ConversationRead => "conversation.read",
        /// A task was read by someone who does not own its peer (refused).
        TaskRead => "task.read",
        /// A conversation was deleted.
        ConversationDeleted => "conversation.deleted",
        /// An identity (a provider's subject, a client certificate) was bound to a peer.
        PeerIdentityBound => "peer.identity_bound",
        /// An identity was unbound from a peer.
        PeerIdentityUnbound => "peer.identity_unbound",
        /// An identity provider's subject was bound to an administrator.
        AdminIdentityBound => "admin.identity_bound",
        /// It was unbound.
        AdminIdentityUnbound => "admin.identity_unbound",
        /// Whether a peer's own trace context is continued changed.
        PeerTraceTrustChanged => "peer.trace_trust_changed",
        /// The operations a peer may call changed.
        PeerOperationsChanged => "peer.operations_changed",
        /// The policy file was read again and what can change while serving was applied (or the
        /// file was refused, and the policy in force kept).
        PolicyReloaded => "policy.reloaded",
        /// The authorization policies denied a peer's call (the first a minute, per peer and
        /// operation).
        PeerDeniedByPolicy => "peer.denied_by_policy",
        /// The content guard denied a peer's message, or an answer to it (the first a minute,
        /// per peer, rule and direction).
        PeerContentDenied => "peer.content_denied",
        /// The authorization policies denied an administrator's request.
        AdminDeniedByPolicy => "admin.denied_by_policy",
    }
}

stored_names! {
    /// Whether a peer is let in.
    pub enum PeerStatus {
        /// Its credentials work (until they expire).
        Active => "active",
        /// Revoked for good: no credential works and none can be issued.
        Revoked => "revoked",
    }
}

stored_names! {
    /// Whether an administrator may sign in and their peers be answered.
    pub enum AdminStatus {
        /// Signs in; their peers are answered within budget.
        Active => "active",
        /// No sign-in, tokens revoked, their peers' messages rejected.
        Disabled => "disabled",
    }
}

/// One setting of a peer, as an account change writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerSetting {
    /// Requests per minute.
    Rate(u32),
    /// Its own daily token budget (`None`: none of its own).
    TokensPerDay(Option<u64>),
    /// Its own cap on open streams (`None`: the policy's).
    MaxStreams(Option<u32>),
    /// Whether its own trace context is continued (`true`) or only linked to.
    TrustsTrace(bool),
    /// The operations it may call (`None`: every one the policy offers).
    Operations(Option<crate::protocol::operations::OperationSet>),
    /// When it stops (`None`: never).
    ExpiresAt(Option<Timestamp>),
    /// Its Basic password, an Argon2id PHC string.
    PasswordHash(String),
}

/// One setting of an administrator, as an account change writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdminSetting {
    /// Whether they may sign in and their peers be answered.
    Status(AdminStatus),
    /// An auditor (reads only) or a full administrator.
    Auditor(bool),
    /// Their model switch and budgets, together.
    Budget {
        /// Whether their peers may reach the model.
        model_allowed: bool,
        /// Tokens per UTC day (`None`: none).
        tokens_per_day: Option<u64>,
        /// Tokens per UTC month (`None`: the policy's).
        tokens_per_month: Option<u64>,
    },
    /// Their password, an Argon2id PHC string.
    PasswordHash(String),
}

/// A push-notification configuration of a task, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfigRecord {
    /// The task it belongs to.
    pub task_id: String,
    /// Its id, unique within the task.
    pub id: PushConfigId,
    /// The peer that owns the task; no other peer's call ever reads the row.
    pub peer_id: PeerId,
    /// Where deliveries go (checked when stored and again before each delivery).
    pub url: String,
    /// The token and credentials, encrypted (see [`crate::push::seal`]).
    pub sealed: String,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A delivery taken from the queue to be attempted.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    /// Queue row.
    pub id: i64,
    /// The task whose state changed.
    pub task_id: String,
    /// The configuration it is delivered under.
    pub config_id: PushConfigId,
    /// The peer whose task it is (deliveries in flight are capped per peer).
    pub peer_id: PeerId,
    /// Where it goes.
    pub url: String,
    /// The configuration's token and credentials, encrypted.
    pub sealed: String,
    /// The `StreamResponse` to POST.
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// Until when this claim holds; its outcome is recorded only while the row still
    /// carries this claim, so an instance whose claim lapsed cannot undo another's.
    pub claimed_until: Timestamp,
    /// The span of the call whose task this tells of (a `traceparent`), when it was traced.
    pub call_trace: Option<String>,
}

/// A delivery given up after its last attempt, as an administrator sees it.
#[derive(Debug, Clone)]
pub struct FailedDelivery {
    /// Queue row.
    pub id: i64,
    /// The peer whose task it was.
    pub peer_name: String,
    /// The task.
    pub task_id: String,
    /// The configuration.
    pub config_id: PushConfigId,
    /// Where it was going.
    pub url: String,
    /// Attempts made.
    pub attempts: u32,
    /// Why the last attempt failed (never the receiver's body).
    pub last_error: String,
    /// When the state change was queued.
    pub created_at: Timestamp,
    /// When it was given up.
    pub failed_at: Timestamp,
}

/// What became of an attempted delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The receiver answered 2xx: the row goes.
    Delivered,
    /// Failed; try again at this time.
    RetryAt(Timestamp),
    /// Failed for the last time: kept as a dead letter.
    GiveUp,
    /// Not attempted (its peer had as many deliveries in flight as it may): due again at this
    /// time, no attempt counted.
    Deferred(Timestamp),
}

/// The push notification a stored task state becomes: the task as a `StreamResponse`.
pub(crate) fn task_notification(task_json: &str) -> String {
    format!("{{\"task\":{task_json}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_actors_targets_and_outcomes_read_back_as_written_and_unknown_forms_stay_whole() {
        for actor in [
            AuditActor::Operator,
            AuditActor::Admin("ada".into()),
            AuditActor::Peer("alice".into()),
            AuditActor::Anonymous,
            AuditActor::Other("robot:x".into()),
        ] {
            assert_eq!(AuditActor::from_stored(&actor.to_string()), actor);
        }
        for target in [
            AuditTarget::Peer("alice".into()),
            AuditTarget::Admin(Some("ops".into())),
            AuditTarget::Admin(None),
            AuditTarget::Policy,
            AuditTarget::AdminApi("set_limit".into()),
            AuditTarget::Other("fleet:7".into()),
        ] {
            assert_eq!(AuditTarget::from_stored(&target.to_string()), target);
        }
        for outcome in [
            AuditOutcome::Ok,
            AuditOutcome::Denied("no peer named \"x\"".into()),
            AuditOutcome::Refused(String::new()),
            AuditOutcome::Refused("rate: must be from 1".into()),
            AuditOutcome::Other("failed: disk".into()),
        ] {
            assert_eq!(AuditOutcome::from_stored(&outcome.to_string()), outcome);
        }
        assert_eq!(AuditOutcome::Refused(String::new()).to_string(), "refused");
    }

    #[test]
    fn an_identity_is_named_by_exactly_one_of_its_forms() {
        let hex = "ab".repeat(32);
        let token = PeerIdentity::one_of(Some("acme"), Some("app"), None, None);
        assert_eq!(token.unwrap().unwrap().describe(), "token acme:app");
        let san = PeerIdentity::one_of(None, None, Some("spiffe://a/b"), None);
        assert_eq!(
            san.unwrap().unwrap().describe(),
            "certificate SAN spiffe://a/b"
        );
        assert!(PeerIdentity::one_of(None, None, None, Some(&hex)).is_some());
        // None, half of one, or two of them: not one identity.
        for (issuer, subject, san, sha) in [
            (None, None, None, None),
            (Some("acme"), None, None, None),
            (Some("acme"), Some("app"), Some("spiffe://a/b"), None),
            (None, None, Some("spiffe://a/b"), Some(hex.as_str())),
        ] {
            assert!(PeerIdentity::one_of(issuer, subject, san, sha).is_none());
        }
        // A form that is given but wrong says what is wrong with it.
        let short = PeerIdentity::one_of(None, None, None, Some("abc"));
        assert!(short.unwrap().is_err());
    }
}
