//! Peers: created with their owner, read by those who may see them, and changed by one
//! audited method ([`PeerChange`]), revoked and reinstated.

use super::credentials::{CredentialWrite, MAX_GRACE_SECONDS, PeerChanged};
use super::*;

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

/// A change to one of a peer's settings, applied by [`AccountService::change_peer`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PeerChange {
    /// Its quota, in requests per minute.
    Limit(u32),
    /// Its own daily token budget, or `None` for only its owner's. Both apply: a turn is
    /// refused when either is spent.
    Budget(Option<u64>),
    /// Its own cap on open streams, or `None` for the policy's (`limits.streams_per_peer`).
    Streams(Option<u32>),
    /// Whether its own trace context is continued (`true`: its `traceparent` becomes the
    /// parent of its calls' spans, so it decides their trace id and sampling) or only linked.
    TraceTrust(bool),
    /// The operations it may call (`None`: every one the policy offers again). A running
    /// gateway hears of it like a revocation.
    Operations(Option<OperationSet>),
    /// When it expires (`None`: never).
    Expiry(Option<Timestamp>),
    /// The password it uses with Basic authentication.
    Password(NewPassword),
    /// An identity bound to it: from now on it opens the door as this peer. One bound to any
    /// peer already is a conflict (one identity names one peer).
    BindIdentity(PeerIdentity),
    /// An identity unbound from it: its tokens or certificate stop opening the door at once
    /// here, and within a second on other instances.
    UnbindIdentity(PeerIdentity),
    /// A new API key (any earlier key stops), given back once.
    ApiKey,
    /// A new token, given back once; the old ones stop at once (a zero grace period) or when
    /// the grace period ends (at most [`MAX_GRACE_SECONDS`]).
    Rotate(std::time::Duration),
    /// Every credential it holds stops working.
    Revoke,
    /// A revoked peer let in again under its name, with a new token given back once; its old
    /// credentials stay revoked, its audit records and conversations stay its own. Peers are
    /// reinstated rather than deleted, so a name is never reused by a different partner whose
    /// records would mix with the old one's.
    Reinstate,
}

/// A peer change as it is written: a setting, or an identity bound or unbound.
enum PeerWrite {
    Setting(PeerSetting),
    Bind(PeerIdentity),
    Unbind(PeerIdentity),
    Credential(CredentialWrite),
}

impl PeerChange {
    fn action(&self) -> AuditAction {
        match self {
            Self::Limit(_) | Self::Budget(_) | Self::Streams(_) => AuditAction::PeerLimitChanged,
            Self::TraceTrust(_) => AuditAction::PeerTraceTrustChanged,
            Self::Operations(_) => AuditAction::PeerOperationsChanged,
            Self::Expiry(_) => AuditAction::PeerExpiryChanged,
            Self::Password(_) => AuditAction::CredentialIssued,
            Self::BindIdentity(_) => AuditAction::PeerIdentityBound,
            Self::UnbindIdentity(_) => AuditAction::PeerIdentityUnbound,
            Self::ApiKey => AuditAction::CredentialIssued,
            Self::Rotate(_) => AuditAction::CredentialRotated,
            Self::Revoke => AuditAction::CredentialRevoked,
            Self::Reinstate => AuditAction::PeerReinstated,
        }
    }

    /// Refused before anything is read.
    fn check(&self, now: Timestamp) -> Result<(), ServiceError> {
        match self {
            Self::Limit(rate) => check_rate(*rate),
            Self::Budget(Some(0)) => Err(ServiceError::Invalid {
                field: "tokensPerDay",
                reason: "must be at least 1 (revoke the peer to stop it), or none".to_owned(),
            }),
            Self::Streams(Some(n)) if !(1..=MAX_STREAMS_PER_PEER).contains(n) => {
                Err(ServiceError::Invalid {
                    field: "streams",
                    reason: format!(
                        "must be from 1 to {MAX_STREAMS_PER_PEER}, or the policy's default"
                    ),
                })
            }
            Self::Expiry(at) => check_future(*at, now),
            Self::Rotate(grace) if grace.as_secs() > MAX_GRACE_SECONDS => {
                Err(ServiceError::Invalid {
                    field: "grace",
                    reason: format!("at most {MAX_GRACE_SECONDS} seconds (30 days)"),
                })
            }
            _ => Ok(()),
        }
    }
}

