//! What the Agent Card is built from: the policy's `[card]` as it is read, and what the rest of
//! the policy says the door serves. The composition root builds [`CardSettings`]; the card
//! never reads the policy itself.

use crate::guard::scheme::Scheme;
use serde::Deserialize;

/// What the card is made of besides where the door is and who signs in.
#[derive(Debug, Clone)]
pub struct CardSettings {
    /// `[card]`.
    pub section: CardSection,
    /// The keys of `[card]` the operator wrote (`card.name`, `card.skills`, …): in front of an
    /// agent, every other one is the agent's word.
    pub operator_set: Vec<&'static str>,
    /// `auth.schemes`, in order, each once.
    pub schemes: Vec<Scheme>,
    /// The header an API key travels in (`auth.api_key_header`).
    pub api_key_header: String,
    /// Whether the HTTP+JSON binding is served.
    pub http_json: bool,
    /// The address a gRPC client dials, when the gRPC binding is served.
    pub grpc_address: Option<String>,
    /// `capabilities.streaming`.
    pub streaming: bool,
    /// `capabilities.push_notifications`.
    pub push_notifications: bool,
    /// The extensions the gateway itself declares (receipts), after the policy's.
    pub own_extensions: Vec<serde_json::Value>,
}

impl CardSettings {
    /// Whether the operator wrote `key` (one of [`AGENT_WORDS`]).
    pub fn sets(&self, key: &str) -> bool {
        self.operator_set.contains(&key)
    }
}

/// The keys of `[card]` an agent behind the door speaks for unless the operator writes them.
pub const AGENT_WORDS: [&str; 5] = [
    "card.name",
    "card.description",
    "card.version",
    "card.skills",
    "card.provider",
];

/// `[card]`: what the Agent Card says about this gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSection {
    /// Agent name.
    pub name: String,
    /// Agent description.
    pub description: String,
    /// The agent's own version.
    pub version: String,
    /// Documentation URL.
    #[serde(default)]
    pub documentation_url: Option<String>,
    /// Icon URL.
    #[serde(default)]
    pub icon_url: Option<String>,
    /// `[card.provider]`
    #[serde(default)]
    pub provider: Option<CardProvider>,
    /// `[[card.skills]]`
    pub skills: Vec<CardSkill>,
    /// `[[card.extensions]]`
    #[serde(default)]
    pub extensions: Vec<CardExtension>,
}

/// `[[card.extensions]]`: an A2A extension this agent supports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardExtension {
    /// The extension's URI, matched exactly.
    pub uri: String,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether every request must activate it (`A2A-Extensions`).
    #[serde(default)]
    pub required: bool,
}

/// `[card.provider]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardProvider {
    /// Organisation name.
    pub organization: String,
    /// Organisation URL.
    pub url: String,
}

/// `[[card.skills]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSkill {
    /// Skill id.
    pub id: String,
    /// Skill name.
    pub name: String,
    /// Skill description.
    pub description: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default)]
    pub examples: Vec<String>,
}
