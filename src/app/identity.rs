//! The identity providers of the policy, for the guard and for the cards.

use super::{StartError, config};
use crate::a2a::card;
use crate::clock::Clock;
use crate::config::Policy;
use crate::layers::auth::AuthSettings;
use crate::layers::limit::Quota;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn auth_settings(
    policy: &Policy,
    cache_ttl: Duration,
    failed_attempts: Option<crate::layers::auth::SharedAttempts>,
) -> Result<AuthSettings, StartError> {
    let (failed_attempts, admitted_attempts) = failed_attempts.unzip();
    Ok(AuthSettings {
        schemes: policy.auth_schemes().to_vec(),
        api_key_header: axum::http::HeaderName::from_bytes(policy.auth.api_key_header.as_bytes())
            .map_err(|e| config(&e))?,
        api_key_header_label: policy.auth.api_key_header.clone(),
        cache_ttl,
        password_checks_at_once: policy.auth.password_checks_at_once.usize(),
        failed_auth_quota: Quota::per_minute(policy.limits.failed_auth_per_ip_per_minute.u32()),
        tracked_addresses: policy.limits.tracked_addresses.usize(),
        failed_attempts,
        admitted_attempts,
        known_ids: None,
        identity_providers: None,
        resource_metadata: None,
    })
}

/// How the cards describe the identity providers: the token endpoint configured, else the one
/// discovery names (asked now, for providers whose keys come from discovery; one that does not
/// answer is described by its discovery document's URL instead, and the start goes on).
pub(super) async fn issuer_cards(
    policy: &Policy,
    providers: Option<&crate::layers::auth::jwt::IdentityProviders>,
) -> Vec<card::IssuerCard> {
    let mut cards = Vec::new();
    for issuer in &policy.auth.issuers {
        let discovering = issuer.jwks_uri.is_none() && issuer.jwks_file.is_none();
        let discovered = match (providers, discovering && issuer.token_url.is_none()) {
            (Some(providers), true) => providers.discovered(&issuer.name).await,
            _ => None,
        };
        cards.push(card::IssuerCard {
            name: issuer.name.clone(),
            issuer: issuer.issuer.clone(),
            token_url: issuer
                .token_url
                .clone()
                .or_else(|| discovered.as_ref().and_then(|d| d.token_endpoint.clone())),
            metadata_url: discovered.map_or_else(
                || {
                    format!(
                        "{}/.well-known/openid-configuration",
                        issuer.issuer.trim_end_matches('/')
                    )
                },
                |d| d.metadata_url,
            ),
            public: issuer.public,
        });
    }
    cards
}

/// The identity providers of `[[auth.issuers]]`.
pub(super) fn identity_providers(
    policy: &Policy,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<crate::layers::auth::jwt::IdentityProviders>>, StartError> {
    providers_of(&issuer_tables(policy), clock)
}

/// `[[auth.issuers]]`, each with the table that names it.
pub(super) fn issuer_tables(policy: &Policy) -> Vec<(String, &crate::config::IssuerPolicy)> {
    policy
        .auth
        .issuers
        .iter()
        .enumerate()
        .map(|(at, issuer)| (format!("auth.issuers[{at}]"), issuer))
        .collect()
}

/// The providers of `issuers` (each with the table that names it). A key set named by
/// `jwks_file` is read and checked now: one that cannot be read, or holds no usable key, stops
/// start-up naming the setting.
pub(super) fn providers_of(
    issuers: &[(String, &crate::config::IssuerPolicy)],
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<crate::layers::auth::jwt::IdentityProviders>>, StartError> {
    if issuers.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(providers(issuers, clock)?)))
}

/// The providers of `issuers`, however many (none is a set that refuses every token).
pub(super) fn providers(
    issuers: &[(String, &crate::config::IssuerPolicy)],
    clock: &Arc<dyn Clock>,
) -> Result<crate::layers::auth::jwt::IdentityProviders, StartError> {
    use crate::layers::auth::jwt::{IdentityProviders, IssuerSettings, KeySource};
    let mut settings = Vec::new();
    for (table, issuer) in issuers {
        let keys = match (&issuer.jwks_file, &issuer.jwks_uri) {
            (Some(path), _) => KeySource::Fixed(std::fs::read_to_string(path).map_err(|e| {
                StartError::Config(format!("{table}.jwks_file: cannot be read ({})", e.kind()))
            })?),
            (None, Some(uri)) => KeySource::Uri(uri.clone()),
            (None, None) => KeySource::Discovery,
        };
        settings.push(IssuerSettings {
            name: issuer.name.clone(),
            rules: crate::jose::access_token::AccessTokenRules {
                issuer: issuer.issuer.clone(),
                audience: issuer.audience.clone(),
                algorithms: issuer.algorithms.clone(),
                plain_jwt: issuer.plain_jwt,
                skew: issuer.clock_skew_seconds.duration(),
                max_lifetime: issuer.max_token_lifetime_seconds.duration(),
                client_id_required: issuer.client_id_required,
                claims: issuer.claims.clone(),
            },
            keys,
            require_scopes: issuer.require_scopes,
            dangerous_allow_http_loopback: issuer.dangerous_allow_http_loopback,
        });
    }
    IdentityProviders::new(
        settings,
        &crate::jose::fetch::FetchPolicy::default(),
        clock.clone(),
    )
    .map_err(StartError::Config)
}