/// What the audit record says of `setting` replacing what `peer` had (never a secret).
pub(super) fn described(peer: &PeerRecord, setting: &PeerSetting) -> String {
    let or = |n: Option<u64>, none: &str| n.map_or_else(|| none.to_owned(), |n| n.to_string());
    match setting {
        PeerSetting::Rate(rate) => format!("rate {} -> {rate}/min", peer.rate_per_minute),
        PeerSetting::TokensPerDay(tokens) => format!(
            "tokens per day {} -> {}",
            or(peer.tokens_per_day, "none (the owner's)"),
            or(*tokens, "none (the owner's)")
        ),
        PeerSetting::MaxStreams(cap) => format!(
            "open streams {} -> {}",
            or(peer.max_streams.map(u64::from), "the policy's"),
            or(cap.map(u64::from), "the policy's")
        ),
        PeerSetting::TrustsTrace(trusted) => {
            let show = |trusted: bool| if trusted { "trusted" } else { "linked" };
            format!(
                "trace context {} -> {}",
                show(peer.trusts_trace),
                show(*trusted)
            )
        }
        PeerSetting::Operations(set) => {
            let show = |set: Option<OperationSet>| {
                set.map_or_else(|| "all".to_owned(), OperationSet::to_text)
            };
            format!("operations {} -> {}", show(peer.operations), show(*set))
        }
        PeerSetting::ExpiresAt(at) => {
            let show =
                |at: Option<Timestamp>| at.map_or_else(|| "never".to_owned(), rfc3339_millis);
            format!("expiry {} -> {}", show(peer.expires_at), show(*at))
        }
        PeerSetting::PasswordHash(_) => "password set".to_owned(),
    }
}

