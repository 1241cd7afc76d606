//! The one place the rules about administrators and their peers live. The command line and the
//! admin API both call [`AccountService`]; neither writes to the store on its own.
//!
//! Every change is written together with its audit record in one transaction. A refused change
//! (another administrator's peer, a bad value) leaves an audit record of the refusal instead.
//! Audit records are built from names, ids and numbers only, never from a secret.

mod admins;
mod conversations;
mod credentials;
mod identities;
mod peers;

pub use admins::{AdminChange, BudgetChange, describe_budget};
pub use conversations::{ConversationPage, MAX_CONVERSATIONS_PAGE, read_period};
pub use credentials::{MAX_GRACE_SECONDS, PeerChanged};
pub use peers::{CreatedPeer, NewPeer, PeerChange};

use crate::admin::{MAX_RATE_PER_MINUTE, MAX_STREAMS_PER_PEER};
use crate::clock::{Clock, Timestamp, rfc3339_millis};
use crate::layers::auth::password::{MIN_PASSWORD_CHARS, PasswordChecker, hash_password};
use crate::protocol::ids::ContextId;
use crate::protocol::operations::OperationSet;
use crate::shared::changes::{Change, ChangeNotifier};
use crate::store::IdentityKind;
use crate::store::records::{AdminStatus, AuditAction, PeerStatus};
use crate::store::{AdminId, AuditActor, AuditOutcome, AuditTarget};
use crate::store::{
    AdminRecord, AdminSetting, AuditEntry, AuditRecord, ConversationEntry, ConversationSummary,
    PeerId, PeerIdentity, PeerRecord, PeerSetting, PeerUsage, Store, StoreError,
};
use crate::token::{self, CredentialKind};

/// One account change under way.
type WriteTx = crate::store::AccountChange;
use crate::locks::ReadWriteLocked;
use std::sync::Arc;

/// A password as given, before it is hashed: never shown (its `Debug` hides it), so a change
/// that carries one can be logged whole.
#[derive(Clone)]
pub struct NewPassword(pub String);

impl std::fmt::Debug for NewPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewPassword(…)")
    }
}

/// Who asks, and from where.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The actor.
    pub actor: Actor,
    /// The client address, or `local` for the command line.
    pub client: String,
}

impl Caller {
    /// The operator at the command line (who holds the store itself, so may act on any
    /// administrator's peers).
    pub fn operator() -> Self {
        Self {
            actor: Actor::Operator,
            client: "local".to_owned(),
        }
    }
}

/// Who acts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Actor {
    /// The command line, acting with the store's own authority.
    Operator,
    /// A signed-in administrator, who may act on their own peers only.
    Admin {
        /// The administrator's id.
        id: AdminId,
        /// Their name.
        name: String,
    },
}

impl Actor {
    /// As the audit log names them.
    fn audited(&self) -> AuditActor {
        match self {
            Self::Operator => AuditActor::Operator,
            Self::Admin { name, .. } => AuditActor::Admin(name.clone()),
        }
    }

    fn admin_id(&self) -> Option<&AdminId> {
        match self {
            Self::Operator => None,
            Self::Admin { id, .. } => Some(id),
        }
    }
}

/// Why a request to the service failed. Each case is answered the same way by the command line
/// and the API (which maps it to a status in one place).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A value is not acceptable.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which value.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// No such thing, or not the caller's to see (the two are answered alike on purpose).
    #[error("{0}")]
    NotFound(String),
    /// A name is already taken.
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this at all.
    #[error("{0}")]
    Forbidden(&'static str),
    /// The store failed; the detail is logged, not shown.
    #[error("the store failed: {0}")]
    Store(#[from] StoreError),
    /// Something below the service failed (randomness, the hashing thread); logged, not shown.
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    fn outcome(&self) -> AuditOutcome {
        match self {
            Self::NotFound(_) | Self::Forbidden(_) => AuditOutcome::Denied(self.to_string()),
            _ => AuditOutcome::Refused(self.to_string()),
        }
    }
}

fn store_conflict(error: StoreError) -> ServiceError {
    match error {
        StoreError::DuplicatePeer(_)
        | StoreError::SimilarPeer(_)
        | StoreError::IdentityTaken(_)
        | StoreError::DuplicateAdmin(_) => ServiceError::Conflict(error.to_string()),
        other => ServiceError::Store(other),
    }
}

/// What the policy says about new peers and administrators.
#[derive(Debug, Clone)]
pub struct AccountDefaults {
    /// Owner of peers added on the command line without `--owner`.
    pub default_owner: Option<String>,
    /// Quota of peers added without one.
    pub rate_per_minute: u32,
}

/// One audited operation: who does what to which target. Its audit record is written once:
/// with the change it commits, or as a refusal.
struct Operation<'c> {
    caller: &'c Caller,
    action: AuditAction,
    target: AuditTarget,
}

