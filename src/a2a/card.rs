//! The public Agent Card, built once from its settings and served as fixed bytes.
//!
//! The door's URL comes from `server.public_base_url`, or from the address peergate actually
//! listens on; never from a request's `Host` header, so a client cannot make the card point
//! somewhere else.

use super::card_settings::{CardSettings, CardSkill};
use crate::backend::AgentDescription;
use crate::guard::scheme::Scheme;
use crate::guard::scopes::OperationScope;
use serde_json::{Value, json};

/// The A2A protocol version this door speaks.
pub const PROTOCOL_VERSION: &str = crate::protocol::VERSION;

/// How the card describes one identity provider (`[[auth.issuers]]`).
#[derive(Debug, Clone)]
pub struct IssuerCard {
    /// The policy's name for it.
    pub name: String,
    /// Its `iss`.
    pub issuer: String,
    /// Its token endpoint (configured, or from discovery), for a client-credentials flow.
    pub token_url: Option<String>,
    /// Its metadata document's URL.
    pub metadata_url: String,
    /// Whether the public card lists it; else only the extended card of its peers.
    pub public: bool,
}

impl IssuerCard {
    /// The scheme's key in `securitySchemes`.
    pub fn key(&self) -> String {
        format!("oauth2-{}", self.name)
    }

    /// As A2A 1.0 describes it: an `oauth2SecurityScheme` with one client-credentials flow
    /// when its token endpoint is known, else an `openIdConnectSecurityScheme` naming its
    /// discovery document. Every field is non-empty: an empty one would drop out of the signed
    /// form in some clients only.
    fn scheme(&self) -> Value {
        let description = format!(
            "An access token (RFC 9068) from {} for this agent's audience, for a peer bound to its subject",
            self.issuer
        );
        match &self.token_url {
            Some(token_url) => {
                let scopes: serde_json::Map<String, Value> = OperationScope::ALL
                    .iter()
                    .map(|s| (s.as_str().to_owned(), json!(s.description())))
                    .collect();
                json!({"oauth2SecurityScheme": {
                    "description": description,
                    "oauth2MetadataUrl": self.metadata_url,
                    "flows": {"clientCredentials": {"tokenUrl": token_url, "scopes": scopes}},
                }})
            }
            None => json!({"openIdConnectSecurityScheme": {
                "description": description,
                "openIdConnectUrl": self.metadata_url,
            }}),
        }
    }

    /// Its requirement: the scopes of every operation (a token may hold fewer).
    fn requirement(&self) -> Value {
        let scopes: Vec<&str> = OperationScope::ALL.iter().map(|s| s.as_str()).collect();
        json!({"schemes": {self.key(): {"list": scopes}}})
    }
}

/// The key of the scheme that says partners' own providers' tokens are taken.
const PARTNER_TOKENS: &str = "partnerProviderAuth";

/// Adds `issuer` to a card's schemes and requirements.
fn add_issuer(card: &mut Value, issuer: &IssuerCard) {
    if let Some(schemes) = card
        .get_mut("securitySchemes")
        .and_then(Value::as_object_mut)
    {
        schemes.insert(issuer.key(), issuer.scheme());
    }
    if let Some(requirements) = card
        .get_mut("securityRequirements")
        .and_then(Value::as_array_mut)
    {
        requirements.push(issuer.requirement());
    }
}

/// What the card says about the ways of signing in that are not peergate's own credentials.
#[derive(Debug, Clone, Default)]
pub struct CardIdentities {
    /// The identity providers.
    pub issuers: Vec<IssuerCard>,
    /// The SHA-256 (hex) of the client CA's certificate, when client certificates are taken.
    pub client_ca_sha256: Option<String>,
}

