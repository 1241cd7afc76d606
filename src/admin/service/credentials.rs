//! A peer's credentials as changes to it: a new API key, a rotated token, revoking the peer and
//! letting it in again (its password is a [`super::PeerChange`] setting).

use super::peers::active;
use super::*;
use std::time::Duration;

/// Longest grace period a rotation may give the old token: 30 days.
pub const MAX_GRACE_SECONDS: u64 = 30 * 24 * 3600;

/// What a change to a peer gave back.
#[derive(Default)]
pub struct PeerChanged {
    /// The credential the change issued (an API key, a rotated or reinstated token): shown
    /// once, never in `Debug`.
    pub secret: Option<String>,
    /// After a rotation with a grace period: until when the old tokens still work.
    pub previous_valid_until: Option<Timestamp>,
    /// The issued credential's public id, for the running gateways to know it.
    pub(super) token_id: Option<String>,
}

impl std::fmt::Debug for PeerChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerChanged")
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("previous_valid_until", &self.previous_valid_until)
            .finish_non_exhaustive()
    }
}

/// A credential change as it is written, its token issued before the change begins.
pub(super) enum CredentialWrite {
    ApiKey(token::IssuedToken),
    Rotate(token::IssuedToken, Duration),
    Revoke,
    Reinstate(token::IssuedToken),
}

impl AccountService {
    /// Writes a credential change to `peer` in `tx`; what its audit record says, and what the
    /// change gives back.
    pub(super) async fn write_credential(
        &self,
        tx: &mut WriteTx,
        peer: &PeerRecord,
        write: CredentialWrite,
    ) -> Result<(String, PeerChanged), ServiceError> {
        let now = self.clock.now();
        let (issued, kind, detail, previous_valid_until) = match write {
            CredentialWrite::Revoke => {
                tx.revoke_peer(&peer.id, now).await?;
                let detail = "peer revoked with all its credentials".to_owned();
                return Ok((detail, PeerChanged::default()));
            }
            CredentialWrite::ApiKey(issued) => {
                active(peer.clone())?;
                tx.revoke_credentials(&peer.id, Some(CredentialKind::ApiKey), now)
                    .await?;
                let detail = format!("API key id {}; earlier keys revoked", issued.token_id);
                (issued, CredentialKind::ApiKey, detail, None)
            }
            CredentialWrite::Rotate(issued, grace) => {
                active(peer.clone())?;
                let until = self.retire_tokens(tx, peer, grace).await?;
                let detail = format!(
                    "new token id {}; old tokens {}",
                    issued.token_id,
                    until.map_or_else(
                        || "revoked at once".to_owned(),
                        |until| format!("work until {}", rfc3339_millis(until))
                    )
                );
                (issued, CredentialKind::PeerToken, detail, until)
            }
            CredentialWrite::Reinstate(issued) => {
                if peer.status != PeerStatus::Revoked {
                    return Err(ServiceError::Conflict(format!(
                        "peer \"{}\" is not revoked; rotate its token instead",
                        peer.name
                    )));
                }
                tx.reinstate_peer(&peer.id).await?;
                let detail = format!("reinstated with new token id {}", issued.token_id);
                (issued, CredentialKind::PeerToken, detail, None)
            }
        };
        tx.insert_credential(&peer.id, kind, &issued.token_id, &issued.secret_hash, now)
            .await?;
        let changed = PeerChanged {
            secret: Some(issued.token),
            previous_valid_until,
            token_id: Some(issued.token_id),
        };
        Ok((detail, changed))
    }

    /// A rotation's old tokens: revoked at once (no `grace`), or working until it ends (when).
    async fn retire_tokens(
        &self,
        tx: &mut WriteTx,
        peer: &PeerRecord,
        grace: Duration,
    ) -> Result<Option<Timestamp>, ServiceError> {
        let now = self.clock.now();
        if grace.is_zero() {
            tx.revoke_credentials(&peer.id, Some(CredentialKind::PeerToken), now)
                .await?;
            return Ok(None);
        }
        let until = crate::clock::later(now, grace);
        tx.expire_credentials(&peer.id, CredentialKind::PeerToken, until)
            .await?;
        Ok(Some(until))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_a_change_and_a_secret_it_gives_back_are_never_in_debug() {
        let change = PeerChange::Password(NewPassword("correct horse battery".into()));
        assert!(!format!("{change:?}").contains("horse"));
        let admin = AdminChange::Password(NewPassword("correct horse battery".into()));
        assert!(!format!("{admin:?}").contains("horse"));
        let changed = PeerChanged {
            secret: Some("pgt_secret_token".into()),
            ..PeerChanged::default()
        };
        assert!(!format!("{changed:?}").contains("pgt_secret"));
    }
}
