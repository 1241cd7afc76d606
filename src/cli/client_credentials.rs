//! `peergate call --client-id`: an access token from the agent's identity provider by OAuth 2.0
//! client credentials (RFC 6749 §4.4), kept until shortly before it expires.
//!
//! * The secret comes from an environment variable the caller names, never from the command
//!   line, and goes only to the token endpoint: the one `--token-url` names, or the one a
//!   *verified* card names in its `oauth2SecurityScheme` (an unverified card could steer the
//!   secret anywhere, so it is never asked). `https`, or `http` to loopback; no redirects.
//! * The token is kept in the user's cache directory (`$XDG_CACHE_HOME/peergate`, else
//!   `~/.cache/peergate`; the directory 0700, the file 0600) under a hash of the endpoint, the
//!   client id and the scopes, and used again while more than a minute of it is left.

use super::CliError;
use super::exit_status::{EXIT_AUTH_REFUSED, EXIT_OTHER, exit};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// What a token request needs.
pub(super) struct Request<'a> {
    /// The client id.
    pub client_id: &'a str,
    /// The environment variable holding the secret.
    pub secret_env: Option<&'a str>,
    /// The scopes, space-separated.
    pub scope: &'a str,
    /// The endpoint the caller named.
    pub token_url: Option<&'a str>,
    /// The card, when its signature verified.
    pub card: Option<&'a Value>,
    /// The protected resource the token is for (RFC 8707), when discovery named it.
    pub resource: Option<&'a str>,
}

/// How long before its end a kept token is no longer used.
const MARGIN_SECONDS: u64 = 60;

/// An access token for `request`: a kept one with time left, else a new one.
pub(super) async fn access_token(
    fetcher: &crate::jose::fetch::Fetcher,
    request: Request<'_>,
) -> Result<String, CliError> {
    let token_url = token_url(&request)?;
    let client = fetcher.client_for(&token_url).map_err(|why| {
        let shown = crate::jose::fetch::shown_url(&token_url);
        exit(EXIT_OTHER, format!("the token URL {shown}: {why}"))
    })?;
    let token_url = token_url.to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let kept = cache_path(
        &token_url,
        request.client_id,
        request.scope,
        request.resource.unwrap_or_default(),
    );
    if let Some(token) = kept.as_ref().and_then(|path| read_kept(path, now)) {
        return Ok(token);
    }
    let secret = client_secret(&request)?;
    let (token, lifetime) = ask_token_endpoint(client, &token_url, &request, &secret).await?;
    if let Some(path) = kept
        && lifetime > MARGIN_SECONDS
    {
        keep(&path, &token, now + lifetime);
    }
    Ok(token)
}

/// The client secret, from the variable `--client-secret-env` names.
fn client_secret(request: &Request<'_>) -> Result<String, CliError> {
    match request.secret_env {
        Some(name) => std::env::var(name).map_err(|_| {
            exit(
                EXIT_OTHER,
                format!("--client-secret-env: the environment variable {name} is not set"),
            )
        }),
        None => Err(exit(
            EXIT_OTHER,
            "--client-id needs --client-secret-env VAR naming the variable that holds the secret",
        )),
    }
}