/// Checks a new peer's name: [`check_name`], and not shaped like a peer id (`peer_` and 32
/// hexadecimal digits), which the audit log and the admin API would show beside real ids.
pub(super) fn check_peer_name(name: &str) -> Result<(), ServiceError> {
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

pub(super) fn check_rate(rate: u32) -> Result<(), ServiceError> {
    if (1..=MAX_RATE_PER_MINUTE).contains(&rate) {
        Ok(())
    } else {
        Err(ServiceError::Invalid {
            field: "rate",
            reason: format!("must be from 1 to {MAX_RATE_PER_MINUTE} requests a minute"),
        })
    }
}

/// The furthest an expiry may lie ahead: anything later is a mistake (a year typed with an
/// extra digit), and "never" is said by no expiry at all.
pub(super) const LONGEST_EXPIRY: std::time::Duration =
    std::time::Duration::from_secs(100 * 366 * 24 * 3600);

/// Refuses an expiry that is not in the future, or lies more than a hundred years ahead.
pub(super) fn check_future(
    expires_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<(), ServiceError> {
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

pub(super) fn active(peer: PeerRecord) -> Result<PeerRecord, ServiceError> {
    if peer.status == PeerStatus::Active {
        Ok(peer)
    } else {
        Err(ServiceError::Conflict(format!(
            "peer \"{}\" is revoked and takes no new credentials",
            peer.name
        )))
    }
}

pub(super) async fn tx_admin_id(tx: &mut WriteTx, name: &str) -> Result<AdminId, ServiceError> {
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

impl AccountService {
    /// Creates a peer and its first token.
    pub async fn create_peer(
        &self,
        caller: &Caller,
        new: NewPeer,
    ) -> Result<CreatedPeer, ServiceError> {
        let target = AuditTarget::Peer(new.name.clone());
        self.audited(
            Operation::new(caller, AuditAction::PeerCreated, target.clone()),
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
                    AuditOutcome::Ok,
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
                        AuditOutcome::Ok,
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
    pub(super) async fn new_peer_owner(
        &self,
        tx: &mut WriteTx,
        caller: &Caller,
        named: Option<&str>,
    ) -> Result<(AdminId, String), ServiceError> {
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
    pub(super) async fn operator_owner(
        &self,
        tx: &mut WriteTx,
        caller: &Caller,
        named: Option<&str>,
    ) -> Result<(AdminId, String), ServiceError> {
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
            id: new_id("adm").into(),
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
            &AuditTarget::Admin(Some(name.to_owned())),
            AuditOutcome::Ok,
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
        let op = Operation::new(
            caller,
            AuditAction::PeerRead,
            AuditTarget::Peer(name.to_owned()),
        );
        self.audited(op, async |_| self.readable_peer(caller, name).await)
            .await
    }

    pub(super) async fn readable_peer(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<PeerRecord, ServiceError> {
        match self.store.accounts().find_peer(name).await? {
            Some(peer) if may_act_on(caller, &peer.owner_id) => Ok(peer),
            _ => Err(ServiceError::NotFound(format!("no peer named \"{name}\""))),
        }
    }

    /// Starts a change to a peer the caller may act on: the write transaction and the peer.
    pub(super) async fn begin_change(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(WriteTx, PeerRecord), ServiceError> {
        let mut tx = self.store.accounts().begin_change().await?;
        let peer = self.owned_peer(&mut tx, caller, name).await?;
        Ok((tx, peer))
    }

    /// Ends a change with its audit record, commits both, and tells the running gateway.
    pub(super) async fn finish_change(
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

    /// Changes one of a peer's settings (see [`PeerChange`]), audited: the one way a peer's
    /// settings change.
    pub async fn change_peer(
        &self,
        caller: &Caller,
        name: &str,
        change: PeerChange,
    ) -> Result<PeerChanged, ServiceError> {
        let op = Operation::new(caller, change.action(), AuditTarget::Peer(name.to_owned()));
        self.audited(op, async |op| {
            change.check(self.clock.now())?;
            if let PeerChange::BindIdentity(identity) = &change {
                self.check_issuer(identity)?;
            }
            let written = self.peer_write(change).await?;
            let (mut tx, peer) = self.begin_change(caller, name).await?;
            let (detail, changed) = self.write_peer(&mut tx, &peer, written).await?;
            self.finish_change(tx, op, &peer, detail).await?;
            // Every instance's set of known credential ids holds it before it is handed out.
            if let Some(token_id) = &changed.token_id {
                self.credential_issued(&peer.id, token_id);
            }
            Ok(changed)
        })
        .await
    }

    /// `change` as it is written: a password hashed first, never while holding the change's
    /// turn to write.
    async fn peer_write(&self, change: PeerChange) -> Result<PeerWrite, ServiceError> {
        let setting = |setting| Ok(PeerWrite::Setting(setting));
        let credential = |write| Ok(PeerWrite::Credential(write));
        match change {
            PeerChange::Limit(rate) => setting(PeerSetting::Rate(rate)),
            PeerChange::Budget(tokens) => setting(PeerSetting::TokensPerDay(tokens)),
            PeerChange::Streams(cap) => setting(PeerSetting::MaxStreams(cap)),
            PeerChange::TraceTrust(trusted) => setting(PeerSetting::TrustsTrace(trusted)),
            PeerChange::Operations(set) => setting(PeerSetting::Operations(set)),
            PeerChange::Expiry(at) => setting(PeerSetting::ExpiresAt(at)),
            PeerChange::Password(password) => setting(PeerSetting::PasswordHash(
                hashed_password(self.passwords.as_ref(), password.0).await?,
            )),
            PeerChange::BindIdentity(identity) => Ok(PeerWrite::Bind(identity)),
            PeerChange::UnbindIdentity(identity) => Ok(PeerWrite::Unbind(identity)),
            PeerChange::ApiKey => {
                credential(CredentialWrite::ApiKey(issue(CredentialKind::ApiKey)?))
            }
            PeerChange::Rotate(grace) => credential(CredentialWrite::Rotate(
                issue(CredentialKind::PeerToken)?,
                grace,
            )),
            PeerChange::Revoke => credential(CredentialWrite::Revoke),
            PeerChange::Reinstate => credential(CredentialWrite::Reinstate(issue(
                CredentialKind::PeerToken,
            )?)),
        }
    }

    /// Writes one change to `peer` in `tx`; what its audit record says.
    async fn write_peer(
        &self,
        tx: &mut WriteTx,
        peer: &PeerRecord,
        written: PeerWrite,
    ) -> Result<(String, PeerChanged), ServiceError> {
        let name = &peer.name;
        let detail = match written {
            PeerWrite::Credential(write) => return self.write_credential(tx, peer, write).await,
            PeerWrite::Setting(setting) => {
                tx.set_peer(&peer.id, &setting).await?;
                described(peer, &setting)
            }
            PeerWrite::Bind(identity) => {
                if peer.status == PeerStatus::Revoked {
                    return Err(ServiceError::Conflict(format!(
                        "peer \"{name}\" is revoked; reinstate it first"
                    )));
                }
                tx.bind_identity(&peer.id, &identity, self.clock.now())
                    .await
                    .map_err(store_conflict)?;
                identity.describe()
            }
            PeerWrite::Unbind(identity) => {
                if !tx.unbind_identity(&peer.id, &identity).await? {
                    return Err(ServiceError::NotFound(format!(
                        "peer \"{name}\" has no such identity bound"
                    )));
                }
                identity.describe()
            }
        };
        Ok((detail, PeerChanged::default()))
    }
}
