//! The store of record, as seams shaped by the code that uses them.
//!
//! Each consumer sees only the trait it needs:
//!
//! | seam | used by |
//! |---|---|
//! | [`CredentialStore`] | the authentication layers (peer and administrator logins) |
//! | [`TaskStore`] | the agent's turn, `GetTask`, the start-up and housekeeping sweeps |
//! | [`ConversationStore`] | administrators reading their peers' conversations |
//! | [`UsageStore`] | budgets and the usage report |
//! | [`AccountStore`] | the account service: every change with its audit record, in one transaction |
//! | [`DocumentStore`] | the served documents' `Last-Modified` across restarts |
//! | [`PushStore`] | push-notification configs and the durable delivery queue |
//! | [`LogStore`] | the answer log: receipts waiting, the tree's stored hashes, checkpoints |
//!
//! The records they exchange ([`records`]) are plain data, the same for every engine. The one
//! engine today is SQLite ([`sqlite`]); nothing outside this module names the database crate,
//! so a second engine is a new module that implements these traits, not edits to their users.
//! Card-signing keys are files named by the policy, not rows, so no seam holds them.

pub(crate) mod batch;
pub mod copy;
pub mod postgres;
pub mod records;
pub(crate) mod sql;
pub mod sqlite;

use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::TaskState;
pub use records::{
    AdminId, AdminLogin, AdminRecord, AdminSetting, AdminStatus, AuditAction, AuditActor,
    AuditEntry, AuditOutcome, AuditRecord, AuditTarget, ConversationCursor, ConversationEntry,
    ConversationMessage, ConversationQuery, ConversationRole, ConversationSummary,
    CredentialRecord, DeliveryOutcome, Exchange, ExchangeUsage, FailedDelivery, IdentityKind,
    IssuedReceipt, ListedTask, LoggedReceipt, PeerId, PeerIdentity, PeerLogin, PeerRecord,
    PeerSetting, PeerStatus, PeerUsage, PushConfigId, PushConfigRecord, PushDelivery, TaskPage,
    TaskQuery, WorkingTask,
};

use crate::clock::{Timestamp, UtcPeriod};
use crate::token::{CredentialKind, TokenSecretHash};
use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A peer with that name already exists.
    #[error("a peer named \"{0}\" already exists")]
    DuplicatePeer(String),
    /// A peer's name differs from this one only in case: the two would be taken for one
    /// partner in every list and log.
    #[error("a peer named \"{0}\" already exists; names that differ only in case are refused")]
    SimilarPeer(String),
    /// No peer has that name.
    #[error("no peer named \"{0}\"")]
    UnknownPeer(String),
    /// The peer was revoked and takes no new credentials.
    #[error("peer \"{0}\" is revoked")]
    RevokedPeer(String),
    /// An administrator with that name already exists.
    #[error("an administrator named \"{0}\" already exists")]
    DuplicateAdmin(String),
    /// The identity is already bound to a peer (named): one identity names one peer.
    #[error("that identity is already bound to peer \"{0}\"")]
    IdentityTaken(String),
    /// The data directory could not be prepared.
    #[error("cannot prepare the data directory: {0}")]
    DataDir(std::io::ErrorKind),
    /// The schema could not be brought up to date (a store from a newer release, or a
    /// migration that failed). Migrations that completed before the failure stay applied;
    /// the one that failed was rolled back.
    #[error("cannot bring the store's schema up to date: {0}")]
    Schema(String),
    /// The store URL is not one peergate can use. The URL is not echoed: it may hold a
    /// password.
    #[error("--store / PEERGATE_STORE_URL: {0}")]
    Url(&'static str),
    /// The PostgreSQL store did not answer at start-up. Names the host, port and database,
    /// never the user or password.
    #[error("cannot reach the PostgreSQL store at {location}: {reason}")]
    Unreachable {
        /// `host:port/database`.
        location: String,
        /// What the driver said (it names no password).
        reason: String,
    },
    /// The engine failed. Shown to the operator and logged; peers only ever see a request id.
    #[error("the store failed: {0}")]
    Engine(Box<dyn std::error::Error + Send + Sync>),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// The disk holding the store is full (or below the room it keeps for account changes):
    /// exchanges are refused until there is room again.
    #[error("the disk holding the store is full; free some space (the store resumes by itself)")]
    DiskFull,
    /// The store did not answer in time.
    #[error("the store did not answer in time")]
    TimedOut,
    /// Another running gateway already serves this store, and the engine cannot be shared.
    #[error(
        "this store is already served by another peergate process ({holder}); stop it first, or give this one another --data directory (the command line works beside a running server)"
    )]
    Served {
        /// The process holding it, as it wrote itself down (`pid N`).
        holder: String,
    },
    /// The shared store is served in the other way: alone by one instance without Redis, or
    /// together by instances with Redis. Mixing them would let a lone instance fail the
    /// others' turns and limit on its own.
    #[error("{0}")]
    ServedOtherwise(&'static str),
    /// The embedded store cannot be served by several instances.
    #[error(
        "the embedded SQLite store is served by one process; several instances need a PostgreSQL store (--store postgres://… or PEERGATE_STORE_URL)"
    )]
    Unshareable,
    /// A statement of a change failed earlier, so the change was rolled back whole: nothing of
    /// it is written, and it takes no more statements.
    #[error("the change was rolled back: one of its statements failed")]
    RolledBack,
    /// The task already has as many push-notification configs as the policy allows.
    #[error("the task already has {0} push notification configs (push.max_configs_per_task)")]
    TooManyPushConfigs(u32),
}

