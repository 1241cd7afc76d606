//! `peergate call --client-id` without a token URL: from the agent's 401 to a token, the way
//! RFC 9728 lays out. The challenge's `resource_metadata` (else the well-known URL of the
//! endpoint called) names the protected-resource metadata, which must be on the endpoint's own
//! origin and name exactly the endpoint as its `resource` (§3.3); of its authorization servers
//! only one the verified card also names is taken (RFC 9728 §7.6: a metadata document naming a
//! server is no reason to trust it), and that server's metadata (RFC 8414, else OpenID
//! Connect's) must name its issuer exactly; its token endpoint is asked for a
//! client-credentials token for the resource (RFC 8707 `resource`). The call is then sent once
//! more.

use super::CliError;
use super::exit_status::{EXIT_AUTH_REFUSED, EXIT_OTHER, exit};
use crate::jose::fetch::Fetcher;
use serde_json::Value;

/// Where the token for `called` comes from: the token endpoint and the resource to name.
pub(super) struct Discovered {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The protected resource, for RFC 8707's `resource`.
    pub resource: String,
}

/// Follows a 401's `WWW-Authenticate` values for the endpoint `called`.
pub(super) async fn from_challenge(
    fetcher: &Fetcher,
    challenges: &[String],
    called: &reqwest::Url,
    card: &Value,
) -> Result<Discovered, CliError> {
    let metadata_url = followed(challenges, called)?;
    let document = json(fetcher, &metadata_url, "its protected-resource metadata").await?;
    let resource = resource_of(&document, called)?;
    let issuer = document["authorization_servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|issuer| card_names(card, issuer))
        .ok_or_else(|| {
            exit(
                EXIT_AUTH_REFUSED,
                "the protected-resource metadata names no authorization server the signed card names; give --token-url",
            )
        })?;
    let token_url = token_endpoint(fetcher, issuer).await?;
    Ok(Discovered {
        token_url,
        resource: resource.to_owned(),
    })
}

/// The metadata's URL: the challenges' pointer, else the endpoint's well-known URL; refused on
/// another origin than the endpoint's (a forged 401 could otherwise steer the secret away).
fn followed(challenges: &[String], called: &reqwest::Url) -> Result<String, CliError> {
    let pointed = challenges.iter().find_map(|value| resource_metadata(value));
    let metadata_url = match pointed {
        Some(url) => url,
        None => crate::a2a::resource_metadata::url(called.as_str())
            .ok_or_else(|| exit(EXIT_OTHER, "the endpoint called is not a URL"))?,
    };
    let metadata = reqwest::Url::parse(&metadata_url)
        .map_err(|_| exit(EXIT_OTHER, "the agent's resource_metadata is not a URL"))?;
    if metadata.origin() != called.origin() {
        return Err(exit(
            EXIT_OTHER,
            "the agent's resource_metadata is on another origin than the agent: not followed",
        ));
    }
    Ok(metadata_url)
}

/// The metadata's `resource`, when it is the endpoint called (RFC 9728 §3.3).
fn resource_of<'d>(document: &'d Value, called: &reqwest::Url) -> Result<&'d str, CliError> {
    let resource = document["resource"].as_str().unwrap_or_default();
    if resource.trim_end_matches('/') != called.as_str().trim_end_matches('/') {
        return Err(exit(
            EXIT_OTHER,
            "the protected-resource metadata describes another resource than the one called (RFC 9728 §3.3)",
        ));
    }
    Ok(resource)
}

