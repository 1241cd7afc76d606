//! Administrators: added by the operator, changed by one audited method ([`AdminChange`]),
//! their tokens, and what the audit log records of sign-ins, reloads and policy denials.

use super::*;

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

impl BudgetChange {
    /// `admin` with this change's fields in place.
    fn apply_to(self, admin: &mut AdminRecord) {
        if let Some(allowed) = self.model_allowed {
            admin.model_allowed = allowed;
        }
        if let Some(per_day) = self.tokens_per_day {
            admin.tokens_per_day = Some(per_day);
        }
        if let Some(per_month) = self.tokens_per_month {
            admin.tokens_per_month = per_month;
        }
    }
}

/// A change to an administrator, applied by [`AccountService::change_admin`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AdminChange {
    /// They can no longer sign in, their administrator tokens stop, and their peers' turns
    /// are refused.
    Disable,
    /// A disabled administrator works again (their old tokens stay revoked).
    Enable,
    /// Every administrator token of theirs stops (after a leak); their password and peers stay.
    RevokeTokens,
    /// An auditor (reads peers, usage, audit and conversations on the admin API, changes
    /// nothing), or a full administrator again.
    Auditor(bool),
    /// Their password.
    Password(NewPassword),
    /// Their model switch or budgets.
    Budget(BudgetChange),
    /// `subject` at the identity provider `issuer` (`[admin.issuer]`'s name) bound to them:
    /// the provider's tokens for that subject sign them in to the admin API.
    BindIdentity {
        /// The identity provider's name.
        issuer: String,
        /// The subject.
        subject: String,
    },
    /// Such a subject unbound from them.
    UnbindIdentity {
        /// The identity provider's name.
        issuer: String,
        /// The subject.
        subject: String,
    },
}

impl AdminChange {
    fn action(&self) -> AuditAction {
        match self {
            Self::Disable => AuditAction::AdminDisabled,
            Self::Enable => AuditAction::AdminEnabled,
            Self::RevokeTokens => AuditAction::AdminTokensRevoked,
            Self::Auditor(_) => AuditAction::AdminRoleChanged,
            Self::Password(_) => AuditAction::AdminPasswordSet,
            Self::Budget(_) => AuditAction::AdminBudgetChanged,
            Self::BindIdentity { .. } => AuditAction::AdminIdentityBound,
            Self::UnbindIdentity { .. } => AuditAction::AdminIdentityUnbound,
        }
    }