/// What the authentication layers read: credentials by token id, logins by name. Reads only,
/// plus last-use bookkeeping that never makes a request wait.
#[async_trait]
pub trait CredentialStore: Send + Sync + std::fmt::Debug {
    /// The peer credential with this token id, whatever its state.
    async fn find_credential(
        &self,
        kind: CredentialKind,
        token_id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError>;

    /// What Basic authentication needs about `name`, if such a peer exists.
    async fn find_peer_login(&self, name: &str) -> Result<Option<PeerLogin>, StoreError>;

    /// The peer an identity is bound to, as authentication needs it (`password_hash` empty).
    async fn find_bound_peer(
        &self,
        identity: &PeerIdentity,
    ) -> Result<Option<PeerLogin>, StoreError>;

    /// What signing in to the admin API as `name` needs.
    async fn find_admin_login(&self, name: &str) -> Result<Option<AdminLogin>, StoreError>;

    /// The administrator bound to `subject` at the identity provider named `issuer`.
    async fn find_bound_admin(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<AdminLogin>, StoreError>;

    /// The administrator token with this id: its administrator (active only if the token is
    /// live too) and the secret's hash.
    async fn find_admin_token(
        &self,
        token_id: &str,
    ) -> Result<Option<(AdminLogin, TokenSecretHash)>, StoreError>;

    /// Notes that a peer was seen at `now`. Returns at once: the engine writes it
    /// later, batched, and a failure costs only the timestamp.
    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp);

    /// The ids of every peer credential (tokens and API keys, revoked ones too).
    async fn credential_ids(&self) -> Result<Vec<String>, StoreError>;
}

/// The agent's tasks and the history of its contexts.
#[async_trait]
pub trait TaskStore: Send + Sync + std::fmt::Debug {
    /// The last `limit` messages of a peer's context, oldest first.
    async fn context_history(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
        limit: u32,
    ) -> Result<Vec<ConversationMessage>, StoreError>;

    /// Persists a task (working, or final with the conversation messages it adds) and returns
    /// once it is durable. Never reports an exchange saved before its commit.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError>;

    /// A task of this peer that has not expired, as JSON. Another peer's task is `None`,
    /// exactly like a task that never existed.
    async fn find_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        now: Timestamp,
    ) -> Result<Option<String>, StoreError>;

    /// The id an agent behind the door gave one of the peer's tasks, if it gave one.
    async fn upstream_task(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
    ) -> Result<Option<String>, StoreError>;

