//! The schema peergate's requests follow, and the check that an operator's own schema describes
//! every one of them: a schema that lacked an action or typed an attribute otherwise would let
//! policies validate that can never apply, so start-up refuses it.

use super::ask::{AdminAsk, CallAsk, PeerFacts};
use super::load::LoadError;
use crate::protocol::jsonrpc::Method;
use cedar_policy::{Context, Entities, Entity, EntityUid, Request, Schema};

/// peergate's own schema, used when `authorization.schema` is not set.
pub const BUILT_IN: &str = include_str!("peergate.cedarschema");

/// The admin API's operations behind sign-in, by their OpenAPI ids: the admin actions (a test
/// of the admin API holds this list to its routes).
pub const ADMIN_OPERATIONS: &[&str] = &[
    "list_peers",
    "show_peer",
    "read_task",
    "list_conversations",
    "read_conversation",
    "usage",
    "failed_deliveries",
    "audit",
    "prometheus_metrics",
    "create_peer",
    "set_limit",
    "set_streams",
    "set_trace_trust",
    "set_operations",
    "set_peer_budget",
    "bind_identity",
    "unbind_identity",
    "set_expiry",
    "set_password",
    "issue_api_key",
    "rotate",
    "revoke",
    "reinstate",
    "delete_conversation",
    "reload_policy",
];

/// Every action peergate asks about: the A2A operations and the admin API's.
pub fn actions() -> impl Iterator<Item = &'static str> {
    Method::ALL
        .iter()
        .map(|method| method.name())
        .chain(ADMIN_OPERATIONS.iter().copied())
}

/// Whether `schema` describes every request and entity peergate makes: one request of each
/// action, with and without the context's optional members, and a peer with every attribute.
pub fn describes_peergate(schema: &Schema) -> Result<(), LoadError> {
    let claims = [("groups".into(), vec!["g".into()].into_boxed_slice())];
    let scopes = ["a2a:message"];
    let peer = PeerFacts {
        id: "p",
        name: "p",
        owner_id: "o",
        scheme: "jwt",
        issuer: Some("idp"),
        subject: Some("s"),
        scopes: Some(&scopes),
        claims: &claims,
    };
    let now = crate::clock::Timestamp::UNIX_EPOCH;
    for method in Method::ALL {
        let name = method.name();
        for client in [None, Some(std::net::Ipv4Addr::LOCALHOST.into())] {
            let ask = CallAsk {
                peer,
                operation: name,
                binding: "JSONRPC",
                client,
                now,
                task: Some("t"),
                context: Some("c"),
                message_size: 1,
                part_kinds: vec!["text"],
                media_types: vec!["text/plain"],
                extensions: &[],
            };
            conforms(schema, name, ask.to_cedar())?;
        }
    }
    for &operation in ADMIN_OPERATIONS {
        for (client, peer) in [(None, None), (Some([127, 0, 0, 1].into()), Some("p"))] {
            let ask = AdminAsk {
                name: "a",
                auditor: false,
                operation,
                method: "GET",
                peer,
                client,
                now,
            };
            conforms(schema, operation, ask.to_cedar())?;
        }
    }
    Ok(())
}

/// Whether one request peergate makes, and the entities it names, conform to `schema`.
fn conforms(
    schema: &Schema,
    action: &str,
    asked: Result<(Request, Vec<Entity>), String>,
) -> Result<(), LoadError> {
    let mismatch = |why: String| LoadError::SchemaMismatch {
        action: action.to_owned(),
        why,
    };
    let (request, entities) = asked.map_err(mismatch)?;
    let part = |part: Option<&EntityUid>| part.cloned().ok_or_else(|| mismatch("unknown".into()));
    Request::new(
        part(request.principal())?,
        part(request.action())?,
        part(request.resource())?,
        request.context().cloned().unwrap_or_else(Context::empty),
        Some(schema),
    )
    .map_err(|e| mismatch(e.to_string()))?;
    Entities::from_entities(entities, Some(schema)).map_err(|e| mismatch(e.to_string()))?;
    Ok(())
}