/// Whether one of the card's security schemes leads to the authorization server `issuer`: a
/// URL it names (token, metadata or discovery) at the issuer or under its path.
fn card_names(card: &Value, issuer: &str) -> bool {
    let issuer = issuer.trim_end_matches('/');
    let under = |url: &str| {
        url.strip_prefix(issuer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let schemes = card["securitySchemes"].as_object().into_iter().flatten();
    schemes.map(|(_, scheme)| scheme).any(|scheme| {
        let oauth = &scheme["oauth2SecurityScheme"];
        [
            &oauth["oauth2MetadataUrl"],
            &oauth["flows"]["clientCredentials"]["tokenUrl"],
            &scheme["openIdConnectSecurityScheme"]["openIdConnectUrl"],
        ]
        .into_iter()
        .filter_map(Value::as_str)
        .any(under)
    })
}

/// The `resource_metadata` auth-param of a Bearer challenge.
fn resource_metadata(challenge: &str) -> Option<String> {
    let (_, rest) = challenge.split_once("resource_metadata=\"")?;
    let (url, _) = rest.split_once('"')?;
    Some(url.to_owned())
}

/// The token endpoint of the authorization server `issuer`, from its metadata whose `issuer`
/// is exactly `issuer`: RFC 8414's URL first, then OpenID Connect's.
async fn token_endpoint(fetcher: &Fetcher, issuer: &str) -> Result<String, CliError> {
    let urls = crate::layers::auth::jwt::metadata_urls(issuer)
        .map_err(|why| exit(EXIT_OTHER, format!("the authorization server: {why}")))?;
    let mut reasons = Vec::new();
    for url in urls.iter().rev() {
        match json(fetcher, url, "its authorization server's metadata").await {
            Ok(document) if document["issuer"].as_str() == Some(issuer) => {
                if let Some(endpoint) = document["token_endpoint"].as_str() {
                    return Ok(endpoint.to_owned());
                }
                reasons.push("no token_endpoint".to_owned());
            }
            Ok(_) => reasons.push("names another issuer (RFC 8414 §3.3)".to_owned()),
            Err(why) => reasons.push(why.message),
        }
    }
    Err(exit(
        EXIT_OTHER,
        format!(
            "the authorization server's metadata: {}",
            reasons.join("; ")
        ),
    ))
}

/// A JSON document fetched under the command's reach rules.
async fn json(fetcher: &Fetcher, url: &str, what: &str) -> Result<Value, CliError> {
    let text = fetcher
        .text(url)
        .await
        .map_err(|e| exit(EXIT_OTHER, format!("cannot read {what}: {e}")))?;
    serde_json::from_str(&text).map_err(|_| exit(EXIT_OTHER, format!("{what} is not JSON")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pointer_is_read_from_a_bearer_challenge() {
        let challenge = r#"Bearer realm="peergate", error="invalid_token", resource_metadata="https://gw.example/.well-known/oauth-protected-resource/a2a/v1""#;
        assert_eq!(
            resource_metadata(challenge).as_deref(),
            Some("https://gw.example/.well-known/oauth-protected-resource/a2a/v1")
        );
        assert_eq!(resource_metadata(r#"Bearer realm="peergate""#), None);
    }

    #[test]
    fn only_metadata_on_the_agents_origin_for_the_resource_called_is_followed() {
        let called = reqwest::Url::parse("https://gw.example/a2a/v1").unwrap();
        let pointing = |url: &str| vec![format!(r#"Bearer realm="x", resource_metadata="{url}""#)];
        let own = "https://gw.example/.well-known/oauth-protected-resource/a2a/v1";
        assert_eq!(followed(&pointing(own), &called).unwrap(), own);
        assert_eq!(followed(&[], &called).unwrap(), own);
        let away = pointing("https://evil.example/.well-known/oauth-protected-resource/a2a/v1");
        assert!(
            followed(&away, &called)
                .unwrap_err()
                .message
                .contains("another origin")
        );
        let elsewhere = serde_json::json!({"resource": "https://gw.example/other"});
        assert!(resource_of(&elsewhere, &called).is_err());
        let same = serde_json::json!({"resource": "https://gw.example/a2a/v1"});
        assert_eq!(
            resource_of(&same, &called).unwrap(),
            "https://gw.example/a2a/v1"
        );
    }

    #[test]
    fn only_a_server_the_signed_card_names_is_trusted() {
        let card = serde_json::json!({"securitySchemes": {
            "oauth2-corp": {"openIdConnectSecurityScheme": {
                "openIdConnectUrl": "https://login.corp.example/tenant/.well-known/openid-configuration"}},
        }});
        assert!(card_names(&card, "https://login.corp.example/tenant"));
        assert!(card_names(&card, "https://login.corp.example/tenant/"));
        assert!(!card_names(&card, "https://login.corp.example/ten"));
        assert!(!card_names(&card, "https://evil.example"));
    }
}