    /// Tasks still marked working (whose working state was stored before `created_before`, if
    /// given: a task continued after waiting for input counts from its continuation).
    async fn working_tasks(
        &self,
        created_before: Option<Timestamp>,
    ) -> Result<Vec<WorkingTask>, StoreError>;

    /// Replaces a working task with its final state, if it is still working; whether it was.
    /// The state's receipt, if it has one, is stored with it (for the task's peer) and queued
    /// for the answer log; not when the task was no longer working.
    async fn finish_working_task(
        &self,
        id: &TaskId,
        (state, body): (TaskState, &str),
        receipt: Option<(&PeerId, &IssuedReceipt)>,
        now: Timestamp,
    ) -> Result<bool, StoreError>;

    /// A page of a peer's tasks that have not expired, newest status first, then by id
    /// (descending), with how many match the filters in all.
    async fn list_tasks(
        &self,
        query: &TaskQuery<'_>,
        now: Timestamp,
    ) -> Result<TaskPage, StoreError>;

    /// Deletes tasks whose retention ended; returns how many.
    async fn delete_expired_tasks(&self, now: Timestamp) -> Result<u64, StoreError>;
}

/// Push-notification configurations and the durable queue of their deliveries.
///
/// A state stored with [`Exchange::notify`] (or by [`TaskStore::finish_working_task`]) queues
/// one delivery per config of its task in the same transaction, so a state that is durable is
/// also queued. A delivery is claimed for a while before it is attempted; a claim that lapses
/// (its instance died mid-attempt) makes it due again, so delivery is at-least-once. A config's
/// deliveries are claimed one at a time, oldest first, so they arrive in order.
#[async_trait]
pub trait PushStore: Send + Sync + std::fmt::Debug {
    /// Stores `config`, replacing one of the same task and id; refused with
    /// [`StoreError::TooManyPushConfigs`] when the task already has `max_per_task` others.
    async fn put_push_config(
        &self,
        config: &PushConfigRecord,
        max_per_task: u32,
    ) -> Result<(), StoreError>;

