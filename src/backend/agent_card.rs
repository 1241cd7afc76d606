//! What an agent behind the door says of itself in its (verified) card, as peergate's own card
//! may repeat it: only the members the specification gives, each with its type and shape, and
//! cleaned of what a browser, a terminal or a log would misread. peergate signs what it
//! repeats, so it repeats nothing it would not say itself:
//!
//! * text without control or bidirectional characters (a name keeps no line break, so it cannot
//!   forge a log line), within a length bound;
//! * no text holding markup (`<script>`): the member is left out, never rewritten, since a
//!   rewritten description would say something the agent did not;
//! * links only `https` or `http`, without credentials, to no loopback, private, link-local
//!   (cloud metadata) or local-only host (`javascript:` and `data:` are no links);
//! * each skill id once (the first), never peergate's own `ask`, at most [`MAX_SKILLS`], and
//!   skills left out from the end until the skills fit [`SKILLS_BUDGET`] bytes, so the card
//!   peergate signs stays within what its own client reads.
//!
//! What was left out or cut is listed ([`AgentDescription::left_out`]), and logged once at
//! start-up.

use crate::protocol::shown_text::{Cleaned, cleaned, holds_markup};
use serde_json::Value;

/// The most skills repeated.
pub const MAX_SKILLS: usize = 64;
/// The most bytes the repeated skills take together.
pub const SKILLS_BUDGET: usize = 32 * 1024;

/// See the [module docs](self).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentDescription {
    /// `name`.
    pub name: Option<String>,
    /// `description`.
    pub description: Option<String>,
    /// `version`.
    pub version: Option<String>,
    /// `skills`, each rebuilt from `id`, `name`, `description`, `tags` and, when given,
    /// `examples`, `inputModes` and `outputModes`; a skill missing one of the first four is
    /// left out.
    pub skills: Option<Vec<Value>>,
    /// `defaultInputModes`.
    pub default_input_modes: Option<Vec<String>>,
    /// `defaultOutputModes`.
    pub default_output_modes: Option<Vec<String>>,
    /// `provider`: `organization` and `url`.
    pub provider: Option<(String, String)>,
    /// `documentationUrl`.
    pub documentation_url: Option<String>,
    /// `iconUrl`.
    pub icon_url: Option<String>,
    /// What was left out or cut, named by where it was (`skills[3].description: markup`).
    pub left_out: Vec<String>,
}

/// How long each kind of text may be, in characters.
const NAME_CHARS: usize = 200;
const VERSION_CHARS: usize = 64;
const DESCRIPTION_CHARS: usize = 2000;
const SKILL_ID_CHARS: usize = 128;
const TAG_CHARS: usize = 64;
const EXAMPLE_CHARS: usize = 500;
const MAX_TAGS: usize = 16;
const MAX_EXAMPLES: usize = 8;

/// Reads one card, noting what it leaves out.
struct Reader {
    left_out: Vec<String>,
}

impl Reader {
    /// The text at `value` (`at` its place), cleaned; `None` and noted when none is left or it
    /// holds markup.
    fn text(&mut self, value: &Value, at: &str, breaks: bool, max: usize) -> Option<String> {
        let raw = value.as_str()?;
        let Some((text, how)) = cleaned(raw, breaks, max) else {
            if !raw.trim().is_empty() {
                self.left_out.push(format!("{at}: nothing printable"));
            }
            return None;
        };
        // Judged as it would be shown: a control character between `<` and a tag's name is
        // taken out above, and must not hide the tag from this.
        if holds_markup(&text) || holds_markup(raw) {
            self.left_out.push(format!("{at}: markup"));
            return None;
        }
        if how != Cleaned::AsItCame {
            let what = if how == Cleaned::Cut {
                "cut"
            } else {
                "control or bidirectional characters taken out"
            };
            self.left_out.push(format!("{at}: {what}"));
        }
        Some(text)
    }

    /// A list of texts, at most `most`; `None` when none is left.
    fn texts(&mut self, value: &Value, at: &str, max: usize, most: usize) -> Option<Vec<String>> {
        let items = value.as_array()?;
        if items.len() > most {
            self.left_out.push(format!("{at}: past {most} items"));
        }
        let kept: Vec<String> = items
            .iter()
            .take(most)
            .enumerate()
            .filter_map(|(i, item)| self.text(item, &format!("{at}[{i}]"), false, max))
            .collect();
        (!kept.is_empty()).then_some(kept)
    }

    /// Media types, as `type/subtype` tokens only.
    fn modes(&mut self, value: &Value, at: &str) -> Option<Vec<String>> {
        let modes = self.texts(value, at, 127, MAX_TAGS)?;
        let kept: Vec<String> = modes
            .into_iter()
            .filter(|mode| is_media_type(mode))
            .collect();
        (!kept.is_empty()).then_some(kept)
    }

