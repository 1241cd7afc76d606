//! The one place the rules about administrators and their peers live. The command line and the
//! admin API both call [`AccountService`]; neither writes to the store on its own.
//!
//! Every change is written together with its audit record in one transaction. A refused change
//! (another administrator's peer, a bad value) leaves an audit record of the refusal instead.
//! Audit records are built from names, ids and numbers only, never from a secret.

use crate::clock::{Clock, Timestamp, rfc3339_millis};
use crate::config::{MAX_RATE_PER_MINUTE, MAX_STREAMS_PER_PEER};
use crate::layers::auth::password::{MIN_PASSWORD_CHARS, PasswordChecker, hash_password};
use crate::protocol::ids::ContextId;
use crate::shared::changes::{Change, ChangeNotifier};
use crate::store::IdentityKind;
use crate::store::records::{AdminStatus, AuditAction, PeerStatus};
use crate::store::{
    AdminRecord, AuditEntry, AuditRecord, ConversationEntry, ConversationSummary, PeerId,
    PeerIdentity, PeerRecord, PeerUsage, Store, StoreError,
};
use crate::token::{self, CredentialKind};

/// One account change under way.
type WriteTx = crate::store::AccountChange;
use crate::locks::ReadWriteLocked;
use std::sync::Arc;

/// A usage period is a UTC day (`YYYY-MM-DD`) or month (`YYYY-MM`).
pub fn check_period(period: &str) -> Result<(), ServiceError> {
    let number = |part: &str, n: usize| {
        (part.len() == n && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<u32>().ok())
            .flatten()
    };
    let parts: Vec<&str> = period.split('-').collect();
    let month_ok = |year: &str, month: &str| {
        number(year, 4).is_some() && number(month, 2).is_some_and(|m| (1..=12).contains(&m))
    };
    let shaped = match parts.as_slice() {
        [year, month] => month_ok(year, month),
        [year, month, day] => {
            month_ok(year, month) && number(day, 2).is_some_and(|d| (1..=31).contains(&d))
        }
        _ => false,
    };
    if shaped {
        return Ok(());
    }
    Err(ServiceError::Invalid {
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

/// Longest grace period a rotation may give the old token: 30 days.
pub const MAX_GRACE_SECONDS: u64 = 30 * 24 * 3600;

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
        id: String,
        /// Their name.
        name: String,
    },
}

impl Actor {
    fn label(&self) -> String {
        match self {
            Self::Operator => "operator".to_owned(),
            Self::Admin { name, .. } => format!("admin:{name}"),
        }
    }

    fn admin_id(&self) -> Option<&str> {
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
    fn outcome(&self) -> String {
        match self {
            Self::NotFound(_) | Self::Forbidden(_) => format!("denied: {self}"),
            _ => format!("refused: {self}"),
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
    target: String,
}

impl<'c> Operation<'c> {
    fn new(caller: &'c Caller, action: AuditAction, target: impl Into<String>) -> Self {
        Self {
            caller,
            action,
            target: target.into(),
        }
    }
}

/// A peer as created: its record and its token, which exists nowhere else.
#[derive(Debug)]
pub struct CreatedPeer {
    /// The peer.
    pub peer: PeerRecord,
    /// The token; shown once. `None` when none was asked for ([`NewPeer::without_token`]).
    pub token: Option<String>,
}

/// A new peer.
#[derive(Debug, Clone, Default)]
pub struct NewPeer {
    /// Its name.
    pub name: String,
    /// Its owner (the command line only; an administrator owns what they create).
    pub owner: Option<String>,
    /// Its quota; the policy's default when absent.
    pub rate_per_minute: Option<u32>,
    /// When it stops being let in.
    pub expires_at: Option<Timestamp>,
    /// Issue no bearer token: the peer signs in another way (a password, an API key, an
    /// identity bound to it), and no token of its can be used in their place.
    pub without_token: bool,
}

/// A change to an administrator's budget; absent fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct BudgetChange {
    /// Allow or forbid the model.
    pub model_allowed: Option<bool>,
    /// Tokens per UTC day.
    pub tokens_per_day: Option<u64>,
    /// Tokens per UTC month; `Some(None)` goes back to the policy's default.
    pub tokens_per_month: Option<Option<u64>>,
}

/// A rotation's result.
#[derive(Debug)]
pub struct Rotated {
    /// The peer.
    pub peer: PeerRecord,
    /// The new token; shown once.
    pub token: String,
    /// Until when the old token still works; `None` when it stopped at once.
    pub previous_valid_until: Option<Timestamp>,
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
    if crate::config::is_account_name(name) {
        Ok(())
    } else {
        Err(ServiceError::Invalid {
            field,
            reason: "use 1 to 64 of letters, digits and ._-".to_owned(),
        })
    }
}

/// Checks a new peer's name: [`check_name`], and not shaped like a peer id (`peer_` and 32
/// hexadecimal digits), which the audit log and the admin API would show beside real ids.
fn check_peer_name(name: &str) -> Result<(), ServiceError> {
    check_name("peer name", name)?;
    let id_shaped = name
        .strip_prefix("peer_")
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit()));
    if id_shaped {
        return Err(ServiceError::Invalid {
            field: "peer name",
            reason: "must not look like a peer id (peer_ and 32 hexadecimal digits)".to_owned(),
        });
    }
    Ok(())
}

fn check_rate(rate: u32) -> Result<(), ServiceError> {
    if (1..=MAX_RATE_PER_MINUTE).contains(&rate) {
        Ok(())
    } else {
        Err(ServiceError::Invalid {
            field: "rate",
            reason: format!("must be from 1 to {MAX_RATE_PER_MINUTE} requests a minute"),
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

/// The furthest an expiry may lie ahead: anything later is a mistake (a year typed with an
/// extra digit), and "never" is said by no expiry at all.
const LONGEST_EXPIRY: std::time::Duration = std::time::Duration::from_secs(100 * 366 * 24 * 3600);

/// Refuses an expiry that is not in the future, or lies more than a hundred years ahead.
fn check_future(expires_at: Option<Timestamp>, now: Timestamp) -> Result<(), ServiceError> {
    if expires_at.is_some_and(|at| at <= now) {
        return Err(ServiceError::Invalid {
            field: "expiry",
            reason: "must be in the future (revoke the peer to stop it now)".to_owned(),
        });
    }
    if expires_at.is_some_and(|at| at > crate::clock::later(now, LONGEST_EXPIRY)) {
        return Err(ServiceError::Invalid {
            field: "expiry",
            reason:
                "must be at most 100 years ahead (give no expiry for a peer that never expires)"
                    .to_owned(),
        });
    }
    Ok(())
}

/// Whether `caller` may act on a peer owned by `owner_id`: the operator on every peer, an
/// administrator on their own. The one ownership rule; every peer operation asks it.
fn may_act_on(caller: &Caller, owner_id: &str) -> bool {
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

    /// The same service refusing to bind a token identity of an issuer the policy does not
    /// name (`policy.auth.issuers`).
    pub fn knowing_issuers(mut self, policy: &crate::config::Policy) -> Self {
        let names: Arc<[String]> = policy
            .auth
            .issuers
            .iter()
            .map(|issuer| issuer.name.clone())
            .collect();
        self.issuers = Some(Arc::new(std::sync::RwLock::new(names)));
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

    /// A token identity names an issuer the policy defines, when the policy is known.
    fn check_issuer(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
        let (Some(known), IdentityKind::Token) = (&self.issuers, identity.kind) else {
            return Ok(());
        };
        if known.read_locked().contains(&identity.issuer) {
            return Ok(());
        }
        Err(ServiceError::Invalid {
            field: "issuer",
            reason: format!(
                "the policy names no identity provider {:?} ([[auth.issuers]] name); add it there first",
                identity.issuer
            ),
        })
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn entry(
        &self,
        caller: &Caller,
        action: AuditAction,
        target: &str,
        outcome: &str,
        detail: String,
        owner_id: Option<&str>,
    ) -> AuditEntry {
        AuditEntry {
            at: self.clock.now(),
            actor: caller.actor.label(),
            action,
            target: target.to_owned(),
            outcome: outcome.to_owned(),
            client: caller.client.clone(),
            detail,
            owner_id: owner_id.map(str::to_owned),
        }
    }

    /// Writes the audit record of an operation that succeeded into its transaction, and
    /// commits both.
    async fn commit_with_audit(
        &self,
        mut tx: WriteTx,
        op: &Operation<'_>,
        detail: String,
        owner_id: Option<&str>,
    ) -> Result<(), ServiceError> {
        tx.audit(&self.entry(op.caller, op.action, &op.target, "ok", detail, owner_id))
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
                &error.outcome(),
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

    fn admin_changed(&self, admin_id: &str) {
        if let Some(changes) = &self.changes {
            changes.publish(Change::Admin(admin_id.to_owned()));
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

    // ---- administrators ----

    /// Adds an administrator with a password (`None` makes one that cannot sign in with
    /// Basic until a password is set).
    pub async fn add_admin(
        &self,
        caller: &Caller,
        name: &str,
        password: Option<String>,
    ) -> Result<AdminRecord, ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminCreated, &target),
            async |op| {
                Self::operator_only(caller)?;
                check_name("administrator name", name)?;
                let phc = match password {
                    Some(password) => {
                        Some(hashed_password(self.passwords.as_ref(), password).await?)
                    }
                    None => None,
                };
                let admin = AdminRecord {
                    id: new_id("adm"),
                    name: name.to_owned(),
                    status: AdminStatus::Active,
                    has_password: phc.is_some(),
                    model_allowed: true,
                    tokens_per_day: None,
                    tokens_per_month: None,
                    created_at: self.clock.now(),
                    auditor: false,
                };
                let mut tx = self.store.accounts().begin_change().await?;
                tx.insert_admin(&admin, phc.as_deref())
                    .await
                    .map_err(store_conflict)?;
                let detail = if admin.has_password {
                    "with a password"
                } else {
                    "without a password"
                };
                self.commit_with_audit(tx, op, detail.to_owned(), Some(&admin.id))
                    .await?;
                Ok(admin)
            },
        )
        .await
    }

    /// Every administrator.
    pub async fn list_admins(&self) -> Result<Vec<AdminRecord>, ServiceError> {
        Ok(self.store.accounts().list_admins().await?)
    }

    /// The id of the administrator named `name`.
    pub async fn admin_id(&self, name: &str) -> Result<String, ServiceError> {
        self.list_admins()
            .await?
            .into_iter()
            .find(|admin| admin.name == name)
            .map(|admin| admin.id)
            .ok_or_else(|| ServiceError::NotFound(format!("no administrator named \"{name}\"")))
    }

    /// Starts a change to an administrator (the operator's alone): the write transaction and
    /// the administrator.
    async fn begin_admin_change(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(WriteTx, AdminRecord), ServiceError> {
        Self::operator_only(caller)?;
        let mut tx = self.store.accounts().begin_change().await?;
        let admin = Self::existing_admin(&mut tx, name).await?;
        Ok((tx, admin))
    }

    /// Ends a change to an administrator with its audit record, and tells the running gateway.
    async fn finish_admin_change(
        &self,
        tx: WriteTx,
        op: &Operation<'_>,
        detail: String,
        admin_id: &str,
    ) -> Result<(), ServiceError> {
        self.commit_with_audit(tx, op, detail, Some(admin_id))
            .await?;
        self.admin_changed(admin_id);
        Ok(())
    }

    async fn existing_admin(tx: &mut WriteTx, name: &str) -> Result<AdminRecord, ServiceError> {
        tx.admin(name)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no administrator named \"{name}\"")))
    }

    /// Disables an administrator: they can no longer sign in, their administrator tokens stop,
    /// and their peers' turns are refused.
    pub async fn disable_admin(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminDisabled, &target),
            async |op| {
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.disable_admin(&admin.id, self.clock.now()).await?;
                self.finish_admin_change(tx, op, String::new(), &admin.id)
                    .await
            },
        )
        .await
    }

    /// Makes an administrator an auditor (reads peers, usage, audit and conversations on the
    /// admin API, changes nothing) or a full administrator again; the operator's alone.
    pub async fn set_admin_role(
        &self,
        caller: &Caller,
        name: &str,
        auditor: bool,
    ) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminRoleChanged, &target),
            async |op| {
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.set_admin_role(&admin.id, auditor).await?;
                let role = |auditor: bool| if auditor { "auditor" } else { "admin" };
                let detail = format!("role {} -> {}", role(admin.auditor), role(auditor));
                self.finish_admin_change(tx, op, detail, &admin.id).await
            },
        )
        .await
    }

    /// Enables a disabled administrator again (their old tokens stay revoked).
    pub async fn enable_admin(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminEnabled, &target),
            async |op| {
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.set_admin_status(&admin.id, AdminStatus::Active).await?;
                self.finish_admin_change(tx, op, String::new(), &admin.id)
                    .await
            },
        )
        .await
    }

    /// Revokes every administrator token of an administrator (after a leak), leaving their
    /// password and their peers alone.
    pub async fn revoke_admin_tokens(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminTokensRevoked, &target),
            async |op| {
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.revoke_admin_tokens(&admin.id, self.clock.now()).await?;
                self.commit_with_audit(tx, op, String::new(), Some(&admin.id))
                    .await
            },
        )
        .await
    }

    /// Sets an administrator's password.
    pub async fn set_admin_password(
        &self,
        caller: &Caller,
        name: &str,
        password: String,
    ) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminPasswordSet, &target),
            async |op| {
                Self::operator_only(caller)?;
                let phc = hashed_password(self.passwords.as_ref(), password).await?;
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.set_admin_password(&admin.id, &phc).await?;
                self.commit_with_audit(tx, op, String::new(), Some(&admin.id))
                    .await?;
                Ok(())
            },
        )
        .await
    }

    /// Binds `subject` at the identity provider `issuer` (`[admin.issuer]`'s name) to an
    /// administrator: the provider's tokens for that subject sign them in to the admin API.
    pub async fn bind_admin_identity(
        &self,
        caller: &Caller,
        name: &str,
        (issuer, subject): (&str, &str),
    ) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminIdentityBound, &target),
            async |op| {
                Self::operator_only(caller)?;
                let identity = PeerIdentity::token(issuer, subject).map_err(|reason| {
                    ServiceError::Invalid {
                        field: "identity",
                        reason,
                    }
                })?;
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                tx.bind_admin_identity(&admin.id, (issuer, &identity.subject), self.clock.now())
                    .await
                    .map_err(store_conflict)?;
                self.commit_with_audit(
                    tx,
                    op,
                    format!("token {issuer}:{subject}"),
                    Some(&admin.id),
                )
                .await?;
                self.admin_changed(&admin.id);
                Ok(())
            },
        )
        .await
    }

    /// Unbinds an administrator's subject at an identity provider.
    pub async fn unbind_admin_identity(
        &self,
        caller: &Caller,
        name: &str,
        (issuer, subject): (&str, &str),
    ) -> Result<(), ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminIdentityUnbound, &target),
            async |op| {
                Self::operator_only(caller)?;
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                if !tx
                    .unbind_admin_identity(&admin.id, (issuer, subject))
                    .await?
                {
                    return Err(ServiceError::NotFound(format!(
                        "administrator \"{name}\" has no such identity bound"
                    )));
                }
                self.commit_with_audit(
                    tx,
                    op,
                    format!("token {issuer}:{subject}"),
                    Some(&admin.id),
                )
                .await?;
                self.admin_changed(&admin.id);
                Ok(())
            },
        )
        .await
    }

    /// Issues an administrator token (for the admin API); returns it, once.
    pub async fn issue_admin_token(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<String, ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminTokenIssued, &target),
            async |op| {
                Self::operator_only(caller)?;
                let issued = issue(CredentialKind::AdminToken)?;
                let (mut tx, admin) = self.begin_admin_change(caller, name).await?;
                if admin.status != AdminStatus::Active {
                    return Err(ServiceError::Invalid {
                        field: "administrator",
                        reason: format!("\"{name}\" is disabled"),
                    });
                }
                tx.insert_admin_token(
                    &admin.id,
                    &issued.token_id,
                    &issued.secret_hash,
                    self.clock.now(),
                )
                .await?;
                self.commit_with_audit(
                    tx,
                    op,
                    format!("token id {}", issued.token_id),
                    Some(&admin.id),
                )
                .await?;
                Ok(issued.token)
            },
        )
        .await
    }

    /// Changes an administrator's model switch or budgets.
    pub async fn set_budget(
        &self,
        caller: &Caller,
        name: &str,
        change: BudgetChange,
    ) -> Result<AdminRecord, ServiceError> {
        let target = format!("admin:{name}");
        self.audited(
            Operation::new(caller, AuditAction::AdminBudgetChanged, &target),
            async |op| {
                Self::operator_only(caller)?;
                if change.tokens_per_day == Some(0) || change.tokens_per_month == Some(Some(0)) {
                    return Err(ServiceError::Invalid {
                        field: "budget",
                        reason: "a budget must be at least 1 token; forbid the model to stop it"
                            .to_owned(),
                    });
                }
                let (mut tx, mut admin) = self.begin_admin_change(caller, name).await?;
                if let Some(allowed) = change.model_allowed {
                    admin.model_allowed = allowed;
                }
                if let Some(per_day) = change.tokens_per_day {
                    admin.tokens_per_day = Some(per_day);
                }
                if let Some(per_month) = change.tokens_per_month {
                    admin.tokens_per_month = per_month;
                }
                tx.set_admin_budget(
                    &admin.id,
                    admin.model_allowed,
                    admin.tokens_per_day,
                    admin.tokens_per_month,
                )
                .await?;
                let detail = describe_budget(&admin);
                self.finish_admin_change(tx, op, detail, &admin.id).await?;
                Ok(admin)
            },
        )
        .await
    }

    /// Records a failed sign-in to the admin API: `(name, subject)` are the login name tried
    /// and the identity a verified token named. The name is recorded only when such an
    /// administrator exists, so a password typed into the name field is never written down; a
    /// token's subject (no secret) is recorded as it is.
    pub async fn record_failed_login(
        &self,
        client: &str,
        (name, subject): (Option<&str>, Option<&str>),
        why: &str,
    ) {
        let known = match name {
            Some(name) => self
                .store
                .credentials()
                .find_admin_login(name)
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let caller = Caller {
            actor: Actor::Operator,
            client: client.to_owned(),
        };
        let mut entry = self.entry(
            &caller,
            AuditAction::AdminLoginFailed,
            &known.as_ref().map_or_else(
                || "admin:(unknown)".to_owned(),
                |a| format!("admin:{}", a.name),
            ),
            &format!("denied: {why}"),
            subject.map_or_else(String::new, |subject| format!("token subject {subject}")),
            known.as_ref().map(|a| a.id.as_str()),
        );
        entry.actor = "anonymous".to_owned();
        if let Err(e) = self.store.accounts().append_audit(&entry).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    }

    /// Records a policy reload asked for by `caller` (applied or refused), in the caller's
    /// own audit trail.
    pub async fn record_policy_reload(&self, caller: &Caller, outcome: &str, detail: String) {
        let entry = self.entry(
            caller,
            AuditAction::PolicyReloaded,
            "policy",
            outcome,
            detail,
            caller.actor.admin_id(),
        );
        if let Err(e) = self.store.accounts().append_audit(&entry).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    }

    /// Records that the authorization policies denied `caller` the admin API's `operation`,
    /// and which policies did.
    pub async fn record_denied(&self, caller: &Caller, operation: &str, policies: &str) {
        let entry = self.entry(
            caller,
            AuditAction::AdminDeniedByPolicy,
            &format!("admin-api:{operation}"),
            &format!("denied: {operation}"),
            format!("policies: {policies}"),
            caller.actor.admin_id(),
        );
        if let Err(e) = self.store.accounts().append_audit(&entry).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    }

    // ---- peers ----

    /// Creates a peer and its first token.
    pub async fn create_peer(
        &self,
        caller: &Caller,
        new: NewPeer,
    ) -> Result<CreatedPeer, ServiceError> {
        let target = format!("peer:{}", new.name);
        self.audited(
            Operation::new(caller, AuditAction::PeerCreated, &target),
            async |op| {
                check_peer_name(&new.name)?;
                let default_rate = self.defaults.read_locked().rate_per_minute;
                let rate = new.rate_per_minute.unwrap_or(default_rate);
                check_rate(rate)?;
                let now = self.clock.now();
                check_future(new.expires_at, now)?;
                let issued = if new.without_token {
                    None
                } else {
                    Some(issue(CredentialKind::PeerToken)?)
                };
                let mut tx = self.store.accounts().begin_change().await?;
                let owner = self
                    .new_peer_owner(&mut tx, caller, new.owner.as_deref())
                    .await?;
                let peer = PeerRecord {
                    id: new_id("peer").into(),
                    name: new.name.clone(),
                    status: PeerStatus::Active,
                    rate_per_minute: rate,
                    max_streams: None,
                    tokens_per_day: None,
                    created_at: now,
                    last_used_at: None,
                    owner_id: owner.0,
                    owner_name: owner.1,
                    expires_at: new.expires_at,
                    trusts_trace: false,
                    operations: None,
                };
                tx.insert_peer(&peer).await.map_err(store_conflict)?;
                tx.audit(&self.entry(
                    op.caller,
                    op.action,
                    &op.target,
                    "ok",
                    format!("owner {}, rate {rate}/min", peer.owner_name),
                    Some(&peer.owner_id),
                ))
                .await?;
                if let Some(issued) = &issued {
                    tx.insert_credential(
                        &peer.id,
                        CredentialKind::PeerToken,
                        &issued.token_id,
                        &issued.secret_hash,
                        now,
                    )
                    .await?;
                    tx.audit(&self.entry(
                        caller,
                        AuditAction::CredentialIssued,
                        &target,
                        "ok",
                        format!("token id {}", issued.token_id),
                        Some(&peer.owner_id),
                    ))
                    .await?;
                }
                tx.commit().await?;
                // Announced before the token is handed out: the known credential ids hold it.
                if let Some(issued) = &issued {
                    self.credential_issued(&peer.id, &issued.token_id);
                }
                Ok(CreatedPeer {
                    peer,
                    token: issued.map(|issued| issued.token),
                })
            },
        )
        .await
    }

    /// The owner (id, name) of a peer `caller` adds: an administrator owns the peers they
    /// add; the operator names an owner or gets the default one.
    async fn new_peer_owner(
        &self,
        tx: &mut WriteTx,
        caller: &Caller,
        named: Option<&str>,
    ) -> Result<(String, String), ServiceError> {
        match (&caller.actor, named) {
            (Actor::Admin { id, name }, None) => Ok((id.clone(), name.clone())),
            (Actor::Admin { name, .. }, Some(owner)) if owner == name => {
                Ok((tx_admin_id(tx, owner).await?, owner.to_owned()))
            }
            (Actor::Admin { .. }, Some(_)) => Err(ServiceError::Forbidden(
                "an administrator can only create peers they own",
            )),
            (Actor::Operator, owner) => self.operator_owner(tx, caller, owner).await,
        }
    }

    /// The owner of a peer the operator adds: the one named, or the policy's default owner,
    /// who is created (without a password) the first time, for a single-operator setup.
    async fn operator_owner(
        &self,
        tx: &mut WriteTx,
        caller: &Caller,
        named: Option<&str>,
    ) -> Result<(String, String), ServiceError> {
        if let Some(name) = named {
            return Ok((tx_admin_id(tx, name).await?, name.to_owned()));
        }
        let default_owner = self.defaults.read_locked().default_owner.clone();
        let Some(name) = default_owner.as_deref() else {
            return Err(ServiceError::Invalid {
                field: "owner",
                reason: "name the owning administrator with --owner NAME (or set peers.default_owner in the policy)".to_owned(),
            });
        };
        if tx.admin(name).await?.is_some() {
            // Exists: the same rule as a named owner (it must be active).
            return Ok((tx_admin_id(tx, name).await?, name.to_owned()));
        }
        let admin = AdminRecord {
            id: new_id("adm"),
            name: name.to_owned(),
            status: AdminStatus::Active,
            has_password: false,
            model_allowed: true,
            tokens_per_day: None,
            tokens_per_month: None,
            created_at: self.clock.now(),
            auditor: false,
        };
        tx.insert_admin(&admin, None)
            .await
            .map_err(store_conflict)?;
        tx.audit(&self.entry(
            caller,
            AuditAction::AdminCreated,
            &format!("admin:{name}"),
            "ok",
            "the policy's default owner, without a password".to_owned(),
            Some(&admin.id),
        ))
        .await?;
        Ok((admin.id, admin.name))
    }

    /// The caller's peers (every peer for the operator).
    pub async fn list_peers(&self, caller: &Caller) -> Result<Vec<PeerRecord>, ServiceError> {
        Ok(self
            .store
            .accounts()
            .list_peers(caller.actor.admin_id())
            .await?)
    }

    /// One of the caller's peers. Asking for another administrator's peer is audited.
    pub async fn show_peer(&self, caller: &Caller, name: &str) -> Result<PeerRecord, ServiceError> {
        let op = Operation::new(caller, AuditAction::PeerRead, format!("peer:{name}"));
        self.audited(op, async |_| self.readable_peer(caller, name).await)
            .await
    }

    async fn readable_peer(&self, caller: &Caller, name: &str) -> Result<PeerRecord, ServiceError> {
        match self.store.accounts().find_peer(name).await? {
            Some(peer) if may_act_on(caller, &peer.owner_id) => Ok(peer),
            _ => Err(ServiceError::NotFound(format!("no peer named \"{name}\""))),
        }
    }

    /// Starts a change to a peer the caller may act on: the write transaction and the peer.
    async fn begin_change(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(WriteTx, PeerRecord), ServiceError> {
        let mut tx = self.store.accounts().begin_change().await?;
        let peer = self.owned_peer(&mut tx, caller, name).await?;
        Ok((tx, peer))
    }

    /// Ends a change with its audit record, commits both, and tells the running gateway.
    async fn finish_change(
        &self,
        tx: WriteTx,
        op: &Operation<'_>,
        peer: &PeerRecord,
        detail: String,
    ) -> Result<(), ServiceError> {
        self.commit_with_audit(tx, op, detail, Some(&peer.owner_id))
            .await?;
        self.peer_changed(&peer.id);
        Ok(())
    }

    /// Binds an identity to a peer: from now on it opens the door as that peer. An identity
    /// bound to any peer already is a conflict (one identity names one peer).
    pub async fn bind_identity(
        &self,
        caller: &Caller,
        name: &str,
        identity: &PeerIdentity,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerIdentityBound,
                format!("peer:{name}"),
            ),
            async |op| {
                self.check_issuer(identity)?;
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                if peer.status == PeerStatus::Revoked {
                    return Err(ServiceError::Conflict(format!(
                        "peer \"{name}\" is revoked; reinstate it first"
                    )));
                }
                tx.bind_identity(&peer.id, identity, self.clock.now())
                    .await
                    .map_err(store_conflict)?;
                self.finish_change(tx, op, &peer, identity.describe()).await
            },
        )
        .await
    }

    /// Unbinds an identity from a peer: its tokens or certificate stop opening the door at
    /// once here, and within a second on other instances.
    pub async fn unbind_identity(
        &self,
        caller: &Caller,
        name: &str,
        identity: &PeerIdentity,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerIdentityUnbound,
                format!("peer:{name}"),
            ),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                if !tx.unbind_identity(&peer.id, identity).await? {
                    return Err(ServiceError::NotFound(format!(
                        "peer \"{name}\" has no such identity bound"
                    )));
                }
                self.finish_change(tx, op, &peer, identity.describe()).await
            },
        )
        .await
    }

    /// The identities bound to the peers the caller may see, by peer id.
    pub async fn identities(
        &self,
        caller: &Caller,
    ) -> Result<std::collections::HashMap<String, Vec<PeerIdentity>>, ServiceError> {
        let rows = self.store.accounts().list_identities().await?;
        self.by_visible_peer(caller, rows).await
    }

    /// The kinds of credential peergate issued that each of the caller's peers still holds
    /// (`token`, `api_key`, `password`), by peer id.
    pub async fn credential_kinds(
        &self,
        caller: &Caller,
    ) -> Result<std::collections::HashMap<String, Vec<String>>, ServiceError> {
        let rows = self
            .store
            .accounts()
            .credential_kinds(self.clock.now())
            .await?;
        self.by_visible_peer(caller, rows).await
    }

    /// `rows` of (peer id, value) grouped by peer, for the peers the caller may see.
    async fn by_visible_peer<T>(
        &self,
        caller: &Caller,
        rows: Vec<(String, T)>,
    ) -> Result<std::collections::HashMap<String, Vec<T>>, ServiceError> {
        let visible: std::collections::HashSet<PeerId> = self
            .list_peers(caller)
            .await?
            .into_iter()
            .map(|peer| peer.id)
            .collect();
        let mut by_peer: std::collections::HashMap<String, Vec<T>> =
            std::collections::HashMap::new();
        for (peer_id, value) in rows {
            if visible.contains(peer_id.as_str()) {
                by_peer.entry(peer_id).or_default().push(value);
            }
        }
        Ok(by_peer)
    }

    /// Sets a peer's quota.
    pub async fn set_limit(
        &self,
        caller: &Caller,
        name: &str,
        rate: u32,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerLimitChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                check_rate(rate)?;
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_rate(&peer.id, rate).await?;
                let detail = format!("rate {} -> {rate}/min", peer.rate_per_minute);
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Sets a peer's own daily token budget, or with `None` leaves it only its owner's. Both
    /// apply: a turn is refused when either is spent.
    pub async fn set_peer_budget(
        &self,
        caller: &Caller,
        name: &str,
        tokens_per_day: Option<u64>,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerLimitChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                if tokens_per_day == Some(0) {
                    return Err(ServiceError::Invalid {
                        field: "tokensPerDay",
                        reason: "must be at least 1 (revoke the peer to stop it), or none"
                            .to_owned(),
                    });
                }
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_budget(&peer.id, tokens_per_day).await?;
                let show = |n: Option<u64>| {
                    n.map_or_else(|| "none (the owner's)".to_owned(), |n| n.to_string())
                };
                let detail = format!(
                    "tokens per day {} -> {}",
                    show(peer.tokens_per_day),
                    show(tokens_per_day)
                );
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Sets a peer's own cap on open streams, or with `None` gives it the policy's
    /// (`limits.streams_per_peer`).
    pub async fn set_streams(
        &self,
        caller: &Caller,
        name: &str,
        max_streams: Option<u32>,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerLimitChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                if max_streams.is_some_and(|n| !(1..=MAX_STREAMS_PER_PEER).contains(&n)) {
                    return Err(ServiceError::Invalid {
                        field: "streams",
                        reason: format!(
                            "must be from 1 to {MAX_STREAMS_PER_PEER}, or the policy's default"
                        ),
                    });
                }
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_streams(&peer.id, max_streams).await?;
                let show =
                    |n: Option<u32>| n.map_or_else(|| "the policy's".to_owned(), |n| n.to_string());
                let detail = format!(
                    "open streams {} -> {}",
                    show(peer.max_streams),
                    show(max_streams)
                );
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Marks a peer's own trace context as continued (`trusted`) or only linked to: a
    /// trusted peer's `traceparent` becomes the parent of its calls' spans, so it decides their
    /// trace id and sampling.
    pub async fn set_trace_trust(
        &self,
        caller: &Caller,
        name: &str,
        trusted: bool,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerTraceTrustChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_trace_trust(&peer.id, trusted).await?;
                let show = |trusted: bool| if trusted { "trusted" } else { "linked" };
                let detail = format!(
                    "trace context {} -> {}",
                    show(peer.trusts_trace),
                    show(trusted)
                );
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Limits the operations a peer may call (`None`: every one the policy offers again). A
    /// running gateway hears of it like a revocation.
    pub async fn set_operations(
        &self,
        caller: &Caller,
        name: &str,
        operations: Option<crate::protocol::operations::OperationSet>,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerOperationsChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_operations(&peer.id, operations).await?;
                let show = |set: Option<crate::protocol::operations::OperationSet>| {
                    set.map_or_else(|| "all".to_owned(), |set| set.to_text())
                };
                let detail = format!(
                    "operations {} -> {}",
                    show(peer.operations),
                    show(operations)
                );
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Sets (or with `None` clears) a peer's expiry.
    pub async fn set_expiry(
        &self,
        caller: &Caller,
        name: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::PeerExpiryChanged,
                format!("peer:{name}"),
            ),
            async |op| {
                check_future(expires_at, self.clock.now())?;
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_expiry(&peer.id, expires_at).await?;
                let show =
                    |at: Option<Timestamp>| at.map_or_else(|| "never".to_owned(), rfc3339_millis);
                let detail = format!("expiry {} -> {}", show(peer.expires_at), show(expires_at));
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Sets the password a peer uses with Basic authentication.
    pub async fn set_peer_password(
        &self,
        caller: &Caller,
        name: &str,
        password: String,
    ) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::CredentialIssued,
                format!("peer:{name}"),
            ),
            async |op| {
                let phc = hashed_password(self.passwords.as_ref(), password).await?;
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.set_peer_password(&peer.id, &phc).await?;
                self.finish_change(tx, op, &peer, "password set".to_owned())
                    .await
            },
        )
        .await
    }

    /// Issues a new API key for a peer (any earlier key stops); returns it, once.
    pub async fn issue_api_key(&self, caller: &Caller, name: &str) -> Result<String, ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::CredentialIssued,
                format!("peer:{name}"),
            ),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                let peer = active(peer)?;
                let issued = issue(CredentialKind::ApiKey)?;
                let now = self.clock.now();
                tx.revoke_credentials(&peer.id, Some(CredentialKind::ApiKey), now)
                    .await?;
                tx.insert_credential(
                    &peer.id,
                    CredentialKind::ApiKey,
                    &issued.token_id,
                    &issued.secret_hash,
                    now,
                )
                .await?;
                let detail = format!("API key id {}; earlier keys revoked", issued.token_id);
                self.finish_change(tx, op, &peer, detail).await?;
                self.credential_issued(&peer.id, &issued.token_id);
                Ok(issued.token)
            },
        )
        .await
    }

    /// Gives a peer a new token. The old ones stop at once (`grace_seconds` 0) or when the
    /// grace period ends.
    pub async fn rotate(
        &self,
        caller: &Caller,
        name: &str,
        grace_seconds: u64,
    ) -> Result<Rotated, ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::CredentialRotated,
                format!("peer:{name}"),
            ),
            async |op| {
                if grace_seconds > MAX_GRACE_SECONDS {
                    return Err(ServiceError::Invalid {
                        field: "grace",
                        reason: format!("at most {MAX_GRACE_SECONDS} seconds (30 days)"),
                    });
                }
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                let peer = active(peer)?;
                let issued = issue(CredentialKind::PeerToken)?;
                let now = self.clock.now();
                let previous_valid_until = if grace_seconds == 0 {
                    tx.revoke_credentials(&peer.id, Some(CredentialKind::PeerToken), now)
                        .await?;
                    None
                } else {
                    let until =
                        crate::clock::later(now, std::time::Duration::from_secs(grace_seconds));
                    tx.expire_credentials(&peer.id, CredentialKind::PeerToken, until)
                        .await?;
                    Some(until)
                };
                tx.insert_credential(
                    &peer.id,
                    CredentialKind::PeerToken,
                    &issued.token_id,
                    &issued.secret_hash,
                    now,
                )
                .await?;
                let detail = format!(
                    "new token id {}; old tokens {}",
                    issued.token_id,
                    previous_valid_until.map_or_else(
                        || "revoked at once".to_owned(),
                        |until| format!("work until {}", rfc3339_millis(until))
                    )
                );
                self.finish_change(tx, op, &peer, detail).await?;
                self.credential_issued(&peer.id, &issued.token_id);
                Ok(Rotated {
                    peer,
                    token: issued.token,
                    previous_valid_until,
                })
            },
        )
        .await
    }

    /// Revokes a peer: every credential it holds stops working.
    pub async fn revoke(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::CredentialRevoked,
                format!("peer:{name}"),
            ),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                tx.revoke_peer(&peer.id, self.clock.now()).await?;
                let detail = "peer revoked with all its credentials".to_owned();
                self.finish_change(tx, op, &peer, detail).await
            },
        )
        .await
    }

    /// Lets a revoked peer in again under its name, with a new token (returned, shown once);
    /// its old credentials stay revoked, and its audit records and conversations stay its own.
    /// Peers are reinstated rather than deleted, so a name is never reused by a different
    /// partner whose records would mix with the old one's.
    pub async fn reinstate(&self, caller: &Caller, name: &str) -> Result<String, ServiceError> {
        self.audited(
            Operation::new(caller, AuditAction::PeerReinstated, format!("peer:{name}")),
            async |op| {
                let (mut tx, peer) = self.begin_change(caller, name).await?;
                if peer.status != PeerStatus::Revoked {
                    return Err(ServiceError::Conflict(format!(
                        "peer \"{name}\" is not revoked; rotate its token instead"
                    )));
                }
                tx.reinstate_peer(&peer.id).await?;
                let issued = issue(CredentialKind::PeerToken)?;
                tx.insert_credential(
                    &peer.id,
                    CredentialKind::PeerToken,
                    &issued.token_id,
                    &issued.secret_hash,
                    self.clock.now(),
                )
                .await?;
                let detail = format!("reinstated with new token id {}", issued.token_id);
                self.finish_change(tx, op, &peer, detail).await?;
                self.credential_issued(&peer.id, &issued.token_id);
                Ok(issued.token)
            },
        )
        .await
    }

    // ---- conversations, usage, audit ----

    fn account(caller: &Caller) -> Result<&str, ServiceError> {
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
            query.owner_id = Some(me.to_owned());
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
        let op = Operation::new(caller, AuditAction::TaskRead, format!("peer:{peer}"));
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
            format!("peer:{peer}"),
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
                format!("peer:{peer}"),
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
        admin_id: &str,
        period: &str,
    ) -> Result<(u64, Vec<PeerUsage>), ServiceError> {
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

/// An administrator's model switch and budgets, in words (for the audit log and the operator).
pub fn describe_budget(admin: &AdminRecord) -> String {
    let show =
        |n: Option<u64>| n.map_or_else(|| "the policy's default".to_owned(), |n| n.to_string());
    format!(
        "model {}, tokens per day {}, per month {}",
        if admin.model_allowed {
            "allowed"
        } else {
            "forbidden"
        },
        show(admin.tokens_per_day),
        show(admin.tokens_per_month)
    )
}

fn active(peer: PeerRecord) -> Result<PeerRecord, ServiceError> {
    if peer.status == PeerStatus::Active {
        Ok(peer)
    } else {
        Err(ServiceError::Conflict(format!(
            "peer \"{}\" is revoked and takes no new credentials",
            peer.name
        )))
    }
}

async fn tx_admin_id(tx: &mut WriteTx, name: &str) -> Result<String, ServiceError> {
    match tx.admin(name).await? {
        Some(admin) if admin.status == AdminStatus::Active => Ok(admin.id),
        Some(_) => Err(ServiceError::Invalid {
            field: "owner",
            reason: format!("administrator \"{name}\" is disabled"),
        }),
        None => Err(ServiceError::NotFound(format!(
            "no administrator named \"{name}\""
        ))),
    }
}
