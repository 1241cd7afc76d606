//! `[card]`: the checks of what the Agent Card says ([`crate::a2a::card_settings`]) once read.

use super::{Invalid, invalid};
use crate::a2a::card_settings::CardSection;

impl CardSection {
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