/// The public card as JSON, with the public identity providers and the client-certificate
/// scheme of `identities`. In front of an agent, what the `agent` says of itself (name,
/// description, version, skills, default modes, provider, links) is the card's wherever the
/// policy's `[card]` does not set it; the interfaces, security schemes, capabilities and the
/// signature are always the gateway's.
pub fn public_card(
    settings: &CardSettings,
    door_url: &str,
    identities: &CardIdentities,
    agent: Option<&AgentDescription>,
) -> Value {
    let card = &settings.section;
    // The agent's word for `key`, unless the operator's policy sets it.
    let agents = |key: &str| agent.filter(|_| !settings.sets(key));
    let word = |key: &str, own: &String, agent_word: fn(&AgentDescription) -> &Option<String>| {
        agents(key)
            .and_then(|agent| agent_word(agent).clone())
            .unwrap_or_else(|| own.clone())
    };
    let skills: Vec<Value> = match agents("card.skills").and_then(|a| a.skills.clone()) {
        Some(skills) => skills,
        None => policy_skills(&card.skills),
    };
    let modes = |agent_modes: Option<&Vec<String>>, default: &[&str]| match agent_modes {
        Some(modes) => json!(modes),
        None => json!(default),
    };
    let mut value = json!({
        "name": word("card.name", &card.name, |a| &a.name),
        "description": word("card.description", &card.description, |a| &a.description),
        "version": word("card.version", &card.version, |a| &a.version),
        "supportedInterfaces": interfaces(settings, door_url),
        "capabilities": capabilities(settings),
        "securitySchemes": security_schemes(settings),
        // Alternatives, one per enabled scheme. SDK clients attach credentials only for schemes
        // listed here.
        "securityRequirements": security_requirements(settings),
        "defaultInputModes": modes(
            agent.and_then(|a| a.default_input_modes.as_ref()),
            &["text/plain", "application/json"],
        ),
        "defaultOutputModes": modes(
            agent.and_then(|a| a.default_output_modes.as_ref()),
            &["text/plain"],
        ),
        "skills": skills,
    });
    add_sign_in(&mut value, settings, identities);
    if settings.schemes.contains(&Scheme::Jwt)
        && let Some(extension) = super::resource_metadata::extension(door_url)
    {
        let capabilities = &mut value["capabilities"];
        match capabilities["extensions"].as_array_mut() {
            Some(extensions) => extensions.push(extension),
            None => capabilities["extensions"] = json!([extension]),
        }
    }
    match (
        &card.provider,
        agents("card.provider").and_then(|a| a.provider.as_ref()),
    ) {
        (Some(provider), _) => {
            value["provider"] = json!({"organization": provider.organization, "url": provider.url});
        }
        (None, Some((organization, url))) => {
            value["provider"] = json!({"organization": organization, "url": url});
        }
        (None, None) => {}
    }
    let links = [
        (
            "documentationUrl",
            &card.documentation_url,
            agent.and_then(|a| a.documentation_url.as_ref()),
        ),
        (
            "iconUrl",
            &card.icon_url,
            agent.and_then(|a| a.icon_url.as_ref()),
        ),
    ];
    for (member, own, agents_own) in links {
        if let Some(url) = own.as_ref().or(agents_own) {
            value[member] = json!(url);
        }
    }
    value
}

/// The skills of the policy's `[[card.skills]]`.
fn policy_skills(skills: &[CardSkill]) -> Vec<Value> {
    skills
        .iter()
        .map(|skill| {
            let mut value = json!({
                "id": skill.id,
                "name": skill.name,
                "description": skill.description,
                "tags": skill.tags,
            });
            if !skill.examples.is_empty() {
                value["examples"] = json!(skill.examples);
            }
            value
        })
        .collect()
}

/// The ways of signing in besides peergate's own credentials: the public identity providers,
/// client certificates, and partners' own providers.
fn add_sign_in(value: &mut Value, settings: &CardSettings, identities: &CardIdentities) {
    let issuers = &identities.issuers;
    for issuer in issuers.iter().filter(|i| i.public) {
        add_issuer(value, issuer);
    }
    if let (true, Some(ca)) = (
        settings.schemes.contains(&Scheme::Mtls),
        &identities.client_ca_sha256,
    ) {
        value["securitySchemes"][scheme_key(Scheme::Mtls)] = json!({"mtlsSecurityScheme": {
            "description": format!(
                "A client certificate issued by the CA whose certificate has SHA-256 {ca}, with the clientAuth usage; the peer is the one bound to its SHA-256, to a URI SAN (a binding holding ://), or to a DNS SAN, compared exactly"
            ),
        }});
        if let Some(requirements) = value["securityRequirements"].as_array_mut() {
            requirements.push(json!({"schemes": {scheme_key(Scheme::Mtls): {}}}));
        }
    }
    if settings.schemes.contains(&Scheme::Jwt) && !issuers.iter().any(|i| i.public) {
        // The providers are partners' own and are not listed here; the card still says a
        // provider's token is taken (each peer's extended card names its provider).
        value["securitySchemes"][PARTNER_TOKENS] = json!({"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "bearerFormat": "JWT",
            "description": "An access token (RFC 9068) from the identity provider this gateway's operator bound your agent to",
        }});
        if let Some(requirements) = value["securityRequirements"].as_array_mut() {
            requirements.push(json!({"schemes": {PARTNER_TOKENS: {}}}));
        }
    }
}

/// The schemes the card describes as one entry each; identity providers are described per
/// issuer (see `issuer_schemes`).
fn enabled_schemes(settings: &CardSettings) -> Vec<Scheme> {
    settings
        .schemes
        .iter()
        .copied()
        .filter(|scheme| !matches!(scheme, Scheme::Jwt | Scheme::Mtls))
        .collect()
}