    /// A link a browser may follow to somewhere public (see the module docs).
    fn link(&mut self, value: &Value, at: &str) -> Option<String> {
        let raw = value.as_str()?;
        match public_link(raw) {
            Some(link) => Some(link),
            None => {
                self.left_out
                    .push(format!("{at}: not a public http(s) link"));
                None
            }
        }
    }

    fn skill(&mut self, skill: &Value, at: &str) -> Option<Value> {
        let id = self.text(&skill["id"], &format!("{at}.id"), false, SKILL_ID_CHARS)?;
        let name = self.text(&skill["name"], &format!("{at}.name"), false, NAME_CHARS)?;
        let description = self.text(
            &skill["description"],
            &format!("{at}.description"),
            true,
            DESCRIPTION_CHARS,
        )?;
        let tags = self.texts(&skill["tags"], &format!("{at}.tags"), TAG_CHARS, MAX_TAGS)?;
        let mut rebuilt =
            serde_json::json!({"id": id, "name": name, "description": description, "tags": tags});
        if let Some(examples) = self.texts(
            &skill["examples"],
            &format!("{at}.examples"),
            EXAMPLE_CHARS,
            MAX_EXAMPLES,
        ) {
            rebuilt["examples"] = serde_json::json!(examples);
        }
        for member in ["inputModes", "outputModes"] {
            if let Some(modes) = self.modes(&skill[member], &format!("{at}.{member}")) {
                rebuilt[member] = serde_json::json!(modes);
            }
        }
        Some(rebuilt)
    }

    /// The skills: each id once, never `ask`, within [`MAX_SKILLS`] and [`SKILLS_BUDGET`].
    fn skills(&mut self, card: &Value) -> Option<Vec<Value>> {
        let mut kept: Vec<Value> = Vec::new();
        for (i, skill) in card["skills"].as_array()?.iter().enumerate() {
            let at = format!("skills[{i}]");
            let Some(skill) = self.skill(skill, &at) else {
                continue;
            };
            if skill["id"] == "ask" || kept.iter().any(|k| k["id"] == skill["id"]) {
                self.left_out.push(format!("{at}: its id is taken"));
            } else if kept.len() == MAX_SKILLS {
                self.left_out
                    .push(format!("{at}: past {MAX_SKILLS} skills"));
            } else {
                kept.push(skill);
            }
        }
        while serde_json::to_vec(&kept).map_or(0, |bytes| bytes.len()) > SKILLS_BUDGET {
            kept.pop();
            self.left_out.push(format!(
                "skills[{}..]: past {SKILLS_BUDGET} bytes",
                kept.len()
            ));
        }
        (!kept.is_empty()).then_some(kept)
    }
}

impl AgentDescription {
    /// Reads what `card` says of the agent, cleaned (see the module docs).
    pub fn of_card(card: &Value) -> Self {
        let mut read = Reader {
            left_out: Vec::new(),
        };
        let provider = read
            .text(
                &card["provider"]["organization"],
                "provider.organization",
                false,
                NAME_CHARS,
            )
            .zip(read.link(&card["provider"]["url"], "provider.url"));
        Self {
            name: read.text(&card["name"], "name", false, NAME_CHARS),
            description: read.text(&card["description"], "description", true, DESCRIPTION_CHARS),
            version: read.text(&card["version"], "version", false, VERSION_CHARS),
            skills: read.skills(card),
            default_input_modes: read.modes(&card["defaultInputModes"], "defaultInputModes"),
            default_output_modes: read.modes(&card["defaultOutputModes"], "defaultOutputModes"),
            provider,
            documentation_url: read.link(&card["documentationUrl"], "documentationUrl"),
            icon_url: read.link(&card["iconUrl"], "iconUrl"),
            left_out: read.left_out,
        }
    }
}

/// `type/subtype` in RFC 9110's token characters, with parameters after `;` allowed.
fn is_media_type(mode: &str) -> bool {
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let essence = mode.split(';').next().unwrap_or_default().trim();
    essence
        .split_once('/')
        .is_some_and(|(kind, sub)| token(kind) && token(sub))
}

