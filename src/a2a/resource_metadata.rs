//! RFC 9728 protected-resource metadata: how a partner holding a 401 learns which
//! authorization servers issue tokens for this door, which scopes it takes and how to send them,
//! without reading documentation. The resource is the door's A2A endpoint URL; the document is
//! served at the well-known name inserted between its host and its path (RFC 9728 §3.1), named
//! by every Bearer challenge of the door (`resource_metadata`, §5.1) and by the card's
//! [`EXTENSION`], whenever the door takes identity providers' tokens (the `"jwt"` scheme). Only
//! the providers the public card lists are named: a partner's own provider stays out of every
//! public document.

use super::card::IssuerCard;
use crate::guard::scopes::OperationScope;
use serde_json::{Value, json};

/// The well-known name (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The card extension whose `params.resource_metadata` names the document: the card is signed,
/// so the pointer is too (an A2A 1.0 `oauth2MetadataUrl` names the provider's own metadata).
pub const EXTENSION: &str = "urn:peergate:ext:oauth-protected-resource:v1";

/// Where the door serves the document of the resource at `a2a_path`.
pub fn path(a2a_path: &str) -> String {
    format!("{WELL_KNOWN}{}", a2a_path.trim_end_matches('/'))
}

/// The document's URL for the resource `door_url`: its origin, the well-known name, its path.
pub fn url(door_url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(door_url).ok()?;
    let origin = parsed.origin().ascii_serialization();
    Some(format!("{origin}{}", path(parsed.path())))
}

/// The document for the resource `door_url`: the public providers' issuers (left out when
/// there is none), the scopes, the header as the one way to send a token; its name and
/// documentation from the card.
pub fn document(door_url: &str, card: &Value, issuers: &[IssuerCard]) -> Value {
    let servers: Vec<&str> = issuers
        .iter()
        .filter(|issuer| issuer.public)
        .map(|issuer| issuer.issuer.as_str())
        .collect();
    let scopes: Vec<&str> = OperationScope::ALL.iter().map(|s| s.as_str()).collect();
    let mut document = json!({
        "resource": door_url,
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
    });
    if !servers.is_empty() {
        document["authorization_servers"] = json!(servers);
    }
    // Empty values are left out, never sent (RFC 9728 §2).
    for (member, from) in [
        ("resource_name", "name"),
        ("resource_documentation", "documentationUrl"),
    ] {
        if let Some(value) = card[from].as_str().filter(|v| !v.is_empty()) {
            document[member] = json!(value);
        }
    }
    document
}

/// The card extension pointing at the document.
pub fn extension(door_url: &str) -> Option<Value> {
    Some(json!({
        "uri": EXTENSION,
        "description": "RFC 9728 protected-resource metadata of this agent's A2A endpoint",
        "params": {"resource_metadata": url(door_url)?},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_well_known_name_goes_between_the_host_and_the_path() {
        assert_eq!(
            url("https://gw.example.com/a2a/v1").as_deref(),
            Some("https://gw.example.com/.well-known/oauth-protected-resource/a2a/v1")
        );
        assert_eq!(
            url("http://127.0.0.1:8080/a2a/v1/").as_deref(),
            Some("http://127.0.0.1:8080/.well-known/oauth-protected-resource/a2a/v1")
        );
        assert_eq!(
            path("/a2a/v1"),
            "/.well-known/oauth-protected-resource/a2a/v1"
        );
    }

    #[test]
    fn only_public_providers_are_named_and_empty_members_are_left_out() {
        let issuer = |name: &str, public: bool| IssuerCard {
            name: name.to_owned(),
            issuer: format!("https://{name}.example"),
            token_url: None,
            metadata_url: String::new(),
            public,
        };
        let card = json!({"name": "Acme agent", "documentationUrl": ""});
        let door = "https://gw.example.com/a2a/v1";
        let alone = document(door, &card, &[issuer("partner", false)]);
        assert!(alone.get("authorization_servers").is_none(), "{alone}");
        let document = document(
            door,
            &card,
            &[issuer("corp", true), issuer("partner", false)],
        );
        assert_eq!(
            document["authorization_servers"],
            json!(["https://corp.example"])
        );
        assert_eq!(document["resource"], door);
        assert_eq!(document["resource_name"], "Acme agent");
        assert!(document.get("resource_documentation").is_none());
        assert_eq!(document["scopes_supported"].as_array().unwrap().len(), 4);
    }
}
