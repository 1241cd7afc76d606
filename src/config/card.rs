//! `[card]`: what the Agent Card says about this gateway.

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[card]`: what the Agent Card says about this gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardPolicy {
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
    pub provider: Option<ProviderPolicy>,
    /// `[[card.skills]]`
    pub skills: Vec<SkillPolicy>,
    /// `[[card.extensions]]`
    #[serde(default)]
    pub extensions: Vec<ExtensionPolicy>,
}

/// `[[card.extensions]]`: an A2A extension this agent supports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionPolicy {
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
pub struct ProviderPolicy {
    /// Organisation name.
    pub organization: String,
    /// Organisation URL.
    pub url: String,
}

/// `[[card.skills]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillPolicy {
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

impl CardPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (key, value) in [
            ("card.name", &self.name),
            ("card.description", &self.description),
            ("card.version", &self.version),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(key, "must not be empty"));
            }
        }
        if self.skills.is_empty() {
            return Err(invalid("card.skills", "at least one skill is required"));
        }
        if self.skills.iter().any(|s| {
            s.id.is_empty() || s.name.is_empty() || s.description.is_empty() || s.tags.is_empty()
        }) {
            return Err(invalid(
                "card.skills",
                "every skill needs a non-empty id, name, description and tags",
            ));
        }
        for (i, extension) in self.extensions.iter().enumerate() {
            let uri = extension.uri.as_str();
            if uri.is_empty() || uri.contains([',', ' ']) || !uri.is_ascii() {
                return Err(invalid(
                    "card.extensions",
                    "every extension needs a URI without commas or spaces",
                ));
            }
            if self.extensions[..i].iter().any(|e| e.uri == uri) {
                return Err(invalid(
                    "card.extensions",
                    "an extension URI is listed twice",
                ));
            }
        }
        Ok(())
    }
}