impl<'c> Operation<'c> {
    fn new(caller: &'c Caller, action: AuditAction, target: AuditTarget) -> Self {
        Self {
            caller,
            action,
            target,
        }
    }
}

/// Administrators, peers, credentials, conversations and the audit log, under one set of rules.
#[derive(Clone)]
pub struct AccountService {
    store: Store,
    clock: Arc<dyn Clock>,
    /// Shared by the service's clones, so a policy reload reaches all of them.
    defaults: Arc<std::sync::RwLock<AccountDefaults>>,
    changes: Option<Arc<dyn ChangeNotifier>>,
    passwords: Option<PasswordChecker>,
    /// The identity providers the policy names (`[[auth.issuers]]`), when known: a token
    /// identity naming another is refused, since it could never open the door. Shared by
    /// the service's clones, so a policy reload reaches all of them ([`Self::now_knowing`]).
    issuers: Option<Arc<std::sync::RwLock<Arc<[String]>>>>,
}

impl std::fmt::Debug for AccountService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountService")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

/// Checks a name for a peer or an administrator: 1 to 64 of letters, digits and `._-`.
pub fn check_name(field: &'static str, name: &str) -> Result<(), ServiceError> {
    if crate::admin::is_account_name(name) {
        Ok(())
    } else {
        Err(ServiceError::Invalid {
            field,
            reason: "use 1 to 64 of letters, digits and ._-".to_owned(),
        })
    }
}

/// Hashes a new password: in the running gateway's Argon2 pool when there is one (so the
/// admin API stays inside its memory bound), else on a blocking thread (the command line).
async fn hashed_password(
    pool: Option<&PasswordChecker>,
    password: String,
) -> Result<String, ServiceError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(ServiceError::Invalid {
            field: "password",
            reason: format!("too short: use at least {MIN_PASSWORD_CHARS} characters"),
        });
    }
    let hashed = match pool {
        Some(pool) => pool.hash(password).await,
        None => tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .unwrap_or_else(|e| Err(e.to_string())),
    };
    hashed.map_err(|e| ServiceError::Internal(format!("password hashing failed: {e}")))
}

fn issue(kind: CredentialKind) -> Result<token::IssuedToken, ServiceError> {
    token::issue(kind).map_err(|e| ServiceError::Internal(format!("no randomness: {e}")))
}