/// The token endpoint's access token and its lifetime in seconds (0 when not given), for the
/// client credentials grant; a refusal shows the provider's error code and nothing else.
async fn ask_token_endpoint(
    client: &reqwest::Client,
    token_url: &str,
    request: &Request<'_>,
    secret: &str,
) -> Result<(String, u64), CliError> {
    let mut form = format!(
        "grant_type=client_credentials&scope={}",
        form_encode(request.scope)
    );
    if let Some(resource) = request.resource {
        form.push_str(&format!("&resource={}", form_encode(resource)));
    }
    let response = client
        .post(token_url)
        // RFC 6749 §2.3.1: the id and secret are form-encoded before Basic.
        .basic_auth(form_encode(request.client_id), Some(form_encode(secret)))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .timeout(Duration::from_secs(20))
        .body(form)
        .send()
        .await
        .map_err(|_| {
            exit(
                EXIT_OTHER,
                format!(
                    "cannot reach the token endpoint {}",
                    reqwest::Url::parse(token_url).map_or_else(
                        |_| "<not a URL>".to_owned(),
                        |u| crate::jose::fetch::shown_url(&u)
                    )
                ),
            )
        })?;
    let status = response.status().as_u16();
    let mut response = response;
    let body = crate::net::client::read_bounded(&mut response, 64 * 1024)
        .await
        .map_err(|_| {
            exit(
                EXIT_OTHER,
                "the token endpoint's answer broke off or is too large",
            )
        })?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status != 200 {
        // The provider's error code (RFC 6749 §5.2) is a fixed word; nothing else is shown.
        let code = answer["error"]
            .as_str()
            .filter(|c| c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .unwrap_or("no error code");
        return Err(exit(
            EXIT_AUTH_REFUSED,
            format!("the identity provider refused the client (HTTP {status}, {code})"),
        ));
    }
    let token = answer["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            exit(
                EXIT_OTHER,
                "the token endpoint's answer holds no access_token",
            )
        })?
        .to_owned();
    let lifetime = answer["expires_in"].as_u64().unwrap_or(0);
    Ok((token, lifetime))
}

/// Whether the card, verified, names a client-credentials token URL.
pub(super) fn names_token_url(card: &Value, verified: bool) -> bool {
    verified && card_token_url(card).is_some()
}

/// The token URL of the card's client-credentials flow.
fn card_token_url(card: &Value) -> Option<&str> {
    card["securitySchemes"]
        .as_object()
        .into_iter()
        .flat_map(|schemes| schemes.values())
        .find_map(|scheme| {
            scheme["oauth2SecurityScheme"]["flows"]["clientCredentials"]["tokenUrl"].as_str()
        })
}

/// The endpoint: the caller's, else the verified card's client-credentials flow's.
fn token_url(request: &Request<'_>) -> Result<reqwest::Url, CliError> {
    let url = match (request.token_url, request.card) {
        (Some(url), _) => url.to_owned(),
        (None, Some(card)) => card_token_url(card)
            .ok_or_else(|| {
                exit(
                    EXIT_OTHER,
                    "the card names no client-credentials token URL; give --token-url",
                )
            })?
            .to_owned(),
        (None, None) => {
            return Err(exit(
                EXIT_OTHER,
                "the card is not verified, so its token URL is not used: give --token-url",
            ));
        }
    };
    // Its scheme and address are the fetcher's to check, as every other URL's.
    reqwest::Url::parse(&url).map_err(|_| exit(EXIT_OTHER, "the token URL is not a URL"))
}

/// `application/x-www-form-urlencoded` for one value.
fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Where the token for (endpoint, client, scopes, resource) is kept; `None` without a home
/// directory.
fn cache_path(token_url: &str, client_id: &str, scope: &str, resource: &str) -> Option<PathBuf> {
    let mut parts = vec![token_url.as_bytes(), client_id.as_bytes(), scope.as_bytes()];
    // Tokens asked without a resource keep the name they were kept under before.
    if !resource.is_empty() {
        parts.push(resource.as_bytes());
    }
    let name = crate::jose::fetch::file_name_digest(&parts);
    Some(super::fetching::cache_directory()?.join(format!("token-{name}.json")))
}

/// The token kept for the next call, from a file only this user owns and may write (a token
/// another user planted would send this call, and its message, to their account).
fn read_kept(path: &std::path::Path, now: u64) -> Option<String> {
    let kept: Value = serde_json::from_slice(&crate::jose::keys::read_own_private(path)?).ok()?;
    let expires_at = kept["expires_at"].as_u64()?;
    (expires_at > now + MARGIN_SECONDS)
        .then(|| kept["access_token"].as_str().map(str::to_owned))
        .flatten()
}

/// Keeps the token for the next call (0600, in a 0700 directory); failing to is no error (the
/// next call asks again).
fn keep(path: &std::path::Path, token: &str, expires_at: u64) {
    let kept = serde_json::json!({"access_token": token, "expires_at": expires_at});
    let _ = crate::jose::keys::replace_private(path, kept.to_string().as_bytes());
}