    /// One config of a peer's task.
    async fn push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &PushConfigId,
    ) -> Result<Option<PushConfigRecord>, StoreError>;

    /// A page of a peer's task's configs, by id, after `after`.
    async fn push_configs(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        after: Option<&PushConfigId>,
        limit: u32,
    ) -> Result<Vec<PushConfigRecord>, StoreError>;

    /// Deletes a config and its pending deliveries (nothing if there is none).
    async fn delete_push_config(
        &self,
        peer_id: &PeerId,
        task_id: &TaskId,
        id: &PushConfigId,
    ) -> Result<(), StoreError>;

    /// Claims at most `limit` due deliveries until `claim_until`: each the oldest
    /// pending one of its config.
    async fn claim_deliveries(
        &self,
        now: Timestamp,
        claim_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushDelivery>, StoreError>;

    /// Records an attempt's outcome (`error` says why it failed, when it did), if the row still
    /// carries the claim the attempt was made under.
    async fn record_delivery(
        &self,
        id: i64,
        claimed_until: Timestamp,
        outcome: DeliveryOutcome,
        error: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// Deliveries given up, newest first, of the peers of `owner_id` (every peer's for `None`).
    async fn failed_deliveries(
        &self,
        owner_id: Option<&AdminId>,
        limit: u32,
    ) -> Result<Vec<FailedDelivery>, StoreError>;
}

/// Conversations as their owning administrator reads them.
#[async_trait]
pub trait ConversationStore: Send + Sync + std::fmt::Debug {
    /// The conversations `query` asks for, most recent first (then by peer and context).
    async fn conversations(
        &self,
        query: &ConversationQuery,
    ) -> Result<Vec<ConversationSummary>, StoreError>;

    /// Every message of one conversation, oldest first; `None` when there is no such one.
    async fn conversation(
        &self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<Option<Vec<ConversationEntry>>, StoreError>;
}

/// Tokens spent, for budgets and the usage report.
#[async_trait]
pub trait UsageStore: Send + Sync + std::fmt::Debug {
    /// The administrator with this id (their switch and budgets).
    async fn find_admin_by_id(&self, id: &AdminId) -> Result<Option<AdminRecord>, StoreError>;

    /// Tokens an administrator spent in `period`.
    async fn tokens_spent(&self, admin_id: &AdminId, period: UtcPeriod) -> Result<u64, StoreError>;

    /// Tokens one peer spent in `period`, whoever owned it.
    async fn peer_tokens_spent(
        &self,
        peer_id: &PeerId,
        period: UtcPeriod,
    ) -> Result<u64, StoreError>;

    /// A peer's own daily token budget; `None` when it has none or is gone.
    async fn peer_tokens_per_day(&self, peer_id: &PeerId) -> Result<Option<u64>, StoreError>;

    /// Tokens and requests per peer of an administrator in `period`.
    async fn usage_by_peer(
        &self,
        admin_id: &AdminId,
        period: UtcPeriod,
    ) -> Result<Vec<PeerUsage>, StoreError>;
}

/// Administrators, peers and the audit log, as the account service changes and lists them.
#[async_trait]
pub trait AccountStore: Send + Sync + std::fmt::Debug {
    /// Starts a change: reads inside it see the state it will commit over, and no other
    /// change interleaves until it commits or is dropped.
    async fn begin_change(&self) -> Result<AccountChange, StoreError>;

    /// Appends one audit record on its own (for refusals, whose change was rolled back).
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;

    /// Every administrator, oldest first.
    async fn list_admins(&self) -> Result<Vec<AdminRecord>, StoreError>;

    /// Every peer (of one administrator, or all), oldest first.
    async fn list_peers(&self, owner_id: Option<&AdminId>) -> Result<Vec<PeerRecord>, StoreError>;

    /// The peer named `name`.
    async fn find_peer(&self, name: &str) -> Result<Option<PeerRecord>, StoreError>;

    /// Every identity bound to a peer, with the peer's id, oldest first.
    async fn list_identities(&self) -> Result<Vec<(String, PeerIdentity)>, StoreError>;

    /// The kinds of credential peergate issued that still open the door at `now`, each peer's
    /// once: (peer id, `token`, `api_key` or `password`), by peer id then kind.
    async fn credential_kinds(&self, now: Timestamp) -> Result<Vec<(String, String)>, StoreError>;

    /// Audit records at or after `since` (of one administrator's account, or all), oldest
    /// first.
    async fn audit_since(
        &self,
        since: Timestamp,
        owner_id: Option<&AdminId>,
    ) -> Result<Vec<AuditRecord>, StoreError>;
}

/// One change to accounts, committed with its audit record or not at all. Dropped without
/// [`AccountChanges::commit`], it rolls back.
pub type AccountChange = Box<dyn AccountChanges>;

/// What one account change can do. Reads see the change's own writes.
#[async_trait]
pub trait AccountChanges: Send + std::fmt::Debug {
    /// Commits everything written through this change.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
    /// Appends an audit record.
    async fn audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// The administrator named `name`.
    async fn admin(&mut self, name: &str) -> Result<Option<AdminRecord>, StoreError>;
    /// The peer named `name`.
    async fn peer(&mut self, name: &str) -> Result<Option<PeerRecord>, StoreError>;
    /// Adds an administrator; a taken name is [`StoreError::DuplicateAdmin`].
    async fn insert_admin(
        &mut self,
        admin: &AdminRecord,
        password_hash: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Writes one setting of an administrator.
    async fn set_admin(
        &mut self,
        admin_id: &AdminId,
        setting: &AdminSetting,
    ) -> Result<(), StoreError>;
    /// Revokes every live administrator token of an administrator.
    async fn revoke_admin_tokens(
        &mut self,
        admin_id: &AdminId,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Adds an administrator token.
    async fn insert_admin_token(
        &mut self,
        admin_id: &AdminId,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Adds a peer (without credentials); a taken name is [`StoreError::DuplicatePeer`].
    async fn insert_peer(&mut self, peer: &PeerRecord) -> Result<(), StoreError>;
    /// Adds a credential to a peer.
    async fn insert_credential(
        &mut self,
        peer_id: &PeerId,
        kind: CredentialKind,
        token_id: &str,
        secret_hash: &TokenSecretHash,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Revokes a peer's live credentials (of one kind, or all) now; the rows stay for audits.
    async fn revoke_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: Option<CredentialKind>,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Lets a peer's live credentials of `kind` work until `until` (a rotation's grace
    /// period), or less where they already end sooner.
    async fn expire_credentials(
        &mut self,
        peer_id: &PeerId,
        kind: CredentialKind,
        until: Timestamp,
    ) -> Result<(), StoreError>;
    /// Marks a peer revoked, with every credential it holds.
    async fn revoke_peer(&mut self, peer_id: &PeerId, now: Timestamp) -> Result<(), StoreError>;
    /// Marks a revoked peer active again. Its old credentials stay revoked.
    async fn reinstate_peer(&mut self, peer_id: &PeerId) -> Result<(), StoreError>;
    /// Writes one setting of a peer.
    async fn set_peer(&mut self, peer_id: &PeerId, setting: &PeerSetting)
    -> Result<(), StoreError>;
    /// Binds an identity to a peer; one bound to any peer already is
    /// [`StoreError::IdentityTaken`].
    async fn bind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Binds `subject` at the identity provider named `issuer` to an administrator; one bound
    /// to anyone already is [`StoreError::IdentityTaken`].
    async fn bind_admin_identity(
        &mut self,
        admin_id: &AdminId,
        (issuer, subject): (&str, &str),
        now: Timestamp,
    ) -> Result<(), StoreError>;
    /// Unbinds it; returns whether it was bound to this administrator.
    async fn unbind_admin_identity(
        &mut self,
        admin_id: &AdminId,
        (issuer, subject): (&str, &str),
    ) -> Result<bool, StoreError>;
    /// Unbinds an identity from a peer; returns whether it was bound to it.
    async fn unbind_identity(
        &mut self,
        peer_id: &PeerId,
        identity: &PeerIdentity,
    ) -> Result<bool, StoreError>;
    /// Deletes a conversation: its messages, and the tasks that carried its text. Returns
    /// whether it existed.
    async fn delete_conversation(
        &mut self,
        peer_id: &PeerId,
        context_id: &ContextId,
    ) -> Result<bool, StoreError>;

    /// Disables an administrator and revokes their administrator tokens.
    async fn disable_admin(
        &mut self,
        admin_id: &AdminId,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.set_admin(admin_id, &AdminSetting::Status(AdminStatus::Disabled))
            .await?;
        self.revoke_admin_tokens(admin_id, now).await
    }
}

/// The served documents' modification times, kept across restarts.
#[async_trait]
pub trait DocumentStore: Send + Sync + std::fmt::Debug {
    /// When the document `name` last changed: the stored time if its entity tag is still
    /// `etag`, else `now`, recorded for the next start.
    async fn document_modified_at(
        &self,
        name: &str,
        etag: &str,
        now: Timestamp,
    ) -> Result<Timestamp, StoreError>;
}

/// What every engine also does: say what it is, and close.
#[async_trait]
pub trait StoreEngine: Send + Sync + std::fmt::Debug {
    /// For the log: the engine and where its data is (never a password).
    fn describe(&self) -> String;
    /// Claims the store for this running gateway until it closes. A claim to serve
    /// [`Serving::Alone`] refuses any other serving gateway, naming the holder; claims to serve
    /// [`Serving::Shared`] accept each other and refuse one serving alone. The embedded engine
    /// is served by one process only and refuses a shared claim.
    async fn claim_for_serving(&self, serving: Serving) -> Result<(), StoreError>;
    /// Writes what is pending and closes every connection; later calls fail.
    async fn close(&self);
    /// Whether the store can serve now: it answers a query, and (SQLite) its disk has room
    /// for what SendMessage writes. `/ready` asks this.
    async fn check_ready(&self) -> Result<(), StoreError>;
    /// Tells the gateways serving this store what another process (the command line) changed:
    /// each note as given, at most [`LONGEST_NOTE`] bytes, best effort (SQLite: over the
    /// serving gateway's socket in the data directory, waiting a bounded time until it says it
    /// applied them; PostgreSQL: `NOTIFY`, heard by every instance within a round trip).
    /// Nobody serving is not an error.
    async fn announce(&self, notes: &[String]);
    /// Starts hearing what [`StoreEngine::announce`] sends, for the gateway serving this store
    /// (after [`StoreEngine::claim_for_serving`]). Ends when the receiver is dropped.
    async fn hear_announcements(&self) -> Result<Announcements, StoreError>;
}

/// A peer's `operations` column as a set: `None` (every operation) when empty. A value this
/// release cannot read whole (a newer release's operation) keeps only what it can name, and
/// nothing when it names none: it narrows, never widens.
pub(crate) fn operations_column(
    text: Option<String>,
) -> Option<crate::protocol::operations::OperationSet> {
    use crate::protocol::operations::OperationSet;
    let text = text?;
    let known: Vec<crate::protocol::jsonrpc::Method> = text
        .split(',')
        .filter_map(|name| crate::protocol::jsonrpc::Method::from_name(name.trim()))
        .collect();
    Some(OperationSet::of(&known))
}

/// A receipt waiting for the answer log: its id and entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    /// The receipt's `jti`.
    pub jti: String,
    /// The log's entry (SHA-256 of the receipt), as stored.
    pub entry: Vec<u8>,
}

/// The answer log's rows (see [`crate::tlog`] for the tree they hold). Receipts come in with
/// their exchanges; one integrator at a time appends them.
#[async_trait]
pub trait LogStore: Send + Sync + std::fmt::Debug {
    /// The integrator's turn, in one transaction; `None` while another process holds it. A
    /// turn dropped without its commit changes nothing, and the turn passes on.
    async fn begin_integration(&self) -> Result<Option<Box<dyn LogIntegration>>, StoreError>;
    /// The latest signed checkpoint: the tree size it commits to and its note.
    async fn latest_checkpoint(&self) -> Result<Option<(u64, String)>, StoreError>;
    /// Every signed checkpoint, by size.
    async fn checkpoints(&self) -> Result<Vec<(u64, String)>, StoreError>;
    /// The stored hashes of `nodes`, in order; `None` when one is not stored.
    async fn log_hashes(
        &self,
        nodes: &[crate::tlog::Node],
    ) -> Result<Option<Vec<crate::tlog::Hash>>, StoreError>;
    /// The stored hashes of `level`'s nodes from `start` up to `end`, as far as stored.
    async fn log_level(
        &self,
        level: u8,
        start: u64,
        end: u64,
    ) -> Result<Vec<crate::tlog::Hash>, StoreError>;
    /// A receipt by its `jti`.
    async fn logged_receipt(&self, jti: &str) -> Result<Option<LoggedReceipt>, StoreError>;
    /// Appended receipts from index `start`, in log order, at most `most`.
    async fn logged_receipts(
        &self,
        start: u64,
        most: u32,
    ) -> Result<Vec<LoggedReceipt>, StoreError>;
    /// How many receipts wait for the integrator, counted up to `most` (a long queue is not
    /// counted whole).
    async fn pending_receipts(&self, most: u32) -> Result<u64, StoreError>;
}

/// One turn of the answer log's integrator (see [`LogStore::begin_integration`]).
#[async_trait]
pub trait LogIntegration: Send {
    /// The latest signed checkpoint, as this turn sees it.
    async fn latest_checkpoint(&mut self) -> Result<Option<(u64, String)>, StoreError>;
    /// The stored hashes of `nodes`, in order; `None` when one is not stored.
    async fn log_hashes(
        &mut self,
        nodes: &[crate::tlog::Node],
    ) -> Result<Option<Vec<crate::tlog::Hash>>, StoreError>;
    /// Up to `most` waiting receipts, oldest first.
    async fn pending(&mut self, most: u32) -> Result<Vec<PendingEntry>, StoreError>;
    /// Gives `entries` the indices from `first`, writes the hashes the appends made and the
    /// checkpoint (`size`, signed note, now).
    async fn append(
        &mut self,
        first: u64,
        entries: &[PendingEntry],
        written: &[(crate::tlog::Node, crate::tlog::Hash)],
        checkpoint: (u64, &str, Timestamp),
    ) -> Result<(), StoreError>;
    /// Commits the turn.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// The longest note [`StoreEngine::announce`] carries; longer ones are not sent.
pub const LONGEST_NOTE: usize = 1024;

/// What a serving gateway hears of other processes' changes.
#[derive(Debug)]
pub enum Heard {
    /// A note another process announced.
    Note(String),
    /// Notes may have been missed (the connection that hears them dropped): re-read what
    /// they would have said.
    Missed,
    /// The announcing process waits until the notes before this one are applied: answer it
    /// then.
    Applied(tokio::sync::oneshot::Sender<()>),
}

/// The announcements a serving gateway hears, as they come.
pub type Announcements = tokio::sync::mpsc::Receiver<Heard>;

/// How a gateway serves its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// This gateway is the only one serving the store.
    Alone,
    /// Several instances serve the store together: they share what must be shared (limits,
    /// turns, changes) through Redis and hold leases in the store's [`InstanceRegistry`].
    Shared,
}

/// Which instances are running, for a store that several serve: each holds a lease it renews,
/// so a survivor can tell a dead instance's working tasks from a live one's. Leases are kept
/// on the store's own clock, so instances whose clocks differ agree on who is gone.
#[async_trait]
pub trait InstanceRegistry: Send + Sync + std::fmt::Debug {
    /// Records that `instance` runs for `lease` from now.
    async fn renew_lease(
        &self,
        instance: &str,
        lease: std::time::Duration,
    ) -> Result<(), StoreError>;
    /// Whether `instance` holds a lease that lapsed less than `grace` ago (or not at all).
    async fn holds_lease(
        &self,
        instance: &str,
        grace: std::time::Duration,
    ) -> Result<bool, StoreError>;
    /// Ends `instance`'s lease (it stops cleanly).
    async fn end_lease(&self, instance: &str) -> Result<(), StoreError>;
    /// Whether this process leads the cluster's housekeeping (taking the lead when nobody
    /// holds it). The lead is held by a session of the store's own, so it passes on when its
    /// holder dies.
    async fn lead_housekeeping(&self) -> Result<bool, StoreError>;
}

/// One opened store, handed out seam by seam.
#[derive(Debug, Clone)]
pub struct Store {
    credentials: Arc<dyn CredentialStore>,
    tasks: Arc<dyn TaskStore>,
    conversations: Arc<dyn ConversationStore>,
    usage: Arc<dyn UsageStore>,
    accounts: Arc<dyn AccountStore>,
    documents: Arc<dyn DocumentStore>,
    push: Arc<dyn PushStore>,
    log: Arc<dyn LogStore>,
    engine: Arc<dyn StoreEngine>,
    instances: Option<Arc<dyn InstanceRegistry>>,
}

/// Where the store of record is: the engine is chosen once, by this.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded SQLite file in a data directory (one serving process).
    Embedded(std::path::PathBuf),
    /// A PostgreSQL database shared by several instances, by URL (it may hold a password).
    Postgres(String),
}

impl std::fmt::Debug for StoreLocation {
    /// Never the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Embedded(dir) => f.debug_tuple("Embedded").field(dir).finish(),
            Self::Postgres(_) => f.write_str("Postgres(…)"),
        }
    }
}

impl Store {
    /// Opens (creating if needed) the embedded SQLite store in `data_dir`, and brings its
    /// schema up to date.
    pub async fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Ok(Self::from_engine(Arc::new(
            sqlite::SqliteStore::open(data_dir).await?,
        )))
    }

    /// Opens the store at `location` with the engine it names.
    pub async fn open_at(location: &StoreLocation) -> Result<Self, StoreError> {
        match location {
            StoreLocation::Embedded(dir) => Self::open(dir).await,
            StoreLocation::Postgres(url) => {
                let engine = Arc::new(postgres::PostgresStore::open(url).await?);
                Ok(Self::from_engine(engine.clone()).with_instances(engine))
            }
        }
    }

    /// Hands out one engine's seams.
    pub fn from_engine<E>(engine: Arc<E>) -> Self
    where
        E: CredentialStore
            + TaskStore
            + ConversationStore
            + UsageStore
            + AccountStore
            + DocumentStore
            + PushStore
            + LogStore
            + StoreEngine
            + 'static,
    {
        Self {
            credentials: engine.clone(),
            tasks: engine.clone(),
            conversations: engine.clone(),
            usage: engine.clone(),
            accounts: engine.clone(),
            documents: engine.clone(),
            push: engine.clone(),
            log: engine.clone(),
            engine,
            instances: None,
        }
    }

    /// Adds the registry of an engine that several instances can serve.
    pub fn with_instances(mut self, instances: Arc<dyn InstanceRegistry>) -> Self {
        self.instances = Some(instances);
        self
    }

    /// Credentials and logins.
    pub fn credentials(&self) -> Arc<dyn CredentialStore> {
        self.credentials.clone()
    }
    /// Tasks and context histories.
    pub fn tasks(&self) -> Arc<dyn TaskStore> {
        self.tasks.clone()
    }
    /// Push-notification configs and deliveries.
    pub fn push(&self) -> Arc<dyn PushStore> {
        self.push.clone()
    }
    /// The answer log.
    pub fn log(&self) -> Arc<dyn LogStore> {
        self.log.clone()
    }
    /// Conversations for their owners.
    pub fn conversations(&self) -> &dyn ConversationStore {
        &*self.conversations
    }
    /// Usage and budgets.
    pub fn usage(&self) -> Arc<dyn UsageStore> {
        self.usage.clone()
    }
    /// Account changes and listings.
    pub fn accounts(&self) -> &dyn AccountStore {
        &*self.accounts
    }
    /// Documents' modification times.
    pub fn documents(&self) -> &dyn DocumentStore {
        &*self.documents
    }
    /// The engine underneath, for the log.
    pub fn describe(&self) -> String {
        self.engine.describe()
    }
    /// The running instances, when several can serve this store (`None` for the embedded
    /// one).
    pub fn instances(&self) -> Option<Arc<dyn InstanceRegistry>> {
        self.instances.clone()
    }
    /// Claims the store for this running gateway (see [`StoreEngine::claim_for_serving`]).
    pub async fn claim_for_serving(&self, serving: Serving) -> Result<(), StoreError> {
        self.engine.claim_for_serving(serving).await
    }
    /// Writes what is pending and closes every connection; later calls fail.
    pub async fn close(&self) {
        self.engine.close().await;
    }

    /// Whether the store can serve now (see [`StoreEngine::check_ready`]).
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        self.engine.check_ready().await
    }

    /// Tells the gateways serving this store about changes (see [`StoreEngine::announce`]).
    pub async fn announce(&self, notes: &[String]) {
        self.engine.announce(notes).await;
    }

    /// Hears other processes' announcements (see [`StoreEngine::hear_announcements`]).
    pub async fn hear_announcements(&self) -> Result<Announcements, StoreError> {
        self.engine.hear_announcements().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operations_column_narrows_and_never_widens() {
        use crate::protocol::jsonrpc::Method;
        assert_eq!(operations_column(None), None);
        // A newer release's operation this one cannot name is left out, not read as "all".
        let some = operations_column(Some("GetTask,TeleportTask".to_owned())).unwrap();
        assert!(some.contains(Method::GetTask) && !some.contains(Method::SendMessage));
        let none = operations_column(Some("TeleportTask".to_owned())).unwrap();
        assert!(Method::ALL.iter().all(|m| !none.contains(*m)));
    }

    #[test]
    fn a_store_location_never_shows_its_url() {
        let location = StoreLocation::Postgres("postgres://app:s3cret@db:5432/peergate".into());
        assert!(!format!("{location:?}").contains("s3cret"));
    }
}