/// `raw` as a link to somewhere public: `https` or `http`, no credentials, a host that is no
/// loopback, private, link-local, documentation or local-only name. Kept as the agent wrote it
/// when that is printable ASCII, else as a browser writes it (percent-encoded, the host in
/// ASCII).
fn public_link(raw: &str) -> Option<String> {
    let url = reqwest::Url::parse(raw).ok()?;
    if !matches!(url.scheme(), "https" | "http")
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return None;
    }
    // The parser writes an address in its one form (`0xA9FEA9FE` is 169.254.169.254).
    let host = url.host_str()?;
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let public = match literal.parse::<std::net::IpAddr>() {
        Ok(ip) => crate::jose::fetch::is_allowed(ip, false),
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            let local = name == "localhost"
                || name.ends_with(".localhost")
                || name.ends_with(".internal")
                || name.ends_with(".local")
                || !name.contains('.');
            !local
        }
    };
    // Another parser (RFC 3986's) reads a backslash differently from a browser's: only text
    // both read alike is kept as written.
    let as_written = raw.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    public.then(|| {
        if as_written {
            raw.to_owned()
        } else {
            url.to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn skill(id: &str, description: &str) -> Value {
        json!({"id": id, "name": "n", "description": description, "tags": ["t"]})
    }

    #[test]
    fn what_a_browser_or_a_log_would_misread_is_left_out_and_named() {
        let card = json!({
            "name": "evil\n2026-01-01T00:00:00Z  INFO forged",
            "description": "fine \u{202e}reversed\u{9b}",
            "version": "<b>1</b>",
            "provider": {"organization": "Acme", "url": "http://169.254.169.254/latest"},
            "documentationUrl": "javascript:alert(1)",
            "iconUrl": "data:image/svg+xml,<svg/>",
            "defaultInputModes": ["text/plain", "not a type", "<x>"],
            "skills": [
                skill("a", "<script>alert(1)</script>"),
                skill("b", "kept"),
                skill("b", "a second b"),
                skill("ask", "peergate's own"),
                skill("c", "<\u{7f}img src=x onerror=alert(1)>"),
                skill("d", "<\u{200e}script>alert(1)</script>"),
            ],
        });
        let read = AgentDescription::of_card(&card);
        assert_eq!(
            read.name.as_deref(),
            Some("evil2026-01-01T00:00:00Z  INFO forged")
        );
        assert_eq!(read.description.as_deref(), Some("fine reversed"));
        assert_eq!(read.version, None);
        assert_eq!(read.provider, None);
        assert_eq!((read.documentation_url, read.icon_url), (None, None));
        assert_eq!(
            read.default_input_modes,
            Some(vec!["text/plain".to_owned()])
        );
        let skills = read.skills.unwrap();
        assert_eq!(skills.len(), 1);
        assert_eq!(skills[0]["id"], "b");
        assert_eq!(skills[0]["description"], "kept");
        for place in [
            "name",
            "description",
            "version: markup",
            "provider.url",
            "documentationUrl",
            "iconUrl",
            "skills[0].description: markup",
            "skills[2]: its id is taken",
            "skills[3]: its id is taken",
            "skills[4].description: markup",
            "skills[5].description: markup",
        ] {
            assert!(
                read.left_out.iter().any(|l| l.starts_with(place)),
                "{place}: {:?}",
                read.left_out
            );
        }
    }

    #[test]
    fn public_links_are_kept_as_a_browser_writes_them() {
        let link = |raw| public_link(raw);
        assert_eq!(
            link("https://agent.example.com/docs").as_deref(),
            Some("https://agent.example.com/docs")
        );
        assert_eq!(
            link("https://BÜCHER.example/a b").as_deref(),
            Some("https://xn--bcher-kva.example/a%20b")
        );
        assert_eq!(
            link("https://public.example\\@127.0.0.1/").as_deref(),
            Some("https://public.example/@127.0.0.1/"),
            "written as a browser reads it, not as written"
        );
        for refused in [
            "http://localhost/x",
            "https://metadata.google.internal/",
            "https://user:pass@agent.example.com/",
            "https://[::1]/",
            "http://10.0.0.1/",
            "http://0xA9FEA9FE/",
            "ftp://agent.example.com/",
            "https://intranet/",
        ] {
            assert_eq!(link(refused), None, "{refused}");
        }
    }

    #[test]
    fn the_skills_fit_their_bound_and_budget() {
        let many: Vec<Value> = (0..100).map(|i| skill(&format!("s{i}"), "d")).collect();
        let read = AgentDescription::of_card(&json!({"skills": many}));
        assert_eq!(read.skills.unwrap().len(), MAX_SKILLS);
        let long = "x".repeat(1900);
        let heavy: Vec<Value> = (0..60).map(|i| skill(&format!("s{i}"), &long)).collect();
        let read = AgentDescription::of_card(&json!({"skills": heavy}));
        let skills = read.skills.unwrap();
        assert!(serde_json::to_vec(&skills).unwrap().len() <= SKILLS_BUDGET);
        assert!(skills.len() < 60);
        assert!(read.left_out.iter().any(|l| l.contains("bytes")));
    }
}
