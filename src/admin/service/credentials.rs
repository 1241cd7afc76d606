//! A peer's credentials: API keys and token rotation (its password is a [`super::PeerChange`]).

use super::peers::active;
use super::*;

/// Longest grace period a rotation may give the old token: 30 days.
pub const MAX_GRACE_SECONDS: u64 = 30 * 24 * 3600;

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

impl AccountService {
    /// Issues a new API key for a peer (any earlier key stops); returns it, once.
    pub async fn issue_api_key(&self, caller: &Caller, name: &str) -> Result<String, ServiceError> {
        self.audited(
            Operation::new(
                caller,
                AuditAction::CredentialIssued,
                AuditTarget::Peer(name.to_owned()),
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
                AuditTarget::Peer(name.to_owned()),
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
}