/// Whether `caller` may act on a peer owned by `owner_id`: the operator on every peer, an
/// administrator on their own. The one ownership rule; every peer operation asks it.
fn may_act_on(caller: &Caller, owner_id: &AdminId) -> bool {
    caller
        .actor
        .admin_id()
        .is_none_or(|admin| admin == owner_id)
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

impl AccountService {
    /// A service over `store`.
    pub fn new(store: Store, clock: Arc<dyn Clock>, defaults: AccountDefaults) -> Self {
        Self {
            store,
            clock,
            defaults: Arc::new(std::sync::RwLock::new(defaults)),
            changes: None,
            passwords: None,
            issuers: None,
        }
    }

    /// Hashes new passwords in `pool`, the running gateway's Argon2 slots.
    pub fn with_password_pool(mut self, pool: PasswordChecker) -> Self {
        self.passwords = Some(pool);
        self
    }

    /// Publishes every change through `changes` (to the running gateway's caches).
    pub fn with_changes(mut self, changes: Arc<dyn ChangeNotifier>) -> Self {
        self.changes = Some(changes);
        self
    }

    /// The same service refusing to bind a token identity of an issuer not in `names` (the
    /// policy's `auth.issuers`).
    pub fn knowing_issuers(mut self, names: &[String]) -> Self {
        self.issuers = Some(Arc::new(std::sync::RwLock::new(names.into())));
        self
    }

    /// What new peers get from now on (a policy reload), for this service and its clones.
    pub fn now_defaulting(&self, defaults: AccountDefaults) {
        *self.defaults.write_locked() = defaults;
    }

    /// The identity providers a reloaded policy names, for this service and its clones (when
    /// it was made [`Self::knowing_issuers`]).
    pub fn now_knowing(&self, names: &[String]) {
        if let Some(issuers) = &self.issuers {
            *issuers.write_locked() = names.into();
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn entry(
        &self,
        caller: &Caller,
        action: AuditAction,
        target: &AuditTarget,
        outcome: AuditOutcome,
        detail: String,
        owner_id: Option<&AdminId>,
    ) -> AuditEntry {
        AuditEntry {
            at: self.clock.now(),
            actor: caller.actor.audited(),
            action,
            target: target.clone(),
            outcome,
            client: caller.client.clone(),
            detail,
            owner_id: owner_id.cloned(),
        }
    }

    /// Writes the audit record of an operation that succeeded into its transaction, and
    /// commits both.
    async fn commit_with_audit(
        &self,
        mut tx: WriteTx,
        op: &Operation<'_>,
        detail: String,
        owner_id: Option<&AdminId>,
    ) -> Result<(), ServiceError> {
        tx.audit(&self.entry(
            op.caller,
            op.action,
            &op.target,
            AuditOutcome::Ok,
            detail,
            owner_id,
        ))
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The one skeleton of every audited operation: runs `work`, which commits its change with
    /// the operation's audit record (see [`Self::commit_with_audit`]); when it fails for any
    /// reason but the store, records the refusal instead. The action is named once, here.
    async fn audited<T>(
        &self,
        op: Operation<'_>,
        work: impl AsyncFnOnce(&Operation<'_>) -> Result<T, ServiceError>,
    ) -> Result<T, ServiceError> {
        let outcome = work(&op).await;
        if let Err(error) = &outcome
            && !matches!(error, ServiceError::Store(_) | ServiceError::Internal(_))
        {
            let entry = self.entry(
                op.caller,
                op.action,
                &op.target,
                error.outcome(),
                String::new(),
                op.caller.actor.admin_id(),
            );
            if let Err(e) = self.store.accounts().append_audit(&entry).await {
                tracing::error!(error = %e, "could not write an audit record");
            }
        }
        outcome
    }

    /// The peer `name` if the caller may act on it. Another administrator's peer is answered
    /// exactly like a peer that does not exist.
    async fn owned_peer(
        &self,
        tx: &mut WriteTx,
        caller: &Caller,
        name: &str,
    ) -> Result<PeerRecord, ServiceError> {
        match tx.peer(name).await? {
            Some(peer) if may_act_on(caller, &peer.owner_id) => Ok(peer),
            _ => Err(ServiceError::NotFound(format!("no peer named \"{name}\""))),
        }
    }

    fn peer_changed(&self, peer_id: &PeerId) {
        if let Some(changes) = &self.changes {
            changes.publish(Change::Peer(peer_id.clone()));
        }
    }

    /// A credential was issued: every instance's set of known credential ids must hold it
    /// before the credential is handed out.
    fn credential_issued(&self, peer_id: &PeerId, token_id: &str) {
        if let Some(changes) = &self.changes {
            changes.publish(Change::CredentialIssued {
                peer_id: peer_id.clone(),
                token_id: token_id.to_owned(),
            });
        }
    }

    fn admin_changed(&self, admin_id: &AdminId) {
        if let Some(changes) = &self.changes {
            changes.publish(Change::Admin(admin_id.clone()));
        }
    }

    fn operator_only(caller: &Caller) -> Result<(), ServiceError> {
        match caller.actor {
            Actor::Operator => Ok(()),
            _ => Err(ServiceError::Forbidden(
                "administrators are managed on the command line",
            )),
        }
    }
}
