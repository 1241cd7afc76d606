//! Identities bound to peers and administrators: an identity provider's subject, or a client
//! certificate, names one of them.

use super::*;

impl AccountService {
    /// A token identity names an issuer the policy defines, when the policy is known.
    pub(super) fn check_issuer(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
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

    /// Binds `subject` at the identity provider `issuer` (`[admin.issuer]`'s name) to an
    /// administrator: the provider's tokens for that subject sign them in to the admin API.
    pub async fn bind_admin_identity(
        &self,
        caller: &Caller,
        name: &str,
        (issuer, subject): (&str, &str),
    ) -> Result<(), ServiceError> {
        let target = AuditTarget::Admin(Some(name.to_owned()));
        self.audited(
            Operation::new(caller, AuditAction::AdminIdentityBound, target.clone()),
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
        let target = AuditTarget::Admin(Some(name.to_owned()));
        self.audited(
            Operation::new(caller, AuditAction::AdminIdentityUnbound, target.clone()),
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
                AuditTarget::Peer(name.to_owned()),
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
                AuditTarget::Peer(name.to_owned()),
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
    pub(super) async fn by_visible_peer<T>(
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
}