/// The card's name for a scheme.
pub fn scheme_key(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Bearer => "bearerAuth",
        Scheme::Basic => "basicAuth",
        Scheme::ApiKey => "apiKeyAuth",
        Scheme::Jwt => "oauth2",
        Scheme::Mtls => "mtlsAuth",
    }
}

fn security_schemes(settings: &CardSettings) -> Value {
    let mut schemes = serde_json::Map::new();
    for scheme in enabled_schemes(settings) {
        let value = match scheme {
            Scheme::Bearer => json!({"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "A peer token issued by this gateway's administrator",
            }}),
            Scheme::Basic => json!({"httpAuthSecurityScheme": {
                "scheme": "Basic",
                "description": "The peer's name and the password its administrator set",
            }}),
            Scheme::ApiKey => json!({"apiKeySecurityScheme": {
                "location": "header",
                "name": settings.api_key_header,
                "description": "An API key issued by this gateway's administrator",
            }}),
            Scheme::Jwt | Scheme::Mtls => continue,
        };
        schemes.insert(scheme_key(scheme).to_owned(), value);
    }
    Value::Object(schemes)
}

fn security_requirements(settings: &CardSettings) -> Value {
    enabled_schemes(settings)
        .into_iter()
        // These schemes have no scopes: an empty scope list, which ProtoJSON writes `{}`. The
        // SDKs drop it before canonicalizing, raw-JCS verifiers do not, so the card is signed
        // in both forms (`sign::sign_card`).
        .map(|scheme| json!({"schemes": {scheme_key(scheme): {}}}))
        .collect()
}

/// The bindings the policy serves: JSON-RPC always, HTTP+JSON and gRPC when switched on.
fn interfaces(settings: &CardSettings, door_url: &str) -> Value {
    let mut interfaces = vec![json!({
        "url": door_url,
        "protocolBinding": "JSONRPC",
        "protocolVersion": PROTOCOL_VERSION,
    })];
    if settings.http_json {
        interfaces.push(json!({
            "url": format!("{door_url}/rest"),
            "protocolBinding": "HTTP+JSON",
            "protocolVersion": PROTOCOL_VERSION,
        }));
    }
    if let Some(grpc) = &settings.grpc_address {
        // A gRPC interface's URL is the address a client dials: `host:port`.
        interfaces.push(json!({
            "url": grpc,
            "protocolBinding": "GRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }));
    }
    Value::Array(interfaces)
}

fn capabilities(settings: &CardSettings) -> Value {
    // Exactly what the policy switched on (`[capabilities]`).
    let mut capabilities = json!({
        "streaming": settings.streaming,
        "pushNotifications": settings.push_notifications,
        "extendedAgentCard": true,
    });
    let extensions: Vec<Value> = settings
        .section
        .extensions
        .iter()
        .map(|extension| {
            // `required: false` is protobuf's default, which SDKs drop before canonicalizing.
            let mut value = json!({"uri": extension.uri});
            if extension.required {
                value["required"] = json!(true);
            }
            if let Some(description) = &extension.description {
                value["description"] = json!(description);
            }
            value
        })
        .collect();
    let mut extensions = extensions;
    extensions.extend(settings.own_extensions.iter().cloned());
    if !extensions.is_empty() {
        capabilities["extensions"] = Value::Array(extensions);
    }
    capabilities
}

/// The extended card an authenticated peer gets: the public card plus peergate's own `ask`
/// skill, which also names the gateway's version and what answers (`what`: "model", or
/// "agent" in front of one), and the identity provider the peer signed in with when the public
/// card does not list it.
pub fn extended_card(public: &Value, issuer: Option<&IssuerCard>, what: &str) -> Value {
    let mut card = public.clone();
    card.as_object_mut().map(|c| c.remove("signatures"));
    if let Some(issuer) = issuer.filter(|i| !i.public) {
        add_issuer(&mut card, issuer);
    }
    let version = env!("CARGO_PKG_VERSION");
    let description = if what == "agent" {
        format!(
            "Send a message (text, data and file parts); the operator's agent behind this gateway answers it, as a task or a message. Served by peergate {version}."
        )
    } else {
        format!(
            "Send text (text and data parts); the operator's model answers once, and the task comes back completed. The last messages of the same contextId go with it. Served by peergate {version}."
        )
    };
    let ask = json!({
        "id": "ask",
        "name": format!("Ask the {what}"),
        "description": description,
        "tags": ["ask", format!("peergate-{}", env!("CARGO_PKG_VERSION"))],
        "inputModes": ["text/plain", "application/json"],
        "outputModes": ["text/plain"],
    });
    if let Some(skills) = card.get_mut("skills").and_then(Value::as_array_mut) {
        skills.retain(|s| s["id"] != "ask");
        skills.push(ask);
    }
    card
}