    /// Refused before anything is read.
    fn check(&self) -> Result<(), ServiceError> {
        match self {
            Self::Budget(change)
                if change.tokens_per_day == Some(0) || change.tokens_per_month == Some(Some(0)) =>
            {
                Err(ServiceError::Invalid {
                    field: "budget",
                    reason: "a budget must be at least 1 token; forbid the model to stop it"
                        .to_owned(),
                })
            }
            Self::BindIdentity { issuer, subject } => PeerIdentity::token(issuer, subject)
                .map(drop)
                .map_err(|reason| ServiceError::Invalid {
                    field: "identity",
                    reason,
                }),
            _ => Ok(()),
        }
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

impl AccountService {
    /// Adds an administrator with a password (`None` makes one that cannot sign in with
    /// Basic until a password is set).
    pub async fn add_admin(
        &self,
        caller: &Caller,
        name: &str,
        password: Option<String>,
    ) -> Result<AdminRecord, ServiceError> {
        let target = AuditTarget::Admin(Some(name.to_owned()));
        self.audited(
            Operation::new(caller, AuditAction::AdminCreated, target.clone()),
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
                    id: new_id("adm").into(),
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
    pub async fn admin_id(&self, name: &str) -> Result<AdminId, ServiceError> {
        self.list_admins()
            .await?
            .into_iter()
            .find(|admin| admin.name == name)
            .map(|admin| admin.id)
            .ok_or_else(|| ServiceError::NotFound(format!("no administrator named \"{name}\"")))
    }

    /// Starts a change to an administrator (the operator's alone): the write transaction and
    /// the administrator.
    pub(super) async fn begin_admin_change(
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
    pub(super) async fn finish_admin_change(
        &self,
        tx: WriteTx,
        op: &Operation<'_>,
        detail: String,
        admin_id: &AdminId,
    ) -> Result<(), ServiceError> {
        self.commit_with_audit(tx, op, detail, Some(admin_id))
            .await?;
        self.admin_changed(admin_id);
        Ok(())
    }

    pub(super) async fn existing_admin(
        tx: &mut WriteTx,
        name: &str,
    ) -> Result<AdminRecord, ServiceError> {
        tx.admin(name)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no administrator named \"{name}\"")))
    }

    /// Changes an administrator (see [`AdminChange`]), audited: the operator's alone, and the
    /// one way an administrator changes. Returns the administrator as changed.
    pub async fn change_admin(
        &self,
        caller: &Caller,
        name: &str,
        change: AdminChange,
    ) -> Result<AdminRecord, ServiceError> {
        let op = Operation::new(
            caller,
            change.action(),
            AuditTarget::Admin(Some(name.to_owned())),
        );
        self.audited(op, async |op| {
            Self::operator_only(caller)?;
            change.check()?;
            // A password is hashed before the change begins: never while holding its turn.
            let phc = match &change {
                AdminChange::Password(password) => {
                    Some(hashed_password(self.passwords.as_ref(), password.0.clone()).await?)
                }
                _ => None,
            };
            let (mut tx, mut admin) = self.begin_admin_change(caller, name).await?;
            let detail = self.write_admin(&mut tx, &mut admin, change, phc).await?;
            self.finish_admin_change(tx, op, detail, &admin.id).await?;
            Ok(admin)
        })
        .await
    }

    /// Writes one change to `admin` in `tx` (`phc`: a new password's hash), and keeps `admin`
    /// as changed; what its audit record says.
    async fn write_admin(
        &self,
        tx: &mut WriteTx,
        admin: &mut AdminRecord,
        change: AdminChange,
        phc: Option<String>,
    ) -> Result<String, ServiceError> {
        let now = self.clock.now();
        let (setting, detail) = match change {
            AdminChange::Disable => {
                tx.disable_admin(&admin.id, now).await?;
                admin.status = AdminStatus::Disabled;
                return Ok(String::new());
            }
            AdminChange::RevokeTokens => {
                tx.revoke_admin_tokens(&admin.id, now).await?;
                return Ok(String::new());
            }
            AdminChange::BindIdentity { issuer, subject } => {
                let identity = PeerIdentity::token(&issuer, &subject).map_err(|reason| {
                    ServiceError::Invalid {
                        field: "identity",
                        reason,
                    }
                })?;
                tx.bind_admin_identity(&admin.id, (&issuer, &identity.subject), now)
                    .await
                    .map_err(store_conflict)?;
                return Ok(format!("token {issuer}:{subject}"));
            }
            AdminChange::UnbindIdentity { issuer, subject } => {
                if !tx
                    .unbind_admin_identity(&admin.id, (&issuer, &subject))
                    .await?
                {
                    return Err(ServiceError::NotFound(format!(
                        "administrator \"{}\" has no such identity bound",
                        admin.name
                    )));
                }
                return Ok(format!("token {issuer}:{subject}"));
            }
            AdminChange::Enable => {
                admin.status = AdminStatus::Active;
                (AdminSetting::Status(AdminStatus::Active), String::new())
            }
            AdminChange::Auditor(auditor) => {
                let role = |auditor: bool| if auditor { "auditor" } else { "admin" };
                let detail = format!("role {} -> {}", role(admin.auditor), role(auditor));
                admin.auditor = auditor;
                (AdminSetting::Auditor(auditor), detail)
            }
            AdminChange::Budget(budget) => {
                budget.apply_to(admin);
                let setting = AdminSetting::Budget {
                    model_allowed: admin.model_allowed,
                    tokens_per_day: admin.tokens_per_day,
                    tokens_per_month: admin.tokens_per_month,
                };
                (setting, describe_budget(admin))
            }
            AdminChange::Password(_) => {
                let phc = phc.ok_or_else(|| {
                    ServiceError::Internal("a password without its hash".to_owned())
                })?;
                (AdminSetting::PasswordHash(phc), String::new())
            }
        };
        tx.set_admin(&admin.id, &setting).await?;
        Ok(detail)
    }

    /// Issues an administrator token (for the admin API); returns it, once.
    pub async fn issue_admin_token(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<String, ServiceError> {
        let target = AuditTarget::Admin(Some(name.to_owned()));
        self.audited(
            Operation::new(caller, AuditAction::AdminTokenIssued, target.clone()),
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
            &AuditTarget::Admin(known.as_ref().map(|a| a.name.clone())),
            AuditOutcome::Denied(why.to_owned()),
            subject.map_or_else(String::new, |subject| format!("token subject {subject}")),
            known.as_ref().map(|a| &a.id),
        );
        entry.actor = AuditActor::Anonymous;
        if let Err(e) = self.store.accounts().append_audit(&entry).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    }

    /// Records a policy reload asked for by `caller` (applied or refused), in the caller's
    /// own audit trail.
    pub async fn record_policy_reload(
        &self,
        caller: &Caller,
        outcome: AuditOutcome,
        detail: String,
    ) {
        let entry = self.entry(
            caller,
            AuditAction::PolicyReloaded,
            &AuditTarget::Policy,
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
            &AuditTarget::AdminApi(operation.to_owned()),
            AuditOutcome::Denied(operation.to_owned()),
            format!("policies: {policies}"),
            caller.actor.admin_id(),
        );
        if let Err(e) = self.store.accounts().append_audit(&entry).await {
            tracing::error!(error = %e, "could not write an audit record");
        }
    }
}
