//! A call to the door, or a request to the admin API, as Cedar sees it: the principal and its
//! parents, the action, the resource and the context the schema (`peergate.cedarschema`)
//! describes. Everything here comes from what the call carries; nothing is read from a store.

use crate::clock::Timestamp;
use cedar_policy::{
    Context, Entity, EntityId, EntityTypeName, EntityUid, Request, RestrictedExpression,
};
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::LazyLock;

/// Who calls the door, as its sign-in established.
#[derive(Debug, Clone, Copy)]
pub struct PeerFacts<'a> {
    /// The peer's id (the entity's id).
    pub id: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The administrator it acts for (its parent `Owner`).
    pub owner_id: &'a str,
    /// How it signed in (`bearer`, `basic`, `api_key`, `jwt`, `mtls`).
    pub scheme: &'static str,
    /// The identity provider whose token admitted it, by its policy name.
    pub issuer: Option<&'a str>,
    /// That token's subject.
    pub subject: Option<&'a str>,
    /// That token's scopes, when its provider requires them.
    pub scopes: Option<&'a [&'a str]>,
    /// The token claims its provider's `claims` names (the entity's tags).
    pub claims: &'a [crate::jose::access_token::Claim],
}

/// One A2A call: who, which operation, on what, and what it carries.
#[derive(Debug, Clone)]
pub struct CallAsk<'a> {
    /// The caller.
    pub peer: PeerFacts<'a>,
    /// The operation's 1.0 name (the action).
    pub operation: &'static str,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub binding: &'static str,
    /// The client's address, when known.
    pub client: Option<IpAddr>,
    /// The gateway's clock.
    pub now: Timestamp,
    /// The task the call names, if any (the resource).
    pub task: Option<&'a str>,
    /// The conversation the call names, if any.
    pub context: Option<&'a str>,
    /// The message's size in bytes (0 without one).
    pub message_size: u64,
    /// Its part kinds: `text`, `data`, `file`.
    pub part_kinds: Vec<&'static str>,
    /// Its files' media types.
    pub media_types: Vec<&'a str>,
    /// The extensions the request activated.
    pub extensions: &'a [String],
}

/// One admin API request.
#[derive(Debug, Clone)]
pub struct AdminAsk<'a> {
    /// The administrator's name.
    pub name: &'a str,
    /// Whether they are an auditor.
    pub auditor: bool,
    /// The operation's id in the OpenAPI document (the action).
    pub operation: &'a str,
    /// The HTTP method.
    pub method: &'a str,
    /// The peer the path names, if any.
    pub peer: Option<&'a str>,
    /// The client's address, when known.
    pub client: Option<IpAddr>,
    /// The gateway's clock.
    pub now: Timestamp,
}

/// The schema's entity types, parsed once.
struct Types {
    owner: EntityTypeName,
    peer: EntityTypeName,
    agent: EntityTypeName,
    context: EntityTypeName,
    task: EntityTypeName,
    administrator: EntityTypeName,
    admin_api: EntityTypeName,
    action: EntityTypeName,
}

static TYPES: LazyLock<Types> = LazyLock::new(|| {
    let name = |text: &str| EntityTypeName::from_str(text).expect("a valid type name");
    Types {
        owner: name("Peergate::Owner"),
        peer: name("Peergate::Peer"),
        agent: name("Peergate::Agent"),
        context: name("Peergate::Context"),
        task: name("Peergate::Task"),
        administrator: name("Peergate::Administrator"),
        admin_api: name("Peergate::AdminApi"),
        action: name("Peergate::Action"),
    }
});

fn uid(kind: &EntityTypeName, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(kind.clone(), EntityId::new(id))
}

/// The action named `name`.
pub(crate) fn action(name: &str) -> EntityUid {
    uid(&TYPES.action, name)
}

/// The one agent behind the door.
fn agent() -> EntityUid {
    uid(&TYPES.agent, "agent")
}

fn strings<'s>(values: impl IntoIterator<Item = &'s str>) -> RestrictedExpression {
    RestrictedExpression::new_set(
        values
            .into_iter()
            .map(|value| RestrictedExpression::new_string(value.to_owned())),
    )
}

fn string(value: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(value.to_owned())
}

