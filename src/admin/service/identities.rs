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
