//! What the authentication layers read: credentials, logins and bound identities.

use super::rows::{AdminLoginRow, LoginRow};
use super::{SqlEngine, sql};
use crate::clock::Timestamp;
use crate::store::{
    AdminLogin, CredentialRecord, CredentialStore, PeerId, PeerIdentity, PeerLogin, StoreError,
};
use crate::token::{CredentialKind, TokenSecretHash};
use async_trait::async_trait;

/// A peer's columns as authentication reads them, from `peers p`.
macro_rules! login_columns {
    () => {
        "p.name, p.status, p.rate_per_minute, p.max_streams, p.trusts_trace, p.operations, \
         p.owner_id"
    };
}

#[async_trait]
impl<E: SqlEngine> CredentialStore for E {
    async fn credential_ids(&self) -> Result<Vec<String>, StoreError> {
        let ids: Vec<(String,)> = sql("SELECT token_id FROM credentials")
            .fetch_all(self.reads())
            .await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    async fn find_credential(
        &self,
        kind: CredentialKind,
        token_id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        // A credential ends with its own expiry or its peer's, whichever comes first.
        let row: Option<LoginRow> = sql(concat!(
            "SELECT c.peer_id, c.secret_hash, c.revoked_at, ",
            login_columns!(),
            ", LEAST(coalesce(c.expires_at, p.expires_at), coalesce(p.expires_at, c.expires_at)) \
             AS valid_until FROM credentials c JOIN peers p ON p.id = c.peer_id \
             WHERE c.token_id = $1 AND c.kind = $2"
        ))
        .bind(token_id)
        .bind(kind.as_str())
        .fetch_optional(self.reads())
        .await?;
        Ok(row.and_then(LoginRow::credential))
    }

    async fn find_peer_login(&self, name: &str) -> Result<Option<PeerLogin>, StoreError> {
        let row: Option<LoginRow> = sql(concat!(
            "SELECT p.id AS peer_id, p.password_hash, ",
            login_columns!(),
            ", p.expires_at AS valid_until FROM peers p WHERE p.name = $1"
        ))
        .bind(name)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.map(LoginRow::login))
    }

    async fn find_bound_peer(
        &self,
        identity: &PeerIdentity,
    ) -> Result<Option<PeerLogin>, StoreError> {
        // Signed in by its identity: never with a password.
        let row: Option<LoginRow> = sql(concat!(
            "SELECT p.id AS peer_id, ",
            login_columns!(),
            ", p.expires_at AS valid_until FROM peer_identities i JOIN peers p ON p.id = i.peer_id \
             WHERE i.kind = $1 AND i.issuer = $2 AND i.subject = $3"
        ))
        .bind(identity.kind.as_str())
        .bind(&identity.issuer)
        .bind(&identity.subject)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.map(LoginRow::login))
    }

    async fn find_bound_admin(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<AdminLogin>, StoreError> {
        let row: Option<AdminLoginRow> = sql(
            "SELECT a.id, a.name, a.status, a.role FROM admin_identities i \
             JOIN admins a ON a.id = i.admin_id WHERE i.issuer = $1 AND i.subject = $2",
        )
        .bind(issuer)
        .bind(subject)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.map(AdminLoginRow::login))
    }

    async fn find_admin_login(&self, name: &str) -> Result<Option<AdminLogin>, StoreError> {
        let row: Option<AdminLoginRow> =
            sql("SELECT id, name, password_hash, status, role FROM admins WHERE name = $1")
                .bind(name)
                .fetch_optional(self.reads())
                .await?;
        Ok(row.map(AdminLoginRow::login))
    }

    async fn find_admin_token(
        &self,
        token_id: &str,
    ) -> Result<Option<(AdminLogin, TokenSecretHash)>, StoreError> {
        let row: Option<AdminLoginRow> = sql(
            "SELECT a.id, a.name, a.status, a.role, t.secret_hash, t.revoked_at \
             FROM admin_tokens t JOIN admins a ON a.id = t.admin_id WHERE t.token_id = $1",
        )
        .bind(token_id)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.and_then(AdminLoginRow::with_token))
    }

    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp) {
        SqlEngine::record_peer_use(self, peer_id, now);
    }
}
