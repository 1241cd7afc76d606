//! `[model]`: the checks of the backend's settings ([`crate::backend::settings`]) once read.

use super::{Invalid, invalid};
use crate::backend::settings::{BackendKind, ModelSettings, OpenAiSettings, UpstreamSettings};

impl UpstreamSettings {
    fn validate(&self) -> Result<(), Invalid> {
        check_upstream_url("model.a2a.url", &self.url)?;
        let header = self.caller_header.to_ascii_lowercase();
        let credential = self.api_key_header.as_deref().map(str::to_ascii_lowercase);
        if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err()
            || header == "authorization"
            || credential.as_deref() == Some(header.as_str())
        {
            return Err(invalid(
                "model.a2a.caller_header",
                "must be a header name other than Authorization and the agent's own credential header",
            ));
        }
        if let Some(rpc_url) = &self.rpc_url {
            check_upstream_url("model.a2a.rpc_url", rpc_url)?;
            // One client serves both: its checks follow url's scheme.
            let scheme = |url: &str| url.split_once("://").map(|(scheme, _)| scheme.to_owned());
            if scheme(rpc_url) != scheme(&self.url) {
                return Err(invalid(
                    "model.a2a.rpc_url",
                    "must use the same scheme as model.a2a.url",
                ));
            }
        }
        if self.card_jwks_file.is_none()
            && self.card_secret_env.is_none()
            && !self.dangerous_accept_unsigned_card
        {
            return Err(invalid(
                "model.a2a.card_jwks_file",
                "name the keys that verify the agent's card (card_jwks_file or card_secret_env); an unverified card would let whoever serves it redirect every message",
            ));
        }
        if let Some(header) = &self.api_key_header {
            if self.token_env.is_none() {
                return Err(invalid(
                    "model.a2a.api_key_header",
                    "needs token_env, the environment variable holding the key",
                ));
            }
            if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(invalid(
                    "model.a2a.api_key_header",
                    "is not an HTTP header name",
                ));
            }
        }
        Ok(())
    }
}

impl ModelSettings {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        match self.backend {
            BackendKind::Openai => match &self.openai {
                None => Err(invalid(
                    "model.openai",
                    "backend = \"openai\" needs a [model.openai] table with base_url and model",
                )),
                Some(openai) => openai.validate(),
            },
            BackendKind::A2a => match &self.a2a {
                None => Err(invalid(
                    "model.a2a",
                    "backend = \"a2a\" needs a [model.a2a] table with the agent's url and the keys that verify its card",
                )),
                Some(a2a) => a2a.validate(),
            },
            BackendKind::Echo => Ok(()),
        }
    }
}

impl OpenAiSettings {
    fn validate(&self) -> Result<(), Invalid> {
        check_upstream_url("model.openai.base_url", &self.base_url)?;
        if self.base_url.ends_with('/') {
            return Err(invalid(
                "model.openai.base_url",
                "must not end with `/`, e.g. https://api.example.com/v1",
            ));
        }
        if self.model.trim().is_empty() {
            return Err(invalid("model.openai.model", "must not be empty"));
        }
        Ok(())
    }
}

/// Checks the URL of something peergate calls on the operator's behalf (a model, an upstream
/// agent): `https`, or plain `http` to the private side only, and no credentials in it.
///
/// A plain-http address written as an IP must be loopback or private here; a plain-http name
/// is checked when it is resolved, by the only resolver that client uses.
pub(crate) fn check_upstream_url(setting: &'static str, url: &str) -> Result<(), Invalid> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Err(invalid(setting, "is not a URL"));
    };
    // Credentials belong in an environment variable, never in a URL that gets logged.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            setting,
            "must not carry credentials; name an environment variable for the key instead",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(setting, "must not carry a query or a fragment"));
    }
    let Some(host) = parsed.host_str() else {
        return Err(invalid(setting, "has no host"));
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let literal: Option<std::net::IpAddr> = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .ok();
            if literal.is_some_and(|ip| !crate::jose::fetch::is_private_side(ip)) {
                return Err(invalid(
                    setting,
                    "plain http is allowed only to loopback and private addresses; use https for anything else",
                ));
            }
            Ok(())
        }
        _ => Err(invalid(
            setting,
            "must be an https URL (or http on the private side), e.g. https://api.example.com/v1",
        )),
    }
}
