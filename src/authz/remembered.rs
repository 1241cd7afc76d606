//! Decisions remembered: a Cedar decision is a pure function of what the policies read of a
//! call, so the same facts get the same decision without evaluating the policies again (a
//! decision costs some 100 µs with fifty policies, a remembered one a lookup). The key is the
//! facts themselves, byte for byte (never a hash that two calls could share): the peer as it
//! signed in, the operation, and each fact of the context and resource that some policy names.
//! A fact no policy names cannot change a decision and is left out, so GetTask calls on
//! different tasks share a decision when no policy reads the resource.
//!
//! What a policy names is read from its text, conservatively: a context member counts as read
//! when its name appears anywhere in a policy (a comment or an id too), the whole context when
//! `context` is used other than by `.`, `[` or `has`, the resource when a policy constrains it
//! in its scope or names it in a condition.

use super::Decision;
use super::ask::CallAsk;
use cedar_policy::{PolicySet, ResourceConstraint};

/// The most decisions remembered per policy set.
const REMEMBERED: u64 = 100_000;

/// The context's members, as the schema names them.
const MEMBERS: [&str; 9] = [
    "now",
    "hour",
    "weekday",
    "client",
    "binding",
    "messageSize",
    "partKinds",
    "mediaTypes",
    "extensions",
];

/// Which facts of a call some policy reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// By [`MEMBERS`]' order.
    members: [bool; MEMBERS.len()],
    resource: bool,
}

impl Reads {
    /// What `policies` read, from their text.
    pub(crate) fn of(policies: &PolicySet) -> Self {
        let mut reads = Self::default();
        for policy in policies.policies() {
            let text = policy.to_string();
            let whole_context = words(&text, "context").any(|after| {
                !(after.starts_with('.') || after.starts_with('[') || after.starts_with("has"))
            });
            for (read, member) in reads.members.iter_mut().zip(MEMBERS) {
                *read |= whole_context || words(&text, member).next().is_some();
            }
            reads.resource |= !matches!(policy.resource_constraint(), ResourceConstraint::Any)
                || words(&text, "resource").count() > 1;
        }
        reads
    }

    /// Whether the context member `member` is read.
    #[cfg(test)]
    pub(crate) fn member(&self, member: &str) -> bool {
        MEMBERS
            .iter()
            .position(|m| *m == member)
            .is_none_or(|at| self.members[at])
    }

    /// Whether the resource (task and conversation ids) is read.
    #[cfg(test)]
    pub(crate) fn resource(&self) -> bool {
        self.resource
    }

    /// The key of `ask`'s decision: every fact read, each length-prefixed.
    pub(crate) fn key(&self, ask: &CallAsk<'_>) -> Vec<u8> {
        let mut key = Key(Vec::with_capacity(256));
        let peer = &ask.peer;
        for text in [
            peer.id,
            peer.name,
            peer.owner_id,
            peer.scheme,
            ask.operation,
        ] {
            key.text(text);
        }
        for text in [peer.issuer, peer.subject] {
            key.text(text.unwrap_or("\u{0}"));
        }
        key.list(peer.scopes.unwrap_or(&["\u{0}"]).iter().copied());
        for (claim, values) in peer.claims {
            key.text(claim);
            key.list(values.iter().map(|v| &**v));
        }
        if self.resource {
            key.text(ask.task.unwrap_or("\u{0}"));
            key.text(ask.context.unwrap_or("\u{0}"));
        }
        self.context_key(ask, &mut key);
        key.0
    }

    fn context_key(&self, ask: &CallAsk<'_>, key: &mut Key) {
        let utc = jiff::tz::TimeZone::UTC.to_datetime(ask.now);
        let [
            now,
            hour,
            weekday,
            client,
            binding,
            size,
            kinds,
            media,
            extensions,
        ] = self.members;
        if now {
            key.0.extend(ask.now.as_millisecond().to_le_bytes());
        }
        if hour || weekday {
            key.0
                .extend([utc.hour() as u8, utc.weekday().to_monday_one_offset() as u8]);
        }
        if client {
            key.text(&ask.client.map_or_else(String::new, |ip| ip.to_string()));
        }
        if binding {
            key.text(ask.binding);
        }
        if size {
            key.0.extend(ask.message_size.to_le_bytes());
        }
        if kinds {
            key.list(ask.part_kinds.iter().copied());
        }
        if media {
            key.list(ask.media_types.iter().copied());
        }
        if extensions {
            key.list(ask.extensions.iter().map(String::as_str));
        }
    }
}

/// A key being written.
struct Key(Vec<u8>);

impl Key {
    fn text(&mut self, text: &str) {
        self.0.extend((text.len() as u32).to_le_bytes());
        self.0.extend(text.as_bytes());
    }

    fn list<'a>(&mut self, items: impl Iterator<Item = &'a str>) {
        let mut count = 0u32;
        for item in items {
            self.text(item);
            count += 1;
        }
        self.0.extend(count.to_le_bytes());
    }
}

/// What follows each occurrence of `word` in `text` as a whole identifier (trimmed).
fn words<'t>(text: &'t str, word: &'t str) -> impl Iterator<Item = &'t str> + 't {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back();
        let after = &text[at + word.len()..];
        let bounded = !before.is_some_and(is_ident) && !after.chars().next().is_some_and(is_ident);
        bounded.then(|| after.trim_start())
    })
}

/// The decisions remembered for one policy set.
#[derive(Debug)]
pub(crate) struct Remembered {
    decisions: moka::sync::Cache<Vec<u8>, Decision>,
}

impl Remembered {
    pub(crate) fn new() -> Self {
        Self {
            decisions: moka::sync::Cache::new(REMEMBERED),
        }
    }

    /// The decision remembered under `key`.
    pub(crate) fn get(&self, key: &Vec<u8>) -> Option<Decision> {
        self.decisions.get(key)
    }

    /// Remembers `decision` under `key`.
    pub(crate) fn keep(&self, key: Vec<u8>, decision: Decision) {
        self.decisions.insert(key, decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn reads(text: &str) -> Reads {
        Reads::of(&PolicySet::from_str(text).unwrap())
    }

    #[test]
    fn only_the_facts_a_policy_names_are_read() {
        let none = reads("permit (principal, action, resource);");
        assert!(!none.member("hour") && !none.member("client") && !none.resource());
        let some = reads(
            "permit (principal, action, resource) when { context.hour < 9 && context has client };",
        );
        assert!(some.member("hour") && some.member("client"));
        assert!(!some.member("partKinds") && !some.resource());
        let indexed =
            reads(r#"permit (principal, action, resource) when { context["binding"] == "GRPC" };"#);
        assert!(indexed.member("binding") && !indexed.member("hour"));
        let scoped = reads(r#"permit (principal, action, resource in Peergate::Context::"c");"#);
        assert!(scoped.resource());
        let named =
            reads(r#"permit (principal, action, resource) when { resource is Peergate::Task };"#);
        assert!(named.resource());
        // `hourly` is not `hour`.
        let longer = reads(r#"@id("hourly") permit (principal, action, resource);"#);
        assert!(!longer.member("hour"));
    }

    #[test]
    fn the_whole_context_used_as_a_value_reads_every_member() {
        let whole = reads(r#"permit (principal, action, resource) when { context == {"a": 1} };"#);
        assert!(MEMBERS.iter().all(|member| whole.member(member)));
    }
}