/// The clock and the client's address, as both contexts carry them.
fn when_and_where(now: Timestamp, client: Option<IpAddr>) -> Vec<(String, RestrictedExpression)> {
    let utc = jiff::tz::TimeZone::UTC.to_datetime(now);
    let mut pairs = vec![
        (
            "now".to_owned(),
            RestrictedExpression::new_datetime(format!(
                "{}",
                now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            )),
        ),
        (
            "hour".to_owned(),
            RestrictedExpression::new_long(i64::from(utc.hour())),
        ),
        (
            "weekday".to_owned(),
            string(&format!("{:?}", utc.weekday()).to_lowercase()),
        ),
    ];
    if let Some(client) = client {
        pairs.push((
            "client".to_owned(),
            RestrictedExpression::new_ip(client.to_string()),
        ));
    }
    pairs
}

impl PeerFacts<'_> {
    /// The peer's entity, in its owner.
    fn entity(&self) -> Result<Entity, String> {
        let mut attrs = vec![
            ("name".to_owned(), string(self.name)),
            ("scheme".to_owned(), string(self.scheme)),
        ];
        let optional = [("issuer", self.issuer), ("subject", self.subject)];
        for (key, value) in optional {
            if let Some(value) = value {
                attrs.push((key.to_owned(), string(value)));
            }
        }
        if let Some(scopes) = self.scopes {
            attrs.push(("scopes".to_owned(), strings(scopes.iter().copied())));
        }
        let tags = self
            .claims
            .iter()
            .map(|(claim, values)| (claim.to_string(), strings(values.iter().map(|v| &**v))));
        Entity::new_with_tags(
            uid(&TYPES.peer, self.id),
            attrs,
            [uid(&TYPES.owner, self.owner_id)],
            tags,
        )
        .map_err(|e| e.to_string())
    }
}

impl CallAsk<'_> {
    /// The request and the entities it names (the action's own are the policies').
    pub(crate) fn to_cedar(&self) -> Result<(Request, Vec<Entity>), String> {
        let mut entities = vec![self.peer.entity()?];
        let resource = self.resource(&mut entities);
        let mut pairs = when_and_where(self.now, self.client);
        pairs.extend([
            ("binding".to_owned(), string(self.binding)),
            (
                "messageSize".to_owned(),
                RestrictedExpression::new_long(
                    i64::try_from(self.message_size).unwrap_or(i64::MAX),
                ),
            ),
            (
                "partKinds".to_owned(),
                strings(self.part_kinds.iter().copied()),
            ),
            (
                "mediaTypes".to_owned(),
                strings(self.media_types.iter().copied()),
            ),
            (
                "extensions".to_owned(),
                strings(self.extensions.iter().map(String::as_str)),
            ),
        ]);
        let context = Context::from_pairs(pairs).map_err(|e| e.to_string())?;
        let principal = uid(&TYPES.peer, self.peer.id);
        let request = Request::new(principal, action(self.operation), resource, context, None)
            .map_err(|e| e.to_string())?;
        Ok((request, entities))
    }

    /// The task the call names (in its conversation, when the call names that too), else the
    /// conversation, else the agent; with the entities that place it under the agent.
    fn resource(&self, entities: &mut Vec<Entity>) -> EntityUid {
        let context = self.context.map(|id| {
            let context = uid(&TYPES.context, id);
            entities.push(Entity::new_no_attrs(context.clone(), [agent()].into()));
            context
        });
        match self.task {
            Some(id) => {
                let task = uid(&TYPES.task, id);
                let parents = context.into_iter().chain([agent()]).collect();
                entities.push(Entity::new_no_attrs(task.clone(), parents));
                task
            }
            None => context.unwrap_or_else(agent),
        }
    }
}

impl AdminAsk<'_> {
    /// The request and the entities it names.
    pub(crate) fn to_cedar(&self) -> Result<(Request, Vec<Entity>), String> {
        let principal = uid(&TYPES.administrator, self.name);
        let role = if self.auditor { "auditor" } else { "admin" };
        let administrator = Entity::new(
            principal.clone(),
            [("role".to_owned(), string(role))].into(),
            Default::default(),
        )
        .map_err(|e| e.to_string())?;
        let mut pairs = when_and_where(self.now, self.client);
        pairs.push(("method".to_owned(), string(self.method)));
        if let Some(peer) = self.peer {
            pairs.push(("peer".to_owned(), string(peer)));
        }
        let context = Context::from_pairs(pairs).map_err(|e| e.to_string())?;
        let resource = uid(&TYPES.admin_api, "admin");
        let request = Request::new(principal, action(self.operation), resource, context, None)
            .map_err(|e| e.to_string())?;
        Ok((request, vec![administrator]))
    }
}
