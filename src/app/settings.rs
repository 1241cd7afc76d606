//! Each part's own settings, made from the policy here and nowhere below: the door's routes and
//! guard, the card, push deliveries. A part is handed what it needs, never the whole policy.

use crate::a2a::card_settings::{AGENT_WORDS, CardSettings};
use crate::a2a::receipts::{EXTENSION, ReceiptMode};
use crate::config::Policy;
use crate::http::door::DoorSettings;
use std::net::SocketAddr;

/// The URL partner agents post JSON-RPC to: `server.public_base_url`, or the address the door
/// listens on (`https` with the door's own TLS); never a request's `Host` header, so a client
/// cannot make the card point somewhere else.
pub(super) fn door_url(policy: &Policy, listen: SocketAddr) -> String {
    let base = match &policy.server.public_base_url {
        Some(base) => base.clone(),
        None if policy.server.tls.is_some() => format!("https://{listen}"),
        None => format!("http://{listen}"),
    };
    format!("{base}{}", policy.server.a2a_path)
}

/// The door's routes and guard, on every binding's listener.
pub(super) fn door(policy: &Policy) -> DoorSettings {
    DoorSettings {
        a2a_path: policy.server.a2a_path.clone(),
        // The HTTP+JSON binding: the JSON-RPC door's path, then `/rest`.
        http_json_path: policy
            .capabilities
            .http_json
            .then(|| format!("{}/rest", policy.server.a2a_path)),
        resource_metadata_path: resource_metadata_path(policy),
        require_version_header: policy.gate.require_version_header,
        extensions: (policy.card.extensions.iter())
            .map(|e| (e.uri.clone(), e.required))
            .chain(receipts_on(policy).then(|| (EXTENSION.to_owned(), false)))
            .collect(),
        request_timeout: policy.server.request_timeout_seconds.duration(),
        max_body_bytes: policy.server.max_body_bytes.usize(),
        trusted_proxies: policy.trusted_proxies().to_vec(),
        forwarded_certificates: (policy.auth.forwarded_client_certificate_header.as_deref())
            .and_then(|h| axum::http::HeaderName::from_bytes(h.as_bytes()).ok()),
        access_log: policy.log.access,
    }
}

/// Whether finished tasks get receipts (`receipts.mode`).
pub(super) fn receipts_on(policy: &Policy) -> bool {
    policy.receipts.mode != ReceiptMode::Off
}

/// Where the door serves its RFC 9728 metadata: the well-known name before the path of the
/// door's public URL (which a `public_base_url` with a path lengthens), as its challenges say.
fn resource_metadata_path(policy: &Policy) -> String {
    let door = door_url(policy, SocketAddr::from(([127, 0, 0, 1], 0)));
    let door_path = reqwest::Url::parse(&door)
        .map(|url| url.path().to_owned())
        .unwrap_or_else(|_| policy.server.a2a_path.clone());
    crate::a2a::resource_metadata::path(&door_path)
}

/// What the card is made of besides where the door is and who signs in.
pub(super) fn card(policy: &Policy) -> CardSettings {
    CardSettings {
        section: policy.card.clone(),
        operator_set: AGENT_WORDS
            .into_iter()
            .filter(|key| policy.sets(key))
            .collect(),
        schemes: policy.auth_schemes().to_vec(),
        api_key_header: policy.auth.api_key_header.clone(),
        http_json: policy.capabilities.http_json,
        grpc_address: policy.grpc.as_ref().map(|grpc| grpc.advertised()),
        streaming: policy.capabilities.streaming,
        push_notifications: policy.capabilities.push_notifications,
        own_extensions: Vec::new(),
    }
}

/// How push notifications are kept and delivered (`[push]`).
pub(super) fn push(push: &crate::config::PushPolicy) -> crate::push::PushSettings {
    crate::push::PushSettings {
        max_configs_per_task: push.max_configs_per_task.u32(),
        max_attempts: push.max_attempts.u32(),
        deliveries_at_once: push.deliveries_at_once.u32(),
        deliveries_per_peer: push.deliveries_per_peer.u32(),
        timeout: push.timeout_seconds.duration(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata's route is where the challenges point: before the public URL's whole path.
    #[test]
    fn the_metadata_is_served_where_the_challenges_point() {
        let parse =
            |text: &str| Policy::parse(text, &crate::config::PolicySource::Embedded).unwrap();
        let plain = parse("");
        assert_eq!(
            door(&plain).resource_metadata_path,
            "/.well-known/oauth-protected-resource/a2a/v1"
        );
        let behind = parse("[server]\npublic_base_url = \"https://gw.example/agents\"\n");
        let path = door(&behind).resource_metadata_path;
        assert_eq!(path, "/.well-known/oauth-protected-resource/agents/a2a/v1");
        let door = door_url(&behind, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(
            crate::a2a::resource_metadata::url(&door).unwrap(),
            format!("https://gw.example{path}")
        );
    }

    /// The card names what the policy switched on, and leaves to an agent behind the door only
    /// the words the operator did not write.
    #[test]
    fn the_card_is_told_what_the_policy_serves() {
        let policy = Policy::parse(
            concat!(
                "[capabilities]\nhttp_json = true\n",
                "[card]\nname = \"Ours\"\ndescription = \"d\"\nversion = \"1\"\n",
                "[[card.skills]]\nid = \"s\"\nname = \"S\"\ndescription = \"d\"\ntags = [\"t\"]\n",
            ),
            &crate::config::PolicySource::Embedded,
        )
        .unwrap();
        let settings = card(&policy);
        assert!(settings.http_json && settings.grpc_address.is_none());
        assert!(settings.sets("card.name") && settings.sets("card.skills"));
        assert!(!settings.sets("card.provider"));
        assert_eq!(
            door(&policy).http_json_path.as_deref(),
            Some("/a2a/v1/rest")
        );
    }
}
